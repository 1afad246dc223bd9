"""Read a `kimi-linear` GGUF into `ModelWeights`, memory-mapped, with clear errors for bad files.

    weights = load_gguf("k3-nano.gguf")

Large matrices become `QWeight`s whose `raw` is a torch view of the file's memory map (no copy: a
28 GB file costs no RAM until its pages are touched). The small tensors (norms, conv taps, ssm_a,
dt_bias, the router and its bias, o_norm, kv_norm, w_uk, w_uv) are dequantized once to float32.

Every way a file can be wrong is a `BadInput` naming the file and the thing: not a GGUF (magic),
a header cut short, tensor data cut short (with the sizes), another architecture, a missing
metadata key, a missing tensor, a tensor of the wrong shape (expected vs got), an unsupported
quant type (naming the tensor).

The weight digest (metadata["weight_digest"], scheme `DIGEST_SCHEME`) is a sha256 over the file size,
the whole header (metadata + tensor infos: names, types, shapes, offsets) and, for every tensor, its
first and last 64 KiB (all of it when smaller). Hashing all 28 GB of the 48B file would take minutes;
this takes well under a second, and any rewrite of the metadata, of a tensor's type or shape, or of
the start or end of any tensor's data changes it. It is a pin, not a proof of every byte.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType

from ..config import ModelConfig
from ..errors import BadInput
from ..qweight import QWeight, check_supported
from ..tokenizer import TokenizerData
from ..weights import DenseFFNWeights, KDAWeights, LayerWeights, MLAWeights, ModelWeights, MoEWeights
from . import names as N
from .metadata import build_config, config_fields_from_kv
from .quants import dequantize

DIGEST_SCHEME = "sparkops-gguf-sample-sha256-v1: size + header + first/last 64 KiB of every tensor"
_SAMPLE = 64 * 1024


# ----------------------------------------------------------------------------------------------
# Opening the file
# ----------------------------------------------------------------------------------------------

class FastReader(GGUFReader):
    """GGUFReader with a fast path for metadata arrays.

    gguf-py makes two numpy memmap views per element of an array field; for the 48B file's 163840
    token strings that is 12-20 s of a 20 s load. Here a string array is parsed with plain byte
    slices and a numeric array is one view (what `ReaderField.contents()` reads either way), which
    takes well under a second. Overrides gguf-py's `_get_field_parts` (present since gguf 0.10);
    byte-swapped files take gguf's own path.
    """

    def _get_field_parts(self, orig_offs: int, raw_type: int):
        if GGUFValueType(raw_type) != GGUFValueType.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        offs = orig_offs
        raw_itype = self._get(offs, np.uint32)
        alen = self._get(offs + 4, np.uint64)
        if len(raw_itype) < 1 or len(alen) < 1:
            raise ValueError(f"metadata array at offset {orig_offs} runs past the end of the file")
        offs += 12
        itype, n = GGUFValueType(int(raw_itype[0])), int(alen[0])
        size = len(self.data)
        if itype == GGUFValueType.STRING:
            if n > (size - offs) // 8:
                raise ValueError(f"metadata string array at offset {orig_offs} claims {n} entries, more than "
                                 f"the file can hold")
            buf = memoryview(self.data)
            parts: list[Any] = [raw_itype, alen]
            idxs = []
            for _ in range(n):
                if offs + 8 > size:
                    raise ValueError(f"metadata string array at offset {orig_offs} runs past the end of the file")
                slen = int.from_bytes(buf[offs:offs + 8], "little")
                if offs + 8 + slen > size:
                    raise ValueError(f"metadata string at offset {offs} runs past the end of the file")
                parts += [buf[offs:offs + 8], buf[offs + 8:offs + 8 + slen]]
                idxs.append(len(parts) - 1)
                offs += 8 + slen
            return offs - orig_offs, parts, idxs, [GGUFValueType.ARRAY, GGUFValueType.STRING]
        nptype = self.gguf_scalar_to_np.get(itype)
        if nptype is None:  # nested arrays: gguf's generic path
            return super()._get_field_parts(orig_offs, raw_type)
        items = self._get(offs, nptype, n)
        if len(items) != n:
            raise ValueError(f"metadata array at offset {orig_offs} runs past the end of the file")
        data_idxs = [2] if n else []
        return 12 + int(items.nbytes), [raw_itype, alen, items], data_idxs, [GGUFValueType.ARRAY, itype]


class _HeaderOnly(FastReader):
    """GGUFReader that stops after the tensor infos (used to explain why a file does not open)."""

    def _build_tensors(self, start_offs: int, fields) -> None:  # noqa: D401 - overrides gguf's
        self.tensor_fields = fields
        self.tensors = []


def open_gguf(path: str | Path) -> GGUFReader:
    """A GGUFReader over `path` (a read-only memory map), or BadInput saying what is wrong.

    Read-only, not copy-on-write: Linux refuses a private writable map larger than RAM + swap, and
    the 48B file is. The QWeights wrap this map, so their `raw` must never be written to.
    """
    p = Path(path)
    if not p.exists():
        raise BadInput(f"{p}: no such file")
    if not p.is_file():
        raise BadInput(f"{p}: not a file")
    size = p.stat().st_size
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        shown = "an empty file" if size == 0 else f"it starts with {magic!r}"
        raise BadInput(f"{p}: not a GGUF file ({shown}; a GGUF starts with b'GGUF'): the file is corrupt or in "
                       f"another format")
    try:
        return FastReader(p, "r")
    except (OSError, MemoryError) as exc:
        raise BadInput(f"{p}: cannot memory-map the file ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # gguf raises ValueError/IndexError/KeyError/... on damaged files
        raise BadInput(_diagnose(p, size, exc)) from None


def _diagnose(p: Path, size: int, exc: Exception) -> str:
    fix = "the file is damaged or incomplete: re-create it (sparkops synth / convert) or download it again"
    try:
        head = _HeaderOnly(p, "r")
    except Exception as hexc:
        return (f"{p}: the GGUF header (metadata and tensor list) is cut short or corrupt ({size} bytes; "
                f"{type(hexc).__name__}: {hexc}); {fix}")
    worst = None
    for field in head.tensor_fields:
        _, name_data, _, dims, raw_dtype, offset = field.parts
        try:
            block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(int(raw_dtype[0]))]
        except (ValueError, KeyError):
            return (f"{p}: tensor '{bytes(name_data).decode(errors='replace')}' has an unknown type id "
                    f"{int(raw_dtype[0])}; {fix}")
        end = head.data_offset + int(offset[0]) + int(np.prod(dims.astype(np.float64))) * tsize // block
        if worst is None or end > worst[0]:
            worst = (end, bytes(name_data).decode(errors="replace"))
    if worst is not None and worst[0] > size:
        return (f"{p}: truncated: the file is {size} bytes but its tensor data needs {worst[0]} bytes "
                f"(tensor '{worst[1]}' ends there); {fix}")
    return f"{p}: the GGUF file cannot be read ({type(exc).__name__}: {exc}); {fix}"


def field_values(reader: GGUFReader) -> dict[str, Any]:
    """Every metadata key as a Python value (str, int, float, bool or a list of them)."""
    out: dict[str, Any] = {}
    for key, f in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if not f.types:
            continue
        out[key] = f.contents()
    return out


def read_config(path: str | Path) -> ModelConfig:
    """Just the ModelConfig of a file (validates the metadata, not the tensors)."""
    reader = open_gguf(path)
    values = field_values(reader)
    cfg, _ = _config(values, reader, Path(path))
    return cfg


def _config(values: dict, reader: GGUFReader, p: Path) -> tuple[ModelConfig, list[str]]:
    arch = values.get("general.architecture")
    if arch is None:
        raise BadInput(f"{p}: metadata key 'general.architecture' is missing; not a model GGUF")
    if arch != N.ARCH:
        raise BadInput(f"{p}: architecture is '{arch}', sparkops runs '{N.ARCH}' (Kimi-Linear) models only")
    fields_, defaulted = config_fields_from_kv(values, str(p), fallback_name=p.stem)
    if not fields_["vocab_size"]:
        embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
        if embd is None:
            raise BadInput(f"{p}: tensor 'token_embd.weight' is missing")
        fields_["vocab_size"] = int(embd.shape[-1])
    return build_config(fields_, str(p)), defaulted


# ----------------------------------------------------------------------------------------------
# Tensors
# ----------------------------------------------------------------------------------------------

def _np_shape(t) -> tuple[int, ...]:
    return tuple(int(d) for d in reversed(t.shape.tolist()))


def _squeezed(shape) -> tuple[int, ...]:
    return tuple(s for s in shape if s != 1)


class MemTensor(NamedTuple):
    """A tensor held in memory, shaped like gguf's ReaderTensor (ne-order `shape`, stored `data`)."""

    name: str
    tensor_type: GGMLQuantizationType
    shape: np.ndarray
    data: np.ndarray


class _Tensors:
    """The file's tensors by name, turned into QWeights / float32 tensors with the checks."""

    def __init__(self, tensors, config: ModelConfig, p: Path | str):
        self.by_name = {t.name: t for t in tensors}
        self.used: set[str] = set()
        self.config, self.p = config, p

    def has(self, name: str) -> bool:
        return name in self.by_name

    def _get(self, name: str, expected: tuple[int, ...], small: bool):
        t = self.by_name.get(name)
        if t is None:
            raise BadInput(f"{self.p}: tensor '{name}' is missing (expected shape {list(expected)}); the file is "
                           f"incomplete or not a kimi-linear model")
        self.used.add(name)
        check_supported(t.tensor_type, f"{self.p}: tensor '{name}'")
        got = _np_shape(t)
        ok = got == expected or (small and _squeezed(got) == _squeezed(expected)
                                 and int(np.prod(got)) == int(np.prod(expected)))
        if not ok:
            raise BadInput(f"{self.p}: tensor '{name}' has shape {list(got)} (ggml ne {list(reversed(got))}), "
                           f"expected {list(expected)} (ne {list(reversed(expected))}) for this model's metadata")
        return t

    def qweight(self, name: str, expected: tuple[int, ...]) -> QWeight:
        t = self._get(name, expected, small=False)
        return QWeight(_torch_view(t), t.tensor_type, expected, name)

    def floats(self, name: str, expected: tuple[int, ...]) -> np.ndarray:
        """float32 copy of a tensor, in the stored shape `expected`."""
        t = self._get(name, expected, small=True)
        data = np.asarray(t.data)
        if t.tensor_type.name == "BF16":
            data = data.view(np.uint16)
        logical = _np_shape(t)
        return dequantize(data.reshape(*logical[:-1], -1), t.tensor_type, logical).reshape(expected)

    def field(self, spec: N.TensorSpec) -> QWeight | torch.Tensor:
        rule = spec.rule
        stored = spec.stored_shape(self.config)
        if not rule.small:
            return self.qweight(spec.name, stored)
        x = self.floats(spec.name, stored)
        if rule.layout == N.SWAP_LAST2:
            x = np.swapaxes(x, -1, -2)
        return torch.from_numpy(np.ascontiguousarray(x).reshape(spec.our_shape(self.config)))


def _torch_view(t) -> torch.Tensor:
    """The tensor's bytes in the file as a torch tensor (no copy), typed as QWeight wants.

    The map is read-only; torch warns that it cannot guard that, and nothing in sparkops writes weights.
    """
    data = t.data
    if t.tensor_type.name == "BF16":  # gguf gives uint8 [..., 2*cols]; in memory it is uint16 [..., cols]
        data = data.view(np.int16)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        out = torch.from_numpy(data)
    return out.view(torch.bfloat16) if t.tensor_type.name == "BF16" else out


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------

def load_gguf(path: str | Path) -> ModelWeights:
    """A kimi-linear GGUF as ModelWeights (see the module docstring for what is checked)."""
    p = Path(path)
    reader = open_gguf(p)
    values = field_values(reader)
    config, defaulted = _config(values, reader, p)
    if "tokenizer.ggml.model" not in values:
        raise BadInput(f"{p}: metadata key 'tokenizer.ggml.model' is missing (llama.cpp requires it); "
                       f"re-create the file with `sparkops convert` or `sparkops synth`")
    tokenizer = TokenizerData.from_kv(values, config.vocab_size, str(p))
    if tokenizer.model == "gpt2" and tokenizer.vocab_size != config.vocab_size:
        raise BadInput(f"{p}: the vocabulary has {tokenizer.vocab_size} tokens but the model {config.vocab_size} rows")
    tensors = _Tensors(reader.tensors, config, p)
    weights = _assemble(tensors, config)
    weights.metadata.update(_metadata(p, reader, values, tensors, defaulted, tokenizer))
    return weights


def assemble_weights(config: ModelConfig, arrays: dict, where: str = "memory") -> ModelWeights:
    """ModelWeights from in-memory stored arrays: {name: (planned tensor, stored array)} (see synth)."""
    mem = [MemTensor(name, GGMLQuantizationType(pl.qtype), np.array(list(reversed(pl.shape))), arr)
           for name, (pl, arr) in arrays.items()]
    return _assemble(_Tensors(mem, config, where), config)


def _assemble(tensors: "_Tensors", config: ModelConfig) -> ModelWeights:
    specs = N.tensor_specs(config)
    glob = {s.rule.field: tensors.field(s) for s in specs if s.layer is None}
    layers = [_layer(tensors, config, i, [s for s in specs if s.layer == i]) for i in range(config.num_layers)]
    return ModelWeights(config=config, embed=glob["embed"], layers=layers,
                        output_norm=glob["output_norm"], output=glob["output"])


def _layer(tensors: _Tensors, config: ModelConfig, i: int, specs: list[N.TensorSpec]) -> LayerWeights:
    kind = config.layer_kind(i)
    got: dict[str, Any] = {}
    for s in specs:
        if s.rule.optional and not tensors.has(s.name):
            got[s.rule.field] = None
            continue
        if kind == "mla" and s.rule.suffix in ("attn_k_b.weight", "attn_v_b.weight") \
                and not tensors.has(s.name) and tensors.has(f"blk.{i}.{N.LEGACY_KV_B.suffix}"):
            if "attn.w_uk" not in got:
                got["attn.w_uk"], got["attn.w_uv"] = _split_kv_b(tensors, config, i)
            continue
        got[s.rule.field] = tensors.field(s)
    if kind == "mla" and any(got.get(f) is None for f in ("attn.w_uk", "attn.w_uv")):
        raise BadInput(f"{tensors.p}: layer {i} (MLA) has neither attn_k_b/attn_v_b nor a legacy attn_kv_b")
    attn_fields = {k.split(".", 1)[1]: v for k, v in got.items() if k.startswith("attn.")}
    ffn_fields = {k.split(".", 1)[1]: v for k, v in got.items() if k.startswith("ffn.")}
    attn = KDAWeights(**attn_fields) if kind == "kda" else MLAWeights(**attn_fields)
    if config.is_moe(i):
        for opt in ("s_gate", "s_up", "s_down"):
            ffn_fields.setdefault(opt, None)
        ffn = MoEWeights(**ffn_fields)
    else:
        ffn = DenseFFNWeights(**ffn_fields)
    return LayerWeights(kind=kind, attn_norm=got["attn_norm"], ffn_norm=got["ffn_norm"], attn=attn, ffn=ffn)


def _split_kv_b(tensors: _Tensors, config: ModelConfig, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Legacy attn_kv_b [N*(Dn+Dv), Lkv] -> w_uk [N, Dn, Lkv], w_uv [N, Dv, Lkv] (HF kv_b_proj row order)."""
    c = config
    name = f"blk.{i}.{N.LEGACY_KV_B.suffix}"
    kv = tensors.floats(name, N.LEGACY_KV_B.stored(c))
    kv = kv.reshape(c.mla_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)  # [N, Dn+Dv, Lkv]
    w_uk = np.ascontiguousarray(kv[:, :c.qk_nope_head_dim])
    w_uv = np.ascontiguousarray(kv[:, c.qk_nope_head_dim:])
    return torch.from_numpy(w_uk), torch.from_numpy(w_uv)


def _metadata(p: Path, reader: GGUFReader, values: dict, tensors: _Tensors, defaulted: list[str],
              tokenizer: TokenizerData) -> dict[str, Any]:
    size = p.stat().st_size
    types: dict[str, dict[str, int]] = {}
    for t in reader.tensors:
        e = types.setdefault(t.tensor_type.name, {"tensors": 0, "bytes": 0})
        e["tensors"] += 1
        e["bytes"] += int(t.n_bytes)
    return {
        "path": str(p.resolve()),
        "file_size": size,
        "gguf_version": int(reader.fields["GGUF.version"].contents()),
        "tensor_count": len(reader.tensors),
        "weight_digest": weight_digest(reader, size),
        "digest_scheme": DIGEST_SCHEME,
        "quant_mix": values.get("sparkops.quant_mix"),
        "quant_types": types,
        "quant_fallbacks": list(values.get("sparkops.quant_fallbacks") or []),
        "source": values.get("sparkops.source"),
        "synth_preset": values.get("sparkops.synth.preset"),
        "synth_seed": values.get("sparkops.synth.seed"),
        "defaulted_config_fields": defaulted,
        "ignored_tensors": sorted(set(tensors.by_name) - tensors.used),
        "tokenizer": tokenizer,
    }


def weight_digest(reader: GGUFReader, size: int) -> str:
    """sha256 per DIGEST_SCHEME (see the module docstring)."""
    h = hashlib.sha256(DIGEST_SCHEME.encode())
    h.update(int(size).to_bytes(8, "little"))
    h.update(memoryview(reader.data[:reader.data_offset]))
    for t in sorted(reader.tensors, key=lambda t: t.data_offset):
        n = int(t.n_bytes)
        h.update(f"{t.name}\0{int(t.tensor_type)}\0{n}\0".encode())
        raw = reader.data[t.data_offset:t.data_offset + n]
        if n <= 2 * _SAMPLE:
            h.update(memoryview(raw))
        else:
            h.update(memoryview(raw[:_SAMPLE]))
            h.update(memoryview(raw[-_SAMPLE:]))
    return h.hexdigest()
