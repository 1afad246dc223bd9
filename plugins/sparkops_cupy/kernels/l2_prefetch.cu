// Warm the L2 with a byte range that a later kernel will read: each thread issues Hopper bulk prefetches
// (cp.async.bulk.prefetch.L2, sm_90+) of CHUNK bytes. It was meant to cost a launch, not the bytes; session 12
// measured 11 us a launch for ~3 MB inside a CUDA graph (bench/GPU-PROBES.md), so nothing uses it.
//
// Why: a decode step's GEMVs read 2-14 MB each and reach 5-30% of the read ceiling; between and at the
// edges of those kernels the memory system idles. Prefetching the next kernel's weights while the current one
// runs keeps it busy (the probe bench/probes/l2_prefetch.py measured that it does not pay).


// budget: stack 0, spills 0
extern "C" __global__ void l2_prefetch(const unsigned char* __restrict__ base, unsigned long long nbytes,
                                       unsigned int chunk) {
    // base: 16-byte aligned; chunk: a multiple of 16; the tail is rounded down to 16 bytes (a prefetch is a hint)
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * chunk;
    for (unsigned long long off = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * chunk;
         off < nbytes; off += stride) {
        unsigned long long left = nbytes - off;
        unsigned int size = left < chunk ? (unsigned int)(left & ~15ull) : chunk;
        if (size == 0) break;
#if __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(base + off), "r"(size) : "memory");
#else
        for (unsigned int b = 0; b < size; b += 128)  // pre-Hopper: one prefetch per 128-byte line
            asm volatile("prefetch.global.L2 [%0];" :: "l"(base + off + b));
#endif
    }
}
