"""From a model spec (a GGUF path or a preset name) and a registry to a ready Engine."""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import preset_names
from ..dispatch import Ops
from ..errors import BadInput
from ..paths import cache_dir, default_registry
from ..plugins import load_catalog
from ..registry.file import Registry
from ..registry.plan import make_plan
from ..weights import ModelWeights
from .engine import Engine

#: presets that are synthesized on first use (small enough to make on any machine in seconds)
AUTO_SYNTH = {"k3-nano": "f32"}


def default_model_path(preset: str, mix: str | None = None, seed: int = 0) -> Path:
    mix = mix or AUTO_SYNTH.get(preset, "q4_k_m")
    return cache_dir() / f"{preset}-{mix}-seed{seed}.gguf"


def load_model(spec: str | Path, *, progress: bool = False) -> ModelWeights:
    """A GGUF file, or a preset name; k3-nano is synthesized into the cache dir on first use."""
    from ..gguf.reader import load_gguf

    path = Path(spec)
    if path.suffix == ".gguf" or path.exists():
        if not path.exists():
            raise BadInput(f"{path}: no such model file")
        return load_gguf(path)
    name = str(spec)
    if name not in preset_names():
        raise BadInput(f"'{name}' is neither a GGUF file nor a preset; presets: {', '.join(preset_names())}")
    if name not in AUTO_SYNTH:
        raise BadInput(f"preset '{name}' is not synthesized automatically (too large); make a file with "
                       f"`sparkops synth --preset {name} --quant q4_k_m -o FILE.gguf` and pass --model FILE.gguf")
    target = default_model_path(name)
    if not target.exists():
        from ..synth import synth_file

        target.parent.mkdir(parents=True, exist_ok=True)
        synth_file(name, AUTO_SYNTH[name], target, seed=0, progress=progress)
    return load_gguf(target)


def make_ops(device: str, registry: str | Path | None = None, *, check_finite: bool = False) -> Ops:
    reg = Registry.load(registry or default_registry())
    return Ops(make_plan(reg, load_catalog(), device), check_finite=check_finite)


#: below this many weight bytes a CPU run uses one torch thread (see _cpu_threads_policy)
SMALL_MODEL_BYTES = 256 << 20


def _cpu_threads_policy(device: str, model: ModelWeights) -> None:
    """Small models on the CPU run single-threaded unless OMP_NUM_THREADS says otherwise.

    A tiny model's ops are microseconds long; torch's intra-op thread pool then costs more than it
    saves, and on a busy 2-core machine it made decode 7x slower (28 vs 4 ms/token on k3-nano).
    """
    import os

    if device == "cpu" and model.nbytes < SMALL_MODEL_BYTES and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


def build_engine(spec: str | Path, *, device: str = "cpu", registry: str | Path | None = None,
                 max_context: int | None = None, dtype: torch.dtype | None = None,
                 check_finite: bool = False, progress: bool = False) -> Engine:
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda was asked for, but this machine has no CUDA device; use --device cpu")
    ops = make_ops(device, registry, check_finite=check_finite)
    model = load_model(spec, progress=progress)
    _cpu_threads_policy(device, model)
    if dtype is None:
        dtype = torch.float32
    return Engine(model, ops, max_context=max_context, dtype=dtype)
