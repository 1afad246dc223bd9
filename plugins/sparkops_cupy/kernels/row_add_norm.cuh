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
// plain kernel does); 3 the whole fold with the norm's loop form (one element at a time, not held in registers). METHOD.md's way to place time inside a kernel without counters, as moe_router.cu's RT_PROBE.
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
// contention on one address) and the release form the same (not the L1 invalidation on every block).
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
// 7.3 us in the o_proj's last block and 16.3 us in the MoE down's: a round trip each of 36 iterations
#define RAN_MAX 32

// The scratch the last block's warps sum their squares through (GLOBAL): false ("shared"), a shared float a warp;
// true ("global"), a float a warp in global memory (`part`, the counter pool's RAN_PART_OFFSET.. floats, zero before
// and after), ordered by the block's barriers and read through L2. The same sums in the same order either way, so the
// same bits. Why: GPU session 37 (H100) timed the three arrival forms alike (the fold still ~15 us a layer over the
// plain MoE down, ~6 over the plain o_proj GEMV), and the plain kernels use no shared memory, the fused ones 144
// bytes of it; the kernel before (the MoE gate/up, ~24 KB a block) holds the SM's shared-memory carveout. The
// suspect: a block whose kernel wants another carveout waits for the SM to drain, so the down's blocks no longer come
// in early under PDL. The global form takes shared memory out of the kernel: session 37 timed it the same as the shared
// one, so that suspect is refuted too.
#define RAN_PART_OFFSET (1 + RAN_GROUPS)

// summed = y + residual, normed = rmsnorm(summed) * w for one token's row of D values, by one block. A longer row than
// RAN_MAX x blockDim.x takes the loop form: the same sums in the same order, so the same bits, a round trip a value
template <bool GLOBAL>
__device__ __forceinline__ void row_add_norm(const void* y, const void* residual, int dt, const float* __restrict__ w,
                                             float eps, int D, void* __restrict__ normed, void* __restrict__ summed,
                                             float* __restrict__ part) {
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5, step = blockDim.x;
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
    const float rinv = __frsqrt_rn(__fadd_rn(__fdiv_rn(total, (float)D), eps));
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
