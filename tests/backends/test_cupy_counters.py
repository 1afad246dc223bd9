"""sparkops_cupy._counters: the arrival-counter pools of the last-block kernels (CPU-side behaviour; the pools
themselves are CUDA tensors, so those tests are GPU tests)."""

import pytest
import torch

from sparkops.errors import BadInput
from sparkops_cupy._counters import CounterPools

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
