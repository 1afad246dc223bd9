// moe_router.cu: a decode token's router in one launch: logits = x W^T in float32, then DeepSeek-V3 routing.
//
// Grid (cdiv(E, warps a block), T), a warp an expert. Lane l reads float4 chunks l, l + 32, ... of the expert's
// float32 weight row and the same chunks of x[t]; RT_CHUNKS of them are requested before any is used (a row of up
// to 2560 values in one memory round trip), the lane sums its products in chunk order and the warp adds its lanes
// (butterfly). The logit goes to logits[t, e]. The last block of token t to finish (an int32 arrival counter per
// token, which that block puts back to zero for the next launch or graph replay) routes t with its warp 0, as the
// reference defines it (plugins/sparkops_numpy/moe_router.py):
//   s = sigmoid(logit), s' = s + bias chooses; a group's score is the sum of its two best s' (its best alone when
//   a group holds one expert); the topk_group best groups are kept (ties: the lower group) and s' of the others
//   becomes 0.0; top_k of s' by repeated warp arg-max (ties: the lower expert id); w = s[id] / (sum + eps) * scale.
// Lane l holds experts l, l + 32, ... (8 of them up to 256 experts, else RT_SLOTS: E <= 512), groups are lanes
// (n_group <= 32) and pick k is lane k (top_k <= 32); the host hands every other shape to another implementation
// (moe_router.py's policy). A pick costs two single-instruction warp reductions (__reduce_max_sync over keys that
// order as the floats do, then __reduce_min_sync over the ids holding the maximum) and one lane's look at its slots.
// Session 15's first form (a shuffle arg-max of (value, id), every lane scanning 16 slots a pick) lost to Triton's
// router, 8.3-9.2 against 7.6 us a layer; its routing tail was the suspect (by its instruction chain, not measured).
//
// Memory order of the arrival (the pattern of sparkops_triton/_arrival.py and of CUTLASS's split-K semaphore): the
// block's logit stores, a barrier, one acq_rel atomic add at GPU scope by thread 0 (release: cumulative over what the
// barrier ordered before it; acquire: every earlier block's release), a barrier; the last block then reads every
// logit through L2 (__ldcg), never a stale L1 line. No __threadfence: the first form fenced in every writing lane
// (MEMBAR.SC.GPU) and again before the atomic.
#include "common.cuh"
#include "router_route.cuh"

// float4 chunks a lane requests before it uses any: 32 lanes x 4 x 20 = 2560 values a round trip
#define RT_CHUNKS 20
// registers a thread may use: room for a lane's RT_CHUNKS weight and activation chunks at once (float32 activations:
// 160 registers of them)
#define RT_MAXNREG 200
// RT_PROBE: a stage left out, for bench/probes/router_anatomy.py alone (every registered build compiles it as 0, the
// whole router): 1 leaves out the routing (the last block of a token only zeroes its counter), 2 the arrival too (each
// block stores its logits and ends), 3 x too (a logit is its weights' sum: nothing is read after the wait). Negative
// values keep the arrival and split the routing's 2.76 us (GPU session 32) by what the last block's warp does
// (rt_route_probe): -4 only writes the token's outputs (lane k: id k, weight 1 / top_k), -1 first loads the logits row
// and the biases as rt_route does (the outputs their warp sum), -2 also forms the scores and choosers (sigmoid, bias)
#ifndef RT_PROBE
#define RT_PROBE 0
#endif

// 4 activations x[i .. i + 3] as float32 (i a multiple of 4; the row 16-byte aligned for float32, 8 for 16-bit).
// NC: through the read-only path (__ldg), for an x no kernel writes while this one runs. false (the PDL form, whose x
// the norm still running writes): __ldca, a coherent load. A read-only load promises ptxas the data never changes
// during the kernel, so it may schedule it above griddepcontrol.wait: GPU session 21 caught the PDL router's float32
// form routing with a stale x in a replayed graph (test_cupy_pdl.py), the bfloat16 form not. rw_raw16 does the same.
template <int DT, bool NC = true>
__device__ __forceinline__ float4 rt_x4(const void* __restrict__ x, i64 i) {
    const float4* x4 = (const float4*)((const float*)x + i);
    if (DT == DT_F32) return NC ? __ldg(x4) : __ldca(x4);
    const uint2 u = NC ? __ldg((const uint2*)((const u16*)x + i)) : __ldca((const uint2*)((const u16*)x + i));
    if (DT == DT_BF16)
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                           __uint_as_float(u.y & 0xffff0000u));
    return make_float4(f16_to_f32((u16)(u.x & 0xffffu)), f16_to_f32((u16)(u.x >> 16)), f16_to_f32((u16)(u.y & 0xffffu)),
                       f16_to_f32((u16)(u.y >> 16)));
}

// one round of a lane's weight chunks (base + 32 i + lane, i < RT_CHUNKS), zeros past the row's end
__device__ __forceinline__ void rt_w_round(const float4* __restrict__ wr, int base, int n4, int lane,
                                           float4 (&wv)[RT_CHUNKS]) {
#pragma unroll
    for (int i = 0; i < RT_CHUNKS; ++i) {
        const int c = base + 32 * i + lane;
        wv[i] = c < n4 ? __ldcs(wr + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // streamed: read once a token
    }
}

// the same round of x's chunks, then its products added to acc in chunk order
template <int DT, bool NC>
__device__ __forceinline__ float rt_x_round(const void* __restrict__ x, i64 xr, int base, int n4, int lane,
                                            const float4 (&wv)[RT_CHUNKS], float acc) {
    if (RT_PROBE >= 3) {  // the probe's stage without x: the weights' sum
#pragma unroll
        for (int i = 0; i < RT_CHUNKS; ++i) acc += (wv[i].x + wv[i].y) + (wv[i].z + wv[i].w);
        return acc;
    }
    float4 xv[RT_CHUNKS];
#pragma unroll
    for (int i = 0; i < RT_CHUNKS; ++i) {
        const int c = base + 32 * i + lane;
        xv[i] = c < n4 ? rt_x4<DT, NC>(x, xr + 4 * (i64)c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < RT_CHUNKS; ++i) {
        acc = fmaf(wv[i].x, xv[i].x, acc);
        acc = fmaf(wv[i].y, xv[i].y, acc);
        acc = fmaf(wv[i].z, xv[i].z, acc);
        acc = fmaf(wv[i].w, xv[i].w, acc);
    }
    return acc;
}

// x[t] . w[e] over D values (D a multiple of 4), every lane ending with the same sum. PDL: the first round's weight
// loads are requested, then the thread waits for the kernel before (pdl_wait) on every path (no round at all
// included), and only then reads x, its output: tests/test_cuda_pdl_order.py proves from the SASS that no read-only
// load can run before the wait (a wait inside the loop, taken when base == 0, was one no analysis of the compiled
// code could prove). The same loads and products in the same order either way: the same bits.
template <int DT, bool PDL = false>
__device__ __forceinline__ float rt_logit(const void* __restrict__ x, const float* __restrict__ w, int D, i64 t, int e,
                                          int lane) {
    const int n4 = D >> 2;
    const float4* wr = (const float4*)(w + (i64)e * D);
    const i64 xr = t * (i64)D;
    float acc = 0.0f;
    float4 wv[RT_CHUNKS];
    if (PDL) {
        rt_w_round(wr, 0, n4, lane, wv);
        pdl_launch_dependents();
        pdl_wait();  // x is the kernel before's output
        for (int base = 0; base < n4; base += 32 * RT_CHUNKS) {
            if (base > 0) rt_w_round(wr, base, n4, lane, wv);
            acc = rt_x_round<DT, false>(x, xr, base, n4, lane, wv, acc);
        }
    } else {
        for (int base = 0; base < n4; base += 32 * RT_CHUNKS) {
            rt_w_round(wr, base, n4, lane, wv);
            acc = rt_x_round<DT, true>(x, xr, base, n4, lane, wv, acc);
        }
    }
    return warp_sum(acc);
}


#if RT_PROBE < 0
// the probe's partial routing by one warp (RT_PROBE above), the lanes' experts as rt_route<RT_SLOTS_FEW> holds them
// (E <= 256: the 48B's); every variant writes the same outputs, so the differences between them are its stages
__device__ __forceinline__ void rt_route_probe(i64 t, const float* __restrict__ logits, const float* __restrict__ bias,
                                               float* __restrict__ w_out, i64* __restrict__ id_out, int E, int top_k,
                                               int lane) {
    float acc = 1.0f / (float)top_k;
    if (RT_PROBE != -4) {
        float s[RT_SLOTS_FEW], c[RT_SLOTS_FEW];
#pragma unroll
        for (int j = 0; j < RT_SLOTS_FEW; ++j) {  // rt_route's loads: every one issued before any is used
            const int e = min(j * 32 + lane, E - 1);
            s[j] = __ldcg(logits + t * E + e);
            c[j] = __ldg(bias + e);
        }
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < RT_SLOTS_FEW; ++j) {
            if (RT_PROBE <= -2) {  // rt_route's scores and choosers
                const bool ok = j * 32 + lane < E;
                s[j] = ok ? 1.0f / (1.0f + expf(-s[j])) : 0.0f;
                c[j] = ok ? s[j] + c[j] : 0.0f;
            }
            sum += s[j] + c[j];
        }
        acc = warp_sum(sum);
    }
    if (lane < top_k) {
        w_out[t * top_k + lane] = acc;
        id_out[t * top_k + lane] = (i64)lane;
    }
}
#endif

// PDL: every thread waits for the kernel before before it touches anything a kernel writes (x, the logits scratch, the
// arrival counter, the outputs); a warp with an expert first requests its weight row (rt_logit)
template <int DT, bool PDL = false, bool MERGE = false>
__device__ __forceinline__ void rt_token(const void* __restrict__ x, const float* __restrict__ w, int E, int D,
                                         float* __restrict__ logits, const float* __restrict__ bias,
                                         float* __restrict__ w_out, i64* __restrict__ id_out, int* __restrict__ cnt,
                                         int EG, int n_group, int topk_group, int top_k, float scale, float eps) {
    __shared__ int last;
    const int lane = threadIdx.x & 31;
    const int e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const i64 t = blockIdx.y;
    if (e < E) {
        const float l = rt_logit<DT, PDL>(x, w, D, t, e, lane);
        if (lane == 0) logits[t * E + e] = l;
    } else if (PDL) {
        pdl_launch_dependents();
        pdl_wait();
    }
    if (RT_PROBE >= 2) return;
    __syncthreads();  // the block's logits stored before thread 0's release
    if (threadIdx.x == 0) last = rt_arrive(cnt + t) == (int)gridDim.x - 1;
    __syncthreads();  // the acquire before any thread of the last block reads
    if (!last || threadIdx.x >= 32) return;
    if (RT_PROBE >= 1) {
        if (threadIdx.x == 0) cnt[t] = 0;
        return;
    }
#if RT_PROBE < 0
    rt_route_probe(t, logits, bias, w_out, id_out, E, top_k, threadIdx.x);
    if (threadIdx.x == 0) cnt[t] = 0;
    return;
#endif
    if (MERGE && E <= 32 * RT_SLOTS_FEW && top_k <= RT_MERGE_K)
        rt_route_merge<RT_SLOTS_FEW>(t, logits, bias, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps,
                                     lane);
    else if (E <= 32 * RT_SLOTS_FEW)
        rt_route<RT_SLOTS_FEW>(t, logits, bias, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps, lane);
    else
        rt_route<RT_SLOTS>(t, logits, bias, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps, lane);
    if (lane == 0) cnt[t] = 0;
}

// x [T, D] (activation dtype x_dt), w [E, D] float32, bias [E] float32 -> logits [T, E] float32 (scratch),
// w_out [T, top_k] float32, id_out [T, top_k] int64; cnt [>= T] int32, zero before and after the launch.
// Launched with 128 threads or fewer. __maxnreg__: ptxas left to itself (96 registers) sinks most loads back beside
// their FFMAs (9 of the 40 of a bf16 row came first); with room for them, all 40 are issued before the first FFMA.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(RT_MAXNREG) moe_router_rowwarp(const void* __restrict__ x, int x_dt,
                                                                      const float* __restrict__ w, int E, int D,
                                                                      float* __restrict__ logits,
                                                                      const float* __restrict__ bias,
                                                                      float* __restrict__ w_out,
                                                                      i64* __restrict__ id_out, int* __restrict__ cnt,
                                                                      int EG, int n_group, int topk_group, int top_k,
                                                                      float scale, float eps) {
    if (x_dt == DT_F32)
        rt_token<DT_F32>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale, eps);
    else if (x_dt == DT_BF16)
        rt_token<DT_BF16>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale, eps);
    else
        rt_token<DT_F16>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale, eps);
}

// moe_router_rowwarp launched with programmatic dependent launch (_pdl.py): each warp's weight row is requested
// before it waits for the kernel before (the norm that writes x), so the row's read overlaps that kernel; the same
// arithmetic in the same order, so the same bits (the gate proves it). Launched plainly it is moe_router_rowwarp.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(RT_MAXNREG) moe_router_rowwarp_pdl(const void* __restrict__ x, int x_dt,
                                                                          const float* __restrict__ w, int E, int D,
                                                                          float* __restrict__ logits,
                                                                          const float* __restrict__ bias,
                                                                          float* __restrict__ w_out,
                                                                          i64* __restrict__ id_out,
                                                                          int* __restrict__ cnt, int EG, int n_group,
                                                                          int topk_group, int top_k, float scale,
                                                                          float eps) {
    if (x_dt == DT_F32)
        rt_token<DT_F32, true>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale,
                               eps);
    else if (x_dt == DT_BF16)
        rt_token<DT_BF16, true>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale,
                                eps);
    else
        rt_token<DT_F16, true>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale,
                               eps);
}

// moe_router_rowwarp_pdl with the merged routing (router_route.cuh's rt_route_merge: no serial picks) where a lane
// holds 8 experts at most (E <= 256) and top_k <= 8, rt_route otherwise: the same launch, the same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(RT_MAXNREG) moe_router_rowwarp_pdl_merge(
    const void* __restrict__ x, int x_dt, const float* __restrict__ w, int E, int D, float* __restrict__ logits,
    const float* __restrict__ bias, float* __restrict__ w_out, i64* __restrict__ id_out, int* __restrict__ cnt, int EG,
    int n_group, int topk_group, int top_k, float scale, float eps) {
    if (x_dt == DT_F32)
        rt_token<DT_F32, true, true>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k,
                                     scale, eps);
    else if (x_dt == DT_BF16)
        rt_token<DT_BF16, true, true>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k,
                                      scale, eps);
    else
        rt_token<DT_F16, true, true>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k,
                                     scale, eps);
}

// rt_token with the sorted routing tail (moe_router=cupy_rowwarp_pdl_sorted): warp 0 of every block copies the
// selection biases into shared memory as the block starts, before its PDL wait (the last block, unknown until the
// arrival, then reads them there, not from memory that has likely left L2 since the token before), and the last block
// routes by rt_route_sorted. The logits, the arrival and the routing rule are rt_token's: the same bits.
template <int DT>
__device__ __forceinline__ void rt_token_sorted(const void* __restrict__ x, const float* __restrict__ w, int E, int D,
                                                float* __restrict__ logits, const float* __restrict__ bias,
                                                float* __restrict__ w_out, i64* __restrict__ id_out,
                                                int* __restrict__ cnt, int EG, int n_group, int topk_group, int top_k,
                                                float scale, float eps) {
    __shared__ int last;
    __shared__ float bias_s[32 * RT_SLOTS];
    const int lane = threadIdx.x & 31;
    const int e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const i64 t = blockIdx.y;
    if (threadIdx.x < 32) rt_bias_copy(bias, bias_s, E, lane);
    if (e < E) {
        const float l = rt_logit<DT, true>(x, w, D, t, e, lane);
        if (lane == 0) logits[t * E + e] = l;
    } else {
        pdl_launch_dependents();
        pdl_wait();
    }
    __syncthreads();  // the block's logits stored before thread 0's release
    if (threadIdx.x == 0) last = rt_arrive(cnt + t) == (int)gridDim.x - 1;
    __syncthreads();  // the acquire before any thread of the last block reads
    if (!last || threadIdx.x >= 32) {
        cp_async_wait_all();  // no copy left in flight at the block's end
        return;
    }
    if (E <= 32 * RT_SLOTS_FEW)
        rt_route_sorted<RT_SLOTS_FEW>(t, logits, bias_s, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps,
                                      lane);
    else
        rt_route_sorted<RT_SLOTS>(t, logits, bias_s, w_out, id_out, E, EG, n_group, topk_group, top_k, scale, eps,
                                  lane);
    if (lane == 0) cnt[t] = 0;
}

// moe_router_rowwarp_pdl with the sorted routing tail (rt_token_sorted): the same launch, the same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(RT_MAXNREG) moe_router_rowwarp_pdl_sorted(
    const void* __restrict__ x, int x_dt, const float* __restrict__ w, int E, int D, float* __restrict__ logits,
    const float* __restrict__ bias, float* __restrict__ w_out, i64* __restrict__ id_out, int* __restrict__ cnt, int EG,
    int n_group, int topk_group, int top_k, float scale, float eps) {
    if (x_dt == DT_F32)
        rt_token_sorted<DT_F32>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale,
                                eps);
    else if (x_dt == DT_BF16)
        rt_token_sorted<DT_BF16>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale,
                                 eps);
    else
        rt_token_sorted<DT_F16>(x, w, E, D, logits, bias, w_out, id_out, cnt, EG, n_group, topk_group, top_k, scale,
                                eps);
}
