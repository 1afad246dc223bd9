// moe_rowwarp.cu: one token's routed and shared SwiGLU experts, Q4_K, in two launches built like the row-warp
// GEMVs of linear_rowwarp.cu (q4k_rows.cuh): every weight row a warp needs is requested before it is used, no
// split-K, no partial sums in memory beyond the one hidden vector, each output written by one warp in a fixed order.
//
// Why. Session 13's decode step spent ~36% of its busy time in the experts: Triton's decode GEMVs take 38.5 us a
// layer for 34 MB (23% of 4.04 TB/s), a chunk loop of dependent round trips per program.
//
// 1. gate/up (the "octet" form): the hidden vector h [K * F + Fs] (the K chosen experts' F rows slot by slot, then
//    the shared expert's Fs) as h[r] = silu(gate_r . x) * (up_r . x). A warp owns two rows r, r + 1: octets 0, 1
//    take their gate rows, octets 2, 3 their up rows, all four on the same super-block at once from the activations
//    staged in shared memory (ro_stage), each walking its row with 4 super-blocks in flight. 128 threads = 8 rows.
// 2. down (the "warp" form): y[d] = sum_k weights[k] * (down_{e_k}[d] . h_k) + (s_down[d] . h_shared). The warp
//    for output d walks its K * F / 256 + Fs / 256 super-blocks, all of them consecutive in h (unit u's 256
//    activations are h[256u..]), 16 in flight at a time, each scaled by its slot's routing weight; h is float32,
//    read through L1. 128 threads = 4 outputs.
// An expert id outside [0, E) reads expert 0's rows and makes the output NaN (as the other implementations do).
#include "q4k_rows.cuh"

__device__ __forceinline__ float mr_silu(float g) { return g / (1.0f + expf(-g)); }

// ids [K] int64, w_gate / w_up [E, F, D] Q4_K rows of row_bytes = D / 256 * 144; s_gate / s_up [Fs, D] (null, Fs = 0:
// no shared expert); h [K * F + Fs] float32. F and Fs even, D a multiple of 256. grid ceil((K * F + Fs) / 8).
template <int DT>
__device__ __forceinline__ void gateup_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                            const u8* __restrict__ w_gate, const u8* __restrict__ w_up, i64 row_bytes,
                                            int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up, int Fs,
                                            int D, float* __restrict__ h) {
    extern __shared__ __align__(16) float mr_smem[];
    float4* sx = (float4*)mr_smem;
    float* ssum = mr_smem + D;
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 rows = (i64)K * F + Fs;
    const i64 r0 = ((i64)blockIdx.x * (blockDim.x >> 5) + (tid >> 5)) * 2;
    const i64 r = r0 + (oct & 1);
    const bool ok = r < rows;  // a pair past the end computes row 0 and writes nothing (all reach the barrier)
    const i64 rr = ok ? r : 0;
    const bool up = oct >= 2;
    bool bad = false;
    const u8* w;
    if (rr < (i64)K * F) {
        i64 e = ids[rr / F];
        bad = e < 0 || e >= E;
        e = bad ? 0 : e;
        w = (up ? w_up : w_gate) + (e * F + rr % F) * row_bytes;
    } else {
        w = (up ? s_up : s_gate) + (rr - (i64)K * F) * row_bytes;
    }
    const int nsb = D >> 8;
    uint4 hd[4], q[4];
#pragma unroll
    for (int s = 0; s < 4; ++s)  // the weights first: their round trip overlaps the staging below
        if (s < nsb) q4k_load(w + (i64)s * 144, o, hd[s], q[s]);
    ro_stage<DT>(x, D, sx, ssum);
    __syncthreads();
    const RoLane lp = ro_lane(o);
    float acc = 0.0f;
    for (int base = 0; base < nsb; base += 4) {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int sb = base + s;
            if (sb < nsb) {
                acc += ro_block(hd[s], q[s], sx + 64 * sb, ssum + 16 * sb, lp);
                if (sb + 4 < nsb) q4k_load(w + (i64)(sb + 4) * 144, o, hd[s], q[s]);
            }
        }
    }
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    const float u = __shfl_down_sync(0xffffffffu, acc, 16);  // lanes 0 and 8: the up row of their gate row
    if (o == 0 && oct < 2 && ok) h[r] = bad ? QNAN : mr_silu(acc) * u;
}

// h [K * F + Fs] float32, ids [K], weights [K] float32, w_down [E, D, F] Q4_K (rows of row_bytes = F / 256 * 144),
// s_down [D, Fs] (rows of s_row_bytes; null, Fs = 0: none); y [D] in dtype y_dt. grid ceil(D / 4).
__device__ __forceinline__ void down_q4_k(const float* __restrict__ h, const i64* __restrict__ ids,
                                          const float* __restrict__ weights, int K, int E,
                                          const u8* __restrict__ w_down, i64 row_bytes, int F,
                                          const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                          void* __restrict__ y, int y_dt) {
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3;
    const i64 d = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (d >= D) return;  // the whole warp
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    float acc = 0.0f;
    bool bad = false;
    for (int g = 0; g < units; g += 4 * RW_ROUNDS) {
        uint4 hd[RW_ROUNDS], q[RW_ROUNDS];
        float scale[RW_ROUNDS];
#pragma unroll
        for (int i = 0; i < RW_ROUNDS; ++i) {  // every load of the group first
            const int u = g + 4 * i + oct;
            scale[i] = 1.0f;
            if (u < units) {
                const u8* b;
                if (u < routed) {
                    const int slot = u / per;
                    i64 e = ids[slot];
                    if (e < 0 || e >= E) {
                        bad = true;
                        e = 0;
                    }
                    scale[i] = weights[slot];
                    b = w_down + (e * D + d) * row_bytes + (i64)(u - slot * per) * 144;
                } else {
                    b = s_down + d * s_row_bytes + (i64)(u - routed) * 144;
                }
                q4k_load(b, o, hd[i], q[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < RW_ROUNDS; ++i) {
            const int u = g + 4 * i + oct;
            if (u < units) acc += scale[i] * rw_block<DT_F32>(hd[i], q[i], h, (i64)u * 256, o);
        }
    }
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d, y_dt, bad ? QNAN : acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) moe_q4_k_gateup_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q4_k<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) moe_q4_k_gateup_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q4_k<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) moe_q4_k_gateup_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q4_k<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_down(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q4_k(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}
