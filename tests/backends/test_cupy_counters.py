"""sparkops_cupy._counters: the arrival-counter pools of the last-block kernels (CPU-side behaviour; the pools
themselves are CUDA tensors, so those tests are GPU tests)."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops_cupy import _counters
from sparkops_cupy._counters import RAN_FORMS, RAN_SCRATCHES, CounterPools, ran_form, ran_scratch

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine); run "
                                                                "bench/gpu_suite.sh on a GPU")


def test_no_pool_exists_before_the_first_call():
    assert CounterPools("op", 8).on(torch.device("cuda", 0)) is None


@gpu
@pytest.mark.gpu
def test_a_pool_is_zeros_of_its_size_kept_per_device_and_lane_and_apart_between_ops():
    dev = torch.device("cuda", 0)
    a, b = CounterPools("a", 8), CounterPools("b", 8)
    pa = a.get(dev)
    assert pa.dtype == torch.int32 and pa.shape == (8,) and not pa.any()
    assert a.get(dev) is pa and a.on(dev) is pa and b.get(dev) is not pa


@gpu
@pytest.mark.gpu
def test_a_first_call_inside_a_capture_is_refused_by_name():
    pools = CounterPools("my_op", 8)
    graph = torch.cuda.CUDAGraph()
    try:
        with pytest.raises(BadInput, match="my_op: the arrival counters"):
            with torch.cuda.graph(graph):
                pools.get(torch.device("cuda", 0))
    finally:
        graph.reset()


def test_the_arrival_codes_are_row_add_norm_s_in_order():
    """The kernel reads the code: RAN_FLAT 0, RAN_TREE 1, RAN_RELEASE 2, RAN_RELAXED 3 (kernels/row_add_norm.cuh)."""
    from pathlib import Path

    import sparkops_cupy

    src = (Path(sparkops_cupy.__file__).parent / "kernels" / "row_add_norm.cuh").read_text()
    for code, name in enumerate(RAN_FORMS + _counters.TIMING_ONLY_FORMS):
        assert f"#define RAN_{name.upper()} {code}\n" in src
        if name in RAN_FORMS:
            assert ran_form("op", name) == code


def test_the_pool_holds_the_tree_s_counters_then_the_global_scratch():
    """RAN_POOL int32s: 1 + RAN_GROUPS counters, then a float a warp (at most 32) from RAN_PART_OFFSET."""
    from pathlib import Path

    import sparkops_cupy

    src = (Path(sparkops_cupy.__file__).parent / "kernels" / "row_add_norm.cuh").read_text()
    assert "#define RAN_GROUPS 32\n" in src and "#define RAN_PART_OFFSET (1 + RAN_GROUPS)\n" in src
    assert _counters.RAN_POOL == 1 + 32 + 32


def test_the_timing_only_arrival_is_refused_unless_a_side_by_side_asks(monkeypatch):
    with pytest.raises(BadInput, match=r"op: the arrival 'relaxed' is for timing only.*sparkops_cupy.op.ARRIVAL"):
        ran_form("op", "relaxed")
    monkeypatch.setattr(_counters, "TIMING_ONLY", True)
    assert ran_form("op", "relaxed") == 3


def test_an_unknown_arrival_or_scratch_is_refused_naming_the_constant():
    with pytest.raises(BadInput, match=r"op: the arrival's forms are \['flat', 'tree', 'release'\], not 'ring'"):
        ran_form("op", "ring")
    with pytest.raises(BadInput, match=r"op: the scratch's forms are \['shared', 'global'\].*sparkops_cupy.op.SCRATCH"):
        ran_scratch("op", "local")
    assert [ran_scratch("op", s) for s in RAN_SCRATCHES] == ["norm", "normg"]
    assert _counters.ran_choice("op", "tree", "global") == ("normg", 1)
