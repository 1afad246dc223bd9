"""Where sparkops finds its data: the model presets and the default registry."""

from __future__ import annotations

import os
from pathlib import Path

_SRC_ROOT = Path(__file__).resolve().parents[2]  # the checkout: src/sparkops/paths.py -> repo root


def repo_root() -> Path:
    """The project checkout sparkops runs from (sparkops is installed editable from it)."""
    return _SRC_ROOT


def model_dir() -> Path:
    """model/: presets and tokenizer assets. Override with SPARKOPS_MODEL_DIR."""
    env = os.environ.get("SPARKOPS_MODEL_DIR")
    return Path(env) if env else _SRC_ROOT / "model"


def default_registry() -> Path:
    """registry.toml: the one in the current directory if there is one, else the checkout's."""
    env = os.environ.get("SPARKOPS_REGISTRY")
    if env:
        return Path(env)
    here = Path.cwd() / "registry.toml"
    return here if here.exists() else _SRC_ROOT / "registry.toml"


def cache_dir() -> Path:
    """Where generated artefacts (the synthesized default model) are kept. Override with SPARKOPS_CACHE."""
    env = os.environ.get("SPARKOPS_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparkops"
