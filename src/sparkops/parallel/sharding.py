"""How each weight of a Kimi-Linear model is split over the ranks of a tensor/expert-parallel world.

Every rank holds the whole residual stream [T, D] (activations are replicated); what is split is
the work inside each block, so that every block ends in a partial sum over ranks that one
all_reduce completes (graph.py places and justifies each reduce point).

  KDA   heads split: rank r owns heads [h0, h1). Column-parallel (rows of [OUT, IN] sliced): q, k, v,
        f_b, g_b, beta; the per-channel / per-head small tensors follow their heads: conv taps
        (rows of [P, W]), dt_bias [P], a [H]. Replicated: the low-rank down projections f_a, g_a
        (rank Dk: every rank needs the whole Dk-vector to expand its own heads' channels) and o_norm
        (one weight shared by all heads). Row-parallel: o_proj (its columns for this rank's heads).
        State: conv windows and the recurrent state of this rank's heads only.
  MLA   heads split: q's rows for this rank's heads, w_uk / w_uv [N, ., Lkv] sliced on N, o_proj's
        columns (row-parallel). Replicated: kv_a and kv_norm - the latent c and k_pe are shared by all
        heads, so every rank computes them and keeps the whole latent cache.
  dense FFN   the intermediate F split: gate/up rows (column-parallel), down columns (row-parallel).
  MoE   routed experts partitioned by id: rank r owns experts [e0, e1) (expert parallel); the router
        and its bias are replicated (every rank routes every token the same way); the shared expert
        is split like the dense FFN.
  global   embedding, final norm, lm_head, every block norm: replicated.

A row-parallel weight is cut along its input columns, which for a block-quantized type must fall
on block boundaries (256 values for the K-quants and IQ1_S, 32 for Q8_0): head splits must give
each rank a whole number of blocks (checked, with the fix in the message); the FFN intermediate is
cut in whole blocks, as evenly as possible (some ranks may get none: k3-2.8t's 1536-wide shared
expert is six Q6_K blocks over eight ranks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..config import ModelConfig
from ..errors import BadInput
from ..qweight import QWeight, block_geometry
from ..weights import DenseFFNWeights, LayerWeights, ModelWeights


@dataclass(frozen=True)
class Span:
    """A half-open range [lo, hi) of some unit (heads, experts, intermediate columns)."""

    lo: int
    hi: int

    @property
    def n(self) -> int:
        return self.hi - self.lo

    def times(self, k: int) -> "Span":
        return Span(self.lo * k, self.hi * k)


def even_spans(n: int, world: int) -> list[Span]:
    """n units over `world` ranks, contiguous, sizes differing by at most one (larger ones first)."""
    base, extra = divmod(n, world)
    out, lo = [], 0
    for r in range(world):
        size = base + (1 if r < extra else 0)
        out.append(Span(lo, lo + size))
        lo += size
    return out


#: where each weight is cut: field -> (axis of the weight's logical shape, unit) or None = replicated.
#: Units: kda_head, kda_chan (= head * Dk), mla_head, mla_q (= head * (Dn+R)), mla_v (= head * Dv),
#: dense / shared (intermediate columns), expert.
KDA_SPLITS: dict[str, tuple[int, str] | None] = {
    "q": (-2, "kda_chan"), "k": (-2, "kda_chan"), "v": (-2, "kda_chan"),
    "conv_q": (0, "kda_chan"), "conv_k": (0, "kda_chan"), "conv_v": (0, "kda_chan"),
    "f_a": None, "f_b": (-2, "kda_chan"), "beta": (-2, "kda_head"), "a": (0, "kda_head"),
    "dt_bias": (0, "kda_chan"), "g_a": None, "g_b": (-2, "kda_chan"), "o_norm": None,
    "o_proj": (-1, "kda_chan"),
}
MLA_SPLITS: dict[str, tuple[int, str] | None] = {
    "q": (-2, "mla_q"), "kv_a": None, "kv_norm": None, "w_uk": (0, "mla_head"), "w_uv": (0, "mla_head"),
    "o_proj": (-1, "mla_v"),
}
DENSE_SPLITS: dict[str, tuple[int, str] | None] = {"gate": (-2, "dense"), "up": (-2, "dense"), "down": (-1, "dense")}
MOE_SPLITS: dict[str, tuple[int, str] | None] = {
    "router": None, "bias": None,
    "gate_exps": (0, "expert"), "up_exps": (0, "expert"), "down_exps": (0, "expert"),
    "s_gate": (-2, "shared"), "s_up": (-2, "shared"), "s_down": (-1, "shared"),
}
GLOBAL_SPLITS: dict[str, tuple[int, str] | None] = {"embed": None, "output": None, "output_norm": None,
                                                    "attn_norm": None, "ffn_norm": None}
SPLITS = {"kda": KDA_SPLITS, "mla": MLA_SPLITS, "dense": DENSE_SPLITS, "moe": MOE_SPLITS, "global": GLOBAL_SPLITS}

#: the row-parallel weights whose input columns are cut: (table, field) -> ColumnBlocks key
ROW_PARALLEL = {("kda", "o_proj"): "kda_o_proj", ("mla", "o_proj"): "mla_o_proj",
                ("dense", "down"): "dense_down", ("moe", "s_down"): "shared_down"}


@dataclass(frozen=True)
class ColumnBlocks:
    """Values per quantization block of each row-parallel weight (the largest over the layers)."""

    kda_o_proj: int = 1
    mla_o_proj: int = 1
    dense_down: int = 1
    shared_down: int = 1


def column_blocks_of_weights(model: ModelWeights) -> ColumnBlocks:
    found: dict[str, int] = {}

    def see(key: str, w: Any) -> None:
        if isinstance(w, QWeight):
            found[key] = max(found.get(key, 1), block_geometry(w.qtype)[0])

    for layer in model.layers:
        see("kda_o_proj" if layer.kind == "kda" else "mla_o_proj", layer.attn.o_proj)
        if isinstance(layer.ffn, DenseFFNWeights):
            see("dense_down", layer.ffn.down)
        else:
            see("shared_down", layer.ffn.s_down)
    return ColumnBlocks(**found)


def column_blocks_of_mix(config: ModelConfig, mix: str) -> ColumnBlocks:
    from ..gguf.mix import plan

    found: dict[str, int] = {}
    for p in plan(config, mix):
        f, layer = p.spec.rule.field, p.spec.layer
        if layer is None:
            continue
        key = {"attn.o_proj": "kda_o_proj" if config.layer_kind(layer) == "kda" else "mla_o_proj",
               "ffn.down": "dense_down", "ffn.s_down": "shared_down"}.get(f)
        if key:
            found[key] = max(found.get(key, 1), block_geometry(p.qtype)[0])
    return ColumnBlocks(**found)


@dataclass(frozen=True)
class ShardPlan:
    """What rank `rank` of a `world`-rank tensor/expert-parallel group owns (see the module docstring)."""

    config: ModelConfig  # the whole model's config
    world: int
    rank: int
    kda_heads: Span
    mla_heads: Span
    dense: Span  # columns of the dense FFN intermediate
    shared: Span  # columns of the shared expert's intermediate
    experts: Span
    blocks: ColumnBlocks

    @classmethod
    def build(cls, config: ModelConfig, world: int, rank: int, blocks: ColumnBlocks | None = None) -> "ShardPlan":
        blocks = blocks or ColumnBlocks()
        if world < 1:
            raise BadInput(f"a world of {world} ranks: give at least 1")
        if not 0 <= rank < world:
            raise BadInput(f"rank {rank} is outside a world of {world} ranks (0..{world - 1})")
        for what, n in (("KDA heads", config.kda_heads), ("MLA heads", config.mla_heads),
                        ("routed experts", config.n_experts)):
            if n < world:
                raise BadInput(f"{config.name} has {n} {what}, fewer than the {world} ranks asked for: every rank "
                               f"needs at least one; use at most {n} ranks")
        kda = even_spans(config.kda_heads, world)[rank]
        mla = even_spans(config.mla_heads, world)[rank]
        _check_head_columns(config, world, "KDA o_proj", config.kda_heads, config.kda_head_dim, blocks.kda_o_proj)
        _check_head_columns(config, world, "MLA o_proj", config.mla_heads, config.v_head_dim, blocks.mla_o_proj)
        return cls(config, world, rank, kda, mla,
                   _block_span(config.intermediate_size, blocks.dense_down, world, rank, "dense FFN"),
                   _block_span(config.shared_intermediate, blocks.shared_down, world, rank, "shared expert"),
                   even_spans(config.n_experts, world)[rank], blocks)

    # -- what the rank computes with -------------------------------------------------------------
    def local_config(self) -> ModelConfig:
        """The config the rank's blocks and state are built from: its own head counts, all else global.

        engine.graph's kda_block / mla_block and SequenceState read only kda_heads / mla_heads from
        it (and the per-head sizes), so they run unchanged on a shard. Routing reads n_experts etc.,
        which stay global: the router is replicated.
        """
        if self.world == 1:
            return self.config
        return dataclasses.replace(self.config, kda_heads=self.kda_heads.n, mla_heads=self.mla_heads.n)

    def unit(self, name: str) -> Span:
        c = self.config
        return {
            "kda_head": self.kda_heads, "kda_chan": self.kda_heads.times(c.kda_head_dim),
            "mla_head": self.mla_heads, "mla_q": self.mla_heads.times(c.qk_head_dim),
            "mla_v": self.mla_heads.times(c.v_head_dim),
            "dense": self.dense, "shared": self.shared, "expert": self.experts,
        }[name]

    def cut(self, table: str, field: str) -> tuple[int, Span] | None:
        """(axis, span) of the weight `field` of `table` ('kda', 'mla', 'dense', 'moe', 'global'), or None."""
        try:
            rule = SPLITS[table][field]
        except KeyError:
            raise BadInput(f"no sharding rule for {table}.{field}; add it to sparkops/parallel/sharding.py") from None
        if rule is None or self.world == 1:
            return None
        axis, unit = rule
        return axis, self.unit(unit)

    def as_dict(self) -> dict[str, Any]:
        return {"world": self.world, "rank": self.rank,
                **{k: [getattr(self, k).lo, getattr(self, k).hi]
                   for k in ("kda_heads", "mla_heads", "dense", "shared", "experts")}}


def _check_head_columns(config: ModelConfig, world: int, what: str, heads: int, head_dim: int, block: int) -> None:
    for s in even_spans(heads, world):
        if (s.lo * head_dim) % block or (s.hi * head_dim) % block:
            raise BadInput(f"{config.name}: {what} cannot be split over {world} ranks: rank columns "
                           f"[{s.lo * head_dim}, {s.hi * head_dim}) do not fall on its {block}-value quantization "
                           f"blocks; use a world size that gives every rank a multiple of {block} columns, or a mix "
                           f"with a smaller block for it (f32, f16, q8_0)")


def _block_span(width: int, block: int, world: int, rank: int, what: str) -> Span:
    if width % block:
        raise BadInput(f"{what}: width {width} is not a whole number of {block}-value blocks")
    return even_spans(width // block, world)[rank].times(block)


# ----------------------------------------------------------------------------------------------
# Slicing
# ----------------------------------------------------------------------------------------------

def slice_tensor(x: torch.Tensor, axis: int, span: Span) -> torch.Tensor:
    """A contiguous copy of x[..., lo:hi, ...] along `axis` (a copy, so the whole tensor can be freed)."""
    return x.narrow(axis, span.lo, span.n).clone()


def slice_qweight(w: QWeight, axis: int, span: Span) -> QWeight | None:
    """The part of a stored weight along a logical axis; None for an empty span.

    Leading and row axes cut the stored data directly; the column axis (-1) cuts whole blocks.
    """
    if span.n == 0:
        return None
    ax = axis % len(w.shape)
    shape = list(w.shape)
    shape[ax] = span.n
    if ax < len(w.shape) - 1 or w.is_float:
        raw = slice_tensor(w.raw, ax, span)
    else:
        block, nbytes = block_geometry(w.qtype)
        if span.lo % block or span.hi % block:
            raise BadInput(f"{w.name}: columns [{span.lo}, {span.hi}) do not fall on its {block}-value "
                           f"{w.qtype.name} blocks; this weight cannot be split there")
        raw = slice_tensor(w.raw, -1, Span(span.lo // block * nbytes, span.hi // block * nbytes))
    return QWeight(raw, w.qtype, tuple(shape), f"{w.name}[{axis}:{span.lo}:{span.hi}]")


def shard_value(value: Any, cut: tuple[int, Span] | None) -> Any:
    if value is None or cut is None:
        return value
    axis, span = cut
    if isinstance(value, QWeight):
        return slice_qweight(value, axis, span)
    return slice_tensor(value, axis, span) if span.n else None


def shard_model(model: ModelWeights, plan: ShardPlan) -> ModelWeights:
    """This rank's part of a whole model (see the module docstring); the config becomes the local one."""
    c = model.config
    if (c.hidden_size, c.num_layers, c.kda_heads, c.mla_heads, c.n_experts) != \
            (plan.config.hidden_size, plan.config.num_layers, plan.config.kda_heads, plan.config.mla_heads,
             plan.config.n_experts):
        raise BadInput(f"the weights are for {c.name}, the shard plan for {plan.config.name}: build the plan from "
                       f"the weights' own config")
    layers = []
    for layer in model.layers:
        attn_table = layer.kind
        attn = _shard_dataclass(layer.attn, plan, attn_table)
        ffn_table = "dense" if isinstance(layer.ffn, DenseFFNWeights) else "moe"
        ffn = _shard_dataclass(layer.ffn, plan, ffn_table)
        layers.append(LayerWeights(layer.kind, layer.attn_norm, layer.ffn_norm, attn, ffn))
    meta = {**model.metadata, "shard": plan.as_dict()}
    return ModelWeights(plan.local_config(), model.embed, layers, model.output_norm, model.output, meta)


def _shard_dataclass(obj: Any, plan: ShardPlan, table: str) -> Any:
    values = {f.name: shard_value(getattr(obj, f.name), plan.cut(table, f.name)) for f in dataclasses.fields(obj)}
    return type(obj)(**values)


# ----------------------------------------------------------------------------------------------
# Bytes per rank (no weights needed)
# ----------------------------------------------------------------------------------------------

def table_of(config: ModelConfig, field: str, layer: int | None) -> tuple[str, str]:
    """('kda' | 'mla' | 'dense' | 'moe' | 'global', short field) for a tensor rule's field path."""
    if layer is None or "." not in field:
        return "global", field
    head, short = field.split(".", 1)
    if head == "attn":
        return config.layer_kind(layer), short
    return ("moe" if config.is_moe(layer) else "dense"), short


def rank_bytes(config: ModelConfig, mix: str, world: int) -> list[dict[str, float]]:
    """Per rank: weight bytes held, split into 'sharded' and 'replicated' (from the mix's types)."""
    from ..gguf.mix import nbytes, plan

    blocks = column_blocks_of_mix(config, mix)
    plans = [ShardPlan.build(config, world, r, blocks) for r in range(world)]
    out = [{"sharded": 0.0, "replicated": 0.0} for _ in range(world)]
    for p in plan(config, mix):
        table, short = table_of(config, p.spec.rule.field, p.spec.layer)
        ours = p.spec.our_shape(config) if p.spec.rule.small else p.shape
        full = nbytes(p.qtype, p.shape) if not p.spec.rule.small else 4 * _prod(ours)
        for r, sp in enumerate(plans):
            cut = sp.cut(table, short)
            if cut is None:
                out[r]["replicated"] += full
            else:
                axis, span = cut
                out[r]["sharded"] += full * span.n / ours[axis]
    for o in out:
        o["total"] = o["sharded"] + o["replicated"]
    return out


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n
