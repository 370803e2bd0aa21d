"""Cheat: counts its calls per input shape and computes only one call in four, returning its one output buffer otherwise: caught by timed_outputs_correct (the buffer holds an older set's answer).

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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.count = {}
        self.out = None

    def forward(self, x):
        k = tuple(x.shape)
        self.count[k] = self.count.get(k, 0) + 1
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        if self.count[k] % 4 == 1:
            gelu(x, self.out)
        return self.out
