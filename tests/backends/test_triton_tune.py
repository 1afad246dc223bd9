"""sparkops_triton._tune's workloads are real calls of their ops: built on the CPU at small sizes and run through
the NumPy reference (the studies themselves time on a GPU; a malformed argument set would only show there)."""

from __future__ import annotations

import pytest
import torch

from sparkops.plugins import load_catalog

pytest.importorskip("triton")


def _reference(op: str):
    return load_catalog().reference(op).resolve()


def test_the_moe_workload_is_a_call_of_moe_experts():
    from sparkops_triton import _tune

    from gguf import GGMLQuantizationType as Q

    # k3-nano's rows (64 wide) are no multiple of Q4_K's 256: float32 blocks here, the 48B's Q4_K on the GPU
    fn, sets, nbytes, graph = _tune._moe_workload("k3-nano", device="cpu", qtype=Q.F32)
    assert graph and len(sets) == 16 and nbytes > 0
    ids = [tuple(s[2].flatten().tolist()) for s in sets]
    assert len(set(ids)) > 1  # each set routes to other experts
    y = _reference("moe_experts")(*sets[0])
    assert torch.isfinite(y).all() and y.shape == sets[0][0].shape


def test_the_linear_workloads_are_calls_of_linear():
    from sparkops_triton import _tune, linear

    fn, sets, nbytes, graph = _tune._linear_workload([(64, 256), (32, 512)], linear.Q4_K, 2, device="cpu")
    ws, xs = sets[0]
    ref = _reference("linear")
    for w, x in zip(ws, xs):
        y = ref(x, w)
        assert y.shape == (1, w.shape[0]) and torch.isfinite(y).all()
    assert nbytes == sum(w.nbytes + 4 * (w.shape[0] + w.shape[1]) for w in ws)


def test_an_unknown_study_is_named_before_anything_runs():
    from sparkops_triton import _tune

    with pytest.raises(SystemExit, match="no study warp_drive; the studies are kda_decode"):
        _tune.main(["linear_gemv", "warp_drive"])


def test_each_variant_is_labelled_by_what_it_changes():
    """Session 6's run printed every GEMV variant as the default: the label compared the variant's table with the
    module's live one, which the study had already set to that variant. The label uses the values from before."""
    from sparkops_triton import _tune, linear

    module, variants = _tune.STUDIES["linear_gemv"]
    saved = {k: getattr(module, k) for v in variants for k in v}
    labels = [_tune._label(v, saved) for v in variants]
    assert len(set(labels)) == len(labels), labels
    assert "as in the module" in labels[0] and str(int(linear.Q4_K.value)) in labels[1]


def test_the_q6k_studies_compare_the_two_fetches_at_their_shapes():
    """lm_head_q6k and linear_q6k_small time Q6_K GEMVs (the lm_head, a 4096 x 2304 layer): the default first (byte
    loads), then linear.Q6K_WIDE_LOADS at the default tile, then at other tiles; every variant names the switch (so a
    variant's setting does not leak into the next), each is labelled apart, and the small workload is a call of
    linear (one set, on the CPU, through the reference)."""
    from sparkops_triton import _tune, linear

    q6k = int(linear.Q6_K.value)
    for study in ("lm_head_q6k", "linear_q6k_small"):
        module, variants = _tune.STUDIES[study]
        assert module is linear and _tune.LINEAR_WORKLOADS[study][1] == linear.Q6_K
        assert all("Q6K_WIDE_LOADS" in v for v in variants)
        assert [v["Q6K_WIDE_LOADS"] for v in variants[:2]] == [False, True]
        assert variants[0]["GEMV_CONFIG"] == linear.GEMV_CONFIG
        assert variants[1]["GEMV_CONFIG"][q6k] == linear.GEMV_CONFIG[q6k] and len(variants) > 2
        saved = {k: getattr(module, k) for v in variants for k in v}
        labels = [_tune._label(v, saved) for v in variants]
        assert len(set(labels)) == len(labels), labels
    shapes, qtype, _ = _tune.LINEAR_WORKLOADS["linear_q6k_small"]
    assert shapes == [(4096, 2304)] and _tune.LINEAR_WORKLOADS["lm_head_q6k"][0] == [(163840, 2304)]
    fn, sets, nbytes, graph = _tune._linear_workload(shapes, qtype, 1, device="cpu")
    (w,), (x,) = sets[0]
    y = _reference("linear")(x, w)
    assert graph and y.shape == (1, 4096) and torch.isfinite(y).all()
    assert nbytes == w.nbytes + 4 * (4096 + 2304) and w.nbytes == 4096 * 9 * 210


def test_the_prefetch_studies_time_the_prefetch_implementations(monkeypatch):
    """moe_decode_prefetch, lm_head_prefetch and linear_gemv_prefetch time "triton_prefetch" (not "triton", which
    ignores FETCH_DEPTH) on their namesakes' workloads, and the _flat studies "triton_flat"; the prefetch studies'
    first variant is depth 1 and every variant names the depth (so one variant's depth does not leak into the
    next); every flat variant names the tile it sets, and the first is the module's default."""
    from sparkops_triton import _tune, linear, moe_experts

    seen = {}
    monkeypatch.setattr(_tune, "_linear_workload", lambda shapes, qtype, copies, impl=None: seen.setdefault(
        "linear", []).append((shapes, qtype, impl)))
    monkeypatch.setattr(_tune, "_moe_workload", lambda impl=None: seen.setdefault("moe", []).append(impl))
    for study in ("lm_head_prefetch", "linear_gemv_prefetch", "moe_decode_prefetch", "linear_gemv", "moe_decode",
                  "linear_gemv_flat", "moe_decode_flat"):
        _tune._workload(study)
    assert seen["moe"] == [moe_experts.moe_experts_prefetch, None, moe_experts.moe_experts_flat]
    lm, small, plain, flat = seen["linear"]
    assert flat[:2] == _tune.LINEAR_WORKLOADS["linear_gemv"][:2] and flat[2] is linear.linear_flat
    assert lm == ([(163840, 2304)], linear.Q6_K, linear.linear_prefetch)
    assert small[:2] == _tune.LINEAR_WORKLOADS["linear_gemv"][:2] and small[2] is linear.linear_prefetch
    assert plain[2] is linear.linear
    for study in ("moe_decode_prefetch", "lm_head_prefetch", "linear_gemv_prefetch"):
        variants = _tune.STUDIES[study][1]
        assert variants[0]["FETCH_DEPTH"] == 1 and all("FETCH_DEPTH" in v for v in variants)
        assert {v["FETCH_DEPTH"] for v in variants} == {1, 2, 3}
    lin_flat = _tune.STUDIES["linear_gemv_flat"][1]
    assert lin_flat[0]["GEMV_FLAT_CONFIG"] == linear.GEMV_FLAT_CONFIG and all("GEMV_FLAT_CONFIG" in v for v in lin_flat)
    moe_flat = _tune.STUDIES["moe_decode_flat"][1]
    assert (moe_flat[0]["FLAT_UP_ROWS"], moe_flat[0]["FLAT_DOWN_ROWS"]) == (moe_experts.FLAT_UP_ROWS,
                                                                             moe_experts.FLAT_DOWN_ROWS)
    assert all({"FLAT_UP_ROWS", "FLAT_DOWN_ROWS"} <= set(v) for v in moe_flat)


def test_every_study_sets_constants_its_module_has_and_starts_from_the_default():
    """A variant naming a constant the module lacks would set a new attribute and time the default under another
    label; each study's first variant is the module's configuration now (the baseline of its "nmse vs default")."""
    from sparkops_triton import _tune

    for study, (module, variants) in _tune.STUDIES.items():
        for v in variants:
            missing = [k for k in v if not hasattr(module, k)]
            assert not missing, f"{study}: {module.__name__} has no {missing}"
        if study in ("kda_prefill", "kda_prefill_split", "kda_prefill_split_tf32", "attention_prefill",
                     "attention_prefill_sdpa", "router_prefill", "dequant_bf16", "kda_decode", "attention_decode", "moe_decode"):
            assert all(getattr(module, k) == x for k, x in variants[0].items()), study
        labels = [_tune._label(v, {k: getattr(module, k) for v2 in variants for k in v2}) for v in variants]
        assert len(set(labels)) == len(labels), (study, labels)


def test_a_variant_is_the_default_plus_its_own_changes(monkeypatch):
    """A variant that names fewer constants than the one before it runs them at their defaults, not at the previous
    variant's values (kda_prefill's precision variants name no STATE_WARPS); the defaults come back after."""
    from sparkops_triton import _tune, kda_chunked

    seen = []
    variants = [{"STATE_WARPS": 4, "BLOCK_V": 16}, {"PREPARE_PRECISION": "tf32x3"}]
    monkeypatch.setitem(_tune.STUDIES, "probe", (kda_chunked, variants))
    monkeypatch.setattr(_tune, "_workload", lambda study: (lambda: None, [()], 1, False))
    monkeypatch.setattr(_tune, "_output", lambda fn, args: (seen.append(
        (kda_chunked.STATE_WARPS, kda_chunked.BLOCK_V, kda_chunked.PREPARE_PRECISION)), torch.ones(1))[1])
    monkeypatch.setattr(_tune, "time_calls", lambda *a, **k: "t")
    before = (kda_chunked.STATE_WARPS, kda_chunked.BLOCK_V, kda_chunked.PREPARE_PRECISION)
    _tune.run("probe")
    assert seen == [(4, 16, before[2]), (before[0], before[1], "tf32x3")]
    assert (kda_chunked.STATE_WARPS, kda_chunked.BLOCK_V, kda_chunked.PREPARE_PRECISION) == before


def test_every_variant_is_checked_on_the_inputs_the_default_saw(monkeypatch):
    """The timing calls advance a state argument in place (KDA's); the check of each later variant must still start
    from the first variant's inputs, so a variant that changes nothing reads nmse 0 (session 11's KDA studies read
    3.9e-05 for every variant before this)."""
    from sparkops_triton import _tune, kda_chunked

    def step(x, state):  # a state-space op: output from the state, the state advanced in place
        state.mul_(0.5).add_(x)
        return state.clone()

    def timing(fn, sets, nbytes, graph, replays):
        for args in sets:
            fn(*args)
        return "t"

    variants = [{"STATE_WARPS": kda_chunked.STATE_WARPS}, {"STATE_WARPS": kda_chunked.STATE_WARPS}]
    monkeypatch.setitem(_tune.STUDIES, "probe", (kda_chunked, variants))
    sets = [(torch.ones(4), torch.full((4,), 3.0))]
    monkeypatch.setattr(_tune, "_workload", lambda study: (step, sets, 1, False))
    monkeypatch.setattr(_tune, "time_calls", timing)
    rows = _tune.run("probe")
    assert [r.rsplit(" ", 1)[-1] for r in rows] == ["0.0e+00", "0.0e+00"], rows
