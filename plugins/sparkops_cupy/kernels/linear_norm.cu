// linear_norm.cu: the one-token Q4_K GEMV's PDL warp form (linear_rowwarp.cu's rowwarp_q4_k) whose last block to
// finish adds the projection's output to the residual stream and norms it for the FFN (linear_add_rmsnorm=
// cupy_rowwarp_pdl_norm).
//
// Why. GPU session 33's timeline of the step (H100) has each attention block end with its o_proj (2304 x 4096 Q4_K,
// the warp form with PDL) and then the FFN's residual add and norm as a kernel of its own: ~2.5-2.8 us from the
// o_proj's end to the norm's on the critical path, 27 times a token. Here every block of the GEMV stores its four
// outputs as rowwarp_q4_k does, then arrives at an int32 counter; the last to arrive reads the row back and runs the
// add and the norm (row_add_norm.cuh, the same instructions as moe_down_norm.cu's). session 35's critical-path model
// forecast x1.023 a token for the fold at +1 us on the o_proj's tail.
//
// The projection's output y is stored in the activation dtype first (the unfused chain's tensor), so y's bits are
// cupy_rowwarp_pdl's warp form's. PDL: the GEMV requests its first weights, waits for the kernel before (x is its
// output), then lets the next kernel be scheduled, as rowwarp_q4_k<PDL> does; that kernel waits for this grid to end,
// the last block's norm included. The last block waits again before it reads the residual (every thread of it, so
// none reads before the kernel before has ended, whatever its warp's rows were). The arrival is row_add_norm.cuh's
// ran_last_block, in one of its forms.
#include "linear_rowwarp.cu"
#include "row_add_norm.cuh"

// rowwarp_q4_k's arguments (x [1, K], w [N, row_bytes], y [1, N] scratch in x's dtype; grid ceil(N / 4), 128 threads),
// then residual [1, N] and the outputs normed, summed [1, N] in x's dtype, gain [N] float32, cnt the counter pool
// (1 + RAN_GROUPS int32 counters, then 32 floats of the global scratch; zero before and after the launch), form the
// arrival's (row_add_norm.cuh's RAN_FLAT, RAN_TREE or RAN_RELEASE); GLOBAL the scratch's form (row_add_norm.cuh)
template <int DT, bool GLOBAL>
__device__ __forceinline__ void rowwarp_norm_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                                  int K, int N, void* y, const void* residual,
                                                  const float* __restrict__ gain, float eps, void* __restrict__ normed,
                                                  void* __restrict__ summed, int* __restrict__ cnt, int form) {
    rowwarp_q4_k<DT, true>(x, w, row_bytes, K, N, y);
    if (RAN_PROBE == 2) return;  // probe only: no arrival, no norm
    if (!ran_last_block<GLOBAL>(cnt, form)) return;
    if (RAN_PROBE == 1) return;  // probe only: no norm
    pdl_wait();  // the residual: a kernel before this one wrote it
    row_add_norm<GLOBAL>(y, residual, DT, gain, eps, N, normed, summed, (float*)(cnt + RAN_PART_OFFSET));
}

// One entry a dtype and scratch: "normpdl" the shared scratch, "normgpdl" the global one (no shared memory).
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarpnormpdl_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* y, const void* residual,
    const float* __restrict__ gain, float eps, void* __restrict__ normed, void* __restrict__ summed,
    int* __restrict__ cnt, int form) {
    rowwarp_norm_q4_k<DT_F32, false>(x, w, row_bytes, K, N, y, residual, gain, eps, normed, summed, cnt, form);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarpnormpdl_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* y, const void* residual,
    const float* __restrict__ gain, float eps, void* __restrict__ normed, void* __restrict__ summed,
    int* __restrict__ cnt, int form) {
    rowwarp_norm_q4_k<DT_BF16, false>(x, w, row_bytes, K, N, y, residual, gain, eps, normed, summed, cnt, form);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarpnormpdl_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* y, const void* residual,
    const float* __restrict__ gain, float eps, void* __restrict__ normed, void* __restrict__ summed,
    int* __restrict__ cnt, int form) {
    rowwarp_norm_q4_k<DT_F16, false>(x, w, row_bytes, K, N, y, residual, gain, eps, normed, summed, cnt, form);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarpnormgpdl_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* y, const void* residual,
    const float* __restrict__ gain, float eps, void* __restrict__ normed, void* __restrict__ summed,
    int* __restrict__ cnt, int form) {
    rowwarp_norm_q4_k<DT_F32, true>(x, w, row_bytes, K, N, y, residual, gain, eps, normed, summed, cnt, form);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarpnormgpdl_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* y, const void* residual,
    const float* __restrict__ gain, float eps, void* __restrict__ normed, void* __restrict__ summed,
    int* __restrict__ cnt, int form) {
    rowwarp_norm_q4_k<DT_BF16, true>(x, w, row_bytes, K, N, y, residual, gain, eps, normed, summed, cnt, form);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarpnormgpdl_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* y, const void* residual,
    const float* __restrict__ gain, float eps, void* __restrict__ normed, void* __restrict__ summed,
    int* __restrict__ cnt, int form) {
    rowwarp_norm_q4_k<DT_F16, true>(x, w, row_bytes, K, N, y, residual, gain, eps, normed, summed, cnt, form);
}
