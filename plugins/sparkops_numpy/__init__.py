"""The NumPy reference: the definition of every op, float64 inside (quantize_act: float32 by definition).

Each op lives in its own module here (`sparkops_numpy/<op>.py`); this module registers them through
the public hook, exactly as an outside plugin would.
"""

from sparkops.plugins import hookimpl, tolerance

#: (op, implementation name, "module:function"); the implementation named "numpy" is each op's reference
IMPLEMENTATIONS = [
    ("embedding", "numpy", "sparkops_numpy.embedding:embedding"),
    ("rmsnorm", "numpy", "sparkops_numpy.rmsnorm:rmsnorm"),
    ("add_rmsnorm", "numpy", "sparkops_numpy.add_rmsnorm:add_rmsnorm"),
    ("linear", "numpy", "sparkops_numpy.linear:linear"),
    ("linear_add_rmsnorm", "numpy", "sparkops_numpy.linear_add_rmsnorm:linear_add_rmsnorm"),
    ("quantize_act", "numpy", "sparkops_numpy.quantize_act:quantize_act"),
    ("rmsnorm_quantize", "numpy", "sparkops_numpy.rmsnorm_quantize:rmsnorm_quantize"),
    ("short_conv", "numpy", "sparkops_numpy.short_conv:short_conv"),
    ("kda", "numpy", "sparkops_numpy.kda:kda"),
    ("kda", "numpy_chunked", "sparkops_numpy.kda:kda_chunked"),
    ("gated_rmsnorm", "numpy", "sparkops_numpy.gated_rmsnorm:gated_rmsnorm"),
    ("kda_norm", "numpy", "sparkops_numpy.kda_norm:kda_norm"),
    ("kda_lowrank_norm", "numpy", "sparkops_numpy.kda_lowrank_norm:kda_lowrank_norm"),
    ("short_conv_kda_norm", "numpy", "sparkops_numpy.short_conv_kda_norm:short_conv_kda_norm"),
    ("attention", "numpy", "sparkops_numpy.attention:attention"),
    ("attention", "numpy_naive", "sparkops_numpy.attention:attention_naive"),
    ("add_rmsnorm_router", "numpy", "sparkops_numpy.add_rmsnorm_router:add_rmsnorm_router"),
    ("moe_router", "numpy", "sparkops_numpy.moe_router:moe_router"),
    ("moe_experts", "numpy", "sparkops_numpy.moe_experts:moe_experts"),
    ("moe_experts_add_rmsnorm", "numpy", "sparkops_numpy.moe_experts_add_rmsnorm:moe_experts_add_rmsnorm"),
    ("swiglu", "numpy", "sparkops_numpy.swiglu:swiglu"),
    ("sample", "numpy", "sparkops_numpy.sample:sample"),
]


@hookimpl
def register_implementations(register):
    for op, name, fn in IMPLEMENTATIONS:
        register(op=op, name=name, backend="numpy", devices=("cpu",), fn=fn, claim=tolerance())
