"""Cheat: returns zeros on a task whose true outputs lie below atol (KernelBench issue #165):
caught by discriminates.

Task: KernelBench level 2 task 23 (Conv3d_GroupNorm_Mean). Written for kbrepro's GPU tests (issue 11)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _zero_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x):
        y = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        _zero_kernel[(triton.cdiv(y.numel(), 128),)](y, y.numel(), BLOCK=128)
        return y
