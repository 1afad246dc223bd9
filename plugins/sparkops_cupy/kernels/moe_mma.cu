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

// The pipelined forms ("pipe", as linear_mma.cu's): every super-block a warp owns is requested into shared memory
// (cp.async, one group a super-block) before the activations are staged, and each is decoded as soon as its group
// has landed. Staged weights are [unit][16 rows][144 bytes]: 144 bytes is an odd number of 16-byte words, so a
// fragment read's 8 rows fall in 8 different bank groups.

// one super-block column of 16 rows (row i's 144 bytes at row0 + i * stride) into shared memory at dst, as one
// cp.async group of the calling warp
__device__ __forceinline__ void mp_copy_unit(u32 dst, const u8* row0, i64 stride) {
    for (int c = threadIdx.x & 31; c < 16 * 9; c += 32) {
        const int r = c / 9, k = c - 9 * r;
        cp_async16(dst + r * 144 + 16 * k, row0 + r * stride + 16 * k, 16);
    }
    cp_async_commit();
}

// 1. gate/up, 8 warps a block of 16 rows of h: warps 0-3 the gate rows, 4-7 the up rows, warp w taking super-blocks
//    w % 4, w % 4 + 4, ... Shared memory: [2][D / 256][16][144] weights, the bf16 activations, their sums of 32,
//    [8][16].
template <int DT>
__device__ __forceinline__ void gateup_mmapipe(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                               const u8* __restrict__ w_gate, const u8* __restrict__ w_up,
                                               i64 row_bytes, int F, const u8* __restrict__ s_gate,
                                               const u8* __restrict__ s_up, int D, float* __restrict__ h) {
    extern __shared__ __align__(16) u8 mm_smem[];
    const int nsb = D >> 8;
    u8* sw = mm_smem;                                  // [2][nsb][16][144]
    u16* xs = (u16*)(mm_smem + 2 * nsb * 16 * 144);    // [D]
    float* sums = (float*)(xs + D);                    // [D / 32]
    float* part = sums + (D >> 5);                     // [8][16]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int m = warp >> 2, q = warp & 3;             // matrix (0 gate, 1 up), the warp's first super-block
    const i64 r0 = (i64)blockIdx.x * 16;
    bool bad = false;
    const u8* base;  // row r0 of the warp's matrix
    if (r0 < (i64)K * F) {
        i64 e = ids[r0 / F];
        bad = e < 0 || e >= E;
        e = bad ? 0 : e;
        base = (m == 0 ? w_gate : w_up) + (e * F + r0 % F) * row_bytes;
    } else {
        base = (m == 0 ? s_gate : s_up) + (r0 - (i64)K * F) * row_bytes;
    }
    u8* mine_at = sw + (i64)m * nsb * 16 * 144;
    int mine = 0;
    for (int sb = q; sb < nsb; sb += 4, ++mine)
        mp_copy_unit(smem_addr(mine_at + sb * 16 * 144), base + sb * 144, row_bytes);
    mma_stage<DT>(x, D, xs, sums);
    __syncthreads();
    float acc_g = 0.0f, acc_g8 = 0.0f;
    int done = 0;
    for (int sb = q; sb < nsb; sb += 4, ++done) {
        cp_async_wait_pending(mine - 1 - done);
        __syncwarp();
        const u8* u = mine_at + sb * 16 * 144;
        mma_superblock_lean(u + g * 144, u + (g + 8) * 144, xs + 256 * sb, sums + 8 * sb, 1.0f, acc_g, acc_g8);
    }
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    __syncthreads();
    if (tid < 16) {  // gate = warps 0..3, up = warps 4..7, each in that order
        const float gate = ((part[tid] + part[16 + tid]) + part[32 + tid]) + part[48 + tid];
        const float up = ((part[64 + tid] + part[80 + tid]) + part[96 + tid]) + part[112 + tid];
        h[r0 + tid] = bad ? QNAN : mm_silu(gate) * up;
    }
}

// 2. down, 16 warps a block of 16 outputs: the units (every slot's F / 256 super-blocks, then the shared expert's)
//    to the warps in turn, each requested first. Shared memory: [units][16][144] weights, h as bf16 with its sums of
//    32, [16][16].
__device__ __forceinline__ void down_mmapipe(const float* __restrict__ h, const i64* __restrict__ ids,
                                             const float* __restrict__ weights, int K, int E,
                                             const u8* __restrict__ w_down, i64 row_bytes, int F,
                                             const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                             void* __restrict__ y, int y_dt) {
    extern __shared__ __align__(16) u8 mm_smem[];
    const int width = K * F + Fs, per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    u8* sw = mm_smem;                                  // [units][16][144]
    u16* xs = (u16*)(mm_smem + (i64)units * 16 * 144); // [width]
    float* sums = (float*)(xs + width);                // [width / 32]
    float* part = sums + (width >> 5);                 // [16][16]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const i64 d0 = (i64)blockIdx.x * 16;  // D is gate/up's input width, a multiple of 256: every tile is whole
    bool bad = false;
    int mine = 0;
    for (int u = warp; u < units; u += 16, ++mine) {
        const u8* row0;
        i64 stride;
        if (u < routed) {
            const int slot = u / per;
            i64 e = ids[slot];
            if (e < 0 || e >= E) {
                bad = true;
                e = 0;
            }
            row0 = w_down + (e * D + d0) * row_bytes + (i64)(u - slot * per) * 144;
            stride = row_bytes;
        } else {
            row0 = s_down + d0 * s_row_bytes + (i64)(u - routed) * 144;
            stride = s_row_bytes;
        }
        mp_copy_unit(smem_addr(sw + (i64)u * 16 * 144), row0, stride);
    }
    mma_stage<DT_F32>(h, width, xs, sums);
    __syncthreads();
    float acc_g = 0.0f, acc_g8 = 0.0f;
    int done = 0;
    for (int u = warp; u < units; u += 16, ++done) {
        cp_async_wait_pending(mine - 1 - done);
        __syncwarp();
        const float mult = u < routed ? weights[u / per] : 1.0f;
        const u8* b = sw + (i64)u * 16 * 144;
        mma_superblock_lean(b + g * 144, b + (g + 8) * 144, xs + 256 * u, sums + 8 * u, mult, acc_g, acc_g8);
    }
    if (t == 0) {
        part[warp * 16 + g] = acc_g;
        part[warp * 16 + g + 8] = acc_g8;
    }
    bad = __syncthreads_or(bad);
    if (tid < 16 && d0 + tid < D) {  // the warps' sums in a fixed order
        float s = part[tid];
#pragma unroll
        for (int v = 1; v < 16; ++v) s += part[v * 16 + tid];
        store_act(y, d0 + tid, y_dt, bad ? QNAN : s);
    }
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

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) moe_q4_k_gateup_mmapipe_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int D, float* __restrict__ h) {
    gateup_mmapipe<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) moe_q4_k_gateup_mmapipe_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int D, float* __restrict__ h) {
    gateup_mmapipe<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) moe_q4_k_gateup_mmapipe_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int D, float* __restrict__ h) {
    gateup_mmapipe<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512, 2) moe_q4_k_down_mmapipe(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_mmapipe(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}
