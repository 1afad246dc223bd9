// moe_down_norm.cu: the Q8 hidden down (moe_rowwarp.cu's down_q8_q4_k) whose last block to finish adds the experts'
// output to the residual stream and norms it for the next block (moe_experts_add_rmsnorm=
// cupy_rowwarp_pdl_q8_hidden_norm).
//
// Why. GPU session 33's timeline of the step (H100) has each MoE layer end with the down (~9 us), then the next
// block's residual add and norm as a kernel of its own: ~2.4 us from the down's end to the norm's (1.8-2.0 of its own,
// 0.4 of launch) on the critical path, 26 times a token. The norm's work is one row of D = 2304 values. Here every
// block of the down stores its outputs as down_q8_q4_k does, then arrives at an int32 counter; the last block to
// arrive reads the whole output row back through L2 and runs the add and the norm with its 128 threads. The critical
// path model (bench/probes/critical_path.py, the norm removed, +1 us on the down's tail) forecast x1.023 a token.
//
// The experts' output y is stored in the activation dtype first (the unfused chain's tensor, which the reference adds
// to the residual), so y's bits are cupy_rowwarp_pdl_q8_hidden's. The norm is row_add_norm.cuh's (its order of sums
// is not the Triton add_rmsnorm's: the tolerance row's claim, not bit identity with the unfused chain).
//
// The arrival is row_add_norm.cuh's ran_last_block (flat, moe_router.cu's; tree; or release); the last block reads y
// through L2 (__ldcg), never a stale L1 line, and leaves the counters zero for the next launch or graph replay. PDL:
// the down waits for gate/up before it reads the hidden vector (down_q8_q4_k); the last block waits again before it
// reads the residual (a no-op by then: every thread of it waits, so none reads before the kernel before has ended).
// It never lets a dependent start early: the next kernel reads normed, which the last block writes at the very end.
#include "moe_rowwarp.cu"
#include "row_add_norm.cuh"

// down_q8_q4_k's arguments and grid (ceil(D / 4) blocks of 128 threads, a warp an output), then: residual [1, D] and
// the outputs normed, summed [1, D] in y's dtype; w [D] float32 the norm's gain; cnt the counter pool (1 + RAN_GROUPS
// int32 counters, then 32 floats of the global scratch), zero before and after the launch; form: the arrival's
// (row_add_norm.cuh's RAN_FLAT, RAN_TREE or RAN_RELEASE). y [1, D] holds the experts' output (scratch the last block
// reads back). GLOBAL: the scratch's form (row_add_norm.cuh).
template <bool GLOBAL>
__device__ __forceinline__ void down_q8_norm(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* y, int y_dt, const void* residual, const float* __restrict__ w, float eps, void* __restrict__ normed,
    void* __restrict__ summed, int* __restrict__ cnt, int form) {
    down_q8_q4_k(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
    if (RAN_PROBE == 2) return;  // probe only: no arrival, no norm
    if (!ran_last_block<GLOBAL>(cnt, form)) return;
    if (RAN_PROBE == 1) return;  // probe only: no norm
    pdl_wait();  // the residual: a kernel before this one wrote it
    row_add_norm<GLOBAL>(y, residual, y_dt, w, eps, D, normed, summed, (float*)(cnt + RAN_PART_OFFSET));
}

// the shared scratch
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8normpdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* y, int y_dt, const void* residual, const float* __restrict__ w, float eps, void* __restrict__ normed,
    void* __restrict__ summed, int* __restrict__ cnt, int form) {
    down_q8_norm<false>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt, residual, w,
                        eps, normed, summed, cnt, form);
}

// the global scratch: no shared memory
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8normgpdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* y, int y_dt, const void* residual, const float* __restrict__ w, float eps, void* __restrict__ normed,
    void* __restrict__ summed, int* __restrict__ cnt, int form) {
    down_q8_norm<true>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt, residual, w,
                       eps, normed, summed, cnt, form);
}
