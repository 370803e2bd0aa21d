// Fused FP32 pointwise tails for KernelBench level-2 tasks 53, 81 and 95 (inference only).
//
// Each kernel replaces the PyTorch ops that follow the task's Linear layer and keeps their
// formulas and evaluation order, so that bit identity with PyTorch is possible:
//   clamp (hardtanh, torch.clamp):  NaN passes through, else min(max(v, lo), hi)
//   sigmoid:                        1 / (1 + exp(-v))
//   GELU (erf form, approximate='none'): (v * 0.5) * (1 + erf(v * M_SQRT1_2))
// These follow ATen's CUDA kernels for clamp, sigmoid and GELU (PyTorch 2.x,
// aten/src/ATen/native/cuda: UnarySpecialOpsKernel.cu, ActivationGeluKernel.cu,
// TensorCompare.cu). Compile without fast-math and with --fmad=false so that no multiply-add
// is contracted; the FTZ mode is chosen by the compile variant, never by this file.
//
// Layout: x and y are contiguous row-major (rows, cols) float32 arrays of n = rows * cols
// elements; for task 95, bias holds cols float32 values added per column.

#define KB_SQRT1_2 0.70710678118654752440f

__device__ __forceinline__ float kb_clamp(float v, float lo, float hi) {
    return isnan(v) ? v : fminf(fmaxf(v, lo), hi);
}

__device__ __forceinline__ float kb_sigmoid(float v) {
    return 1.0f / (1.0f + expf(-v));
}

__device__ __forceinline__ float kb_gelu_erf(float v) {
    return (v * 0.5f) * (1.0f + erff(v * KB_SQRT1_2));
}

// Task 53: Gemm -> x * scale -> hardtanh(lo, hi) -> GELU.
extern "C" __global__ void fused_tail_53(const float* __restrict__ x, float* __restrict__ y,
                                         long long n, float scale, float lo, float hi) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = kb_gelu_erf(kb_clamp(x[i] * scale, lo, hi));
    }
}

// Task 81: Gemm -> swish (v * sigmoid(v)) -> / 2 -> clamp[-1, 1] -> tanh -> clamp[-1, 1].
extern "C" __global__ void fused_tail_81(const float* __restrict__ x, float* __restrict__ y,
                                         long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        v = v * kb_sigmoid(v);
        v = v / 2.0f;
        v = kb_clamp(v, -1.0f, 1.0f);
        v = tanhf(v);
        y[i] = kb_clamp(v, -1.0f, 1.0f);
    }
}

// Task 95: Matmul -> + bias[col] -> swish (sigmoid(v) * v) -> tanh -> GELU -> hardtanh[-1, 1].
extern "C" __global__ void fused_tail_95(const float* __restrict__ x,
                                         const float* __restrict__ bias,
                                         float* __restrict__ y, long long n, long long cols) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + bias[i % cols];
        v = kb_sigmoid(v) * v;
        v = tanhf(v);
        v = kb_gelu_erf(v);
        y[i] = kb_clamp(v, -1.0f, 1.0f);
    }
}
