// quant_dot.cuh: one weight row (GGUF blocks, as stored) dotted with activations a warp at a time.
//
// Activations are quantized first to Q8_0 blocks of 32 (ggml's scheme for integer dot products) and
// kept in shared memory per token: xq int8 [K], xd float [K/32] (the fp16-rounded scales) and xs
// float [K/32] (the exact float sum of the 32 values, for the terms that multiply a constant: the
// Q4_K mins and the IQ1_S delta). The weight side of each sub-block is an exact small integer, so
// the products go through __dp4a (four int8 products + an int32 add per instruction) and only the
// per-sub-block scales are float: y = sum_sub d_w * s_sub * d_x * dot_int(q_w, q_x) (- min terms).
//
// A row is cut into "chunks", the unit one lane loads (16 bytes of Q4_K codes, say). Lane l takes
// chunks l, l+32, ...; U chunks per lane are loaded before any is used, so a short row (K = 2304:
// 72 chunks) is one round trip to memory. Formats (sparkops/gguf/quants.py spells them out):
//   Q8_0  34 B / 32:  fp16 d | int8 q[32]                         value = d*q
//   Q4_K 144 B / 256: fp16 d | fp16 dmin | 12 B of 6-bit scale,min x8 | 4-bit q[256]
//                     value = d*sc[s]*q - dmin*mn[s], sub-block s of 32
//   Q6_K 210 B / 256: ql[128] | qh[64] | int8 sc[16] | fp16 d    value = d*sc[s]*(q-32), s of 16
//   IQ1_S 50 B / 256: fp16 d | qs[32] | u16 qh[8]               value = d*(2k+1)*(grid[idx]+delta)
#pragma once
#include "common.cuh"

#define QT_FLOAT 0
#define QT_Q8_0 1
#define QT_Q4_K 2
#define QT_Q6_K 3
#define QT_IQ1_S 4

// Activations of NT tokens staged in shared memory (token t at offset t*K, t*K/32).
struct ActQ8 {
    const i8* q;
    const float* d;
    const float* s;
    const float* f;  // float activations (float-weight rows are dotted in float, not quantized)
    int K;
};

// Stage rows t0..t0+nt-1 of x [T, K] into shared memory: quantized (Q8), or as floats. All threads.
// FLOAT_SUMS (K a multiple of 32): the floats in sf with the float sum of every 32 in ss, nothing quantized (the
// float dots of float_dot.cuh); sq and sd are not touched.
template <bool FLOAT_ACT, bool FLOAT_SUMS = false>
__device__ __forceinline__ void stage_activations(const void* __restrict__ x, int x_dt, int K, i64 t0, int nt,
                                                  i8* sq, float* sd, float* ss, float* sf) {
    const i64 off = t0 * (i64)K;
    if (FLOAT_ACT) {
#pragma unroll 8
        for (int i = threadIdx.x; i < nt * K; i += blockDim.x) sf[i] = load_act(x, off + i, x_dt);
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const int n_blocks = nt * (K >> 5);
    // 16 blocks per warp loaded before any is used: one trip to L2 for a 4096-wide row, not 16
    for (int b0 = warp; b0 < n_blocks; b0 += 16 * n_warps) {
        float v[16];
#pragma unroll
        for (int u = 0; u < 16; ++u) {
            const int b = b0 + u * n_warps;
            v[u] = b < n_blocks ? load_act(x, off + b * 32 + lane, x_dt) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 16; ++u) {
            const int b = b0 + u * n_warps;  // the same for all lanes: whole warps quantize together
            if (b < n_blocks && FLOAT_SUMS) {
                const float s = warp_sum(v[u]);
                sf[b * 32 + lane] = v[u];
                if (lane == 0) ss[b] = s;
            } else if (b < n_blocks) {
                int q;
                float d;
                q8_quantize_lane(v[u], q, d);
                const float s = warp_sum(v[u]);
                sq[b * 32 + lane] = (i8)q;
                if (lane == 0) {
                    sd[b] = d;
                    ss[b] = s;
                }
            }
        }
    }
}

// Bytes of shared memory stage_activations needs for nt tokens.
//   quantized: nt*K int8 + 2 * nt*K/32 floats; float: nt*K floats.

__device__ __forceinline__ int dp4(int a, int b, int c) { return __dp4a(a, b, c); }

// ---- Q8_0 ---------------------------------------------------------------------------------------------
struct DotQ8_0 {
    // chunk = a quarter block (8 values): 4 chunks per block
    struct Chunk { u32 d, w0, w1; };
    static __device__ __forceinline__ int chunks(int K) { return K >> 3; }
    static __device__ __forceinline__ Chunk load(const u8* __restrict__ row, int c, int) {
        const u8* blk = row + (c >> 2) * 34;
        const int o = 2 + 8 * (c & 3);
        Chunk ch;
        ch.d = ld_u16(blk);
        ch.w0 = ld_u32_a2(blk + o);
        ch.w1 = ld_u32_a2(blk + o + 4);
        return ch;
    }
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
        const float d = f16_to_f32((u16)ch.d);
        const int b = c >> 2;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int2 xv = *(const int2*)(a.q + t * a.K + c * 8);
            const int s = dp4(ch.w1, xv.y, dp4(ch.w0, xv.x, 0));
            acc[t] += d * a.d[t * (a.K >> 5) + b] * (float)s;
        }
    }
};

// ---- Q4_K ---------------------------------------------------------------------------------------------
// The 6-bit scales and mins of sub-blocks 2j and 2j+1, two per 16-bit word (sub-block 2j in the low byte).
// Bytes 0-3 (word a) hold scale[0..3] in their low 6 bits and bits 4-5 of scale[4..7] in their top 2;
// bytes 4-7 (b) the same for the mins; bytes 8-11 (c) bits 0-3 of scale[4..7] (low nibble) and of
// min[4..7] (high nibble). Branch-free: lanes of one warp take different j.
__device__ __forceinline__ void q4k_scale_min_pair(int j, u32 a, u32 b, u32 c, u32& sc, u32& mn) {
    const int sh = 16 * (j & 1);
    const u32 a2 = (a >> sh) & 0xffffu, b2 = (b >> sh) & 0xffffu, c2 = (c >> sh) & 0xffffu;
    const u32 sc_lo = a2 & 0x3f3fu, mn_lo = b2 & 0x3f3fu;                           // j = 0, 1
    const u32 sc_hi = (c2 & 0x0f0fu) | ((a2 >> 2) & 0x3030u);                       // j = 2, 3
    const u32 mn_hi = ((c2 >> 4) & 0x0f0fu) | ((b2 >> 2) & 0x3030u);
    sc = j < 2 ? sc_lo : sc_hi;
    mn = j < 2 ? mn_lo : mn_hi;
}

struct DotQ4_K {
    // chunk = qs chunk j of a block: 32 bytes, 64 values: sub-block 2j in the low nibbles, 2j+1 in the
    // high ones. 4 chunks per block; the block header (d, dmin, scales) is decoded once per 64 values.
    // Blocks are 144 = 9*16 bytes, so every load is an aligned 16-byte load.
    struct Chunk { uint4 hd, q0, q1; };
    static __device__ __forceinline__ int chunks(int K) { return K >> 6; }
    static __device__ __forceinline__ Chunk load(const u8* __restrict__ row, int c, int) {
        const u8* blk = row + (c >> 2) * 144;
        Chunk ch;
        ch.hd = *(const uint4*)blk;  // plain loads: rows come from global or shared memory
        ch.q0 = *(const uint4*)(blk + 16 + 32 * (c & 3));
        ch.q1 = *(const uint4*)(blk + 32 + 32 * (c & 3));
        return ch;
    }
    // the multipliers (d * scale) and offsets (dmin * min) of sub-blocks 2j and 2j+1, from the chunk's header
    static __device__ __forceinline__ void scales(const Chunk& ch, int j, float& d0, float& d1, float& m0, float& m1) {
        const float d = f16_to_f32((u16)(ch.hd.x & 0xffffu)), dmin = f16_to_f32((u16)(ch.hd.x >> 16));
        u32 sc, mn;
        q4k_scale_min_pair(j, ch.hd.y, ch.hd.z, ch.hd.w, sc, mn);
        d0 = d * (float)(sc & 255u);
        d1 = d * (float)(sc >> 8);
        m0 = dmin * (float)(mn & 255u);
        m1 = dmin * (float)(mn >> 8);
    }
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
        const int b = c >> 2, j = c & 3;
        float d0, d1, m0, m1;
        scales(ch, j, d0, d1, m0, m1);
        const u32 lo = 0x0f0f0f0fu;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const i8* xq = a.q + t * a.K + b * 256 + 64 * j;  // sub-block 2j, then 2j+1 at +32
            const int4 x0 = *(const int4*)xq, x1 = *(const int4*)(xq + 16);
            const int4 x2 = *(const int4*)(xq + 32), x3 = *(const int4*)(xq + 48);
            int sa = dp4(ch.q0.x & lo, x0.x, 0);
            sa = dp4(ch.q0.y & lo, x0.y, sa);
            sa = dp4(ch.q0.z & lo, x0.z, sa);
            sa = dp4(ch.q0.w & lo, x0.w, sa);
            sa = dp4(ch.q1.x & lo, x1.x, sa);
            sa = dp4(ch.q1.y & lo, x1.y, sa);
            sa = dp4(ch.q1.z & lo, x1.z, sa);
            sa = dp4(ch.q1.w & lo, x1.w, sa);
            int sb = dp4((ch.q0.x >> 4) & lo, x2.x, 0);
            sb = dp4((ch.q0.y >> 4) & lo, x2.y, sb);
            sb = dp4((ch.q0.z >> 4) & lo, x2.z, sb);
            sb = dp4((ch.q0.w >> 4) & lo, x2.w, sb);
            sb = dp4((ch.q1.x >> 4) & lo, x3.x, sb);
            sb = dp4((ch.q1.y >> 4) & lo, x3.y, sb);
            sb = dp4((ch.q1.z >> 4) & lo, x3.z, sb);
            sb = dp4((ch.q1.w >> 4) & lo, x3.w, sb);
            const int q8 = t * (a.K >> 5) + b * 8 + 2 * j;
            acc[t] += d0 * a.d[q8] * (float)sa + d1 * a.d[q8 + 1] * (float)sb
                      - (m0 * a.s[q8] + m1 * a.s[q8 + 1]);
        }
    }
};

// ---- Q6_K ---------------------------------------------------------------------------------------------
struct DotQ6_K {
    // chunk = 16 values: half hh of the block (128 values), 4 consecutive l (l0..l0+3) for each of the
    // four rows r = 0..3 (value 128hh + 32r + l). 16 chunks per block.
    struct Chunk { u32 qla, qlb, qh, sc, d; };
    static __device__ __forceinline__ int chunks(int K) { return K >> 4; }
    static __device__ __forceinline__ Chunk load(const u8* __restrict__ row, int c, int) {
        const u8* blk = row + (c >> 4) * 210;
        const int hh = (c >> 3) & 1, l0 = (c & 7) * 4;
        Chunk ch;
        ch.qla = ld_u32_a2(blk + 64 * hh + l0);
        ch.qlb = ld_u32_a2(blk + 64 * hh + 32 + l0);
        ch.qh = ld_u32_a2(blk + 128 + 32 * hh + l0);
        // scales of sub-blocks 8hh + 2r + (l0 >= 16), r = 0..3: bytes sc0, sc0+2, sc0+4, sc0+6
        const u8* sc = blk + 192 + 8 * hh + (l0 >> 4);
        ch.sc = (u32)sc[0] | ((u32)sc[2] << 8) | ((u32)sc[4] << 16) | ((u32)sc[6] << 24);
        ch.d = ld_u16(blk + 208);
        return ch;
    }
    // the unsigned 6-bit codes of rows r = 0..3 (value 128hh + 32r + l0 + i in byte i of u[r]) and their
    // sub-blocks' multipliers d * scale
    static __device__ __forceinline__ void decode(const Chunk& ch, u32 (&u)[4], float (&s)[4]) {
        const u32 lo = 0x0f0f0f0fu, hi = 0x30303030u;
        u[0] = (ch.qla & lo) | ((ch.qh << 4) & hi);
        u[1] = (ch.qlb & lo) | ((ch.qh << 2) & hi);
        u[2] = ((ch.qla >> 4) & lo) | (ch.qh & hi);
        u[3] = ((ch.qlb >> 4) & lo) | ((ch.qh >> 2) & hi);
        const float d = f16_to_f32((u16)ch.d);
        s[0] = d * (float)(i8)(ch.sc & 255u);
        s[1] = d * (float)(i8)((ch.sc >> 8) & 255u);
        s[2] = d * (float)(i8)((ch.sc >> 16) & 255u);
        s[3] = d * (float)(i8)(ch.sc >> 24);
    }
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
        const int b = c >> 4, hh = (c >> 3) & 1, l0 = (c & 7) * 4;
        const u32 k32 = 0x20202020u;
        u32 u[4];
        float sr[4];
        decode(ch, u, sr);
        // minus 32 per byte (wrapping: -32..31 as int8)
        const int q0 = (int)__vsub4(u[0], k32), q1 = (int)__vsub4(u[1], k32);
        const int q2 = (int)__vsub4(u[2], k32), q3 = (int)__vsub4(u[3], k32);
        const float s0 = sr[0], s1 = sr[1], s2 = sr[2], s3 = sr[3];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const i8* xq = a.q + t * a.K + b * 256 + 128 * hh + l0;
            const float* xd = a.d + t * (a.K >> 5) + b * 8 + 4 * hh;
            acc[t] += s0 * xd[0] * (float)dp4(q0, *(const int*)(xq), 0)
                      + s1 * xd[1] * (float)dp4(q1, *(const int*)(xq + 32), 0)
                      + s2 * xd[2] * (float)dp4(q2, *(const int*)(xq + 64), 0)
                      + s3 * xd[3] * (float)dp4(q3, *(const int*)(xq + 96), 0);
        }
    }
};

// ---- IQ1_S --------------------------------------------------------------------------------------------
struct DotIQ1_S {
    // chunk = one sub-block of 32 values (4 groups of 8, one grid entry each). 8 chunks per block.
    // grid: 2048 entries of 8 int8 values in {-1, 0, 1}, packed 4 per word (uint2), in global memory.
    struct Chunk { u32 qs, qh, d; };
    static __device__ __forceinline__ int chunks(int K) { return K >> 5; }
    static __device__ __forceinline__ Chunk load(const u8* __restrict__ row, int c, int) {
        const u8* blk = row + (c >> 3) * 50;
        const int s = c & 7;
        Chunk ch;
        ch.d = ld_u16(blk);
        ch.qs = ld_u32_a2(blk + 2 + 4 * s);
        ch.qh = ld_u16(blk + 34 + 2 * s);
        return ch;
    }
    // the sub-block's scale dl, its delta, and the grid rows (8 int8 values of -1, 0, 1) of its 4 groups
    static __device__ __forceinline__ void decode(const Chunk& ch, const uint2* __restrict__ grid, float& dl,
                                                  float& delta, uint2& g0, uint2& g1, uint2& g2, uint2& g3) {
        dl = f16_to_f32((u16)ch.d) * (float)(2 * ((ch.qh >> 12) & 7u) + 1);
        delta = (ch.qh & 0x8000u) ? -0.125f : 0.125f;
        g0 = __ldg(grid + ((ch.qs & 255u) | ((ch.qh & 7u) << 8)));
        g1 = __ldg(grid + (((ch.qs >> 8) & 255u) | (((ch.qh >> 3) & 7u) << 8)));
        g2 = __ldg(grid + (((ch.qs >> 16) & 255u) | (((ch.qh >> 6) & 7u) << 8)));
        g3 = __ldg(grid + ((ch.qs >> 24) | (((ch.qh >> 9) & 7u) << 8)));
    }
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2* __restrict__ grid,
                                               float (&acc)[NT]) {
        float dl, delta;
        uint2 g0, g1, g2, g3;
        decode(ch, grid, dl, delta, g0, g1, g2, g3);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const i8* xq = a.q + t * a.K + c * 32;
            const int4 xa = *(const int4*)xq;
            const int4 xb = *(const int4*)(xq + 16);
            int s = dp4((int)g0.x, xa.x, 0);
            s = dp4((int)g0.y, xa.y, s);
            s = dp4((int)g1.x, xa.z, s);
            s = dp4((int)g1.y, xa.w, s);
            s = dp4((int)g2.x, xb.x, s);
            s = dp4((int)g2.y, xb.y, s);
            s = dp4((int)g3.x, xb.z, s);
            s = dp4((int)g3.y, xb.w, s);
            const int q8 = t * (a.K >> 5) + c;
            acc[t] += dl * (a.d[q8] * (float)s + delta * a.s[q8]);
        }
    }
};

// ---- F32 / F16 / BF16 rows: float dot with float activations ------------------------------------------
struct DotFloat {
    // chunk = one value; wdt (DT_F32 / DT_BF16 / DT_F16) is the weight's element type
    struct Chunk { float w; };
    static __device__ __forceinline__ int chunks(int K) { return K; }
    static __device__ __forceinline__ Chunk load(const u8* __restrict__ row, int c, int wdt) {
        Chunk ch;
        ch.w = load_act(row, c, wdt);
        return ch;
    }
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = __fmaf_rn(ch.w, a.f[t * a.K + c], acc[t]);
    }
};

// The lane's share of dot(row, activations) for NT tokens, U chunks per lane in flight at once.
// `pre` holds chunks already loaded for this row's first group (pre_loaded = true), so a caller can
// issue the first loads before it waits for the activations.
template <typename F, int NT, int U>
__device__ __forceinline__ void load_group(const u8* __restrict__ row, int base, int n_chunks, int lane, int wdt,
                                           typename F::Chunk (&ch)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = base + 32 * u + lane;
        if (c < n_chunks) ch[u] = F::load(row, c, wdt);
    }
}

template <typename F, int NT, int U>
__device__ __forceinline__ void row_dot(const u8* __restrict__ row, int n_chunks, int lane, int wdt, const ActQ8& a,
                                        const uint2* __restrict__ grid, typename F::Chunk (&ch)[U], bool pre_loaded,
                                        float (&acc)[NT]) {
    for (int base = 0; base < n_chunks; base += 32 * U) {
        if (base > 0 || !pre_loaded) load_group<F, NT, U>(row, base, n_chunks, lane, wdt, ch);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = base + 32 * u + lane;
            if (c < n_chunks) F::template dot<NT>(ch[u], c, a, grid, acc);
        }
    }
}
