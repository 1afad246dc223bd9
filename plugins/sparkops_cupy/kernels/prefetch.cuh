// prefetch.cuh: an L1 prefetch for the "xpf" kernels (linear_rowwarp.cu's warp form, moe_rowwarp.cu's Q8 down) and
// an L2 prefetch for the "l2pf" down (moe_rowwarp.cu's down_q8ld_q4_k).
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

// Ask for the 128-byte line holding p to be brought into the L2 (PTX prefetch.global.L2): no register, no wait. The
// "l2pf" down (written in GPU session 40) issues one for each line of its later groups' weights before its PDL wait,
// while gate/up still runs, so that those groups' loads after the wait find them in the L2, not in DRAM.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
