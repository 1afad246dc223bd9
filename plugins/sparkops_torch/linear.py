"""linear in torch: x @ W^T for every supported GGUF type (F32/F16/BF16 directly, blocks dequantized).

`linear` computes in float32 (CPU and CUDA). `linear_bf16` (CUDA) multiplies bfloat16 operands with
float32 accumulation: the tensor-core path, claimed under the "bf16" tolerance row. The weight
policy (CPU cache, CUDA tiles, nothing kept on the GPU) is in `_weights`.
"""

import torch

from ._common import last_dim
from ._weights import linear_t


def linear(x, weight):
    last_dim("linear", "x", x, weight.shape[-1])
    return linear_t(x, weight, torch.float32).to(x.dtype)  # [T, OUT]


def linear_bf16(x, weight):
    last_dim("linear", "x", x, weight.shape[-1])
    return linear_t(x, weight, torch.bfloat16).to(x.dtype)  # [T, OUT]
