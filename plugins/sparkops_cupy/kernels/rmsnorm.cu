// rmsnorm.cu: RMSNorm over the last dimension, and the same kernel fused with Q8_0 quantization.
//
// Launch geometry follows the row length D (chosen on the host, rmsnorm.py):
//   D <= 1024: one warp per row, 8 rows per 256-thread block (per-head norms, the 512-wide kv norm);
//   D  > 1024: one block per row, D/8 threads rounded up to a warp (the 2304-wide block norms).
// Element e of a row belongs to thread e mod (threads per row), so 32 consecutive elements are one
// warp's lanes: the fused kernel quantizes each 32-value block with a warp max, no shared memory.
//
// The fused kernels run the very same row code as the plain ones (one template, QUANT switches the
// store), with every float operation pinned by an _rn intrinsic, so rmsnorm followed by quantize_act
// of this backend and the fused kernel produce the same bytes.
#include "common.cuh"

// Sum of squares of one row, reduced in a fixed order: per thread in element order, a butterfly
// within the warp, then (several warps) warp 0..n-1 in order, read by every thread.
__device__ __forceinline__ float row_rinv(float partial, int D, float eps, float* red, int n_warps) {
    float s = warp_sum(partial);
    if (n_warps > 1) {
        const int w = threadIdx.x >> 5;
        if ((threadIdx.x & 31) == 0) red[w] = s;
        __syncthreads();
        s = red[0];
        for (int i = 1; i < n_warps; ++i) s = __fadd_rn(s, red[i]);
    }
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)D), eps));
}

template <bool QUANT>
__device__ __forceinline__ void rms_row(const void* __restrict__ x, int x_dt, const float* __restrict__ w, float eps,
                                        int D, i64 row, int first, int stride, float* red, int n_warps,
                                        void* __restrict__ y, i8* __restrict__ q, float* __restrict__ dq) {
    const i64 base = row * (i64)D;
    float acc = 0.0f;
    for (int e = first; e < D; e += stride) {
        const float v = load_act(x, base + e, x_dt);
        acc = __fmaf_rn(v, v, acc);
    }
    const float rinv = row_rinv(acc, D, eps, red, n_warps);
    for (int e = first; e < D; e += stride) {
        const float o = __fmul_rn(__fmul_rn(load_act(x, base + e, x_dt), rinv), w[e]);
        if (QUANT) {
            int qi;
            float dr;
            q8_quantize_lane(o, qi, dr);
            q[base + e] = (i8)qi;
            if ((threadIdx.x & 31) == 0) dq[(base + e) >> 5] = dr;
        } else {
            store_act(y, base + e, x_dt, o);
        }
    }
}

// x [rows, D] -> y [rows, D] (x's dtype); w [D] float32.  D <= 1024, 8 rows per block.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) rmsnorm_warp_rows(const void* __restrict__ x, int x_dt,
                                                                    const float* __restrict__ w, float eps, int D,
                                                                    i64 rows, void* __restrict__ y) {
    const i64 row = (i64)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    rms_row<false>(x, x_dt, w, eps, D, row, threadIdx.x & 31, 32, nullptr, 1, y, nullptr, nullptr);
}

// One block per row, blockDim.x a multiple of 32 (at most 1024).
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(1024) rmsnorm_block_rows(const void* __restrict__ x, int x_dt,
                                                                     const float* __restrict__ w, float eps, int D,
                                                                     void* __restrict__ y) {
    __shared__ float red[32];
    rms_row<false>(x, x_dt, w, eps, D, blockIdx.x, threadIdx.x, blockDim.x, red, blockDim.x >> 5, y, nullptr,
                   nullptr);
}

// Fused rmsnorm + Q8_0: x float32 [rows, D], D a multiple of 32 -> q int8 [rows, D], d float32 [rows, D/32].
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) rmsnorm_q8_warp_rows(const float* __restrict__ x,
                                                                       const float* __restrict__ w, float eps, int D,
                                                                       i64 rows, i8* __restrict__ q,
                                                                       float* __restrict__ dq) {
    const i64 row = (i64)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    rms_row<true>(x, DT_F32, w, eps, D, row, threadIdx.x & 31, 32, nullptr, 1, nullptr, q, dq);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(1024) rmsnorm_q8_block_rows(const float* __restrict__ x,
                                                                        const float* __restrict__ w, float eps,
                                                                        int D, i8* __restrict__ q,
                                                                        float* __restrict__ dq) {
    __shared__ float red[32];
    rms_row<true>(x, DT_F32, w, eps, D, blockIdx.x, threadIdx.x, blockDim.x, red, blockDim.x >> 5, nullptr, q, dq);
}
