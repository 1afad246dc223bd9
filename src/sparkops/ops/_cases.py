"""Helpers for the contracts' case generators: seeded random data (never zeros, never constants)."""

from __future__ import annotations

import torch


def gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def randn(g: torch.Generator, *shape: int, std: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)


def uniform(g: torch.Generator, *shape: int, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(torch.float32)


def randint(g: torch.Generator, hi: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, hi, shape, generator=g, dtype=torch.int64)


def name(shape: str, seed: int) -> str:
    """Case names carry their seed so `sparkops check OP=IMPL --case NAME` can replay them."""
    return f"{shape}@{seed}"
