// q4k_rows.cuh: one lane's share of a Q4_K super-block dotted with float32 activations, for the row-warp GEMVs
// (linear_rowwarp.cu, moe_rowwarp.cu): from activations in global memory (rw_block) or staged in shared memory
// (ro_stage, ro_block).
//
// Layout. A Q4_K super-block (256 inputs, 144 bytes): fp16 d | fp16 dmin | 12 bytes of 6-bit (scale, min) x 8 |
// qs[128]. A round of the warp covers 4 consecutive super-blocks, one per octet of lanes; lane o (0..7) of an
// octet loads the block's 16-byte header and qs bytes 16o..16o+15. Those hold sub-block pair j = o / 2: the low
// nibbles are inputs 64j + 16(o % 2) + 0..15 (sub-block 2j), the high nibbles the same + 32 (sub-block 2j + 1).
// Each lane adds d*sc * sum(q x) - dmin*m * sum(x) for its two half sub-blocks; the warp then adds its lanes.
#pragma once
#include "common.cuh"

// super-blocks a warp has in flight at once: 4 rounds of 4 (a row of 4096 inputs in one trip)
#define RW_ROUNDS 4

// nibble byte b (0..3) of a word already masked to 0x0F0F0F0F, as a float: the bits 2^23 + byte, less 2^23
__device__ __forceinline__ float rw_nib(u32 w, int b) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540 + b)) - 8388608.0f;
}

// 16 consecutive activations' raw bytes from x + i (i a multiple of 16; the row 16-byte aligned): 64 bytes in u[0..3]
// for float32, 32 bytes in u[0..1] for bf16 and f16, loaded and not yet converted. NC: through the read-only path
// (__ldg), for data no other kernel writes while this one runs. false: cached in L1 (__ldca: ld.global.ca; a plain
// load of a const __restrict__ pointer would compile to the read-only path), for kernels launched with programmatic
// dependent launch, whose x is written by a kernel still running when they start and is read only after pdl_wait
// (which makes that kernel's writes visible to this grid). Session 17 first read x there with __ldcg (L2 only): the
// warp form reads 16 bytes of x per weight byte, and its PDL kernel took ~20 us more a 2304 x 4096 GEMV after a gated
// norm (the PDL experts 2.5x cupy_rowwarp's time)
template <int DT, bool NC = true>
__device__ __forceinline__ void rw_raw16(const void* __restrict__ x, i64 i, uint4 (&u)[4]) {
    const uint4* p = DT == DT_F32 ? (const uint4*)((const float*)x + i) : (const uint4*)((const u16*)x + i);
#pragma unroll
    for (int k = 0; k < (DT == DT_F32 ? 4 : 2); ++k) u[k] = NC ? __ldg(p + k) : __ldca(p + k);
}

// rw_raw16's bytes as 16 float32 activations
template <int DT>
__device__ __forceinline__ void rw_cvt16(const uint4 (&u)[4], float* v) {
    if (DT == DT_F32) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            v[4 * k] = __uint_as_float(u[k].x);
            v[4 * k + 1] = __uint_as_float(u[k].y);
            v[4 * k + 2] = __uint_as_float(u[k].z);
            v[4 * k + 3] = __uint_as_float(u[k].w);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const u32 w[4] = {u[k].x, u[k].y, u[k].z, u[k].w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                if (DT == DT_BF16) {
                    v[8 * k + 2 * h] = __uint_as_float(w[h] << 16);
                    v[8 * k + 2 * h + 1] = __uint_as_float(w[h] & 0xffff0000u);
                } else {
                    v[8 * k + 2 * h] = f16_to_f32((u16)(w[h] & 0xffffu));
                    v[8 * k + 2 * h + 1] = f16_to_f32((u16)(w[h] >> 16));
                }
            }
        }
    }
}

// 16 consecutive activations from x + i as float32: rw_raw16 and rw_cvt16 in one (kept as written before them: the
// forms built on it keep their SASS)
template <int DT, bool NC = true>
__device__ __forceinline__ void rw_load16(const void* __restrict__ x, i64 i, float* v) {
    if (DT == DT_F32) {
        const float4* p = (const float4*)((const float*)x + i);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float4 f = NC ? __ldg(p + k) : __ldca(p + k);
            v[4 * k] = f.x;
            v[4 * k + 1] = f.y;
            v[4 * k + 2] = f.z;
            v[4 * k + 3] = f.w;
        }
    } else {
        const uint4* p = (const uint4*)((const u16*)x + i);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            uint4 u = NC ? __ldg(p + k) : __ldca(p + k);
            u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                if (DT == DT_BF16) {
                    v[8 * k + 2 * h] = __uint_as_float(w[h] << 16);
                    v[8 * k + 2 * h + 1] = __uint_as_float(w[h] & 0xffff0000u);
                } else {
                    v[8 * k + 2 * h] = f16_to_f32((u16)(w[h] & 0xffffu));
                    v[8 * k + 2 * h + 1] = f16_to_f32((u16)(w[h] >> 16));
                }
            }
        }
    }
}

// the 6-bit (scale, min) of sub-block s (0..7) from the header's scale words a = bytes 4..7, b = 8..11, c = 12..15
__device__ __forceinline__ void rw_scale_min(u32 a, u32 b, u32 c, int s, float& sc, float& mn) {
    const int i = 8 * (s & 3);
    const u32 ab = (a >> i) & 0xffu, bb = (b >> i) & 0xffu, cb = (c >> i) & 0xffu;
    const u32 s_lo = ab & 63u, m_lo = bb & 63u;
    const u32 s_hi = (cb & 15u) | ((ab >> 6) << 4), m_hi = (cb >> 4) | ((bb >> 6) << 4);
    sc = (float)(s < 4 ? s_lo : s_hi);
    mn = (float)(s < 4 ? m_lo : m_hi);
}

// one lane's share of one super-block from its 32 activations as float32: header h, its 16 qs bytes q, xl the 16
// its low nibbles multiply, xh the 16 its high nibbles multiply. rw_block and rw_block_raw both end here, so that
// every form's products and sums are one code's.
__device__ __forceinline__ float rw_dot(uint4 h, uint4 q, const float (&xl)[16], const float (&xh)[16], int o) {
    const int j = o >> 1;
    float sc_l, mn_l, sc_h, mn_h;
    rw_scale_min(h.y, h.z, h.w, 2 * j, sc_l, mn_l);
    rw_scale_min(h.y, h.z, h.w, 2 * j + 1, sc_h, mn_h);
    const float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
    const u32 w[4] = {q.x, q.y, q.z, q.w};
    float al = 0.0f, ah = 0.0f, sl = 0.0f, sh = 0.0f;  // sum(q x) and sum(x), low and high nibbles
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const u32 lo = w[k] & 0x0F0F0F0Fu, hi = (w[k] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const float a = xl[4 * k + b], c = xh[4 * k + b];
            al = fmaf(rw_nib(lo, b), a, al);
            ah = fmaf(rw_nib(hi, b), c, ah);
            sl += a;
            sh += c;
        }
    }
    return (d * sc_l) * al - (dmin * mn_l) * sl + ((d * sc_h) * ah - (dmin * mn_h) * sh);
}

// the activations' first index a lane reads in the super-block starting at xi: its low nibbles' run of 16 (the high
// nibbles' is 32 further on)
__device__ __forceinline__ i64 rw_lane_base(i64 xi, int o) { return xi + 64 * (o >> 1) + 16 * (o & 1); }

// one lane's share of one super-block: header h, its 16 qs bytes q, activations from x + xi (the block's start)
template <int DT, bool NC = true>
__device__ __forceinline__ float rw_block(uint4 h, uint4 q, const void* __restrict__ x, i64 xi, int o) {
    const i64 base = rw_lane_base(xi, o);
    float xl[16], xh[16];
    rw_load16<DT, NC>(x, base, xl);
    rw_load16<DT, NC>(x, base + 32, xh);
    return rw_dot(h, q, xl, xh, o);
}

// rw_block on activations already loaded (rw_raw16 at rw_lane_base, and 32 further on): the same values, the same
// products and sums, the same bits
template <int DT>
__device__ __forceinline__ float rw_block_raw(uint4 h, uint4 q, const uint4 (&ul)[4], const uint4 (&uh)[4], int o) {
    float xl[16], xh[16];
    rw_cvt16<DT>(ul, xl);
    rw_cvt16<DT>(uh, xh);
    return rw_dot(h, q, xl, xh, o);
}

// the float4 slot of activation group f (4 activations) in shared memory: within each run of 8 groups, shifted by
// (f / 16) % 4, so the 8 lanes of an octet (groups 16j + 4(o % 2) + k, j = o / 2) hit 8 different bank groups
__device__ __forceinline__ int ro_slot(int f) { return (f & ~7) | ((f + ((f >> 4) & 3)) & 7); }

// What a lane's place o (0..7) in its octet fixes for every super-block of the staged form, worked out once: its
// sub-block pair j, the shared-memory float4 slots of its 16 low-nibble activations relative to the super-block's 64
// (ro_slot of 16j + 4(o % 2) + k is 16j + (4(o % 2) + k + j) % 8: the high nibbles' are 8 further), its sum of 16
// relative to the super-block's 16, and the shift of its (scale, min) bytes in the header's scale words.
struct RoLane {
    int slot[4];
    int s16, sh;
    bool low;
};

__device__ __forceinline__ RoLane ro_lane(int o) {
    RoLane l;
    const int j = o >> 1, b = o & 1;
#pragma unroll
    for (int k = 0; k < 4; ++k) l.slot[k] = 16 * j + ((4 * b + k + j) & 7);
    l.s16 = 4 * j + b;
    l.sh = 16 * (j & 1);  // sub-blocks 2j, 2j + 1 are bytes (2j) % 4 and (2j) % 4 + 1 of the scale words
    l.low = j < 2;
    return l;
}

// A lane's two sub-blocks' factors from the super-block header h: d * scale and dmin * min of sub-blocks 2j (ds0, dm0)
// and 2j + 1 (ds1, dm1)
struct RoScales {
    float ds0, dm0, ds1, dm1;
};

__device__ __forceinline__ RoScales ro_scales(uint4 h, const RoLane& l) {
    const u32 a = h.y >> l.sh, b = h.z >> l.sh, c = h.w >> l.sh;  // byte 0: sub-block 2j, byte 1: 2j + 1
    const u32 sc0 = l.low ? (a & 63u) : ((c & 15u) | ((a >> 2) & 48u));
    const u32 mn0 = l.low ? (b & 63u) : (((c >> 4) & 15u) | ((b >> 2) & 48u));
    const u32 sc1 = l.low ? ((a >> 8) & 63u) : (((c >> 8) & 15u) | ((a >> 10) & 48u));
    const u32 mn1 = l.low ? ((b >> 8) & 63u) : (((c >> 12) & 15u) | ((b >> 10) & 48u));
    const float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
    return {d * (float)sc0, dmin * (float)mn0, d * (float)sc1, dmin * (float)mn1};
}

// one lane's share of one super-block from the staged activations: d*sc * sum(q x) - dmin*m * sum(x); sxb and ssb
// point at the super-block's 64 float4 slots and 16 sums
__device__ __forceinline__ float ro_block(uint4 h, uint4 q, const float4* __restrict__ sxb,
                                          const float* __restrict__ ssb, const RoLane& l) {
    const RoScales f = ro_scales(h, l);
    const u32 w[4] = {q.x, q.y, q.z, q.w};
    float al = 0.0f, ah = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // a word of codes against its 4 low and 4 high activations
        const float4 x0 = sxb[l.slot[k]], x1 = sxb[l.slot[k] + 8];
        const u32 lo = w[k] & 0x0F0F0F0Fu, hi = (w[k] >> 4) & 0x0F0F0F0Fu;
        al = fmaf(rw_nib(lo, 0), x0.x, al);
        al = fmaf(rw_nib(lo, 1), x0.y, al);
        al = fmaf(rw_nib(lo, 2), x0.z, al);
        al = fmaf(rw_nib(lo, 3), x0.w, al);
        ah = fmaf(rw_nib(hi, 0), x1.x, ah);
        ah = fmaf(rw_nib(hi, 1), x1.y, ah);
        ah = fmaf(rw_nib(hi, 2), x1.z, ah);
        ah = fmaf(rw_nib(hi, 3), x1.w, ah);
    }
    return f.ds0 * al - f.dm0 * ssb[l.s16] + (f.ds1 * ah - f.dm1 * ssb[l.s16 + 2]);
}

// One thread's share of the staging: activations 16i..16i+15 (v) into their 4 swizzled slots, and their sum
__device__ __forceinline__ void ro_stage_item(int i, const float* v, float4* __restrict__ sx,
                                              float* __restrict__ ssum) {
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        sx[ro_slot(4 * i + k)] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
        t += (v[4 * k] + v[4 * k + 1]) + (v[4 * k + 2] + v[4 * k + 3]);
    }
    ssum[i] = t;
}

// Stage activations x [K] (dtype DT) in shared memory for ro_block: K floats in swizzled 16-byte groups, then the
// K / 16 sums of 16. Every thread of the block takes part; the caller synchronizes before reading.
template <int DT, bool NC = true>
__device__ __forceinline__ void ro_stage(const void* __restrict__ x, int K, float4* __restrict__ sx,
                                         float* __restrict__ ssum) {
    for (int i = threadIdx.x; i < (K >> 4); i += blockDim.x) {  // 16 activations a thread: 4 slots and their sum
        float v[16];
        rw_load16<DT, NC>(x, 16 * (i64)i, v);
        ro_stage_item(i, v, sx, ssum);
    }
}

// The staging in two halves, for forms that request x before their weights (session 17's Nsight Compute source page
// of the copy form: a quarter of its warps' stall samples sat on the first use of x, which was requested after the
// block's 20 KB of weight copies and so queued behind them). ro_stage_request loads a thread's first two items
// (threadIdx.x and threadIdx.x + blockDim.x: every item while K <= 32 * blockDim.x) into registers; ro_stage_from
// stages them, and loads any further item as ro_stage does. The same values in the same slots and sums: the same bits.
struct RoXEarly {
    uint4 a[4], b[4];
};

template <int DT>
__device__ __forceinline__ void ro_stage_request(const void* __restrict__ x, int K, RoXEarly& e) {
    const int i = threadIdx.x, n = K >> 4;
    if (i < n) rw_raw16<DT>(x, 16 * (i64)i, e.a);
    if (i + (int)blockDim.x < n) rw_raw16<DT>(x, 16 * (i64)(i + blockDim.x), e.b);
}

template <int DT>
__device__ __forceinline__ void ro_stage_from(const void* __restrict__ x, int K, const RoXEarly& e,
                                              float4* __restrict__ sx, float* __restrict__ ssum) {
    const int i = threadIdx.x, n = K >> 4;
    float v[16];
    if (i < n) {
        rw_cvt16<DT>(e.a, v);
        ro_stage_item(i, v, sx, ssum);
    }
    if (i + (int)blockDim.x < n) {
        rw_cvt16<DT>(e.b, v);
        ro_stage_item(i + blockDim.x, v, sx, ssum);
    }
    for (int j = i + 2 * blockDim.x; j < n; j += blockDim.x) {
        rw_load16<DT>(x, 16 * (i64)j, v);
        ro_stage_item(j, v, sx, ssum);
    }
}

// lane o's share of the super-block at b (16-byte aligned): its 16-byte header and qs bytes 16o..16o+15 (streamed:
// weights are read once)
__device__ __forceinline__ void q4k_load(const u8* b, int o, uint4& h, uint4& q) {
    h = __ldcs((const uint4*)b);
    q = __ldcs((const uint4*)b + 1 + o);
}

// The octet form's ring: a row's first 4 super-blocks requested into registers (before the activations are staged,
// so the two round trips overlap), then the walk over all nsb of them from the staged activations, each slot
// reloaded 4 super-blocks ahead as soon as it is used. r: the row's first byte.
__device__ __forceinline__ void ro_ring_start(const u8* r, int nsb, int o, uint4 (&h)[4], uint4 (&q)[4]) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
        if (s < nsb) q4k_load(r + (i64)s * 144, o, h[s], q[s]);
}

__device__ __forceinline__ float ro_ring_walk(const u8* r, int nsb, int o, uint4 (&h)[4], uint4 (&q)[4],
                                              const float4* __restrict__ sx, const float* __restrict__ ssum) {
    const RoLane lp = ro_lane(o);
    float acc = 0.0f;
    for (int base = 0; base < nsb; base += 4) {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int sb = base + s;
            if (sb < nsb) {
                acc += ro_block(h[s], q[s], sx + 64 * sb, ssum + 16 * sb, lp);
                if (sb + 4 < nsb) q4k_load(r + (i64)(sb + 4) * 144, o, h[s], q[s]);
            }
        }
    }
    return acc;
}

// The staged forms' walk of one row r (linear_rowwarp.cu's rowstg, moe_rowwarp.cu's gateupstg): an octet takes the
// row's super-blocks first, first + step, first + 2 step, ..., ROUNDS of them in flight at a time (a group's loads all
// issued before any is used), each decoded from the staged activations. The caller issues the first group
// (rs_group_load with g = 0) before it stages the activations, so the two round trips overlap.
template <int ROUNDS>
__device__ __forceinline__ void rs_group_load(const u8* r, int nsb, int g, int first, int step, int o,
                                              uint4 (&h)[ROUNDS], uint4 (&q)[ROUNDS]) {
#pragma unroll
    for (int i = 0; i < ROUNDS; ++i) {
        const int sb = g + first + step * i;
        if (sb < nsb) q4k_load(r + (i64)sb * 144, o, h[i], q[i]);
    }
}

template <int ROUNDS>
__device__ __forceinline__ float rs_walk(const u8* r, int nsb, int first, int step, int o, uint4 (&h)[ROUNDS],
                                         uint4 (&q)[ROUNDS], const float4* __restrict__ sx,
                                         const float* __restrict__ ssum) {
    const RoLane lp = ro_lane(o);
    float acc = 0.0f;
    for (int g = 0; g < nsb; g += step * ROUNDS) {
        if (g > 0) rs_group_load<ROUNDS>(r, nsb, g, first, step, o, h, q);
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int sb = g + first + step * i;
            if (sb < nsb) acc += ro_block(h[i], q[i], sx + 64 * sb, ssum + 16 * sb, lp);
        }
    }
    return acc;
}

// acc plus a lane's share of super-blocks [sb0, sb1) of row r in shared memory, added in order
__device__ __forceinline__ float ro_copied_span(const u8* r, int sb0, int sb1, const RoLane& lp, int o,
                                                const float4* __restrict__ sx, const float* __restrict__ ssum,
                                                float acc) {
    for (int sb = sb0; sb < sb1; ++sb) {
        const uint4* b = (const uint4*)(r + sb * 144);
        acc += ro_block(b[0], b[1 + o], sx + 64 * sb, ssum + 16 * sb, lp);
    }
    return acc;
}

// an octet's lane sums added (butterfly): every lane of the octet ends with the same value
__device__ __forceinline__ float ro_octet_sum(float acc) {
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    return acc;
}

// The copy form's walk of one row r already in shared memory (nsb super-blocks), summed over the octet: every lane of
// the octet ends with the row's dot product.
__device__ __forceinline__ float ro_copied_row(const u8* r, int nsb, int o, const float4* __restrict__ sx,
                                               const float* __restrict__ ssum) {
    return ro_octet_sum(ro_copied_span(r, 0, nsb, ro_lane(o), o, sx, ssum, 0.0f));
}
