// linear_iq1s_t2.cu: the one-token IQ1_S GEMV on Q8 activations from the t2 repacking ("cupy_rowwarp_pdl_q8_iq1s_t2"
// and "_t2_rows16", session 51): linear_iq1s_q8.cu's rowq8_iq1_s with a row's super-blocks 72 bytes of two-bit codes
// (iq1s_t2.cuh) in place of IQ1_S's 50 and its grid, so no table is read. Why: the shared-grid GEMVs stayed bound by
// their grid gathers (GPU session 51: half their shared-memory wavefronts bank conflicts, 13% of DRAM). The same
// integer sums in the same order, so the same bits as rowq8_iq1_s with the same ROWS.
#include "iq1s_t2.cuh"

// y[row] = x . W[row] for one token: x [K] (dtype DT, K a multiple of 256), w [N, K / 256 * 72] t2 (16-byte aligned),
// y [N] (x's dtype). Shared memory: K code bytes, K / 32 float scales, K / 16 int sums of 16, then the block's rows (16
// or 8 rows are 1152 or 576 bytes a super-block: the copy starts aligned). 128 threads; grid ceil(N / ROWS). ROWS 16:
// an octet a row; 8: two octets a row, the even and the odd super-blocks, summed as rowq8_iq1_s's.
template <int DT, int ROWS>
__device__ __forceinline__ void rowq8_iq1_s_t2(const void* __restrict__ x, const u8* __restrict__ w, int K, int N,
                                               void* __restrict__ y) {
    static_assert(ROWS == 16 || ROWS == 8, "an octet a row, or two");
    extern __shared__ __align__(16) u8 lt_smem[];
    i8* xq = (i8*)lt_smem;
    float* dx = (float*)(xq + K);
    int* s16 = (int*)(dx + (K >> 5));
    u8* sw = (u8*)(s16 + (K >> 4));  // 16-byte aligned: K is a multiple of 256
    const int nsb = K >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 row_bytes = (i64)nsb * IQ1S_T2_SBB, r0 = (i64)blockIdx.x * ROWS;
    const int rows = (int)min((i64)ROWS, (i64)N - r0);
    iq1s_copy_range(w + r0 * row_bytes, rows * row_bytes, sw);
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
    for (int sb = first; sb < nsb; sb += step) {
        const int q = 8 * sb + o;
        acc += iq1s_t2_value(r + sb * IQ1S_T2_SBB, o, xq + 32 * q, dx[q], s16[2 * q] + s16[2 * q + 1]);
    }
    acc = iq1s_octet_sum(acc);
    if (ROWS == 8) acc += __shfl_xor_sync(0xffffffffu, acc, 8);  // and the pair's: even + odd super-blocks
    if (o == 0 && (ROWS == 16 || (oct & 1) == 0) && ok) store_act(y, r0 + local, DT, acc);
}

#define ROWQ8_T2_ARGS const void* __restrict__ x, const u8* __restrict__ w, int K, int N, void* __restrict__ y

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_t2rowq8pdl_f32(ROWQ8_T2_ARGS) {
    rowq8_iq1_s_t2<DT_F32, 16>(x, w, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_t2rowq8pdl_bf16(ROWQ8_T2_ARGS) {
    rowq8_iq1_s_t2<DT_BF16, 16>(x, w, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_t2rowq8pdl_f16(ROWQ8_T2_ARGS) {
    rowq8_iq1_s_t2<DT_F16, 16>(x, w, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_t2rowq8pairpdl_f32(ROWQ8_T2_ARGS) {
    rowq8_iq1_s_t2<DT_F32, 8>(x, w, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_t2rowq8pairpdl_bf16(ROWQ8_T2_ARGS) {
    rowq8_iq1_s_t2<DT_BF16, 8>(x, w, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_iq1_s_t2rowq8pairpdl_f16(ROWQ8_T2_ARGS) {
    rowq8_iq1_s_t2<DT_F16, 8>(x, w, K, N, y);
}
