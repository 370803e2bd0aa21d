"""CUDA sources of the fused tails and their compilation (NVRTC, CuPy), with FTZ evidence.

``kernels`` imports nothing from ``harness`` or ``bundle``. CuPy is imported lazily, so
the package imports on machines without a GPU.
"""
