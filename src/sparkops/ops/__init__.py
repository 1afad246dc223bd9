"""The named ops: one contract module each. `CONTRACTS` maps op name -> OpContract.

Read an op's meaning with `sparkops ops OP` or in `sparkops/ops/<op>.py`; its implementations live
in each plugin's `<op>.py` (plugins/sparkops_<backend>/), its tests in tests/ops/test_<op>.py.
"""

from __future__ import annotations

from importlib import import_module

from ..errors import UnknownName
from ._contract import Case, OpContract, Param, signature_mismatch

#: every named op, in the order a Kimi-Linear block uses them
OP_NAMES = (
    "embedding",
    "rmsnorm",
    "add_rmsnorm",
    "linear",
    "linear_add_rmsnorm",
    "quantize_act",
    "rmsnorm_quantize",
    "short_conv",
    "kda",
    "gated_rmsnorm",
    "kda_norm",
    "kda_lowrank_norm",
    "short_conv_kda_norm",
    "attention",
    "add_rmsnorm_router",
    "moe_router",
    "moe_experts",
    "moe_experts_add_rmsnorm",
    "swiglu",
    "sample",
)

CONTRACTS: dict[str, OpContract] = {n: import_module(f"{__name__}.{n}").CONTRACT for n in OP_NAMES}


def get_contract(op: str) -> OpContract:
    try:
        return CONTRACTS[op]
    except KeyError:
        raise UnknownName(f"unknown op '{op}'; the ops are: {', '.join(OP_NAMES)}") from None


__all__ = ["CONTRACTS", "OP_NAMES", "Case", "OpContract", "Param", "get_contract", "signature_mismatch"]
