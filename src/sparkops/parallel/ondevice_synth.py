"""A rank's shard of a random-weight model, drawn directly on its device: no file, no whole model.

k3-2.8t at the ud_iq1_s mix is 553 GiB: too large for any disk here and for one GPU, but 1/8 of
its experts and heads (~70 GiB) fit an H200. Each rank draws exactly its own part.

Determinism without a generator stream: every value is a pure function of (seed, tensor name,
its global position in the whole tensor). A 32-bit integer hash (`hash32`, the "lowbias32"
mixer, written so no intermediate exceeds 2^48: the same bits on any device, CPU or CUDA) of
the position, keyed by (seed, crc32(name)), gives the random bits. So a rank's shard is
bit-identical to the same slice of the whole model drawn by one process (`synth_full`), whatever
the world size - which is what lets a CPU test compare a sharded run with a single-process one,
and what makes a GPU shard checkable against the CPU.

The values follow `synth.py`'s distributions through `gguf.quants.random_blocks`' logic, ported to
torch: block types get uniform random codes and their fp16 scale fields rewritten from the same
16-entry jittered scale tables (quants._scale_table) so the values have the tensor's standard
deviation; F16/BF16 get normal draws through random_blocks' 65536-entry quantile table; F32 too
(the table's resolution is finer than any weight needs). The small float tensors (norms, conv
taps, ssm_a, dt_bias, router, its bias) follow `synth.small_values`. w_uk / w_uv are drawn as
float32 directly (a file would round them through the mix's type first).

The bytes differ from `synth_weights(method="direct")`'s (another generator), never the
distributions; the CPU tests that compare with one process use synth_weights' own slices.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..config import ModelConfig
from ..gguf import names as N
from ..gguf import quants as Qn
from ..gguf.mix import Planned, plan as mix_plan
from ..qweight import QWeight
from ..synth import tensor_std
from ..weights import DenseFFNWeights, KDAWeights, LayerWeights, MLAWeights, ModelWeights, MoEWeights
from .sharding import ShardPlan, Span, column_blocks_of_mix, table_of

Q = GGMLQuantizationType
M32 = 0xFFFFFFFF
#: 32-bit words hashed per chunk (bounds the int64 temporaries: 128 MiB each)
CHUNK_WORDS = 1 << 24


# ----------------------------------------------------------------------------------------------
# The hash
# ----------------------------------------------------------------------------------------------

def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32), without overflowing int64 (c split in 16-bit halves)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & M32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 over int64 values in [0, 2^32): a bijection with good avalanche."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash32_int(x: int) -> int:
    """The same function on one Python int (the keys, and the tests' reference)."""
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def tensor_key(seed: int, name: str) -> tuple[int, int]:
    """Two 32-bit keys for a tensor: from the seed (both halves) and the crc32 of its name."""
    s = hash32_int((seed & M32) ^ hash32_int((seed >> 32) & M32))
    k1 = hash32_int(s ^ zlib.crc32(name.encode()))
    return k1, hash32_int(k1 ^ 0x9E3779B9)


def random_words(key: tuple[int, int], index: torch.Tensor, below_2_32: bool = False) -> torch.Tensor:
    """32 random bits (int64 in [0, 2^32)) for each global position in `index` (int64, < 2^62).

    below_2_32: the caller knows every position is < 2^32 (from the tensor's shape, no look at the
    data); the high half's hash is then the constant hash32(k2), the same bits as the general path.
    """
    k1, k2 = key
    h = hash32((index & M32) ^ k1)
    if below_2_32:
        return hash32(h ^ hash32_int(k2))
    return hash32(h ^ hash32(((index >> 32) & M32) ^ k2))


def uniform01(key: tuple[int, int], index: torch.Tensor, below_2_32: bool = False) -> torch.Tensor:
    """float32 uniform in (0, 1), 24 bits, per position."""
    return ((random_words(key, index, below_2_32) >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))


_TABLES: dict[tuple, torch.Tensor] = {}


def _table(kind: Any, qtype: Q, std: float, device: torch.device) -> torch.Tensor:
    k = (kind, int(qtype), float(std), str(device))
    if k not in _TABLES:
        if kind == "normal":  # random_blocks' 65536 normal quantiles, in the stored type
            t = Qn.quantize(Qn._normal_quantiles() * np.float32(std), qtype)
            if qtype == Q.F32:
                _TABLES[k] = torch.from_numpy(np.ascontiguousarray(t)).to(device)
            else:
                bits = torch.from_numpy(np.ascontiguousarray(t).view(np.int16))
                _TABLES[k] = bits.view(torch.float16 if qtype == Q.F16 else torch.bfloat16).to(device)
        else:  # ("scale", factor): the 16 jittered fp16 scale bit patterns
            _TABLES[k] = torch.from_numpy(Qn._scale_table(std, kind[1]).astype(np.int64)).to(device)
    return _TABLES[k]


def normal(key: tuple[int, int], index: torch.Tensor, std: float = 1.0, qtype: Q = Q.F32,
           below_2_32: bool = False) -> torch.Tensor:
    """N(0, std) per position through the quantile table (16 hashed bits), in `qtype`'s dtype."""
    table = _table("normal", qtype, std, index.device)
    return table[random_words(key, index, below_2_32) >> 16]


# ----------------------------------------------------------------------------------------------
# Quantized blocks
# ----------------------------------------------------------------------------------------------

def block_bytes(key: tuple[int, int], blocks: torch.Tensor, type_size: int, below_2_32: bool = False) -> torch.Tensor:
    """Uniform random bytes uint8 [n, type_size] for the global block ids `blocks` [n].

    below_2_32: every block id times the words per block is < 2^32 (see random_words)."""
    words = (type_size + 3) // 4
    idx = blocks.unsqueeze(1) * words + torch.arange(words, device=blocks.device)  # [n, words]
    w = random_words(key, idx, below_2_32)
    shifts = torch.tensor([0, 8, 16, 24], device=blocks.device)
    b = ((w.unsqueeze(-1) >> shifts) & 255).to(torch.uint8)  # [n, words, 4] little-endian
    return b.reshape(blocks.shape[0], words * 4)[:, :type_size].contiguous()


def _get16(b: torch.Tensor, off: int) -> torch.Tensor:
    return b[:, off].to(torch.int64) | (b[:, off + 1].to(torch.int64) << 8)


def _set16(b: torch.Tensor, off: int, v: torch.Tensor) -> None:
    b[:, off] = (v & 255).to(torch.uint8)
    b[:, off + 1] = (v >> 8).to(torch.uint8)


def fix_scales(b: torch.Tensor, qtype: Q, d0: float) -> None:
    """Rewrite the scale fields of random blocks in place, as quants._FILL does (see there)."""
    dev = b.device
    if qtype in (Q.Q8_0, Q.IQ1_S):
        _set16(b, 0, _table(("scale", 1.0), qtype, d0, dev)[_get16(b, 0) & 15])
    elif qtype == Q.Q4_K:
        j = _get16(b, 0) & 15
        _set16(b, 2, _table(("scale", 7.5), qtype, d0, dev)[j])  # dmin = 7.5 d: centred sub-blocks
        _set16(b, 0, _table(("scale", 1.0), qtype, d0, dev)[j])
        sc = (b[:, 4:12].to(torch.int64) & 31) | 32  # [n, 8] scale = min, in 32..63
        lo, hi = sc[:, 0:4], sc[:, 4:8]
        packed = torch.cat([lo | ((hi >> 4) << 6), lo | ((hi >> 4) << 6), (hi & 15) | ((hi & 15) << 4)], dim=1)
        b[:, 4:16] = packed.to(torch.uint8)
    elif qtype == Q.Q6_K:
        _set16(b, 208, _table(("scale", 1.0), qtype, d0, dev)[_get16(b, 208) & 15])
        s = b[:, 192:208].to(torch.int64)  # int8 sub-block scales: |s| in 64..127, random sign
        mag = (s & 63) | 64
        b[:, 192:208] = torch.where((s & 128) != 0, 256 - mag, mag).to(torch.uint8)
    else:  # pragma: no cover - plan() gives only supported types
        raise AssertionError(qtype)


def block_d0(qtype: Q, std: float) -> float:
    """random_blocks' base scale for a type and a target standard deviation (range-checked there)."""
    d0 = std / math.sqrt(Qn._code_power(qtype) * Qn._JITTER_MS)
    Qn._check_scales(qtype, std, d0)
    return d0


# ----------------------------------------------------------------------------------------------
# One tensor's shard
# ----------------------------------------------------------------------------------------------

def global_index(shape: tuple[int, ...], spans: list[Span], device: torch.device) -> torch.Tensor:
    """int64 [*local shape]: each local element's row-major position in the whole `shape`."""
    idx = torch.zeros((), dtype=torch.int64, device=device)
    stride = 1
    for ax in reversed(range(len(shape))):
        s = spans[ax]
        view = [1] * len(shape)
        view[ax] = s.n
        idx = idx + (torch.arange(s.lo, s.hi, device=device, dtype=torch.int64) * stride).view(view)
        stride *= shape[ax]
    return idx


def _chunks(spans: list[Span], per_row: int, words_per_unit: int):
    """Split the first axis so each piece hashes at most CHUNK_WORDS words."""
    rows = max(1, CHUNK_WORDS // max(1, per_row * words_per_unit))
    s0 = spans[0]
    for lo in range(s0.lo, s0.hi, rows):
        yield [Span(lo, min(s0.hi, lo + rows)), *spans[1:]]


def _spans(shape: tuple[int, ...], cut: tuple[int, Span] | None) -> list[Span]:
    spans = [Span(0, n) for n in shape]
    if cut is not None:
        axis, span = cut
        spans[axis % len(shape)] = span
    return spans


def small_values(config: ModelConfig, spec: N.TensorSpec, key, index: torch.Tensor, small: bool) -> torch.Tensor:
    """synth.small_values' distributions (and w_uk / w_uv's normals), float32, per global position.

    small: every position is < 2^32 (see random_words)."""
    f = spec.rule.field
    if f in ("attn_norm", "ffn_norm", "output_norm", "attn.o_norm", "attn.kv_norm"):
        return 1.0 + normal(key, index, 0.1, below_2_32=small)
    if f.startswith("attn.conv_"):
        return normal(key, index, 0.5, below_2_32=small)
    if f == "attn.a":  # -exp(A_log), A ~ U(1, 16)
        return -(1.0 + 15.0 * uniform01(key, index, small))
    if f == "attn.dt_bias":  # inverse softplus of dt ~ logU(1e-3, 1e-1), computed in float64
        u = uniform01(key, index, small).double()
        dt = torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3)))
        return (dt + torch.log(-torch.expm1(-dt))).float()
    if f == "ffn.router":
        return normal(key, index, 1.0 / math.sqrt(config.hidden_size), below_2_32=small)
    if f == "ffn.bias":
        return normal(key, index, 0.05, below_2_32=small)
    if f in ("attn.w_uk", "attn.w_uv"):
        return normal(key, index, tensor_std(config, spec), below_2_32=small)
    raise AssertionError(f"no distribution for {spec.name}")  # pragma: no cover


def synth_tensor_shard(config: ModelConfig, p: Planned, cut: tuple[int, Span] | None, seed: int,
                       device: torch.device) -> QWeight | torch.Tensor | None:
    """The part `cut` of one planned tensor, drawn on `device` (None for an empty part)."""
    key = tensor_key(seed, p.name)
    spec = p.spec
    if spec.rule.small:  # float32 in our layout
        shape = spec.our_shape(config)
        spans = _spans(shape, cut)
        if any(s.n == 0 for s in spans):
            return None
        small = math.prod(shape) <= 1 << 32
        return small_values(config, spec, key, global_index(shape, spans, device), small).reshape([s.n for s in spans])
    shape = p.shape  # == our shape for every matrix (names.py: only small tensors change layout)
    spans = _spans(shape, cut)
    if any(s.n == 0 for s in spans):
        return None
    local = tuple(s.n for s in spans)
    std = tensor_std(config, spec)
    qtype = Q(p.qtype)
    if qtype in (Q.F32, Q.F16, Q.BF16):
        out = torch.empty(local, dtype=_table("normal", qtype, std, device).dtype, device=device)
        per_row = math.prod(local[1:])
        for part in _chunks(spans, per_row, 1):
            rows = Span(part[0].lo - spans[0].lo, part[0].hi - spans[0].lo)
            out[rows.lo:rows.hi] = normal(key, global_index(shape, part, device), std, qtype,
                                          below_2_32=math.prod(shape) <= 1 << 32)
        return QWeight(out, qtype, local, f"{p.name}{_label(cut)}")
    block, type_size = GGML_QUANT_SIZES[qtype]
    grid = (*shape[:-1], shape[-1] // block)  # block units
    bspans = [*spans[:-1], Span(spans[-1].lo // block, spans[-1].hi // block)]
    d0 = block_d0(qtype, std)
    out = torch.empty((*local[:-1], bspans[-1].n, type_size), dtype=torch.uint8, device=device)
    per_row = math.prod(s.n for s in bspans[1:])
    for part in _chunks(bspans, per_row, (type_size + 3) // 4):
        ids = global_index(grid, part, device).reshape(-1)
        b = block_bytes(key, ids, type_size, below_2_32=math.prod(grid) * ((type_size + 3) // 4) <= 1 << 32)
        fix_scales(b, qtype, d0)
        rows = Span(part[0].lo - bspans[0].lo, part[0].hi - bspans[0].lo)
        out[rows.lo:rows.hi] = b.reshape(rows.n, *[s.n for s in part[1:]], type_size)
    raw = out.reshape(*local[:-1], bspans[-1].n * type_size)
    return QWeight(raw, qtype, local, f"{p.name}{_label(cut)}")


def _label(cut: tuple[int, Span] | None) -> str:
    return "" if cut is None else f"[{cut[0]}:{cut[1].lo}:{cut[1].hi}]"


# ----------------------------------------------------------------------------------------------
# A whole shard
# ----------------------------------------------------------------------------------------------

def synth_shard(plan: ShardPlan, mix: str, seed: int, device: torch.device | str) -> ModelWeights:
    """Rank `plan.rank`'s part of the random `plan.config` model under `mix`, drawn on `device`."""
    device = torch.device(device)
    config = plan.config
    glob: dict[str, Any] = {}
    per_layer: list[dict[str, Any]] = [{} for _ in range(config.num_layers)]
    with torch.inference_mode(False), torch.no_grad():
        for p in mix_plan(config, mix):
            table, short = table_of(config, p.spec.rule.field, p.spec.layer)
            value = synth_tensor_shard(config, p, plan.cut(table, short), seed, device)
            if p.spec.layer is None:
                glob[p.spec.rule.field] = value
            else:
                per_layer[p.spec.layer][p.spec.rule.field] = value
    layers = [_layer(config, i, got) for i, got in enumerate(per_layer)]
    meta = {"source": "ondevice synth (no file)", "quant_mix": mix, "synth_seed": seed, "synth_preset": config.name,
            "shard": plan.as_dict()}
    return ModelWeights(plan.local_config(), glob["embed"], layers, glob["output_norm"], glob["output"], meta)


def synth_full(config: ModelConfig, mix: str, seed: int, device: torch.device | str) -> ModelWeights:
    """The whole model as one process would hold it: the world-of-one shard (the tests' reference)."""
    return synth_shard(ShardPlan.build(config, 1, 0, column_blocks_of_mix(config, mix)), mix, seed, device)


def _layer(config: ModelConfig, i: int, got: dict[str, Any]) -> LayerWeights:
    kind = config.layer_kind(i)
    attn = {k.split(".", 1)[1]: v for k, v in got.items() if k.startswith("attn.")}
    ffn = {k.split(".", 1)[1]: v for k, v in got.items() if k.startswith("ffn.")}
    if config.is_moe(i):
        for opt in ("s_gate", "s_up", "s_down"):
            ffn.setdefault(opt, None)
        ffn_w: DenseFFNWeights | MoEWeights = MoEWeights(**ffn)
    else:
        ffn_w = DenseFFNWeights(**ffn)
    attn_w = KDAWeights(**attn) if kind == "kda" else MLAWeights(**attn)
    return LayerWeights(kind, got["attn_norm"], got["ffn_norm"], attn_w, ffn_w)
