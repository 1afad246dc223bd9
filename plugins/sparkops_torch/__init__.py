"""The torch plugin: every op in torch, on CPU and CUDA; the fast CPU default and a GPU reference.

Each op lives in its own module (`sparkops_torch/<op>.py`); shared pieces are the GGUF dequantizers
(`dequant.py`), the weight policy (`_weights.py`: CPU cache, CUDA tiles) and small numerics
(`_common.py`). Implementations that import them list them in `sources`, so a change to a shared
piece invalidates the check records of everything built on it.

Precision: float32 inside everywhere (KDA state and gates, router, softmax, norm statistics);
sampling filters and draws in float64. The `*_bf16` implementations (CUDA) run the big matmuls on
bfloat16 operands with float32 accumulation and claim the "bf16" tolerance row; their softmax,
norms and state stay float32.
"""

import torch

from sparkops.plugins import hookimpl, tolerance

BOTH = ("cpu", "cuda")
_W = ("_weights.py", "dequant.py", "_common.py")  # the weight path
_C = ("_common.py",)

#: (op, name, "module:function", devices, variant, shared sources)
IMPLEMENTATIONS = [
    ("embedding", "torch", "sparkops_torch.embedding:embedding", BOTH, None, _W),
    ("rmsnorm", "torch", "sparkops_torch.rmsnorm:rmsnorm", BOTH, None, _C),
    ("add_rmsnorm", "torch", "sparkops_torch.add_rmsnorm:add_rmsnorm", BOTH, None, _C),
    ("linear", "torch", "sparkops_torch.linear:linear", BOTH, None, _W),
    ("linear", "torch_bf16", "sparkops_torch.linear:linear_bf16", ("cuda",), "bf16", _W),
    ("linear_add_rmsnorm", "torch", "sparkops_torch.linear_add_rmsnorm:linear_add_rmsnorm", BOTH, None,
     (*_W, "add_rmsnorm.py", "linear.py")),
    ("quantize_act", "torch", "sparkops_torch.quantize_act:quantize_act", BOTH, None, _C),
    ("rmsnorm_quantize", "torch", "sparkops_torch.rmsnorm_quantize:rmsnorm_quantize", BOTH, None, _C),
    ("short_conv", "torch", "sparkops_torch.short_conv:short_conv", BOTH, None, _C),
    ("kda", "torch", "sparkops_torch.kda:kda", BOTH, None, _C),
    ("kda", "torch_recurrent", "sparkops_torch.kda:kda_recurrent", BOTH, None, _C),
    ("kda", "torch_chunked", "sparkops_torch.kda:kda_chunked", BOTH, None, _C),
    ("gated_rmsnorm", "torch", "sparkops_torch.gated_rmsnorm:gated_rmsnorm", BOTH, None, _C),
    ("kda_norm", "torch", "sparkops_torch.kda_norm:kda_norm", BOTH, None, (*_C, "kda.py", "gated_rmsnorm.py")),
    ("kda_lowrank_norm", "torch", "sparkops_torch.kda_lowrank_norm:kda_lowrank_norm", BOTH, None,
     (*_W, "kda.py", "gated_rmsnorm.py", "kda_norm.py")),
    ("short_conv_kda_norm", "torch", "sparkops_torch.short_conv_kda_norm:short_conv_kda_norm", BOTH, None,
     (*_C, "short_conv.py", "kda.py", "gated_rmsnorm.py", "kda_norm.py")),
    ("attention", "torch", "sparkops_torch.attention:attention", BOTH, None, _C),
    ("attention", "torch_bf16", "sparkops_torch.attention:attention_bf16", ("cuda",), "bf16", _C),
    ("attention", "torch_fp8cache", "sparkops_torch.attention:attention_fp8cache", BOTH, "fp8_cache", _C),
    ("add_rmsnorm_router", "torch", "sparkops_torch.add_rmsnorm_router:add_rmsnorm_router", BOTH, None,
     (*_C, "add_rmsnorm.py", "moe_router.py")),
    ("moe_router", "torch", "sparkops_torch.moe_router:moe_router", BOTH, None, _C),
    ("moe_experts", "torch", "sparkops_torch.moe_experts:moe_experts", BOTH, None, _W),
    ("moe_experts", "torch_bf16", "sparkops_torch.moe_experts:moe_experts_bf16", ("cuda",), "bf16", _W),
    ("moe_experts_add_rmsnorm", "torch", "sparkops_torch.moe_experts_add_rmsnorm:moe_experts_add_rmsnorm", BOTH, None,
     (*_W, "add_rmsnorm.py", "moe_experts.py")),
    ("swiglu", "torch", "sparkops_torch.swiglu:swiglu", BOTH, None, _C),
    ("sample", "torch", "sparkops_torch.sample:sample", BOTH, None, _C),
]


def _unavailable(devices: tuple[str, ...]) -> str | None:
    if devices == ("cuda",) and not torch.cuda.is_available():
        return f"needs a CUDA device; torch {torch.__version__} sees none"
    return None


@hookimpl
def register_implementations(register):
    for op, name, fn, devices, variant, sources in IMPLEMENTATIONS:
        register(op=op, name=name, backend="torch", devices=devices, fn=fn, claim=tolerance(variant),
                 unavailable=_unavailable(devices), sources=sources)
