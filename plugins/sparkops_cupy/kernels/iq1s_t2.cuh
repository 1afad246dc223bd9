// iq1s_t2.cuh: IQ1_S rows repacked two bits a weight (sparkops_cupy/_iq1s_t2.py's "t2" layout, 72 bytes a super-block:
// fp16 d, a u32 of the sub-blocks' scale nibbles, 8 bytes of codes g + 1 a sub-block) dotted with activations quantized
// to Q8 by __dp4a, reading no grid (session 51, after the shared-grid kernels stayed bound by their gathers). A
// sub-block's codes are two words, weights 0-15 and 16-31, byte k of a word holding weights 4 m + k in bits 2 m, so
// (word >> 2 m) & 0x03030303 are weights 4 m .. 4 m + 3 as __dp4a's bytes. The integer sum is the nibble grid's, sum
// (g + 1) x, added in the same order, and scaled by iq1s_q8.cuh's iq1s_scaled with the same delta - 1: the same bits as
// the shared-grid kernels.
#pragma once
#include "iq1s_q8.cuh"

#define IQ1S_T2_SBB 72

// sum over a sub-block's 32 weights of code (g + 1) x activation code: w its two words, xa | xb its 32 Q8 codes
__device__ __forceinline__ int iq1s_t2_dot(uint2 w, int4 xa, int4 xb) {
    int s = __dp4a((int)(w.x & 0x03030303u), xa.x, 0);
    s = __dp4a((int)((w.x >> 2) & 0x03030303u), xa.y, s);
    s = __dp4a((int)((w.x >> 4) & 0x03030303u), xa.z, s);
    s = __dp4a((int)((w.x >> 6) & 0x03030303u), xa.w, s);
    s = __dp4a((int)(w.y & 0x03030303u), xb.x, s);
    s = __dp4a((int)((w.y >> 2) & 0x03030303u), xb.y, s);
    s = __dp4a((int)((w.y >> 4) & 0x03030303u), xb.z, s);
    return __dp4a((int)((w.y >> 6) & 0x03030303u), xb.w, s);
}

// lane o's sub-block of one t2 super-block (at blk, in shared memory) against Q8 codes xc (32 of them, 16-byte
// aligned), their block scale dq and code sum sq: iq1s_q8_block's value
__device__ __forceinline__ float iq1s_t2_value(const u8* blk, int o, const i8* xc, float dq, int sq) {
    const uint2 w = *(const uint2*)(blk + 8 + 8 * o);
    const u32 nib = (*(const u32*)(blk + 4) >> (4 * o)) & 15u;  // IQ1_S's qh >> 12
    const int4 xa = *(const int4*)xc, xb = *(const int4*)(xc + 16);
    return iq1s_scaled(iq1s_t2_dot(w, xa, xb), ld_f16(blk), nib << 12, dq, sq, (nib & 8u) ? -1.125f : -0.875f);
}
