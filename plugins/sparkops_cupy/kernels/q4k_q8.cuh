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
// the PDL wait). XPAD (the padded pairs form's): each 64 codes at a stride of 80 bytes (xq then holds D / 64 x 80,
// q8_xq_at gives a code's place), so that the 8 lanes of an octet reading 64-code chunks land on 8 distinct groups
// of 4 banks (at a stride of 64 they share 2 groups: 4-way conflicts).
__host__ __device__ __forceinline__ int q8_xq_bytes(int D, bool xpad) { return xpad ? (D >> 6) * 80 : D; }
template <bool XPAD>
__device__ __forceinline__ int q8_xq_at(int i) { return XPAD ? (i >> 6) * 80 + (i & 63) : i; }
template <int DT, bool XPAD = false>
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
            *(uint4*)(xq + q8_xq_at<XPAD>(i0)) = make_uint4(w[0], w[1], w[2], w[3]);
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

// Q4_K sub-block s's 6-bit scale and min (rw_scale_min's bits) as integers
__device__ __forceinline__ void rw_scale_min_i(u32 a, u32 b, u32 c, int s, int& sc, int& mn) {
    const int i = 8 * (s & 3);
    const u32 ab = (a >> i) & 0xffu, bb = (b >> i) & 0xffu, cb = (c >> i) & 0xffu;
    sc = (int)(s < 4 ? ab & 63u : (cb & 15u) | ((ab >> 6) << 4));
    mn = (int)(s < 4 ? bb & 63u : (cb >> 4) | ((bb >> 6) << 4));
}

// One lane's share of one super-block in the "pairs" form (written after GPU session 28): a whole sub-block pair p
// (its 32 qs bytes: inputs 256 sb + 64 p + 0..31 in the low nibbles, + 32 .. 63 in the high ones), 64 weights by 16
// __dp4a, against q8_block's 32 by 8. Each pair's 6-bit scales are decoded once (q8_block's two lanes of a pair both
// decode them) and its header read by 4 lanes, not 8; the integer sums are scaled by the scale and min as integers
// (exact: |al| <= 32 x 15 x 127, times 63, is under 2^24), then converted once. Why: the one-wave gate/up's dot loop
// is 87 instructions a lane a super-block, 2.7 a weight, of which 8 are __dp4a (session 28's disassembly), where the
// read roofline leaves ~4.6 a weight for the whole kernel. A sub-block pair is two Q8 blocks of 32 (dx) and four sums
// of 16 (s16). Another order of products and sums than q8_block's: the same claim (act_q8), other bits.
// XPAD: the codes staged at q8_stage<DT, true>'s stride of 80 bytes a 64.
template <bool XPAD = false>
__device__ __forceinline__ float q8_block64(const u8* blk, int p, const i8* xq, const float* dx, const int* s16,
                                            int sb) {
    const uint4 h = *(const uint4*)blk, q0 = *((const uint4*)blk + 1 + 2 * p), q1 = *((const uint4*)blk + 2 + 2 * p);
    const int base = 256 * sb + 64 * p;
    const i8* xc = xq + q8_xq_at<XPAD>(base);  // the pair's 64 codes, contiguous either way
    const int4 x0 = *(const int4*)xc, x1 = *(const int4*)(xc + 16);
    const int4 x2 = *(const int4*)(xc + 32), x3 = *(const int4*)(xc + 48);
    const int4 s = *(const int4*)(s16 + (base >> 4));  // sums of the codes 0..15, 16..31, 32..47, 48..63
    const float2 dd = *(const float2*)(dx + (base >> 5));  // the two Q8 blocks' scales
    int sc_l, mn_l, sc_h, mn_h;
    rw_scale_min_i(h.y, h.z, h.w, 2 * p, sc_l, mn_l);
    rw_scale_min_i(h.y, h.z, h.w, 2 * p + 1, sc_h, mn_h);
    const float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
    const u32 m = 0x0F0F0F0Fu;
    int l0 = __dp4a((int)(q0.x & m), x0.x, 0), l1 = __dp4a((int)(q1.x & m), x1.x, 0);
    int h0 = __dp4a((int)((q0.x >> 4) & m), x2.x, 0), h1 = __dp4a((int)((q1.x >> 4) & m), x3.x, 0);
    l0 = __dp4a((int)(q0.y & m), x0.y, l0);
    l1 = __dp4a((int)(q1.y & m), x1.y, l1);
    h0 = __dp4a((int)((q0.y >> 4) & m), x2.y, h0);
    h1 = __dp4a((int)((q1.y >> 4) & m), x3.y, h1);
    l0 = __dp4a((int)(q0.z & m), x0.z, l0);
    l1 = __dp4a((int)(q1.z & m), x1.z, l1);
    h0 = __dp4a((int)((q0.z >> 4) & m), x2.z, h0);
    h1 = __dp4a((int)((q1.z >> 4) & m), x3.z, h1);
    l0 = __dp4a((int)(q0.w & m), x0.w, l0);
    l1 = __dp4a((int)(q1.w & m), x1.w, l1);
    h0 = __dp4a((int)((q0.w >> 4) & m), x2.w, h0);
    h1 = __dp4a((int)((q1.w >> 4) & m), x3.w, h1);
    const float lo = d * (float)((l0 + l1) * sc_l) - dmin * (float)((s.x + s.y) * mn_l);
    const float hi = d * (float)((h0 + h1) * sc_h) - dmin * (float)((s.z + s.w) * mn_h);
    return dd.x * lo + dd.y * hi;
}
