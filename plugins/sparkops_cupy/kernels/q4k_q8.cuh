// q4k_q8.cuh: Q4_K rows dotted with activations quantized to Q8 in shared memory, by __dp4a - the one-token Q8
// kernels' shared pieces (moe_rowwarp.cu's Q8 gate/up, written after GPU session 26; linear_rowwarp.cu's Q8 GEMV,
// after session 27). x is quantized once a block by ggml's Q8_0 rule (common.cuh's q8_inverse / q8_code, as
// quantize_act.cu's) to blocks of 32 - a Q4_K sub-block is one such block - and each lane dots its 32 weights of a
// super-block with 8 __dp4a. The products are exact integers; the activations' rounding is the claim's (tolerance
// "act_q8", llama.cpp's arithmetic).
#pragma once
#include "q4k_rows.cuh"

// x quantized into shared memory: codes xq [D] (int8), scales dx [D / 32] (through fp16, as Q8_0 stores them), sums of
// 16 codes s16 [D / 16]. A lane takes 16 consecutive values (two lanes a block of 32), read coherently (__ldca: after
// the PDL wait).
template <int DT>
__device__ __forceinline__ void q8_stage(const void* __restrict__ x, int D, i8* xq, float* dx, int* s16) {
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (int i0 = (threadIdx.x >> 5) * 512 + lane * 16; i0 - lane * 16 < D; i0 += warps * 512) {
        const bool here = i0 < D;  // the warp's last chunk may be half a chunk (the pair of lanes stays whole)
        float v[16];
        if (here) {
            uint4 u[4];
            rw_raw16<DT, false>(x, i0, u);
            rw_cvt16<DT>(u, v);
        } else {
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = 0.0f;
        }
        float amax = 0.0f;
        bool nan = false;  // fmaxf drops a NaN: the block's scale carries it instead, so the output is NaN as the
                           // float forms' is (an inf gives id 0 and an inf scale: NaN too)
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            amax = fmaxf(amax, fabsf(v[k]));
            nan |= v[k] != v[k];
        }
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));  // the block of 32: this lane and its pair
        nan |= __shfl_xor_sync(0xffffffffu, (int)nan, 1) != 0;
        float d;
        const float id = q8_inverse(amax, d);
        u32 w[4];
        int sum = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u32 word = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int q = q8_code(v[4 * k + b], id);
                sum += q;
                word |= ((u32)q & 0xffu) << (8 * b);
            }
            w[k] = word;
        }
        if (here) {
            *(uint4*)(xq + i0) = make_uint4(w[0], w[1], w[2], w[3]);
            s16[i0 >> 4] = sum;
            if ((lane & 1) == 0) dx[i0 >> 5] = nan ? QNAN : d;
        }
    }
}

// one lane's share of one super-block (at blk, in shared memory) dotted with the staged codes: sub-block pair
// j = o / 2, inputs 256 sb + 64 j + 16 (o % 2) + 0..15 (low nibbles) and + 32 (high nibbles), as rw_block's
__device__ __forceinline__ float q8_block(const u8* blk, int o, const i8* xq, const float* dx, const int* s16, int sb) {
    const uint4 h = *(const uint4*)blk, q = *((const uint4*)blk + 1 + o);
    const int j = o >> 1, base = 256 * sb + 64 * j + 16 * (o & 1);
    const int4 xl = *(const int4*)(xq + base), xh = *(const int4*)(xq + base + 32);
    float sc_l, mn_l, sc_h, mn_h;
    rw_scale_min(h.y, h.z, h.w, 2 * j, sc_l, mn_l);
    rw_scale_min(h.y, h.z, h.w, 2 * j + 1, sc_h, mn_h);
    const float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
    int al = 0, ah = 0;
    al = __dp4a((int)(q.x & 0x0F0F0F0Fu), xl.x, al);
    al = __dp4a((int)(q.y & 0x0F0F0F0Fu), xl.y, al);
    al = __dp4a((int)(q.z & 0x0F0F0F0Fu), xl.z, al);
    al = __dp4a((int)(q.w & 0x0F0F0F0Fu), xl.w, al);
    ah = __dp4a((int)((q.x >> 4) & 0x0F0F0F0Fu), xh.x, ah);
    ah = __dp4a((int)((q.y >> 4) & 0x0F0F0F0Fu), xh.y, ah);
    ah = __dp4a((int)((q.z >> 4) & 0x0F0F0F0Fu), xh.z, ah);
    ah = __dp4a((int)((q.w >> 4) & 0x0F0F0F0Fu), xh.w, ah);
    const float lo = (d * sc_l) * (float)al - (dmin * mn_l) * (float)s16[base >> 4];
    const float hi = (d * sc_h) * (float)ah - (dmin * mn_h) * (float)s16[(base + 32) >> 4];
    return dx[base >> 5] * lo + dx[(base + 32) >> 5] * hi;
}

