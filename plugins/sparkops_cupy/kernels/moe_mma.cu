// moe_mma.cu: one token's routed and shared SwiGLU experts, Q4_K, on the tensor cores: the two launches of
// moe_rowwarp.cu with linear_mma.cu's 16-row tiles (q4k_mma.cuh: codes as bfloat16 128 + q, mma.sync m16n8k16, the
// scales once a sub-block, activations rounded to bfloat16).
//
// 1. gate/up: h [K * F + Fs] = silu(gate_r . x) * (up_r . x), r the K chosen experts' F rows slot by slot, then the
//    shared expert's Fs. A block owns 16 consecutive rows of h, all of one slot (F and Fs are multiples of 256): warps
//    0 and 1 walk the gate rows (even and odd super-blocks), warps 2 and 3 the up rows; the block adds the halves in a
//    fixed order and writes silu(gate) * up. grid (K * F + Fs) / 16.
// 2. down: y[d] = sum_k weights[k] * (down_{e_k}[d] . h_k) + (s_down[d] . h_shared). A block owns 16 outputs; h is
//    staged once a block as bfloat16 (K * F + Fs values); its units - every slot's F / 256 super-blocks, then the
//    shared expert's Fs / 256 - go to the 4 warps in turn (unit u's activations are h[256u..]), each scaled by its
//    slot's routing weight; the warps' sums are added in a fixed order. grid ceil(D / 16).
// An expert id outside [0, E) reads expert 0's rows and makes the output NaN (as the other implementations do).
// 128 threads a block. Shared memory: the staged activations (2 bytes each) and their sums of 32, then [4][16] sums.
#include "q4k_mma.cuh"

__device__ __forceinline__ float mm_silu(float g) { return g / (1.0f + expf(-g)); }

template <int DT>
__device__ __forceinline__ void gateup_mma(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                           const u8* __restrict__ w_gate, const u8* __restrict__ w_up, i64 row_bytes,
                                           int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up, int D,
                                           float* __restrict__ h) {
    extern __shared__ __align__(16) u8 mm_smem[];
    u16* xs = (u16*)mm_smem;
    float* sums = (float*)(mm_smem + 2 * (i64)D);
    float* part = sums + (D >> 5);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const i64 r0 = (i64)blockIdx.x * 16;  // the block's first row of h
    bool bad = false;
    const u8* base;  // row r0's gate (warps 0, 1) or up (warps 2, 3) row
    if (r0 < (i64)K * F) {
        i64 e = ids[r0 / F];
        bad = e < 0 || e >= E;
        e = bad ? 0 : e;
        base = (warp < 2 ? w_gate : w_up) + (e * F + r0 % F) * row_bytes;
    } else {
        base = (warp < 2 ? s_gate : s_up) + (r0 - (i64)K * F) * row_bytes;
    }
    mma_stage<DT>(x, D, xs, sums);
    __syncthreads();
    const u8* pg = base + g * row_bytes;
    const u8* p8 = base + (g + 8) * row_bytes;
    float acc_g = 0.0f, acc_g8 = 0.0f;
    for (int sb = warp & 1; sb < (D >> 8); sb += 2)
        mma_superblock(pg + (i64)sb * 144, p8 + (i64)sb * 144, xs + 256 * sb, sums + 8 * sb, 1.0f, acc_g, acc_g8);
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    __syncthreads();
    if (tid < 16) {  // gate = warps 0 + 1, up = warps 2 + 3, in that order
        const float gate = part[tid] + part[16 + tid], up = part[32 + tid] + part[48 + tid];
        h[r0 + tid] = bad ? QNAN : mm_silu(gate) * up;
    }
}

__device__ __forceinline__ void down_mma(const float* __restrict__ h, const i64* __restrict__ ids,
                                         const float* __restrict__ weights, int K, int E,
                                         const u8* __restrict__ w_down, i64 row_bytes, int F,
                                         const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                         void* __restrict__ y, int y_dt) {
    extern __shared__ __align__(16) u8 mm_smem[];
    const int width = K * F + Fs;
    u16* xs = (u16*)mm_smem;
    float* sums = (float*)(mm_smem + 2 * (i64)width);
    float* part = sums + (width >> 5);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    mma_stage<DT_F32>(h, width, xs, sums);
    __syncthreads();
    const i64 d0 = (i64)blockIdx.x * 16;
    const i64 dg = min(d0 + g, (i64)D - 1), d8 = min(d0 + g + 8, (i64)D - 1);  // past the end: row D - 1, not written
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    bool bad = false;
    float acc_g = 0.0f, acc_g8 = 0.0f;
    for (int u = warp; u < units; u += 4) {
        const u8 *bg, *b8;
        float mult = 1.0f;
        if (u < routed) {
            const int slot = u / per;
            i64 e = ids[slot];
            if (e < 0 || e >= E) {
                bad = true;
                e = 0;
            }
            mult = weights[slot];
            const u8* m = w_down + e * D * row_bytes + (i64)(u - slot * per) * 144;
            bg = m + dg * row_bytes;
            b8 = m + d8 * row_bytes;
        } else {
            const u8* m = s_down + (i64)(u - routed) * 144;
            bg = m + dg * s_row_bytes;
            b8 = m + d8 * s_row_bytes;
        }
        mma_superblock(bg, b8, xs + 256 * u, sums + 8 * u, mult, acc_g, acc_g8);
    }
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    bad = __syncthreads_or(bad);
    if (tid < 16 && d0 + tid < D)  // the warps' sums in a fixed order
        store_act(y, d0 + tid, y_dt, bad ? QNAN : ((part[tid] + part[16 + tid]) + part[32 + tid]) + part[48 + tid]);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) moe_q4_k_gateup_mma_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int D, float* __restrict__ h) {
    gateup_mma<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) moe_q4_k_gateup_mma_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int D, float* __restrict__ h) {
    gateup_mma<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) moe_q4_k_gateup_mma_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int D, float* __restrict__ h) {
    gateup_mma<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 4) moe_q4_k_down_mma(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_mma(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}
