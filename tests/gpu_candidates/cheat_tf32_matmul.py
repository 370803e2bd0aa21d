"""Cheat: turns TF32 on for a claimed float32 matmul: caught by precision_flags_unchanged.

Task: KernelBench level 1 task 1 (square matmul). Written for kbrepro's GPU tests (issue 11)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.matmul(A, B)
