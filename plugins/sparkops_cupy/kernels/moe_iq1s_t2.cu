// moe_iq1s_t2.cu: one token's IQ1_S experts on Q8 activations from the t2 repacking ("cupy_rowwarp_pdl_q8h_iq1s_t2",
// session 51): moe_iq1s_q8.cu's fastest pair (the Q8-hidden gate/up of two octets a row, the staged down with its
// (slot, super-block) pairs dealt over a row's octets) with every row's super-blocks 72 bytes of two-bit codes
// (iq1s_t2.cuh) in place of IQ1_S's 50 and its grid. Why: the staged shared-grid pair stayed bound by its grid gathers
// (GPU session 51). The same integer sums in the same order, so the same bits as that pair
// (cupy_rowwarp_pdl_q8h_iq1s_staged_flat).
#include "iq1s_t2.cuh"
#include "moe_iq1s_common.cuh"

// gate/up: x [D] (dtype DT), ids [K], w_gate / w_up [E, F, D / 256 * 72] t2, s_gate / s_up [Fs, D / 256 * 72] (null
// when Fs = 0), hbytes: h's Q8 codes [H], scales [H / 32], code sums [H / 32] (H = K F + Fs). 32 hidden rows a block,
// 512 threads (two octets a row: the even and the odd super-blocks); warp 0 quantizes the block's 32 values (one Q8
// block of h). Shared memory: D code bytes, D / 32 scales, D / 16 sums of 16, 32 gate and 32 up rows.
template <int DT>
__device__ __forceinline__ void gateup_q8h_iq1_s_t2(const void* __restrict__ x, const i64* __restrict__ ids, int K,
                                                    int E, int F, int Fs, int D, const u8* __restrict__ w_gate,
                                                    const u8* __restrict__ w_up, const u8* __restrict__ s_gate,
                                                    const u8* __restrict__ s_up, u8* __restrict__ hbytes) {
    extern __shared__ __align__(16) u8 mt_smem[];
    i8* xq = (i8*)mt_smem;
    float* dx = (float*)(xq + D);
    int* s16 = (int*)(dx + (D >> 5));
    const int nsb = D >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 rb = (i64)nsb * IQ1S_T2_SBB;
    u8* sg = (u8*)(s16 + (D >> 4));  // 16-byte aligned: D is a multiple of 256
    u8* su = sg + 32 * rb;           // 32 rows are 2304 bytes a super-block
    __shared__ float hv[32];
    const int H = K * F + Fs;
    const i64 R0 = (i64)blockIdx.x * 32;
    const bool shared = R0 >= (i64)K * F;
    bool valid = true;
    if (shared) {  // the shared expert's rows: known before the router is done
        const i64 r0 = R0 - (i64)K * F;
        iq1s_copy_range(s_gate + r0 * rb, 32 * rb, sg);
        iq1s_copy_range(s_up + r0 * rb, 32 * rb, su);
    }
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();  // x and ids are the kernels' before output; h may still be the last down's input
    if (!shared) {
        const int s = (int)(R0 / F);
        const i64 e = iq_expert(ids, s, E, valid), r0 = e * F + (R0 - (i64)s * F);
        iq1s_copy_range(w_gate + r0 * rb, 32 * rb, sg);
        iq1s_copy_range(w_up + r0 * rb, 32 * rb, su);
        cp_async_commit();
    }
    q8_stage<DT>(x, D, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int slot = tid >> 3, local = slot >> 1;  // the block's octet, 0..63; its hidden row, 0..31
    float g = 0.0f, u = 0.0f;
    for (int sb = slot & 1; sb < nsb; sb += 2) {
        const int q = 8 * sb + o, sq = s16[2 * q] + s16[2 * q + 1];
        g += iq1s_t2_value(sg + local * rb + sb * IQ1S_T2_SBB, o, xq + 32 * q, dx[q], sq);
        u += iq1s_t2_value(su + local * rb + sb * IQ1S_T2_SBB, o, xq + 32 * q, dx[q], sq);
    }
    g = iq1s_octet_sum(g);
    u = iq1s_octet_sum(u);
    g += __shfl_xor_sync(0xffffffffu, g, 8);  // and the pair's: even + odd super-blocks
    u += __shfl_xor_sync(0xffffffffu, u, 8);
    if (o == 0 && (slot & 1) == 0) hv[local] = valid ? iq_silu(g) * u : QNAN;
    __syncthreads();
    if (tid < 32) iq_h8_quantize(hv, lane, R0, H, hbytes);  // warp 0: the block's 32 hidden values, one Q8 block
}

// down: hbytes (gate/up's), ids [K], weights [K] float32, w_down [E, D, F / 256 * 72] t2, s_down [D, Fs / 256 * 72]
// (null when Fs = 0), y [D] (dtype DT). 8 output rows a block (a warp each); the shared expert's rows copied before the
// wait, every slot's rows and the whole Q8 hidden vector after it; a row's (slot, super-block) pairs dealt over its
// octets in turn, each pair's value times its slot's weight as it is added. Shared memory: the hidden vector (H + H / 4
// bytes), 8 shared-expert rows, K slots' 8 rows. 256 threads; grid ceil(D / 8).
template <int DT>
__device__ __forceinline__ void down_q8hs_iq1_s_t2(const u8* __restrict__ hbytes, const i64* __restrict__ ids,
                                                   const float* __restrict__ weights, int K, int E, int F, int Fs,
                                                   int D, const u8* __restrict__ w_down, const u8* __restrict__ s_down,
                                                   void* __restrict__ y) {
    constexpr int WARPS = 8;
    extern __shared__ __align__(16) u8 mt_smem[];
    const int H = K * F + Fs, tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const int nf = F >> 8, nfs = Fs >> 8;
    const i64 rb = (i64)nf * IQ1S_T2_SBB, rbs = (i64)nfs * IQ1S_T2_SBB, r0 = (i64)blockIdx.x * WARPS;
    const int rows = (int)min((i64)WARPS, (i64)D - r0);
    u8* hq = mt_smem;  // H codes, then H / 32 scales and H / 32 sums (H a multiple of 256)
    const float* hd = (const float*)(hq + H);
    const int* hs = (const int*)(hd + (H >> 5));
    u8* ss = hq + H + (H >> 2);  // the shared expert's rows (16-byte aligned), then slot s's at sw + s WARPS rb
    u8* sw = ss + WARPS * rbs;   // 8 rows are 576 bytes a super-block: aligned
    if (Fs) iq1s_copy_range(s_down + r0 * rbs, rows * rbs, ss);
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();  // the hidden vector is gate/up's output, ids and weights the router's
    iq1s_copy_range(hbytes, (i64)H + (H >> 2), hq);
    for (int s = 0; s < K; ++s) {
        bool valid;
        const i64 e = iq_expert(ids, s, E, valid);
        iq1s_copy_range(w_down + (e * D + r0) * rb, rows * rb, sw + s * WARPS * rb);
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    const int local = tid >> 5;    // the block's warp: its output row
    const bool ok = local < rows;  // a warp past the end dots row 0 and writes nothing
    const int row = ok ? local : 0;
    float acc = 0.0f;
    const int routed_pairs = K * nf;
    for (int p = oct; p < routed_pairs + (Fs ? nfs : 0); p += 4) {  // this octet's pairs; the shared expert's last
        const bool routed = p < routed_pairs;
        const int s = routed ? p / nf : K, sb = routed ? p - s * nf : p - routed_pairs;
        const u8* r = routed ? sw + (s * WARPS + row) * rb : ss + row * rbs;
        const int q = s * (F >> 5) + 8 * sb + o;
        const float v = iq1s_t2_value(r + sb * IQ1S_T2_SBB, o, (const i8*)hq + 32 * q, hd[q], hs[q]);
        acc += routed ? __ldcg(weights + s) * v : v;
    }
    acc = iq1s_octet_sum(acc);
    acc += __shfl_xor_sync(0xffffffffu, acc, 8);  // the octets' sums: (0 + 1) + (2 + 3), the same order in every lane
    acc += __shfl_xor_sync(0xffffffffu, acc, 16);
    if (lane == 0 && ok) store_act(y, r0 + local, DT, acc);
}

#define GATE_UP_T2_ARGS                                                                                            \
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, int F, int Fs, int D,                  \
        const u8* __restrict__ w_gate, const u8* __restrict__ w_up, const u8* __restrict__ s_gate,                \
        const u8* __restrict__ s_up, u8* __restrict__ hbytes
#define GATE_UP_T2_PASS x, ids, K, E, F, Fs, D, w_gate, w_up, s_gate, s_up, hbytes
#define DOWN_T2_ARGS                                                                                               \
    const u8* __restrict__ hbytes, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,   \
        int F, int Fs, int D, const u8* __restrict__ w_down, const u8* __restrict__ s_down, void* __restrict__ y
#define DOWN_T2_PASS hbytes, ids, weights, K, E, F, Fs, D, w_down, s_down, y

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512) moe_iq1_s_t2gateupq8hpdl_f32(GATE_UP_T2_ARGS) {
    gateup_q8h_iq1_s_t2<DT_F32>(GATE_UP_T2_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512) moe_iq1_s_t2gateupq8hpdl_bf16(GATE_UP_T2_ARGS) {
    gateup_q8h_iq1_s_t2<DT_BF16>(GATE_UP_T2_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512) moe_iq1_s_t2gateupq8hpdl_f16(GATE_UP_T2_ARGS) {
    gateup_q8h_iq1_s_t2<DT_F16>(GATE_UP_T2_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_t2downq8hpdl_f32(DOWN_T2_ARGS) {
    down_q8hs_iq1_s_t2<DT_F32>(DOWN_T2_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_t2downq8hpdl_bf16(DOWN_T2_ARGS) {
    down_q8hs_iq1_s_t2<DT_BF16>(DOWN_T2_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_t2downq8hpdl_f16(DOWN_T2_ARGS) {
    down_q8hs_iq1_s_t2<DT_F16>(DOWN_T2_PASS);
}
