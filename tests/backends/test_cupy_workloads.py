"""The CuPy timing workloads' own arguments, on the CPU (building their tensors needs no GPU until `build`)."""

import pytest

from sparkops.config import load_preset
from sparkops.errors import BadInput

from sparkops_cupy._workloads import attention_workload


@pytest.mark.parametrize("pos", [-1, 64])
def test_attention_workload_refuses_a_position_outside_its_cache(pos):
    with pytest.raises(BadInput, match=f"pos {pos} is not a row of a 64-row cache"):
        attention_workload(load_preset("kimi-linear-48b-a3b"), 64, pos=pos)


def test_attention_workload_names_a_short_context_by_its_position():
    cfg = load_preset("kimi-linear-48b-a3b")
    assert attention_workload(cfg, 64, pos=3).label == "MLA decode at pos 3 of a 64-row bf16 cache"
    assert attention_workload(cfg, 131072).target and not attention_workload(cfg, 131072, pos=63).target
