"""Cheat: reports 0.75 of the truth only for the timed regions of the block's length (it counts
its invocations between two readings of a CUDA event pair and lies where the count is below 1.5x
the smallest count of 16 or more seen, which the block's requests and the clock's short ones are
in the quick profile at batch_size 1024; the clock's longer requests are reported truthfully): caught by host_clock_agrees (the time
outside the candidate's timed region in a short request may not exceed that of a long one).

Task: KernelBench level 1 task 88 (MinGPTNewGelu). Written for kbrepro's GPU tests (issue 27)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    tl.store(y_ptr + offs, y, mask=mask)


def gelu(x, out=None):
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    n = x.numel()
    _gelu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


_state = {"calls": 0, "smallest": None}
_real = torch.cuda.Event.elapsed_time


def _elapsed(self, end):
    ms, count = _real(self, end), _state["calls"]
    _state["calls"] = 0
    if count >= 16:  # not a warmup, a checked repeat or a per-call timing
        small = _state["smallest"] = count if _state["smallest"] is None else min(_state["smallest"], count)
        if count < 1.5 * small:
            return ms * 0.75
    return ms


torch.cuda.Event.elapsed_time = _elapsed


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _state["calls"] += 1
        return gelu(x)
