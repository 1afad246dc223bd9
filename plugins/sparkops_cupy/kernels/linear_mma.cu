// linear_mma.cu: the one-token Q4_K GEMV of decode on the tensor cores (mma.sync m16n8k16, bf16 in, float32 out).
//
// Why. Session 13's row-warp GEMVs (linear_rowwarp.cu) spend ~6.5 instructions a weight value (cuobjdump: ~210 per
// super-block per lane): for each value a byte permute, a subtraction and a float32 FMA, then per half sub-block the
// scale decode. Here a value costs about one instruction: two 4-bit codes become one bfloat16 pair 128 + q with one
// permute and one LOP3 (0x4300 | q is the bfloat16 128 + q, exactly), and the tensor core does the products and sums.
// The scales are applied once per sub-block of 32: sum((d sc q - dmin m) x) = d sc (C - 128 S) - dmin m S, where
// C = sum((128 + q) xb) is the MMA's and S = sum(xb) is staged, xb being the bfloat16 activations both use. So the
// activations are rounded to bfloat16 (the step's registries already run them in bfloat16): claim tolerance("bf16").
//
// Layout (PTX ISA, mma.m16n8k16 with .bf16: lane = 4 g + t):
//   A (16 x 16, row-major): reg0 = A[g][2t, 2t+1], reg1 = A[g+8][2t, 2t+1], reg2 = A[g][2t+8, 2t+9], reg3 = A[g+8][..]
//   B (16 x 8): reg0 = B[2t, 2t+1][g], reg1 = B[2t+8, 2t+9][g];   C (16 x 8, float): c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][..]
// The MMA's k order is ours to choose, as long as A and B agree. A tile is 16 values of one sub-block: the low (or
// high) nibbles of 16 consecutive qs bytes, half h of the sub-block pair's 32-byte group j. Lane t takes the 4 bytes
// of word 4h + t, so k = 2t, 2t+1, 2t+8, 2t+9 are its bytes 0, 1, 2, 3: inputs 16h + 4t + (0, 1, 2, 3) of the
// sub-block. B's column 0 is the token (lanes g = 0 load x at those inputs); columns 1-7 are zero, so c0 of the
// lanes with t = 0 holds row g's sum and c2 row g + 8's.
//
// A warp owns 16 rows and every fourth super-block of them (the block's 4 warps split K); the block adds the warps'
// sums in a fixed order. Shared memory: the activations as bfloat16 [K], then their sums of 32 [K / 32], then the
// warps' partial sums [4][16]. 128 threads = 16 rows a block.
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

// the 6-bit (scale, min) of sub-block s (0..7) of a header h, as floats
__device__ __forceinline__ void mma_scale_min(uint4 h, int s, float& sc, float& mn) {
    rw_scale_min(h.y, h.z, h.w, s, sc, mn);
}

template <int DT>
__device__ __forceinline__ void mma_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K,
                                         int N, void* __restrict__ y) {
    extern __shared__ __align__(16) u8 mm_smem[];
    u16* xs = (u16*)mm_smem;                           // [K] bfloat16 activations
    float* sums = (float*)(mm_smem + 2 * (i64)K);      // [K / 32] their sums, per sub-block
    float* part = sums + (K >> 5);                     // [4][16] the warps' row sums
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    for (int i = tid; i < (K >> 5); i += blockDim.x) {  // 32 activations a thread: rounded to bf16, and their sum
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
    __syncthreads();
    const i64 r0 = (i64)blockIdx.x * 16;
    const i64 rg = r0 + g, rg8 = r0 + g + 8;
    const u8* pg = w + min(rg, (i64)N - 1) * row_bytes;  // rows past the end read row N - 1; nothing is written
    const u8* p8 = w + min(rg8, (i64)N - 1) * row_bytes;
    const int nsb = K >> 8;
    float acc_g = 0.0f, acc_g8 = 0.0f;  // meaningful in the lanes with t = 0
    for (int sb = warp; sb < nsb; sb += 4) {
        const u8* qg = pg + (i64)sb * 144 + 16;
        const u8* q8 = p8 + (i64)sb * 144 + 16;
        u32 wg[4][2], w8[4][2];
#pragma unroll
        for (int j = 0; j < 4; ++j)  // every code of the super-block first: word 4h + t of group j, rows g and g + 8
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                wg[j][h] = *(const u32*)(qg + 32 * j + 4 * (4 * h + t));
                w8[j][h] = *(const u32*)(q8 + 32 * j + 4 * (4 * h + t));
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
                    if (g == 0) {
                        const u32* xp = (const u32*)(xs + sb * 256 + 64 * j + 32 * n + 16 * h + 4 * t);
                        b0 = xp[0];
                        b1 = xp[1];
                    }
                    mma_bf16(c[2 * j + n], mma_pair(a, 0x4140u), mma_pair(b, 0x4140u), mma_pair(a, 0x4342u),
                             mma_pair(b, 0x4342u), b0, b1);
                }
        if (t == 0) {  // the scales, once a sub-block: row g from c0, row g + 8 from c2
            const uint4 hg = *(const uint4*)(pg + (i64)sb * 144), h8 = *(const uint4*)(p8 + (i64)sb * 144);
            const float dg = f16_to_f32((u16)(hg.x & 0xffffu)), mg = f16_to_f32((u16)(hg.x >> 16));
            const float d8 = f16_to_f32((u16)(h8.x & 0xffffu)), m8 = f16_to_f32((u16)(h8.x >> 16));
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                const float S = sums[sb * 8 + s];
                float sc, mn;
                mma_scale_min(hg, s, sc, mn);
                acc_g += (dg * sc) * (c[s][0] - 128.0f * S) - (mg * mn) * S;
                mma_scale_min(h8, s, sc, mn);
                acc_g8 += (d8 * sc) * (c[s][2] - 128.0f * S) - (m8 * mn) * S;
            }
        }
    }
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    __syncthreads();
    if (tid < 16 && r0 + tid < N)  // the warps' sums in a fixed order
        store_act(y, r0 + tid, DT, ((part[tid] + part[16 + tid]) + part[32 + tid]) + part[48 + tid]);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_mma_f32(const void* __restrict__ x,
                                                                     const u8* __restrict__ w, i64 row_bytes, int K,
                                                                     int N, void* __restrict__ y) {
    mma_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_mma_bf16(const void* __restrict__ x,
                                                                      const u8* __restrict__ w, i64 row_bytes, int K,
                                                                      int N, void* __restrict__ y) {
    mma_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_mma_f16(const void* __restrict__ x,
                                                                     const u8* __restrict__ w, i64 row_bytes, int K,
                                                                     int N, void* __restrict__ y) {
    mma_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}
