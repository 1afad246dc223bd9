"""Probe: what one persistent launch gives a chain of dependent decode GEMVs, against one launch a GEMV.
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Sessions 13-18 found every GEMV form at ~2x the time of a plain read of its bytes, PDL worth ~0.3 us a small launch
(bench/probes/pdl_floor.py) and nothing on a chain of GEMVs (pdl_chain.py: 10.5 against 9.9 us). What is left is the
structure: each launch ramps up, drains, and only then lets the next GEMV start its reads. The issue's road past ~25%
of the roofline is a step that stays on the device: blocks that hold their multiprocessors across GEMVs, fetch the
next weight while the previous output is being finished, and wait only on a grid barrier. This probe sizes that
before anyone builds it, on a chain of LAYERS dependent bf16 GEMVs (D x D, D = 2304: 10.6 MB each, 255 MB in all at 24:
beyond the L2, as the step's weights are), x_{l+1} = bf16(W_l x_l), in one CUDA graph replay (the median):
  launches     one launch a GEMV (144 blocks of 16 rows, a warp a row, x staged once a block): the step's structure
  persistent   one launch for the whole chain: a block a multiprocessor owns a slice of every weight's rows; it copies
               layer l+1's slice into shared memory (cp.async) while it waits at a grid barrier for x_l, then dots
               its rows from shared memory, writes its outputs and arrives at the barrier
  persistent_noprefetch   the same with each slice fetched only after the barrier: what the barrier alone gives
  persistent_spin         persistent with the barrier polled without a sleep between reads
  persistent_flags        persistent with a flag a block (a release store each, read by one warp) for the barrier,
                          instead of every block's atomic on one counter
  persistent_direct_x     persistent with the rows dotted with x read from the L2, not staged in shared memory first
  persistent_warp_ringN   (session 45) no block barrier and no layer-sized prefetch: each warp streams its own rows
                          of every layer through N row slots in shared memory (a slot refilled with the row N ahead as
                          soon as it is dotted, whatever its layer), so the weight stream runs on while the chain waits;
                          x held in registers; warp 0 polls the counter and hands the layer to the other warps through
                          shared memory; a block arrives once a layer, by its last warp. N = 2, 4, 6 (6: 216 KB)
  persistent_warp_ring6_spin  the same with 6 slots, the counter polled without a sleep between reads
  persistent_warp_ringN_bulk  (session 47) the ring with each row fetched by one bulk copy (cp.async.bulk, the copy
                          engine, completing on the slot's mbarrier) instead of the lanes' 16-byte cp.async; N = 2, 6.
                          The question: do the chain's own loads (the counter, x_l) wait behind the stream's copies in
                          the load/store pipeline (session 46's ring: 2.6 us waiting for x_l whatever the slots)?
  persistent_ll_ringN     (session 47) the ring without the counter: each output a 32-bit word, its bf16 value under
                          a tag naming the launch and the layer, written by one store; a warp polls the words of x_l
                          it needs until all carry x_l's tag (no fence, no atomic, no hand-off through warp 0: the
                          floor at 8 rows, persistent_direct_x's 2.2 us, was 1.4 us waiting and 0.5 arriving);
                          a poll re-reads only the words still missing
  persistent_ll_ring2_loaded  the 2-slot tagged ring whose warps without a row stream the weights (all of them, round
                          and round) at full rate until the chain's last output is written: what a dependent stage
                          costs while the memory system serves a stream (its rate printed); at 8 and 264 rows;
                          _sN: each streaming warp sleeps N ns an iteration (a throttled stream: latency against rate);
                          _apart: only blocks without a row stream (at 8 rows: 124 SMs stream, the chain's 8 do not)
  persistent_direct_x_beside[_s1000]  persistent_direct_x (the counter form) while a second kernel on a second stream
                          of the graph, co-resident with the chain's blocks, streams the weights until the chain's
                          last block ends (its warps sleeping 0 / 1000 ns an iteration): the counter form's stage
                          under a stream at every row count, with all SMs writing from 132 rows up
  persistent_rx           (session 48) persistent_direct_x with x_l read once a warp into registers (one round trip
                          a layer, not one a row: at 2304 rows persistent_direct_x's rows landed in time and its
                          dots took 4 us, re-reading x from the L2 for every row)
  persistent_rx_ahead3, persistent_rx_ahead4_ld  persistent_rx with stream_ahead (below) beside it
  persistent_paced_pN     (session 48) the counter chain with one warp a block fetching (a bulk copy a row, N ns
                          between rows: a steady stream, not a burst a layer) into up to 16 slots of a layer's
                          rows, the other 7 computing (x in registers): does a paced stream keep the stage near the
                          264-row beside figure (3.4 us) where the bursting forms cost 5.3-7 at 1152-2304 rows?
                          _xs: x_l read from the L2 once a block into shared memory (16 bytes a thread), not once
                          a warp (first run: 5.05 us at 1152 rows, 2.7 at 264: the stage grows with the warps
                          reading x's 36 lines at once, 924 of them at 1152 rows; with _xs, its loads one round
                          trip: 4.13 at 1152, 5.24 at 2304, 67% of the H100's read ceiling)
  persistent_paced_xs_p200_beside[_s1000]  (session 48, after the last call) that form with stream_beside next to it
                          (full rate, or its warps sleeping 1 us): the paced stage and a full stream measured
                          together; and one traced run each of paced_p250 and paced_xs_p200 (six points a layer:
                          the counter, x staged, the slot landed, the rows dotted, the arrival)
  persistent_rx_bulk      persistent_rx with each layer's slice fetched by one bulk copy (cp.async.bulk, an mbarrier
                          a stage) instead of the lanes' cp.async: do the stage's latency-bound loads (the counter, x)
                          wait in the SM behind the 80 KB a block of the next layer's copies (session 48's rx: 2.9 us
                          at the barrier and 2.2 dotting rows that had landed)?
  persistent_direct_x_aheadN[_ld]  (session 48) persistent_direct_x with a second kernel beside it (as _beside) that
                          asks the L2 for every layer's rows N layers before the chain reaches them (paced by the
                          chain's arrival counter; bulk L2 prefetches, or _ld: loads), so the chain's own copies
                          read the L2 while the HBM stays busy: the persistent step's weight window, at 10.6 MB a
                          stage (2304 rows; N = 2, 3, 4: the chain's own copy runs ~1.5 layers ahead already)
  persistent_ll_ringN_w0  persistent_ll_ringN with only warp 0 of a block polling; it hands x_l to the block's
                          other warps through shared memory (session 47's first tagged ring, every warp
                          re-reading all of x_l until complete, took 14.4 us a GEMV at 1152 rows against 1.89 at 8:
                          its polls flooded the L2)
Then one traced run of `persistent` (not timed): each block's thread 0 reads its clock at five points of every layer,
and the probe prints the median cycles (and microseconds at the SM's rated clock) of the phases between them: the
wait at the barrier, x staged and the rows landed, the rows dotted, the arrival (fence and atomic), and the loop's
top (the next prefetch issued); the same for persistent_direct_x (session 47: what it spends at 1152 rows, 5.67 us a
GEMV against 2.25 at 8); then one traced run each of the 6-slot warp ring and its bulk-copy twin (warp 0's four points
a layer: its wait for x_l, x requested and its first row landed, its rows dotted and the block's arrival, the way back
to the next layer's top), and of the 6-slot tagged ring where every block has a row (x_l polled complete, the first row
landed, the rows dotted and written, the way back). Session 18's first run (without these): launches 6.91 us a GEMV,
persistent 7.44, without the prefetch 8.16: the barrier and the staging cost what a launch costs.
Every variant does the same products in the same order (one row function, or its twins reading x from global
memory or from registers), so the chain's last output must be the same bits; the probe checks and says so. The barrier
is an arrival counter (or a flag a block), one block a multiprocessor, all resident (the probe refuses a device where
they would not fit); a barrier that waits past ~1 s gives up and is reported as an error instead of hanging the call.

With --rows M (session 45) every GEMV is M x D instead (the first M rows of each weight; x_{l+1} keeps x_0's values
past M): a chain of smaller GEMVs, whose time a GEMV says what the chain's dependencies cost when the bytes are few.

    python bench/probes/persistent_chain.py --out probe.json [--layers 24] [--replays 30] [--rows 2304]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

READ_CEILING = 4.04e12  # bytes/s: the H200 read ceiling the other probes use
D = 2304  # the 48B's hidden size: every weight D x D bf16
ROWS_A_BLOCK = 16  # the launches variant: 8 warps, two rows each
RING_SLOTS = (2, 4, 6)  # the warp-ring variants' row slots a warp (the CUDA source instantiates each)
BULK_SLOTS = (2, 6)  # the bulk-copy rings' (session 47)
LL_SLOTS = (2, 6)  # the tagged-output rings' (session 47)
LOADED = ("persistent_ll_ring2_loaded", 2, "chain_ll_ring_loaded2")  # the 2-slot tagged ring, rowless warps streaming
THROTTLES_NS = (0, 250, 1000, 4000)  # the loaded forms' sleep a streaming warp an iteration (0: full rate)
APART_NS = (0, 1000)  # the loaded forms streaming only from blocks without a row (SMs the chain does not use)
BESIDE_NS = (0, 1000)  # persistent_direct_x with stream_beside's stream next to it (its warps' sleep an iteration)
PACES_NS = (0, 100, 250)  # chain_paced: the fetching warp's sleep between two row copies (0: a burst a layer)
PACES_XS_NS = (100, 150, 200, 250)  # the same with x_l staged once a block (_xs; 500 and 1000 ns bound the stream
#                                      by the pace in session 48: 9.6 / 18.8 us at 2304 rows, 18 rows a block)
PACED_BESIDE = (200, 1)  # the paced form timed with stream_beside next to it (pace ns, x once a block)
PACED_SLOTS = 16  # chain_paced's most slots (its mbarriers); fewer where a slot's rows leave no room
AHEAD = ((2, 0, 1), (3, 0, 1), (4, 0, 1), (4, 1, 1),  # stream_ahead beside a counter chain: (layers ahead, 1: loads,
         (3, 0, 2), (4, 1, 2))                           # the chain's direct_x: 1 persistent_direct_x, 2 persistent_rx)
BESIDE_LIMIT_NS = 20_000_000  # stream_beside stops after 20 ms whatever (a round takes < 1 ms; session 48 hung without)

SOURCE = r"""
#include "chain_sync.cuh"
typedef unsigned short u16;
typedef unsigned int u32;
#define D 2304
#define CH (D / 256)  // a lane's 16-byte chunks of a row (8 values each)

__device__ __forceinline__ float bf(u16 h) { return __uint_as_float(((u32)h) << 16); }
__device__ __forceinline__ u16 to_bf(float f) {  // round to nearest even (finite values)
    u32 u = __float_as_uint(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

// one row (D bf16 at w: global or shared) dotted with x (D floats in shared memory) by one warp: every lane the sum
__device__ __forceinline__ float row_dot(const u16* w, const float* xs, int lane) {
    uint4 v[CH];
#pragma unroll
    for (int k = 0; k < CH; ++k) v[k] = *(const uint4*)(w + k * 256 + lane * 8);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        const float* xx = xs + k * 256 + lane * 8;
        const u32 p[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            acc = fmaf(__uint_as_float(p[e] << 16), xx[2 * e], acc);
            acc = fmaf(__uint_as_float(p[e] & 0xffff0000u), xx[2 * e + 1], acc);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

// one GEMV of the chain: y[:m] = bf16(W[:m] x), ROWS rows a block (a layer's weight is D x D; the first m rows are
// its GEMV, the rest of y keeps x_0's values)
extern "C" __global__ void __launch_bounds__(256) chain_step(const u16* __restrict__ w, const u16* x, u16* y,
                                                             int rows, int m) {
    __shared__ float xs[D];
    for (int i = threadIdx.x; i < D; i += 256) xs[i] = bf(x[i]);
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int end = min(m, (int)(blockIdx.x + 1) * rows);
    for (int r = blockIdx.x * rows + warp; r < end; r += 8) {
        const float s = row_dot(w + (long long)r * D, xs, lane);
        if (lane == 0) y[r] = to_bf(s);
    }
}

// x in registers: a lane's CH 16-byte chunks of x (bf16, 8 values each), read from the L2 (other blocks wrote it
// during this launch)
__device__ __forceinline__ void load_x(const u16* x, int lane, uint4 (&xv)[CH]) {
#pragma unroll
    for (int k = 0; k < CH; ++k) xv[k] = __ldcg((const uint4*)(x + k * 256 + lane * 8));
}

// a lane's weight chunks dotted with its x chunks (both bf16), summed over the warp: row_dot's products in its order
__device__ __forceinline__ float dot_chunks(const uint4 (&v)[CH], const uint4 (&xv)[CH]) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < CH; ++k) {
        const u32 p[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
        const u32 q[4] = {xv[k].x, xv[k].y, xv[k].z, xv[k].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            acc = fmaf(__uint_as_float(p[e] << 16), __uint_as_float(q[e] << 16), acc);
            acc = fmaf(__uint_as_float(p[e] & 0xffff0000u), __uint_as_float(q[e] & 0xffff0000u), acc);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

// row_dot with x read from global memory (bf16, through the L2: it was written during this kernel) instead of shared
// memory: the same values in the same order, so the same sum
__device__ __forceinline__ float row_dot_gx(const u16* w, const u16* x, int lane) {
    uint4 v[CH], xv[CH];
#pragma unroll
    for (int k = 0; k < CH; ++k) v[k] = *(const uint4*)(w + k * 256 + lane * 8);
    load_x(x, lane, xv);
    return dot_chunks(v, xv);
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    const u32 s = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void st_release(u32* p, u32 v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// row_dot_gx with x already in registers (load_x): the same values in the same order, so the same sum
__device__ __forceinline__ float row_dot_rx(const u16* w, const uint4 (&xv)[CH], int lane) {
    uint4 v[CH];
#pragma unroll
    for (int k = 0; k < CH; ++k) v[k] = *(const uint4*)(w + k * 256 + lane * 8);
    return dot_chunks(v, xv);
}

// this block's rows [r0, r0 + nr) of layer l's weight into stage s (16-byte copies, all threads)
__device__ __forceinline__ void copy_rows(const u16* w, int l, int r0, int nr, u16* stage) {
    const u16* src = w + ((long long)l * D + r0) * D;
    for (int c = threadIdx.x; c < nr * (D / 8); c += blockDim.x) cp_async16(stage + c * 8, src + c * 8);
}

// the whole chain in one launch: xbuf [L + 1, D] (x_0 given), sync [1 + G] zeroed before the launch (an arrival
// counter, then a flag a block), one block an SM. Shared memory: x as floats, then two stages of maxr rows.
// sleep_ns: the barrier's poll interval (0: spin). flags: each block publishes its own flag (a release store) and the
// barrier's warp 0 reads all G of them, instead of G atomics on one counter. direct_x: the rows are dotted with x read
// from global memory, not staged in shared memory first (1: again for every row; 2, session 48: once a warp, into
// registers). prefetch 2 (session 48): each layer's slice comes by one bulk copy (the copy engine; an mbarrier a stage)
// instead of the lanes' cp.async, which queue ahead of the stage's latency-bound loads (the counter, x) in the SM.
// trace (or null): thread 0's clock64 at five points of every layer, [L, G, 5]: the loop's top, the barrier passed,
// x staged and the rows landed, the rows dotted, arrived.
extern "C" __global__ void __launch_bounds__(256, 1) chain_persistent(const u16* __restrict__ w, u16* xbuf, int L,
                                                                      int maxr, u32* sync, int prefetch,
                                                                      int* error, int sleep_ns, int flags,
                                                                      int direct_x, long long* trace, int m,
                                                                      unsigned long long* ctl) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* xs = (float*)smem;
    u16* stages = (u16*)(smem + D * 4);
    const int G = gridDim.x, b = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int r0 = (int)((long long)m * b / G), nr = (int)((long long)m * (b + 1) / G) - r0;
    __shared__ __align__(8) unsigned long long bars[2];  // prefetch 2: a stage's bulk copy has landed
    const bool bulk = prefetch == 2 && nr > 0;
    if (bulk && tid == 0) {
        mbar_init(&bars[0], 1);
        mbar_init(&bars[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // layer j's slice into stage j & 1: the lanes' cp.async (one commit group a layer), or one bulk copy by thread 0
    auto fetch = [&](int j) {
        u16* dst = stages + (long long)(j & 1) * maxr * D;
        if (prefetch == 2) {
            if (bulk && tid == 0)
                bulk_copy(dst, w + ((long long)j * D + r0) * D, (u32)(nr * D * 2), &bars[j & 1]);
        } else {
            copy_rows(w, j, r0, nr, dst);
        }
    };
    if (prefetch) fetch(0);
    cp_commit();
    long long* tr = trace ? trace + (long long)b * 5 : nullptr;
    for (int l = 0; l < L; ++l) {
        if (tr && tid == 0) tr[(long long)l * G * 5] = clock64();
        if (prefetch) {
            if (l + 1 < L) fetch(l + 1);
            cp_commit();  // always: uniform group counts
        }
        if (l > 0 && flags) {  // x_l is complete once every block's flag reads l or more
            if (warp == 0) {
                long long spins = 0;
                for (;;) {
                    bool ok = true;
                    for (int i = lane; i < G; i += 32) ok = ok && ld_acquire(sync + 1 + i) >= (u32)l;
                    if (__all_sync(0xffffffffu, ok)) break;
                    if (++spins > (1ll << 24)) {
                        if (lane == 0) atomicExch(error, 1);
                        break;
                    }
                    if (sleep_ns) __nanosleep(sleep_ns);
                }
                __threadfence();
            }
            __syncthreads();
        } else if (l > 0) {  // x_l is complete once every block has arrived l times
            if (tid == 0) {
                const u32* count = sync;
                const u32 target = (u32)l * (u32)G;
                long long spins = 0;
                while (ld_acquire(count) < target) {
                    if (++spins > (1ll << 24)) {
                        atomicExch(error, 1);
                        break;
                    }
                    if (sleep_ns) __nanosleep(sleep_ns);
                }
                __threadfence();
            }
            __syncthreads();
        }
        if (tr && tid == 0) tr[(long long)l * G * 5 + 1] = clock64();
        const u16* x = xbuf + (long long)l * D;
        if (!direct_x)
            for (int i = tid; i < D; i += blockDim.x) xs[i] = bf(__ldcg(x + i));
        u16* ws = stages + (long long)(l & 1) * maxr * D;
        if (!prefetch) {
            copy_rows(w, l, r0, nr, ws);
            cp_commit();
            cp_wait<0>();
        } else {
            cp_wait<1>();  // layer l's rows have landed (layer l + 1's may still be in flight)
            if (bulk) mbar_wait(&bars[l & 1], (u32)(l >> 1) & 1u);  // (prefetch 2: the bulk copy's phase)
        }
        __syncthreads();
        if (tr && tid == 0) tr[(long long)l * G * 5 + 2] = clock64();
        u16* y = xbuf + (long long)(l + 1) * D;
        if (direct_x == 2) {  // x_l read once a warp into registers (one round trip), then every row from shared memory
            if (warp < nr) {
                uint4 xv[CH];
                load_x(x, lane, xv);
                for (int r = warp; r < nr; r += 8) {
                    const float s = row_dot_rx(ws + (long long)r * D, xv, lane);
                    if (lane == 0) y[r0 + r] = to_bf(s);
                }
            }
        } else {
            for (int r = warp; r < nr; r += 8) {
                const u16* row = ws + (long long)r * D;
                const float s = direct_x ? row_dot_gx(row, x, lane) : row_dot(row, xs, lane);
                if (lane == 0) y[r0 + r] = to_bf(s);
            }
        }
        __syncthreads();  // every warp is done with this stage and has written its outputs
        if (tr && tid == 0) tr[(long long)l * G * 5 + 3] = clock64();
        if (tid == 0) {
            __threadfence();
            if (flags) st_release(sync + 1 + b, (u32)(l + 1));
            else atomicAdd(sync, 1u);
            if (tr) tr[(long long)l * G * 5 + 4] = clock64();
        }
    }
    // ctl (or null; session 47): a stream beside the chain (stream_beside) stops once every block has ended
    if (ctl && threadIdx.x == 0 && atomicAdd(ctl + 2, 1ull) + 1 == (unsigned long long)G) atomicExch(ctl + 1, 1ull);
}

// a warp's ring item i (layer i / nrw, the warp's (i % nrw)-th row of it): its row of w, and its slot of S
__device__ __forceinline__ const u16* item_row(const u16* w, int i, int nrw, int r0, int warp, int NW) {
    return w + ((long long)(i / nrw) * D + r0 + warp + (i % nrw) * NW) * D;
}
// item i's row into its slot by the warp's lanes (16-byte cp.async), one commit group an item (an empty group past the
// last item: uniform group counts)
__device__ __forceinline__ void issue_item(const u16* w, u16* ring, int i, int items, int S, int nrw, int r0,
                                           int warp, int NW, int lane) {
    if (i < items) {
        const u16* src = item_row(w, i, nrw, r0, warp, NW);
        u16* dst = ring + (long long)(i % S) * D;
        for (int c = lane; c < D / 8; c += 32) cp_async16(dst + c * 8, src + c * 8);
    }
    cp_commit();
}

// The whole chain in one launch with the weight stream decoupled from the chain's dependencies: each warp owns rows
// warp, warp + NW, ... of its block's slice in every layer and streams them, one commit group a row, through a ring
// of S row slots of its own in shared memory. A slot is refilled with the row S ahead as soon as it is dotted, whatever
// layer that row is in, so the warp's next rows keep arriving while it waits for x_l; no block-wide barrier anywhere.
// x_l lives in registers (each warp reads it from the L2 once a layer). Warp 0's lane 0 alone polls the arrival
// counter and hands the layer on to the other warps through shared memory; a block arrives once a layer, by the last
// of its warps to finish its rows (a count in shared memory), so the counter's target for x_l stays l * G.
// BULK (session 47): each row copied by one bulk copy (lane 0 issues it; its slot's mbarrier says it has landed)
// instead of the lanes' cp.async: the same rows, slots and order, the same sums.
// Needs nr >= NW (every warp a row a layer) and NW * S * D * 2 bytes of dynamic shared memory; sync[0] zeroed.
// trace (or null): thread 0's clock64 at four points of every layer, [L, G, 4]: the layer's top (warp 0 about to wait
// for x_l), the wait passed, x_l requested and warp 0's first row of the layer landed, warp 0 arrived.
template <int S, bool BULK>
__device__ __forceinline__ void warp_ring_chain(const u16* __restrict__ w, u16* xbuf, int L, u32* sync, int* error,
                                                int sleep_ns, long long* trace, int m) {
    extern __shared__ __align__(16) unsigned char ring_smem[];
    __shared__ int ready;   // the newest layer whose x warp 0 has seen complete
    __shared__ u32 arrived; // warps' arrivals, all layers (a block's warps finish layer l before any starts l + 1)
    const int G = gridDim.x, b = blockIdx.x, NW = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (int)((long long)m * b / G), nr = (int)((long long)m * (b + 1) / G) - r0;
    const int nrw = (nr - warp + NW - 1) / NW;  // this warp's rows a layer
    const int items = L * nrw;                  // item i: layer i / nrw, the warp's (i % nrw)-th row of it
    u16* ring = (u16*)ring_smem + (long long)warp * S * D;
    __shared__ __align__(8) unsigned long long bars[8 * S];  // BULK: a slot's mbarrier (at most 8 warps)
    unsigned long long* bar = bars + warp * S;
    if (threadIdx.x == 0) {
        ready = 0;
        arrived = 0;
    }
    if (BULK && lane == 0) {
        for (int k = 0; k < S; ++k) mbar_init(bar + k, 1);  // one arrival a phase: lane 0's expect_tx
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int i) {  // item i's row into its slot
        if (!BULK) {
            issue_item(w, ring, i, items, S, nrw, r0, warp, NW, lane);
        } else if (i < items && lane == 0) {
            bulk_copy(ring + (long long)(i % S) * D, item_row(w, i, nrw, r0, warp, NW), D * 2, bar + i % S);
        }
    };
#pragma unroll
    for (int i = 0; i < S; ++i) issue(i);
    uint4 xv[CH];
    long long* tr = (trace && threadIdx.x == 0) ? trace + (long long)b * 4 : nullptr;
    for (int i = 0; i < items; ++i) {
        const int l = i / nrw, j = i % nrw;
        if (tr && j == 0) tr[(long long)l * G * 4] = clock64();
        if (j == 0) {  // the warp's first row of layer l: x_l is needed
            if (l > 0 && lane == 0) {
                long long spins = 0;
                if (warp == 0) {
                    while (ld_acquire(sync) < (u32)l * (u32)G) {
                        if (++spins > (1ll << 24)) {
                            atomicExch(error, 1);
                            break;
                        }
                        if (sleep_ns) __nanosleep(sleep_ns);
                    }
                    __threadfence();
                    *(volatile int*)&ready = l;
                } else {
                    while (*(volatile int*)&ready < l) {
                        if (++spins > (1ll << 26)) {
                            atomicExch(error, 1);
                            break;
                        }
                    }
                    __threadfence();
                }
            }
            __syncwarp();
            if (tr) tr[(long long)l * G * 4 + 1] = clock64();
            load_x(xbuf + (long long)l * D, lane, xv);
        }
        if (BULK) {
            mbar_wait(bar + i % S, (u32)(i / S) & 1u);  // the slot's (i / S)-th phase: item i's row has landed
        } else {
            cp_wait<S - 1>();  // this lane's copies of item i have landed (the S - 1 after it may be in flight)
            __syncwarp();      // and every lane's
        }
        if (tr && j == 0) tr[(long long)l * G * 4 + 2] = clock64();
        const float s = row_dot_rx(ring + (long long)(i % S) * D, xv, lane);
        if (lane == 0) xbuf[(long long)(l + 1) * D + r0 + warp + j * NW] = to_bf(s);
        __syncwarp();  // every lane is done with the slot
        if (j == nrw - 1 && lane == 0) {  // the warp's last row of layer l: arrive
            __threadfence();
            if (atomicAdd(&arrived, 1u) % (u32)NW == (u32)NW - 1) {
                __threadfence();
                atomicAdd(sync, 1u);
            }
            if (tr) tr[(long long)l * G * 4 + 3] = clock64();
        }
        issue(i + S);
    }
    if (!BULK) cp_wait<0>();
}

#define WARP_RING(NAME, S, BULK)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME(const u16* __restrict__ w, u16* xbuf, int L, u32* sync, \
                                                              int* error, int sleep_ns, long long* trace, int m) {   \
        warp_ring_chain<S, BULK>(w, xbuf, L, sync, error, sleep_ns, trace, m);                                       \
    }
WARP_RING(chain_warp_ring2, 2, false)
WARP_RING(chain_warp_ring4, 4, false)
WARP_RING(chain_warp_ring6, 6, false)
WARP_RING(chain_warp_ring_bulk2, 2, true)
WARP_RING(chain_warp_ring_bulk6, 6, true)

// Session 47: the chain's outputs carry their own readiness (a low-latency protocol: each output a 32-bit word, its
// bf16 value below a 16-bit tag naming the launch and the layer), so no counter, no fence and no arrival: a reader
// polls the words of x_l themselves until every one it needs carries x_l's tag. A word is written by one 32-bit store,
// so a reader sees the old word or the new one whole, value and tag together.
__device__ __forceinline__ uint4 ld_relaxed_v4(const u32* p) {
    uint4 v;
    asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_relaxed(u32* p, u32 v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ bool tagged(const uint4& a, u32 tag) {
    return (a.x >> 16) == tag && (a.y >> 16) == tag && (a.z >> 16) == tag && (a.w >> 16) == tag;
}
__device__ __forceinline__ u32 pack2(u32 lo, u32 hi) { return (lo & 0xffffu) | (hi << 16); }  // two bf16, tags dropped

// x_l into a lane's registers (load_x's chunks) from its tagged words xt [D]: every load issued, then all checked; the
// chunks not yet tagged loaded again (only those: a poll re-reads what is missing, not all of x_l) until every word
// carries `tag`; chunks at or past m were never written by the chain (x_0's values: read from x0). False when it gave
// up (~1 s).
__device__ __forceinline__ bool load_x_tagged(const u32* xt, const u16* x0, u32 tag, int m, int lane,
                                              uint4 (&xv)[CH]) {
    uint4 a[CH], c[CH];
    u32 todo = 0;  // bit k: chunk k not yet seen whole with the tag
#pragma unroll
    for (int k = 0; k < CH; ++k)
        if (k * 256 + lane * 8 < m) todo |= 1u << k;
    for (long long spins = 0; spins < (1ll << 20); ++spins) {
#pragma unroll
        for (int k = 0; k < CH; ++k) {
            if ((todo >> k) & 1u) {
                a[k] = ld_relaxed_v4(xt + k * 256 + lane * 8);
                c[k] = ld_relaxed_v4(xt + k * 256 + lane * 8 + 4);
            }
        }
#pragma unroll
        for (int k = 0; k < CH; ++k)
            if (((todo >> k) & 1u) && tagged(a[k], tag) && tagged(c[k], tag)) todo &= ~(1u << k);
        if (todo == 0) {
#pragma unroll
            for (int k = 0; k < CH; ++k) {
                const int idx = k * 256 + lane * 8;
                xv[k] = idx < m ? make_uint4(pack2(a[k].x, a[k].y), pack2(a[k].z, a[k].w), pack2(c[k].x, c[k].y),
                                             pack2(c[k].z, c[k].w))
                                : __ldcg((const uint4*)(x0 + idx));
            }
            return true;
        }
    }
    return false;
}

// The warp ring (its rows streamed through S slots a warp, x in registers) with tagged outputs instead of the counter:
// xt [L + 1, D] the tagged words (zeros before the first launch), epoch a launch count kept on the device (each launch
// reads it first; the last block adds one at its end, once its warps have read x_{L-1}, which every writing block
// finished only after reading the epoch: L >= 2). The tag of x_l: (epoch * (L + 1) + l) mod 2^16, so a launch's tags
// never match the words the launch before left (nor the first launch's zeros, l >= 1). Outputs also go to xbuf as
// plain bf16 (the probe's bitwise check). A warp without rows does nothing: no arrival to make. W0: only warp 0 of a
// block polls, then puts x_l in shared memory (two buffers, by layer parity: a warp still to read x_{l-2} would have
// written no row of layer l - 1, so x_l could not be complete) and tells the others through a shared word; otherwise
// every warp polls for itself. trace as the ring's: the layer's top, x_l complete (warp 0), its first row landed, its
// rows dotted and written.
// LOADED (session 47): the warps without rows stream w (all its bytes, round and round, 4 KB a warp an iteration,
// the stop flag read with each iteration's loads) until the last writing warp has written its last output; ctl [4]
// zeroed before each launch: bytes streamed, the stop flag, writing warps finished, the loads' XOR (kept, so no load
// is dead). What a dependent stage costs while the memory system serves a stream at full rate.
__device__ __forceinline__ u32 ld_relaxed_u32(const unsigned long long* p) {
    u32 v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// limit_ns > 0 (stream_beside): a warp also stops that long after it began, and says so in ctl[4]; a chain that is not
// co-resident with the stream (it waits for the stream's SMs) then runs after it instead of never
__device__ void stream_until_done(const u16* w, long long n16, int G, int NW, int b, int warp, int lane,
                                  unsigned long long* ctl, int sleep_ns, long long limit_ns = 0) {
    const uint4* src = (const uint4*)w;
    const long long stride = (long long)G * NW * 256;  // every warp's 256 chunks of 16 bytes an iteration
    long long pos = ((long long)b * NW + warp) * 256;
    unsigned long long bytes = 0;
    u32 acc = 0;
    const unsigned long long t0 = limit_ns ? global_ns() : 0ull;
    for (;;) {
        const u32 stop = ld_relaxed_u32(ctl + 1);  // read with the loads, not after them: one round trip an iteration
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = __ldcs(src + (pos + u * 32 + lane) % n16);
#pragma unroll
        for (int u = 0; u < 8; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        bytes += 8 * 32 * 16;
        pos = (pos + stride) % n16;
        if (stop) break;
        if (limit_ns && global_ns() - t0 > (unsigned long long)limit_ns) {
            if (lane == 0) atomicExch(ctl + 4, 1ull);
            break;
        }
        if (sleep_ns) __nanosleep(sleep_ns);  // a throttled stream: fewer bytes in flight
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        atomicAdd(ctl, bytes);
        atomicXor(ctl + 3, (unsigned long long)acc);
    }
}

// The counter chain with a paced weight stream (session 48): warp 7 of each block only fetches, warps 0-6 only
// compute. Every form before it fetched a stage's rows in one burst right after the stage (all SMs at once), so the
// stage's latency-bound reads (the counter, x) met the memory system's queues at their deepest; under the beside
// stream (a steady one at 2.5 TB/s) the 264-row stage cost 3.4 us against 5.3-7 in every bursting form at 1152-2304.
// Warp 7 copies the block's rows of layer j into slot j % S, one bulk copy a row with pace_ns between rows (0: a
// burst), once the compute warps have finished layer j - S (a count in shared memory); the slot's mbarrier says the
// layer has landed. The compute warps: thread 0 polls the counter, a named barrier (224 threads) hands x_l on, each
// warp reads x_l into registers once and dots its rows (warp, warp + 7, ...) from the slot, row_dot_rx's sums.
// trace (or null): thread 0's clock64 at six points of every layer, [L, G, 6]: the loop's top, the counter passed (the
// compute warps' barrier), x staged (xstage), warp 0's slot landed (its x loads issued, perhaps not back), the rows
// dotted (the barrier after them), arrived. ctl (or null): a stream beside it (stream_beside) stops once every block
// has ended.
extern "C" __global__ void __launch_bounds__(256, 1) chain_paced(const u16* __restrict__ w, u16* xbuf, int L, int maxr,
                                                                 u32* sync, int* error, int sleep_ns, int pace_ns,
                                                                 int S, int m, int xstage, long long* trace,
                                                                 unsigned long long* ctl) {
    extern __shared__ __align__(16) unsigned char paced_smem[];
    u16* slots = (u16*)paced_smem;
    __shared__ __align__(8) unsigned long long bars[16];
    __shared__ volatile int consumed;  // layers the compute warps have finished
    __shared__ uint4 xsh[D / 8];        // xstage: x_l, once a block
    const int G = gridDim.x, b = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int r0 = (int)((long long)m * b / G), nr = (int)((long long)m * (b + 1) / G) - r0;
    const int CW = 7;  // compute warps
    if (tid == 0) {
        for (int i = 0; i < S; ++i) mbar_init(&bars[i], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        consumed = 0;
    }
    __syncthreads();
    if (warp == CW) {  // the fetching warp
        if (nr == 0) return;
        for (int j = 0; j < L; ++j) {
            const int slot = j % S;
            if (j >= S) {
                long long spins = 0;
                while (consumed < j - S + 1) {
                    if (++spins > (1ll << 22)) {
                        if (lane == 0) atomicExch(error, 1);
                        return;
                    }
                    __nanosleep(32);
                }
            }
            if (lane == 0) {  // the layer's bytes expected once, then its rows one copy each
                mbar_expect(&bars[slot], (u32)(nr * D * 2));
                u16* dst = slots + (long long)slot * maxr * D;
                const u16* src = w + ((long long)j * D + r0) * D;
                for (int r = 0; r < nr; ++r) {
                    bulk_copy_tx(dst + (long long)r * D, src + (long long)r * D, (u32)(D * 2), &bars[slot]);
                    if (pace_ns) __nanosleep(pace_ns);
                }
            }
            __syncwarp();
        }
        return;
    }
    __shared__ volatile int gave_up;  // a compute warp's slot never landed: the compute warps leave together
    if (tid == 0) gave_up = 0;
    asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");
    long long* tr = (trace && tid == 0) ? trace + (long long)b * 6 : nullptr;
    for (int l = 0; l < L; ++l) {
        if (tr) tr[(long long)l * G * 6] = clock64();
        if (l > 0 && tid == 0) {  // x_l is complete once every block has arrived l times
            const u32 target = (u32)l * (u32)G;
            long long spins = 0;
            while (ld_acquire(sync) < target) {  // (a block that gave up never arrives: leave at its flag)
                if (++spins > (1ll << 24) || ((spins & 255) == 0 && *(volatile int*)error)) {
                    atomicExch(error, 1);
                    break;
                }
                if (sleep_ns) __nanosleep(sleep_ns);
            }
            __threadfence();
        }
        asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");
        if (tr) tr[(long long)l * G * 6 + 1] = clock64();
        const u16* x = xbuf + (long long)l * D;
        u16* y = xbuf + (long long)(l + 1) * D;
        if (xstage) {  // x_l read once a block (16 bytes a thread), not once a warp: fewer requests on its few lines
            constexpr int N = (D / 8 + CW * 32 - 1) / (CW * 32);  // chunks a thread: every load issued, then stored
            uint4 v[N];
#pragma unroll
            for (int i = 0; i < N; ++i)
                if (tid + i * CW * 32 < D / 8) v[i] = __ldcg((const uint4*)x + tid + i * CW * 32);
#pragma unroll
            for (int i = 0; i < N; ++i)
                if (tid + i * CW * 32 < D / 8) xsh[tid + i * CW * 32] = v[i];
            asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");
        }
        if (tr) tr[(long long)l * G * 6 + 2] = clock64();
        if (warp < nr) {
            uint4 xv[CH];
            if (xstage) {
#pragma unroll
                for (int k = 0; k < CH; ++k) xv[k] = xsh[k * 32 + lane];  // load_x's chunks, from shared memory
            } else {
                load_x(x, lane, xv);  // in flight while the slot's last rows land
            }
            if (!mbar_wait_bounded(&bars[l % S], (u32)(l / S) & 1u)) {
                if (lane == 0) {
                    atomicExch(error, 1);
                    gave_up = 1;
                }
            }
            if (tr) tr[(long long)l * G * 6 + 3] = clock64();
            const u16* ws = slots + (long long)(l % S) * maxr * D;
            for (int r = warp; r < nr; r += CW) {
                const float s = row_dot_rx(ws + (long long)r * D, xv, lane);
                if (lane == 0) y[r0 + r] = to_bf(s);
            }
        } else if (tr) {
            tr[(long long)l * G * 6 + 3] = clock64();  // (a block without rows: nothing to land)
        }
        asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");  // the block's outputs of layer l are written
        if (tr) tr[(long long)l * G * 6 + 4] = clock64();
        if (gave_up) break;  // (read after the barrier: every compute warp the same value)
        if (tid == 0) {
            consumed = l + 1;  // the slot may be refilled
            __threadfence();
            atomicAdd(sync, 1u);
            if (tr) tr[(long long)l * G * 6 + 5] = clock64();
        }
    }
    if (ctl && tid == 0 && atomicAdd(ctl + 2, 1ull) + 1 == (unsigned long long)G) atomicExch(ctl + 1, 1ull);
}

// The stream beside a chain (session 47): its own launch, on a second stream of the same graph, co-resident with the
// chain's blocks (one per SM, 256 threads), every warp streaming w until the chain sets ctl[1]: what the counter form's
// stage costs under a stream that is not in its block barrier. Session 48: its first run (H100, 2304 rows) never
// ended: the chain's blocks (175 KB of shared memory) found no room beside it, so it now stops after limit_ns
// whatever (ctl[4] says it did) and the host asks for the largest shared-memory carve-out for both kernels.
extern "C" __global__ void __launch_bounds__(256) stream_beside(const u16* __restrict__ w, long long n16,
                                                                unsigned long long* ctl, int sleep_ns,
                                                                long long limit_ns) {
    stream_until_done(w, n16, gridDim.x, blockDim.x >> 5, blockIdx.x, threadIdx.x >> 5, threadIdx.x & 31, ctl,
                      sleep_ns, limit_ns);
}

// The weights ahead of a chain into the L2 (session 48): its own launch beside chain_persistent, as stream_beside is.
// Block b takes the chain's block b's rows of every layer j in turn, once the chain has finished layer j - ahead (its
// arrival counter sync[0] reads (j - ahead) * G_chain), so the chain's own copies of layer j (issued at its layer
// j - 1's top) find the rows in the L2: the HBM kept busy `ahead` layers before the chain, its stages reading the L2.
// ld 0: a bulk prefetch a row (cp.async.bulk.prefetch.L2: nothing comes back); 1: the lanes load the row (__ldcg,
// L2 only) and fold it into a checksum. ctl: [0] bytes asked for, [1] a wait or the limit ran out (the chain not
// beside it), [2] the checksum.
extern "C" __global__ void __launch_bounds__(256) stream_ahead(const u16* __restrict__ w, int L, int m,
                                                               const u32* sync, int gc, int ahead, int ld,
                                                               unsigned long long* ctl, long long limit_ns) {
    const int b = blockIdx.x, G = gridDim.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, NW = blockDim.x >> 5;
    const int r0 = (int)((long long)m * b / G), nr = (int)((long long)m * (b + 1) / G) - r0;
    const unsigned long long t0 = global_ns();
    __shared__ int gave_up;
    if (threadIdx.x == 0) gave_up = 0;
    __syncthreads();
    unsigned long long bytes = 0;
    u32 acc = 0;
    for (int j = 0; j < L; ++j) {
        if (threadIdx.x == 0 && j > ahead && !gave_up) {
            const u32 target = (u32)(j - ahead) * (u32)gc;
            while (ld_acquire(sync) < target) {
                if (global_ns() - t0 > (unsigned long long)limit_ns) {
                    gave_up = 1;
                    atomicExch(ctl + 1, 1ull);
                    break;
                }
                __nanosleep(200);
            }
        }
        __syncthreads();
        if (gave_up) break;
        for (int r = warp; r < nr; r += NW) {
            const u16* row = w + ((long long)j * D + r0 + r) * D;
            if (ld) {
                uint4 v[CH];
#pragma unroll
                for (int k = 0; k < CH; ++k) v[k] = __ldcg((const uint4*)(row + k * 256 + lane * 8));
#pragma unroll
                for (int k = 0; k < CH; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
            } else if (lane == 0) {
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"((u32)(D * 2)) : "memory");
            }
            bytes += D * 2;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        atomicAdd(ctl, bytes);
        atomicXor(ctl + 2, (unsigned long long)acc);
    }
}

template <int S, bool W0, bool LOADED>
__device__ __forceinline__ void ll_ring_chain(const u16* __restrict__ w, u16* xbuf, u32* xt, u32* epoch, int L,
                                              int* error, long long* trace, int m, unsigned long long* ctl,
                                              int stream_ns, int apart) {
    extern __shared__ __align__(16) unsigned char ll_smem[];
    const int G = gridDim.x, b = blockIdx.x, NW = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (int)((long long)m * b / G), nr = (int)((long long)m * (b + 1) / G) - r0;
    const int nrw = (nr - warp + NW - 1) / NW;  // this warp's rows a layer (0 where the block has fewer rows)
    const int items = L * nrw;
    const u32 base = *(volatile u32*)epoch * (u32)(L + 1);
    u16* ring = (u16*)ll_smem + (long long)warp * S * D;
    __shared__ __align__(16) u16 xsh[2][D];  // W0: x_l, by layer parity
    __shared__ int ready;                    // W0: the newest layer warp 0 has put there
    if (threadIdx.x == 0) ready = 0;
    __syncthreads();
    if (LOADED && nrw == 0) {  // apart: only the blocks without a row stream (the chain's SMs keep to the chain)
        if (!apart || nr == 0) stream_until_done(w, (long long)L * D * D / 8, G, NW, b, warp, lane, ctl, stream_ns);
        __syncthreads();  // the block's one barrier at the end (its row warps' below; block G - 1's thread 0 has a row)
        return;
    }
    auto issue = [&](int i) { issue_item(w, ring, i, items, S, nrw, r0, warp, NW, lane); };
#pragma unroll
    for (int i = 0; i < S; ++i) issue(i);
    uint4 xv[CH];
    long long* tr = (trace && threadIdx.x == 0) ? trace + (long long)b * 4 : nullptr;
    bool failed = false;
    for (int i = 0; i < items && !failed; ++i) {
        const int l = i / nrw, j = i % nrw;
        if (tr && j == 0) tr[(long long)l * G * 4] = clock64();
        if (j == 0) {
            if (l == 0) {
                load_x(xbuf, lane, xv);
            } else if (!W0 || warp == 0) {
                if (!load_x_tagged(xt + (long long)l * D, xbuf, (base + (u32)l) & 0xffffu, m, lane, xv)) {
                    if (lane == 0) atomicExch(error, 1);
                    failed = true;
                }
                if (W0) {  // x_l to the block's other warps (also when it failed: they must not wait for ever)
#pragma unroll
                    for (int k = 0; k < CH; ++k) *(uint4*)(xsh[l & 1] + k * 256 + lane * 8) = xv[k];
                    __syncwarp();
                    if (lane == 0) {
                        __threadfence_block();
                        *(volatile int*)&ready = l;
                    }
                }
            } else {
                if (lane == 0) {
                    long long spins = 0;
                    while (*(volatile int*)&ready < l)
                        if (++spins > (1ll << 26)) {
                            atomicExch(error, 1);
                            break;
                        }
                }
                __syncwarp();
                __threadfence_block();
#pragma unroll
                for (int k = 0; k < CH; ++k) xv[k] = *(const uint4*)(xsh[l & 1] + k * 256 + lane * 8);
            }
            if (tr) tr[(long long)l * G * 4 + 1] = clock64();
        }
        cp_wait<S - 1>();
        __syncwarp();
        if (tr && j == 0) tr[(long long)l * G * 4 + 2] = clock64();
        const float s = row_dot_rx(ring + (long long)(i % S) * D, xv, lane);
        if (lane == 0) {
            const int row = r0 + warp + j * NW;
            const u16 y = to_bf(s);
            xbuf[(long long)(l + 1) * D + row] = y;
            st_relaxed(xt + (long long)(l + 1) * D + row, (((base + (u32)l + 1u) & 0xffffu) << 16) | y);
        }
        __syncwarp();
        if (tr && j == nrw - 1) tr[(long long)l * G * 4 + 3] = clock64();
        issue(i + S);
    }
    cp_wait<0>();
    if (LOADED && lane == 0) {  // the last writing warp to finish stops the stream
        int writers = 0;  // warps with rows: min(rows, NW) a block
        for (int k = 0; k < G; ++k)
            writers += min((int)((long long)m * (k + 1) / G) - (int)((long long)m * k / G), NW);
        __threadfence();
        if (atomicAdd(ctl + 2, 1ull) + 1 == (unsigned long long)writers) atomicExch(ctl + 1, 1ull);
    }
    __syncthreads();
    if (b == G - 1 && threadIdx.x == 0) atomicAdd(epoch, 1u);
}

#define LL_RING(NAME, S, W0)                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME(const u16* __restrict__ w, u16* xbuf, u32* xt,         \
                                                              u32* epoch, int L, int* error, long long* trace,       \
                                                              int m) {                                               \
        ll_ring_chain<S, W0, false>(w, xbuf, xt, epoch, L, error, trace, m, nullptr, 0, 0);                          \
    }
LL_RING(chain_ll_ring2, 2, false)
LL_RING(chain_ll_ring6, 6, false)
LL_RING(chain_ll_ring_w0_2, 2, true)
LL_RING(chain_ll_ring_w0_6, 6, true)
extern "C" __global__ void __launch_bounds__(256, 1) chain_ll_ring_loaded2(const u16* __restrict__ w, u16* xbuf,
                                                                           u32* xt, u32* epoch, int L, int* error,
                                                                           long long* trace, int m,
                                                                           unsigned long long* ctl, int stream_ns,
                                                                           int apart) {
    ll_ring_chain<2, false, true>(w, xbuf, xt, epoch, L, error, trace, m, ctl, stream_ns, apart);
}
"""


PHASES = ("barrier wait", "x staged, rows landed", "rows dotted", "arrival", "next prefetch issued")


RING_PHASES = ("wait for x_l (warp 0)", "x requested, first row landed", "warp 0's rows dotted, arrived",
               "to the next layer's top")


PACED_PHASES = ("counter wait", "x staged (xs)", "slot landed (warp 0)", "x back, rows dotted (all warps)", "arrival",
                "to the next layer's top")


LL_PHASES = ("x_l polled complete (warp 0)", "first row landed", "warp 0's rows dotted, written",
             "to the next layer's top")


def phase_medians(trace, clock_khz: float, names: tuple[str, ...] = PHASES) -> dict:
    """trace [L, G, K] of clock64 readings (K points a layer, K names) -> each phase's median over layers and blocks,
    in cycles and in us at the rated clock. A phase k runs from point k to k + 1 of one layer; the last runs from
    layer l's last point to layer l + 1's top (so it has L - 1 samples a block)."""
    t = trace.double()
    k_points = t.shape[2]
    if len(names) != k_points:
        raise ValueError(f"phase_medians: {k_points} points a layer need {k_points} phase names, got {len(names)}")
    spans = [t[:, :, k + 1] - t[:, :, k] for k in range(k_points - 1)] + [t[1:, :, 0] - t[:-1, :, k_points - 1]]
    out = {}
    for name, span in zip(names, spans):
        cycles = float(span.median())
        out[name] = {"cycles": cycles, "us": cycles / clock_khz * 1e3}
    return out


def phases_text(phases: dict) -> str:
    """A traced run's phases (phase_medians) as one line: each in cycles and microseconds."""
    return ", ".join(f"{k} {v['cycles']:.0f} cycles ({v['us']:.2f} us)" for k, v in phases.items())


def beside_stream(ctl, us_a_round: float, sleep_ns: int) -> dict:
    """What stream_beside read beside a chain, from its control words ctl [5] (bytes, stop, blocks done, checksum,
    time-out): its bytes over the chain's round, and whether it ran into its limit (then it was not beside the
    chain, and the chain's figure is not a stage under a stream)."""
    streamed = int(ctl[0].item())
    return {"sleep_ns": sleep_ns, "bytes": streamed, "tbs": streamed / (us_a_round * 1e-6) / 1e12,
            "blocks_done": int(ctl[2].item()), "stream_timed_out": bool(ctl[4].item())}


def traced_phases(make, buf, layers: int, blocks: int, dev: int, names: tuple[str, ...] = PHASES) -> dict:
    """One traced run of a persistent chain (make(buf, trace=...) -> its thunks; after a warm-up), its phases'
    medians."""
    import cupy as cp

    trace = torch.zeros(layers, blocks, len(names), dtype=torch.int64, device="cuda")
    call = make(buf, trace=trace)[0]
    call()
    call()
    torch.cuda.synchronize()
    clock_khz = cp.cuda.runtime.getDeviceProperties(dev)["clockRate"]
    return phase_medians(trace.cpu(), clock_khz, names)


def ring_variants() -> dict[str, tuple[int, str]]:
    """The warp-ring variants the probe times: name -> (row slots a warp, the kernel it launches)."""
    six = max(RING_SLOTS)
    rings = {f"persistent_warp_ring{n}": (n, f"chain_warp_ring{n}") for n in RING_SLOTS}
    rings[f"persistent_warp_ring{six}_spin"] = (six, f"chain_warp_ring{six}")  # the counter polled without a sleep
    rings.update({f"persistent_warp_ring{n}_bulk": (n, f"chain_warp_ring_bulk{n}") for n in BULK_SLOTS})
    return rings


def ll_variants() -> dict[str, tuple[int, str]]:
    """The tagged-output rings the probe times (no counter: readers poll x_l's tagged words): name -> (slots,
    kernel)."""
    lls = {f"persistent_ll_ring{n}": (n, f"chain_ll_ring{n}") for n in LL_SLOTS}  # every warp polls
    lls.update({f"persistent_ll_ring{n}_w0": (n, f"chain_ll_ring_w0_{n}") for n in LL_SLOTS})  # warp 0 polls, shares
    return lls


def loaded_variants() -> dict[str, tuple[int, bool]]:
    """The loaded chain's forms: name -> (its streaming warps' sleep an iteration in ns, 0 at full rate; whether only
    blocks without a row stream)."""
    forms = {LOADED[0] + ("" if ns == 0 else f"_s{ns}"): (ns, False) for ns in THROTTLES_NS}
    forms.update({LOADED[0] + "_apart" + ("" if ns == 0 else f"_s{ns}"): (ns, True) for ns in APART_NS})
    return forms


def paced_names() -> dict[str, tuple[int, int]]:
    """chain_paced's forms: name -> (the fetching warp's sleep between two row copies (ns), x_l staged once a
    block)."""
    return {**{f"persistent_paced_p{ns}": (ns, 0) for ns in PACES_NS},
            **{f"persistent_paced_xs_p{ns}": (ns, 1) for ns in PACES_XS_NS}}


def paced_beside_names() -> dict[str, int]:
    """The paced chain (PACED_BESIDE's form) with stream_beside next to it: name -> the stream's warps' sleep (ns)."""
    base = "persistent_paced_" + ("xs_" if PACED_BESIDE[1] else "") + f"p{PACED_BESIDE[0]}_beside"
    return {base + ("" if ns == 0 else f"_s{ns}"): ns for ns in BESIDE_NS}


def paced_slots(maxr: int, limit: int) -> int:
    """chain_paced's slots of maxr rows: as many as the shared memory holds (beside its static bytes: x_l, the
    mbarriers; 8 KB allowed), at most PACED_SLOTS; 0 where not even two fit."""
    n = min(PACED_SLOTS, (limit - 8192) // (maxr * D * 2))
    return n if n >= 2 else 0


def ahead_names() -> dict[str, tuple[int, int, int]]:
    """A counter chain with stream_ahead beside it: name -> (layers ahead, loads instead of bulk prefetches, the
    chain's direct_x)."""
    return {("persistent_direct_x" if dx == 1 else "persistent_rx") + f"_ahead{n}" + ("_ld" if ld else ""): (n, ld, dx)
            for n, ld, dx in AHEAD}


def beside_names() -> dict[str, int]:
    """persistent_direct_x with a stream beside it: name -> the stream's warps' sleep an iteration (ns)."""
    return {"persistent_direct_x_beside" + ("" if ns == 0 else f"_s{ns}"): ns for ns in BESIDE_NS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--layers", type=int, default=24, help="GEMVs in the chain (distinct weights)")
    ap.add_argument("--replays", type=int, default=30)
    ap.add_argument("--rows", type=int, default=D,
                    help=f"each GEMV's output rows M (a multiple of 8, at most {D}): smaller GEMVs of the same chain, "
                         "where the chain's latency and not its bytes sets the pace")
    args = ap.parse_args(argv)
    if args.layers < 2 or args.replays < 1:
        ap.error(f"--layers must be at least 2 and --replays at least 1 (got {args.layers} and {args.replays})")
    if not (8 <= args.rows <= D and args.rows % 8 == 0):
        ap.error(f"--rows must be a multiple of 8 from 8 to {D} (got {args.rows})")
    if not torch.cuda.is_available():
        print("persistent_chain probe: needs a CUDA device", file=sys.stderr)
        return 2

    import cupy as cp
    import numpy as np
    from sparkops_triton._workloads import time_thunks

    def ptr(t):  # a tensor's device pointer as a kernel argument
        return np.uint64(t.data_ptr())

    dev = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    M = args.rows
    maxr = -(-M // sms)
    smem = D * 4 + 2 * maxr * D * 2
    limit = cp.cuda.runtime.getDeviceProperties(dev)["sharedMemPerBlockOptin"]
    if smem > limit:
        print(f"persistent_chain probe: a block needs {smem} bytes of shared memory ({maxr} rows twice), this device "
              f"allows {limit}", file=sys.stderr)
        return 2
    from _cuda_source import expanded

    mod = cp.RawModule(code=expanded(SOURCE), options=("--std=c++17",), backend="nvrtc")
    step, persistent = mod.get_function("chain_step"), mod.get_function("chain_persistent")
    persistent.max_dynamic_shared_size_bytes = smem

    def stream():  # torch's stream now (the graph capture runs on a stream of its own)
        return cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, dev)

    gen = torch.Generator(device="cuda").manual_seed(0)
    L = args.layers
    w = (torch.randn(L, D, D, generator=gen, device="cuda") * D ** -0.5).to(torch.bfloat16)  # [L, D, D], random
    x0 = torch.randn(D, generator=gen, device="cuda").to(torch.bfloat16)  # [D]
    rings = ring_variants()
    six = max(RING_SLOTS)
    warps = 256 // 32
    ring_smem = {name: warps * n * D * 2 for name, (n, _) in rings.items()}  # each warp's n row slots
    refused = {name: f"needs {b} bytes of shared memory a block, this device allows {limit}"
               for name, b in ring_smem.items() if b + 64 > limit}  # (+ the kernel's few static bytes)
    if M // sms < warps:  # the smallest block's rows
        refused.update({name: f"a block's {M // sms} rows leave some of its {warps} warps without a row"
                        for name in rings})
    lls = ll_variants()  # (a warp without rows has nothing to do there: no arrival to make)
    loaded = loaded_variants()
    refused.update({name: f"needs {warps * n * D * 2} bytes of shared memory a block, this device allows {limit}"
                    for name, (n, _) in lls.items() if warps * n * D * 2 > limit})
    if M // sms >= warps:
        refused.update({name: f"every warp has a row at {M} rows: none left to stream (run it at --rows 8 or 264)"
                        for name in loaded})
    if M >= sms:
        refused.update({name: f"every block has a row at {M} rows: no SM left to stream apart (run it at --rows 8)"
                        for name, (_, apart) in loaded.items() if apart})
    for name, why in refused.items():
        print(f"{name}: left out: {why}")
    paced_s = paced_slots(maxr, limit)  # 0: chain_paced's forms left out (a buffer never written would fail the bits)
    paced_forms = [*paced_names(), *paced_beside_names()] if paced_s else []
    bufs = {name: torch.empty(L + 1, D, dtype=torch.bfloat16, device="cuda") for name in
            ("launches", "persistent", "persistent_noprefetch", "persistent_spin", "persistent_flags",
             "persistent_direct_x", "persistent_rx", "persistent_rx_bulk", *paced_forms, *beside_names(),
             *ahead_names(),
             *(n for n in [*rings, *lls, *loaded] if n not in refused))}
    for b in bufs.values():  # every row x_0: a GEMV of M < D rows leaves the rest of its x as x_0's
        b.copy_(x0.expand(L + 1, D))
    sync = torch.zeros(1 + sms, dtype=torch.int32, device="cuda")  # the arrival counter, then a flag a block
    error = torch.zeros(1, dtype=torch.int32, device="cuda")
    blocks = -(-M // ROWS_A_BLOCK)

    def launches_thunks(buf):
        def one(layer):
            def call():
                with stream():
                    step((blocks,), (256,), (ptr(w[layer]), ptr(buf[layer]), ptr(buf[layer + 1]),
                                             np.int32(ROWS_A_BLOCK), np.int32(M)))
            return call
        return [one(layer) for layer in range(L)]

    def persistent_thunks(buf, prefetch, sleep_ns=64, flags=0, direct_x=0, trace=None, beside=None, ahead=None):
        """beside (stream_ns) or None: the chain with stream_beside's stream running next to it on a second stream
        (forked from the capture's stream and joined after), its control words in ctls_beside[stream_ns]. ahead
        (an AHEAD entry or None): stream_ahead beside it instead, its control words in ctls_ahead[ahead]."""
        ctl = None if beside is None else ctls_beside[beside]
        err = error if beside is None and ahead is None else error_beside  # (cannot co-reside: spoils only its own)

        def call():
            sync.zero_()
            if ctl is not None or ahead is not None:
                (ctl if ahead is None else ctls_ahead[ahead]).zero_()
                side.wait_stream(torch.cuda.current_stream())
            with stream():
                persistent((sms,), (256,), (ptr(w), ptr(buf), np.int32(L), np.int32(maxr), ptr(sync),
                                            np.int32(prefetch), ptr(err), np.int32(sleep_ns), np.int32(flags),
                                            np.int32(direct_x), np.uint64(0 if trace is None else trace.data_ptr()),
                                            np.int32(M), np.uint64(0 if ctl is None else ctl.data_ptr())),
                           shared_mem=smem)
            if ctl is not None:  # launched after the chain (its blocks placed first where the order holds)
                with torch.cuda.stream(side), stream():  # stream() reads the current stream: the side one here
                    streamer((sms,), (256,), (ptr(w), np.int64(L * D * D // 8), ptr(ctl), np.int32(beside),
                                              np.int64(BESIDE_LIMIT_NS)))
            if ahead is not None:  # after the chain too: its blocks take their SMs first where the order holds
                with torch.cuda.stream(side), stream():
                    streamer_ahead((sms,), (256,), (ptr(w), np.int32(L), np.int32(M), ptr(sync), np.int32(sms),
                                                    np.int32(ahead[0]), np.int32(ahead[1]), ptr(ctls_ahead[ahead]),
                                                    np.int64(BESIDE_LIMIT_NS)))
            if ctl is not None or ahead is not None:
                torch.cuda.current_stream().wait_stream(side)
        return [call]

    side = torch.cuda.Stream()  # the stream beside the chain's (BESIDE_NS forms)
    streamer, streamer_ahead = mod.get_function("stream_beside"), mod.get_function("stream_ahead")
    ctls_ahead = {a: torch.zeros(3, dtype=torch.int64, device="cuda") for a in AHEAD}  # bytes, gave up, checksum
    for fn in (streamer, streamer_ahead, persistent):  # the most shared memory an SM gives: two kernels' blocks beside
        fn.preferred_shared_memory_carveout = 100
    ctls_beside = {ns: torch.zeros(5, dtype=torch.int64, device="cuda") for ns in BESIDE_NS}  # + [4]: time-out
    error_beside = torch.zeros(1, dtype=torch.int32, device="cuda")
    ctls_paced_beside = {ns: torch.zeros(5, dtype=torch.int64, device="cuda") for ns in BESIDE_NS}

    paced = mod.get_function("chain_paced")
    paced.max_dynamic_shared_size_bytes = max(paced_s, 1) * maxr * D * 2
    paced.preferred_shared_memory_carveout = 100  # (room for stream_beside's blocks next to its own)

    def paced_thunks(buf, pace_ns, xstage, trace=None, beside=None):
        """beside (stream_ns) or None: stream_beside's stream next to the chain, as persistent_thunks' (its control
        words ctls_paced_beside[stream_ns])."""
        ctl = None if beside is None else ctls_paced_beside[beside]

        def call():
            sync.zero_()
            if ctl is not None:
                ctl.zero_()
                side.wait_stream(torch.cuda.current_stream())
            with stream():
                paced((sms,), (256,), (ptr(w), ptr(buf), np.int32(L), np.int32(maxr), ptr(sync),
                                       ptr(error if ctl is None else error_beside), np.int32(64), np.int32(pace_ns),
                                       np.int32(paced_s), np.int32(M), np.int32(xstage),
                                       np.uint64(0 if trace is None else trace.data_ptr()),
                                       np.uint64(0 if ctl is None else ctl.data_ptr())),
                      shared_mem=paced_s * maxr * D * 2)
            if ctl is not None:  # after the chain, as the other beside forms
                with torch.cuda.stream(side), stream():
                    streamer((sms,), (256,), (ptr(w), np.int64(L * D * D // 8), ptr(ctl), np.int32(beside),
                                              np.int64(BESIDE_LIMIT_NS)))
                torch.cuda.current_stream().wait_stream(side)
        return [call]

    def ring_thunks(name, buf, sleep_ns=64, trace=None):
        fn = mod.get_function(rings[name][1])
        fn.max_dynamic_shared_size_bytes = ring_smem[name]

        def call():
            sync.zero_()
            with stream():
                fn((sms,), (256,), (ptr(w), ptr(buf), np.int32(L), ptr(sync), ptr(error), np.int32(sleep_ns),
                                    np.uint64(0 if trace is None else trace.data_ptr()), np.int32(M)),
                   shared_mem=ring_smem[name])
        return [call]

    def ll_thunks(name, buf, trace=None, ctl=None):
        slots, kernel = (LOADED[1], LOADED[2]) if name in loaded else lls[name]
        fn = mod.get_function(kernel)
        fn.max_dynamic_shared_size_bytes = warps * slots * D * 2
        xt = torch.zeros(L + 1, D, dtype=torch.int32, device="cuda")  # the tagged words
        epoch = torch.zeros(1, dtype=torch.int32, device="cuda")  # launches so far (the kernel counts them)

        def call():
            sync.zero_()  # unused here: the same graph nodes as the other persistent forms
            args = (ptr(w), ptr(buf), ptr(xt), ptr(epoch), np.int32(L), ptr(error),
                    np.uint64(0 if trace is None else trace.data_ptr()), np.int32(M))
            if ctl is not None:  # LOADED: its control words zeroed too (one more memset a round), its throttle
                ctl.zero_()
                args = (*args, ptr(ctl), np.int32(loaded[name][0]), np.int32(loaded[name][1]))
            with stream():
                fn((sms,), (256,), args, shared_mem=warps * slots * D * 2)
        return [call]

    ctls = {name: torch.zeros(4, dtype=torch.int64, device="cuda") for name in loaded}  # bytes, stop, writers, XOR

    variants = {"launches": launches_thunks(bufs["launches"]),
                "persistent": persistent_thunks(bufs["persistent"], 1),
                "persistent_noprefetch": persistent_thunks(bufs["persistent_noprefetch"], 0),
                "persistent_spin": persistent_thunks(bufs["persistent_spin"], 1, sleep_ns=0),
                "persistent_flags": persistent_thunks(bufs["persistent_flags"], 1, flags=1),
                "persistent_direct_x": persistent_thunks(bufs["persistent_direct_x"], 1, direct_x=1),
                **{name: persistent_thunks(bufs[name], 1, direct_x=1, beside=ns)
                   for name, ns in beside_names().items()},
                "persistent_rx": persistent_thunks(bufs["persistent_rx"], 1, direct_x=2),
                "persistent_rx_bulk": persistent_thunks(bufs["persistent_rx_bulk"], 2, direct_x=2),
                **({name: paced_thunks(bufs[name], *a) for name, a in paced_names().items()} if paced_s else {}),
                **({name: paced_thunks(bufs[name], PACED_BESIDE[0], PACED_BESIDE[1], beside=ns)
                    for name, ns in paced_beside_names().items()} if paced_s else {}),
                **{name: persistent_thunks(bufs[name], 1, direct_x=a[2], ahead=a) for name, a in ahead_names().items()},
                **{name: ring_thunks(name, bufs[name], sleep_ns=0 if name.endswith("_spin") else 64)
                   for name in rings if name not in refused},
                **{name: ll_thunks(name, bufs[name]) for name in lls if name not in refused}}
    variants.update({name: ll_thunks(name, bufs[name], ctl=ctls[name]) for name in loaded if name not in refused})
    nbytes = L * M * D * 2
    if not paced_s:
        print(f"persistent_paced_*: left out: not two slots of {maxr} rows in {limit} bytes of shared memory")
    results: dict = {"layers": L, "d": D, "rows": M, "blocks_a_launch": blocks, "persistent_blocks": sms,
                     "paced_slots": paced_s,
                     "smem_bytes": smem,
                     "weight_bytes": nbytes, "replays": args.replays, "left_out": refused, "variants": {}}
    for name, thunks in variants.items():
        us = time_thunks(thunks, args.replays)
        per = us / L
        results["variants"][name] = {"us_a_round": us, "us_a_gemv": per,
                                     "read_fraction": nbytes / (us * 1e-6) / READ_CEILING}
        print(f"{name:<24} {us:8.1f} us a round of {L} GEMVs, {per:6.2f} us each, "
              f"{100 * results['variants'][name]['read_fraction']:5.1f}% of 4.04 TB/s over {nbytes / 1e6:.0f} MB")
    torch.cuda.synchronize()
    results["beside_timed_out"] = bool(error_beside.item())  # (their chains' bits are checked as every form's)
    results["beside_stream"] = {}
    results["paced_beside_stream"] = {}
    besides = [("beside_stream", name, ctls_beside[ns], ns) for name, ns in beside_names().items()]
    besides += [("paced_beside_stream", name, ctls_paced_beside[ns], ns)
                for name, ns in (paced_beside_names().items() if paced_s else ())]
    for key, name, ctl, ns in besides:  # the stream next to a counter chain: its bytes over a round's time
        out = results[key][name] = beside_stream(ctl, results["variants"][name]["us_a_round"], ns)
        print(f"{name}: the stream beside it read {out['bytes'] / 1e6:.1f} MB a round, {out['tbs']:.2f} TB/s, while "
              f"the chain took {results['variants'][name]['us_a_gemv']:.2f} us a GEMV"
              + (f" (the stream ran into its {BESIDE_LIMIT_NS / 1e6:.0f} ms limit: the chain did not run beside it, "
                 "its figure is not a stage under a stream)" if out["stream_timed_out"] else ""))
    results["ahead_stream"] = {}
    for name, a in ahead_names().items():  # the rows stream_ahead asked the L2 for, and whether it waited in vain
        ctl = ctls_ahead[a]
        gave_up = bool(ctl[1].item())
        results["ahead_stream"][name] = {"ahead": a[0], "loads": bool(a[1]), "chain_direct_x": a[2],
                                         "bytes": int(ctl[0].item()),
                                         "gave_up": gave_up}
        print(f"{name}: {a[0]} layers ahead by {'loads' if a[1] else 'bulk L2 prefetches'}, "
              f"{int(ctl[0].item()) / 1e6:.1f} MB asked a round; the chain took "
              f"{results['variants'][name]['us_a_gemv']:.2f} us a GEMV"
              + (" (the stream gave up waiting: the chain was not beside it)" if gave_up else ""))
    results["loaded_stream"] = {}
    for name in (n for n in loaded if n in variants):  # the last launch's stream over the launch's time (a round)
        streamed, us = int(ctls[name][0].item()), results["variants"][name]["us_a_round"]
        results["loaded_stream"][name] = {"sleep_ns": loaded[name][0], "apart": loaded[name][1], "bytes": streamed,
                                          "tbs": streamed / (us * 1e-6) / 1e12,
                                          "writers_done": int(ctls[name][2].item())}
        print(f"{name}: its rowless warps streamed {streamed / 1e6:.1f} MB a round, "
              f"{results['loaded_stream'][name]['tbs']:.2f} TB/s, while the chain took "
              f"{results['variants'][name]['us_a_gemv']:.2f} us a GEMV")
    results["barrier_timed_out"] = bool(error.item())
    same = {n: bool(torch.equal(bufs[n][L], bufs["launches"][L]))
            for n in bufs if n != "launches"}
    results["phases"] = traced_phases(lambda buf, trace: persistent_thunks(buf, 1, trace=trace), bufs["persistent"], L,
                                      sms, dev)
    results["direct_x_phases"] = traced_phases(lambda buf, trace: persistent_thunks(buf, 1, direct_x=1, trace=trace),
                                               bufs["persistent_direct_x"], L, sms, dev)
    traced_ahead = "persistent_direct_x_ahead3"  # where its rows land from: the L2 (stream_ahead) or the HBM
    results["ahead_phases"] = traced_phases(
        lambda buf, trace: persistent_thunks(buf, 1, direct_x=1, trace=trace, ahead=ahead_names()[traced_ahead]),
        bufs[traced_ahead], L, sms, dev)
    results["rx_phases"] = traced_phases(lambda buf, trace: persistent_thunks(buf, 1, direct_x=2, trace=trace),
                                         bufs["persistent_rx"], L, sms, dev)
    for pace, xs in ((250, 0), PACED_BESIDE) if paced_s else ():  # where a paced stage's time goes
        key = "paced_" + ("xs_" if xs else "") + f"p{pace}_phases"
        name = "persistent_paced_" + ("xs_" if xs else "") + f"p{pace}"
        results[key] = traced_phases(lambda buf, trace: paced_thunks(buf, pace, xs, trace=trace), bufs[name], L, sms,
                                     dev, PACED_PHASES)
        print(f"{name}, traced (medians over layers and blocks, thread 0): " + phases_text(results[key]))
    results["rx_bulk_phases"] = traced_phases(lambda buf, trace: persistent_thunks(buf, 2, direct_x=2, trace=trace),
                                              bufs["persistent_rx_bulk"], L, sms, dev)
    traced_rings = {"ring_phases": f"persistent_warp_ring{six}", "bulk_ring_phases": f"persistent_warp_ring{six}_bulk"}
    for key, ring in traced_rings.items():
        if ring not in refused:
            results[key] = traced_phases(lambda buf, trace: ring_thunks(ring, buf, trace=trace), bufs[ring], L, sms,
                                         dev, RING_PHASES)
    for key, ll in {"ll_ring_phases": f"persistent_ll_ring{max(LL_SLOTS)}",
                    "ll_w0_ring_phases": f"persistent_ll_ring{max(LL_SLOTS)}_w0"}.items():
        traced_rings[key] = ll
        if ll not in refused and M // sms >= 1:  # every block's warp 0 has a row a layer (its trace points)
            results[key] = traced_phases(lambda buf, trace: ll_thunks(ll, buf, trace=trace), bufs[ll], L, sms, dev,
                                         LL_PHASES)
    results["last_output_bitwise_the_launches"] = same
    results["finite"] = bool(torch.isfinite(bufs["launches"][L].float()).all())
    a, p = results["variants"]["launches"]["us_a_gemv"], results["variants"]["persistent"]["us_a_gemv"]
    results["persistent_saving_us_a_gemv"] = a - p
    print(f"last output bitwise the launches': {same}; finite: {results['finite']}; "
          f"barrier timed out: {results['barrier_timed_out']}")
    print(f"persistent / launches: {p / a:.3f} of the time ({a - p:+.2f} us a GEMV)")
    print("persistent, traced (medians over layers and blocks): " + phases_text(results["phases"]))
    print("persistent_direct_x, traced: " + phases_text(results["direct_x_phases"]))
    print(f"{traced_ahead}, traced: " + phases_text(results["ahead_phases"]))
    print("persistent_rx, traced: " + phases_text(results["rx_phases"]))
    print("persistent_rx_bulk, traced: " + phases_text(results["rx_bulk_phases"]))
    for key, ring in traced_rings.items():
        if key in results:
            print(f"{ring}, traced (medians over layers and blocks, thread 0): " + phases_text(results[key]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    ok = all(same.values()) and results["finite"] and not results["barrier_timed_out"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
