// chain_sync.cuh: the synchronisation the persistent-chain probes share (persistent_chain.py, q4k_chain.py): an
// acquire load for a grid's arrival counter, Hopper's mbarriers and bulk copies (cp.async.bulk, sm_90: one
// instruction copies a row or a run of rows into shared memory and completes on an mbarrier's transaction count,
// instead of 16-byte cp.async by a warp's lanes through the load/store pipeline the chain's latency-bound loads (the
// counter, x) share; kernels/bulk_copy.cuh), and the GPU's global timer. Included beside common.cuh or without it.
#pragma once
#include "bulk_copy.cuh"  // the mbarriers and bulk copies (the CuPy plugin's kernels/)

__device__ __forceinline__ unsigned int ld_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long global_ns() {  // the GPU's global timer (ns), the same on every SM
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
