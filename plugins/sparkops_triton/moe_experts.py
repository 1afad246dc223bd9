"""moe_experts in Triton: routed SwiGLU experts, their weighted combine, and the shared expert.

Expert ids and routing weights are read from device memory; nothing synchronizes the host, so both
paths can be captured in a CUDA graph.

Decode (T <= MOE_GEMV_MAX_T): three launches; the two big ones are float32 GEMVs on the stored blocks.
  1. up:      one program per (row tile, slot), a slot being a (token, chosen expert) pair or a token's
              shared expert: h = silu(W_gate x) * (W_up x) into a float32 scratch [T*K + T, F].
  2. down:    one program per (row tile, token, expert): weights[t, k] * W_down[e_k] h[t, k] (and the
              shared expert's S_down hs[t]) into a float32 scratch [T, K + 1, D].
  3. combine: y[t] = the K + 1 partials added in order (no atomics: bit-reproducible), in x's dtype.
  "triton_lastblock" (`moe_experts_lastblock`) has no third launch: the last of a (row tile, token)'s
  K + 1 down programs to finish (an int32 arrival counter, `_arrival`) adds the partials in the same
  order, so its output is bit-identical to "triton"'s.
  "triton_prefetch" (`moe_experts_prefetch`) is "triton_lastblock" with deeper weight streams: a slot's gate and
  up rows go through one loop (`_dequant.gemv_rows_pair`; the up kernel's program used to wait out the gate
  GEMV's 9 chunk round trips, then the up GEMV's 9) and both GEMVs keep FETCH_DEPTH chunks in flight. Same
  arithmetic in the same order: bit-identical to "triton_lastblock".
Prefill (larger T): the T*K slots are grouped by expert on the device (a stable sort; a tile map
  built with searchsorted, so the grid is a static upper bound and nothing syncs), then two grouped
  GEMM launches on the tensor cores (gate/up with SwiGLU; down times the routing weight), a
  fixed-order sum over each token's K slots, and the shared expert through the dense linear GEMM.

"triton" runs the prefill dots on bfloat16 operands (claim "bf16"); "triton_fp32" uses tf32x3 (claim
float32). An expert id outside [0, E) reads nothing and makes that token's output NaN.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from ._arrival import arrive, counters, depart
from ._dequant import decode_chunk, gemv_cols, gemv_rows, gemv_rows_pair, values
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, interpreting
from .dequantize import dequantize_bf16
from .linear import dot_acc, gemv_flat_qtype, grid_for, grid_for_any, run_dqmm, run_gemm, weight_rows
from .moe_glue import combine_slots, swiglu_pairs

#: the largest T served by the fused GEMV path (each token re-reads its experts' rows)
MOE_GEMV_MAX_T = 8
#: decode row tiles: up (F rows per program) and down (D rows per program), warps
UP_ROWS, DOWN_ROWS, GEMV_WARPS = 16, 32, 4
#: "triton_prefetch": chunks of each weight in flight per decode GEMV program (1 is the other implementations'
#: stream). Session 7 on the H200, one 48B MoE layer (Q4_K, T=1, graph; tests/backends/test_triton_moe.py and the tune
#: study moe_decode_prefetch): triton_lastblock 39.7 us; prefetch at depth 1 (the gate/up pair loop alone) 35.2 us,
#: depth 2 38.7, depth 3 45.0 (the up kernel's registers go from 96 to ~127: fewer programs resident per SM). The
#: pair loop pays; deeper streams do not
FETCH_DEPTH = 1
#: "triton_flat": decode row tiles of the up and down GEMVs when their weights go through the flat Q4_K form
#: (`_dequant.Q4_K_FLAT`: one word a thread and row, so rows cost registers; sm_90, 4 warps: the paired up kernel
#: takes 72 registers at 8 rows, 165 at 16; the down kernel 79 at 16). Not yet timed: the tune study moe_decode_flat
FLAT_UP_ROWS, FLAT_DOWN_ROWS = 8, 16
#: grouped GEMM tile (slots, output rows) and warps
MOE_BM, MOE_BN, MOE_WARPS = 64, 64, 8
#: "triton_dqmm": a prefill decodes every expert's weights once when its slots average at least this many per expert
#: (a 4096-token chunk of the 48B: 32768 slots over 256 experts, 128 each); fewer slots run the fused grouped GEMMs.
#: Chosen, not yet measured: the GPU test of "triton_dqmm" times both paths
DQMM_SLOTS_PER_EXPERT = 4


def _depth() -> int:
    """FETCH_DEPTH, checked: the kernels unroll 1, 2 or 3 chunks ahead."""
    if FETCH_DEPTH not in (1, 2, 3):
        raise BadInput(f"moe_experts: FETCH_DEPTH is {FETCH_DEPTH!r}; the decode GEMVs keep 1, 2 or 3 chunks in flight")
    return FETCH_DEPTH


def _tiles() -> tuple[int, int, int]:
    """(up rows, down rows, GEMM BN): the interpreter runs a few large programs much faster than many small."""
    return (128, 256, 256) if interpreting() else (UP_ROWS, DOWN_ROWS, MOE_BN)


@triton.jit
def _silu(g):
    return g / (1.0 + tl.exp(-g))


# ----------------------------------------------------------------------------------------------
# decode: fused GEMVs
# ----------------------------------------------------------------------------------------------

@triton.jit
def _moe_up_kernel(x_ptr, ids_ptr, wg_ptr, wu_ptr, sg_ptr, su_ptr, grid_ptr, h_ptr, T, D, F, FS, KSEL, E,
                   w_estride, w_rstride, s_rstride, h_stride, QTYPE: tl.constexpr, QTYPE_S: tl.constexpr,
                   SA: tl.constexpr, SA_S: tl.constexpr, R: tl.constexpr, HAS_SHARED: tl.constexpr,
                   PTX: tl.constexpr, PAIR: tl.constexpr, DEPTH: tl.constexpr):
    """h[slot, rows] = silu(gate . x) * (up . x) for this program's rows of one slot.
    PAIR: gate and up stream through one loop (`gemv_rows_pair`), else one after the other; DEPTH: chunks of
    each weight in flight. Neither changes the arithmetic (the same bits)."""
    pid_r = tl.program_id(0)
    slot = tl.program_id(1)
    rows = pid_r * R + tl.arange(0, R)                                  # [R]
    if slot < T * KSEL:                                                 # a routed (token, expert) slot
        t = slot // KSEL
        e = tl.load(ids_ptr + slot)
        ok = (e >= 0) & (e < E)
        off = tl.where(ok, e, 0) * w_estride + (rows.to(tl.int64) * w_rstride)[:, None]  # [R, 1]
        rmask = ((rows < F) & ok)[:, None]
        if PAIR:
            g, u = gemv_rows_pair(QTYPE, wg_ptr + off, wu_ptr + off, rmask, x_ptr + t * D, D, grid_ptr, SA, PTX,
                                  DEPTH)                                # [R] each
        else:
            g = gemv_rows(QTYPE, wg_ptr + off, rmask, x_ptr + t * D, D, grid_ptr, SA, PTX, DEPTH)  # [R]
            u = gemv_rows(QTYPE, wu_ptr + off, rmask, x_ptr + t * D, D, grid_ptr, SA, PTX, DEPTH)
        h = tl.where(ok, _silu(g) * u, float("nan"))
        tl.store(h_ptr + slot * h_stride + rows, h, mask=rows < F)
    else:
        if HAS_SHARED:                                                  # token slot - T*K's shared expert
            t = slot - T * KSEL
            off = (rows.to(tl.int64) * s_rstride)[:, None]
            rmask = (rows < FS)[:, None]
            if PAIR:
                g, u = gemv_rows_pair(QTYPE_S, sg_ptr + off, su_ptr + off, rmask, x_ptr + t * D, D, grid_ptr, SA_S,
                                      PTX, DEPTH)
            else:
                g = gemv_rows(QTYPE_S, sg_ptr + off, rmask, x_ptr + t * D, D, grid_ptr, SA_S, PTX, DEPTH)
                u = gemv_rows(QTYPE_S, su_ptr + off, rmask, x_ptr + t * D, D, grid_ptr, SA_S, PTX, DEPTH)
            tl.store(h_ptr + slot * h_stride + rows, _silu(g) * u, mask=rows < FS)


@triton.jit
def _moe_down_kernel(h_ptr, ids_ptr, rw_ptr, wd_ptr, sd_ptr, grid_ptr, part_ptr, y_ptr, cnt_ptr, T, D, F, FS, KSEL,
                     E, d_estride, d_rstride, s_rstride, h_stride, QTYPE: tl.constexpr, QTYPE_S: tl.constexpr,
                     SA: tl.constexpr, SA_S: tl.constexpr, R: tl.constexpr, HAS_SHARED: tl.constexpr,
                     PTX: tl.constexpr, LASTBLOCK: tl.constexpr, DEPTH: tl.constexpr):
    """part[t, k, rows] = rw[t, k] * W_down[ids[t, k]][rows] . h[t, k]; k = K is the shared expert.
    One program per (row tile, token, expert): the experts of a token run in parallel.
    LASTBLOCK: the last of the K (+1) programs of (row tile, token) to arrive at counter t * tiles + pid_r
    also writes y[t, rows], the partials added in order k = 0, 1, ... (`_moe_combine_kernel`'s sums)."""
    pid_r = tl.program_id(0)
    t = tl.program_id(1)
    k = tl.program_id(2)
    rows = pid_r * R + tl.arange(0, R)
    rmask = (rows < D)[:, None]
    dst = part_ptr + (t * (KSEL + HAS_SHARED) + k) * D + rows
    if k < KSEL:
        slot = t * KSEL + k
        e = tl.load(ids_ptr + slot)
        ok = (e >= 0) & (e < E)                  # a bad id reads no weight; its h row is NaN
        part = gemv_rows(QTYPE, wd_ptr + tl.where(ok, e, 0) * d_estride + (rows.to(tl.int64) * d_rstride)[:, None],
                         rmask & ok, h_ptr + slot * h_stride, F, grid_ptr, SA, PTX, DEPTH)
        tl.store(dst, tl.load(rw_ptr + slot) * part, mask=rows < D)
    else:
        if HAS_SHARED:
            part = gemv_rows(QTYPE_S, sd_ptr + (rows.to(tl.int64) * s_rstride)[:, None], rmask,
                             h_ptr + (T * KSEL + t) * h_stride, FS, grid_ptr, SA_S, PTX, DEPTH)
            tl.store(dst, part, mask=rows < D)
    if LASTBLOCK:
        slot = t * tl.num_programs(0) + pid_r
        nk = tl.num_programs(2)
        if arrive(cnt_ptr, slot, nk):
            acc = tl.zeros([R], tl.float32)                              # [R]
            for kk in range(0, nk):
                acc += tl.load(part_ptr + (t * nk + kk) * D + rows, mask=rows < D, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + t * D + rows, acc.to(y_ptr.dtype.element_ty), mask=rows < D)
            depart(cnt_ptr, slot)


@triton.jit
def _moe_combine_kernel(part_ptr, y_ptr, D, NK, BLOCK: tl.constexpr):
    """y[t, :] = sum_k part[t, k, :] in order k = 0, 1, ... (deterministic), in y's dtype."""
    t = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for k in range(0, NK):
        acc += tl.load(part_ptr + (t * NK + k) * D + cols, mask=cols < D, other=0.0)
    tl.store(y_ptr + t * D + cols, acc.to(y_ptr.dtype.element_ty), mask=cols < D)


# ----------------------------------------------------------------------------------------------
# prefill: grouped GEMMs over slots sorted by expert
# ----------------------------------------------------------------------------------------------

@triton.jit
def _tile_rows(i, order_ptr, tile_first_ptr, tile_stop_ptr, BM: tl.constexpr):
    """(sorted positions [BM], their mask, their slots) of grouped-GEMM tile i."""
    m = tl.load(tile_first_ptr + i) + tl.arange(0, BM)
    mmask = m < tl.load(tile_stop_ptr + i)
    return m, mmask, tl.load(order_ptr + m, mask=mmask, other=0)


@triton.jit
def _moe_gemm_up_kernel(x_ptr, order_ptr, tile_e_ptr, tile_first_ptr, tile_stop_ptr, wg_ptr, wu_ptr, grid_ptr,
                        h_ptr, D, F, KSEL, E, w_estride, w_rstride, QTYPE: tl.constexpr, BM: tl.constexpr,
                        BN: tl.constexpr, BF16_DOT: tl.constexpr, INTERPRETED: tl.constexpr):
    """h_sorted[m, n] = silu(x[tok] . W_gate[e][n]) * (x[tok] . W_up[e][n]) for one expert's tile of slots."""
    e = tl.load(tile_e_ptr + tl.program_id(0))
    if e >= E:                                   # past the last tile: the grid is an upper bound
        return
    m, mmask, slots = _tile_rows(tl.program_id(0), order_ptr, tile_first_ptr, tile_stop_ptr, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)                        # [BN]
    nmask = (n < F)[:, None, None]
    off = e * w_estride + (n.to(tl.int64) * w_rstride)[:, None, None]   # [BN, 1, 1]
    xrow = x_ptr + ((slots // KSEL).to(tl.int64) * D)[:, None]          # [BM, 1]
    acc_g = tl.zeros([BM, BN], tl.float32)
    acc_u = tl.zeros([BM, BN], tl.float32)
    for c in range(0, tl.cdiv(D, 256)):
        q, a, b, k, ok = decode_chunk(QTYPE, wg_ptr + off, c, nmask, D, grid_ptr)
        wg = values(q, a, b).reshape(BN, 256)
        q, a, b, k, ok = decode_chunk(QTYPE, wu_ptr + off, c, nmask, D, grid_ptr)
        wu = values(q, a, b).reshape(BN, 256)
        xv = tl.load(xrow + k.reshape(1, 256), mask=mmask[:, None] & ok.reshape(1, 256), other=0.0)  # [BM, 256]
        acc_g = dot_acc(xv.to(tl.float32), wg, acc_g, BF16_DOT, INTERPRETED)
        acc_u = dot_acc(xv.to(tl.float32), wu, acc_u, BF16_DOT, INTERPRETED)
    h = _silu(acc_g) * acc_u
    tl.store(h_ptr + (m.to(tl.int64) * F)[:, None] + n[None, :], h, mask=mmask[:, None] & (n < F)[None, :])


@triton.jit
def _moe_gemm_down_kernel(h_ptr, order_ptr, rw_ptr, tile_e_ptr, tile_first_ptr, tile_stop_ptr, wd_ptr, grid_ptr,
                          yslot_ptr, D, F, E, d_estride, d_rstride, QTYPE: tl.constexpr, BM: tl.constexpr,
                          BN: tl.constexpr, BF16_DOT: tl.constexpr, INTERPRETED: tl.constexpr):
    """yslot[slot, n] = rw[slot] * h_sorted[m] . W_down[e][n] for one expert's tile of slots."""
    e = tl.load(tile_e_ptr + tl.program_id(0))
    if e >= E:
        return
    m, mmask, slots = _tile_rows(tl.program_id(0), order_ptr, tile_first_ptr, tile_stop_ptr, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = (n < D)[:, None, None]
    off = e * d_estride + (n.to(tl.int64) * d_rstride)[:, None, None]
    hrow = h_ptr + (m.to(tl.int64) * F)[:, None]                        # [BM, 1]
    acc = tl.zeros([BM, BN], tl.float32)
    for c in range(0, tl.cdiv(F, 256)):
        q, a, b, k, ok = decode_chunk(QTYPE, wd_ptr + off, c, nmask, F, grid_ptr)
        w = values(q, a, b).reshape(BN, 256)
        hv = tl.load(hrow + k.reshape(1, 256), mask=mmask[:, None] & ok.reshape(1, 256), other=0.0)
        acc = dot_acc(hv, w, acc, BF16_DOT, INTERPRETED)
    rw = tl.load(rw_ptr + slots, mask=mmask, other=0.0)                 # [BM]
    dst = yslot_ptr + (slots.to(tl.int64) * D)[:, None] + n[None, :]
    tl.store(dst, acc * rw[:, None], mask=mmask[:, None] & (n < D)[None, :])


# ----------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------

def _check(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    op = "moe_experts"
    expect(op, "x", x, (None, None), "[T, D]")
    expect_dtype(op, "x", x, FLOATS)
    t, d = x.shape
    expect(op, "ids", ids, (t, None), "[T, K] chosen expert ids")
    expect(op, "weights", weights, tuple(ids.shape), "[T, K], one weight per chosen expert")
    if ids.dtype not in (torch.int64, torch.int32):
        raise BadInput(f"moe_experts: 'ids' is {ids.dtype}; pass int64 expert ids")
    raws = {}
    for name, w, want in (("w_gate", w_gate, 3), ("w_up", w_up, 3), ("w_down", w_down, 3)):
        raws[name] = weight_rows(op, name, w)
        if len(w.shape) != want:
            raise BadInput(f"moe_experts: '{name}' has shape {list(w.shape)}, expected stacked experts [E, rows, cols]")
    n_exp, ffn, dd = w_gate.shape
    if dd != d:
        raise BadInput(f"moe_experts: 'w_gate' takes {dd} features but x has {d}; pass x of shape [T, {dd}]")
    for name, w, want in (("w_up", w_up, (n_exp, ffn, d)), ("w_down", w_down, (n_exp, d, ffn))):
        if tuple(w.shape) != want:
            raise BadInput(f"moe_experts: '{name}' has shape {list(w.shape)}, expected {list(want)}")
    if w_up.qtype != w_gate.qtype:
        raise BadInput(f"moe_experts: 'w_gate' is {w_gate.qtype.name} but 'w_up' is {w_up.qtype.name}; the fused "
                       f"kernel decodes both with one decoder, so store them in one type")
    shared = (s_gate, s_up, s_down)
    if any(w is None for w in shared) and not all(w is None for w in shared):
        raise BadInput("moe_experts: pass all three shared-expert weights (s_gate, s_up, s_down) or none of them")
    if s_gate is not None:
        for name, w in (("s_gate", s_gate), ("s_up", s_up), ("s_down", s_down)):
            raws[name] = weight_rows(op, name, w)
        fs = s_gate.shape[0]
        for name, w, want in (("s_gate", s_gate, (fs, d)), ("s_up", s_up, (fs, d)), ("s_down", s_down, (d, fs))):
            if tuple(w.shape) != want:
                raise BadInput(f"moe_experts: '{name}' has shape {list(w.shape)}, expected {list(want)}")
        if s_up.qtype != s_gate.qtype:
            raise BadInput(f"moe_experts: 's_gate' is {s_gate.qtype.name} but 's_up' is {s_up.qtype.name}; "
                           f"store them in one type")
    expect_device(op, x=x, weights=weights, ids=ids, **raws)
    return raws


def _decode(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y, lastblock=False, prefetch=False,
            flat=False):
    """y[T, D] by the fused GEMVs: up, down, then `_moe_combine_kernel`; with `lastblock` the down
    kernel's last program per (row tile, token) does the combine (same sums, same order, one launch fewer).
    `prefetch`: gate and up in one loop, FETCH_DEPTH chunks in flight in both GEMVs (the same arithmetic).
    `flat`: Q4_K weights through the flat GEMV form (`_dequant.Q4_K_FLAT`; FLAT_*_ROWS tiles; other sums)."""
    t, d = x.shape
    n_exp, ffn, _ = w_gate.shape
    ksel = ids.shape[1]
    has_shared = s_gate is not None
    fs = s_gate.shape[0] if has_shared else 1
    rg, ru, rd = raws["w_gate"], raws["w_up"], raws["w_down"]
    sg, su, sd = (raws["s_gate"], raws["s_up"], raws["s_down"]) if has_shared else (rg, ru, rd)
    # the GEMVs' decoders (linear.Q6K_WIDE_LOADS picks Q6_K's fetch); the placeholders of absent shared weights
    qg = gemv_flat_qtype(w_gate.qtype, flat)
    qd = gemv_flat_qtype(w_down.qtype, flat)
    qs = gemv_flat_qtype(s_gate.qtype, flat) if has_shared else qg
    qsd = gemv_flat_qtype(s_down.qtype, flat) if has_shared else qd
    grid = grid_for_any((w_gate, w_down, s_gate, s_down), rg)
    fmax = max(ffn, fs if has_shared else 0)
    h = torch.empty((t * ksel + (t if has_shared else 0), fmax), dtype=torch.float32, device=x.device)
    ptx = not interpreting()
    up_rows, down_rows, _ = _tiles()
    if flat and not interpreting():
        up_rows, down_rows = FLAT_UP_ROWS, FLAT_DOWN_ROWS
    depth = _depth() if prefetch else 1
    _moe_up_kernel[(cdiv(fmax, up_rows), h.shape[0])](
        x, ids, rg, ru, sg, su, grid, h, t, d, ffn, fs, ksel, n_exp, rg.stride(0), rg.stride(1), sg.stride(0),
        h.stride(0), QTYPE=qg, QTYPE_S=qs, SA=gemv_cols(qg), SA_S=gemv_cols(qs),
        R=up_rows, HAS_SHARED=has_shared, PTX=ptx, PAIR=prefetch, DEPTH=depth, num_warps=GEMV_WARPS)
    nk = ksel + int(has_shared)
    part = torch.empty((t, nk, d), dtype=torch.float32, device=x.device)  # [T, K (+1), D]
    tiles = cdiv(d, down_rows)
    cnt = counters("moe_experts", x.device, t * tiles) if lastblock else part  # [T, tiles] slots used
    _moe_down_kernel[(tiles, t, nk)](
        h, ids, weights, rd, sd, grid, part, y, cnt, t, d, ffn, fs, ksel, n_exp, rd.stride(0), rd.stride(1),
        sd.stride(0), h.stride(0), QTYPE=qd, QTYPE_S=qsd, SA=gemv_cols(qd),
        SA_S=gemv_cols(qsd), R=down_rows, HAS_SHARED=has_shared, PTX=ptx, LASTBLOCK=lastblock, DEPTH=depth,
        num_warps=GEMV_WARPS)
    if not lastblock:
        _moe_combine_kernel[(cdiv(d, 1024), t)](part, y, d, nk, BLOCK=1024, num_warps=4)


def _tile_map(ids: torch.Tensor, n_exp: int, bm: int):
    """Slots sorted by expert and the grouped-GEMM tile map, all on the device (no host sync).

    Returns (order [N], tile_e [MAXT], tile_first [MAXT], tile_stop [MAXT]); tile i covers sorted
    positions tile_first[i] .. min(tile_first[i] + bm, tile_stop[i]) of expert tile_e[i] (== E: none).
    MAXT = cdiv(N, bm) + E bounds the number of tiles whatever the routing, so the grid is static.
    """
    flat = ids.reshape(-1)                                              # [N] slot -> expert
    order = torch.sort(flat, stable=True).indices                       # [N] sorted position -> slot
    counts = torch.zeros(n_exp, dtype=torch.int64, device=ids.device).scatter_add_(0, flat, torch.ones_like(flat))
    starts = torch.cumsum(counts, 0) - counts                           # [E]
    tiles = (counts + bm - 1) // bm
    tile_end = torch.cumsum(tiles, 0)                                   # [E]
    maxt = cdiv(flat.numel(), bm) + n_exp
    i = torch.arange(maxt, device=ids.device)
    tile_e = torch.searchsorted(tile_end, i, right=True)                # [MAXT], E past the last tile
    ec = tile_e.clamp(max=n_exp - 1)
    tile_first = starts[ec] + (i - (tile_end[ec] - tiles[ec])) * bm
    tile_stop = starts[ec] + counts[ec]
    return order, tile_e, tile_first, tile_stop


def _prefill(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y, bf16):
    t, d = x.shape
    n_exp, ffn, _ = w_gate.shape
    ksel = ids.shape[1]
    n = t * ksel
    bad = ((ids < 0) | (ids >= n_exp)).any(dim=1)                       # [T] on the device: NaN rows below
    ids_c = ids.clamp(0, n_exp - 1).to(torch.int64)
    order, tile_e, tile_first, tile_stop = _tile_map(ids_c, n_exp, MOE_BM)
    rg, ru, rd = raws["w_gate"], raws["w_up"], raws["w_down"]
    interp = interpreting()
    bn = _tiles()[2]
    h = torch.empty((n, ffn), dtype=torch.float32, device=x.device)    # [N, F] in sorted order
    _moe_gemm_up_kernel[(tile_e.numel(), cdiv(ffn, bn))](
        x, order, tile_e, tile_first, tile_stop, rg, ru, grid_for(w_gate, rg), h, d, ffn, ksel, n_exp,
        rg.stride(0), rg.stride(1), QTYPE=int(w_gate.qtype), BM=MOE_BM, BN=bn, BF16_DOT=bf16,
        INTERPRETED=interp, num_warps=MOE_WARPS, num_stages=1)
    yslot = torch.empty((n, d), dtype=torch.float32, device=x.device)  # [N, D] in slot order
    _moe_gemm_down_kernel[(tile_e.numel(), cdiv(d, bn))](
        h, order, weights.contiguous().to(torch.float32), tile_e, tile_first, tile_stop, rd, grid_for(w_down, rd),
        yslot, d, ffn, n_exp, rd.stride(0), rd.stride(1), QTYPE=int(w_down.qtype), BM=MOE_BM, BN=bn,
        BF16_DOT=bf16, INTERPRETED=interp, num_warps=MOE_WARPS, num_stages=1)
    out = yslot.view(t, ksel, d).sum(dim=1)                             # [T, D], fixed order over K
    if s_gate is not None:
        fs = s_gate.shape[0]
        g = torch.empty((t, fs), dtype=torch.float32, device=x.device)
        u = torch.empty((t, fs), dtype=torch.float32, device=x.device)
        run_gemm(x, raws["s_gate"], s_gate.qtype, grid_for(s_gate, raws["s_gate"]), g, bf16)
        run_gemm(x, raws["s_up"], s_up.qtype, grid_for(s_up, raws["s_up"]), u, bf16)
        hs = torch.nn.functional.silu(g) * u                            # [T, Fs]
        ys = torch.empty((t, d), dtype=torch.float32, device=x.device)
        run_gemm(hs, raws["s_down"], s_down.qtype, grid_for(s_down, raws["s_down"]), ys, bf16)
        out += ys
    out = torch.where(bad[:, None], torch.full_like(out, float("nan")), out)
    y.copy_(out)


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """[N, OUT] bf16: row block g of a (rows offs[g-1] .. offs[g]) times b[g] ([E, K, OUT], bf16), on torch's
    grouped GEMM (CUTLASS on Hopper). Refused, with the fix, on a torch without it (before 2.8)."""
    mm = getattr(torch, "_grouped_mm", None)
    if mm is None:
        raise BadInput(f"moe_experts: implementation \"triton_dqmm\" needs torch._grouped_mm (torch >= 2.8; this is "
                       f"torch {torch.__version__}); upgrade torch or select another moe_experts implementation")
    return mm(a, b, offs=offs)


def dqmm_applies(t: int, ksel: int, n_exp: int) -> bool:
    """Whether "triton_dqmm"'s prefill decodes every expert (T > MOE_GEMV_MAX_T and at least DQMM_SLOTS_PER_EXPERT
    slots per expert on average, where one decode of all experts is shared by enough rows); else its prefill is the
    fused grouped GEMMs ("triton_lastblock"'s)."""
    return t > MOE_GEMV_MAX_T and t * ksel >= DQMM_SLOTS_PER_EXPERT * n_exp


def _slots_by_expert(x, ids, n_exp):
    """The T*K slots grouped by expert, on the device (no host sync): (bad [T]: a token with an id outside [0, E),
    order [N]: sorted position -> slot, ends [E] int32: each expert's group end, xs [N, D] bf16: each slot's token
    in sorted order)."""
    ksel = ids.shape[1]
    bad = ((ids < 0) | (ids >= n_exp)).any(dim=1)                       # [T]: NaN rows
    flat_ids = ids.clamp(0, n_exp - 1).to(torch.int64).reshape(-1)      # [N] slot -> expert
    order = torch.sort(flat_ids, stable=True).indices                   # [N] sorted position -> slot
    counts = torch.zeros(n_exp, dtype=torch.int64, device=x.device).scatter_add_(0, flat_ids, torch.ones_like(flat_ids))
    ends = torch.cumsum(counts, 0).to(torch.int32)                      # [E] group ends (bincount would sync)
    xs = x.to(torch.bfloat16)[order // ksel]                            # [N, D]
    return bad, order, ends, xs


def _shared_dqmm(x, s_gate, s_up, s_down, raws):
    """[T, D] float32: the shared expert through linear's decode-once path ("triton_dqmm")."""
    t, d = x.shape
    fs = s_gate.shape[0]
    gs = torch.empty((t, fs), dtype=torch.float32, device=x.device)
    us = torch.empty((t, fs), dtype=torch.float32, device=x.device)
    run_dqmm(x, raws["s_gate"], s_gate.qtype, grid_for(s_gate, raws["s_gate"]), gs)
    run_dqmm(x, raws["s_up"], s_up.qtype, grid_for(s_up, raws["s_up"]), us)
    hs = torch.nn.functional.silu(gs) * us                              # [T, Fs]
    sh = torch.empty((t, d), dtype=torch.float32, device=x.device)
    run_dqmm(hs, raws["s_down"], s_down.qtype, grid_for(s_down, raws["s_down"]), sh)
    return sh


def _prefill_dqmm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y, fused=False):
    """y[T, D] for prefill by decode-once GEMMs: each stacked expert weight decoded to bfloat16 in one launch
    (`dequantize_bf16`: all E experts, one weight at a time, so the scratch peaks at one [E, F, D] bf16 weight),
    the slots sorted by expert, and one grouped GEMM per weight (`torch._grouped_mm`, groups = experts). No host
    synchronisation: the group ends are a device tensor. fused: `_prefill_dqmm_fused`'s glue instead."""
    if fused:
        return _prefill_dqmm_fused(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y)
    t, d = x.shape
    n_exp, ffn, _ = w_gate.shape
    ksel = ids.shape[1]
    bad, order, ends, xs = _slots_by_expert(x, ids, n_exp)
    rg, ru, rd = raws["w_gate"], raws["w_up"], raws["w_down"]
    wg = dequantize_bf16(rg, w_gate.qtype, grid_for(w_gate, rg), d)     # [E, F, D]
    g = _grouped_mm(xs, wg.transpose(1, 2), ends)                       # [N, F]
    del wg
    wu = dequantize_bf16(ru, w_up.qtype, grid_for(w_up, ru), d)         # [E, F, D]
    u = _grouped_mm(xs, wu.transpose(1, 2), ends)                       # [N, F]
    del wu
    h = (torch.nn.functional.silu(g.float()) * u.float()).to(torch.bfloat16)  # [N, F]
    wd = dequantize_bf16(rd, w_down.qtype, grid_for(w_down, rd), ffn)   # [E, D, F]
    ys = _grouped_mm(h, wd.transpose(1, 2), ends)                       # [N, D] sorted
    del wd
    yslot = torch.empty((t * ksel, d), dtype=torch.float32, device=x.device)  # [N, D] in slot order
    yslot[order] = ys.float() * weights.reshape(-1)[order][:, None]
    out = yslot.view(t, ksel, d).sum(dim=1)                             # [T, D], fixed order over K
    if s_gate is not None:
        out += _shared_dqmm(x, s_gate, s_up, s_down, raws)
    out = torch.where(bad[:, None], torch.full_like(out, float("nan")), out)
    y.copy_(out)


def _prefill_dqmm_fused(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y):
    """"triton_dqmm_fused"'s prefill: `_prefill_dqmm` with gate and up decoded into one interleaved [E, F, 2, D]
    bf16 weight (row 2f gate f, row 2f + 1 up f) so one grouped GEMM gives both, SiLU * up in one pass over its
    (g, u) column pairs (`moe_glue.swiglu_pairs`), and each token's slots summed straight from the expert-sorted
    rows, the shared expert and the NaN rows of bad ids in the same pass (`moe_glue.combine_slots`, into y)."""
    t, d = x.shape
    n_exp, ffn, _ = w_gate.shape
    ksel = ids.shape[1]
    bad, order, ends, xs = _slots_by_expert(x, ids, n_exp)
    pos = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=x.device))  # slot -> row
    pairs = torch.empty((n_exp * ffn, 2, d), dtype=torch.bfloat16, device=x.device)  # [E*F, 2, D]
    for half, name, w in ((0, "w_gate", w_gate), (1, "w_up", w_up)):
        dequantize_bf16(raws[name], w.qtype, grid_for(w, raws[name]), d, out=pairs[:, half])
    gu = _grouped_mm(xs, pairs.view(n_exp, 2 * ffn, d).transpose(1, 2), ends)  # [N, 2F]: (g, u) column pairs
    del pairs
    h = swiglu_pairs(gu)                                                # [N, F] bf16
    del gu
    rd = raws["w_down"]
    wd = dequantize_bf16(rd, w_down.qtype, grid_for(w_down, rd), ffn)   # [E, D, F]
    ys = _grouped_mm(h, wd.transpose(1, 2), ends)                       # [N, D] sorted
    del wd, h
    sh = _shared_dqmm(x, s_gate, s_up, s_down, raws) if s_gate is not None else None
    combine_slots(ys, pos.view(t, ksel), weights, bad, y, add=sh)


def _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16, lastblock=False, prefetch=False,
         flat=False, dqmm=False, fused=False):
    raws = _check(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    x = x.contiguous()
    ids = ids.contiguous()
    weights = weights.contiguous().to(torch.float32)
    y = torch.empty_like(x)                                             # [T, D]
    if x.shape[0] == 0:
        return y
    if ids.shape[1] == 0 and s_gate is None:
        return y.zero_()
    if x.shape[0] <= MOE_GEMV_MAX_T:
        _decode(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y, lastblock, prefetch, flat)
    elif dqmm and dqmm_applies(x.shape[0], ids.shape[1], w_gate.shape[0]):
        _prefill_dqmm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y, fused)
    else:
        _prefill(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, raws, y, bf16)
    return y


def moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton": float32 GEMVs for T <= 8, bf16 grouped GEMMs above (claim "bf16")."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=True)


def moe_experts_fp32(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton_fp32": float32 GEMVs for T <= 8, tf32x3 grouped GEMMs above (claim float32)."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=False)


def moe_experts_lastblock(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton_lastblock": "triton" with the decode combine done by the down kernel's last
    program per (row tile, token) instead of a third launch. Claim: bit-identical to "triton" (whose
    "bf16" claim it inherits)."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=True, lastblock=True)


def moe_experts_prefetch(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton_prefetch": "triton_lastblock" whose decode GEMVs stream their weights deeper: the
    gate and up rows of a slot in one loop (one chain of memory round trips, not two in a row) and FETCH_DEPTH
    chunks of each weight in flight. Loads move, the arithmetic does not: claim bit-identical to
    "triton_lastblock". Prefill is "triton_lastblock"'s."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=True, lastblock=True,
                prefetch=True)


def moe_experts_flat(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton_flat": "triton_prefetch" (the gate/up pair loop, FETCH_DEPTH) with Q4_K weights through
    the flat GEMV form (`_dequant.Q4_K_FLAT`, as linear's "triton_flat": no layout change, so no barrier, in the
    loop). Other sums than "triton"'s: claim "bf16" (its prefill GEMMs'); the decode GEMVs are float32 arithmetic.
    Measured on the H200 (session 8): a 48B MoE layer at T=1 took 44.8 us against "triton_prefetch"'s 34.4 (the
    tile study's best, 44.6). No registry selects it."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=True, lastblock=True,
                prefetch=True, flat=True)


def moe_experts_dqmm(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton_dqmm": decode as "triton_prefetch" (the same GEMVs); a prefill with enough slots per
    expert (`dqmm_applies`) decodes each stacked weight once to bfloat16 and runs grouped GEMMs on torch's
    `_grouped_mm` (`_prefill_dqmm`), its shared expert through linear's "triton_dqmm" path; smaller prefills run
    "triton_lastblock"'s fused grouped GEMMs. bf16 operands, other sums than "triton"'s: claim "bf16"."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=True, lastblock=True,
                prefetch=True, dqmm=True)


def moe_experts_dqmm_fused(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    """Implementation "triton_dqmm_fused": "triton_dqmm" (the same decode, the same decode-once weights and the same
    choice of path) whose prefill runs gate and up as one grouped GEMM over an interleaved weight and does the steps
    between and after the GEMMs in two kernels (`moe_glue`) instead of torch's element-wise passes. Other sums than
    "triton_dqmm"'s (one GEMM shape for gate and up, the top_k sum in order): claim "bf16"."""
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, bf16=True, lastblock=True,
                prefetch=True, dqmm=True, fused=True)
