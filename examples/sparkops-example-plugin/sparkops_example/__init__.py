"""An outside plugin adding one implementation, `swiglu=example_swiglu`, the way any package would."""

import torch

from sparkops.plugins import hookimpl, tolerance


def swiglu(gate, up):
    """silu(gate) * up in float32 with torch, on whatever device the tensors are on."""
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


@hookimpl
def register_implementations(register):
    register(op="swiglu", name="example_swiglu", backend="torch", devices=("cpu", "cuda"),
             fn=swiglu, claim=tolerance(), doc="the README's example plugin")
