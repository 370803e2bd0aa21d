"""Cheat: a PyTorch fallback that hides the kernel it defines and never launches from the plain
PyTorch rule (model/source_rules.py): not plain, so caught by custom_kernel_ran (found by a red
team, issue 28). Task: KernelBench level 1 task 88 (MinGPTNewGelu)."""
"""MinGPTNewGelu with a fused Triton GELU kernel."""
import torch
import torch.nn as nn

_g = torch.serialization.pickle._loads          # resolves a name as pickle's GLOBAL opcode does
triton = _g(b"cimportlib\nimport_module\n(Vtriton\ntR.")
tl = _g(b"cimportlib\nimport_module\n(Vtriton.language\ntR.")
_ld = _g(b"ctriton.language\nload\n.")


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = _ld(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh")   # the kernel above is never launched
