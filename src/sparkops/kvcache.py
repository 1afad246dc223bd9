"""The MLA latent cache's storage dtypes, and the one rounding that puts a row into each.

A cache row is [normed c ; k_pe] (spec 4). It is stored in the activation dtype (float32, bfloat16 or float16: a
plain cast, exact or round-to-nearest-even) or, asked for, in float8_e4m3fn: half the bytes of bfloat16. At 131072
tokens a Kimi-Linear-48B decode step reads its bf16 cache, 1.06 GB (7 layers x 576 values a token), beside ~1 GB of
IQ1_S weights: fp8 takes a quarter of the step's bytes away. The fp8 rounding is round-to-nearest-even after
clamping to the format's largest finite value (448), so that no finite value becomes NaN (e4m3fn has no infinity,
and torch's own cast has not saturated on every version) and NaN stays NaN. It carries no scale: the latent is an
RMS-normed vector and k_pe a projection of the same order, inside e4m3fn's normal range (2^-6 .. 448), as vLLM's fp8
KV cache runs by default (a scale of 1.0). What that rounding costs a model is the model gate's to judge (the
"fp8_cache" row of sparkops/gate/tolerances.py); an implementation that reads an fp8 cache claims that
variant and is proven against the reference on the same fp8 values.
"""

from __future__ import annotations

import numpy as np
import torch

from .errors import BadInput

FP8 = torch.float8_e4m3fn
#: the largest finite float8_e4m3fn value
FP8_MAX = 448.0
#: what --cache-dtype accepts (besides auto), by name
CACHE_DTYPES = {"float32": torch.float32, "f32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float16": torch.float16, "f16": torch.float16, "float8_e4m3fn": FP8, "fp8": FP8}


def parse_cache_dtype(text: str | None, option: str = "--cache-dtype") -> torch.dtype | None:
    """None for 'auto' (the activation dtype, or fp8 where the registry's attention is proven on fp8 caches)."""
    if text in (None, "auto"):
        return None
    if text not in CACHE_DTYPES:
        raise BadInput(f"{option} {text}: use auto, float32, bfloat16, float16 or float8_e4m3fn (fp8)")
    return CACHE_DTYPES[text]


def is_fp8(dtype: torch.dtype | None) -> bool:
    return dtype == FP8


def to_cache(rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`rows` [T, Lkv+R] as the cache stores them: a plain cast, or for fp8 the saturating round-to-nearest-even."""
    if dtype != FP8:
        return rows.to(dtype)
    # the clamp in the rows' own dtype (448 is exact in each; two kernels on a decode step's row, not three): each
    # float16 / bfloat16 / float32 value reaches the cast exactly, so the rounding is float32's
    return rows.clamp(-FP8_MAX, FP8_MAX).to(FP8)


def fp8_round_reference(x: np.ndarray) -> np.ndarray:
    """float64 values of float8_e4m3fn rounding, written from the format (sign, 4 exponent bits with bias 7, 3
    mantissa bits, subnormals below 2^-6, largest finite 448) and independent of torch's cast, which the tests hold
    to it: a value's quantum is 2^(e - 3) for its binade e >= -6 (2^-9 among the subnormals), and it rounds to the
    nearest multiple, ties to even, after the clamp to +-448. NaN stays NaN."""
    x = np.asarray(x, np.float64)
    clamped = np.clip(x, -FP8_MAX, FP8_MAX)
    mag = np.abs(clamped)
    with np.errstate(divide="ignore", invalid="ignore"):
        binade = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    quantum = np.exp2(np.maximum(binade, -6.0) - 3.0)
    out = np.rint(clamped / quantum) * quantum  # np.rint: ties to even
    return np.where(np.isnan(x), np.nan, out)



def attention_claims_fp8(plan) -> bool | None:
    """Whether the attention of `plan` (a registry.plan.Plan) is proven on fp8 caches (claims fp8_cache, itself or
    through its bit-identity target); None without a plan or an attention entry."""
    from .gate.check import resolve_claim
    from .gate.tolerances import FP8_CACHE
    from .plugins import load_catalog

    entry = plan.entries.get("attention") if plan is not None else None
    if entry is None or entry.runs is None:
        return None
    return resolve_claim(entry.runs, load_catalog())[1] == FP8_CACHE


def resolve_cache_dtype(plan, dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    """The MLA cache dtype an engine on `plan` runs with: `requested`, or (None, auto) float8_e4m3fn where the
    registry's attention claims fp8_cache and the activation dtype otherwise. An fp8 cache asked of an attention not
    proven on one, or another cache asked of one that is, is refused naming the fix: no cache dtype runs unproven."""
    fp8_attention = attention_claims_fp8(plan)
    if requested is None:
        return FP8 if fp8_attention else dtype
    name = plan.entries["attention"].runs.key if fp8_attention is not None else "attention"
    if is_fp8(requested) and fp8_attention is False:
        raise BadInput(f"--cache-dtype float8_e4m3fn: {name} is not proven on an fp8 cache (its claim is not "
                       f"fp8_cache); select an attention that is, e.g. `sparkops swap attention=torch_fp8cache` or "
                       f"attention=cupy_splitk_fp8_deep_active_pdl on CUDA, or leave the cache dtype auto")
    if fp8_attention and not is_fp8(requested):
        raise BadInput(f"--cache-dtype {str(requested).replace('torch.', '')}: {name} reads a float8_e4m3fn cache "
                       f"(claim fp8_cache); leave the cache dtype auto, or select another attention for this cache")
    return requested


def registry_cache_dtype(registry, device: str, dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    """resolve_cache_dtype for a registry file as it would run on `device` (what the bench gates and fills)."""
    from .plugins import load_catalog
    from .registry.file import Registry
    from .registry.plan import make_plan

    return resolve_cache_dtype(make_plan(Registry.load(registry), load_catalog(), device, verify_checks=False),
                               dtype, requested)
