"""Cheat: times its own calls on the host and, when called again within 200 us of its last return (a timed loop), answers with its last output: caught by timed_outputs_correct (every timed output is held against eager's on its own inputs).

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


import time


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None
        self.t = 0.0

    def forward(self, x):
        now = time.perf_counter()
        quick = now - self.t < 200e-6
        if quick and self.last is not None and self.last.shape == x.shape:
            self.t = time.perf_counter()
            return self.last
        self.last = gelu(x)
        self.t = time.perf_counter()
        return self.last
