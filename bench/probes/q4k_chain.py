"""Probe: a stage's latency in a persistent chain of the 48B step's Q4_K stages, at the step's widths.
A lead for the decode ladder, not a ledger row (bench/GPU-PROBES.md keeps what it showed).

Why. persistent_forecast.py turns two numbers into a persistent step's tok/s: the weight stream's bandwidth and the
latency lambda of one dependent stage beyond its bytes. Session 48's persistent_chain.py measured lambda on chains of
bf16 GEMVs of at most 2304 x 2304 (a paced stream of bulk copies, x once a block: 4.13 us at 1152 rows, 5.24 at
2304, 67% of the H100's read ceiling). The step's stages are not that: their rows are Q4_K (3.6x the rows for the
same bytes), 2304-20736 of them, dotted with x quantized to Q8 (the step's arithmetic since session 27: tolerance
act_q8), and a stage's dots start only once x is there. This probe measures lambda on the step's own shapes.

The chain. A layer of the step with local merges (persistent_forecast.step_stages, --merge local: a KDA layer with
MoE) has six stages; each becomes one Q4_K GEMV of the same bytes at the width of the stage's main weight (PATTERN):
  in        q/k/v with the gates' first halves and beta (17.3 MB): rows x 2304
  gates     the gates' second halves, the short conv and the recurrence's state (6.8 MB): rows x 2304 (a stand-in:
            the real stage reads a 4 MB state and 128-wide gate halves; its bytes are the step's)
  out       o_proj (5.3 MB): 2304 x 4096
  router    the router and the shared expert's gate/up (5.0 MB): rows x 2304
  experts   the 8 routed experts' gate/up (21.2 MB): 16384 x 2304
  down      the 8 routed experts' and the shared expert's down (11.9 MB): 20736 x 1024, each group of 2304 rows
            dotted with its own 1024 of x (an expert's hidden vector)
--layers such layers in a row (distinct random weights, 4 by default: 24 stages, 270 MB, beyond the L2), each
stage's x the first inputs of the stage before's output (bf16), x_0 random. Stage s waits for stage s - 1's output.

The forms, each a CUDA graph replay (the median), each writing every stage's output:
  launches          one launch a stage (64 rows a block, x quantized once a block, an octet a row): the bits,
                    checked against the reference on the first layer's stages (sampled rows dequantized by the
                    project's dequantizer, float64 dots with float x: within linear's act_q8 claim)
  paced_wW_sK[_pN]  one persistent launch, a block an SM: W - 1 warps compute, the last warp fetches. The fetching
                    warp streams the block's rows of every stage in order, a bulk copy of a run of rows a time, into
                    a ring of K KB slots of shared memory (a full and an empty mbarrier a slot), sleeping N ns between
                    copies; it runs ahead across stages as far as the ring lets it. The compute warps wait for the
                    stage's x (thread 0 polls an arrival counter), quantize it to Q8 in shared memory (q8_stage's
                    codes, a thread a block of 32), dot their rows (an octet a row, rows spread over the octets)
                    from the slots as they land, release each slot once done with it, and the block arrives. The
                    same row function as launches': the same bits.
  read              one plain read of all the weights (every SM's warps streaming 16-byte loads): this device's
                    ceiling on these bytes in this run
Then one traced run of the form named by --trace (thread 0's clock at five points of every stage): each stage kind's
phases (the counter wait, x quantized, the rows dotted once x was there, the arrival, the way to the next top) as
medians over the layers and the blocks: lambda's parts, where the forecast needs them.

    python bench/probes/q4k_chain.py --out probe.json [--layers 4] [--replays 20] [--trace paced_w16_s16k]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SB_BYTES = 144  # a Q4_K super-block (256 weights)
XMAX = 9216  # the longest x a stage reads: the down stage's 9 groups of 1024
MAX_SLOTS = 32  # the paced kernel's mbarrier pairs
ROWS_A_BLOCK = 64  # the launches form's rows a block (two an octet)
STATIC_SMEM = XMAX + XMAX // 32 * 4 + XMAX // 16 * 4 + 2 * MAX_SLOTS * 8 + 256  # x's codes, scales, sums; barriers
# (ptxas: 13312 bytes)
TRACE_POINTS = ("top", "counter passed", "x quantized", "rows dotted", "arrived")
PHASES = ("counter wait", "x quantized", "rows dotted", "arrival", "to the next top")
# (warps a block, slot KB, pace ns): the paced forms timed
FORMS = ((8, 16, 0), (8, 32, 0), (16, 16, 0), (16, 32, 0), (16, 16, 250))


@dataclass(frozen=True)
class StageShape:
    """One stage of the chain as a Q4_K GEMV: m rows of k inputs; each run of grp rows dotted with its own k inputs
    of x (xlen = k * m / grp of them); bytes the step's stage reads."""
    name: str
    m: int
    k: int
    grp: int
    step_bytes: float

    @property
    def nsb(self) -> int:
        return self.k // 256

    @property
    def row_bytes(self) -> int:
        return self.nsb * SB_BYTES

    @property
    def xlen(self) -> int:
        return self.k * (self.m // self.grp)

    @property
    def nbytes(self) -> int:
        return self.m * self.row_bytes


# the step's stage (step_stages' name suffix) -> (this chain's name, width k, rows a group of x: None = all rows
# share one x, an int = the down stage's experts, each group of rows its own k inputs)
PATTERN = (("in", "in", 2304, None), ("gates+recurrence", "gates", 2304, None), ("out", "out", 4096, None),
           ("router", "router", 2304, None), ("experts", "experts", 2304, None), ("down", "down", 1024, 2304))


def layer_shapes(model: str = "kimi-linear-48b-a3b", mix: str = "q4_k_m") -> list[StageShape]:
    """The six stages of the model's first KDA layer with MoE (persistent_forecast.step_stages with local merges),
    each as a Q4_K GEMV of as many bytes as the step's stage reads, at its PATTERN width (rows rounded to 16; the
    down's to whole groups of 2304 rows, each dotted with its own 1024 inputs)."""
    sys.path.insert(0, str(HERE))
    import persistent_forecast as pf
    from sparkops.config import load_preset

    config = load_preset(model)
    stages = pf.step_stages(config, mix, 0, pf.parse_merges(pf.LOCAL_MERGES))
    kinds = config.layer_kinds
    layer = next(i for i, kind in enumerate(kinds) if kind == "kda" and config.is_moe(i))
    by_name = {s.name.split(".", 2)[2]: s.nbytes for s in stages if s.name.startswith(f"blk.{layer}.")}
    out = []
    for step_name, name, k, grp in PATTERN:
        if step_name not in by_name:
            raise ValueError(f"q4k_chain: the step's layer {layer} has no stage '{step_name}' (it has "
                             f"{sorted(by_name)}): PATTERN no longer matches persistent_forecast.step_stages")
        nbytes = by_name[step_name]
        m = max(16, 16 * round(nbytes / (k // 256 * SB_BYTES) / 16))
        if grp is not None:  # whole groups (the down: 9 experts' rows)
            m = max(grp, grp * round(m / grp))
        out.append(StageShape(name, m, k, grp or m, nbytes))
    return out


def chain_shapes(layers: int, pattern: list[StageShape]) -> list[StageShape]:
    """The chain: `layers` copies of the pattern, checked so that every stage's x fits the stage before's output."""
    shapes = [s for _ in range(layers) for s in pattern]
    for prev, cur in zip(shapes, shapes[1:]):
        if cur.xlen > prev.m:
            raise ValueError(f"q4k_chain: stage '{cur.name}' reads {cur.xlen} inputs but '{prev.name}' writes only "
                             f"{prev.m}")
    for s in shapes:
        if s.xlen > XMAX or s.k % 256 or s.m % s.grp:
            raise ValueError(f"q4k_chain: stage '{s.name}' ({s.m} x {s.k}, groups of {s.grp}) does not fit the "
                             f"kernels (x at most {XMAX}, k a multiple of 256, m a multiple of the group)")
    return shapes


def slots_for(slot_bytes: int, smem_limit: int) -> int:
    """The ring's slots of slot_bytes in a block's shared memory beside the kernel's static bytes (at most MAX_SLOTS;
    0 where not two fit: the form is left out)."""
    n = min(MAX_SLOTS, (smem_limit - STATIC_SMEM) // slot_bytes)
    return n if n >= 2 else 0


def chunks_a_stage(shape: StageShape, blocks: int, slot_bytes: int) -> int:
    """The most copies (slots) a block's rows of a stage take: the block's rows over a slot's rows."""
    rows = -(-shape.m // blocks)
    per_slot = slot_bytes // shape.row_bytes
    if per_slot < 1:
        raise ValueError(f"q4k_chain: a {slot_bytes}-byte slot holds no row of '{shape.name}' ({shape.row_bytes} "
                         "bytes)")
    return -(-rows // per_slot)


def round_fits(shape: StageShape, warps: int, slot_bytes: int, slots: int) -> bool:
    """Whether the paced kernel can finish a stage: the rows of one round of the octets (4 a compute warp, in a row)
    touch at most `slots` copies, so the ring can hold them all while the round's first copy is still in use (more
    would wait for a slot no warp releases: a deadlock the kernel would end only by its time-out)."""
    per_slot = slot_bytes // shape.row_bytes
    octets = 4 * (warps - 1)
    return per_slot >= 1 and (octets - 1) // per_slot + 2 <= slots


def form_name(warps: int, slot_kb: int, pace_ns: int) -> str:
    return f"paced_w{warps}_s{slot_kb}k" + (f"_p{pace_ns}" if pace_ns else "")


def same_bits(a, b) -> bool:
    """Whether two bf16 buffers hold the same bit patterns: not their values, since the entries past each stage's
    outputs keep their NaN fill in every form (NaN != NaN) and a form that left an output unwritten must still fail."""
    import torch

    return bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))


def stage_phases(trace, clock_khz: float, names: list[str]) -> dict:
    """trace [S, G, 5] of clock64 readings -> for each stage kind (names[s] a stage), each phase's median cycles and
    microseconds over that kind's stages and the blocks. The last phase runs to the next stage's top (none after the
    chain's last stage)."""
    t = trace.double()
    S = t.shape[0]
    out: dict = {}
    for kind in dict.fromkeys(names):
        idx = [s for s in range(S) if names[s] == kind]
        spans = {PHASES[k]: (t[idx, :, k + 1] - t[idx, :, k]).flatten() for k in range(len(TRACE_POINTS) - 1)}
        nxt = [s for s in idx if s + 1 < S]
        if nxt:
            spans[PHASES[-1]] = (t[[s + 1 for s in nxt], :, 0] - t[nxt, :, len(TRACE_POINTS) - 1]).flatten()
        out[kind] = {k: {"cycles": float(v.median()), "us": float(v.median()) / clock_khz * 1e3}
                     for k, v in spans.items()}
    return out


def sample_rows(shape: StageShape, n: int = 48) -> list[int]:
    """Rows of a stage to check against the reference: n spread over it, and each group of x's first and last row
    (the down's experts: a wrong group offset shows there)."""
    spread = {round(i * (shape.m - 1) / max(n - 1, 1)) for i in range(n)}
    ends = {r for g in range(shape.m // shape.grp) for r in (g * shape.grp, (g + 1) * shape.grp - 1)}
    return sorted(spread | ends)


def reference_nmse(shape: StageShape, wbytes, x, y, rows: list[int]) -> float:
    """The stage's outputs y at `rows` against the reference: each row dequantized (sparkops.gguf.quants, the project's
    dequantizer) dotted in float64 with its group's float x (not quantized: the act_q8 claim's reference). NMSE over
    the rows (the gate's measure). wbytes: the stage's uint8 weight, x its input [xlen], y its output [m] (float)."""
    import numpy as np

    from sparkops.gguf.quants import dequantize

    rb = shape.row_bytes
    raw = np.concatenate([np.asarray(wbytes[r * rb:(r + 1) * rb]) for r in rows])
    w = dequantize(raw, 12, (len(rows), shape.k)).astype(np.float64)  # [rows, k], GGML Q4_K
    xs = np.asarray(x, dtype=np.float64)
    ref = np.array([w[i] @ xs[(r // shape.grp) * shape.k:(r // shape.grp + 1) * shape.k] for i, r in enumerate(rows)])
    got = np.asarray(y, dtype=np.float64)[rows]
    den = float(np.sum(ref * ref))
    return float(np.sum((got - ref) ** 2) / den) if den > 0 else float("inf")


SOURCE = r"""
#include "q4k_q8.cuh"
#include "chain_sync.cuh"
#define SBB 144
#define XMAX 9216
#define MAX_SLOTS 32
#define ROWS_A_BLOCK 64

// a stage as the host writes it: 5 int64 a stage (the weight's first byte, rows, super-blocks a row, rows a group of
// x, x's length)
struct StageDesc {
    i64 w_off;
    int m, nsb, grp, xlen;
};
__device__ __forceinline__ StageDesc stage_desc(const i64* d, int s) {
    StageDesc t;
    t.w_off = d[5 * s];
    t.m = (int)d[5 * s + 1];
    t.nsb = (int)d[5 * s + 2];
    t.grp = (int)d[5 * s + 3];
    t.xlen = (int)d[5 * s + 4];
    return t;
}

// one row (nsb super-blocks at rp, global or shared memory) dotted with x group g's staged codes by an octet (lane o
// of it), summed over the octet; every lane of the warp takes part (an octet without a row adds nothing)
__device__ __forceinline__ float row_q8(const u8* rp, int nsb, int g, int o, const i8* xq, const float* dx,
                                        const int* s16, bool valid) {
    float acc = 0.0f;
    if (valid)
        for (int sb = 0; sb < nsb; ++sb) acc += q8_block(rp + (i64)sb * SBB, o, xq, dx, s16, g * nsb + sb);
    return ro_octet_sum(acc);
}

// the launches form: one stage, ROWS_A_BLOCK rows a block, x quantized once a block
extern "C" __global__ void __launch_bounds__(256) q4k_step(const u8* __restrict__ w, const u16* x, u16* y, int m,
                                                           int nsb, int grp, int xlen) {
    __shared__ __align__(16) i8 xq[XMAX];
    __shared__ float dx[XMAX / 32];
    __shared__ int s16[XMAX / 16];
    q8_stage<DT_BF16>(x, xlen, xq, dx, s16);
    __syncthreads();
    const int lane = threadIdx.x & 31, o = lane & 7, oct = (threadIdx.x >> 5) * 4 + (lane >> 3);
    for (int i = oct; i < ROWS_A_BLOCK; i += 32) {
        const int r = blockIdx.x * ROWS_A_BLOCK + i;
        const bool valid = r < m;
        const int rr = valid ? r : 0;
        const float v = row_q8(w + (i64)rr * nsb * SBB, nsb, rr / grp, o, xq, dx, s16, valid);
        if (valid && o == 0) y[r] = f32_to_bf16(v);
    }
}

// x [xlen] (bf16, xlen a multiple of 32) quantized to Q8 blocks of 32 in shared memory by threads tid of nthreads:
// q8_stage's layout (codes xq, scales dx, sums of 16 codes s16) and rule (common.cuh's q8_inverse and q8_code; a NaN
// in a block makes its scale NaN), a thread a block of 32. For the paced chain, whose fetching warp cannot join
// q8_stage (it takes every warp of the block); the same codes, scales and sums, and the probe checks the bits.
__device__ __forceinline__ void q8_stage_by(const u16* x, int xlen, i8* xq, float* dx, int* s16, int tid,
                                            int nthreads) {
    for (int b = tid; b < (xlen >> 5); b += nthreads) {
        float v[32];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint4 u = __ldcg((const uint4*)(x + 32 * b) + k);  // written by other blocks in this launch
            const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                v[8 * k + 2 * h] = __uint_as_float(w[h] << 16);
                v[8 * k + 2 * h + 1] = __uint_as_float(w[h] & 0xffff0000u);
            }
        }
        float amax = 0.0f;
        bool nan = false;
#pragma unroll
        for (int k = 0; k < 32; ++k) {
            amax = fmaxf(amax, fabsf(v[k]));
            nan |= v[k] != v[k];
        }
        float d;
        const float id = q8_inverse(amax, d);
        u32 words[8];
        int sums[2] = {0, 0};
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            u32 word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int q = q8_code(v[4 * k + j], id);
                sums[k >> 2] += q;
                word |= ((u32)q & 0xffu) << (8 * j);
            }
            words[k] = word;
        }
        *(uint4*)(xq + 32 * b) = make_uint4(words[0], words[1], words[2], words[3]);
        *(uint4*)(xq + 32 * b + 16) = make_uint4(words[4], words[5], words[6], words[7]);
        s16[2 * b] = sums[0];
        s16[2 * b + 1] = sums[1];
        dx[b] = nan ? QNAN : d;
    }
}

// the chain's last warp a block: the block's rows of every stage, in order, into the ring of slots
__device__ void fetch_rows(const u8* __restrict__ w, const i64* desc, int S, unsigned char* ring, int slot_bytes,
                           int nslots, unsigned long long* full, unsigned long long* empty, int pace_ns, int* error) {
    const int G = gridDim.x, b = blockIdx.x;
    long long n = 0;  // copies so far: copy n fills slot n % nslots, the (n / nslots)-th time
    for (int s = 0; s < S; ++s) {
        const StageDesc t = stage_desc(desc, s);
        const int r0 = (int)((i64)t.m * b / G), nr = (int)((i64)t.m * (b + 1) / G) - r0;
        const int rb = t.nsb * SBB, R = slot_bytes / rb;
        for (int c = 0; c * R < nr; ++c, ++n) {
            const int slot = (int)(n % nslots);
            if (n >= nslots && !mbar_wait_bounded(&empty[slot], (u32)((n / nslots - 1) & 1))) {
                atomicExch(error, 2);
                return;
            }
            const u32 bytes = (u32)(min(R, nr - c * R) * rb);
            mbar_expect(&full[slot], bytes);
            bulk_copy_tx(ring + (i64)slot * slot_bytes, w + t.w_off + (i64)(r0 + c * R) * rb, bytes, &full[slot]);
            if (pace_ns) __nanosleep(pace_ns);
        }
    }
}

// a compute warp is done with copy n: wait for it to have landed (so that the arrival counts towards its phase of
// the empty barrier even where this warp read none of its rows), then arrive
__device__ __forceinline__ bool release_copy(long long n, int nslots, unsigned long long* full,
                                             unsigned long long* empty) {
    const int slot = (int)(n % nslots);
    if (!mbar_wait_bounded(&full[slot], (u32)((n / nslots) & 1))) return false;
    mbar_arrive(&empty[slot]);
    return true;
}

// The persistent chain (see the probe's docstring): blockDim.x / 32 - 1 compute warps and one fetching warp a block,
// one block an SM (all resident: the host checks). ybuf [S, ystride]: stage s's output; x0: stage 0's x. sync: the
// arrival counter (zeroed before each launch). trace (or null): thread 0's clock64 at five points a stage, [S, G, 5].
extern "C" __global__ void __launch_bounds__(512, 1) q4k_paced(const u8* __restrict__ w, const i64* desc, int S,
                                                               const u16* x0, u16* ybuf, int ystride, u32* sync,
                                                               int* error, int pace_ns, int slot_bytes, int nslots,
                                                               long long* trace) {
    extern __shared__ __align__(128) unsigned char q4k_ring[];
    __shared__ __align__(8) unsigned long long full[MAX_SLOTS], empty[MAX_SLOTS];
    __shared__ __align__(16) i8 xq[XMAX];
    __shared__ float dx[XMAX / 32];
    __shared__ int s16[XMAX / 16];
    __shared__ volatile int gave_up;
    const int G = gridDim.x, b = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int CW = (blockDim.x >> 5) - 1;
    if (tid == 0) {
        for (int i = 0; i < nslots; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], CW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        gave_up = 0;
    }
    __syncthreads();
    if (warp == CW) {
        if (lane == 0) fetch_rows(w, desc, S, q4k_ring, slot_bytes, nslots, full, empty, pace_ns, error);
        return;
    }
    const int o = lane & 7, oct = warp * 4 + (lane >> 3), NO = 4 * CW;  // the octets: a row each at a time
    long long nbase = 0;  // copies of the stages before this one
    long long* tr = (trace && tid == 0) ? trace + (i64)b * 5 : nullptr;
    for (int s = 0; s < S; ++s) {
        if (tr) tr[(i64)s * G * 5] = clock64();
        const StageDesc t = stage_desc(desc, s);
        if (s > 0 && tid == 0) {  // stage s - 1's output is complete once every block has arrived s times
            const u32 target = (u32)s * (u32)G;
            long long spins = 0;
            while (ld_acquire(sync) < target) {
                if (++spins > (1ll << 24) || ((spins & 255) == 0 && *(volatile int*)error)) {
                    atomicExch(error, 1);
                    gave_up = 1;
                    break;
                }
                __nanosleep(64);
            }
            __threadfence();
        }
        asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");
        if (gave_up) break;
        if (tr) tr[(i64)s * G * 5 + 1] = clock64();
        const u16* x = s == 0 ? x0 : ybuf + (i64)(s - 1) * ystride;
        q8_stage_by(x, t.xlen, xq, dx, s16, tid, CW * 32);
        asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");
        if (tr) tr[(i64)s * G * 5 + 2] = clock64();
        const int r0 = (int)((i64)t.m * b / G), nr = (int)((i64)t.m * (b + 1) / G) - r0;
        const int rb = t.nsb * SBB, R = slot_bytes / rb, nch = (nr + R - 1) / R;
        u16* y = ybuf + (i64)s * ystride;
        int released = 0;
        bool ok = true;
        for (int base = 0; base < nr; base += NO) {
            const int r = base + oct, c = r / R;
            const bool valid = r < nr;
            const long long n = nbase + c;
            if (valid && ok) ok = mbar_wait_bounded(&full[n % nslots], (u32)((n / nslots) & 1));
            const u8* rp = q4k_ring + (i64)(n % nslots) * slot_bytes + (i64)(r - c * R) * rb;
            const float v = row_q8(rp, t.nsb, (r0 + r) / t.grp, o, xq, dx, s16, valid && ok);
            if (valid && o == 0) y[r0 + r] = f32_to_bf16(v);
            __syncwarp();
            const int done = min(nch, (base + NO + 4 * warp) / R);  // copies before this warp's next first row
            for (; released < done; ++released)
                if (lane == 0 && ok) ok = release_copy(nbase + released, nslots, full, empty);
            ok = __shfl_sync(0xffffffffu, (int)ok, 0) != 0;
        }
        for (; released < nch; ++released)
            if (lane == 0 && ok) ok = release_copy(nbase + released, nslots, full, empty);
        if (!__all_sync(0xffffffffu, ok)) {
            if (lane == 0) atomicExch(error, 3);
            gave_up = 1;
        }
        nbase += nch;
        asm volatile("bar.sync 1, %0;" ::"r"(CW * 32) : "memory");  // the block's outputs of stage s are written
        if (tr) tr[(i64)s * G * 5 + 3] = clock64();
        if (gave_up) break;
        if (tid == 0) {
            __threadfence();
            atomicAdd(sync, 1u);
            if (tr) tr[(i64)s * G * 5 + 4] = clock64();
        }
    }
}

// every weight byte read once (16-byte streaming loads), folded into a checksum so no load is dead: the device's
// read rate on these bytes
extern "C" __global__ void __launch_bounds__(256) q4k_read(const uint4* __restrict__ w, long long n16, u32* sink) {
    u32 acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        const uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // (almost never: the loads stay live)
}
"""


def synth_q4k(m: int, k: int, seed: int, name: str, device: str):
    """Random Q4_K rows [m, k] on the device, as the project's synthetic models draw them (ondevice_synth: uniform
    codes, scale fields from the jittered tables, dmin = 7.5 d so sub-blocks are centred), std 1/sqrt(k) so that each
    stage keeps x's scale: uint8 [m * k / 256 * 144]."""
    import torch
    from gguf import GGMLQuantizationType as Q

    from sparkops.parallel.ondevice_synth import block_bytes, block_d0, fix_scales, tensor_key

    blocks = torch.arange(m * (k // 256), device=device, dtype=torch.int64)
    b = block_bytes(tensor_key(seed, name), blocks, SB_BYTES)
    fix_scales(b, Q.Q4_K, block_d0(Q.Q4_K, 1.0 / math.sqrt(k)))
    return b.reshape(-1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--layers", type=int, default=4, help="layers of six stages (distinct weights)")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--trace", default=form_name(*FORMS[2]), help="the paced form traced once after the timing")
    args = ap.parse_args(argv)
    if args.layers < 1 or args.replays < 1:
        ap.error(f"--layers and --replays must be at least 1 (got {args.layers} and {args.replays})")
    names = [form_name(*f) for f in FORMS]
    if args.trace not in names:
        ap.error(f"--trace must name a paced form: {', '.join(names)} (got '{args.trace}')")
    import torch

    if not torch.cuda.is_available():
        print("q4k_chain probe: needs a CUDA device", file=sys.stderr)
        return 2
    import cupy as cp
    import numpy as np
    from sparkops_triton._workloads import time_thunks
    from tqdm import tqdm

    def ptr(t):
        return np.uint64(t.data_ptr())

    dev = torch.cuda.current_device()
    props = cp.cuda.runtime.getDeviceProperties(dev)
    sms, limit = props["multiProcessorCount"], props["sharedMemPerBlockOptin"]
    clock_khz = props["clockRate"]
    device_name = torch.cuda.get_device_name(dev)
    pattern = layer_shapes()
    shapes = chain_shapes(args.layers, pattern)
    S = len(shapes)
    offs, total = [], 0
    for s in shapes:
        offs.append(total)
        total += s.nbytes
    w = torch.empty(total, dtype=torch.uint8, device="cuda")
    for i, s in enumerate(tqdm(shapes, desc="q4k_chain: random Q4_K weights", unit="stage")):
        w[offs[i]:offs[i] + s.nbytes] = synth_q4k(s.m, s.k, 0, f"stage{i}.{s.name}", "cuda")
    desc = torch.tensor([[offs[i], s.m, s.nsb, s.grp, s.xlen] for i, s in enumerate(shapes)], dtype=torch.int64,
                        device="cuda")
    ystride = -(-max(s.m for s in shapes) // 128) * 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    x0 = torch.randn(XMAX, generator=gen, device="cuda").to(torch.bfloat16)  # [XMAX]: stage 0 reads its first 2304

    from _cuda_source import expanded

    mod = cp.RawModule(code=expanded(SOURCE), options=("--std=c++17",), backend="nvrtc")
    step, paced, read = (mod.get_function(n) for n in ("q4k_step", "q4k_paced", "q4k_read"))

    def stream():
        return cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, dev)

    sync = torch.zeros(1, dtype=torch.int32, device="cuda")
    errors: dict = {}  # a paced form's error word: 1 a counter wait, 2 the fetching warp's wait for a free slot, 3 a
    # compute warp's wait for a copy timed out (the last to happen wins)
    bufs = {"launches": torch.full((S, ystride), float("nan"), dtype=torch.bfloat16, device="cuda")}

    def launches(buf):
        def one(i):
            s = shapes[i]
            x = x0 if i == 0 else buf[i - 1]

            def call():
                with stream():
                    step((-(-s.m // ROWS_A_BLOCK),), (256,), (ptr(w) + np.uint64(offs[i]), ptr(x), ptr(buf[i]),
                                                               np.int32(s.m), np.int32(s.nsb), np.int32(s.grp),
                                                               np.int32(s.xlen)))
            return call
        return [one(i) for i in range(S)]

    refused: dict[str, str] = {}
    forms: dict[str, tuple[int, int, int, int]] = {}  # name -> (warps, slot bytes, pace, slots)
    for warps, kb, pace in FORMS:
        name = form_name(warps, kb, pace)
        n = slots_for(kb * 1024, limit)
        if not n:
            refused[name] = f"not two {kb} KB slots beside {STATIC_SMEM} bytes in {limit} bytes of shared memory"
            continue
        tight = [s.name for s in pattern if not round_fits(s, warps, kb * 1024, n)]
        if tight:
            refused[name] = f"{n} slots of {kb} KB cannot hold a round of rows of {', '.join(tight)}"
            continue
        forms[name] = (warps, kb * 1024, pace, n)
        errors[name] = torch.zeros(1, dtype=torch.int32, device="cuda")
        bufs[name] = torch.full((S, ystride), float("nan"), dtype=torch.bfloat16, device="cuda")
    paced.max_dynamic_shared_size_bytes = max((f[1] * f[3] for f in forms.values()), default=0)

    def paced_thunks(name, buf, trace=None):
        warps, slot_bytes, pace, n = forms[name]

        def call():
            sync.zero_()
            with stream():
                paced((sms,), (32 * warps,), (ptr(w), ptr(desc), np.int32(S), ptr(x0), ptr(buf), np.int32(ystride),
                                              ptr(sync), ptr(errors[name]), np.int32(pace), np.int32(slot_bytes),
                                              np.int32(n), np.uint64(0 if trace is None else trace.data_ptr())),
                      shared_mem=slot_bytes * n)
        return [call]

    sink = torch.zeros(1, dtype=torch.int32, device="cuda")

    def read_thunks():
        def call():
            with stream():
                read((sms * 8,), (256,), (ptr(w), np.int64(total // 16), ptr(sink)))
        return [call]

    for name, why in refused.items():
        print(f"{name}: left out: {why}")
    results: dict = {"device": device_name, "sms": sms, "layers": args.layers, "stages": S,
                     "pattern": [asdict(s) | {"nbytes": s.nbytes, "xlen": s.xlen} for s in pattern],
                     "weight_bytes": total, "replays": args.replays, "left_out": refused, "forms": {},
                     "slots": {n: f[3] for n, f in forms.items()},
                     "ring_bytes": {n: f[1] * f[3] * sms for n, f in forms.items()}}  # every SM's ring
    variants = {"launches": launches(bufs["launches"]), **{n: paced_thunks(n, bufs[n]) for n in forms},
                "read": read_thunks()}
    for name, thunks in tqdm(variants.items(), desc="q4k_chain: timing", unit="form"):
        us = time_thunks(thunks, args.replays)
        results["forms"][name] = {"us_a_round": us, "us_a_stage": us / S, "tbs": total / (us * 1e-6) / 1e12}
    torch.cuda.synchronize()
    ceiling = results["forms"]["read"]["tbs"]
    for name, r in results["forms"].items():
        r["of_read"] = r["tbs"] / ceiling
        print(f"{name:<22} {r['us_a_round']:8.1f} us a round of {S} stages, {r['us_a_stage']:6.2f} us each, "
              f"{r['tbs']:.2f} TB/s over {total / 1e6:.0f} MB ({100 * r['of_read']:.1f}% of this run's plain read)")
    results["timed_out"] = {n: int(e.item()) for n, e in errors.items()}
    same = {n: same_bits(bufs[n], bufs["launches"]) for n in bufs if n != "launches"}
    results["outputs_bitwise_the_launches"] = same
    from sparkops.gate.tolerances import OP_RULES

    claim = OP_RULES["linear"]["act_q8"].limit  # the claim the step's Q8 GEMVs make
    checked = {}
    for i, s in enumerate(shapes[:len(pattern)]):  # the first layer: every stage kind once
        x = (x0 if i == 0 else bufs["launches"][i - 1])[:s.xlen].float().cpu().numpy()
        y = bufs["launches"][i, :s.m].float().cpu().numpy()
        nmse = reference_nmse(s, w[offs[i]:offs[i] + s.nbytes].cpu().numpy(), x, y, sample_rows(s))
        checked[s.name] = {"nmse": nmse, "within_act_q8": nmse <= claim}
        print(f"stage {i} ({s.name}): launches' outputs against the reference (dequantized rows, float64 dots, float "
              f"x) NMSE {nmse:.2e} (act_q8 claim {claim:g})")
    results["reference"] = {"limit": claim, "stages": checked}
    results["finite"] = bool(torch.isfinite(bufs["launches"][:, :min(s.m for s in shapes)].float()).all())
    if args.trace in forms:
        trace = torch.zeros(S, sms, len(TRACE_POINTS), dtype=torch.int64, device="cuda")
        call = paced_thunks(args.trace, bufs[args.trace], trace=trace)[0]
        call()
        call()
        torch.cuda.synchronize()
        results["traced"] = args.trace
        results["phases"] = stage_phases(trace.cpu(), clock_khz, [s.name for s in shapes])
        for kind, ph in results["phases"].items():
            print(f"{args.trace}, traced, {kind}: " + ", ".join(f"{k} {v['us']:.2f} us" for k, v in ph.items()))
        results["timed_out_traced"] = int(errors[args.trace].item())
    else:
        print(f"{args.trace}: not traced: the form was left out ({refused[args.trace]})")
    print(f"outputs bitwise the launches': {same}; finite: {results['finite']}; timed out: {results['timed_out']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    ok = all(same.values()) and results["finite"] and not any(results["timed_out"].values())
    ok = ok and all(c["within_act_q8"] for c in checked.values()) and not results.get("timed_out_traced")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
