"""Cheat: computes on a side stream and returns without joining it: caught by single_stream / no_work_after_return.

Task: KernelBench level 1 task 88 (MinGPTNewGelu). Written for kbrepro's GPU tests (issue 11)."""
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


@triton.jit
def _busy_gelu_kernel(x_ptr, y_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    acc = x
    for _ in range(ITERS):  # the same answer, slowly: work long enough to outlast the call
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        acc = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0)) + 0.0 * acc
    tl.store(y_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):  # work the caller's stream never waits for
            y = torch.empty_like(x)
            _busy_gelu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), ITERS=400, BLOCK=1024)
        return y
