"""quantize_act in torch: ggml's Q8_0 row quantizer, bit-identical, float32 arithmetic throughout.

The divisions are tensor-by-tensor on purpose: torch may turn a division by a Python scalar into a
multiplication by its reciprocal (CUDA does), which is not the correctly rounded quotient ggml uses.
"""

import torch

from ._common import require

BLOCK = 32


def quantize_act(x):
    require(x.dim() == 2 and x.shape[-1] % BLOCK == 0,
            f"quantize_act: x must be [T, D] with D a multiple of {BLOCK}, got {list(x.shape)}")
    t, d = x.shape
    blocks = x.to(torch.float32).reshape(t, d // BLOCK, BLOCK)  # [T, nb, 32]
    amax = blocks.abs().amax(dim=-1)  # [T, nb]
    scale = amax / torch.full_like(amax, 127.0)  # d = max|x| / 127, float32
    inv = torch.where(scale == 0, torch.zeros_like(scale), torch.ones_like(scale) / scale)
    v = blocks * inv.unsqueeze(-1)
    a = v.abs()
    whole = torch.floor(a)
    rounded = torch.copysign(whole + torch.floor(2 * (a - whole)), v)  # half away from zero, exactly
    q = rounded.to(torch.int8).reshape(t, d)
    return q, scale.to(torch.float16).to(torch.float32)
