"""The engine: model loading, per-sequence state, the forward graph and generation."""

from .engine import Engine, GenerationStats
from .loading import build_engine, load_model

__all__ = ["Engine", "GenerationStats", "build_engine", "load_model"]
