"""moe_experts in torch: the routed SwiGLU experts, their weighted combine, plus the shared expert.

Only the chosen experts' weights are read. Two routes, picked by the token count (shape only):
  * slots (T <= SLOT_MAX_T: decode): the chosen experts' blocks are gathered with the device
    tensor ids (one expert per (token, slot) pair; all K slots at once when the dequantized stack
    fits SLOT_BUDGET), dequantized, and applied with batched matmuls. No host synchronisation, so a
    decode step can be captured.
  * grouped (prefill): the (token, slot) pairs are sorted by expert and each
    expert that was chosen at all is dequantized once and applied to all of its tokens. The per-
    expert counts come to the host: free on CPU; on CUDA that is one synchronisation per call,
    acceptable for prefill (never captured) and far cheaper than dequantizing an expert per token.
`moe_experts_bf16` runs the matmuls on bfloat16 operands (float32 accumulation); claimed "bf16".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sparkops.qweight import QWeight

from ._common import f32, last_dim, require
from ._weights import cacheable, cached, dense, linear_t, rows
from .dequant import dequantize_raw

#: calls with at most this many tokens take the synchronisation-free per-slot route
SLOT_MAX_T = 8
#: values of one gathered, dequantized expert stack [T * slots, F, D] built at once (float32: 256 MiB)
SLOT_BUDGET = 1 << 26


def moe_experts(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, torch.float32)


def moe_experts_bf16(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
    return _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, torch.bfloat16)


def _moe(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, compute):
    t, d = x.shape
    _check(x, weights, ids, w_gate, w_up, w_down, (s_gate, s_up, s_down))
    x32 = f32(x)
    if s_gate is not None:
        hidden = F.silu(linear_t(x32, s_gate, compute).float()) * linear_t(x32, s_up, compute).float()
        out = linear_t(hidden, s_down, compute).float()  # [T, D] the shared expert
    else:
        out = torch.zeros(t, d, dtype=torch.float32, device=x.device)
    if t <= SLOT_MAX_T:
        _by_slot(out, x32, f32(weights), ids, w_gate, w_up, w_down, compute)
    else:
        _by_expert(out, x32, f32(weights), ids, w_gate, w_up, w_down, compute)
    return out.to(x.dtype)


def _check(x, weights, ids, w_gate, w_up, w_down, shared) -> None:
    t, d = x.shape
    require(tuple(ids.shape) == tuple(weights.shape) and ids.shape[0] == t,
            f"moe_experts: ids {list(ids.shape)} and weights {list(weights.shape)} must both be [T={t}, K]")
    e, f, dd = w_gate.shape
    require(dd == d and tuple(w_up.shape) == (e, f, d) and tuple(w_down.shape) == (e, d, f),
            f"moe_experts: expert weights must be gate/up [E, F, D={d}] and down [E, D, F], got "
            f"{list(w_gate.shape)}, {list(w_up.shape)}, {list(w_down.shape)}")
    given = [s is not None for s in shared]
    require(all(given) or not any(given), "moe_experts: pass all three shared-expert weights or none of them")
    if all(given):
        last_dim("moe_experts", "x", x, shared[0].shape[-1])
    if ids.device.type == "cpu" and ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        require(lo >= 0 and hi < e, f"moe_experts: expert id {lo if lo < 0 else hi} is outside [0, {e}) of "
                                    f"{w_gate.name}; ids must come from moe_router over the same experts")


def _expert(weight: QWeight, e: int, compute: torch.dtype) -> torch.Tensor:
    """Expert e's [rows, cols] matrix in `compute` dtype (the cached stack's slice on CPU)."""
    if cached(weight) is not None or cacheable(weight):
        return dense(weight)[e].to(compute)
    return dequantize_raw(weight.raw[e], weight.qtype, weight.shape[-1]).to(compute)


def _by_expert(out, x32, weights, ids, w_gate, w_up, w_down, compute) -> None:
    k = ids.shape[1]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # (token, slot) pairs grouped by expert
    counts = torch.bincount(flat, minlength=w_gate.shape[0]).tolist()  # host: free on CPU, one sync on CUDA
    flat_w = weights.reshape(-1)
    start = 0
    for e, count in enumerate(counts):
        if count == 0:
            continue
        pairs = order[start:start + count]
        start += count
        tokens = pairs // k
        xe = x32[tokens].to(compute)  # [n, D]
        hidden = F.silu((xe @ _expert(w_gate, e, compute).t()).float()) * (xe @ _expert(w_up, e, compute).t()).float()
        y = (hidden.to(compute) @ _expert(w_down, e, compute).t()).float()  # [n, D]
        out.index_add_(0, tokens, y * flat_w[pairs].unsqueeze(-1))


def _by_slot(out, x32, weights, ids, w_gate, w_up, w_down, compute) -> None:
    t, k = ids.shape
    _, f, d = w_gate.shape
    group = max(1, SLOT_BUDGET // max(1, t * f * d))  # slots whose gathered experts fit the budget at once
    for s0 in range(0, k, group):
        s1 = min(k, s0 + group)
        chosen = ids[:, s0:s1].reshape(-1)  # [T*g] token-major, on the device
        xs = x32.to(compute).repeat_interleave(s1 - s0, dim=0).unsqueeze(-1)  # [T*g, D, 1]
        gate = torch.bmm(rows(w_gate, chosen).to(compute), xs).float()  # [T*g, F, 1]
        up = torch.bmm(rows(w_up, chosen).to(compute), xs).float()
        hidden = (F.silu(gate) * up).to(compute)
        y = torch.bmm(rows(w_down, chosen).to(compute), hidden).float().reshape(t, s1 - s0, d)  # [T, g, D]
        out.add_((y * weights[:, s0:s1].unsqueeze(-1)).sum(dim=1))
