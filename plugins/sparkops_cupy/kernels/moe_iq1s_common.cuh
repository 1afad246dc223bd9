// moe_iq1s_common.cuh: what the one-token IQ1_S expert kernels share (moe_iq1s_q8.cu's grid forms, moe_iq1s_t2.cu's
// repacked form): the gate's activation, a slot's expert id, and the Q8-hidden gate/up's quantization of its block's
// 32 hidden values.
#pragma once
#include "iq1s_q8.cuh"

__device__ __forceinline__ float iq_silu(float g) { return g / (1.0f + expf(-g)); }

// expert id of slot s, and whether it is a valid one (an invalid id reads expert 0)
__device__ __forceinline__ i64 iq_expert(const i64* __restrict__ ids, int s, int E, bool& valid) {
    const i64 e = __ldcg(ids + s);  // the router's output: read after the wait, through L2
    valid = e >= 0 && e < E;
    return valid ? e : 0;
}

// warp 0 of a Q8-hidden gate/up block: its 32 hidden values hv (shared memory, rows R0 .. R0 + 31 of h) as one Q8
// block (common.cuh's Q8_0 rule, as q8_stage's: codes, the scale through fp16, NaN in the block -> NaN scale) with its
// code sum, written in h's own bytes: codes [H], scales [H / 32], sums [H / 32]
__device__ __forceinline__ void iq_h8_quantize(const float* hv, int lane, i64 R0, int H, u8* __restrict__ hbytes) {
    const float v = hv[lane];
    const bool nan = __any_sync(0xffffffffu, v != v);
    float d;
    const float id = q8_inverse(warp_max(fabsf(v)), d);
    const int q = q8_code(v, id);
    int sum = q;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    hbytes[R0 + lane] = (u8)(q & 0xff);
    if (lane == 0) {
        const i64 b = R0 >> 5;
        ((float*)(hbytes + H))[b] = nan ? QNAN : d;
        ((int*)(hbytes + H + (H >> 3)))[b] = sum;
    }
}
