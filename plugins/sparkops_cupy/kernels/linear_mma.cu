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
// warps' partial sums [4][16]. 128 threads = 16 rows a block. The tile's arithmetic is q4k_mma.cuh's (moe_mma.cu
// shares it).
#include "q4k_mma.cuh"

template <int DT>
__device__ __forceinline__ void mma_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K,
                                         int N, void* __restrict__ y) {
    extern __shared__ __align__(16) u8 mm_smem[];
    u16* xs = (u16*)mm_smem;                           // [K] bfloat16 activations
    float* sums = (float*)(mm_smem + 2 * (i64)K);      // [K / 32] their sums, per sub-block
    float* part = sums + (K >> 5);                     // [4][16] the warps' row sums
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    mma_stage<DT>(x, K, xs, sums);
    __syncthreads();
    const i64 r0 = (i64)blockIdx.x * 16;
    const u8* pg = w + min(r0 + g, (i64)N - 1) * row_bytes;  // rows past the end read row N - 1; nothing is written
    const u8* p8 = w + min(r0 + g + 8, (i64)N - 1) * row_bytes;
    float acc_g = 0.0f, acc_g8 = 0.0f;  // meaningful in the lanes with t = 0
    for (int sb = warp; sb < (K >> 8); sb += 4)
        mma_superblock(pg + (i64)sb * 144, p8 + (i64)sb * 144, xs + 256 * sb, sums + 8 * sb, 1.0f, acc_g, acc_g8);
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    __syncthreads();
    if (tid < 16 && r0 + tid < N)  // the warps' sums in a fixed order
        store_act(y, r0 + tid, DT, ((part[tid] + part[16 + tid]) + part[32 + tid]) + part[48 + tid]);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) linear_q4_k_mma_f32(const void* __restrict__ x,
                                                                     const u8* __restrict__ w, i64 row_bytes, int K,
                                                                     int N, void* __restrict__ y) {
    mma_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) linear_q4_k_mma_bf16(const void* __restrict__ x,
                                                                      const u8* __restrict__ w, i64 row_bytes, int K,
                                                                      int N, void* __restrict__ y) {
    mma_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) linear_q4_k_mma_f16(const void* __restrict__ x,
                                                                     const u8* __restrict__ w, i64 row_bytes, int K,
                                                                     int N, void* __restrict__ y) {
    mma_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}

// The pipelined form ("pipe"). Nsight Compute on the form above (session 14, 12288 x 2304): 12.9 us, DRAM at 26% and
// the SM at 50%, 4.4 warps a scheduler: neither bound, each warp in turn waiting on its weights, then decoding them.
// The grid holds 23 warps an SM, and a warp's super-blocks arrive one round trip after another. Here each warp first
// requests every super-block it owns of the tile's 16 rows into shared memory (cp.async, one group a super-block),
// then the activations are staged, then the warp decodes each super-block as soon as its group has landed: the loads
// of the whole tile are in flight at once, as a plain read's are, and decoding overlaps the rest of the transfer. WARPS
// warps a block split K (4, 8 or 16: enough that the grid holds ~16 warps an SM at 2304 rows as at 12288), within 64
// registers (mma_superblock_lean). Shared memory: the tile's 16 rows (each padded to an odd number of 16-byte words so
// the 8 rows a fragment read touches fall in 8 different bank groups), the bf16 activations, their sums of 32, and the
// warps' row sums [WARPS][16].
template <int DT, int WARPS>
__device__ __forceinline__ void mmapipe_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                             int K, int N, void* __restrict__ y) {
    extern __shared__ __align__(16) u8 mm_smem[];
    const int nsb = K >> 8;
    const int stride = (int)row_bytes + ((nsb & 1) ? 0 : 16);  // bytes a staged row: an odd number of 16-byte words
    u8* sw = mm_smem;                                          // [16][stride] the tile's weights
    u16* xs = (u16*)(mm_smem + 16 * stride);                   // [K] bfloat16 activations
    float* sums = (float*)(xs + K);                            // [K / 32] their sums, per sub-block
    float* part = sums + (K >> 5);                             // [WARPS][16] the warps' row sums
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const i64 r0 = (i64)blockIdx.x * 16;
    const int rows = (int)min((i64)16, (i64)N - r0);
    const u32 dst = smem_addr(sw);
    int mine = 0;  // this warp's super-blocks: warp, warp + WARPS, ...; one cp.async group each
    for (int sb = warp; sb < nsb; sb += WARPS, ++mine) {
        for (int c = lane; c < 16 * 9; c += 32) {  // 16 rows x 9 16-byte words; rows past the end copy the last row
            const int r = c / 9, k = c - 9 * r;
            const u8* src = w + (r0 + min(r, rows - 1)) * row_bytes + (i64)sb * 144 + 16 * k;
            cp_async16(dst + r * stride + sb * 144 + 16 * k, src, 16);
        }
        cp_async_commit();
    }
    mma_stage<DT>(x, K, xs, sums);  // while the weights are in flight
    __syncthreads();
    float acc_g = 0.0f, acc_g8 = 0.0f;  // meaningful in the lanes with t = 0
    int done = 0;
    for (int sb = warp; sb < nsb; sb += WARPS, ++done) {
        cp_async_wait_pending(mine - 1 - done);  // this super-block's group has landed (for this lane's copies)
        __syncwarp();                            // and every lane's copies are visible to the warp
        mma_superblock_lean(sw + g * stride + sb * 144, sw + (g + 8) * stride + sb * 144, xs + 256 * sb,
                            sums + 8 * sb, 1.0f, acc_g, acc_g8);
    }
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    __syncthreads();
    if (tid < rows) {  // the warps' sums in a fixed order
        float s = part[tid];
#pragma unroll
        for (int v = 1; v < WARPS; ++v) s += part[v * 16 + tid];
        store_act(y, r0 + tid, DT, s);
    }
}


// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) linear_q4_k_mmapipe4_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_F32, 4>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) linear_q4_k_mmapipe4_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_BF16, 4>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) linear_q4_k_mmapipe4_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_F16, 4>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) linear_q4_k_mmapipe8_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_F32, 8>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) linear_q4_k_mmapipe8_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_BF16, 8>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) linear_q4_k_mmapipe8_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_F16, 8>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512, 2) linear_q4_k_mmapipe16_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_F32, 16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512, 2) linear_q4_k_mmapipe16_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_BF16, 16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512, 2) linear_q4_k_mmapipe16_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    mmapipe_q4_k<DT_F16, 16>(x, w, row_bytes, K, N, y);
}
