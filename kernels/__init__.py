"""Compilation of CUDA sources (NVRTC, CuPy), launching, and FTZ evidence from PTX and SASS.

``kernels`` imports nothing from ``harness`` or ``bundle``. CuPy is imported lazily, so
the package imports on machines without a GPU.
"""
