"""The element-wise steps between "triton_dqmm_fused"'s grouped GEMMs, one launch each.

Why: in session 10's diagnosis of a 16384-token prefill chunk of the 48B (bench/gpu-runs/2026-11-30-session10),
"triton_dqmm"'s experts took 302 ms a chunk, of which the grouped GEMMs were 85 and the weight decoding ~45; most
of the rest went to torch's element-wise passes over the [N, F] and [N, D] slot tensors (N = T * top_k = 131072
rows): casts to float32 and back, SiLU, the product, the routing weights' product, a scatter back to slot order
(index_put, 37 ms) and the sum over each token's top_k slots - about 13 GB of memory traffic a layer. These
two kernels read each slot tensor once:

- `swiglu_pairs`: h[n, f] = silu(g) * u from the gate/up GEMM's output, whose columns hold (g_f, u_f) pairs
  (gate and up decoded into one interleaved weight, so one grouped GEMM does both); float32 arithmetic, the
  result rounded to bfloat16 (the down GEMM's operand).
- `combine_slots`: y[t] = sum_k w[t, k] * ys[pos[t, k]] (+ the shared expert's rows) in float32, k in order, read
  straight from the GEMM's expert-sorted rows (pos: each slot's row there); a token with an expert id out of range
  gets NaN; written in y's dtype.
"""

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from ._runtime import cdiv, expect_device

#: tiles: (rows, columns) per program and warps
SWIGLU_ROWS, SWIGLU_COLS, SWIGLU_WARPS = 16, 256, 4
COMBINE_ROWS, COMBINE_COLS, COMBINE_WARPS = 16, 256, 4


@triton.jit
def _swiglu_pairs_kernel(gu_ptr, h_ptr, N, F, BN: tl.constexpr, BF: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)                     # [BN]
    cols = tl.program_id(1) * BF + tl.arange(0, BF)                     # [BF]
    ok = (rows < N)[:, None] & (cols < F)[None, :]
    pair = gu_ptr + rows.to(tl.int64)[:, None] * (2 * F) + 2 * cols[None, :]
    g = tl.load(pair, mask=ok, other=0.0).to(tl.float32)               # [BN, BF]
    u = tl.load(pair + 1, mask=ok, other=0.0).to(tl.float32)
    h = g * tl.sigmoid(g) * u
    tl.store(h_ptr + rows.to(tl.int64)[:, None] * F + cols[None, :], h.to(h_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _combine_slots_kernel(ys_ptr, pos_ptr, w_ptr, add_ptr, bad_ptr, out_ptr, T, D, K: tl.constexpr,
                    HAS_ADD: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    t = tl.program_id(0) * BT + tl.arange(0, BT)                        # [BT]
    c = tl.program_id(1) * BD + tl.arange(0, BD)                        # [BD]
    t_ok = t < T
    ok = t_ok[:, None] & (c < D)[None, :]
    acc = tl.zeros((BT, BD), dtype=tl.float32)
    for k in tl.static_range(K):
        p = tl.load(pos_ptr + t.to(tl.int64) * K + k, mask=t_ok, other=0)        # [BT] the slot's sorted row
        wk = tl.load(w_ptr + t.to(tl.int64) * K + k, mask=t_ok, other=0.0)       # [BT]
        v = tl.load(ys_ptr + p.to(tl.int64)[:, None] * D + c[None, :], mask=ok, other=0.0).to(tl.float32)
        acc += v * wk[:, None]
    rows = t.to(tl.int64)[:, None] * D + c[None, :]
    if HAS_ADD:
        acc += tl.load(add_ptr + rows, mask=ok, other=0.0)
    bad = tl.load(bad_ptr + t, mask=t_ok, other=0)                      # [BT] int8
    acc = tl.where((bad != 0)[:, None], float("nan"), acc)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=ok)


def swiglu_pairs(gu: torch.Tensor) -> torch.Tensor:
    """[N, F] bfloat16 silu(g) * u from gu [N, 2F] whose column 2f is g_f and 2f + 1 is u_f."""
    n, two_f = gu.shape
    if two_f % 2:
        raise BadInput(f"moe_experts: the gate/up product is {list(gu.shape)}; swiglu_pairs needs [N, 2F] of "
                       f"(gate, up) column pairs")
    gu = gu.contiguous()
    expect_device("moe_experts", gu=gu)
    f = two_f // 2
    h = torch.empty((n, f), dtype=torch.bfloat16, device=gu.device)     # [N, F]
    if n and f:
        _swiglu_pairs_kernel[(cdiv(n, SWIGLU_ROWS), cdiv(f, SWIGLU_COLS))](gu, h, n, f, BN=SWIGLU_ROWS,
                                                                            BF=SWIGLU_COLS, num_warps=SWIGLU_WARPS)
    return h


def combine_slots(ys: torch.Tensor, pos: torch.Tensor, weights: torch.Tensor, bad: torch.Tensor,
                  out: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
    """out[t] = sum_k weights[t, k] * ys[pos[t, k]] (+ add[t]); NaN rows where bad[t]. ys [N, D] (any float dtype),
    pos [T, K] int64 rows of ys, weights [T, K] float32, bad [T] bool, add [T, D] float32, out [T, D] contiguous."""
    t, k = weights.shape
    d = out.shape[1]
    if tuple(pos.shape) != (t, k) or ys.shape[1] != d or not out.is_contiguous() or not ys.is_contiguous():
        raise BadInput(f"moe_experts: combine_slots got ys {list(ys.shape)}, pos {list(pos.shape)}, weights "
                       f"{list(weights.shape)}, out {list(out.shape)}; pos and weights are [T, K], ys and out [*, D], "
                       f"contiguous")
    if add is not None and (tuple(add.shape) != (t, d) or add.dtype != torch.float32 or not add.is_contiguous()):
        raise BadInput(f"moe_experts: combine_slots' 'add' is {add.dtype} {list(add.shape)}; pass a contiguous "
                       f"float32 [{t}, {d}]")
    expect_device("moe_experts", ys=ys, pos=pos, weights=weights, bad=bad, out=out,
                  **({"add": add} if add is not None else {}))
    if t and d:
        _combine_slots_kernel[(cdiv(t, COMBINE_ROWS), cdiv(d, COMBINE_COLS))](
            ys, pos.contiguous(), weights.contiguous(), add if add is not None else out, bad.to(torch.int8), out, t, d,
            K=k, HAS_ADD=add is not None, BT=COMBINE_ROWS, BD=COMBINE_COLS, num_warps=COMBINE_WARPS)
    return out
