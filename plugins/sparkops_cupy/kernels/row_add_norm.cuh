// row_add_norm.cuh: one token's residual add and RMSNorm by the one block that finishes a kernel's output row - the
// last block to arrive in moe_down_norm.cu (the MoE down) and linear_norm.cu (the o_proj GEMV), which fold the next
// norm into the kernel that writes its input, so that both norm with the same instructions.
//
// summed = y + residual in float32; element e of the row belongs to thread e mod blockDim.x (a multiple of 32, at most
// 1024); the squares summed per thread in element order, a butterfly within a warp, the warps in order; rinv =
// 1 / sqrt(mean + eps); normed = (summed * rinv) * w, both stored in the activation dtype. Every float operation is
// pinned by an _rn intrinsic (rmsnorm.cu's row). y was stored by other blocks of the kernel, so it is read through
// L2 (__ldcg: never a stale L1 line), after the caller's acquire.
#pragma once
#include "common.cuh"
#include "router_route.cuh"  // rt_arrive: the acq_rel arrival the callers pick the last block by

// groups of the tree arrival (ran_last_block): a grid's blocks arrive at RAN_GROUPS counters (block b at
// b % RAN_GROUPS), the last of each group at one more; the counters are cnt[1 .. RAN_GROUPS], then cnt[0]
#define RAN_GROUPS 32

// the arrival's forms (ran_last_block's `form`; ARRIVALS in the Python modules, in this order)
#define RAN_FLAT 0
#define RAN_TREE 1
#define RAN_RELEASE 2
// timing only (never a module's ARRIVAL outside a side-by-side, _counters.TIMING_ONLY): a relaxed atomic, no release
// and no acquire, so the last block may read rows not yet visible to it; its column says what the GPU-scope release
// every block makes (MEMBAR.ALL.GPU before its atomic) costs the kernel
#define RAN_RELAXED 3

// RAN_PROBE: stages of the fold left out, for bench/probes/fold_anatomy.py only (it compiles the folds' sources with
// the define; the registered kernels never set it): 0 the whole fold; 1 no norm (the last block returns after its
// arrival, the counters still zeroed); 2 no arrival either (every block returns after storing its outputs, as the
// plain kernel does); 3 the whole fold with the norm's loop form (one element at a time, not held in registers); 4 the
// whole fold with the scalar form sessions 36-38 timed (a value a load, held in registers). METHOD.md's way to place
// time inside a kernel without counters, as moe_router.cu's RT_PROBE.
#ifndef RAN_PROBE
#define RAN_PROBE 0
#endif

// one arrival at *c that only releases (the block's stores, ordered before it by a barrier): no acquire, so no
// invalidation of the SM's L1; the old count
__device__ __forceinline__ int ran_arrive_release(int* c) {
    int old;
    asm volatile("atom.release.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    return old;
}

// one arrival at *c with neither release nor acquire (RAN_RELAXED, timing only); the old count
__device__ __forceinline__ int ran_arrive_relaxed(int* c) {
    int old;
    asm volatile("atom.relaxed.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    return old;
}

// Whether this block is the grid's last to arrive, every block's stores before the call ordered before the last
// block's reads after it; thread 0 asks (an atomic add at GPU scope on a counter it meets), the block learns by a
// shared int or __syncthreads_or (GLOBAL). The last block's counters are zero again when it returns.
//   RAN_FLAT: every block at cnt[0] by an acq_rel atomic (moe_router.cu's arrival).
//   RAN_TREE: each block at its group's counter and the last of a group at cnt[0] (acq_rel): RAN_GROUPS counters in
//     separate lines take the grid's burst of atomics, not one. Release-acquire chains carry every block's stores to
//     the last block (a group's last arriver acquires its group's releases and releases them on, cumulatively).
//   RAN_RELEASE: every block at cnt[0] by a release-only atomic; the block that learns it is last then runs an acq_rel
//     fence (PTX's fence-based acquire: its atomic read the count the other blocks' releases wrote). The acq_rel
//     atomic compiles to MEMBAR.ALL.GPU, the atomic and CCTL.IVALL - an invalidation of the whole L1 of the SM, on
//     every block, while its neighbours still read their x (or the hidden vector) through that L1; here only the last
//     block pays it (nvdisasm of both forms, sm_90).
// Why three: GPU session 36 (H100) timed the MoE down with the flat arrival and the norm in its last block at 15.9 us a
// layer over the plain down (5.5 in the o_proj GEMV), ~1 us expected. Session 37 timed the tree form the same (not
// contention on one address) and the release form the same (not the L1 invalidation on every block). Session 38's
// probe (RAN_PROBE 1: the arrival without the norm) put the arrival at +1.8 us a layer in the MoE down and nothing in
// the o_proj: the tail was the norm's (row_add_norm_vec says why), not any arrival's.
// GLOBAL (the scratch's form, below): false, the flag through a shared int after a barrier; true, through
// __syncthreads_or - no shared memory in the kernel.
template <bool GLOBAL>
__device__ __forceinline__ bool ran_last_block(int* __restrict__ cnt, int form) {
    __syncthreads();  // the block's outputs stored before thread 0's release
    int mine = 0;
    if (threadIdx.x == 0) {
        const int blocks = (int)gridDim.x;
        if (form == RAN_RELAXED) {
            mine = ran_arrive_relaxed(cnt) == blocks - 1;
        } else if (form == RAN_RELEASE) {
            mine = ran_arrive_release(cnt) == blocks - 1;
            if (mine) asm volatile("fence.acq_rel.gpu;" ::: "memory");  // acquire every block's release
        } else if (form != RAN_TREE) {
            mine = rt_arrive(cnt) == blocks - 1;
        } else {
            const int g = (int)blockIdx.x % RAN_GROUPS, groups = blocks < RAN_GROUPS ? blocks : RAN_GROUPS;
            const int members = (blocks - g + RAN_GROUPS - 1) / RAN_GROUPS;  // blocks b < gridDim.x with b % G == g
            if (rt_arrive(cnt + 1 + g) == members - 1) {
                cnt[1 + g] = 0;  // every member has arrived: zero for the next launch
                mine = rt_arrive(cnt) == groups - 1;
            }
        }
        if (mine) cnt[0] = 0;
    }
    if constexpr (GLOBAL) {
        return __syncthreads_or(mine) != 0;  // the acquire before any thread of the last block reads
    } else {
        __shared__ int last;
        if (threadIdx.x == 0) last = mine;
        __syncthreads();  // the acquire before any thread of the last block reads
        return last != 0;
    }
}

// element i of an activation row written by another block of this kernel (or read once), through L2
__device__ __forceinline__ float ran_load(const void* p, i64 i, int dt) {
    if (dt == DT_F32) return __ldcg((const float*)p + i);
    const u16 b = __ldcg((const unsigned short*)p + i);
    return dt == DT_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

// values of the row a thread holds at once: a row of up to RAN_MAX x blockDim.x values (4096 at 128 threads) is
// read in one round trip - every load of y and of the residual issued before any is used - and kept in registers for
// the second pass. GPU session 36 (H100) timed the first form, a loop of dependent loads twice over the row, at
// 7.3 us in the o_proj's last block and 16.3 us in the MoE down's: a round trip each of 36 iterations. This form
// took only 16.3 -> 15.9: its loads are issued together in the source, but each is converted right after it under a
// runtime dtype branch, and the compiled code (nvdisasm, sm_90) waits on each before the next. Session 38: +17.4 us a
// layer in the MoE down (RAN_PROBE 4), against the vector form's +4.0.
#define RAN_MAX 32

// The scratch the last block's warps sum their squares through (GLOBAL): false ("shared"), a shared float a warp;
// true ("global"), a float a warp in global memory (`part`, the counter pool's RAN_PART_OFFSET.. floats, zero before
// and after), ordered by the block's barriers and read through L2. The same sums in the same order either way, so the
// same bits. Why: GPU session 37 (H100) timed the three arrival forms alike (the fold still ~15 us a layer over the
// plain MoE down, ~6 over the plain o_proj GEMV), and the plain kernels use no shared memory, the fused ones 144
// bytes of it; the kernel before (the MoE gate/up, ~24 KB a block) holds the SM's shared-memory carveout. The
// suspect: a block whose kernel wants another carveout waits for the SM to drain, so the down's blocks no longer come
// in early under PDL. The global form takes shared memory out of the kernel: session 37 timed it the same as the shared
// one, so that suspect is refuted too (session 38 found the cost in the norm's loads).
#define RAN_PART_OFFSET (1 + RAN_GROUPS)

// The block's sum of squares in the fixed order (each thread's partial `acc` in its elements' order, a butterfly within
// a warp, the warps in order) and the row's 1 / sqrt(mean + eps), read by every thread. GLOBAL: the warps' sums
// through `part` (zeroed again after), else through shared memory.
template <bool GLOBAL>
__device__ __forceinline__ float ran_rinv(float acc, int D, float eps, float* __restrict__ part) {
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    acc = warp_sum(acc);
    float total;
    if constexpr (GLOBAL) {
        if ((threadIdx.x & 31) == 0) part[warp] = acc;
        __syncthreads();  // every warp's partial visible to the block
        total = __ldcg(part);
        for (int i = 1; i < warps; ++i) total = __fadd_rn(total, __ldcg(part + i));
        __syncthreads();  // every thread has read them
        if ((threadIdx.x & 31) == 0) part[warp] = 0.0f;  // zero for the next launch
    } else {
        __shared__ float red[32];
        if ((threadIdx.x & 31) == 0) red[warp] = acc;
        __syncthreads();
        total = red[0];
        for (int i = 1; i < warps; ++i) total = __fadd_rn(total, red[i]);
    }
    return __frsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)D), eps));
}

// 16-byte chunks a thread at most in the vector form (row_add_norm_vec) for 16-bit values and for floats: at 128
// threads, rows of up to 3 x 128 x 8 = 3072 16-bit values or 5 x 128 x 4 = 2560 floats (the 48B's D = 2304 in either)
#define RAN_VEC16 3
#define RAN_VEC32 5

// value i of a chunk as a float (DT a template constant and i unrolled: no branch between a load and its use)
template <int DT>
__device__ __forceinline__ float ran_value(const uint4 v, int i) {
    const u32 word = (i >> (DT == DT_F32 ? 0 : 1)) == 0 ? v.x : (i >> (DT == DT_F32 ? 0 : 1)) == 1 ? v.y
                   : (i >> (DT == DT_F32 ? 0 : 1)) == 2 ? v.z : v.w;
    if constexpr (DT == DT_F32) return __uint_as_float(word);
    const u16 half = (u16)((i & 1) ? word >> 16 : word & 0xffffu);
    return DT == DT_BF16 ? bf16_to_f32(half) : f16_to_f32(half);
}

// value i of a chunk's gains (PER / 4 float4s)
__device__ __forceinline__ float ran_gain(const float4 a, const float4 b, int i) {
    const float4 v = i < 4 ? a : b;
    const int k = i & 3;
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// two values in DT, each rounded to nearest even (store_act's conversions), as one 32-bit word; for floats, lo alone
template <int DT>
__device__ __forceinline__ u32 ran_word(float lo, float hi) {
    if constexpr (DT == DT_F32) return __float_as_uint(lo);
    if constexpr (DT == DT_BF16) return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16);
    return (u32)f32_to_f16(lo) | ((u32)f32_to_f16(hi) << 16);
}

// The vector form (written after GPU session 38): chunk c (16 bytes: values PER c .. PER c + PER - 1) belongs to thread
// c mod blockDim.x. Every chunk of y, of the residual and of w is requested before the first is used: one round trip
// through L2, where the scalar form's loads, each converted right after it (a runtime dtype branch between them),
// waited about one by one; session 38's probe (bench/probes/fold_anatomy.py) put the folds' whole tail there (the MoE
// down's +17.2 us a layer with the norm, +1.8 without it). The sums are recomputed from the held chunks after the
// reduction rather than held as floats (registers). The caller checked ran_vec_fits. Session 38 (H100), the same
// probe: +4.0 us a layer over the plain down (the arrival's 1.8 with it) and +1.1 over the plain o_proj, 80 and 72
// registers; per op in the chain both folds still lose to the Triton norm after the plain kernel (x0.893, x0.864).
template <bool GLOBAL, int DT>
__device__ __forceinline__ void row_add_norm_vec(const void* y, const void* residual, const float* __restrict__ w,
                                                 float eps, int D, void* __restrict__ normed,
                                                 void* __restrict__ summed, float* __restrict__ part) {
    constexpr int PER = DT == DT_F32 ? 4 : 8, VEC = DT == DT_F32 ? RAN_VEC32 : RAN_VEC16;  // values a chunk, chunks
    const int chunks = D / PER, step = blockDim.x;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    uint4 yv[VEC], rv[VEC];
    float4 wa[VEC], wb[VEC];  // a chunk's gains: 4 floats (wa) or 8 (wa, wb)
#pragma unroll
    for (int j = 0; j < VEC; ++j) {  // every load first
        const int c = threadIdx.x + j * step;
        const bool in = c < chunks;
        yv[j] = in ? __ldcg((const uint4*)y + c) : zero;
        rv[j] = in ? __ldcg((const uint4*)residual + c) : zero;
        const float4* g = (const float4*)w + (i64)c * (PER / 4);
        wa[j] = in ? __ldg(g) : make_float4(0.f, 0.f, 0.f, 0.f);
        wb[j] = in && PER == 8 ? __ldg(g + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {  // element order; a chunk past the row adds 0 * 0, leaving acc as it is
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const float v = __fadd_rn(ran_value<DT>(yv[j], i), ran_value<DT>(rv[j], i));
            acc = __fmaf_rn(v, v, acc);
        }
    }
    const float rinv = ran_rinv<GLOBAL>(acc, D, eps, part);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const int c = threadIdx.x + j * step;
        if (c >= chunks) continue;
        u32 sw[4], nw[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // word q: values 2q, 2q + 1 (16-bit) or q (floats)
            const int i0 = PER == 8 ? 2 * q : q, i1 = PER == 8 ? 2 * q + 1 : q;
            const float s0 = __fadd_rn(ran_value<DT>(yv[j], i0), ran_value<DT>(rv[j], i0));
            const float s1 = __fadd_rn(ran_value<DT>(yv[j], i1), ran_value<DT>(rv[j], i1));
            sw[q] = ran_word<DT>(s0, s1);
            nw[q] = ran_word<DT>(__fmul_rn(__fmul_rn(s0, rinv), ran_gain(wa[j], wb[j], i0)),
                                 __fmul_rn(__fmul_rn(s1, rinv), ran_gain(wa[j], wb[j], i1)));
        }
        ((uint4*)summed)[c] = make_uint4(sw[0], sw[1], sw[2], sw[3]);
        ((uint4*)normed)[c] = make_uint4(nw[0], nw[1], nw[2], nw[3]);
    }
}

// whether the vector form takes the row: whole 16-byte chunks, at most RAN_VEC16 / RAN_VEC32 a thread, every pointer
// 16-byte aligned
__device__ __forceinline__ bool ran_vec_fits(const void* y, const void* residual, int dt, const float* w, int D,
                                             const void* normed, const void* summed) {
    const int per = dt == DT_F32 ? 4 : 8, vec = dt == DT_F32 ? RAN_VEC32 : RAN_VEC16;
    const u64 addr = (u64)y | (u64)residual | (u64)w | (u64)normed | (u64)summed;
    return RAN_PROBE != 3 && RAN_PROBE != 4 && (addr & 15u) == 0 && D % per == 0 && D / per <= vec * (int)blockDim.x;
}

// summed = y + residual, normed = rmsnorm(summed) * w for one token's row of D values, by one block: the vector form
// where it fits (ran_vec_fits), else the scalar form (below). The two sum the squares in other orders: each is
// deterministic, neither is the Triton add_rmsnorm's order (the tolerance row's claim).
template <bool GLOBAL>
__device__ __forceinline__ void row_add_norm_scalar(const void* y, const void* residual, int dt,
                                                    const float* __restrict__ w, float eps, int D,
                                                    void* __restrict__ normed, void* __restrict__ summed,
                                                    float* __restrict__ part);

template <bool GLOBAL>
__device__ __forceinline__ void row_add_norm(const void* y, const void* residual, int dt, const float* __restrict__ w,
                                             float eps, int D, void* __restrict__ normed, void* __restrict__ summed,
                                             float* __restrict__ part) {
    if (ran_vec_fits(y, residual, dt, w, D, normed, summed)) {  // the same for every thread of the block
        if (dt == DT_BF16) row_add_norm_vec<GLOBAL, DT_BF16>(y, residual, w, eps, D, normed, summed, part);
        else if (dt == DT_F16) row_add_norm_vec<GLOBAL, DT_F16>(y, residual, w, eps, D, normed, summed, part);
        else row_add_norm_vec<GLOBAL, DT_F32>(y, residual, w, eps, D, normed, summed, part);
        return;
    }
    row_add_norm_scalar<GLOBAL>(y, residual, dt, w, eps, D, normed, summed, part);
}

// The scalar form (sessions 36-38's only one): element e belongs to thread e mod blockDim.x, a value a load, held in
// registers when the row has at most RAN_MAX x blockDim.x values, else a loop (the same sums in the same order, so the
// same bits, a round trip a value)
template <bool GLOBAL>
__device__ __forceinline__ void row_add_norm_scalar(const void* y, const void* residual, int dt,
                                                    const float* __restrict__ w, float eps, int D,
                                                    void* __restrict__ normed, void* __restrict__ summed,
                                                    float* __restrict__ part) {
    const int step = blockDim.x;
    const bool held = RAN_PROBE != 3 && D <= RAN_MAX * step;  // RAN_PROBE 3: the loop form, fewer registers
    float s[RAN_MAX];
    float acc = 0.0f;
    if (held) {
        float yv[RAN_MAX], rv[RAN_MAX];
#pragma unroll
        for (int i = 0; i < RAN_MAX; ++i) {  // every load first
            const int e = threadIdx.x + i * step;
            yv[i] = e < D ? ran_load(y, e, dt) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RAN_MAX; ++i) {
            const int e = threadIdx.x + i * step;
            rv[i] = e < D ? ran_load(residual, e, dt) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RAN_MAX; ++i) {  // element order; a value past D adds 0 * 0, leaving acc as it is
            s[i] = __fadd_rn(yv[i], rv[i]);
            acc = __fmaf_rn(s[i], s[i], acc);
        }
    } else {
        for (int e = threadIdx.x; e < D; e += step) {
            const float v = __fadd_rn(ran_load(y, e, dt), ran_load(residual, e, dt));
            acc = __fmaf_rn(v, v, acc);
        }
    }
    const float rinv = ran_rinv<GLOBAL>(acc, D, eps, part);
    if (held) {
#pragma unroll
        for (int i = 0; i < RAN_MAX; ++i) {
            const int e = threadIdx.x + i * step;
            if (e < D) {
                store_act(summed, e, dt, s[i]);
                store_act(normed, e, dt, __fmul_rn(__fmul_rn(s[i], rinv), w[e]));
            }
        }
        return;
    }
    for (int e = threadIdx.x; e < D; e += step) {
        const float v = __fadd_rn(ran_load(y, e, dt), ran_load(residual, e, dt));
        store_act(summed, e, dt, v);
        store_act(normed, e, dt, __fmul_rn(__fmul_rn(v, rinv), w[e]));
    }
}
