// moe_iq1s_q8.cu: one token's IQ1_S experts on Q8 activations ("cupy_rowwarp_pdl_q8_iq1s", written in session 50):
// the gate/up of the K routed experts and the shared one, then their down, two launches with PDL.
//
// Why. The IQ1_S step's experts run on triton_prefetch (session 25's fix: the step's one-token Q4_K expert kernels pass
// every other type to the torch plugin's float32 path, 6.5 tok/s), a float kernel of the ladder's early sessions;
// the Q4_K experts gained most in the ladder from Q8 activations and __dp4a (session 27: x1.157 in the step). This is
// the GEMV of linear_iq1s_q8.cu for the experts: rows copied whole into shared memory (16 a block, an octet a row), the
// activations quantized once a block to Q8 (q4k_q8.cuh's q8_stage), iq1s_q8.cuh's dots.
//
// gate/up: block b takes hidden rows 16 b .. 16 b + 15 of h [K F + Fs] (slot b / (F / 16) for the routed ones, then the
// shared expert's): those 16 gate and 16 up rows (one contiguous range each, 16-byte aligned: 16 rows are 800 bytes a
// super-block), x staged, h = silu(gate . x) * (up . x) in float32. The shared expert's blocks copy their rows before
// the PDL wait (known weights), the routed ones after it (the router's ids are the kernel before's output).
// down: block b takes outputs 16 b .. 16 b + 15: the shared expert's 16 down rows copied before the wait, each slot's
// expert's 16 after it; h staged to Q8 as x is (its K F + Fs values, slot s's from s F on); y = sum over slots of
// weight_s (down_s . h_s), then the shared expert's, each lane's partial sums in that order, then the octet's sum.
// An expert id outside [0, E) reads expert 0's rows and makes its hidden rows (so the output) NaN, as the other
// implementations do. Deterministic: each output is one octet's sum in a fixed order.
#include "iq1s_q8.cuh"

// the most routed experts a token the down stages rows for (its shared memory: MAX_K + 1 slots of 16 rows)
#define IQ1S_MAX_K 16

__device__ __forceinline__ float iq_silu(float g) { return g / (1.0f + expf(-g)); }

// expert id of slot s, and whether it is a valid one (an invalid id reads expert 0)
__device__ __forceinline__ i64 iq_expert(const i64* __restrict__ ids, int s, int E, bool& valid) {
    const i64 e = __ldcg(ids + s);  // the router's output: read after the wait, through L2
    valid = e >= 0 && e < E;
    return valid ? e : 0;
}

// x [D] (dtype DT), ids [K] int64, w_gate / w_up [E, F, D] IQ1_S, s_gate / s_up [Fs, D] (null when Fs = 0), h [K F +
// Fs] float32; D a multiple of 256, F and Fs multiples of 16. Shared memory: D code bytes, D / 32 float scales, D / 16
// int sums of 16, then 16 gate rows and 16 up rows. 128 threads; grid (K F + Fs) / 16.
template <int DT>
__device__ __forceinline__ void gateup_q8_iq1_s(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                                int F, int Fs, int D, const u8* __restrict__ w_gate,
                                                const u8* __restrict__ w_up, const u8* __restrict__ s_gate,
                                                const u8* __restrict__ s_up, float* __restrict__ h,
                                                const uint2* __restrict__ grid) {
    extern __shared__ __align__(16) u8 mq_smem[];
    i8* xq = (i8*)mq_smem;
    float* dx = (float*)(mq_smem + D);
    int* s16 = (int*)(dx + (D >> 5));
    const int nsb = D >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 rb = (i64)nsb * IQ1S_SBB;
    u8* sg = (u8*)(s16 + (D >> 4));  // 16-byte aligned: D is a multiple of 256
    u8* su = sg + 16 * rb;
    const i64 R0 = (i64)blockIdx.x * 16;
    const bool shared = R0 >= (i64)K * F;
    bool valid = true;
    if (shared) {  // the shared expert's rows: known before the router is done
        const i64 r0 = R0 - (i64)K * F;
        iq1s_copy_range(s_gate + r0 * rb, 16 * rb, sg);
        iq1s_copy_range(s_up + r0 * rb, 16 * rb, su);
        cp_async_commit();
    }
    pdl_launch_dependents();
    pdl_wait();  // x and ids are the kernels' before output; h may still be the last down's input
    if (!shared) {
        const int s = (int)(R0 / F);
        const i64 e = iq_expert(ids, s, E, valid), r0 = e * F + (R0 - (i64)s * F);
        iq1s_copy_range(w_gate + r0 * rb, 16 * rb, sg);
        iq1s_copy_range(w_up + r0 * rb, 16 * rb, su);
        cp_async_commit();
    }
    q8_stage<DT>(x, D, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + (lane >> 3);  // the block's octet, 0..15: its hidden row
    const float g = iq1s_octet_sum(iq1s_q8_row(sg + local * rb, nsb, o, xq, dx, s16, 0, grid));
    const float u = iq1s_octet_sum(iq1s_q8_row(su + local * rb, nsb, o, xq, dx, s16, 0, grid));
    if (o == 0) h[R0 + local] = valid ? iq_silu(g) * u : QNAN;
}

// h [K F + Fs] float32 (gate/up's), ids [K] int64, weights [K] float32, w_down [E, D, F] IQ1_S, s_down [D, Fs] (null
// when Fs = 0), y [D] (dtype DT); F and Fs multiples of 256, K <= IQ1S_MAX_K. Shared memory: K F + Fs code bytes, its /
// 32 float scales and / 16 int sums, then 16 shared-expert rows and K slots' 16 rows. 128 threads; grid ceil(D / 16).
template <int DT>
__device__ __forceinline__ void down_q8_iq1_s(const float* __restrict__ h, const i64* __restrict__ ids,
                                              const float* __restrict__ weights, int K, int E, int F, int Fs, int D,
                                              const u8* __restrict__ w_down, const u8* __restrict__ s_down,
                                              void* __restrict__ y, const uint2* __restrict__ grid) {
    extern __shared__ __align__(16) u8 mq_smem[];
    const int H = K * F + Fs;  // the hidden vector's length
    i8* xq = (i8*)mq_smem;
    float* dx = (float*)(mq_smem + H);
    int* s16 = (int*)(dx + (H >> 5));
    const int nf = F >> 8, nfs = Fs >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 rb = (i64)nf * IQ1S_SBB, rbs = (i64)nfs * IQ1S_SBB, r0 = (i64)blockIdx.x * 16;
    const int rows = (int)min((i64)16, (i64)D - r0);
    u8* ss = (u8*)(s16 + (H >> 4));  // 16-byte aligned: H is a multiple of 256
    u8* sw = ss + 16 * rbs;          // 16 rbs = 800 nfs bytes: still 16-byte aligned
    if (Fs) {
        iq1s_copy_range(s_down + r0 * rbs, rows * rbs, ss);
        cp_async_commit();
    }
    pdl_launch_dependents();
    pdl_wait();  // h is gate/up's output, ids and weights the router's
    for (int s = 0; s < K; ++s) {
        bool valid;
        const i64 e = iq_expert(ids, s, E, valid);
        iq1s_copy_range(w_down + (e * D + r0) * rb, rows * rb, sw + s * 16 * rb);
    }
    cp_async_commit();
    q8_stage<DT_F32>(h, H, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + (lane >> 3);  // the block's octet, 0..15: its output row
    const bool ok = local < rows;  // an octet past the end dots row 0 and writes nothing
    const int row = ok ? local : 0;
    float acc = 0.0f;
    for (int s = 0; s < K; ++s)
        acc += __ldcg(weights + s) * iq1s_q8_row(sw + (s * 16 + row) * rb, nf, o, xq, dx, s16, s * (F >> 5), grid);
    if (Fs) acc += iq1s_q8_row(ss + row * rbs, nfs, o, xq, dx, s16, K * (F >> 5), grid);
    acc = iq1s_octet_sum(acc);
    if (o == 0 && ok) store_act(y, r0 + local, DT, acc);
}

#define GATE_UP_IQ1S_ARGS                                                                                          \
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, int F, int Fs, int D,                  \
        const u8* __restrict__ w_gate, const u8* __restrict__ w_up, const u8* __restrict__ s_gate,                \
        const u8* __restrict__ s_up, float* __restrict__ h, const uint2* __restrict__ grid
#define GATE_UP_IQ1S_PASS x, ids, K, E, F, Fs, D, w_gate, w_up, s_gate, s_up, h, grid
#define DOWN_IQ1S_ARGS                                                                                             \
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,    \
        int F, int Fs, int D, const u8* __restrict__ w_down, const u8* __restrict__ s_down, void* __restrict__ y,  \
        const uint2* __restrict__ grid
#define DOWN_IQ1S_PASS h, ids, weights, K, E, F, Fs, D, w_down, s_down, y, grid

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_gateupq8pdl_f32(GATE_UP_IQ1S_ARGS) {
    gateup_q8_iq1_s<DT_F32>(GATE_UP_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_gateupq8pdl_bf16(GATE_UP_IQ1S_ARGS) {
    gateup_q8_iq1_s<DT_BF16>(GATE_UP_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_gateupq8pdl_f16(GATE_UP_IQ1S_ARGS) {
    gateup_q8_iq1_s<DT_F16>(GATE_UP_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8pdl_f32(DOWN_IQ1S_ARGS) {
    down_q8_iq1_s<DT_F32>(DOWN_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8pdl_bf16(DOWN_IQ1S_ARGS) {
    down_q8_iq1_s<DT_BF16>(DOWN_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8pdl_f16(DOWN_IQ1S_ARGS) {
    down_q8_iq1_s<DT_F16>(DOWN_IQ1S_PASS);
}
