// add_rmsnorm_router.cu: a decode token's residual add, its FFN norm and its MoE router in one launch
// (add_rmsnorm_router=cupy_rowwarp_pdl: summed = residual + x, normed = rmsnorm(summed) * gain, then moe_router on
// normed). The routing is router_route.cuh's, the same instructions moe_router.cu routes with.
//
// Grid (cdiv(E, warps a block), T), a warp an expert, launched with programmatic dependent launch (PDL) after the
// kernel that writes x (the layer's attention / KDA output projection). Before its wait each warp requests its expert's
// float32 weight row (float4 chunks l, l + 32, ... for lane l, streamed: __ldcs) as moe_router_rowwarp_pdl requests
// its row, so the router's 2.4 MB (the 48B's) stream while the kernel before ends, and asks L2 for the norm's gain
// (prefetch.global.L2). The gain's values are loaded (__ldcg) only after the row's sum of squares: held across the
// wait beside the weights and the sums they spilled (ptxas at 255 registers, 18 chunks a lane; nvcc -Xptxas -v).
// After the wait:
//   - every lane loads the same chunks of x[t] and residual[t] (coherent loads: __ldca), forms summed = residual + x in
//     float32 and rounds it to the activation dtype (what the unfused chain stores);
//   - EVERY warp takes the sum of squares of the whole row itself (its lanes cover every chunk; a butterfly warp_sum),
//     so no warp waits for another: the same operations on the same values, so the same bits in every warp;
//   - normed = (summed * rstd) * gain rounded to the activation dtype, as plugins/sparkops_triton/add_rmsnorm.py rounds
//     it (the norm of the rounded sum; normalise, then the gain, then the cast), with rstd = 1 / sqrt(ss / D + eps);
//   - the logit is the dot of the rounded normed values (widened back to float) with the weight row, in
//     moe_router.cu's chunk order (rt_x_round's);
//   - chunk c of normed and of summed is stored by exactly one warp of the token's grid row: warp c % W (W the row's
//     warps, an idle one past E included), its lane c % 32;
//   - then everything after the logit as moe_router.cu's rt_token / rt_route: the logit to a [T, E] scratch, an
//     arrival counter per token (zeroed again by the last block), the last block of the token routes it with one warp.
// The sum of squares is added in another order than the Triton norm's (a lane's chunks in order, then the warp), so
// the kernel claims the tolerance row against the reference, not bit-identity with the unfused chain.
// The host hands every other call to other code (add_rmsnorm_router.py's stated policy): more than 8 tokens, a weight
// that is not float32, D not a multiple of 4, E > 512, top_k or n_group > 32.
#include "common.cuh"
#include "router_route.cuh"

// float4 chunks a lane holds a round, by activation dtype: 32 lanes x 4 x 18 = 2304 values (the 48B's row) in one
// round for bfloat16 activations (236 registers), 2048 for float16 (16 chunks: 248 registers; 18 used all 255), 1536
// for float32 (12: 248). A lane holds a round's weight, gain and summed chunks at once (the sums packed in the
// activation dtype) besides the loads in flight (ptxas issues a round's loads together): more chunks spill. A longer
// row takes more rounds, its x and residual read again in the second pass (the row's sum of squares must be known before any normed value). A
// lane's chunks are l, l + 32, ... in that order whatever a round holds: the same sums in the same order either way
#define AR_CHUNKS_BF16 18
#define AR_CHUNKS_F16 16
#define AR_CHUNKS_32 12

// 4 values of the activation dtype as a lane holds them: float4 for float32, 4 packed 16-bit values (uint2) else
template <int DT>
struct Act4 {
    typedef uint2 T;
};
template <>
struct Act4<DT_F32> {
    typedef float4 T;
};

// 4 activations p[i .. i + 3] as held (i a multiple of 4; rows 16-byte aligned for float32, 8 for 16-bit), through a
// coherent load (__ldca): x and residual are written by the kernels before, which PDL lets still run; a read-only load
// (__ldg) could be scheduled above the wait (GPU session 21's stale router)
__device__ __forceinline__ float4 ar_load(const float4* p) { return __ldca(p); }
__device__ __forceinline__ uint2 ar_load(const uint2* p) { return __ldca(p); }

// held values widened to float32
__device__ __forceinline__ float4 ar_widen(float4 v, int) { return v; }
__device__ __forceinline__ float4 ar_widen(uint2 u, int dt) {
    if (dt == DT_BF16)
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                           __uint_as_float(u.y & 0xffff0000u));
    return make_float4(f16_to_f32((u16)(u.x & 0xffffu)), f16_to_f32((u16)(u.x >> 16)), f16_to_f32((u16)(u.y & 0xffffu)),
                       f16_to_f32((u16)(u.y >> 16)));
}

// float32 values rounded to the activation dtype (to nearest even, as torch's and Triton's casts) and held so
template <int DT>
__device__ __forceinline__ typename Act4<DT>::T ar_narrow(float4 v);
template <>
__device__ __forceinline__ float4 ar_narrow<DT_F32>(float4 v) { return v; }
template <>
__device__ __forceinline__ uint2 ar_narrow<DT_BF16>(float4 v) {
    return make_uint2((u32)f32_to_bf16(v.x) | ((u32)f32_to_bf16(v.y) << 16),
                      (u32)f32_to_bf16(v.z) | ((u32)f32_to_bf16(v.w) << 16));
}
template <>
__device__ __forceinline__ uint2 ar_narrow<DT_F16>(float4 v) {
    return make_uint2((u32)f32_to_f16(v.x) | ((u32)f32_to_f16(v.y) << 16),
                      (u32)f32_to_f16(v.z) | ((u32)f32_to_f16(v.w) << 16));
}

// one round of a lane's float4 chunks of a float32 row (base + 32 i + lane, i < CH), zeros past the row's end.
// STREAM: the expert's weight row, read once a token (__ldcs); else the gain, which every warp reads (__ldcg: L2)
template <int CH, bool STREAM>
__device__ __forceinline__ void ar_f32_round(const float4* __restrict__ row, int base, int n4, int lane,
                                             float4 (&v)[CH]) {
#pragma unroll
    for (int i = 0; i < CH; ++i) {
        const int c = base + 32 * i + lane;
        v[i] = c < n4 ? (STREAM ? __ldcs(row + c) : __ldcg(row + c)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// the gain's first 32 x CH chunks asked into L2 (prefetch.global.L2: a request, no register, no value): the gain is
// read only after the row's sum of squares, when the warp no longer holds x and residual in flight
template <int CH>
__device__ __forceinline__ void ar_prefetch_l2(const float4* __restrict__ row, int base, int n4, int lane) {
#pragma unroll
    for (int i = 0; i < CH; ++i) {
        const int c = base + 32 * i + lane;
        if (c < n4 && (c & 7) == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + c));  // a 128-byte line
    }
}

// the same round of summed = residual + x (float32, then rounded to the activation dtype), zeros past the row's end
template <int DT, int CH>
__device__ __forceinline__ void ar_sum_round(const void* __restrict__ x, const void* __restrict__ r, i64 row, int base,
                                             int n4, int lane, typename Act4<DT>::T (&s)[CH]) {
    typedef typename Act4<DT>::T A;
    const A* x4 = (const A*)((const char*)x + row * (DT == DT_F32 ? 4 : 2));
    const A* r4 = (const A*)((const char*)r + row * (DT == DT_F32 ? 4 : 2));
#pragma unroll
    for (int i = 0; i < CH; ++i) {
        const int c = base + 32 * i + lane;
        const bool in = c < n4;
        const float4 a = in ? ar_widen(ar_load(x4 + c), DT) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float4 b = in ? ar_widen(ar_load(r4 + c), DT) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        s[i] = ar_narrow<DT>(make_float4(__fadd_rn(b.x, a.x), __fadd_rn(b.y, a.y), __fadd_rn(b.z, a.z),
                                         __fadd_rn(b.w, a.w)));
    }
}

// The warp's part of token t: summed and normed of the whole row (its chunks c with c % W == wg stored), and, for a
// warp with an expert (has), the logit normed[t] . w[e], every lane ending with the same value. PDL: the first round's
// weight and gain chunks are requested, then the thread waits for the kernel before (on every path: no round at all
// included), and only then reads x and residual, its outputs (tests/test_cuda_pdl_order.py reads the SASS).
template <int DT, int CH>
__device__ __forceinline__ float ar_norm_logit(const void* __restrict__ x, const void* __restrict__ r,
                                               const float* __restrict__ gain, float eps,
                                               const float* __restrict__ w, bool has, int e, int D, i64 t,
                                               void* __restrict__ normed, void* __restrict__ summed, int wg, int W,
                                               int lane) {
    typedef typename Act4<DT>::T A;
    const int n4 = D >> 2;
    const float4* wr = (const float4*)(w + (i64)(has ? e : 0) * D);
    const float4* gr = (const float4*)gain;
    const i64 row = t * (i64)D;
    A* n_out = (A*)((char*)normed + row * (DT == DT_F32 ? 4 : 2));
    A* s_out = (A*)((char*)summed + row * (DT == DT_F32 ? 4 : 2));
    const int step = 32 * CH;
    float4 wv[CH], gv[CH];
    A sv[CH];
    if (has) {
        ar_f32_round<CH, true>(wr, 0, n4, lane, wv);
    } else {
#pragma unroll
        for (int i = 0; i < CH; ++i) wv[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    ar_prefetch_l2<CH>(gr, 0, n4, lane);
    pdl_launch_dependents();
    pdl_wait();  // x and residual are the kernels before's outputs
    // pass 1: the sum of squares of the whole row (of the rounded sums, as the Triton norm squares them)
    float ss = 0.0f;
    for (int base = 0; base < n4; base += step) {
        ar_sum_round<DT, CH>(x, r, row, base, n4, lane, sv);
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const float4 v = ar_widen(sv[i], DT);
            ss = fmaf(v.x, v.x, ss);
            ss = fmaf(v.y, v.y, ss);
            ss = fmaf(v.z, v.z, ss);
            ss = fmaf(v.w, v.w, ss);
        }
    }
    ss = warp_sum(ss);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)D), eps)));
    // pass 2: normed, its stores and the dot; a one-round row keeps its sums from pass 1 (sv), a longer one forms each
    // round's again from x and residual (the same loads and additions: the same values)
    const bool one = n4 <= step;
    float acc = 0.0f;
    for (int base = 0; base < n4; base += step) {
        if (base > 0 && has) ar_f32_round<CH, true>(wr, base, n4, lane, wv);
        ar_f32_round<CH, false>(gr, base, n4, lane, gv);
        if (!one) ar_sum_round<DT, CH>(x, r, row, base, n4, lane, sv);
#pragma unroll
        for (int i = 0; i < CH; ++i) {
            const int c = base + 32 * i + lane;
            const float4 v = ar_widen(sv[i], DT);
            const A nh = ar_narrow<DT>(make_float4(  // normalise, then the gain, then the cast (the Triton norm's order)
                __fmul_rn(__fmul_rn(v.x, inv), gv[i].x), __fmul_rn(__fmul_rn(v.y, inv), gv[i].y),
                __fmul_rn(__fmul_rn(v.z, inv), gv[i].z), __fmul_rn(__fmul_rn(v.w, inv), gv[i].w)));
            if (c < n4 && c % W == wg) {  // this warp's chunk of the two outputs
                n_out[c] = nh;
                s_out[c] = sv[i];
            }
            const float4 nv = ar_widen(nh, DT);  // the rounded normed values, as the router reads them
            acc = fmaf(wv[i].x, nv.x, acc);
            acc = fmaf(wv[i].y, nv.y, acc);
            acc = fmaf(wv[i].z, nv.z, acc);
            acc = fmaf(wv[i].w, nv.w, acc);
        }
    }
    return warp_sum(acc);
}


// Every thread waits for the kernel before (inside ar_norm_logit) before it touches anything a kernel writes (x,
// residual, the two outputs, the logits scratch, the arrival counter, the routing outputs); a warp past the last expert
// norms the row too (it stores its share of the outputs) but requests no weights and computes no logit.
template <int DT, int CH>
__device__ __forceinline__ void ar_token(const void* __restrict__ x, const void* __restrict__ r,
                                         const float* __restrict__ gain, float norm_eps,
                                         void* __restrict__ normed, void* __restrict__ summed,
                                         const float* __restrict__ w, int E, int D, float* __restrict__ logits,
                                         const float* __restrict__ bias, float* __restrict__ w_out,
                                         i64* __restrict__ id_out, int* __restrict__ cnt, int EG, int n_group,
                                         int topk_group, int top_k, float scale, float eps) {
    __shared__ int last;
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    const int e = blockIdx.x * warps + (threadIdx.x >> 5);  // also the warp's index in the token's grid row
    const int W = gridDim.x * warps;  // the warps of the token's grid row
    const i64 t = blockIdx.y;
    const bool has = e < E;
    const float l = ar_norm_logit<DT, CH>(x, r, gain, norm_eps, w, has, e, D, t, normed, summed, e, W, lane);
    if (has && lane == 0) logits[t * E + e] = l;
    __syncthreads();  // the block's logits stored before thread 0's release
    if (threadIdx.x == 0) last = rt_arrive(cnt + t) == (int)gridDim.x - 1;
    __syncthreads();  // the acquire before any thread of the last block reads
    if (!last || threadIdx.x >= 32) return;
    if (E <= 32 * RT_SLOTS_FEW)
        rt_route<RT_SLOTS_FEW>(t, logits, bias, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps, lane);
    else
        rt_route<RT_SLOTS>(t, logits, bias, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps, lane);
    if (lane == 0) cnt[t] = 0;
}

// x, residual [T, D] (the kernel's activation dtype), gain [D] float32 -> normed, summed [T, D] (that dtype); w [E, D]
// float32, bias [E] float32 -> logits [T, E] float32 (scratch), w_out [T, top_k] float32, id_out [T, top_k] int64; cnt
// [>= T] int32, zero before and after the launch. Launched with programmatic dependent launch and 64 threads (two
// warps) a block. A kernel a dtype: each gets its own registers (one kernel for the three, its branches sharing one
// allocation, spilled), and its own chunks a round (AR_CHUNKS_*)
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(64) add_rmsnorm_router_pdl_f32(
    const void* __restrict__ x, const void* __restrict__ r, const float* __restrict__ gain, float norm_eps,
    void* __restrict__ normed, void* __restrict__ summed, const float* __restrict__ w, int E, int D,
    float* __restrict__ logits, const float* __restrict__ bias, float* __restrict__ w_out, i64* __restrict__ id_out,
    int* __restrict__ cnt, int EG, int n_group, int topk_group, int top_k, float scale, float eps) {
    ar_token<DT_F32, AR_CHUNKS_32>(x, r, gain, norm_eps, normed, summed, w, E, D, logits, bias, w_out, id_out, cnt, EG,
                         n_group, topk_group, top_k, scale, eps);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(64) add_rmsnorm_router_pdl_bf16(
    const void* __restrict__ x, const void* __restrict__ r, const float* __restrict__ gain, float norm_eps,
    void* __restrict__ normed, void* __restrict__ summed, const float* __restrict__ w, int E, int D,
    float* __restrict__ logits, const float* __restrict__ bias, float* __restrict__ w_out, i64* __restrict__ id_out,
    int* __restrict__ cnt, int EG, int n_group, int topk_group, int top_k, float scale, float eps) {
    ar_token<DT_BF16, AR_CHUNKS_BF16>(x, r, gain, norm_eps, normed, summed, w, E, D, logits, bias, w_out, id_out, cnt, EG,
                         n_group, topk_group, top_k, scale, eps);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(64) add_rmsnorm_router_pdl_f16(
    const void* __restrict__ x, const void* __restrict__ r, const float* __restrict__ gain, float norm_eps,
    void* __restrict__ normed, void* __restrict__ summed, const float* __restrict__ w, int E, int D,
    float* __restrict__ logits, const float* __restrict__ bias, float* __restrict__ w_out, i64* __restrict__ id_out,
    int* __restrict__ cnt, int EG, int n_group, int topk_group, int top_k, float scale, float eps) {
    ar_token<DT_F16, AR_CHUNKS_F16>(x, r, gain, norm_eps, normed, summed, w, E, D, logits, bias, w_out, id_out, cnt, EG,
                         n_group, topk_group, top_k, scale, eps);
}
