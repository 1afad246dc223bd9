"""The CI check of a kernel's load schedule where a form exists for it: the compiled code (SASS) must issue the loads
the form is built to put in flight before the products that use them. No GPU needed (nvcc and nvdisasm).

mla_absorb_deep and mla_up_deep (attention=cupy_splitk_bf16_deep) exist because the plain absorb's SASS keeps ~5 loads ahead of its
products, so a thread waits out a chain of DRAM round trips for its 32 weights; the deep form requests all 32 weights
and its 32 query values first, for each activation dtype; the up projection's plain loop makes two round trips a
lane, the deep one requests its 16 weights and 16 obar values at once; the combine's slice loop keeps 4 slices' sums in
flight, the deep one 16. ptxas does so only with room for them (__maxnreg__(96):
left to itself it sinks each load back beside its product, as it did the router's, session 14).
"""

from __future__ import annotations

from tests.cuda_sass import KERNEL_DIR, listing, load_runs


def test_the_deep_absorb_requests_every_weight_first_and_the_plain_one_does_not(tmp_path):
    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    deep, plain = load_runs(functions["mla_absorb_deep"]), load_runs(functions["mla_absorb"])
    # one run of 64 loads (32 weights, 32 query values) a dtype path: bf16, fp32, fp16
    assert sum(r >= 64 for r in deep) == 3, f"mla_absorb_deep's runs of loads before a product: {deep}"
    assert max(plain) < 32, f"the plain absorb's runs: {plain} (if ptxas now batches them, the deep form may be moot)"


def test_the_deep_up_projection_requests_every_value_first(tmp_path):
    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    deep, plain = load_runs(functions["mla_up_deep"]), load_runs(functions["mla_up"])
    assert max(deep) >= 32, f"mla_up_deep's runs of loads before a product: {deep}"  # 16 weights + 16 obar values
    assert max(plain) < 32, f"the plain up projection's runs: {plain}"


def test_the_deep_combine_keeps_four_times_the_slices_in_flight(tmp_path):
    """The combine's slice loop: 4 sums requested ahead in the plain form, 16 in the deep one (the runs of the loops
    over part_m before it are the same in both)."""
    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    deep, plain = load_runs(functions["mla_combine_deep"]), load_runs(functions["mla_combine"])
    assert deep[:-1] == plain[:-1] and plain[-1] <= 4 and deep[-1] >= 16, (plain, deep)
