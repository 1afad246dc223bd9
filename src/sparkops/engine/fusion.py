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

The KDA short convs. When q, k and v are consecutive members of one group, their outputs are adjacent columns
[q | k | v] of the group's output, and each then went through its own `short_conv` (three launches per KDA
layer, 60 a decode step on the 48B, each a ~2 us kernel). The conv is depthwise - every channel on its own -
so one `short_conv` over the [T, 3P] columns, with the three weights' taps concatenated along channels (done
once, here, cached with the groups: `Group.conv`) and one [W-1, 3P] window (SequenceState.conv_windows, of
which the layer's conv_q/conv_k/conv_v are column views), gives bit for bit what the three calls give.
q, k and v are then the column slices of its output. A layer whose q, k, v are not so grouped keeps the three.
This runs when the registry's [engine] table also sets fuse_short_conv = true (its own option, so that the
ladder times it as its own change against the fused engine with three convs).

The KDA low-rank gates. f = f_b(f_a(x)) and gate = g_b(g_a(x)) are two rank-Dk factorizations: f_a and g_a are
members of the shared-input group (adjacent columns [f_a | g_a] of its output, SHARED_INPUT's order), and f_b and g_b
([P, Dk] each) then ran as two tiny GEMVs per layer (40 launches a decode step on the 48B). With fuse_low_rank = true
they run as one linear of the block-diagonal weight [[f_b, 0], [0, g_b]] ([2P, 2Dk]) on the [f_a | g_a] columns,
whose output is [f | gate]. The zeros are read (2 MB more a layer at F16), and the products' sums are taken in other
groupings than the two GEMVs', so this is not bit-identical: the model gate judges it. Float weights only (F32, F16,
BF16, as the quantized mixes keep these gates): a layer of another type keeps the two linears.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..qweight import QWeight
from ..weights import DenseFFNWeights, KDAWeights, MLAWeights, ModelWeights, MoEWeights

#: the weights of each block that read the same input, in the order the graph uses them
SHARED_INPUT: dict[type, tuple[str, ...]] = {
    KDAWeights: ("q", "k", "v", "f_a", "g_a", "beta"),  # f_a, g_a adjacent: the low-rank pair's input
    MLAWeights: ("q", "kv_a"),
    DenseFFNWeights: ("gate", "up"),
}


@dataclass(frozen=True)
class Group:
    """Members of one shared-input set with one GGUF type, their rows stacked into `weight`."""

    weight: QWeight  # [sum(rows), D]
    names: tuple[str, ...]
    rows: tuple[int, ...]
    #: a KDA group holding q, k, v consecutively: conv_q | conv_k | conv_v taps along channels [3P, W], else None
    conv: torch.Tensor | None = None

    def span(self, names: tuple[str, ...]) -> tuple[int, int] | None:
        """(start, width) of the output columns of `names` if they are consecutive members here, else None."""
        if not names or names[0] not in self.names:
            return None
        i = self.names.index(names[0])
        if self.names[i:i + len(names)] != names:
            return None
        return sum(self.rows[:i]), sum(self.rows[i:i + len(names)])


#: the members whose outputs each go through a short_conv, in channel order, and the weights of their taps
CONV_INPUTS: tuple[str, ...] = ("q", "k", "v")
CONV_TAPS: tuple[str, ...] = ("conv_q", "conv_k", "conv_v")
#: project()'s key for the joint [T, 3P] output of q, k, v
QKV = "+".join(CONV_INPUTS)
#: the KDA low-rank pair's inputs, and project()'s key for their joint [T, 2Dk] output
LOW_RANK_INPUTS: tuple[str, ...] = ("f_a", "g_a")
LOW_RANK = "+".join(LOW_RANK_INPUTS)
#: the float types whose block-diagonal weight is built by writing zeros (quantized blocks are not)
_FLOAT_TYPES = {"F32", "F16", "BF16"}

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
    groups = tuple(stack(m) for m in by_kind.values() if len(m) >= 2)
    if isinstance(w, KDAWeights):
        groups = tuple(_with_conv(g, w) for g in groups)
    return groups


def _with_conv(g: Group, w: KDAWeights) -> Group:
    """`g` with the concatenated conv taps when it holds q, k, v consecutively (module docstring)."""
    if g.span(CONV_INPUTS) is None:
        return g
    return dataclasses.replace(g, conv=torch.cat([getattr(w, n) for n in CONV_TAPS], dim=0))  # [3P, W]


def low_rank_weights(model: ModelWeights, groups: Groups) -> dict[int, QWeight]:
    """{KDA layer: the block-diagonal [[f_b, 0], [0, g_b]] weight [2P, 2Dk]} for the layers whose fused group holds
    f_a, g_a adjacently and whose f_b, g_b are one float type of one shape (module docstring); cached on the
    weights."""
    cache = model.__dict__.get("_low_rank_weights")
    if cache is not None:
        return cache
    out: dict[int, QWeight] = {}
    for (i, part), gs in groups.items():
        w = model.layers[i].attn if part == "attn" else None
        if not isinstance(w, KDAWeights) or not any(g.span(LOW_RANK_INPUTS) for g in gs):
            continue
        fb, gb = w.f_b, w.g_b
        if fb.qtype.name not in _FLOAT_TYPES or _kind(fb) != _kind(gb) or fb.shape != gb.shape:
            continue
        p, dk = fb.shape
        raw = torch.zeros((2 * p, 2 * dk), dtype=fb.raw.dtype, device=fb.raw.device)  # [2P, 2Dk]
        raw[:p, :dk] = fb.raw
        raw[p:, dk:] = gb.raw
        out[i] = QWeight(raw, fb.qtype, (2 * p, 2 * dk), f"{fb.name}+{gb.name} (block-diagonal)")
    model.__dict__["_low_rank_weights"] = out
    return out


#: a MoE layer's shared expert as the dense SwiGLU FFN it is, with that FFN's fused groups ([engine]
#: shared_expert_side): what graph.shared_apart runs on the side stream
SharedFFN = tuple[DenseFFNWeights, tuple[Group, ...]]


def shared_ffns(model: ModelWeights, fused: bool) -> dict[int, SharedFFN]:
    """{MoE layer with a shared expert: (its s_gate, s_up, s_down as a DenseFFNWeights, the groups of that FFN - its
    gate and up stacked into one linear where `fused`, as fuse_projections stacks a dense layer's)}; cached on the
    weights, one dict for each `fused`."""
    key = "_shared_ffns_fused" if fused else "_shared_ffns"
    cache = model.__dict__.get(key)
    if cache is not None:
        return cache
    out: dict[int, SharedFFN] = {}
    for i, layer in enumerate(model.layers):
        w = layer.ffn
        if isinstance(w, MoEWeights) and w.s_gate is not None and w.s_up is not None and w.s_down is not None:
            dense = DenseFFNWeights(gate=w.s_gate, up=w.s_up, down=w.s_down)
            out[i] = (dense, block_groups(dense) if fused else ())
    model.__dict__[key] = out
    return out


def merged_conv_layers(groups: Groups | None) -> set[int]:
    """The layers whose KDA q, k, v run one short_conv (their conv windows are one buffer in the state)."""
    return {i for (i, part), gs in (groups or {}).items() if any(g.conv is not None for g in gs)}


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


def columns(y: torch.Tensor, start: int, width: int) -> torch.Tensor:
    """y[:, start:start + width] as an op may take it: contiguous (a view for one token, a copy for several, so
    an op never sees a strided input it did not before) and on a 16-byte boundary (kernels may load vectors)."""
    seg = y[:, start:start + width]
    return seg.clone() if seg.data_ptr() % 16 else seg.contiguous()


def project(ops: Any, x: torch.Tensor, w: Any, names: tuple[str, ...],
            groups: tuple[Group, ...] = (), joints: tuple[tuple[str, ...], ...] = ()) -> dict[str, torch.Tensor]:
    """{name: x @ W_name^T} for the named weights of block `w`: one linear per group, one per other name.

    A member's slice of a group's output [T, sum(rows)] is taken by `columns`. Each of `joints`: names that a group
    holds consecutively come back as one slice, under the key "+".join(joint), instead of one per name."""
    out: dict[str, torch.Tensor] = {}
    done: set[str] = set()
    for g in groups:
        y = ops.linear(x, g.weight)  # [T, sum(rows)]
        joined: set[str] = set()
        for j in joints:
            span = g.span(j)
            if span is not None:
                out["+".join(j)] = columns(y, *span)
                joined.update(j)
        start = 0
        for n, r in zip(g.names, g.rows):
            if n not in joined:
                out[n] = columns(y, start, r)
            done.add(n)
            start += r
    for n in names:
        if n not in done:
            out[n] = ops.linear(x, getattr(w, n))
    return out


def describe(groups: Groups, merged_conv: bool = False) -> list[str]:
    """What the fusion did, per block kind, for `sparkops plan` and the logs."""
    seen: dict[str, int] = {}
    for (_, part), gs in groups.items():
        for g in gs:
            keys = [f"{part}: {'+'.join(g.names)} ({g.weight.qtype.name})"]
            if merged_conv and g.conv is not None:
                keys.append(f"{part}: short_conv {QKV} as one over {g.conv.shape[0]} channels")
            for key in keys:
                seen[key] = seen.get(key, 0) + 1
    return [f"{k} x{v}" for k, v in sorted(seen.items())]
