// bulk_copy.cuh: Hopper's mbarriers and bulk copies (sm_90). cp.async.bulk copies a run of bytes from global into
// shared memory through the copy engine and completes on an mbarrier's transaction count: one instruction a row, where
// 16-byte cp.async takes a thread's instruction (and its address arithmetic) every 16 bytes through the load/store
// pipeline. Used by attention.cu's bulk split and, through bench/probes/chain_sync.cuh, by the persistent-chain
// probes. Self-contained: included beside common.cuh or without it.
#pragma once

__device__ __forceinline__ unsigned int bulk_smem(const void* p) {  // a shared-memory pointer as a .shared address
    return (unsigned int)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bulk_smem(bar)), "r"(count) : "memory");
}
// one arrival, `bytes` to come
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bulk_smem(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {  // one arrival, no bytes
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bulk_smem(bar)) : "memory");
}
// `bytes` (a multiple of 16; both addresses on 16 bytes) from src into shared memory at dst, counted on bar
__device__ __forceinline__ void bulk_copy_tx(void* dst, const void* src, unsigned int bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(bulk_smem(dst)), "l"(src), "r"(bytes), "r"(bulk_smem(bar)) : "memory");
}
// one copy completing one phase of bar (its expected bytes and its one arrival)
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned int bytes, unsigned long long* bar) {
    mbar_expect(bar, bytes);
    bulk_copy_tx(dst, src, bytes, bar);
}
// has the phase `parity` completed?
__device__ __forceinline__ bool mbar_try(unsigned long long* bar, unsigned int parity) {
    unsigned int done;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bulk_smem(bar)), "r"(parity) : "memory");
    return done != 0;
}
// the phase `parity` has completed (true), or ~0.2 s passed (false: the caller reports it instead of hanging the call)
__device__ __forceinline__ bool mbar_wait_bounded(unsigned long long* bar, unsigned int parity) {
    for (long long spins = 0; spins < (1ll << 22); ++spins) {
        if (mbar_try(bar, parity)) return true;
        __nanosleep(32);
    }
    return false;
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned int parity) {  // the phase has completed
    while (!mbar_try(bar, parity)) {
    }
}
// `bytes` (a multiple of 16, src on 16 bytes) from global memory into the L2 by the copy engine, nothing waiting on it:
// a hint that a later copy of the same bytes finds them there
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, unsigned int bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// the mbarriers' initialisation made visible to the copy engine (before any copy completes on them)
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
