// chain_sync.cuh: the synchronisation the persistent-chain probes share (persistent_chain.py, q4k_chain.py): an
// acquire load for a grid's arrival counter, Hopper's mbarriers and bulk copies (cp.async.bulk, sm_90: one
// instruction copies a row or a run of rows into shared memory and completes on an mbarrier's transaction count,
// instead of 16-byte cp.async by a warp's lanes through the load/store pipeline the chain's latency-bound loads (the
// counter, x) share), and the GPU's global timer. Self-contained: included beside common.cuh or without it.
#pragma once

__device__ __forceinline__ unsigned int chain_smem(const void* p) {  // a shared-memory pointer as a .shared address
    return (unsigned int)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ unsigned int ld_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(chain_smem(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned int bytes) {  // one arrival, `bytes` to come
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(chain_smem(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {  // one arrival, no bytes
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(chain_smem(bar)) : "memory");
}
__device__ __forceinline__ void bulk_copy_tx(void* dst, const void* src, unsigned int bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(chain_smem(dst)), "l"(src), "r"(bytes), "r"(chain_smem(bar)) : "memory");
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
                 " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(chain_smem(bar)), "r"(parity) : "memory");
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
__device__ __forceinline__ unsigned long long global_ns() {  // the GPU's global timer (ns), the same on every SM
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
