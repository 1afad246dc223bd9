"""Digests the reference lock keeps: of model weights (exact) and of logits (tolerant sketches).

Weights are bytes on disk, so their digest is an exact sha256 over every tensor's name, type, shape
and bytes. Logits are recomputed by float64 NumPy, whose matmuls can differ in the last bits
between BLAS builds and core counts, so an exact hash of them would fail on a healthy machine.
A logits row is pinned instead by a *sketch*: its L2 norm and its projections onto a few seeded
random +-1 directions. Any change to any value larger than the tolerance moves some projection by
about that much; last-bit noise moves them by ~1e-16 relative. `same_sketch` compares with a
relative tolerance on the norm.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, fields, is_dataclass
from typing import Any

import numpy as np
import torch

from ..config import ModelConfig
from ..qweight import QWeight

SKETCH_DIRECTIONS = 8
#: ModelConfig fields that do not change a single logit (so a tokenizer or notes update keeps the pin)
_CONFIG_PROSE = {"notes", "assumptions", "bos_token_id", "eos_token_id", "pad_token_id"}
SKETCH_SEED = 0x5EED


def weights_digest(weights: Any) -> str:
    """sha256 over every tensor and QWeight of a ModelWeights (field paths, types, shapes and bytes) and the
    numeric fields of its config (layer kinds, sizes, epsilons)."""
    h = hashlib.sha256()

    def add(path: str, obj: Any) -> None:
        if isinstance(obj, QWeight):
            h.update(f"{path}:{obj.qtype.name}:{list(obj.shape)}\0".encode())
            h.update(_bytes(obj.raw))
        elif isinstance(obj, torch.Tensor):
            h.update(f"{path}:{obj.dtype}:{list(obj.shape)}\0".encode())
            h.update(_bytes(obj))
        elif isinstance(obj, (list, tuple)):
            for i, o in enumerate(obj):
                add(f"{path}[{i}]", o)
        elif is_dataclass(obj) and not isinstance(obj, ModelConfig):
            for f in fields(obj):
                if f.name != "metadata":
                    add(f"{path}.{f.name}", getattr(obj, f.name))
        elif isinstance(obj, ModelConfig):  # the numbers the forward uses, not its prose or token ids
            numeric = {k: v for k, v in asdict(obj).items() if k not in _CONFIG_PROSE}
            h.update(f"{path}:{sorted(numeric.items())!r}\0".encode())

    add("model", weights)
    return h.hexdigest()


def _bytes(t: torch.Tensor) -> bytes:
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _directions(n: int) -> np.ndarray:
    rng = np.random.default_rng([SKETCH_SEED, n])
    return rng.choice(np.array([-1.0, 1.0]), size=(SKETCH_DIRECTIONS, n)) / np.sqrt(n)  # [S, n]


def sketch(values: torch.Tensor | np.ndarray) -> dict[str, Any]:
    """{"norm": L2 norm, "proj": [S projections]} of the flattened float64 values."""
    v = np.asarray(values.detach().cpu().double().numpy() if isinstance(values, torch.Tensor) else values,
                   np.float64).reshape(-1)
    return {"norm": float(np.linalg.norm(v)), "proj": [float(p) for p in _directions(v.size) @ v]}


def same_sketch(a: dict[str, Any], b: dict[str, Any], rtol: float) -> tuple[bool, float]:
    """(equal within rtol of the norm, the largest difference relative to the norm)."""
    scale = max(float(a["norm"]), float(b["norm"]), 1e-300)
    diffs = [abs(float(a["norm"]) - float(b["norm"]))] + \
            [abs(float(x) - float(y)) for x, y in zip(a["proj"], b["proj"], strict=True)]
    worst = max(diffs) / scale
    return worst <= rtol, worst
