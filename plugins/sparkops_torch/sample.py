"""sample in torch: greedy, or temperature / top-k / top-p with the counter RNG of sparkops.sampling_rng.

The RNG is the reference's 32-bit hash evaluated in int64 tensors: every intermediate is kept in
[0, 2^32) by masking, and the 32x32-bit products are split into 16-bit halves so no int64 product
ever overflows. The result equals `sparkops.sampling_rng.uniform` bit for bit. `step` is read from
its device tensor, never on the host, so a captured decode step draws fresh noise on each replay.
The filtering and the Gumbel argmax run in float64 (as the reference), so a token differs from the
reference's only on an exact float64 tie.
"""

from __future__ import annotations

import torch

from sparkops.sampling_rng import M1, M2

from ._common import require

_MASK = 0xFFFFFFFF


def _mul32(x: torch.Tensor, m: int) -> torch.Tensor:
    """(x * m) mod 2^32 for int64 x in [0, 2^32), without int64 overflow."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * m + (((hi * m) & 0xFFFF) << 16)) & _MASK


def mix32(x: torch.Tensor) -> torch.Tensor:
    """The "lowbias32" integer hash on int64 tensors holding uint32 values."""
    x = x ^ (x >> 16)
    x = _mul32(x, M1)
    x = x ^ (x >> 15)
    x = _mul32(x, M2)
    return x ^ (x >> 16)


def uniform(seed: int, step: torch.Tensor, rows: int, vocab: int) -> torch.Tensor:
    """float64 [rows, vocab] in (0, 1), equal to sampling_rng.uniform(seed, int(step), rows, vocab)."""
    dev = step.device
    seed_mix = mix32(torch.full((1,), int(seed) & _MASK, dtype=torch.int64, device=dev))
    s = mix32(((step.reshape(-1)[:1].to(torch.int64) & _MASK) + seed_mix) & _MASK)  # [1]
    r = mix32((torch.arange(rows, dtype=torch.int64, device=dev) + s) & _MASK)  # [rows]
    h = mix32((torch.arange(vocab, dtype=torch.int64, device=dev).unsqueeze(0) + r.unsqueeze(1)) & _MASK)
    return ((h >> 8).to(torch.float64) + 0.5) / float(1 << 24)


def sample(logits, temperature, top_k, top_p, seed, step):
    require(logits.dim() == 2, f"sample: logits must be [B, V], got {list(logits.shape)}")
    require(temperature >= 0 and top_k >= 0 and 0.0 < top_p <= 1.0,
            f"sample: need temperature >= 0, top_k >= 0 and 0 < top_p <= 1, got temperature={temperature}, "
            f"top_k={top_k}, top_p={top_p}")
    if temperature == 0:
        return torch.argmax(logits, dim=-1)  # the first maximum: ties go to the lowest id
    b, v = logits.shape
    z = logits.to(torch.float64) / float(temperature)  # [B, V]
    keep = filter_mask(z, int(top_k), float(top_p))
    u = uniform(seed, step, b, v)
    noisy = (z - torch.log(-torch.log(u))).masked_fill(~keep, float("-inf"))
    return torch.argmax(noisy, dim=-1)


def filter_mask(z: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """bool [B, V]: the ids surviving top-k (exactly k, ties ranked by the lower id), then top-p (the
    smallest prefix of the survivors, largest first, whose softmax mass over the survivors reaches
    top_p). Shapes depend on top_k / top_p only, never on values."""
    b, v = z.shape
    if not (0 < top_k < v) and top_p >= 1.0:
        return torch.ones_like(z, dtype=torch.bool)
    ranked, order = torch.sort(z, dim=-1, descending=True, stable=True)  # [B, V], ties to the lower id
    keep_ranked = torch.ones_like(ranked, dtype=torch.bool)
    if 0 < top_k < v:
        keep_ranked[:, top_k:] = False
    if top_p < 1.0:
        masked = ranked.masked_fill(~keep_ranked, float("-inf"))
        p = torch.exp(masked - masked[:, :1])
        p = p / p.sum(dim=-1, keepdim=True)
        before = torch.cumsum(p, dim=-1) - p  # mass of the strictly better-ranked survivors
        keep_ranked &= before < top_p  # up to and including the one that reaches top_p
    return torch.zeros_like(keep_ranked).scatter_(1, order, keep_ranked)
