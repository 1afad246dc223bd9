"""Per-sequence state: the MLA latent caches, the KDA conv windows and recurrent states, the position.

Everything is allocated once, at the maximum context, so a decode step touches only static buffers
(what lets it be captured as one CUDA graph). The position lives in device memory (`pos`) and is
mirrored on the host (`length`) for bookkeeping and the scoreboard's depth assertion.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch

from ..config import ModelConfig


@dataclass
class KDAState:
    conv_q: torch.Tensor  # [W-1, P] raw projection outputs, oldest first
    conv_k: torch.Tensor  # [W-1, P]
    conv_v: torch.Tensor  # [W-1, P]
    recurrent: torch.Tensor  # [H, Dk, Dv] float32


@dataclass
class MLAState:
    cache: torch.Tensor  # [max_context, Lkv + R]: normed latent c, then k_pe


class SequenceState:
    def __init__(self, config: ModelConfig, max_context: int, device: torch.device, cache_dtype: torch.dtype,
                 merged_conv: Collection[int] = ()):
        """`merged_conv`: the KDA layers whose q, k, v run one short_conv (engine/fusion.py). Their windows are
        one [W-1, 3P] buffer, `conv_windows[layer]`, and that layer's conv_q, conv_k, conv_v are its column views,
        so every other code reads and writes them as before."""
        self.config = config
        self.max_context = max_context
        self.device = device
        self.cache_dtype = cache_dtype
        self.layers: list[KDAState | MLAState] = []
        self.conv_windows: dict[int, torch.Tensor] = {}  # layer -> [W-1, 3P] q|k|v window (merged_conv)
        p, w = config.kda_inner, config.conv_kernel
        for i, kind in enumerate(config.layer_kinds):
            if kind == "kda":
                recurrent = torch.zeros(config.kda_heads, config.kda_head_dim, config.kda_head_dim,
                                        dtype=torch.float32, device=device)
                if i in merged_conv:
                    conv = self.conv_windows[i] = torch.zeros(w - 1, 3 * p, device=device)
                    self.layers.append(KDAState(conv[:, :p], conv[:, p:2 * p], conv[:, 2 * p:], recurrent))
                else:
                    self.layers.append(KDAState(*(torch.zeros(w - 1, p, device=device) for _ in range(3)),
                                                recurrent))
            else:
                self.layers.append(MLAState(cache=torch.zeros(max_context, config.latent_dim, dtype=cache_dtype,
                                                              device=device)))
        self.pos = torch.zeros(1, dtype=torch.int64, device=device)  # device copy of the position
        self.length = 0  # host mirror, advanced by the engine

    def reset(self) -> None:
        for t in self.tensors():
            t.zero_()
        self.length = 0

    def tensors(self) -> list[torch.Tensor]:
        """Every buffer of the state, in a fixed order (the position last). A merged conv window is listed as
        its three views, so states with and without it copy into each other."""
        out = []
        for st in self.layers:
            out += [st.conv_q, st.conv_k, st.conv_v, st.recurrent] if isinstance(st, KDAState) else [st.cache]
        return out + [self.pos]

    def copy_from(self, other: "SequenceState", *, round_cache: bool = False) -> None:
        """Take another sequence's whole state (in place: every buffer keeps its address).

        Both must have the same config, context and cache dtype; a mismatch is an error naming the buffer. With
        `round_cache`, MLA caches of another dtype are taken rounded into this one (kvcache.to_cache: the bench's
        fill of an fp8 arm from a bf16 fill, a stated policy there).
        """
        from ..errors import BadInput
        from ..kvcache import to_cache

        mine, theirs = self.tensors(), other.tensors()
        if self.config.layer_kinds != other.config.layer_kinds or len(mine) != len(theirs):
            raise BadInput("cannot copy a sequence state between different models")
        rounded = {id(st.cache) for st in self.layers if isinstance(st, MLAState)} if round_cache else set()
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a.shape != b.shape or (a.dtype != b.dtype and id(a) not in rounded):
                raise BadInput(f"cannot copy a sequence state: buffer {i} is {tuple(b.shape)} {b.dtype} there and "
                               f"{tuple(a.shape)} {a.dtype} here (same max context and cache dtype needed)")
        for a, b in zip(mine, theirs):
            a.copy_(to_cache(b, a.dtype) if id(a) in rounded else b)
        self.length = other.length

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())


class Snapshot:
    """A sequence's mutable decode state, restored in place (every buffer keeps its address).

    The KDA conv windows and recurrent states, the position and the length are copied back. MLA rows
    [0, D) are never written by a decode step and rows past D are stale rows that attention must not
    read (the attention contract's rule), so the caches are not copied. Used to time rounds from the
    same depth and to undo the warm-up steps of a CUDA-graph capture.
    """

    def __init__(self, engine):
        self.engine = engine
        self.length = engine.length
        self.pos = engine.state.pos.clone()
        self.kda = [tuple(t.clone() for t in (st.conv_q, st.conv_k, st.conv_v, st.recurrent))
                    for st in engine.state.layers if isinstance(st, KDAState)]

    def restore(self) -> None:
        kda_states = [st for st in self.engine.state.layers if isinstance(st, KDAState)]
        for st, saved in zip(kda_states, self.kda):
            for live, copy in zip((st.conv_q, st.conv_k, st.conv_v, st.recurrent), saved):
                live.copy_(copy)
        self.engine.state.pos.copy_(self.pos)
        self.engine.state.length = self.length
