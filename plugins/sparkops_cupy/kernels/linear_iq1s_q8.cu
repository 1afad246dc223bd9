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

#include "iq1s_q8.cuh"

// y[row] = x . dequantize(W[row]) for one token: x [K] (dtype DT, K a multiple of 256), w [N, K / 256 * 50] IQ1_S
// (16-byte aligned), y [N] (x's dtype), grid the IQ1_S table (2048 rows of 8 int8). A block's 16 rows are one
// contiguous range that starts 16-byte aligned (16 rows are 800 bytes a super-block), copied whole by cp.async (the
// last block's tail zero-filled). Shared memory: K code bytes, K / 32 float scales, K / 16 int sums of 16, then the
// block's rows. 128 threads; grid ceil(N / 16). Launched with PDL: the copy is requested before the wait for the
// kernel before (x is its output), as rowq8_q4_k's. Each output is one octet's sum in a fixed order: deterministic.
// ROWS = 16: an octet a row, as above. ROWS = 8 (the "pair" form, for short weights: cupy_rowwarp_pdl_q8_iq1s_short,
// written after GPU session 50, where the o_proj's 2304 rows made 144 blocks, about one an SM): two octets a row, the
// even and the odd super-blocks, their two sums added (a + b: the same bits whichever lane adds), as rowq8_q4_k's
// ROWS = 8; twice the blocks for the same rows. 8 rows are 400 bytes a super-block: the copy still starts aligned.
// SG (session 51: cupy_rowwarp_pdl_q8_iq1s_sg and _sg_short): the grid from shared memory, the nibble grid (table)
// copied in first, with the rows, before the wait (iq1s_q8.cuh's header: a warp's gather one shared-memory request
// instead of ~25 L1 wavefronts); the same bits as without. Otherwise table is the global grid (uint2 rows).
template <int DT, int ROWS, bool SG>
__device__ __forceinline__ void rowq8_iq1_s(const void* __restrict__ x, const u8* __restrict__ w, int K, int N,
                                            void* __restrict__ y, const void* __restrict__ table) {
    static_assert(ROWS == 16 || ROWS == 8, "an octet a row, or two");
    extern __shared__ __align__(16) u8 lq_smem[];
    u32* sgrid = (u32*)lq_smem;  // SG: the nibble grid, first
    i8* xq = (i8*)(lq_smem + (SG ? IQ1S_NIB_BYTES : 0));
    float* dx = (float*)(xq + K);
    int* s16 = (int*)(dx + (K >> 5));
    u8* sw = (u8*)(s16 + (K >> 4));  // 16-byte aligned: K is a multiple of 256
    const int nsb = K >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 row_bytes = (i64)nsb * IQ1S_SBB, r0 = (i64)blockIdx.x * ROWS;
    const int rows = (int)min((i64)ROWS, (i64)N - r0);
    iq1s_copy_range(w + r0 * row_bytes, rows * row_bytes, sw);
    if (SG) iq1s_grid_copy((const u32*)table, sgrid);
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();  // x is the kernel before's output; y may still be its input
    q8_stage<DT>(x, K, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int slot = (tid >> 5) * 4 + oct;  // the block's octet, 0..15
    const int local = ROWS == 16 ? slot : slot >> 1, first = ROWS == 16 ? 0 : slot & 1, step = ROWS == 16 ? 1 : 2;
    const bool ok = local < rows;  // an octet past the end dots row 0 and writes nothing
    const u8* r = sw + (ok ? local : 0) * row_bytes;
    float acc = 0.0f;
    for (int sb = first; sb < nsb; sb += step)
        acc += SG ? iq1s_q8_block(r + sb * IQ1S_SBB, o, xq, dx, s16, 8 * sb + o, (const u32*)sgrid)
                  : iq1s_q8_block(r + sb * IQ1S_SBB, o, xq, dx, s16, 8 * sb + o, (const uint2*)table);
    acc = iq1s_octet_sum(acc);
    if (ROWS == 8) acc += __shfl_xor_sync(0xffffffffu, acc, 8);  // and the pair's: even + odd super-blocks
    if (o == 0 && (ROWS == 16 || (oct & 1) == 0) && ok) store_act(y, r0 + local, DT, acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pdl_f32(const void* __restrict__ x,
                                                                            const u8* __restrict__ w, int K, int N,
                                                                            void* __restrict__ y,
                                                                            const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_F32, 16, false>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pdl_bf16(const void* __restrict__ x,
                                                                             const u8* __restrict__ w, int K, int N,
                                                                             void* __restrict__ y,
                                                                             const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_BF16, 16, false>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pdl_f16(const void* __restrict__ x,
                                                                            const u8* __restrict__ w, int K, int N,
                                                                            void* __restrict__ y,
                                                                            const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_F16, 16, false>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pairpdl_f32(const void* __restrict__ x,
                                                                               const u8* __restrict__ w, int K, int N,
                                                                               void* __restrict__ y,
                                                                               const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_F32, 8, false>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pairpdl_bf16(const void* __restrict__ x,
                                                                               const u8* __restrict__ w, int K, int N,
                                                                               void* __restrict__ y,
                                                                               const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_BF16, 8, false>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pairpdl_f16(const void* __restrict__ x,
                                                                               const u8* __restrict__ w, int K, int N,
                                                                               void* __restrict__ y,
                                                                               const uint2* __restrict__ grid) {
    rowq8_iq1_s<DT_F16, 8, false>(x, w, K, N, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8sgpdl_f32(const void* __restrict__ x, const u8* __restrict__ w, int K,
        int N, void* __restrict__ y, const u32* __restrict__ nib) {
    rowq8_iq1_s<DT_F32, 16, true>(x, w, K, N, y, nib);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8sgpdl_bf16(const void* __restrict__ x, const u8* __restrict__ w, int K,
        int N, void* __restrict__ y, const u32* __restrict__ nib) {
    rowq8_iq1_s<DT_BF16, 16, true>(x, w, K, N, y, nib);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8sgpdl_f16(const void* __restrict__ x, const u8* __restrict__ w, int K,
        int N, void* __restrict__ y, const u32* __restrict__ nib) {
    rowq8_iq1_s<DT_F16, 16, true>(x, w, K, N, y, nib);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pairsgpdl_f32(const void* __restrict__ x, const u8* __restrict__ w, int K,
        int N, void* __restrict__ y, const u32* __restrict__ nib) {
    rowq8_iq1_s<DT_F32, 8, true>(x, w, K, N, y, nib);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pairsgpdl_bf16(const void* __restrict__ x, const u8* __restrict__ w, int K,
        int N, void* __restrict__ y, const u32* __restrict__ nib) {
    rowq8_iq1_s<DT_BF16, 8, true>(x, w, K, N, y, nib);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_rowq8pairsgpdl_f16(const void* __restrict__ x, const u8* __restrict__ w, int K,
        int N, void* __restrict__ y, const u32* __restrict__ nib) {
    rowq8_iq1_s<DT_F16, 8, true>(x, w, K, N, y, nib);
}
