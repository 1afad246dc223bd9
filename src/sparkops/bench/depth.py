"""Putting a sequence at an exact context depth, and proving it is there.

The trap this module exists for (seed, lecture 02): a harness that hard-coded max_ctx=64 scored
decode at context 64 for weeks while the project claimed 128k. Here the depth is an argument,
the cache is sized from it, and before anything is timed `verify_depth` proves three ways that the
sequence really holds D tokens: the host length, the device position, and the MLA latent caches,
whose rows [0, D) must all have been written (the caches start as zeros; a written row is an
RMS-normed latent, never all zero) and - on a fresh sequence - rows [D, end) must not have been.
A fingerprint of rows [0, D) taken after the fill is checked again after timing, so a run that
overwrote its context while being timed is caught too.

Prompts are seeded random token ids (never constant: constant data flatters kernels).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from ..engine import Engine
from ..engine.state import KDAState, MLAState, Snapshot  # noqa: F401 - Snapshot is part of this module's API
from ..errors import BadInput, CheckFailed
from ..kvcache import FP8


class DepthError(CheckFailed):
    """The sequence does not hold the context depth the figure would claim."""


def random_tokens(n: int, vocab: int, seed: int) -> torch.Tensor:
    """n seeded random token ids in [0, vocab), int64 on the CPU; never constant when n > 1."""
    if n < 0:
        raise BadInput(f"a token count cannot be negative (got {n})")
    if vocab < 2:
        raise BadInput(f"a vocabulary of {vocab} token(s) cannot make a non-constant prompt")
    g = torch.Generator().manual_seed(int(seed))
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64)
    if n > 1 and bool((ids == ids[0]).all()):  # astronomically unlikely; never time constant data
        ids[1] = (ids[0] + 1) % vocab
    return ids


#: fills of more chunks than this show a progress bar (stderr): a 131072-token context takes minutes
PROGRESS_CHUNKS = 4


def fill(engine: Engine, tokens: torch.Tensor, chunk: int | None = None) -> None:
    """Prefill `tokens` (in chunks of `chunk`, default all at once) onto the engine's sequence."""
    n = int(tokens.numel())
    step = n if not chunk else int(chunk)
    if step <= 0 and n:
        raise BadInput(f"--chunk must be positive (got {chunk})")
    starts = range(0, n, max(step, 1))
    bar = tqdm(total=n, unit="tok", unit_scale=True, desc=f"filling the context to {n} tokens", file=sys.stderr,
               mininterval=2.0, disable=len(starts) <= PROGRESS_CHUNKS)
    with bar:
        for s in starts:
            engine.prefill(tokens[s:s + step], last_only=True)
            bar.update(min(step, n - s))


@dataclass
class DepthProof:
    """What verify_depth found (stored with the figure)."""

    depth: int
    host_length: int
    device_pos: int
    max_context: int
    mla_layers: int
    rows_checked: int
    fingerprint: list[float] = field(default_factory=list)  # per MLA layer: sum over rows [0, D) in float64

    def as_dict(self) -> dict:
        return {"depth": self.depth, "host_length": self.host_length, "device_pos": self.device_pos,
                "max_context": self.max_context, "mla_layers": self.mla_layers, "rows_checked": self.rows_checked}


def mla_caches(engine: Engine) -> list[tuple[int, torch.Tensor]]:
    return [(i, st.cache) for i, st in enumerate(engine.state.layers) if isinstance(st, MLAState)]


def verify_depth(engine: Engine, depth: int, *, fresh: bool, need: int = 0) -> DepthProof:
    """Raise DepthError unless the engine's sequence holds exactly `depth` tokens (see module doc).

    fresh: the sequence was reset, then filled to `depth` (rows past it must still be zeros).
    need:  further tokens the caller will add; the cache must have room for depth + need.
    """
    where = f"context depth {depth}"
    if engine.length != depth:
        raise DepthError(f"{where}: the engine's host length is {engine.length}, not {depth}; the prompt was "
                         f"truncated or padded, so no figure at depth {depth} can be recorded")
    pos = int(engine.state.pos.reshape(-1)[0])  # one host sync, outside any timed region
    if pos != depth:
        raise DepthError(f"{where}: the device position is {pos}, not {depth} (host says {engine.length}); the "
                         f"graph advanced a different number of tokens than it was given")
    if engine.max_context < depth + need:
        raise DepthError(f"{where}: the cache holds {engine.max_context} tokens, fewer than the {depth + need} "
                         f"this measurement needs; the context is capped somewhere")
    caches = mla_caches(engine)
    if not caches:
        raise DepthError(f"{where}: the model has no MLA layer, so the depth cannot be proven from a cache")
    proof = DepthProof(depth, engine.length, pos, engine.max_context, len(caches), depth * len(caches))
    for layer, cache in caches:
        if cache.shape[0] < depth + need:
            raise DepthError(f"{where}: layer {layer}'s MLA cache has {cache.shape[0]} rows, fewer than "
                             f"{depth + need}; the cache was capped below the claimed context")
        rows = cache.detach()
        rows = rows.float() if rows.dtype == FP8 else rows  # fp8 has no reductions of its own
        written = rows.abs().amax(dim=1) > 0  # [Lmax] (NaN compares False: an unwritten or corrupt row)
        head = written[:depth]
        if depth and not bool(head.all()):
            first = int((~head).nonzero()[0])
            count = int((~head).sum())
            raise DepthError(f"{where}: layer {layer}'s MLA cache has {count} of rows 0..{depth - 1} never written "
                             f"(first: row {first}); the engine holds fewer than {depth} tokens of context "
                             f"(a truncated or capped cache)")
        if depth and not bool(torch.isfinite(rows[:depth]).all()):
            raise DepthError(f"{where}: layer {layer}'s MLA cache holds NaN/Inf in rows 0..{depth - 1}")
        if fresh and bool(written[depth:].any()):
            first = depth + int(written[depth:].nonzero()[0])
            raise DepthError(f"{where}: layer {layer}'s MLA cache has row {first} written on a fresh sequence of "
                             f"{depth} tokens; rows were written at the wrong positions")
        proof.fingerprint.append(float(rows[:depth].double().sum()))
    return proof


def check_fingerprint(engine: Engine, proof: DepthProof) -> None:
    """Raise DepthError if rows [0, D) changed since `proof` was taken (a run overwrote its context)."""
    for (layer, cache), before in zip(mla_caches(engine), proof.fingerprint):
        now = float(cache[:proof.depth].double().sum())
        if now != before:
            raise DepthError(f"context depth {proof.depth}: layer {layer}'s cache rows 0..{proof.depth - 1} changed "
                             f"while timing (sum {before!r} -> {now!r}); the timed steps wrote into the context")
