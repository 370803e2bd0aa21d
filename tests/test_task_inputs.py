"""The verifier's reading of a task's inputs (model/task_inputs.py) against the harness's run of
the same task (harness/kbtask.py) at size overrides: the shapes and dtypes that ``get_inputs()``
gives agree, module globals derived from an overridden size included (issue 28: a sweep at
reduced sizes found ``bias_shape = (out_channels, 1, 1)`` and ``input_shape = (dim,)`` left at
their default sizes, so the reference itself raised)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kbrepro.harness import kbtask  # noqa: E402
from kbrepro.model import task_inputs as ti  # noqa: E402

DERIVED = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, out_channels, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))
    def forward(self, x, y):
        return x + self.bias.sum() + y.sum()

batch_size = 128
out_channels = 16
dim = 4096
bias_shape = (out_channels, 1, 1)
input_shape = (dim,)
half = dim // 2

def get_inputs():
    return [torch.rand(batch_size, out_channels, *input_shape), torch.randn(half)]

def get_init_inputs():
    return [out_channels, bias_shape]
'''


def _real_specs(task) -> list:
    with torch.device("meta"):
        torch.manual_seed(0)
        xs = task.get_inputs()
    return [ti.TensorSpec(str(x.dtype), tuple(x.shape)) if isinstance(x, torch.Tensor) else None for x in xs]


def test_globals_derived_from_an_overridden_size_follow_it_in_both_readings():
    sizes = {"out_channels": 4, "dim": 64}
    task = kbtask.load_task(DERIVED)
    kbtask.apply_overrides(task, sizes)
    assert task.bias_shape == (4, 1, 1) and task.input_shape == (64,) and task.half == 32
    assert list(ti.input_specs(DERIVED, sizes)) == _real_specs(task) == [
        ti.TensorSpec("torch.float32", (128, 4, 64)), ti.TensorSpec("torch.float32", (32,))]
    kbtask.apply_overrides(task, {"batch_size": 2})  # on top of the sizes set before
    assert (task.batch_size, task.out_channels, task.dim) == (2, 4, 64)
    assert list(ti.input_specs(DERIVED, {**sizes, "batch_size": 2})) == _real_specs(task)
    model = kbtask.build_model(task, task.Model, 0, "cpu")
    assert tuple(model.bias.shape) == (4, 1, 1)


def test_every_pinned_task_reads_as_it_runs_at_reduced_sizes():
    """Every task of levels 1 to 3 at the pin, with batch_size 2, every other integer size
    above 64 cut to 64 and every tuple-valued size with an entry above 64 cut to 64 there
    (``input_shape = (32768,)``): the rule gives what get_inputs() gives on the meta device, or
    says it cannot read the task (Undecidable), never another shape. Needs a KernelBench checkout."""
    from kbrepro.harness.kernelbench import resolve_checkout

    try:
        kb = resolve_checkout(None)
    except Exception as exc:
        pytest.skip(f"no KernelBench checkout: {exc}")
    files = sorted((kb / "KernelBench").glob("level[123]/*.py"))
    if len(files) < 250:
        pytest.skip(f"a KernelBench checkout without its tasks ({len(files)} files)")
    read = undecided = 0
    for f in files:
        src = f.read_bytes()
        sizes = ti.reduced_sizes(src)
        sizes.update({k: tuple(min(x, 64) for x in v) for k, v in ti.size_globals(src).items()
                      if type(v) is tuple and max(v) > 64})
        try:
            want = ti.input_specs(src, sizes)
        except ti.Undecidable:
            undecided += 1
            continue
        task = kbtask.load_task(src)
        try:
            kbtask.apply_overrides(task, sizes)
            got = _real_specs(task)
        except Exception:  # the task itself raises at these sizes (a usage error of the run)
            continue
        assert list(want) == got, (f.name, sizes)
        read += 1
    assert read > 200 and undecided < 10, (read, undecided)
