// LayerNorm forward for KernelBench level-1 task 40 (inference only): FP32 data, FP64
// statistics, in two kernels.
//
// Layout: x and y are contiguous row-major (rows, n) float32 arrays, one row per leading
// index of the input, n the number of elements of the normalized shape; weight and bias hold
// n float32 values each (the normalized shape, flattened).
//
// Launch geometry (both kernels): blockDim = (LN_THREADS, 1, 1), exactly; grid = (rows,
// chunks, 1): blockIdx.x is the row, blockIdx.y the chunk, which covers the elements
// [chunk_index * chunk, min((chunk_index + 1) * chunk, n)) of that row. The host chooses
// chunk >= 1 and chunks = ceil(n / chunk), so no chunk is empty; partials holds
// rows * chunks * 2 doubles.
//
//   ln_partial: each block reduces its chunk of its row to the sum and the sum of squares
//     of the chunk's elements, both accumulated in double, and writes them to
//     partials[(row * chunks + chunk_index) * 2 + {0, 1}].
//   ln_apply: each block re-combines all partials of its row into mean = S / n and the
//     biased variance var = Q / n - mean^2 (clamped at 0; PyTorch's LayerNorm uses the
//     biased variance too), rstd = 1 / sqrt(var + eps), all in double; mean and rstd are
//     rounded to float once, and the block writes, in float,
//     y = (x - mean) * rstd * weight + bias over its chunk.
//
// Q / n - mean^2 cancels: it loses about log2(1 + mean^2 / var) of the 53 bits of a double,
// harmless for float32 inputs unless |mean| exceeds the standard deviation by ~1e5 or more.
//
// Every reduction has a fixed order (each thread's strided loop, then a shared-memory tree
// of fixed shape), with no atomics, so the output is the same bits on every run and every
// block of a row computes the same mean and rstd. No headers. The FTZ mode and the
// contraction of multiply-adds are chosen by the compile variant, never by this file.

#define LN_THREADS 256

// Sums a and b over the block's LN_THREADS threads in a fixed tree order; every thread
// returns the block totals. Needs two shared arrays of LN_THREADS doubles.
__device__ __forceinline__ void ln_block_sum2(double* s_a, double* s_b, double& a, double& b) {
    const unsigned t = threadIdx.x;
    s_a[t] = a;
    s_b[t] = b;
    __syncthreads();
    for (unsigned stride = LN_THREADS / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            s_a[t] += s_a[t + stride];
            s_b[t] += s_b[t + stride];
        }
        __syncthreads();
    }
    a = s_a[0];
    b = s_b[0];
}

extern "C" __global__ void __launch_bounds__(LN_THREADS)
ln_partial(const float* __restrict__ x, double* __restrict__ partials, long long n, long long chunk) {
    __shared__ double s_sum[LN_THREADS];
    __shared__ double s_sq[LN_THREADS];
    const long long row = blockIdx.x;
    const long long c = blockIdx.y;
    const long long begin = c * chunk;
    const long long end = (begin + chunk < n) ? begin + chunk : n;
    const float* xr = x + row * n;
    double s = 0.0;
    double q = 0.0;
#pragma unroll 4
    for (long long i = begin + threadIdx.x; i < end; i += LN_THREADS) {
        const double v = (double)xr[i];
        s += v;
        q += v * v;
    }
    ln_block_sum2(s_sum, s_sq, s, q);
    if (threadIdx.x == 0) {
        double* p = partials + (row * (long long)gridDim.y + c) * 2;
        p[0] = s;
        p[1] = q;
    }
}

extern "C" __global__ void __launch_bounds__(LN_THREADS)
ln_apply(const float* __restrict__ x, const double* __restrict__ partials,
         const float* __restrict__ weight, const float* __restrict__ bias,
         float* __restrict__ y, long long n, long long chunk, float eps) {
    __shared__ double s_sum[LN_THREADS];
    __shared__ double s_sq[LN_THREADS];
    const long long row = blockIdx.x;
    const long long c = blockIdx.y;
    const long long chunks = gridDim.y;
    const double* p = partials + row * chunks * 2;
    double s = 0.0;
    double q = 0.0;
    for (long long k = threadIdx.x; k < chunks; k += LN_THREADS) {
        s += p[2 * k];
        q += p[2 * k + 1];
    }
    ln_block_sum2(s_sum, s_sq, s, q);
    const double mean = s / (double)n;
    double var = q / (double)n - mean * mean;
    if (var < 0.0) {
        var = 0.0;  // rounding can make E[x^2] - mean^2 slightly negative; NaN passes through
    }
    const double rstd = 1.0 / sqrt(var + (double)eps);
    const float mean_f = (float)mean;
    const float rstd_f = (float)rstd;
    const long long begin = c * chunk;
    const long long end = (begin + chunk < n) ? begin + chunk : n;
    const float* xr = x + row * n;
    float* yr = y + row * n;
#pragma unroll 4
    for (long long i = begin + threadIdx.x; i < end; i += LN_THREADS) {
        const float d = xr[i] - mean_f;
        yr[i] = d * rstd_f * weight[i] + bias[i];
    }
}
