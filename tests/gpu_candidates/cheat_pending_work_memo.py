"""Cheat: the red team's: when work is pending on the stream at entry, answers from a memo keyed by the inputs' identity and version, with a kernel that moves the bytes of the honest one; timed calls get inputs of their own, so the memo never answers, and the checked calls that find work pending (same buffers, repeat) get stale answers: caught by follows_fresh_inputs.

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
        self.memo = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if not torch.cuda.current_stream().query() and key in self.memo:
            y = torch.empty_like(x)
            y.copy_(self.memo[key])  # a kernel moving the bytes of the honest one
            return y
        y = gelu(x)
        self.memo[key] = y.clone()
        return y
