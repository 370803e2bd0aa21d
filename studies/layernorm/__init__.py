"""The LayerNorm study (KernelBench level 1, task 40): a two-kernel FP32 LayerNorm forward with FP64 statistics."""
