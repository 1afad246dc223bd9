// iq1s_q8.cuh: IQ1_S rows dotted with activations quantized to Q8 in shared memory, by __dp4a - the one-token IQ1_S
// Q8 kernels' shared piece (linear_iq1s_q8.cu's GEMV and moe_iq1s_q8.cu's experts, written in session 50). x is
// quantized once a block by q4k_q8.cuh's q8_stage to blocks of 32 (an IQ1_S sub-block is one such block), and each
// lane dots its 32 weights of a super-block: 4 rows of the IQ1_S grid by 8 __dp4a, the delta term against the block's
// sum of codes (llama.cpp's vec_dot_iq1_s_q8_K takes it against the quantized block sums too). The claim is act_q8's.
//
// IQ1_S (50 bytes a super-block of 256, sparkops/gguf/quants.py): fp16 d | qs[32] | u16 qh[8]. Sub-block s of 32
// weights: scale d * (2 * ((qh[s] >> 12) & 7) + 1), delta -1/8 where qh[s] bit 15 is set, else +1/8; its group l of 8
// weights is grid row qs[4 s + l] | ((qh[s] >> 3 l) & 7) << 8; weight = scale * (grid value + delta).
//
// The grid lives in one of two places, chosen by the pointer's type (each function below takes either):
// - `const uint2*`: global memory, 2048 rows of 8 int8 values (the session-50 kernels). Four rows a lane a sub-block
//   are gathered through L1, and a warp's gather of 32 random rows touches ~25 of the table's 128 cache lines, one L1
//   wavefront each: Nsight Compute put the session-50 GEMV at 67% L1/TEX throughput and 11% of DRAM.
// - `const u32*`: shared memory, the "nibble grid" (session 51): 2048 words of 8 values g + 1 (0, 1, 2) in 4 bits each,
//   byte k holding value k in its low nibble and value k + 4 in its high one, so that w & 0x0f0f0f0f and (w >> 4) &
//   0x0f0f0f0f are a grid row's two halves as __dp4a operands; 8 KB staged by cp.async with a block's rows (before
//   its PDL wait: the table is a constant). A warp's gather is then one shared-memory request over 32 banks. The dot
//   is sum (g + 1) x = sum g x + sum x, so the delta term is taken as delta - 1 against the code sum: every partial sum
//   is exact in float either way (multiples of 1/8 under 2^16), so both give the same bits.
#pragma once
#include "q4k_q8.cuh"

#define IQ1S_SBB 50
// bytes of the nibble grid (2048 u32)
#define IQ1S_NIB_BYTES 8192

// sum over a sub-block's 32 weights of grid value x code: the 4 grid rows its qs (4 bytes) and qh (3 bits each) name,
// 8 __dp4a against the 32 codes xa | xb
__device__ __forceinline__ int iq1s_grid_dot(u32 qs, u32 qh, int4 xa, int4 xb, const uint2* __restrict__ grid) {
    const uint2 g0 = __ldg(grid + ((qs & 255u) | ((qh & 7u) << 8)));
    const uint2 g1 = __ldg(grid + (((qs >> 8) & 255u) | (((qh >> 3) & 7u) << 8)));
    const uint2 g2 = __ldg(grid + (((qs >> 16) & 255u) | (((qh >> 6) & 7u) << 8)));
    const uint2 g3 = __ldg(grid + ((qs >> 24) | (((qh >> 9) & 7u) << 8)));
    int s = __dp4a((int)g0.x, xa.x, 0);
    s = __dp4a((int)g0.y, xa.y, s);
    s = __dp4a((int)g1.x, xa.z, s);
    s = __dp4a((int)g1.y, xa.w, s);
    s = __dp4a((int)g2.x, xb.x, s);
    s = __dp4a((int)g2.y, xb.y, s);
    s = __dp4a((int)g3.x, xb.z, s);
    return __dp4a((int)g3.y, xb.w, s);
}

// the same sum from the nibble grid in shared memory (the header's comment): sum over the 32 weights of (grid value +
// 1) x code
__device__ __forceinline__ int iq1s_grid_dot(u32 qs, u32 qh, int4 xa, int4 xb, const u32* sgrid) {
    const u32 g0 = sgrid[(qs & 255u) | ((qh & 7u) << 8)];
    const u32 g1 = sgrid[((qs >> 8) & 255u) | (((qh >> 3) & 7u) << 8)];
    const u32 g2 = sgrid[((qs >> 16) & 255u) | (((qh >> 6) & 7u) << 8)];
    const u32 g3 = sgrid[(qs >> 24) | (((qh >> 9) & 7u) << 8)];
    int s = __dp4a((int)(g0 & 0x0f0f0f0fu), xa.x, 0);
    s = __dp4a((int)((g0 >> 4) & 0x0f0f0f0fu), xa.y, s);
    s = __dp4a((int)(g1 & 0x0f0f0f0fu), xa.z, s);
    s = __dp4a((int)((g1 >> 4) & 0x0f0f0f0fu), xa.w, s);
    s = __dp4a((int)(g2 & 0x0f0f0f0fu), xb.x, s);
    s = __dp4a((int)((g2 >> 4) & 0x0f0f0f0fu), xb.y, s);
    s = __dp4a((int)(g3 & 0x0f0f0f0fu), xb.z, s);
    return __dp4a((int)((g3 >> 4) & 0x0f0f0f0fu), xb.w, s);
}

// the delta a grid dot's sum is offset by: +-1/8 from the global grid (values g), one less from the nibble grid (g + 1)
__device__ __forceinline__ float iq1s_delta(u32 qh, const uint2*) { return (qh & 0x8000u) ? -0.125f : 0.125f; }
__device__ __forceinline__ float iq1s_delta(u32 qh, const u32*) { return (qh & 0x8000u) ? -1.125f : -0.875f; }

// a sub-block's value from its integer dot s, the fp16 super-block scale d, its qh, the activations' block scale dq and
// code sum sq: d (2 k + 1) dq (s + delta sq), where s + delta sq, a multiple of 1/8 of magnitude under 2^16, is exact in
// float (so the same from either grid)
__device__ __forceinline__ float iq1s_scaled(int s, float d, u32 qh, float dq, int sq, float delta) {
    const float dl = d * (float)(2 * ((qh >> 12) & 7u) + 1);
    return dl * dq * ((float)s + delta * (float)sq);
}

// the nibble grid (2048 words in global memory, 16-byte aligned) into shared memory at sgrid by cp.async, by every
// thread of the block; the caller commits
__device__ __forceinline__ void iq1s_grid_copy(const u32* __restrict__ nib, u32* sgrid) {
    const u32 dst = smem_addr(sgrid);
    for (int c = threadIdx.x; c < IQ1S_NIB_BYTES / 16; c += blockDim.x)
        cp_async16(dst + (u32)(16 * c), (const u8*)nib + 16 * c, 16);
}

// lane o's sub-block of one super-block (at blk, in shared memory) dotted with x's staged Q8 block q (= 8 sb + o); G
// the grid's place (the header's comment)
template <typename G>
__device__ __forceinline__ float iq1s_q8_block(const u8* blk, int o, const i8* xq, const float* dx, const int* s16,
                                               int q, G grid) {
    const u32 qs = ld_u32_a2(blk + 2 + 4 * o), qh = ld_u16(blk + 34 + 2 * o);
    const int4 xa = *(const int4*)(xq + 32 * q), xb = *(const int4*)(xq + 32 * q + 16);
    return iq1s_scaled(iq1s_grid_dot(qs, qh, xa, xb, grid), ld_f16(blk), qh, dx[q], s16[2 * q] + s16[2 * q + 1],
                       iq1s_delta(qh, grid));
}

// `bytes` bytes from src (16-byte aligned) into shared memory at sw, 16 at a time by cp.async (the last chunk's tail
// zero-filled), by every thread of the block; the caller commits
__device__ __forceinline__ void iq1s_copy_range(const u8* __restrict__ src, i64 bytes, u8* sw) {
    const u32 dst = smem_addr(sw);
    for (i64 c = threadIdx.x; 16 * c < bytes; c += blockDim.x)
        cp_async16(dst + (u32)(16 * c), src + 16 * c, (int)min((i64)16, bytes - 16 * c));
}

// a row of nsb super-blocks at r (shared memory) dotted by lane o of its octet with the staged Q8 blocks from q0 on
// (the row's first input's block); the lane's share, not yet summed over the octet
template <typename G>
__device__ __forceinline__ float iq1s_q8_row(const u8* r, int nsb, int o, const i8* xq, const float* dx,
                                             const int* s16, int q0, G grid) {
    float acc = 0.0f;
    for (int sb = 0; sb < nsb; ++sb) acc += iq1s_q8_block(r + sb * IQ1S_SBB, o, xq, dx, s16, q0 + 8 * sb + o, grid);
    return acc;
}

// the octet's sum of v (lanes 8 apart are other octets' rows)
__device__ __forceinline__ float iq1s_octet_sum(float v) {
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}
