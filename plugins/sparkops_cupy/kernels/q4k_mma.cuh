// q4k_mma.cuh: a 16-row tile of Q4_K weights times one token on the tensor cores (mma.sync m16n8k16, bf16 in, float32
// out), a super-block at a time, for linear_mma.cu and moe_mma.cu. The layout and the arithmetic are described at
// the top of linear_mma.cu.
#pragma once
#include "q4k_rows.cuh"

// two codes (bytes sel's 0 and 2 of w, low nibbles) as the bfloat16 pair (128 + q0, 128 + q1)
__device__ __forceinline__ u32 mma_pair(u32 w, u32 sel) {
    const u32 p = __byte_perm(w, 0u, sel);
    return (p & 0x000F000Fu) | 0x43004300u;
}

// C += A B on the tensor cores (bf16 operands, float32 accumulation)
__device__ __forceinline__ void mma_bf16(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Stage activations x [K] (dtype DT; K a multiple of 32) in shared memory as bfloat16, with the float32 sum of each
// 32 of the rounded values (what the 128 offset and the min term multiply). Every thread takes part; the caller
// synchronizes before reading.
template <int DT>
__device__ __forceinline__ void mma_stage(const void* __restrict__ x, int K, u16* __restrict__ xs,
                                          float* __restrict__ sums) {
    for (int i = threadIdx.x; i < (K >> 5); i += blockDim.x) {
        float v[16];
        float s = 0.0f;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            rw_load16<DT>(x, 32 * (i64)i + 16 * half, v);
#pragma unroll
            for (int k = 0; k < 16; ++k) {
                const u16 b = f32_to_bf16(v[k]);
                xs[32 * i + 16 * half + k] = b;
                s += bf16_to_f32(b);
            }
        }
        sums[i] = s;
    }
}

// One super-block of a 16-row tile: bg and b8 point at rows g's and g + 8's super-block (its header), xsb at its 256
// staged activations, sb8 at their 8 sums. Adds mult * (the super-block's dot) to acc_g and acc_g8 in the lanes
// with t = 0 (the others' are left as they were). Every lane of the warp must call it (mma.sync is warp-wide).
__device__ __forceinline__ void mma_superblock(const u8* bg, const u8* b8, const u16* __restrict__ xsb,
                                               const float* __restrict__ sb8, float mult, float& acc_g,
                                               float& acc_g8) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    u32 wg[4][2], w8[4][2];
#pragma unroll
    for (int j = 0; j < 4; ++j)  // every code of the super-block first: word 4h + t of group j, rows g and g + 8
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            wg[j][h] = *(const u32*)(bg + 16 + 32 * j + 4 * (4 * h + t));
            w8[j][h] = *(const u32*)(b8 + 16 + 32 * j + 4 * (4 * h + t));
        }
    float c[8][4];
#pragma unroll
    for (int s = 0; s < 8; ++s) c[s][0] = c[s][1] = c[s][2] = c[s][3] = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int n = 0; n < 2; ++n)  // the low nibbles: sub-block 2j; the high: 2j + 1
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 a = n ? wg[j][h] >> 4 : wg[j][h], b = n ? w8[j][h] >> 4 : w8[j][h];
                u32 b0 = 0u, b1 = 0u;
                if (g == 0) {  // the token: B's column 0
                    const u32* xp = (const u32*)(xsb + 64 * j + 32 * n + 16 * h + 4 * t);
                    b0 = xp[0];
                    b1 = xp[1];
                }
                mma_bf16(c[2 * j + n], mma_pair(a, 0x4140u), mma_pair(b, 0x4140u), mma_pair(a, 0x4342u),
                         mma_pair(b, 0x4342u), b0, b1);
            }
    if (t == 0) {  // the scales, once a sub-block: row g from c0, row g + 8 from c2
        const uint4 hg = *(const uint4*)bg, h8 = *(const uint4*)b8;
        const float dg = f16_to_f32((u16)(hg.x & 0xffffu)), mg = f16_to_f32((u16)(hg.x >> 16));
        const float d8 = f16_to_f32((u16)(h8.x & 0xffffu)), m8 = f16_to_f32((u16)(h8.x >> 16));
        float sum_g = 0.0f, sum_8 = 0.0f;
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const float S = sb8[s];
            float sc, mn;
            rw_scale_min(hg.y, hg.z, hg.w, s, sc, mn);
            sum_g += (dg * sc) * (c[s][0] - 128.0f * S) - (mg * mn) * S;
            rw_scale_min(h8.y, h8.z, h8.w, s, sc, mn);
            sum_8 += (d8 * sc) * (c[s][2] - 128.0f * S) - (m8 * mn) * S;
        }
        acc_g += mult * sum_g;
        acc_g8 += mult * sum_8;
    }
}

// mma_superblock with each sub-block's scales applied right after its two MMAs, so only one C fragment is live at a
// time (4 registers, not 32: the pipelined forms run 16 warps a block within 64 registers). The same products, the
// same per-sub-block formula, the same order of the sums (sub-blocks 0..7) and the same mult as mma_superblock: the
// same bits. bg and b8 may point into shared memory (the pipelined forms) or global memory.
__device__ __forceinline__ void mma_superblock_lean(const u8* bg, const u8* b8, const u16* __restrict__ xsb,
                                                    const float* __restrict__ sb8, float mult, float& acc_g,
                                                    float& acc_g8) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint4 hg = make_uint4(0u, 0u, 0u, 0u), h8 = hg;
    if (t == 0) {
        hg = *(const uint4*)bg;
        h8 = *(const uint4*)b8;
    }
    const float dg = f16_to_f32((u16)(hg.x & 0xffffu)), mg = f16_to_f32((u16)(hg.x >> 16));
    const float d8 = f16_to_f32((u16)(h8.x & 0xffffu)), m8 = f16_to_f32((u16)(h8.x >> 16));
    float sum_g = 0.0f, sum_8 = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        u32 wg[2], w8[2];  // word 4h + t of group j, rows g and g + 8
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            wg[h] = *(const u32*)(bg + 16 + 32 * j + 4 * (4 * h + t));
            w8[h] = *(const u32*)(b8 + 16 + 32 * j + 4 * (4 * h + t));
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {  // the low nibbles: sub-block 2j; the high: 2j + 1
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 a = n ? wg[h] >> 4 : wg[h], b = n ? w8[h] >> 4 : w8[h];
                u32 b0 = 0u, b1 = 0u;
                if (g == 0) {  // the token: B's column 0
                    const u32* xp = (const u32*)(xsb + 64 * j + 32 * n + 16 * h + 4 * t);
                    b0 = xp[0];
                    b1 = xp[1];
                }
                __syncwarp();
                mma_bf16(c, mma_pair(a, 0x4140u), mma_pair(b, 0x4140u), mma_pair(a, 0x4342u), mma_pair(b, 0x4342u),
                         b0, b1);
            }
            if (t == 0) {  // sub-block s's scales: row g from c0, row g + 8 from c2
                const int s = 2 * j + n;
                const float S = sb8[s];
                float sc, mn;
                rw_scale_min(hg.y, hg.z, hg.w, s, sc, mn);
                sum_g += (dg * sc) * (c[0] - 128.0f * S) - (mg * mn) * S;
                rw_scale_min(h8.y, h8.z, h8.w, s, sc, mn);
                sum_8 += (d8 * sc) * (c[2] - 128.0f * S) - (m8 * mn) * S;
            }
        }
    }
    if (t == 0) {
        acc_g += mult * sum_g;
        acc_g8 += mult * sum_8;
    }
}

// wait until at most n of this thread's cp.async groups are in flight (n clamped to 7: waiting for more is safe)
__device__ __forceinline__ void cp_async_wait_pending(int n) {
    switch (n < 7 ? n : 7) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        case 3: cp_async_wait<3>(); break;
        case 4: cp_async_wait<4>(); break;
        case 5: cp_async_wait<5>(); break;
        case 6: cp_async_wait<6>(); break;
        default: cp_async_wait<7>(); break;
    }
}
