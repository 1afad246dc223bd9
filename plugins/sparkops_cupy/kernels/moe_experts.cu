// moe_experts.cu: routed SwiGLU experts + the shared expert for one token per block row (grid.y = T).
//
// Two launches per call (two more when the shared expert is stored in another type than the routed):
//   moe_gate_up: h[t, k*F + f] = silu(w_gate[e_k][f] . x[t]) * (w_up[e_k][f] . x[t]) for the K chosen
//                experts e_k = ids[t, k] (read from device memory: routing never leaves the GPU), then
//                h[t, K*F + f] for the shared expert's Fs rows. One warp per (gate, up) row pair.
//   moe_down:    y[t, d] = sum_k weights[t, k] * (w_down[e_k][d] . h[t, k]) + s_down[d] . h[t, shared]
//                (+ y[t, d] when accumulating), one warp per output row, no atomics: deterministic.
// Only the chosen experts' rows are read. Both stage their input (x, or h) in shared memory the way
// linear.cu does (Q8_0 for block types, floats for float weights) and use quant_dot.cuh's row dots.
// An expert id outside [0, E) makes that token's output NaN (the host cannot check ids without a sync).
#include "quant_dot.cuh"

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

template <typename F, bool FLOAT_ACT>
__device__ __forceinline__ void gate_up_rows(const void* __restrict__ x, int x_dt, int D, const u8* __restrict__ gate,
                                             const u8* __restrict__ up, i64 row_bytes, int Fr, int K,
                                             const i64* __restrict__ ids, int E, const u8* __restrict__ s_gate,
                                             const u8* __restrict__ s_up, int Fs, int wdt, float* __restrict__ h,
                                             i64 h_stride, int h_off, const uint2* __restrict__ grid) {
    constexpr int U = 2;
    extern __shared__ __align__(16) u8 smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const i64 t = blockIdx.y;
    ActQ8 a;
    a.K = D;
    a.q = (const i8*)smem;
    a.d = (const float*)(smem + D);
    a.s = a.d + (D >> 5);
    a.f = (const float*)smem;
    stage_activations<FLOAT_ACT>(x, x_dt, D, t, 1, (i8*)a.q, (float*)a.d, (float*)a.s, (float*)a.f);
    __syncthreads();

    const int n_chunks = F::chunks(D);
    const int rows = K * Fr + Fs;
    for (int r = blockIdx.x * n_warps + warp; r < rows; r += gridDim.x * n_warps) {
        const u8 *gr, *ur;
        bool bad = false;
        if (r < K * Fr) {
            const int k = r / Fr, f = r - k * Fr;
            const i64 e = ids ? ids[t * K + k] : 0;
            bad = e < 0 || e >= E;
            const i64 off = ((bad ? 0 : e) * Fr + f) * row_bytes;
            gr = gate + off;
            ur = up + off;
        } else {
            const i64 off = (i64)(r - K * Fr) * row_bytes;
            gr = s_gate + off;
            ur = s_up + off;
        }
        float ag[1] = {0.0f}, au[1] = {0.0f};
        for (int base = 0; base < n_chunks; base += 32 * U) {
            typename F::Chunk cg[U], cu[U];
            load_group<F, 1, U>(gr, base, n_chunks, lane, wdt, cg);
            load_group<F, 1, U>(ur, base, n_chunks, lane, wdt, cu);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = base + 32 * u + lane;
                if (c < n_chunks) {
                    F::template dot<1>(cg[u], c, a, grid, ag);
                    F::template dot<1>(cu[u], c, a, grid, au);
                }
            }
        }
        const float g = warp_sum(ag[0]), v = warp_sum(au[0]);
        if (lane == 0) h[t * h_stride + h_off + r] = bad ? QNAN : silu(g) * v;
    }
}

#define MOE_MAX_K 64  // routed slots per token the down kernel keeps in shared memory

template <typename F, bool FLOAT_ACT>
__device__ __forceinline__ void down_rows(const float* __restrict__ h, i64 h_stride, int h_off,
                                          const u8* __restrict__ down, i64 row_bytes, int Fr, int K,
                                          const i64* __restrict__ ids, int E, const float* __restrict__ weights,
                                          const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D, int wdt,
                                          void* __restrict__ y, int y_dt, int accumulate,
                                          const uint2* __restrict__ grid) {
    constexpr int U = 4;
    extern __shared__ __align__(16) u8 smem[];
    __shared__ i64 s_e[MOE_MAX_K];
    __shared__ float s_w[MOE_MAX_K];
    __shared__ int s_bad;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const i64 t = blockIdx.y;
    if (threadIdx.x == 0) s_bad = 0;
    __syncthreads();
    if (threadIdx.x < K) {
        const i64 e = ids ? ids[t * K + threadIdx.x] : 0;
        const bool bad = e < 0 || e >= E;
        if (bad) s_bad = 1;
        s_e[threadIdx.x] = bad ? 0 : e;
        s_w[threadIdx.x] = weights ? weights[t * K + threadIdx.x] : 1.0f;
    }
    // staged inputs: K routed slots of Fr values, then the shared slot of Fs values
    const int n_in = K * Fr + Fs;
    i8* sq = (i8*)smem;
    float* sd = (float*)(smem + ((n_in + 15) & ~15));
    float* ss = sd + (n_in >> 5);
    float* sf = (float*)smem;
    const float* hrow = h + t * h_stride + h_off;
    stage_activations<FLOAT_ACT>(hrow, DT_F32, n_in, 0, 1, sq, sd, ss, sf);
    __syncthreads();
    const bool bad = s_bad != 0;

    // the (slot, chunk) pairs of one output row, flattened: routed slot k's chunk c is k*nr + c, the
    // shared expert's chunk c is K*nr + c. Lanes take U of them at a time, all loads before any use, so
    // a row's K + 1 expert rows are in flight together.
    const int nr = F::chunks(Fr), ns = F::chunks(Fs), n_all = K * nr + ns;
    for (int d = blockIdx.x * n_warps + warp; d < D; d += gridDim.x * n_warps) {
        float total = 0.0f;
        for (int base = 0; base < n_all; base += 32 * U) {
            typename F::Chunk ch[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int i = base + 32 * u + lane;
                if (i < n_all) {
                    const int k = i < K * nr ? i / nr : K;
                    const int c = i - k * nr;
                    const u8* row = k < K ? down + (s_e[k] * D + d) * row_bytes : s_down + d * s_row_bytes;
                    ch[u] = F::load(row, c, wdt);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int i = base + 32 * u + lane;
                if (i < n_all) {
                    const int k = i < K * nr ? i / nr : K;
                    const int c = i - k * nr;
                    ActQ8 a;
                    a.K = k < K ? Fr : Fs;
                    a.q = sq + k * Fr;
                    a.d = sd + k * (Fr >> 5);
                    a.s = ss + k * (Fr >> 5);
                    a.f = sf + k * Fr;
                    float part[1] = {0.0f};
                    F::template dot<1>(ch[u], c, a, grid, part);
                    total += (k < K ? s_w[k] : 1.0f) * part[0];
                }
            }
        }
        total = warp_sum(total);
        if (lane == 0) {
            const i64 o = t * D + d;
            if (accumulate) total += load_act(y, o, y_dt);
            store_act(y, o, y_dt, bad ? QNAN : total);
        }
    }
}

#define GATE_UP_ARGS                                                                                          \
    const void *__restrict__ x, int x_dt, int D, const u8 *__restrict__ gate, const u8 *__restrict__ up,     \
        i64 row_bytes, int Fr, int K, const i64 *__restrict__ ids, int E, const u8 *__restrict__ s_gate,     \
        const u8 *__restrict__ s_up, int Fs, int wdt, float *__restrict__ h, i64 h_stride, int h_off,          \
        const uint2 *__restrict__ grid
#define GATE_UP_PASS x, x_dt, D, gate, up, row_bytes, Fr, K, ids, E, s_gate, s_up, Fs, wdt, h, h_stride, h_off, grid
#define DOWN_ARGS                                                                                             \
    const float *__restrict__ h, i64 h_stride, int h_off, const u8 *__restrict__ down, i64 row_bytes, int Fr, \
        int K, const i64 *__restrict__ ids, int E, const float *__restrict__ weights,                         \
        const u8 *__restrict__ s_down, i64 s_row_bytes, int Fs, int D, int wdt, void *__restrict__ y,        \
        int y_dt, int accumulate, const uint2 *__restrict__ grid
#define DOWN_PASS                                                                                              \
    h, h_stride, h_off, down, row_bytes, Fr, K, ids, E, weights, s_down, s_row_bytes, Fs, D, wdt, y, y_dt,     \
        accumulate, grid

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_gate_up_float(GATE_UP_ARGS) {
    gate_up_rows<DotFloat, true>(GATE_UP_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_gate_up_q8_0(GATE_UP_ARGS) {
    gate_up_rows<DotQ8_0, false>(GATE_UP_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_gate_up_q4_k(GATE_UP_ARGS) {
    gate_up_rows<DotQ4_K, false>(GATE_UP_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_gate_up_q6_k(GATE_UP_ARGS) {
    gate_up_rows<DotQ6_K, false>(GATE_UP_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_gate_up_iq1_s(GATE_UP_ARGS) {
    gate_up_rows<DotIQ1_S, false>(GATE_UP_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) moe_down_float(DOWN_ARGS) {
    down_rows<DotFloat, true>(DOWN_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) moe_down_q8_0(DOWN_ARGS) {
    down_rows<DotQ8_0, false>(DOWN_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) moe_down_q4_k(DOWN_ARGS) {
    down_rows<DotQ4_K, false>(DOWN_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) moe_down_q6_k(DOWN_ARGS) {
    down_rows<DotQ6_K, false>(DOWN_PASS);
}
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 2) moe_down_iq1_s(DOWN_ARGS) {
    down_rows<DotIQ1_S, false>(DOWN_PASS);
}
