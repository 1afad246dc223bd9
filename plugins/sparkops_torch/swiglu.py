"""swiglu in torch: silu(gate) * up in float32, output in gate's dtype."""

import torch.nn.functional as F

from ._common import f32, require


def swiglu(gate, up):
    require(gate.shape == up.shape, f"swiglu: gate {list(gate.shape)} and up {list(up.shape)} must have the same "
                                    f"shape")
    return (F.silu(f32(gate)) * f32(up)).to(gate.dtype)  # [T, F]
