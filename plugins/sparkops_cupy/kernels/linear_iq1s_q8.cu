// linear_iq1s_q8.cu: the one-token IQ1_S GEMV on Q8 activations ("cupy_rowwarp_pdl_q8_iq1s", written in session 50).
//
// Why. The IQ1_S step runs its GEMVs on cupy_float's float-activation kernel (the Q4_K GEMVs of the step pass every
// other type there by their stated policy), a form the Q4_K ladder left behind in sessions 13-27: a half-warp a row
// with float x, ~45 instructions for 32 weights (plugins/sparkops_cupy/NOTES.md). At 131072 the IQ1_S step runs
// 317.4 tok/s against Q4_K's 490.9 (H200, session 43) though its weights are a third of the bytes. This is the
// form that won for Q4_K (rowq8_q4_k in linear_rowwarp.cu): the block's 16 rows copied into shared memory before the
// PDL wait, x quantized once a block to Q8 blocks of 32 (q4k_q8.cuh's q8_stage), an octet a row, each lane one
// 32-weight sub-block of each super-block: 4 grid rows (8 values of -1, 0, 1 each) by 8 __dp4a against the sub-block's
// Q8 block, the delta term from the block's sum of codes. The claim is act_q8's (llama.cpp's arithmetic for IQ1_S
// times Q8: its vec_dot_iq1_s_q8_K also takes the delta against the quantized block sums).
//
// IQ1_S (50 bytes a super-block of 256, sparkops/gguf/quants.py): fp16 d | qs[32] | u16 qh[8]. Sub-block s of 32
// weights: scale d * (2 * ((qh[s] >> 12) & 7) + 1), delta -1/8 where qh[s] bit 15 is set, else +1/8; its group l of 8
// weights is grid row qs[4 s + l] | ((qh[s] >> 3 l) & 7) << 8; weight = scale * (grid value + delta).
#include "q4k_q8.cuh"

#define IQ1S_SBB 50

// lane o's sub-block of one super-block (at blk, in shared memory) dotted with x's staged Q8 block q (= 8 sb + o)
__device__ __forceinline__ float iq1s_q8_block(const u8* blk, int o, const i8* xq, const float* dx, const int* s16,
                                               int q, const uint2* __restrict__ grid) {
    const u32 qs = ld_u32_a2(blk + 2 + 4 * o), qh = ld_u16(blk + 34 + 2 * o);
    const uint2 g0 = __ldg(grid + ((qs & 255u) | ((qh & 7u) << 8)));
    const uint2 g1 = __ldg(grid + (((qs >> 8) & 255u) | (((qh >> 3) & 7u) << 8)));
    const uint2 g2 = __ldg(grid + (((qs >> 16) & 255u) | (((qh >> 6) & 7u) << 8)));
    const uint2 g3 = __ldg(grid + ((qs >> 24) | (((qh >> 9) & 7u) << 8)));
    const int4 xa = *(const int4*)(xq + 32 * q), xb = *(const int4*)(xq + 32 * q + 16);
    int s = __dp4a((int)g0.x, xa.x, 0);
    s = __dp4a((int)g0.y, xa.y, s);
    s = __dp4a((int)g1.x, xa.z, s);
    s = __dp4a((int)g1.y, xa.w, s);
    s = __dp4a((int)g2.x, xb.x, s);
    s = __dp4a((int)g2.y, xb.y, s);
    s = __dp4a((int)g3.x, xb.z, s);
    s = __dp4a((int)g3.y, xb.w, s);
    const float dl = ld_f16(blk) * (float)(2 * ((qh >> 12) & 7u) + 1);
    const float delta = (qh & 0x8000u) ? -0.125f : 0.125f;
    // sum(grid q) + delta sum(q): an integer and an exact multiple of 1/8 under 2^12, so exact in float
    return dl * dx[q] * ((float)s + delta * (float)(s16[2 * q] + s16[2 * q + 1]));
}

// y[row] = x . dequantize(W[row]) for one token: x [K] (dtype DT, K a multiple of 256), w [N, K / 256 * 50] IQ1_S
// (16-byte aligned), y [N] (x's dtype), grid the IQ1_S table (2048 rows of 8 int8). A block's 16 rows are one
// contiguous range that starts 16-byte aligned (16 rows are 800 bytes a super-block), copied whole by cp.async (the
// last block's tail zero-filled). Shared memory: K code bytes, K / 32 float scales, K / 16 int sums of 16, then the
// block's rows. 128 threads; grid ceil(N / 16). Launched with PDL: the copy is requested before the wait for the
// kernel before (x is its output), as rowq8_q4_k's. Each output is one octet's sum in a fixed order: deterministic.
template <int DT>
__device__ __forceinline__ void rowq8_iq1_s(const void* __restrict__ x, const u8* __restrict__ w, int K, int N,
                                            void* __restrict__ y, const uint2* __restrict__ grid) {
    extern __shared__ __align__(16) u8 lq_smem[];
    i8* xq = (i8*)lq_smem;
    float* dx = (float*)(lq_smem + K);
    int* s16 = (int*)(dx + (K >> 5));
    u8* sw = (u8*)(s16 + (K >> 4));  // 16-byte aligned: K is a multiple of 256
    const int nsb = K >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 row_bytes = (i64)nsb * IQ1S_SBB, r0 = (i64)blockIdx.x * 16;
    const int rows = (int)min((i64)16, (i64)N - r0);
    const i64 bytes = rows * row_bytes;
    const u8* src = w + r0 * row_bytes;
    const u32 dst = smem_addr(sw);
    for (i64 c = tid; 16 * c < bytes; c += blockDim.x)
        cp_async16(dst + (u32)(16 * c), src + 16 * c, (int)min((i64)16, bytes - 16 * c));
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();  // x is the kernel before's output; y may still be its input
    q8_stage<DT>(x, K, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + (lane >> 3);  // the block's octet, 0..15: its row
    const bool ok = local < rows;  // an octet past the end dots row 0 and writes nothing
    const u8* r = sw + (ok ? local : 0) * row_bytes;
    float acc = 0.0f;
    for (int sb = 0; sb < nsb; ++sb) acc += iq1s_q8_block(r + sb * IQ1S_SBB, o, xq, dx, s16, 8 * sb + o, grid);
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);  // the octet's sum
    if (o == 0 && ok) store_act(y, r0 + local, DT, acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pdl_f32(const void* __restrict__ x,
                                                                            const u8* __restrict__ w, int K, int N,
                                                                            void* __restrict__ y,
                                                                            const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_F32>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pdl_bf16(const void* __restrict__ x,
                                                                             const u8* __restrict__ w, int K, int N,
                                                                             void* __restrict__ y,
                                                                             const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_BF16>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pdl_f16(const void* __restrict__ x,
                                                                            const u8* __restrict__ w, int K, int N,
                                                                            void* __restrict__ y,
                                                                            const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_F16>(x, w, K, N, y, grid);
}
