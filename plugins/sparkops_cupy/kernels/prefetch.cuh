// prefetch.cuh: an L1 prefetch for the "xpf" kernels (linear_rowwarp.cu's warp form, moe_rowwarp.cu's Q8 down).
// A header of its own, not common.cuh: every CuPy kernel includes common.cuh, so a change there would make every
// implementation's check records stale (they are pinned to their sources and every header they include), and a fresh
// machine would re-prove them all before its first rung.
#pragma once
#include "common.cuh"

// Ask for the 128-byte line holding p to be brought into this SM's L1 (PTX prefetch.global.L1): no register, no wait.
// The "xpf" kernels (written after GPU session 38) issue one for every line of the activations a lane will read, right
// after their PDL wait, so that their per-round loads find the lines in L1 (or already on their way) instead of each
// round waiting one L2 round trip in turn.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }
