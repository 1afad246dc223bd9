"""The CuPy plugin on any machine (no GPU needed): what it registers, why it is unavailable here, and the
kernel-source bookkeeping that keeps compiled kernels and check records honest.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import sparkops_cupy
from sparkops.ops import get_contract, signature_mismatch
from sparkops.plugins import load_catalog
from sparkops_cupy import _runtime as rt


def test_every_implementation_registers_with_a_matching_signature():
    catalog = load_catalog()
    cupy_plugin = next(p for p in catalog.plugins if p.name == "cupy")
    assert cupy_plugin.status == "ok" and not cupy_plugin.rejected, cupy_plugin.error or cupy_plugin.rejected
    for op, name, spec, *_ in sparkops_cupy.IMPLEMENTATIONS:
        impl = catalog.get(op, name)
        assert impl.backend == "cupy" and impl.devices == ("cuda",)
        module, _, attr = spec.partition(":")
        fn = getattr(importlib.import_module(module), attr)  # importable without cupy
        assert signature_mismatch(get_contract(op), fn) is None


def test_unavailable_reason_names_the_fix():
    why = rt.unavailable_reason()
    if importlib.util.find_spec("cupy") is None:
        assert why == "cupy is not installed (pip install sparkops[gpu])"
    elif not torch.cuda.is_available():
        assert why == rt.NO_CUDA
    else:
        assert why is None or "cupy" in why
    for impl in load_catalog().by_op["linear"].values():
        if impl.backend == "cupy":
            assert impl.unavailable == why


def test_sources_cover_headers_so_records_go_stale_when_a_header_changes():
    impl = load_catalog().get("linear", "cupy_dp4a")
    names = {p.name for p in impl.source_files()}
    assert {"linear.py", "linear.cu", "quant_dot.cuh", "common.cuh", "_runtime.py", "_weights.py"} <= names
    assert rt.source_files("attention.cu") == ("kernels/attention.cu", "kernels/common.cuh", "kernels/bulk_copy.cuh")


def test_compile_cache_key_follows_every_byte_of_the_expanded_source():
    src = rt.expanded_source("linear.cu")
    assert '#include "' not in src and "struct DotQ4_K" in src and "bf16_to_f32" in src
    assert src.count("__device__ __forceinline__ float bf16_to_f32") == 1  # each header once
    key = rt.module_key(src, (9, 0))
    assert key != rt.module_key(src + " ", (9, 0))
    assert key != rt.module_key(src, (8, 0))
    assert key == rt.module_key(src, (9, 0))


def test_cpu_tensors_are_refused_with_a_clear_error():
    from sparkops.errors import BadInput
    from sparkops_cupy.rmsnorm import rmsnorm

    with pytest.raises(BadInput, match="on cpu.*CUDA"):
        rmsnorm(torch.randn(2, 64), torch.randn(64), 1e-5)


def test_the_attention_split_keeps_its_partial_sums_bounded():
    """Decode splits a long context 64 ways; a 32768-token prefill must not (64 x T x N x Lkv floats would
    be 137 GB - the out-of-memory the per-op benchmarks hit on the H200 in session 3)."""
    from sparkops_cupy.attention import SPLIT_WORKSPACE_BYTES, generic_splits

    assert generic_splits(131072) == 64 and generic_splits(64) == 2  # decode: ~32 rows a slice, at most 64
    for t in (1, 7, 4096, 32768):
        s = generic_splits(32768, t, 32, 512)
        assert s >= 1 and (s == 1 or s * t * 32 * 512 * 4 <= SPLIT_WORKSPACE_BYTES)
    assert generic_splits(32768, 32768, 32, 512) == 1


def test_the_router_kernel_states_which_calls_it_takes():
    """moe_router=cupy_rowwarp's policy (sparkops_cupy.moe_router.rowwarp_serves), decided on shapes and dtypes
    alone: up to ROUTER_MAX_T tokens of a float activation, a float32 weight of rows a multiple of 4, at most 512
    experts, top_k and n_group at most 32 (one warp routes). Everything else goes to the torch plugin's router."""
    from sparkops_cupy.moe_router import ROUTER_MAX_T, rowwarp_serves

    x, w = torch.zeros(1, 2304, dtype=torch.bfloat16), torch.zeros(256, 2304)
    assert rowwarp_serves(x, w, 8, 1)
    assert rowwarp_serves(torch.zeros(ROUTER_MAX_T, 2304), w, 8, 1)
    assert not rowwarp_serves(torch.zeros(ROUTER_MAX_T + 1, 2304), w, 8, 1)  # a prefill chunk
    assert not rowwarp_serves(x, w.bfloat16(), 8, 1)
    assert not rowwarp_serves(torch.zeros(1, 2306), torch.zeros(256, 2306), 8, 1)
    assert not rowwarp_serves(x, torch.zeros(513, 2304), 8, 1)
    assert not rowwarp_serves(x, w, 33, 1) and not rowwarp_serves(x, w, 8, 33)
    assert not rowwarp_serves(torch.zeros(1, 2304, dtype=torch.float64), w, 8, 1)
