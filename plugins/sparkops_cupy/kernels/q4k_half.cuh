// q4k_half.cuh: one lane's share of a Q4_K super-block dotted with activations in packed half2 arithmetic (two
// weights an instruction), for the half form of the one-token Q4_K GEMV (linear_rowwarp.cu's rowhc).
//
// Why. Session 15's counters (bench/GPU-PROBES.md) found the float32 row-warp GEMVs bound by instruction issue: a
// code costs a PRMT and an FADD to become a float, then an FFMA. Here one LOP3 makes two codes of a 32-bit word into
// fp16 1024 + q (the codes land in the low mantissa bits of 0x6400), one HFMA2 takes away the 1024, and one HFMA2
// multiplies and adds both: ~1.75 instructions a weight in the inner loop against ~3.6.
//
// The lane layout is the octet form's (q4k_rows.cuh): lane o of an octet owns qs bytes 16o..16o+15 of a super-block,
// sub-block pair j = o / 2, positions p = 16(o % 2) + 0..15: low nibbles are sub-block 2j's, high nibbles 2j + 1's.
// Word k (bytes 4k..4k+3) holds positions 4k + n, n = 0..3; the LOP3 on the word takes bytes 0 and 2 (n = 0, 2), on the
// word shifted by 8 bytes 1 and 3.
//
// Arithmetic. The activations are staged as fp16 after scaling by 2^s, with s chosen per block so that the largest
// magnitude is below 256: a partial sum holds 8 products of codes <= 15, so it stays below 30720 (fp16's largest finite
// value is 65504), and small activations stay out of fp16's subnormals. A lane's two half2 sums are taken to float32
// once a super-block, multiplied by the scale, d * sc and 2^-s (a power of two: exact). The min term uses the sums of
// 16 activations in float32, unscaled. The products and partial sums round to fp16 (11 bits): a bf16 claim.
#pragma once
#include "q4k_rows.cuh"

// fp16x2 d = a * b + c (one rounding a half)
__device__ __forceinline__ u32 h2_fma(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// the two halves of a half2, added in float32
__device__ __forceinline__ float h2_sum(u32 a) { return f16_to_f32((u16)(a & 0xffffu)) + f16_to_f32((u16)(a >> 16)); }

// (a & MASK) | c in one LOP3 (the compiler, given the magic as an immediate, splits it into an AND and an OR)
template <u32 MASK>
__device__ __forceinline__ u32 h2_codes(u32 a, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(MASK), "r"(c));
    return d;
}

// two floats as a half2 (round to nearest even), the first in the low half
__device__ __forceinline__ u32 h2_pack(float lo, float hi) { return (u32)f32_to_f16(lo) | ((u32)f32_to_f16(hi) << 16); }

#define H2_ONE 0x3C003C00u       // 1.0, 1.0
#define H2_MINUS_1024 0xE400E400u  // -1024, -1024
#define H2_SIXTEENTH 0x2C002C00u  // 1/16, 1/16
#define H2_MINUS_64 0xD400D400u    // -64, -64
#define H2_MAGIC 0x64006400u       // 1024, 1024: a code OR'd into the low mantissa bits is 1024 + code

// The slot of lane o's word k of super-block sb in the staged activations (uint4 slots): the 8 lanes of an octet read 8
// consecutive slots for the same k, one 128-byte wavefront.
__device__ __forceinline__ int rh_slot(int sb, int o, int k) { return sb * 32 + k * 8 + o; }

// 2^e as a float (e in -126..127)
__device__ __forceinline__ float rh_pow2(int e) { return __int_as_float((e + 127) << 23); }

// Lane o's 16 low and 16 high values of super-block sb (unit u = 8 sb + o) of x [K] as float32: 32 loads issued
// together
template <int DT>
__device__ __forceinline__ void rh_load_unit(const void* __restrict__ x, int u, float (&a)[16], float (&b)[16]) {
    const int sb = u >> 3, o = u & 7;
    const i64 lo = (i64)sb * 256 + 64 * (o >> 1) + 16 * (o & 1), hi = lo + 32;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
        a[n] = load_act(x, lo + n, DT);
        b[n] = load_act(x, hi + n, DT);
    }
}

// m and the largest |value| of a unit (NaN is passed over, as fmaxf does)
__device__ __forceinline__ float rh_absmax(const float (&a)[16], const float (&b)[16], float m) {
#pragma unroll
    for (int n = 0; n < 16; ++n) m = fmaxf(m, fmaxf(fabsf(a[n]), fabsf(b[n])));
    return m;
}

// Unit u's 4 word slots (rh_slot) as 4 half2 of x * f - [lo p, lo p+2], [lo p+1, lo p+3], [hi p, hi p+2],
// [hi p+1, hi p+3], p = 4k - and its two float32 sums of 16 (unscaled, added in order)
__device__ __forceinline__ void rh_store_unit(int u, const float (&a)[16], const float (&b)[16], float f,
                                              uint4* __restrict__ shx, float* __restrict__ ssum) {
    const int sb = u >> 3, o = u & 7;
    float ta = 0.0f, tb = 0.0f;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
        ta += a[n];
        tb += b[n];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k)
        shx[rh_slot(sb, o, k)] = make_uint4(h2_pack(a[4 * k] * f, a[4 * k + 2] * f),
                                            h2_pack(a[4 * k + 1] * f, a[4 * k + 3] * f),
                                            h2_pack(b[4 * k] * f, b[4 * k + 2] * f),
                                            h2_pack(b[4 * k + 1] * f, b[4 * k + 3] * f));
    const int lo16 = sb * 16 + 4 * (o >> 1) + (o & 1);  // (sb * 256 + 64 (o / 2) + 16 (o % 2)) / 16
    ssum[lo16] = ta;
    ssum[lo16 + 2] = tb;
}

// The scale exponent s of the block's largest |x| = m (each thread's share, reduced here: one barrier): the largest
// |x| times 2^s is below 256. red: 32 floats of shared memory.
__device__ __forceinline__ int rh_block_scale(float m, float* red) {
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
    if (!(m > 0.0f) || m > 3.0e38f) return 0;  // zeros, inf or NaN: unscaled (they propagate as they would)
    const int e = ((__float_as_uint(m) >> 23) & 0xff) - 127;  // m = 1.f * 2^e (a subnormal m counts as 2^-127)
    return min(max(7 - e, -100), 100);
}

// Stage x [K] (dtype DT) for rh_block and return the scale exponent s: a unit (rh_load_unit) a thread at a time, each
// activation read once where the block has a thread for every unit (K <= 32 * blockDim: the 48B's 2304 inputs), twice
// beyond. The units' values are held in registers across the scale's barrier, so the loads are issued together and
// not behind the reduction (session 16: a first pass of its own, a strided loop of dependent loads, cost the form
// ~6 us). Every thread takes part; the caller synchronizes before reading.
template <int DT>
__device__ __forceinline__ int rh_stage(const void* __restrict__ x, int K, float* red, uint4* __restrict__ shx,
                                        float* __restrict__ ssum) {
    const int units = K >> 5, first = threadIdx.x;
    const bool held = first < units;
    float a[16], b[16], m = 0.0f;
    for (int u = first + blockDim.x; u < units; u += blockDim.x) {  // beyond the block's first units: max only
        float c[16], d[16];
        rh_load_unit<DT>(x, u, c, d);
        m = rh_absmax(c, d, m);
    }
    if (held) {
        rh_load_unit<DT>(x, first, a, b);
        m = rh_absmax(a, b, m);
    }
    const int s = rh_block_scale(m, red);
    const float f = rh_pow2(s);
    if (held) rh_store_unit(first, a, b, f, shx, ssum);
    for (int u = first + blockDim.x; u < units; u += blockDim.x) {
        float c[16], d[16];
        rh_load_unit<DT>(x, u, c, d);
        rh_store_unit(u, c, d, f, shx, ssum);
    }
    return s;
}

// One lane's share of one super-block from the staged half2 activations: d*sc * sum(q x) - dmin*m * sum(x). shx: the
// staged slots (rh_slot), ssb: the super-block's 16 sums, inv: 2^-s.
__device__ __forceinline__ float rh_block(uint4 h, uint4 q, const uint4* __restrict__ shx, int sb, int o,
                                          const float* __restrict__ ssb, const RoLane& l, float inv) {
    const RoScales f = ro_scales(h, l);
    const u32 w[4] = {q.x, q.y, q.z, q.w};
    u32 al = 0u, ah = 0u;  // half2 sums of q x: low nibbles, high nibbles
    u32 magic;
    asm("mov.b32 %0, %1;" : "=r"(magic) : "n"(H2_MAGIC));  // a register, so each LOP3 takes its mask as the immediate
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint4 xv = shx[rh_slot(sb, o, k)];
        const u32 w8 = w[k] >> 8;
        const u32 l02 = h2_fma(h2_codes<0x000F000Fu>(w[k], magic), H2_ONE, H2_MINUS_1024);  // codes at n = 0, 2
        const u32 l13 = h2_fma(h2_codes<0x000F000Fu>(w8, magic), H2_ONE, H2_MINUS_1024);    // n = 1, 3
        const u32 h02 = h2_fma(h2_codes<0x00F000F0u>(w[k], magic), H2_SIXTEENTH, H2_MINUS_64);  // (1024 + 16q)/16 - 64
        const u32 h13 = h2_fma(h2_codes<0x00F000F0u>(w8, magic), H2_SIXTEENTH, H2_MINUS_64);
        al = h2_fma(l02, xv.x, al);
        al = h2_fma(l13, xv.y, al);
        ah = h2_fma(h02, xv.z, ah);
        ah = h2_fma(h13, xv.w, ah);
    }
    return f.ds0 * (h2_sum(al) * inv) - f.dm0 * ssb[l.s16] + (f.ds1 * (h2_sum(ah) * inv) - f.dm1 * ssb[l.s16 + 2]);
}

// The half copy form's walk of one row r already in shared memory (nsb super-blocks), summed over the octet: every
// lane of the octet ends with the row's dot product.
__device__ __forceinline__ float rh_copied_row(const u8* r, int nsb, int o, const uint4* __restrict__ shx,
                                               const float* __restrict__ ssum, float inv) {
    const RoLane lp = ro_lane(o);
    float acc = 0.0f;
    for (int sb = 0; sb < nsb; ++sb) {
        const uint4* b = (const uint4*)(r + sb * 144);
        acc += rh_block(b[0], b[1 + o], shx, sb, o, ssum + 16 * sb, lp, inv);
    }
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    return acc;
}
