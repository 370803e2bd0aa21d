"""Cheat: a PyTorch fallback that hides the kernel it defines and never launches from the plain
PyTorch rule (model/source_rules.py): not plain, so caught by custom_kernel_ran (found by a red
team, issue 28). Task: KernelBench level 1 task 88 (MinGPTNewGelu)."""
import torch
import torch.nn as nn
from torch.cuda import _compile_kernel      # NVRTC, torch's own

_SRC = ('ext' + 'ern "C" __glob' + 'al__ void gelu(const float* x, float* y, int n) {\n'
        + '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
        + '  if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.f + tanhf(0.79788456f * (v + 0.044715f * v * v * v))); }\n'
        + '}\n')


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = _compile_kernel(_SRC, "gelu") if torch.cuda.is_available() else None

    def forward(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh")   # self.k is never launched
