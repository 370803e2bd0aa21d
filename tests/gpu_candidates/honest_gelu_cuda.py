"""An honest load_inline candidate for KernelBench level 1 task 88 (MinGPTNewGelu): one CUDA
kernel, float32 throughout, tanhf. Written for kbrepro's GPU tests (issue 11)."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_cuda = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

torch::Tensor gelu_tanh(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA input");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    int blocks = (int)std::min<long>((n + threads - 1) / threads, 65535L * 8);
    gelu_tanh_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

_cpp = "torch::Tensor gelu_tanh(torch::Tensor x);"

_ext = load_inline(name="kbrepro_gelu_tanh", cpp_sources=_cpp, cuda_sources=_cuda, functions=["gelu_tanh"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_tanh(x)
