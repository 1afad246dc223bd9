"""Projection fusion: the linears that read the same input run as one, over their weights' rows stacked.

Why. A decode step of the 48B launches ~205 linear kernels, most of them small GEMVs: a KDA layer's q, k, v,
f_a, beta and g_a all read the same normed input, as do an MLA layer's q and kv_a and a dense FFN's gate and
up. A GEMV of a few MB cannot reach the memory bandwidth in one launch (bench/GPU-PROBES.md), and each launch
costs ~1 us even inside a CUDA graph. Stacking those weights' rows makes one larger GEMV per group.

What. With `fuse_projections = true` in the registry's [engine] table, the engine stacks, per layer, the
members of each shared-input set that have the same GGUF type (rows of GGUF blocks concatenate as bytes), runs
one `linear` per group and hands each member its column slice of the output. The op is unchanged - x @ W^T
for a W that happens to hold several matrices - so every implementation serves, and the model gate judges the
fused engine like any candidate. Members of another type keep their own linear. Sharded runs do not fuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..qweight import QWeight
from ..weights import DenseFFNWeights, KDAWeights, MLAWeights, ModelWeights

#: the weights of each block that read the same input, in the order the graph uses them
SHARED_INPUT: dict[type, tuple[str, ...]] = {
    KDAWeights: ("q", "k", "v", "f_a", "beta", "g_a"),
    MLAWeights: ("q", "kv_a"),
    DenseFFNWeights: ("gate", "up"),
}


@dataclass(frozen=True)
class Group:
    """Members of one shared-input set with one GGUF type, their rows stacked into `weight`."""

    weight: QWeight  # [sum(rows), D]
    names: tuple[str, ...]
    rows: tuple[int, ...]


#: (layer index, "attn" | "ffn") -> that block's groups
Groups = dict[tuple[int, str], tuple[Group, ...]]


def _kind(w: QWeight) -> tuple[Any, ...]:
    return (w.qtype, w.raw.dtype, w.raw.device, w.shape[1:])


def stack(members: list[tuple[str, QWeight]]) -> Group:
    """One QWeight over the members' rows (same type, same row length), in the members' order."""
    first = members[0][1]
    raw = torch.cat([w.raw for _, w in members], dim=0)
    rows = tuple(int(w.shape[0]) for _, w in members)
    names = tuple(n for n, _ in members)
    weight = QWeight(raw, first.qtype, (sum(rows), *first.shape[1:]), "+".join(w.name for _, w in members))
    return Group(weight, names, rows)


def block_groups(w: Any) -> tuple[Group, ...]:
    """The groups of one block: members of its shared-input set with one type, two or more of them."""
    names = SHARED_INPUT.get(type(w), ())
    by_kind: dict[tuple[Any, ...], list[tuple[str, QWeight]]] = {}
    for n in names:
        q = getattr(w, n)
        if isinstance(q, QWeight) and len(q.shape) == 2:
            by_kind.setdefault(_kind(q), []).append((n, q))
    return tuple(stack(m) for m in by_kind.values() if len(m) >= 2)


def fuse(model: ModelWeights) -> Groups:
    """Every block's groups (cached on the weights: engines built on the same weights share them)."""
    cache = model.__dict__.setdefault("_projection_groups", None)
    if cache is not None:
        return cache
    out: Groups = {}
    for i, layer in enumerate(model.layers):
        for part in ("attn", "ffn"):
            groups = block_groups(getattr(layer, part))
            if groups:
                out[(i, part)] = groups
    model.__dict__["_projection_groups"] = out
    return out


def project(ops: Any, x: torch.Tensor, w: Any, names: tuple[str, ...],
            groups: tuple[Group, ...] = ()) -> dict[str, torch.Tensor]:
    """{name: x @ W_name^T} for the named weights of block `w`: one linear per group, one per other name.

    A member's slice of a group's output [T, sum(rows)] is contiguous for one token (decode) and copied to be
    contiguous for several (prefill), so an op never sees a strided input it did not before; a slice that
    would start off a 16-byte boundary is copied too (kernels may load vectors)."""
    out: dict[str, torch.Tensor] = {}
    for g in groups:
        y = ops.linear(x, g.weight)  # [T, sum(rows)]
        start = 0
        for n, r in zip(g.names, g.rows):
            seg = y[:, start:start + r]
            out[n] = seg.clone() if seg.data_ptr() % 16 else seg.contiguous()
            start += r
    for n in names:
        if n not in out:
            out[n] = ops.linear(x, getattr(w, n))
    return out


def describe(groups: Groups) -> list[str]:
    """What the fusion did, per block kind, for `sparkops plan` and the logs."""
    seen: dict[str, int] = {}
    for (_, part), gs in groups.items():
        for g in gs:
            key = f"{part}: {'+'.join(g.names)} ({g.weight.qtype.name})"
            seen[key] = seen.get(key, 0) + 1
    return [f"{k} x{v}" for k, v in sorted(seen.items())]
