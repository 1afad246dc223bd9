"""moe_router in Triton: router logits (float32 GEMV/GEMM), then one program per token for the routing.

1. logits[t, e] = x[t] . weight[e] in float32 FMA arithmetic (never tf32: a rounding that flips
   which experts are chosen is not a small error). T < 16 (decode): a GEMV, programs over blocks of
   experts so the [E, D] float32 weight (2.4 MB at 48B sizes) is read by many SMs at once; otherwise
   a tiled product (tl.dot with input_precision="ieee").
2. `_route_kernel`, one program per token, everything in registers ([n_group, E/n_group] tile):
   s = sigmoid(logits), s' = s + bias; group score = sum of the two best s' of each group; keep the
   topk_group best groups (ties: lower group), s' of the others := 0 (as the reference code does);
   top_k by iterative max (ties: lower expert id); w = s[ids] / (sum + eps) * scale.
"triton_lastblock" (`moe_router_lastblock`) runs step 2 inside the decode GEMV: the last of token t's
logits programs to finish (an int32 arrival counter, `_arrival`) routes token t with the same function
(`_route_token`), so decode is one launch and its output bit-identical to "triton"'s. Prefill (T >= 16)
is the same two launches in both.
"triton_prefetch" (`moe_router_prefetch`) is "triton_lastblock" whose decode GEMV issues the loads of all its
D tiles up front (the loop unrolled, `_logits_gemv_kernel`'s PREFETCH) instead of one tile per memory round trip;
the same arithmetic in the same order, so bit-identical to "triton_lastblock". Prefill as the others.
"""

import torch
import triton
import triton.language as tl

from sparkops.ops._routing import check_routing

from ._arrival import arrive, counters, depart
from ._runtime import FLOATS, cdiv, expect, expect_device, expect_dtype, next_pow2


#: decode's logits GEMV: experts per program and the D-slice width (256 experts / 4 = 64 programs at 48B sizes)
ROUTER_GEMV_BE, ROUTER_GEMV_BD, ROUTER_GEMV_WARPS = 4, 512, 4
#: prefill's logits GEMM (T >= 16): tokens and experts per program, the D slice per step, warps. Every implementation's
#: prefill runs this kernel, so a change of tile keeps their bit-identity claims (and changes all their bits alike).
#: The tune study router_prefill times the alternatives. Session 11 (H200, 16384 tokens, one layer): the old (64, 64,
#: 32, 4) in float32 FMA 1.61 ms; (128, 128, 32, 8) 1.06 ms; the same in tf32x3 0.41 ms (nmse 2.2e-09 against FMA)
ROUTER_GEMM_BT, ROUTER_GEMM_BE, ROUTER_GEMM_BD, ROUTER_GEMM_WARPS = 128, 128, 32, 8
#: its products: "tf32x3" (three tf32 tensor-core products per product, about float32's accuracy) or "ieee" (float32
#: FMA, 4x slower above); never plain "tf32", whose 10-bit operands flip near-tied choices
ROUTER_GEMM_PRECISION = "tf32x3"
#: warps of `_route_kernel`. "triton_lastblock" runs the same GEMV shape (BE, BD, warps: another tile
#: would change the order of each logit's sum, so more programs per token are not free) and routes
#: inside it with ROUTER_GEMV_WARPS warps; the sum of the top_k weights is a reduction whose order
#: follows the thread layout, so its bits match "triton"'s with ROUTER_GEMV_WARPS == ROUTE_WARPS
#: (the defaults; the sm_90 PTX of the two routing codes is the same float instruction sequence).
ROUTE_WARPS = 4
#: "triton_prefetch": the most D tiles (of ROUTER_GEMV_BD) whose loads are all issued up front; each holds
#: BE * BD / (32 * warps) float32 weights a thread (16 at the defaults: 80 at the 48B's D = 2304, 5 tiles). A longer
#: row runs the lastblock kernel's loop (the same bits) rather than spill registers
ROUTER_PREFETCH_MAX_TILES = 8
#: .maxnreg of the prefetching GEMV. Without one, ptxas (Triton 3.6, sm_90) schedules it for ~52 registers and sinks
#: most weight loads back next to their FFMAs: 8 of its 25 loads at D = 2304 came before the first FFMA, the rest one
#: or two at a time, each waited on in turn (more dependent round trips than the loop's 5). With a .maxnreg of 112 or
#: more, all 25 come first (106 registers; 40 loads, 158 registers at the 8-tile cap, D = 4096; no spills). Registers
#: and schedule, not arithmetic: the PTX is the same either way, so are the bits
ROUTER_PREFETCH_MAXNREG = 168


@triton.jit
def _logits_gemv_kernel(x_ptr, w_ptr, out_ptr, E, D, bias_ptr, w_out_ptr, id_out_ptr, cnt_ptr, EG, n_group,
                        topk_group, top_k, scale, renorm_eps, BE: tl.constexpr, BD: tl.constexpr,
                        GP: tl.constexpr, EGP: tl.constexpr, KP: tl.constexpr, LASTBLOCK: tl.constexpr,
                        PREFETCH: tl.constexpr, NT: tl.constexpr):
    """logits[t, e] = x[t] . weight[e] for BE experts e of token t (one program per (expert block, token)).
    LASTBLOCK: the last of token t's cdiv(E, BE) programs to arrive at counter t also routes token t
    (`_route_token` on the logits the others wrote): the bias, weights, ids and routing arguments are
    read only then.
    PREFETCH: the D loop unrolled over its NT = cdiv(D, BD) tiles (NT is read only then), every tile's x and
    weight loads issued before the first multiply, so the program waits on one memory round trip instead of NT
    in a row (launched with ROUTER_PREFETCH_MAXNREG, or ptxas sinks the loads back). The loads move, the arithmetic
    does not: the same `acc += w * xv` per tile in the same order, the same tl.sum, so the same bits as the loop.
    Off, the kernel is the same code as before (compile-time branch)."""
    t = tl.program_id(1)
    e = tl.program_id(0) * BE + tl.arange(0, BE)
    e_ok = e < E
    dd = tl.arange(0, BD)
    acc = tl.zeros((BE, BD), dtype=tl.float32)
    if PREFETCH:
        xs = ()  # NT x [BD]
        ws = ()  # NT x [BE, BD]
        for i in tl.static_range(NT):
            d_ok = i * BD + dd < D
            xs = xs + (tl.load(x_ptr + t.to(tl.int64) * D + i * BD + dd, mask=d_ok, other=0.0).to(tl.float32),)
            ws = ws + (tl.load(w_ptr + e[:, None].to(tl.int64) * D + i * BD + dd[None, :],
                               mask=e_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32),)
        for i in tl.static_range(NT):
            acc += ws[i] * xs[i][None, :]
    else:
        for d0 in range(0, D, BD):
            d_ok = d0 + dd < D
            xv = tl.load(x_ptr + t.to(tl.int64) * D + d0 + dd, mask=d_ok, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + e[:, None].to(tl.int64) * D + d0 + dd[None, :],
                        mask=e_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            acc += w * xv[None, :]
    tl.store(out_ptr + t.to(tl.int64) * E + e, tl.sum(acc, axis=1), mask=e_ok)
    if LASTBLOCK:
        if arrive(cnt_ptr, t, tl.num_programs(0)):
            _route_token(t.to(tl.int64), out_ptr, bias_ptr, w_out_ptr, id_out_ptr, E, EG, n_group, topk_group, top_k,
                         scale, renorm_eps, GP, EGP, KP, True)
            depart(cnt_ptr, t)


@triton.jit
def _logits_gemm_kernel(x_ptr, w_ptr, out_ptr, T, E, D, BT: tl.constexpr, BE: tl.constexpr, BD: tl.constexpr,
                        PREC: tl.constexpr = "ieee"):
    rows = tl.program_id(0) * BT + tl.arange(0, BT)
    e = tl.program_id(1) * BE + tl.arange(0, BE)
    dd = tl.arange(0, BD)
    acc = tl.zeros((BT, BE), dtype=tl.float32)
    for d0 in range(0, D, BD):
        d_ok = d0 + dd < D
        xv = tl.load(x_ptr + rows[:, None].to(tl.int64) * D + d0 + dd[None, :],
                     mask=(rows < T)[:, None] & d_ok[None, :], other=0.0).to(tl.float32)  # [BT, BD]
        w = tl.load(w_ptr + e[None, :].to(tl.int64) * D + d0 + dd[:, None], mask=(e < E)[None, :] & d_ok[:, None],
                    other=0.0).to(tl.float32)  # [BD, BE] = weight^T slice
        acc = tl.dot(xv, w, acc, input_precision=PREC)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * E + e[None, :], acc, mask=(rows < T)[:, None] & (e < E)[None, :])


@triton.jit
def _route_token(t, logit_ptr, bias_ptr, w_out_ptr, id_out_ptr, E, EG, n_group, topk_group, top_k, scale, renorm_eps,
                 GP: tl.constexpr, EGP: tl.constexpr, KP: tl.constexpr, CG: tl.constexpr):
    """Route token t (int64) from its logits row: weights[t, :top_k] and ids[t, :top_k] (the module docstring's
    step 2). CG: read the logits from L2 (ld.global.cg), for logits other programs of this launch wrote."""
    g = tl.arange(0, GP)
    j = tl.arange(0, EGP)
    ok = (g < n_group)[:, None] & (j < EG)[None, :]
    e = g[:, None] * EG + j[None, :]  # expert id of each slot [GP, EGP]
    if CG:
        logits = tl.load(logit_ptr + t * E + e, mask=ok, other=0.0, cache_modifier=".cg")
    else:
        logits = tl.load(logit_ptr + t * E + e, mask=ok, other=0.0)
    s = tl.sigmoid(logits)  # unbiased scores: the weights
    chooser = tl.where(ok, s + tl.load(bias_ptr + e, mask=ok, other=0.0), float("-inf"))  # s': the choice
    # group score: the sum of each group's two best s' (just the best when a group holds one expert)
    best1 = tl.max(chooser, axis=1)  # [GP]
    first = tl.min(tl.where(chooser == best1[:, None], j[None, :], EGP), axis=1)
    best2 = tl.max(tl.where(j[None, :] == first[:, None], float("-inf"), chooser), axis=1)
    group_score = tl.where(g < n_group, best1 + tl.where(EG > 1, best2, 0.0), float("-inf"))
    kept = g < 0  # all False [GP]
    for _ in range(topk_group):
        top = tl.max(group_score, axis=0)
        pick = tl.min(tl.where(group_score == top, g, GP), axis=0)  # ties: the lower group
        kept = kept | (g == pick)
        group_score = tl.where(g == pick, float("-inf"), group_score)
    chooser = tl.where(ok, tl.where(kept[:, None], chooser, 0.0), float("-inf"))
    kk = tl.arange(0, KP)
    ids = tl.zeros((KP,), dtype=tl.int32)
    wts = tl.zeros((KP,), dtype=tl.float32)
    for i in range(top_k):
        top = tl.max(tl.max(chooser, axis=1), axis=0)
        pick = tl.min(tl.min(tl.where(chooser == top, e, E), axis=1), axis=0)  # ties: the lower expert id
        w_pick = tl.sum(tl.sum(tl.where(e == pick, s, 0.0), axis=1), axis=0)
        ids = tl.where(kk == i, pick, ids)
        wts = tl.where(kk == i, w_pick, wts)
        chooser = tl.where(e == pick, float("-inf"), chooser)
    wts = wts / (tl.sum(wts, axis=0) + renorm_eps) * scale
    k_ok = kk < top_k
    tl.store(w_out_ptr + t * top_k + kk, wts, mask=k_ok)
    tl.store(id_out_ptr + t * top_k + kk, ids.to(tl.int64), mask=k_ok)


@triton.jit
def _route_kernel(logit_ptr, bias_ptr, w_out_ptr, id_out_ptr, E, EG, n_group, topk_group, top_k, scale, renorm_eps,
                  GP: tl.constexpr, EGP: tl.constexpr, KP: tl.constexpr):
    """One program per token: `_route_token`."""
    _route_token(tl.program_id(0).to(tl.int64), logit_ptr, bias_ptr, w_out_ptr, id_out_ptr, E, EG, n_group,
                 topk_group, top_k, scale, renorm_eps, GP, EGP, KP, False)


def _router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, lastblock, prefetch=False):
    op = "moe_router"
    expect(op, "x", x, (None, None), "[T, D]")
    t, d = x.shape
    expect(op, "weight", weight, (None, d), "[E, D]")
    experts = weight.shape[0]
    expect(op, "bias", bias, (experts,), "one selection bias per expert")
    expect_dtype(op, "x", x, FLOATS)
    expect_device(op, x=x, weight=weight, bias=bias)
    top_k, n_group, topk_group = check_routing(op, experts, top_k, n_group, topk_group)
    dev = x.device
    weights = torch.empty((t, top_k), dtype=torch.float32, device=dev)
    ids = torch.empty((t, top_k), dtype=torch.int64, device=dev)
    if t == 0:
        return weights, ids
    x, weight = x.contiguous(), weight.contiguous()
    logits = torch.empty((t, experts), dtype=torch.float32, device=dev)  # [T, E]
    bias = bias.contiguous()
    eg = experts // n_group
    route = dict(GP=next_pow2(n_group), EGP=next_pow2(eg), KP=next_pow2(top_k))
    if t < 16:
        be = ROUTER_GEMV_BE
        cnt = counters(op, dev, t) if lastblock else logits  # slot t: token t's arrivals
        tiles = cdiv(d, ROUTER_GEMV_BD)
        prefetch = prefetch and tiles <= ROUTER_PREFETCH_MAX_TILES
        deep = dict(NT=tiles, maxnreg=ROUTER_PREFETCH_MAXNREG) if prefetch else dict(NT=0)  # NT: read only then
        _logits_gemv_kernel[(cdiv(experts, be), t)](
            x, weight, logits, experts, d, bias, weights, ids, cnt, eg, n_group, topk_group, top_k, float(scale),
            float(renorm_eps), BE=be, BD=ROUTER_GEMV_BD, **route, LASTBLOCK=lastblock, PREFETCH=prefetch, **deep,
            num_warps=ROUTER_GEMV_WARPS)
        if lastblock:
            return weights, ids
    else:
        bt, be = ROUTER_GEMM_BT, ROUTER_GEMM_BE
        _logits_gemm_kernel[(cdiv(t, bt), cdiv(experts, be))](x, weight, logits, t, experts, d, BT=bt, BE=be,
                                                              BD=ROUTER_GEMM_BD, PREC=ROUTER_GEMM_PRECISION,
                                                              num_warps=ROUTER_GEMM_WARPS)
    _route_kernel[(t,)](logits, bias, weights, ids, experts, eg, n_group, topk_group, top_k, float(scale),
                        float(renorm_eps), **route, num_warps=ROUTE_WARPS)
    return weights, ids


def moe_router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "triton": the logits GEMV (T < 16) or GEMM, then `_route_kernel` (two launches)."""
    return _router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, lastblock=False)


def moe_router_lastblock(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "triton_lastblock": decode (T < 16) routes inside the logits GEMV, each token by the last
    of its programs to finish (one launch, bit-identical to "triton"); prefill as "triton"."""
    return _router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, lastblock=True)


def moe_router_prefetch(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
    """Implementation "triton_prefetch": "triton_lastblock" whose decode (T < 16) logits GEMV issues every D tile's
    x and weight loads before its first multiply (`_logits_gemv_kernel`'s PREFETCH, launched with
    ROUTER_PREFETCH_MAXNREG; up to ROUTER_PREFETCH_MAX_TILES tiles, a longer row runs the loop) instead of one tile
    per memory round trip. The loads move, the arithmetic does not (the same BE, BD and warps, each tile's
    `acc += w * xv` in the same order, the same tl.sum, the same `_route_token` by the last program): claim
    bit-identical to "triton_lastblock". Prefill (T >= 16) is its two launches."""
    return _router(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps, lastblock=True, prefetch=True)
