// linear.cu: y = x @ W^T for a GGUF weight kept as stored, one warp per output row (a GEMV per token).
//
// The weight is streamed: each block owns tiles of RT consecutive rows (tile i, i + gridDim.x, ...),
// and copies a tile's bytes - one contiguous range, whatever the block format - into shared memory with
// 16-byte cp.async, STAGES - 1 tiles ahead of the one its warps are computing. So every block keeps
// tens of kilobytes in flight while it computes, which is what a batch-1 GEMV needs to run at memory
// speed (a warp holding one 450-byte IQ1_S row in registers does not). Each half-warp computes one
// row of the tile (two rows per warp at a time). The tile copy keeps each
// byte's address modulo 16, so the format's natural alignment holds in shared memory as in global.
// The first tiles are requested before the block stages its activations (Q8_0-quantized for the
// block types, floats for F32/F16/BF16 weights), so the two latencies overlap.
// NT tokens share every weight byte (NT = 1 for decode, 4 for longer inputs; blockIdx.y = token group).
//
// Dynamic shared memory: STAGES * stage_bytes, then the activations: quantized NT*K int8 + 2*NT*K/32
// floats (ACT_Q8), NT*K floats for float weights (ACT_FLOAT), or NT*K floats + NT*K/32 sums of 32 for block
// weights dotted with float activations (ACT_FLOAT_SUMS, float_dot.cuh). stage_bytes >= RT * row_bytes + 16,
// a multiple of 16.
#include "float_dot.cuh"

// how a kernel stages its activations (the dots read them accordingly)
#define ACT_Q8 0
#define ACT_FLOAT 1
#define ACT_FLOAT_SUMS 2

#define LINEAR_STAGES 3

template <typename F, int NT, int ACT>
__device__ __forceinline__ void linear_rows(const void* __restrict__ x, int x_dt, int T, int K,
                                            const u8* __restrict__ w, i64 row_bytes, int wdt, int N, int RT,
                                            int stage_bytes, void* __restrict__ y, const uint2* __restrict__ grid) {
    extern __shared__ __align__(16) u8 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, n_warps = blockDim.x >> 5;
    const i64 t0 = (i64)blockIdx.y * NT;
    const int nt = (int)min((i64)NT, (i64)T - t0);
    const int n_tiles = (N + RT - 1) / RT;
    const int my_tiles = blockIdx.x < n_tiles ? (n_tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const u32 stages = smem_addr(smem);

    // request the j-th tile of this block into stage j % STAGES (always commit: uniform group counts)
    auto issue = [&](int j) {
        if (j < my_tiles) {
            const i64 tile = blockIdx.x + (i64)j * gridDim.x;
            const i64 start = tile * RT * row_bytes;
            const i64 end = min((tile + 1) * RT, (i64)N) * row_bytes;
            const i64 a0 = start & ~(i64)15;
            const int n16 = (int)((end - a0 + 15) >> 4);
            const u32 dst = stages + (j % LINEAR_STAGES) * stage_bytes;
            for (int c = tid; c < n16; c += blockDim.x) {
                const i64 off = a0 + 16 * (i64)c;
                cp_async16(dst + 16 * c, w + off, (int)min((i64)16, end - off));
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int j = 0; j < LINEAR_STAGES - 1; ++j) issue(j);

    ActQ8 a;
    a.K = K;
    u8* act = smem + LINEAR_STAGES * stage_bytes;
    i8* sq = (i8*)act;
    float* sd = (float*)(act + NT * K);
    float* ss = sd + NT * (K >> 5);
    float* sf = (float*)act;
    a.q = sq;
    a.d = sd;
    a.s = ss;
    a.f = sf;
    if (ACT == ACT_FLOAT_SUMS) {
        a.s = sf + NT * K;  // the sums of 32 after the floats
        stage_activations<false, true>(x, x_dt, K, t0, nt, sq, sd, sf + NT * K, sf);
    } else {
        stage_activations<ACT == ACT_FLOAT>(x, x_dt, K, t0, nt, sq, sd, ss, sf);
    }

    const int n_chunks = F::chunks(K);
    for (int j = 0; j < my_tiles; ++j) {
        cp_async_wait<LINEAR_STAGES - 2>();
        __syncthreads();  // tile j landed (and the activations); nobody still reads the stage refilled next
        issue(j + LINEAR_STAGES - 1);
        const i64 tile = blockIdx.x + (i64)j * gridDim.x;
        const i64 r0 = tile * RT;
        const int rows = (int)min((i64)RT, (i64)N - r0);
        const u8* base = smem + (j % LINEAR_STAGES) * stage_bytes + ((r0 * row_bytes) & 15);
        // two rows per warp at a time, one per half-warp: short rows (72 chunks) use the lanes better
        const int half = lane >> 4, hl = lane & 15;
        for (int rp = warp; 2 * rp < rows; rp += n_warps) {
            const int rl = 2 * rp + half;
            const bool ok = rl < rows;
            const u8* row = base + (ok ? rl : 0) * row_bytes;
            float acc[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
            if (ok) {
                // two chunks in flight per lane; one where four tokens of float activations would not fit the
                // registers (the t4 float dots spill at two)
                constexpr int CHUNKS_IN_FLIGHT = ACT == ACT_FLOAT_SUMS && NT > 1 ? 1 : 2;
#pragma unroll CHUNKS_IN_FLIGHT
                for (int c = hl; c < n_chunks; c += 16) F::template dot<NT>(F::load(row, c, wdt), c, a, grid, acc);
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                float v = acc[t];
#pragma unroll
                for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
                if (hl == 0 && ok && t < nt) store_act(y, (t0 + t) * N + r0 + rl, x_dt, v);
            }
        }
    }
    cp_async_wait_all();  // leave no copy in flight into memory the next kernel may own
}

// All kernels: x [T, K] (dtype x_dt), w [N, row_bytes] bytes, 16-byte aligned (wdt: element type of float
// weights), RT rows per tile, stage_bytes per pipeline stage, y [T, N] (x's dtype), grid = IQ1_S table
// (IQ1_S only). 256 threads; grid (blocks, ceil(T/NT)).

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_float_t1(const void* __restrict__ x, int x_dt, int T, int K,
                                                                  const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                  int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                  const uint2* __restrict__ grid) {
    linear_rows<DotFloat, 1, ACT_FLOAT>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_float_t4(const void* __restrict__ x, int x_dt, int T, int K,
                                                                  const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                  int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                  const uint2* __restrict__ grid) {
    linear_rows<DotFloat, 4, ACT_FLOAT>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q8_0_t1(const void* __restrict__ x, int x_dt, int T, int K,
                                                                 const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                 int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                 const uint2* __restrict__ grid) {
    linear_rows<DotQ8_0, 1, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q8_0_t4(const void* __restrict__ x, int x_dt, int T, int K,
                                                                 const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                 int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                 const uint2* __restrict__ grid) {
    linear_rows<DotQ8_0, 4, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q4_k_t1(const void* __restrict__ x, int x_dt, int T, int K,
                                                                 const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                 int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                 const uint2* __restrict__ grid) {
    linear_rows<DotQ4_K, 1, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q4_k_t4(const void* __restrict__ x, int x_dt, int T, int K,
                                                                 const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                 int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                 const uint2* __restrict__ grid) {
    linear_rows<DotQ4_K, 4, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q6_k_t1(const void* __restrict__ x, int x_dt, int T, int K,
                                                                 const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                 int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                 const uint2* __restrict__ grid) {
    linear_rows<DotQ6_K, 1, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q6_k_t4(const void* __restrict__ x, int x_dt, int T, int K,
                                                                 const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                 int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                 const uint2* __restrict__ grid) {
    linear_rows<DotQ6_K, 4, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_iq1_s_t1(const void* __restrict__ x, int x_dt, int T, int K,
                                                                  const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                  int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                  const uint2* __restrict__ grid) {
    linear_rows<DotIQ1_S, 1, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_iq1_s_t4(const void* __restrict__ x, int x_dt, int T, int K,
                                                                  const u8* __restrict__ w, i64 row_bytes, int wdt,
                                                                  int N, int RT, int stage_bytes, void* __restrict__ y,
                                                                  const uint2* __restrict__ grid) {
    linear_rows<DotIQ1_S, 4, ACT_Q8>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// Block weights dotted with float activations (float_dot.cuh): the kernels of implementation "cupy_float".

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q8_0_f_t1(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotQ8_0F, 1, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q8_0_f_t4(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotQ8_0F, 4, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q4_k_f_t1(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotQ4_KF, 1, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0 (one block per SM's worth of registers: at 128 a thread, four tokens' sums spill)
extern "C" __global__ void __launch_bounds__(256, 1) linear_q4_k_f_t4(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotQ4_KF, 4, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q6_k_f_t1(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotQ6_KF, 1, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_q6_k_f_t4(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotQ6_KF, 4, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_iq1_s_f_t1(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotIQ1_SF, 1, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) linear_iq1_s_f_t4(const void* __restrict__ x, int x_dt, int T,
                                                                  int K, const u8* __restrict__ w, i64 row_bytes,
                                                                  int wdt, int N, int RT, int stage_bytes,
                                                                  void* __restrict__ y, const uint2* __restrict__ grid) {
    linear_rows<DotIQ1_SF, 4, ACT_FLOAT_SUMS>(x, x_dt, T, K, w, row_bytes, wdt, N, RT, stage_bytes, y, grid);
}
