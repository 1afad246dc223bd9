// row_add_norm.cuh: one token's residual add and RMSNorm by the one block that finishes a kernel's output row - the
// last block to arrive in moe_down_norm.cu (the MoE down) and linear_norm.cu (the o_proj GEMV), which fold the next
// norm into the kernel that writes its input, so that both norm with the same instructions.
//
// summed = y + residual in float32; element e of the row belongs to thread e mod blockDim.x (a multiple of 32, at most
// 1024); the squares summed per thread in element order, a butterfly within a warp, the warps in order; rinv =
// 1 / sqrt(mean + eps); normed = (summed * rinv) * w, both stored in the activation dtype. Every float operation is
// pinned by an _rn intrinsic (rmsnorm.cu's row). y was stored by other blocks of the kernel, so it is read through
// L2 (__ldcg: never a stale L1 line), after the caller's acquire.
#pragma once
#include "common.cuh"
#include "router_route.cuh"  // rt_arrive: the acq_rel arrival the callers pick the last block by

// element i of an activation row written by another block of this kernel (or read once), through L2
__device__ __forceinline__ float ran_load(const void* p, i64 i, int dt) {
    if (dt == DT_F32) return __ldcg((const float*)p + i);
    const u16 b = __ldcg((const unsigned short*)p + i);
    return dt == DT_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

// summed = y + residual, normed = rmsnorm(summed) * w for one token's row of D values, by one block
__device__ __forceinline__ void row_add_norm(const void* y, const void* residual, int dt, const float* __restrict__ w,
                                             float eps, int D, void* __restrict__ normed, void* __restrict__ summed) {
    __shared__ float red[32];
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float acc = 0.0f;
    for (int e = threadIdx.x; e < D; e += blockDim.x) {
        const float s = __fadd_rn(ran_load(y, e, dt), ran_load(residual, e, dt));
        acc = __fmaf_rn(s, s, acc);
    }
    acc = warp_sum(acc);
    if ((threadIdx.x & 31) == 0) red[warp] = acc;
    __syncthreads();
    float total = red[0];
    for (int i = 1; i < warps; ++i) total = __fadd_rn(total, red[i]);
    const float rinv = __frsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)D), eps));
    for (int e = threadIdx.x; e < D; e += blockDim.x) {
        const float s = __fadd_rn(ran_load(y, e, dt), ran_load(residual, e, dt));
        store_act(summed, e, dt, s);
        store_act(normed, e, dt, __fmul_rn(__fmul_rn(s, rinv), w[e]));
    }
}
