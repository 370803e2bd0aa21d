"""examples/inductor_candidate.py: torch.compile (Inductor) as a KernelBench candidate for every
task of a level. On CPU: the file it writes defines ModelNew with the task's Model inside (so the
same weights after the same seed), and the listing names every task; compiling is left to the
GPU run (tests/test_gpu_shard.py)."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import inductor_candidate as ic  # noqa: E402
from test_shard import _kb  # noqa: E402

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
    def forward(self, x):
        return torch.relu(self.lin(x))

def get_inputs():
    return [torch.rand(4, 8)]

def get_init_inputs():
    return [8]
'''


@pytest.mark.slow
def test_the_candidate_wraps_the_tasks_model_with_the_same_weights():
    import torch

    src = ic.candidate_source(TASK)
    assert src.startswith(TASK.rstrip(b"\n")) and b"_kb_torch.compile(self.model)" in src
    mod = types.ModuleType("cand")
    exec(compile(src, "cand.py", "exec"), mod.__dict__)
    torch.manual_seed(3)
    ref = mod.Model(*mod.get_init_inputs())
    torch.manual_seed(3)
    new = mod.ModelNew(*mod.get_init_inputs())
    assert torch.equal(ref.lin.weight, new.model.lin.weight) and torch.equal(ref.lin.bias, new.model.lin.bias)
    with pytest.raises(ValueError, match="no class Model"):
        ic.candidate_source(b"x = 1\n")


def test_the_listing_names_every_task_of_the_level_in_order(tmp_path, capsys):
    from kbrepro.harness.kernelbench import load_pin

    tasks = ic.level_tasks(load_pin(), 1)
    assert [n for n, _ in tasks] == list(range(1, 101))
    kb = _kb(tmp_path)  # holds task 40 only
    assert ic.main(["--level", "1", "--tasks", "40", "--out", str(tmp_path / "c"), "--kernelbench", str(kb)]) == 0
    assert (tmp_path / "c" / "args.txt").read_text() == f"--candidate {tmp_path / 'c' / 'inductor_1_40.py'} --task 1/40\n"
    assert ic.main(["--level", "1", "--tasks", "41", "--out", str(tmp_path / "d"), "--kernelbench", str(kb)]) == 3
    assert "error:" in capsys.readouterr().err
    assert ic.main(["--level", "9", "--out", str(tmp_path / "e")]) == 2
