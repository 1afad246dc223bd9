"""Write a `kimi-linear` GGUF, streaming tensor by tensor, atomically.

    write_gguf(path, config, planned, arrays, tokenizer, extra_kv=...)

`planned` lists every tensor (name, GGUF type, NumPy shape) before any data exists, so the header
(metadata + tensor infos with their offsets) is written first; then `arrays` is consumed one stored
array at a time (the layout `gguf.quants` produces: uint8 blocks [..., row_bytes] for block types,
the typed array for F32/F16, uint16 bits for BF16) and each is written and dropped. Memory stays at
one tensor (plus whatever the producer keeps in flight), so a 28 GB file needs no 28 GB of RAM.

The file is written as a temp file next to `path` and renamed over it only when complete (fsync
first), so a crash or an error never leaves a half-written model under the real name.

Every metadata key of spec section 10 is written (`names.META_KEYS`), with the tokenizer, so
llama.cpp can load the file; sparkops' own keys (`names.SPARKOPS_KEYS`) ride along.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

import numpy as np
from gguf import GGUFValueType, GGUFWriter, GGMLQuantizationType, LlamaFileType

from ..config import ModelConfig
from ..errors import BadInput
from ..tokenizer import TokenizerData
from . import names as N
from .metadata import config_to_kv
from .quants import FLOAT_DTYPES, storage_shape

V = GGUFValueType
QUANTIZATION_VERSION = 2  # ggml's current block layout version (general.quantization_version)

#: general.file_type per mix, for tools that display it (llama.cpp's LLAMA_FTYPE values)
FILE_TYPES = {"f32": LlamaFileType.ALL_F32, "f16": LlamaFileType.MOSTLY_F16, "bf16": LlamaFileType.MOSTLY_BF16,
              "q8_0": LlamaFileType.MOSTLY_Q8_0, "q4_k_m": LlamaFileType.MOSTLY_Q4_K_M,
              "iq1_s": LlamaFileType.MOSTLY_IQ1_S, "ud_iq1_s": LlamaFileType.MOSTLY_IQ1_S}

_KINDS = {"str": (V.STRING, None), "u32": (V.UINT32, None), "u64": (V.UINT64, None), "bool": (V.BOOL, None),
          "f32": (V.FLOAT32, None), "f64": (V.FLOAT64, None),
          "str[]": (V.ARRAY, V.STRING), "i32[]": (V.ARRAY, V.INT32), "u32[]": (V.ARRAY, V.UINT32)}


class PlannedTensor(Protocol):
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]


def _expected_dtype(qtype: GGMLQuantizationType) -> np.dtype:
    return FLOAT_DTYPES.get(qtype, np.dtype(np.uint8))


def check_plan(config: ModelConfig, planned: Sequence[PlannedTensor]) -> None:
    """Every tensor the contract requires is planned with its shape (so the file will load)."""
    have = {t.name: tuple(t.shape) for t in planned}
    if len(have) != len(planned):
        raise BadInput("write_gguf: duplicate tensor names in the plan")
    for spec in N.tensor_specs(config):
        if spec.name not in have:
            legacy = spec.layer is not None and f"blk.{spec.layer}.{N.LEGACY_KV_B.suffix}" in have
            if spec.rule.optional or (legacy and spec.rule.suffix in ("attn_k_b.weight", "attn_v_b.weight")):
                continue
            raise BadInput(f"write_gguf: tensor '{spec.name}' is missing from the plan")
        if spec.rule.small:
            continue  # small tensors may use an equivalent layout (3-D conv, 2-D ssm_a)
        if have[spec.name] != spec.stored_shape(config):
            raise BadInput(f"write_gguf: tensor '{spec.name}' is planned as {list(have[spec.name])}, the contract "
                           f"says {list(spec.stored_shape(config))}")


def write_gguf(path: str | Path, config: ModelConfig, planned: Sequence[PlannedTensor],
               arrays: Iterable[np.ndarray], tokenizer: TokenizerData,
               extra_kv: Sequence[tuple[str, Any, str]] = (), mix: str | None = None,
               progress: bool = False, desc: str = "writing") -> dict:
    """Write the file (see the module docstring). Returns {"path", "bytes", "tensors"}.

    extra_kv: (key, value, kind) with kind in str/u32/u64/bool/f32/f64/str[]/i32[]/u32[].
    """
    path = Path(path)
    check_plan(config, planned)
    if tokenizer.model == "gpt2" and tokenizer.vocab_size != config.vocab_size:
        raise BadInput(f"write_gguf: tokenizer has {tokenizer.vocab_size} tokens, the model {config.vocab_size}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    logging.getLogger("gguf").setLevel(logging.WARNING)  # gguf logs every file it opens at INFO
    try:
        writer = GGUFWriter(tmp, N.ARCH)
        _add_metadata(writer, config, tokenizer, extra_kv, mix)
        for t in planned:
            shape = tuple(int(s) for s in t.shape)
            nbytes = _nbytes(t.qtype, shape)
            writer.add_tensor_info(t.name, shape, np.dtype(np.float32), nbytes, raw_dtype=GGMLQuantizationType(t.qtype))
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        total = sum(_nbytes(t.qtype, tuple(t.shape)) for t in planned)
        bar = _progress(progress, total, desc)
        count = 0
        it = iter(arrays)
        for t in planned:
            try:
                arr = next(it)
            except StopIteration:
                raise BadInput(f"write_gguf: the data ran out at tensor '{t.name}' ({count} of {len(planned)} written)")
            arr = _check_array(t, arr)
            writer.write_tensor_data(arr)
            count += 1
            if bar is not None:
                bar.update(arr.nbytes)
            del arr
        if next(it, None) is not None:
            raise BadInput(f"write_gguf: more arrays than the {len(planned)} planned tensors")
        if bar is not None:
            bar.close()
        assert writer.fout is not None
        for fh in writer.fout:
            fh.flush()
            os.fsync(fh.fileno())
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        try:
            writer.close()  # type: ignore[possibly-undefined]
        except Exception:
            pass
        tmp.unlink(missing_ok=True)
        raise
    return {"path": str(path), "bytes": path.stat().st_size, "tensors": len(planned)}


def _nbytes(qtype: int, shape: tuple[int, ...]) -> int:
    from .mix import nbytes

    return nbytes(qtype, shape)


def _check_array(t: PlannedTensor, arr: np.ndarray) -> np.ndarray:
    qtype = GGMLQuantizationType(t.qtype)
    want_shape = storage_shape(qtype, t.shape)
    want_dtype = _expected_dtype(qtype)
    arr = np.asarray(arr)
    if qtype == GGMLQuantizationType.BF16 and arr.dtype == np.int16:
        arr = arr.view(np.uint16)
    if arr.dtype != want_dtype or tuple(arr.shape) != tuple(want_shape):
        raise BadInput(f"write_gguf: data for '{t.name}' is {arr.dtype} {list(arr.shape)}, expected {want_dtype} "
                       f"{list(want_shape)} ({qtype.name} {list(t.shape)})")
    return np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False)


def _add_metadata(writer: GGUFWriter, config: ModelConfig, tokenizer: TokenizerData,
                  extra_kv: Sequence[tuple[str, Any, str]], mix: str | None) -> None:
    for key, value, vtype, sub in config_to_kv(config):
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.add_key_value("general.quantization_version", QUANTIZATION_VERSION, V.UINT32)
    if mix is not None and mix in FILE_TYPES:
        writer.add_key_value("general.file_type", int(FILE_TYPES[mix]), V.UINT32)
    if mix is not None:
        writer.add_key_value("sparkops.quant_mix", mix, V.STRING)
    for key, value, kind in [*tokenizer.to_kv(), *extra_kv]:
        vtype, sub = _KINDS[kind]
        if vtype == V.ARRAY and not value:
            continue  # GGUF has no empty arrays
        writer.add_key_value(key, value, vtype, sub_type=sub)


def _progress(enabled: bool, total: int, desc: str):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, file=sys.stderr)
