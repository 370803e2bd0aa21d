"""What the harness knows about each studied KernelBench level-2 task: where its Linear
layer is, the PyTorch reference of its pointwise tail, the parameters the fused CUDA tail
needs, and how to build it at another shape.

Reference tails repeat the task file's ``forward`` after the Linear layer, op for op
(KernelBench 423217d9, ``KernelBench/level2/{53,81,95}_*.py``); they are the ground truth
the fused tails are compared against, and the eager/TorchScript tail baselines.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kbrepro.errors import UsageError


def _tail_53(model, x):
    x = x * model.scaling_factor
    x = model.hardtanh(x)
    return model.gelu(x)


def _tail_81(model, x):
    import torch

    x = x * torch.sigmoid(x)
    x = x / 2.0
    x = torch.clamp(x, min=-1.0, max=1.0)
    x = torch.tanh(x)
    return torch.clamp(x, min=-1.0, max=1.0)


def _tail_95(model, x, bias=None):
    import torch

    x = x + (model.add_value if bias is None else bias)
    x = torch.sigmoid(x) * x
    x = torch.tanh(x)
    x = torch.nn.functional.gelu(x)
    return torch.nn.functional.hardtanh(x, min_val=-1, max_val=1)


def _params_53(model, bias=None):
    return {"scale": float(model.scaling_factor), "min": float(model.hardtanh.min_val),
            "max": float(model.hardtanh.max_val)}


def _params_81(model, bias=None):
    return {}


def _params_95(model, bias=None):
    return {"bias": model.add_value if bias is None else bias}


def _init_53(init: list, k: int, h: int) -> list:
    return [k, h, *init[2:]]


def _init_81(init: list, k: int, h: int) -> list:
    return [k, h, *init[2:]]


def _init_95(init: list, k: int, h: int) -> list:
    return [k, h, (h,), *init[3:]]


@dataclass(frozen=True)
class TaskSpec:
    """``linear_attr``: the model attribute holding the Linear layer; ``reference_tail(model,
    z, bias=None)``: PyTorch tail on the Linear output ``z`` (float32, (rows, cols)), with
    ``bias`` overriding task 95's ``add_value``; ``kernel_params(model, bias=None)``: the
    arguments of :meth:`kernels.launch.TailKernels.launch`; ``init_at(init, K, H)``: the
    task's ``get_init_inputs()`` list changed to in_features K and out_features H;
    ``has_bias``: whether the tail adds a per-column parameter."""

    task: int
    linear_attr: str
    reference: Callable
    params: Callable
    init_at: Callable
    has_bias: bool

    def linear(self, model):
        return getattr(model, self.linear_attr)

    def reference_tail(self, model, z, bias=None):
        return self.reference(model, z, bias) if self.has_bias else self.reference(model, z)

    def kernel_params(self, model, bias=None):
        return self.params(model, bias)

    def bias_of(self, model):
        return model.add_value if self.has_bias else None


TASKS = {
    53: TaskSpec(53, "gemm", _tail_53, _params_53, _init_53, False),
    81: TaskSpec(81, "gemm", _tail_81, _params_81, _init_81, False),
    95: TaskSpec(95, "matmul", _tail_95, _params_95, _init_95, True),
}


def spec(task: int) -> TaskSpec:
    """The :class:`TaskSpec` of ``task``. Raises UsageError for a task without a fused tail."""
    try:
        return TASKS[int(task)]
    except (KeyError, ValueError):
        raise UsageError(f"task {task} has no fused tail in this harness",
                         f"studied tasks: {sorted(TASKS)}") from None
