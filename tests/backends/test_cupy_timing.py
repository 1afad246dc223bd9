"""Device time of every CuPy kernel at the 48B's decode shapes, printed against the 4.04 TB/s ceiling.

Real random data, argument sets rotated so that together they are 3x the L2, CUDA events around many
calls replayed from one captured CUDA graph (sparkops_cupy._workloads). The figures are printed (run
pytest with -s), not asserted: speed goals are judged on the bench (bench/test_bench_cupy.py), where
the cupy, triton and torch implementations run side by side. This test does fail when a kernel cannot
be captured in a CUDA graph, since the decode step must be.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.bench import perop_kernels
from sparkops.bench.perop import write_record
from sparkops.plugins import load_catalog

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy import IMPLEMENTATIONS  # noqa: E402
from sparkops_cupy._workloads import describe, profile_kernels, time_op, workloads  # noqa: E402

WORKLOADS = workloads()
#: the implementation timed per op (the fp32-claim one; attention's bf16 claim runs the same function)
IMPL = {op: name for op, name, *_ in reversed(IMPLEMENTATIONS)}
_rows: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def table():
    yield
    if _rows:
        print("\n\ncupy kernels at the 48B decode shapes (device time per call):")
        print("\n".join(_rows))


@pytest.mark.parametrize("w", WORKLOADS, ids=[f"{w.op}:{w.label}" for w in WORKLOADS])
def test_time_at_48b_shape(w):
    impl = load_catalog().get(w.op, IMPL[w.op])
    sets, nbytes = w.build(torch.device("cuda"), 1234)
    t = time_op(w.op, impl.resolve(), sets, nbytes)
    line = f"{w.op:>12} {w.label:<48} {describe(t)}" + (f"   goal: {w.target}" if w.target else "")
    _rows.append(line)
    print(line)
    assert t.mode == "graph", f"{impl.key} could not be captured in a CUDA graph: {t.mode}"
    assert 0 < t.fraction <= 1.05, f"{impl.key}: {100 * t.fraction:.0f}% of the ceiling cannot be right (bytes?)"


def _decode_linears():
    """The 48B's decode linears as the fused step calls `linear`: (type, OUT, IN, what, calls per token). fuse_projections
    stacks the weights that read one input, so a KDA layer's q/k/v are one GEMV, an MLA layer's q and kv_a one, the
    dense layer's gate and up one. The shared expert is not here: moe_experts runs it with the routed ones. (Session 13
    found this list had the shared expert's two GEMVs, 52 calls a token, and MLA q and kv_a apart: 113 calls against the
    step's 56 Q4_K linears, which made the per-token sums overstate the step's linear time.)"""
    from gguf import GGMLQuantizationType as Q

    from sparkops.config import load_preset

    cfg = load_preset("kimi-linear-48b-a3b")
    d, v, p = cfg.hidden_size, cfg.vocab_size, cfg.kda_inner
    kinds = cfg.layer_kinds
    n_kda, n_mla = sum(k == "kda" for k in kinds), sum(k != "kda" for k in kinds)
    n_dense = sum(not cfg.is_moe(i) for i in range(cfg.num_layers))
    return [
        (Q.Q6_K, v, d, "lm_head", 1),
        (Q.Q4_K, 3 * p, d, "kda q/k/v fused", n_kda),
        (Q.Q4_K, d, p, "kda o_proj", n_kda),
        (Q.Q4_K, cfg.mla_heads * cfg.qk_head_dim + cfg.latent_dim, d, "mla q/kv_a fused", n_mla),
        (Q.Q4_K, d, cfg.mla_heads * cfg.v_head_dim, "mla o_proj", n_mla),
        (Q.Q4_K, 2 * cfg.intermediate_size, d, "dense gate+up fused", n_dense),
        (Q.Q4_K, d, cfg.intermediate_size, "dense down", n_dense),
    ]


def _side_by_side(names, shapes, title, dtype=torch.float32, record: str | None = None):
    """Each shape timed under each linear implementation (a name, or a label: callable) on the same argument sets in
    one CUDA graph each; printed with the calls per token and the per-token sums (the step's gain or loss follows by
    Amdahl). `dtype`: the activations'. `record`: with SPARKOPS_PEROP_DIR set, the sums are also written to
    $SPARKOPS_PEROP_DIR/perop-RECORD.json, from which bench/perop_factor.py gives a rung its --expect."""
    from sparkops_cupy._workloads import linear_workload

    impls = names if isinstance(names, dict) else {n: load_catalog().get("linear", n).resolve() for n in names}
    rows, per_token = [], dict.fromkeys(impls, 0.0)
    for qt, out_f, in_f, what, calls in shapes:
        w = linear_workload(qt, out_f, in_f, what, dtype=dtype)
        sets, nbytes = w.build(torch.device("cuda"), 99)
        times = {n: time_op("linear", fn, sets, nbytes) for n, fn in impls.items()}
        assert all(t.mode == "graph" for t in times.values()), {n: t.mode for n, t in times.items()}
        for n, t in times.items():
            per_token[n] += calls * t.seconds
        rows.append(f"{w.label:<48} x{calls:<3} " + "  ".join(
            f"{n} {t.seconds * 1e6:7.2f} us ({100 * t.fraction:3.0f}%)" for n, t in times.items()))
    print(f"\n{title}:\n  " + "\n  ".join(rows))
    print("  these linears per token: " + ", ".join(f"{n} {s * 1e6:.0f} us" for n, s in per_token.items()))
    if record:
        write_record(record, title, per_token, dtype=str(dtype), rows=rows)
    return per_token


def test_float_gemv_side_by_side_with_the_integer_one_and_triton():
    """The rung's per-op evidence for linear=cupy_float: the Q6_K lm_head (what it is for) and the 48B's Q4_K
    projections as the fused decode step calls linear (`_decode_linears`), each timed under cupy_float, cupy_dp4a and
    triton_lastblock (the step's linear) on the same argument sets in one CUDA graph each. Printed with the calls per token, so that the step's
    gain or loss follows by Amdahl; asserted only that each was captured."""
    _side_by_side(("triton_lastblock", "cupy_dp4a", "cupy_float"), _decode_linears(),
                  "linear T=1, float vs integer cupy GEMV vs triton_lastblock")


def test_x16_lm_head_side_by_side_with_cupy_float():
    """The rung's per-op evidence for linear@Q6_K=cupy_x16_pdl: the 48B's lm_head (163840 x 2304 Q6_K, one call a
    token) with bfloat16 activations (the step's) under cupy_float (the step's lm_head), cupy_dp4a (int8 activations,
    refused by the gate in session 6: the integer stream's speed for comparison) and cupy_x16_pdl in its form X16_FORM,
    with each other form forced as a column of its own; the record perop-x16-bfloat16.json is the rung's forecast."""
    from sparkops_cupy import linear as cl

    fn = load_catalog().get("linear", "cupy_x16_pdl").resolve()

    def forced(form):
        def call(x, weight):
            was = cl.X16_FORM
            cl.X16_FORM = form
            try:
                return fn(x, weight)
            finally:
                cl.X16_FORM = was
        return call

    impls = {n: load_catalog().get("linear", n).resolve() for n in ("cupy_float", "cupy_dp4a", "cupy_x16_pdl")}
    impls.update({f"cupy_x16_pdl {f}": forced(f) for f in cl.X16_FORMS if f != cl.X16_FORM})
    _side_by_side(impls, _decode_linears()[:1], "linear T=1 bfloat16, the lm_head: x16 vs float cupy GEMV",
                  dtype=torch.bfloat16, record="x16-bfloat16")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_rowwarp_gemv_side_by_side_with_triton(dtype):
    """The rung's per-op evidence for linear@Q4_K=cupy_rowwarp: the 48B's Q4_K decode projections under
    triton_lastblock (the step's linear), cupy_rowwarp, cupy_rowhalf (its copy form in packed half2, session 15), and
    each of cupy_rowwarp's forms forced (a warp per row, a warp per 4 rows; the octet form with the block's rows copied
    to shared memory first: what rowwarp_form chooses between; the same copy in two groups, session 16; the staged
    form), with bfloat16 activations (the bf16
    registries' step) and float32.
    The per-token sums are the prediction's input: the step's linear time falls by their difference. Asserted: each
    was captured in a graph, and the row-warp kernel's bf16 sum is not above triton_lastblock's (it exists to be
    faster at these shapes)."""
    from sparkops_cupy import linear as cl
    from sparkops_cupy._runtime import DTYPE_CODE, cuda_device
    from sparkops_cupy._weights import kernel_weight

    def forced(form):
        def call(x, weight):
            dev = cuda_device("linear", x=x)
            y = torch.empty((1, weight.shape[0]), dtype=x.dtype, device=dev)
            cl.launch_rowwarp(x, DTYPE_CODE[x.dtype], kernel_weight("linear", "weight", weight, dev),
                              weight.shape[0], weight.shape[1], y, form)
            return y
        return call

    cat = load_catalog()
    impls = {"triton_lastblock": cat.get("linear", "triton_lastblock").resolve(),
             "cupy_rowwarp": cat.get("linear", "cupy_rowwarp").resolve(),
             "cupy_rowhalf": cat.get("linear", "cupy_rowhalf").resolve(),
             "cupy_rowwarp_copy2": cat.get("linear", "cupy_rowwarp_copy2").resolve(),
             "cupy_rowwarp_copy2x": cat.get("linear", "cupy_rowwarp_copy2x").resolve(),
             "warp form": forced("warp"), "octet form": forced("octet"), "copy form": forced("copy"),
             "copy2 form": forced("copy2"), "copyx form": forced("copyx"), "copy2x form": forced("copy2x"),
             "staged form": forced("staged")}
    shapes = [s for s in _decode_linears() if s[3] != "lm_head"]
    per_token = _side_by_side(impls, shapes, f"linear T=1 Q4_K {dtype}, row-warp forms vs triton_lastblock", dtype,
                              record=f"rowwarp-{str(dtype).removeprefix('torch.')}")
    if dtype == torch.bfloat16:
        assert per_token["cupy_rowwarp"] <= per_token["triton_lastblock"], per_token


def test_rowwarp_q8_gemv_side_by_side_with_the_pdl_gemv():
    """The rung's per-op evidence for linear@Q4_K=cupy_rowwarp_pdl_q8 (the PDL copy form on Q8 activations and
    __dp4a) and for cupy_rowwarp_pdl_q8_tall (that form for the tall weights only, session 32): the 48B's Q4_K decode
    projections under cupy_rowwarp_pdl (the step's), cupy_rowwarp_pdl_q8 and cupy_rowwarp_pdl_q8_tall, bf16
    activations, each in one CUDA graph: perop-rowq8-bfloat16.json. Asserted: each was captured; which is faster is
    printed, not asserted."""
    shapes = [s for s in _decode_linears() if s[3] != "lm_head"]
    per_token = _side_by_side(("cupy_rowwarp_pdl", "cupy_rowwarp_pdl_q8", "cupy_rowwarp_pdl_q8_tall"), shapes,
                              "linear T=1 Q4_K bf16, the Q8 PDL GEMV vs the PDL GEMV", torch.bfloat16,
                              record="rowq8-bfloat16")
    a, b, c = (per_token[n] for n in ("cupy_rowwarp_pdl", "cupy_rowwarp_pdl_q8", "cupy_rowwarp_pdl_q8_tall"))
    print(f"cupy_rowwarp_pdl_q8 against cupy_rowwarp_pdl, a token's Q4_K GEMVs: x{a / b:.3f}; "
          f"cupy_rowwarp_pdl_q8_tall (Q8 tall, float short): x{a / c:.3f}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_mma_gemv_side_by_side_with_rowwarp_and_triton(dtype):
    """The rung's per-op evidence for linear@Q4_K=cupy_mma: the step's Q4_K decode linears under triton_lastblock,
    cupy_rowwarp (the step's linear@Q4_K since session 13), cupy_mma (its default form) and each of cupy_mma's forms
    forced. Recorded as perop-mma-DTYPE.json (the rung's --expect is cupy_rowwarp's sum over cupy_mma's); asserted
    only that each was captured in a graph."""
    from sparkops_cupy import linear as cl
    from sparkops_cupy._runtime import DTYPE_CODE, cuda_device
    from sparkops_cupy._weights import kernel_weight

    def forced(form):
        def call(x, weight):
            dev = cuda_device("linear", x=x)
            y = torch.empty((1, weight.shape[0]), dtype=x.dtype, device=dev)
            cl.launch_mma(x, DTYPE_CODE[x.dtype], kernel_weight("linear", "weight", weight, dev), weight.shape[0],
                          weight.shape[1], y, form)
            return y
        return call

    cat = load_catalog()
    impls = {n: cat.get("linear", n).resolve() for n in ("triton_lastblock", "cupy_rowwarp", "cupy_mma")}
    impls.update({f"mma {form}": forced(form) for form in cl.MMA_FORMS})
    shapes = [s for s in _decode_linears() if s[3] != "lm_head"]
    _side_by_side(impls, shapes, f"linear T=1 Q4_K {dtype}, tensor cores vs row-warp vs triton_lastblock", dtype,
                  record=f"mma-{str(dtype).removeprefix('torch.')}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_floatrow_gemv_side_by_side_with_triton(dtype):
    """The rung's per-op evidence for linear@F16=cupy_floatrow: the 48B's F16 decode linears (KDA's stacked
    f_a|g_a|beta and its f_b, g_b, as the fused step without fuse_low_rank calls them) under triton_lastblock (the
    step's linear for F16), cupy_floatrow and cupy_float. Recorded as perop-floatrow-DTYPE.json for the rung's
    --expect; asserted only that each was captured in a graph (no speed is promised before a GPU has measured it)."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.config import load_preset

    cfg = load_preset("kimi-linear-48b-a3b")
    n_kda = sum(k == "kda" for k in cfg.layer_kinds)
    dk, h, d, p = cfg.kda_head_dim, cfg.kda_heads, cfg.hidden_size, cfg.kda_inner
    shapes = [(Q.F16, 2 * dk + h, d, "kda f_a|g_a|beta fused", n_kda), (Q.F16, p, dk, "kda f_b, g_b", 2 * n_kda)]
    _side_by_side(("triton_lastblock", "cupy_floatrow", "cupy_float"), shapes,
                  f"linear T=1 F16 {dtype}, float rows vs triton_lastblock", dtype,
                  record=f"floatrow-{str(dtype).removeprefix('torch.')}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_rowwarp_and_mma_moe_side_by_side_with_triton(dtype):
    """The rung's per-op evidence for moe_experts=cupy_rowwarp: one token through the 48B's Q4_K experts (256 of
    them, top-8, the shared expert) under triton_prefetch (the decode step's moe_experts), cupy_rowwarp and
    triton_lastblock, on the same argument sets in one CUDA graph each. Printed per layer and per token (x the MoE
    layers), each pair of cupy_rowwarp's forms (ROWWARP_GATEUP, ROWWARP_DOWN) on its own, cupy_mma (the tensor
    cores) in its default form and each form forced, cupy_rowhalf (gate/up in packed half2, session 15) and
    cupy_rowwarp_pdl (the copy/warp pair with programmatic dependent launch, session 16); recorded
    as perop-moe-DTYPE.json with SPARKOPS_PEROP_DIR set; asserted only that each was captured (session 13's first run:
    35.9 us against triton_prefetch's 34.9, so no speed is promised here: the figure decides the forms and whether it
    becomes a rung)."""
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import moe_workload

    cfg = load_preset("kimi-linear-48b-a3b")
    from gguf import GGMLQuantizationType as Q

    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    import sparkops_cupy.moe_experts as cm

    cat = load_catalog()
    rowwarp = cat.get("moe_experts", "cupy_rowwarp").resolve()
    defaults = (cm.ROWWARP_GATEUP, cm.ROWWARP_DOWN)

    def forms(gateup, down):
        def call(*args, **kwargs):
            cm.ROWWARP_GATEUP, cm.ROWWARP_DOWN = gateup, down
            try:
                return rowwarp(*args, **kwargs)
            finally:
                cm.ROWWARP_GATEUP, cm.ROWWARP_DOWN = defaults
        return call

    impls = {n: cat.get("moe_experts", n).resolve()
             for n in ("triton_prefetch", "triton_lastblock", "cupy_mma", "cupy_rowhalf", "cupy_rowwarp_pdl")}
    mma, mma_default = impls["cupy_mma"], cm.MOE_MMA_FORM

    def mma_form(form):
        def call(*args, **kwargs):
            cm.MOE_MMA_FORM = form
            try:
                return mma(*args, **kwargs)
            finally:
                cm.MOE_MMA_FORM = mma_default
        return call

    impls.update({f"cupy_mma {form}": mma_form(form) for form in cm.MOE_MMA_FORMS})
    for gateup in ("octet", "copy", "staged"):
        for down in ("warp", "copy"):
            impls[f"cupy_rowwarp {gateup}/{down}"] = forms(gateup, down)
    _per_layer(moe_workload(cfg, Q.Q4_K, dtype), impls, 7, layers, f"moe-{str(dtype).removeprefix('torch.')}")


def _per_layer(w, impls, seed, layers, record):
    """A layer's op under each implementation on the same argument sets of workload `w`, one CUDA graph each: asserted
    captured, printed per layer and per token (x `layers`), and with SPARKOPS_PEROP_DIR set written to
    perop-RECORD.json (a rung's --expect over it, bench/perop_factor.py); with SPARKOPS_PEROP_KERNELS set too, each
    column's graph replayed once more under the profiler, kernel by kernel, into kernels-RECORD.json and printed
    (sparkops.bench.perop_kernels). Returns the timings."""
    sets, nbytes = w.build(torch.device("cuda"), seed)
    times = {n: time_op(w.op, fn, sets, nbytes) for n, fn in impls.items()}
    assert all(t.mode == "graph" for t in times.values()), {n: t.mode for n, t in times.items()}
    write_record(record, w.label, {n: layers * t.seconds for n, t in times.items()})
    print(f"\n{w.op} {w.label}: " + "  ".join(
        f"{n} {t.seconds * 1e6:7.2f} us ({100 * t.fraction:3.0f}%), {layers * t.seconds * 1e6:.0f} us a token"
        for n, t in times.items()))
    if perop_kernels.wanted():  # each column's replay kernel by kernel (SPARKOPS_PEROP_KERNELS)
        try:  # a lead beside the record: a profiler that saw nothing is said, and fails no proof
            columns = {n: perop_kernels.summarize(profile_kernels(t.run), t.calls) for n, t in times.items()}
        except ValueError as exc:
            print(f"kernels-{record}.json not written: {exc}")
        else:
            perop_kernels.write_kernels(record, w.label, columns)
            print(perop_kernels.render(columns))
    return times


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_rowwarp_router_side_by_side_with_triton(dtype):
    """The rung's per-op evidence for moe_router=cupy_rowwarp: one token through the 48B's router (2304 x 256 float32,
    top-8) under triton_prefetch (the decode step's moe_router), triton_lastblock and cupy_rowwarp (its default of
    2 warps a block, and 1 and 4), on the same argument sets in one CUDA graph each; printed per layer and per token
    (x the MoE layers), recorded as perop-router-DTYPE.json with SPARKOPS_PEROP_DIR set. Asserted: each was captured,
    and cupy_rowwarp is not slower than triton_prefetch (it exists to be faster: session 14's diagnosis put the step's
    router at 7.3 us a layer; the first form, session 15's call 3, lost: 8.3-9.2 against 7.6 us, and the rung was left
    out)."""
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import router_workload

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    cat = load_catalog()
    impls = {n: cat.get("moe_router", n).resolve() for n in ("triton_prefetch", "triton_lastblock", "cupy_rowwarp")}
    import sparkops_cupy.moe_router as cmr

    def warps(n):  # cupy_rowwarp at another block size (ROUTER_WARPS, read at each call)
        def call(*args, **kwargs):
            default, cmr.ROUTER_WARPS = cmr.ROUTER_WARPS, n
            try:
                return impls["cupy_rowwarp"](*args, **kwargs)
            finally:
                cmr.ROUTER_WARPS = default
        return call

    impls.update({f"cupy_rowwarp {n} warps": warps(n) for n in (1, 4)})
    times = _per_layer(router_workload(cfg, dtype), impls, 5, layers, f"router-{str(dtype).removeprefix('torch.')}")
    assert times["cupy_rowwarp"].seconds <= times["triton_prefetch"].seconds, times


def test_router_pdl_pairs_side_by_side():
    """The rung's per-op evidence for add_rmsnorm=triton_pdl with moe_router=cupy_rowwarp_pdl: the 48B's norm-and-router
    pair (bf16 activations, the router's 2304 x 256 float32 weight), one a layer, under the step's pair (add_rmsnorm=
    triton, moe_router=triton_prefetch), the same norm with cupy_rowwarp, and the triggering norm with the PDL router,
    on the same argument sets in one CUDA graph each; recorded as perop-routerpdl-bfloat16.json (per token, x the MoE
    layers). A pair's time stands for the router's in the forecast: it understates the router's share of a saving
    (the norm's time is in the denominator). Asserted: each was captured and timed. Not asserted: that the PDL pair
    beats the plain cupy_rowwarp pair, which PDL exists to do - GPU session 21 measured it 1.4% slower twice (8.80
    against 8.67 us, 8.83 against 8.71), with x then read (wrongly) before the wait; the line printed says which won,
    and the rung's forecast is this record's."""
    pytest.importorskip("triton")
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import router_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_trigger

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    cat = load_catalog()
    routers = {n: cat.get("moe_router", n).resolve() for n in ("triton_prefetch", "cupy_rowwarp", "cupy_rowwarp_pdl")}
    g = torch.Generator().manual_seed(21)
    d = cfg.hidden_size
    resid = torch.randn(1, d, generator=g).to("cuda", torch.bfloat16)
    gain = torch.randn(d, generator=g).to("cuda")

    def pair(norm, router):
        def call(x, *rest):
            f, _ = norm(x, resid, gain, cfg.rms_norm_eps)
            return router(f, *rest)
        return call

    impls = {"triton_prefetch": pair(add_rmsnorm, routers["triton_prefetch"]),
             "cupy_rowwarp": pair(add_rmsnorm, routers["cupy_rowwarp"]),
             "cupy_rowwarp_pdl": pair(add_rmsnorm_trigger, routers["cupy_rowwarp_pdl"])}
    times = _per_layer(router_workload(cfg, torch.bfloat16), impls, 9, layers, "routerpdl-bfloat16")
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    pdl, plain = times["cupy_rowwarp_pdl"].seconds, times["cupy_rowwarp"].seconds
    print(f"PDL pair against the plain cupy_rowwarp pair: x{plain / pdl:.3f} "
          f"({'faster' if pdl < plain else 'NOT faster'}: {pdl * 1e6:.2f} against {plain * 1e6:.2f} us)")


def test_norm_router_fused_side_by_side():
    """The rung's per-op evidence for [engine] fuse_router_norm (stage rungs36): the 48B's FFN norm and router, one a
    MoE layer (bf16 activations, the router's 2304 x 256 float32 weight), as the step chains them (add_rmsnorm=
    triton_pdl letting moe_router=cupy_rowwarp_pdl start) against add_rmsnorm_router=cupy_rowwarp_pdl (the three in
    one PDL launch), on the same argument sets in one CUDA graph each; recorded as perop-normrouter-bfloat16.json
    (per token, x the MoE layers): the chain column over the fused one is the rung's forecast. Asserted: each was
    captured and timed, and the fused kernel took its calls itself (its counters were used and left at zero). Not
    asserted: that it is faster - the rung says that; the line printed says which won."""
    pytest.importorskip("triton")
    from sparkops.config import load_preset
    from sparkops_cupy import add_rmsnorm_router as car
    from sparkops_cupy._workloads import router_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    router = load_catalog().get("moe_router", "cupy_rowwarp_pdl").resolve()
    g = torch.Generator().manual_seed(31)
    d, eps = cfg.hidden_size, cfg.rms_norm_eps
    resid = torch.randn(1, d, generator=g).mul(3.0).to("cuda", torch.bfloat16)  # [1, D] the residual stream
    gain = (1.0 + 0.1 * torch.randn(d, generator=g)).to("cuda")  # [D]

    def chain(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
        f, _ = add_rmsnorm_trigger(x, resid, gain, eps)
        return router(f, weight, bias, top_k, n_group, topk_group, scale, renorm_eps)

    def fused(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps):
        return car.add_rmsnorm_router_rowwarp_pdl(x, resid, gain, eps, weight, bias, top_k, n_group, topk_group, scale,
                                                  renorm_eps)[2:]

    times = _per_layer(router_workload(cfg, torch.bfloat16), {"chain": chain, "cupy_rowwarp_pdl": fused}, 31, layers,
                       "normrouter-bfloat16")
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    pool = car.pool_on(torch.device("cuda", torch.cuda.current_device()))
    assert pool is not None and int(pool.abs().sum()) == 0, "the fused kernel's counters were not used, or left set"
    c, f = times["chain"].seconds, times["cupy_rowwarp_pdl"].seconds
    print(f"the fused norm and router against the chain: x{c / f:.3f} ({'faster' if f < c else 'NOT faster'}: "
          f"{f * 1e6:.2f} against {c * 1e6:.2f} us a layer)")


def _router_form_side_by_side(form: str, seed: int, record: str) -> tuple[float, float]:
    """The 48B's norm-and-router pair as the step chains it (add_rmsnorm=triton_pdl letting the PDL router start; bf16
    activations, the 2304 x 256 float32 router weight, a weight per MoE layer), under cupy_rowwarp_pdl and under
    moe_router=FORM, on the same argument sets in one CUDA graph each; recorded as perop-RECORD.json (per token, x the
    MoE layers). Asserted: each was captured and timed, and the two routed every call alike (the same bits). Returns
    the two routers' seconds a layer (the step's, then FORM's)."""
    pytest.importorskip("triton")
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import router_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    cat = load_catalog()
    routers = {n: cat.get("moe_router", n).resolve() for n in ("cupy_rowwarp_pdl", form)}
    g = torch.Generator().manual_seed(seed)
    d = cfg.hidden_size
    resid = torch.randn(1, d, generator=g).to("cuda", torch.bfloat16)
    gain = torch.randn(d, generator=g).to("cuda")
    outs: dict[str, list] = {n: [] for n in routers}

    def pair(name):
        def call(x, *rest):
            f, _ = add_rmsnorm_trigger(x, resid, gain, cfg.rms_norm_eps)
            return routers[name](f, *rest)
        return call

    work = router_workload(cfg, torch.bfloat16)
    sets, _ = work.build(torch.device("cuda"), seed)
    for name in routers:  # eager, once a set: both forms' picks and weights, bit for bit
        for args in sets:
            outs[name].append(pair(name)(*args.values()))
    for (wa, ia), (wb, ib) in zip(outs["cupy_rowwarp_pdl"], outs[form]):
        assert torch.equal(ia, ib) and torch.equal(wa, wb)
    times = _per_layer(work, {n: pair(n) for n in routers}, seed, layers, record)
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    return times["cupy_rowwarp_pdl"].seconds, times[form].seconds


def test_router_sorted_tail_side_by_side():
    """The rung's per-op evidence for moe_router=cupy_rowwarp_pdl_sorted (stage rungs37): _router_form_side_by_side,
    recorded as perop-routersort-bfloat16.json. Not asserted: that the sorted tail is faster - the rung says that; the
    line printed says which won."""
    a, b = _router_form_side_by_side("cupy_rowwarp_pdl_sorted", 37, "routersort-bfloat16")
    print(f"the sorted routing tail against cupy_rowwarp_pdl: x{a / b:.3f} ({'faster' if b < a else 'NOT faster'}: "
          f"{b * 1e6:.2f} against {a * 1e6:.2f} us a layer)")


def test_router_merge_side_by_side():
    """The rung's per-op evidence for moe_router=cupy_rowwarp_pdl_merge (stage rungs56): _router_form_side_by_side,
    recorded as perop-routermerge-bfloat16.json. Not asserted: that the merged picks are faster - the rung says that;
    the line printed says which won."""
    a, b = _router_form_side_by_side("cupy_rowwarp_pdl_merge", 42, "routermerge-bfloat16")
    print(f"the merged routing picks against cupy_rowwarp_pdl: x{a / b:.3f} ({'faster' if b < a else 'NOT faster'}: "
          f"{b * 1e6:.2f} against {a * 1e6:.2f} us a layer)")


def _short_gemv_after_the_gated_norm(forms: tuple[str, str], seed: int, record: str) -> tuple[float, float]:
    """KDA's gated norm (32 heads of 128, the triggering "triton_pdl" form) then the o_proj-sized GEMV (2304 x 4096
    Q4_K, bf16) reading it, a pair a set, under the two linear implementations `forms` (the step's, then the new one),
    on the same argument sets in one CUDA graph each; recorded as perop-RECORD.json (per token, x the 28 short GEMVs
    of a token: 20 KDA and 7 MLA o_proj, and the dense down). Asserted: each was captured and timed, and both gave the
    same bits. Returns the two forms' seconds a pair."""
    pytest.importorskip("triton")
    from gguf import GGMLQuantizationType as Q

    from sparkops_cupy._workloads import linear_workload
    from sparkops_triton.gated_rmsnorm import gated_rmsnorm_trigger

    cat = load_catalog()
    impls = {n: cat.get("linear", n).resolve() for n in forms}
    g = torch.Generator().manual_seed(seed)
    gate = torch.randn(1, 32, 128, generator=g).to("cuda", torch.bfloat16)  # [1, H, Dv] the output gate
    head_gain = torch.randn(128, generator=g).to("cuda")  # [Dv]

    def pair(name):
        def call(x, weight):
            normed = gated_rmsnorm_trigger(x.reshape(1, 32, 128), gate, head_gain, 1e-5).reshape(1, 4096)
            return impls[name](normed, weight)
        return call

    work = linear_workload(Q.Q4_K, 2304, 4096, "o_proj", dtype=torch.bfloat16)
    sets, _ = work.build(torch.device("cuda"), seed)
    outs = {n: [pair(n)(*s.values()) for s in sets] for n in forms}
    assert all(torch.equal(a, b) for a, b in zip(*outs.values())), f"{forms[1]}'s bits are not {forms[0]}'s"
    times = _per_layer(work, {n: pair(n) for n in forms}, seed, 28, record)
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    return times[forms[0]].seconds, times[forms[1]].seconds


def test_q8_gemv_shortplain_after_the_gated_norm_side_by_side():
    """The rung's per-op evidence for linear@Q4_K=cupy_rowwarp_pdl_q8_shortplain (stage rungs38): the gated norm then
    the o_proj-sized Q8 GEMV, launched with PDL (cupy_rowwarp_pdl_q8, the step's) and plainly (shortplain), as
    _short_gemv_after_the_gated_norm times them; recorded as perop-q8plain-bfloat16.json. The step's own predecessor is
    the fused KDA recurrence, which this does not have: the record is a forecast, the rung the answer. Which was faster
    is printed."""
    a, b = _short_gemv_after_the_gated_norm(("cupy_rowwarp_pdl_q8", "cupy_rowwarp_pdl_q8_shortplain"), 38,
                                            "q8plain-bfloat16")
    print(f"the plain short GEMV against the PDL one after the gated norm: x{a / b:.3f} "
          f"({'faster' if b < a else 'NOT faster'}: {b * 1e6:.2f} against {a * 1e6:.2f} us a pair)")


def test_q8_tall_xpf_after_the_gated_norm_side_by_side():
    """The rung's per-op evidence for linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xpf (stage rungs51): the gated norm then the
    o_proj-sized GEMV under cupy_rowwarp_pdl_q8_tall (the step's: the float warp form with PDL for this shape) and
    under _xpf (the same kernel prefetching x into L1 after its wait), as _short_gemv_after_the_gated_norm times them;
    recorded as perop-q8xpf-bfloat16.json. Which was faster is printed."""
    a, b = _short_gemv_after_the_gated_norm(("cupy_rowwarp_pdl_q8_tall", "cupy_rowwarp_pdl_q8_tall_xpf"), 51,
                                            "q8xpf-bfloat16")
    print(f"the o_proj GEMV with x prefetched after its wait against the step's: x{a / b:.3f} "
          f"({'faster' if b < a else 'NOT faster'}: {b * 1e6:.2f} against {a * 1e6:.2f} us a pair)")


def test_q8_tall_xregs_after_the_gated_norm_side_by_side():
    """The rung's per-op evidence for linear@Q4_K=cupy_rowwarp_pdl_q8_tall_xr (stage rungs52): the gated norm then the
    o_proj-sized GEMV under cupy_rowwarp_pdl_q8_tall (the step's) and under _xr (the same sums, x loaded into registers
    two rounds at a time after the wait), as _short_gemv_after_the_gated_norm times them; recorded as
    perop-q8xr-bfloat16.json. Which was faster is printed."""
    a, b = _short_gemv_after_the_gated_norm(("cupy_rowwarp_pdl_q8_tall", "cupy_rowwarp_pdl_q8_tall_xr"), 52,
                                            "q8xr-bfloat16")
    print(f"the o_proj GEMV with x in registers after its wait against the step's: x{a / b:.3f} "
          f"({'faster' if b < a else 'NOT faster'}: {b * 1e6:.2f} against {a * 1e6:.2f} us a pair)")


def test_norm_wait_after_the_o_proj_side_by_side():
    """The rung's per-op evidence for add_rmsnorm=triton_pdl_wait (stage rungs43): the 48B's o_proj (2304 x 4096 Q4_K,
    bf16, linear@Q4_K=cupy_rowwarp_pdl_q8_tall: the step's, a PDL kernel that lets the next start early) then the FFN
    norm reading its output, a pair a set, under the step's norm (triton_pdl: launched after the GEMV ends, the gain
    requested after the summed row's store) and the dependent form (triton_pdl_wait), and the GEMV alone ("no norm"),
    on the same argument sets in one CUDA graph each; recorded as perop-normwait-bfloat16.json (per token, x the 54
    norms of a token: each KDA and MLA layer's two, the second after the MoE down, which this does not have).
    `perop_factor.py --minus "no norm"` takes the GEMV's column from both pairs: the norm's own time in the chain,
    before over after, the rung's --expect. Asserted: each was captured and timed, and both norms gave the same bits.
    Which was faster is printed."""
    pytest.importorskip("triton")
    from gguf import GGMLQuantizationType as Q

    from sparkops_cupy._workloads import linear_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger, add_rmsnorm_wait

    linear = load_catalog().get("linear", "cupy_rowwarp_pdl_q8_tall").resolve()
    g = torch.Generator().manual_seed(43)
    resid = (3 * torch.randn(1, 2304, generator=g)).to("cuda", torch.bfloat16)  # [1, D] the residual stream
    gain = (1.0 + 0.1 * torch.randn(2304, generator=g)).to("cuda")  # [D]
    norms = {"triton_pdl": add_rmsnorm_trigger, "triton_pdl_wait": add_rmsnorm_wait}

    def pair(name):
        def call(x, weight):
            y = linear(x, weight)  # [1, D]
            return y if name == "no norm" else norms[name](y, resid, gain, 1e-5)
        return call

    work = linear_workload(Q.Q4_K, 2304, 4096, "o_proj", dtype=torch.bfloat16)
    sets, _ = work.build(torch.device("cuda"), 43)
    outs = {n: [pair(n)(*s.values()) for s in sets] for n in norms}
    for a, b in zip(outs["triton_pdl"], outs["triton_pdl_wait"]):
        assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(a, b))
    times = _per_layer(work, {n: pair(n) for n in (*norms, "no norm")}, 43, 54, "normwait-bfloat16")
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    a, b, lin = (times[n].seconds for n in ("triton_pdl", "triton_pdl_wait", "no norm"))
    print(f"the dependent norm against the step's after the o_proj: x{a / b:.3f} a pair "
          f"({'faster' if b < a else 'NOT faster'}: {b * 1e6:.2f} against {a * 1e6:.2f} us); the norm's own time in "
          f"the chain {(b - lin) * 1e6:.2f} against {(a - lin) * 1e6:.2f} us")


def test_oproj_norm_fused_side_by_side():
    """The rung's per-op evidence for [engine] fuse_oproj_norm (stage rungs47): the 48B's o_proj (2304 x 4096 Q4_K,
    bf16, the warp form with PDL: the step's, linear@Q4_K=cupy_rowwarp_pdl_q8_tall runs it for short weights) then the
    FFN's residual add and norm (add_rmsnorm=triton_pdl), a pair a set, against the two as one op (linear_add_rmsnorm=
    cupy_rowwarp_pdl_norm: the norm in the GEMV's last block), the same with its other arrival forms ("arrival flat",
    "arrival tree", ... : every value of ARRIVALS but the module's own; "scratch shared", ...: of SCRATCHES; the
    timing-only relaxed arrival), and the GEMV alone ("no norm"), on the same argument sets in one CUDA graph each;
    recorded as perop-oprojnorm-bfloat16.json (per token, x the 27 attention layers).
    `perop_factor.py --minus "no norm"` gives the norm's own time in the chain over what the fold adds to the GEMV;
    the fused column less "no norm" (--gap) is that addition a layer, the critical-path forecast's shift. Asserted:
    each was captured and timed, the counter left at zero, and both gave the same summed stream (the projection's
    bits are the warp form's). Which was faster is printed."""
    pytest.importorskip("triton")
    from gguf import GGMLQuantizationType as Q

    from sparkops_cupy import linear_add_rmsnorm as cln
    from sparkops_cupy._workloads import linear_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    linear = load_catalog().get("linear", "cupy_rowwarp_pdl_q8_tall").resolve()
    g = torch.Generator().manual_seed(53)
    resid = (3 * torch.randn(1, 2304, generator=g)).to("cuda", torch.bfloat16)  # [1, D] the residual stream
    gain = (1.0 + 0.1 * torch.randn(2304, generator=g)).to("cuda")  # [D]

    def pair(name):
        def call(x, weight):
            if name == "cupy_rowwarp_pdl_norm":
                return cln.linear_add_rmsnorm_rowwarp_pdl(x, weight, resid, gain, 1e-5)
            y = linear(x, weight)  # [1, D]
            return y if name == "no norm" else add_rmsnorm_trigger(y, resid, gain, 1e-5)
        return call

    work = linear_workload(Q.Q4_K, 2304, 4096, "o_proj", dtype=torch.bfloat16)
    sets, _ = work.build(torch.device("cuda"), 53)
    for s in sets[:3]:
        a, b = pair("chain")(*s.values()), pair("cupy_rowwarp_pdl_norm")(*s.values())
        assert torch.equal(a[1].view(torch.int16), b[1].view(torch.int16)), "the summed streams differ"
    names = ("chain", "cupy_rowwarp_pdl_norm", "no norm")
    impls = {n: pair(n) for n in names}
    for label, form in _fold_form_columns(cln).items():
        def other(*args, inner=pair("cupy_rowwarp_pdl_norm"), form=form, **kwargs):
            with form():
                return inner(*args, **kwargs)
        impls[label] = other
    times = _per_layer(work, impls, 53, 27, "oprojnorm-bfloat16")
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    assert not cln.counters(torch.device("cuda", torch.cuda.current_device())).any()
    c, f, lin = (times[n].seconds for n in names)
    print(f"the o_proj with the norm in its last block against the pair: x{c / f:.3f} "
          f"({'faster' if f < c else 'NOT faster'}: {f * 1e6:.2f} against {c * 1e6:.2f} us); the norm's own time in "
          f"the chain {(c - lin) * 1e6:.2f} us, what the fold adds to the GEMV {(f - lin) * 1e6:.2f}")


def _form_columns(module, attr: str, forms, label: str) -> dict:
    """Side-by-side columns for a form constant's other values: "LABEL VALUE" -> a context manager factory that sets
    module.ATTR to VALUE while a chain runs and puts it back after (the value the module has now is the implementation's
    own column)."""
    import contextlib

    def forced(value):
        @contextlib.contextmanager
        def form():
            was = getattr(module, attr)
            setattr(module, attr, value)
            try:
                yield
            finally:
                setattr(module, attr, was)
        return form

    return {label.format(v): forced(v) for v in forms if v != getattr(module, attr)}


def _fold_form_columns(module) -> dict:
    """A norm fold's other forms as columns (its module's own is the implementation's column): every other arrival
    ("arrival flat", ...), every other scratch ("scratch shared", ...) and the timing-only relaxed arrival."""
    return {**_form_columns(module, "ARRIVAL", module.ARRIVALS, "arrival {}"),
            **_form_columns(module, "SCRATCH", module.SCRATCHES, "scratch {}"), **_timing_only_arrival(module)}


def _timing_only_arrival(module) -> dict:
    """The relaxed arrival's column ("arrival relaxed (timing only)"): module.ARRIVAL "relaxed" with
    sparkops_cupy._counters.TIMING_ONLY set while a chain runs (its bits are not asserted: the last block may read rows
    not yet visible to it). What the column less the module's own says: what each block's GPU-scope release costs."""
    import contextlib

    from sparkops_cupy import _counters

    @contextlib.contextmanager
    def form():
        was = module.ARRIVAL, _counters.TIMING_ONLY
        module.ARRIVAL, _counters.TIMING_ONLY = "relaxed", True
        try:
            yield
        finally:
            module.ARRIVAL, _counters.TIMING_ONLY = was
    return {"arrival relaxed (timing only)": form}


def _experts_after_the_router_timed(form: str, record: str, seed: int, variants: dict | None = None,
                                    more: tuple[str, ...] = ()) -> None:
    """A PDL experts form's per-op evidence: the 48B's MoE layer as the step chains it - the triggering norm
    (add_rmsnorm=triton_pdl), the PDL router (2304 x 256 float32, top-8; a router weight per MoE layer, so that they do
    not live in the L2), then the experts (Q4_K, 256 of them, the shared one) - under cupy_rowwarp_pdl and under FORM,
    on the same argument sets in one CUDA graph each; recorded as perop-RECORD.json (per token, x the MoE layers). The
    forms exist for their overlap with the kernel before, so the experts are not timed alone: the chain's norm and
    router sit in both figures, which understates the experts' own gain in the forecast. `variants`: more columns,
    name -> a context manager factory that puts FORM in another form while its chain runs; `more`: other
    implementations' columns. Asserted: each was captured; which is faster is printed, not asserted."""
    pytest.importorskip("triton")
    from gguf import GGMLQuantizationType as Q

    from sparkops.config import load_preset
    from sparkops_cupy import moe_router as cmr
    from sparkops_cupy._workloads import Workload, moe_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    d, e = cfg.hidden_size, cfg.n_experts
    g = torch.Generator().manual_seed(seed)
    routers = [((torch.randn(e, d, generator=g) * d ** -0.5).to("cuda"), (torch.randn(e, generator=g) * 0.1).to("cuda"))
               for _ in range(layers)]  # [E, D], [E]: 61 MB together, past the L2
    resid = torch.randn(1, d, generator=g).to("cuda", torch.bfloat16)
    gain = torch.randn(d, generator=g).to("cuda")
    route = dict(top_k=cfg.n_experts_per_token, n_group=cfg.n_group, topk_group=cfg.topk_group,
                 scale=cfg.routed_scaling_factor, renorm_eps=cfg.router_renorm_eps)
    cat = load_catalog()

    def chain(name):
        experts, at = cat.get("moe_experts", name).resolve(), [0]

        def call(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):  # the set's routing is not used
            rw, rb = routers[at[0] % layers]
            at[0] += 1
            f, _ = add_rmsnorm_trigger(x, resid, gain, cfg.rms_norm_eps)
            wts, idx = cmr.moe_router_rowwarp_pdl(f, rw, rb, **route)
            return experts(f, wts, idx, w_gate, w_up, w_down, s_gate, s_up, s_down)
        return call

    base = moe_workload(cfg, Q.Q4_K, torch.bfloat16)
    w = Workload(base.op, base.label + ", after its norm and router", base.build)
    names = ("cupy_rowwarp_pdl", form)
    impls = {n: chain(n) for n in names + more}
    for label, variant in (variants or {}).items():
        inner = chain(form)

        def call(*args, inner=inner, variant=variant, **kwargs):
            with variant():
                return inner(*args, **kwargs)
        impls[label] = call
    times = _per_layer(w, impls, seed, layers, record)
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    plain, new = (times[n].seconds for n in names)
    print(f"{form} against cupy_rowwarp_pdl, the chain a layer: x{plain / new:.3f} "
          f"({'faster' if new < plain else 'NOT faster'}: {new * 1e6:.2f} against {plain * 1e6:.2f} us)")


def test_experts_norm_fused_side_by_side():
    """The rung's per-op evidence for [engine] fuse_moe_norm (stage rungs46): the 48B's MoE layer as the step chains
    it - the triggering FFN norm (add_rmsnorm=triton_pdl), the PDL router (a 2304 x 256 float32 weight per MoE layer),
    the experts (moe_experts=cupy_rowwarp_pdl_q8_hidden, Q4_K, the shared one), then the next block's residual add and
    norm (add_rmsnorm=triton_pdl again) - against the same with the experts and that norm as one op
    (moe_experts_add_rmsnorm=cupy_rowwarp_pdl_q8_hidden_norm), and the chain cut after the experts ("no closing norm")
    and after the router ("no experts"), and the fused op with its other arrival forms ("arrival flat", "arrival
    tree", ...: the last block picked by one acq_rel counter, a tree of them, or a release-only counter) and its
    other scratch ("scratch shared", ...: the last block's flag and sums in shared memory or in the pool) and the
    timing-only relaxed arrival (_timing_only_arrival), on the same argument sets in one CUDA graph each;
    recorded as perop-moenorm-bfloat16.json (per token, x the MoE layers). `perop_factor.py --minus "no experts"` gives
    the experts-and-norm's own time over the fused op's (the rung's --expect, on moe_experts); the fused column less
    "no closing norm" is the norm's cost in the down's tail (the critical-path forecast's shift). Asserted: each was
    captured and timed, the fused op's counter left at zero, and the two gave the same summed stream (the experts' bits
    are the pair's). Which was faster is printed."""
    pytest.importorskip("triton")
    from gguf import GGMLQuantizationType as Q

    from sparkops.config import load_preset
    from sparkops_cupy import moe_experts_add_rmsnorm as cmn
    from sparkops_cupy import moe_router as cmr
    from sparkops_cupy._workloads import Workload, moe_workload
    from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(cfg.is_moe(i) for i in range(cfg.num_layers))
    d, e, eps = cfg.hidden_size, cfg.n_experts, cfg.rms_norm_eps
    g = torch.Generator().manual_seed(47)
    routers = [((torch.randn(e, d, generator=g) * d ** -0.5).to("cuda"), (torch.randn(e, generator=g) * 0.1).to("cuda"))
               for _ in range(layers)]  # [E, D], [E]: 61 MB together, past the L2
    resid = (3 * torch.randn(1, d, generator=g)).to("cuda", torch.bfloat16)  # [1, D] the residual stream
    gain, gain2 = ((1.0 + 0.1 * torch.randn(d, generator=g)).to("cuda") for _ in range(2))  # [D] the two norms'
    route = dict(top_k=cfg.n_experts_per_token, n_group=cfg.n_group, topk_group=cfg.topk_group,
                 scale=cfg.routed_scaling_factor, renorm_eps=cfg.router_renorm_eps)
    experts = load_catalog().get("moe_experts", "cupy_rowwarp_pdl_q8_hidden").resolve()

    def chain(name):
        at = [0]

        def call(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):  # the set's routing is not used
            rw, rb = routers[at[0] % layers]
            at[0] += 1
            f, h = add_rmsnorm_trigger(x, resid, gain, eps)
            wts, idx = cmr.moe_router_rowwarp_pdl(f, rw, rb, **route)
            if name == "no experts":
                return wts, idx
            w = (w_gate, w_up, w_down, s_gate, s_up, s_down)
            if name == "cupy_rowwarp_pdl_q8_hidden_norm":
                return cmn.moe_experts_add_rmsnorm_q8_hidden(f, wts, idx, *w, h, gain2, eps)
            y = experts(f, wts, idx, *w)
            return y if name == "no closing norm" else add_rmsnorm_trigger(y, h, gain2, eps)
        return call

    base = moe_workload(cfg, Q.Q4_K, torch.bfloat16)
    w = Workload(base.op, base.label + ", between its norm and the next", base.build)
    sets, _ = w.build(torch.device("cuda"), 47)
    for s in sets[:3]:
        a, b = chain("chain")(**s), chain("cupy_rowwarp_pdl_q8_hidden_norm")(**s)
        assert torch.equal(a[1].view(torch.int16), b[1].view(torch.int16)), "the summed streams differ"
    names = ("chain", "cupy_rowwarp_pdl_q8_hidden_norm", "no closing norm", "no experts")
    impls = {n: chain(n) for n in names}
    for label, form in _fold_form_columns(cmn).items():
        inner = chain("cupy_rowwarp_pdl_q8_hidden_norm")

        def other(*args, inner=inner, form=form, **kwargs):
            with form():
                return inner(*args, **kwargs)
        impls[label] = other
    times = _per_layer(w, impls, 47, layers, "moenorm-bfloat16")
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    assert not cmn.counters(torch.device("cuda", torch.cuda.current_device())).any()
    c, f, nn, ne = (times[n].seconds for n in names)
    print(f"the experts with the norm in the down's last block against the chain: x{(c - ne) / (f - ne):.3f} "
          f"({'faster' if f < c else 'NOT faster'}: {(f - ne) * 1e6:.2f} against {(c - ne) * 1e6:.2f} us a layer); "
          f"the norm's cost in the down's tail {(f - nn) * 1e6:.2f} us, its own in the chain {(c - nn) * 1e6:.2f}")


def test_experts_shared_first_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_shared (the shared expert's gate/up rows copied
    while the router runs): perop-expshared-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_shared", "expshared-bfloat16", 26)


def test_experts_wide_down_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_wide (down's whole row requested before its wait
    for gate/up): perop-expwide-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_wide", "expwide-bfloat16", 27)


def test_experts_split_down_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_split (down four warps an output), with its other
    forms (2 and 8 warps an output) as columns of their own: perop-expsplit-bfloat16.json."""
    import sparkops_cupy.moe_experts as cme

    others = _form_columns(cme, "DOWN_SPLIT", cme.DOWN_SPLIT_FORMS, "cupy_rowwarp_pdl_split {} warps")
    _experts_after_the_router_timed("cupy_rowwarp_pdl_split", "expsplit-bfloat16", 28, others)


def test_experts_q8_gate_up_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8 (gate/up on Q8 activations and __dp4a), with
    cupy_rowwarp_pdl_q8_split (the same gate/up, the split down) as a column of its own: perop-expq8-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8", "expq8-bfloat16", 29,
                                    more=("cupy_rowwarp_pdl_split", "cupy_rowwarp_pdl_q8_split"))


def test_experts_q8_hidden_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_hidden (the Q8 gate/up writing the hidden vector
    in Q8, down on it by __dp4a) against cupy_rowwarp_pdl, with cupy_rowwarp_pdl_q8 (the same gate/up, the float
    down) as a column of its own: perop-expq8h-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_hidden", "expq8h-bfloat16", 30,
                                    more=("cupy_rowwarp_pdl_q8",))


def test_experts_q8_pipe_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pipe (the Q8 hidden pair with its gate/up
    pipelined through stages of shared memory) against cupy_rowwarp_pdl, with cupy_rowwarp_pdl_q8_hidden (the step's
    experts: the rung's forecast is its column against this one) and the other stage form as columns of their own:
    perop-expq8p-bfloat16.json."""
    import sparkops_cupy.moe_experts as cme

    others = _form_columns(cme, "PIPE_STAGES", cme.PIPE_STAGE_FORMS, "cupy_rowwarp_pdl_q8_pipe {} stages")
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pipe", "expq8p-bfloat16", 31, others,
                                    more=("cupy_rowwarp_pdl_q8_hidden",))


def test_experts_q8_pairs_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pairs (the Q8 hidden pair with a lane a whole
    sub-block pair in gate/up's dot loop) against cupy_rowwarp_pdl, with cupy_rowwarp_pdl_q8_hidden (the step's
    experts: the rung's forecast is its column against this one) and its padded form of x as columns of their own:
    perop-expq8w-bfloat16.json."""
    import sparkops_cupy.moe_experts as cme

    others = _form_columns(cme, "PAIRS_X", cme.PAIRS_X_FORMS, "cupy_rowwarp_pdl_q8_pairs {} x")
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pairs", "expq8w-bfloat16", 32, others,
                                    more=("cupy_rowwarp_pdl_q8_hidden",))


def test_experts_copy_down_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_hidden_cp (the Q8 hidden pair with down in a
    copy form) against cupy_rowwarp_pdl, with cupy_rowwarp_pdl_q8_hidden (the step's experts: the rung's forecast is
    its column against this one), the copy down's other forms of commit groups, and the pairs gate/up with each
    down (cupy_rowwarp_pdl_q8_pairs, _q8_pairs_cp: the stacked rung's forecast) as columns of their own:
    perop-expq8c-bfloat16.json."""
    import sparkops_cupy.moe_experts as cme

    others = _form_columns(cme, "DOWN_CP_GROUPS", cme.DOWN_CP_GROUP_FORMS, "cupy_rowwarp_pdl_q8_hidden_cp {} groups")
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_hidden_cp", "expq8c-bfloat16", 33, others,
                                    more=("cupy_rowwarp_pdl_q8_hidden", "cupy_rowwarp_pdl_q8_pairs",
                                          "cupy_rowwarp_pdl_q8_pairs_cp"))


def test_experts_down_loads_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_hidden_ld (the Q8 hidden pair with its down's
    expert ids read once a warp and its hidden values requested a round ahead) against cupy_rowwarp_pdl, with
    cupy_rowwarp_pdl_q8_hidden (the step's experts), its other form ("ids") and the pairs gate/up with each down
    (cupy_rowwarp_pdl_q8_pairs, _q8_pairs_ld: the forecast over a step whose experts are the pairs pair) as columns
    of their own: perop-expq8l-bfloat16.json."""
    import sparkops_cupy.moe_experts as cme

    others = _form_columns(cme, "DOWN_LD_FORM", cme.DOWN_LD_FORMS, "cupy_rowwarp_pdl_q8_hidden_ld {}")
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_hidden_ld", "expq8l-bfloat16", 34, others,
                                    more=("cupy_rowwarp_pdl_q8_hidden", "cupy_rowwarp_pdl_q8_pairs",
                                          "cupy_rowwarp_pdl_q8_pairs_ld"))


def test_experts_down_xpf_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pairs_xpf (the pairs pair with its down
    prefetching the hidden vector into L1 after its wait; stage rungs51) against cupy_rowwarp_pdl, with the pairs pair
    (the s49 step's experts) and its ids-once down (_q8_pairs_ld) as columns of their own:
    perop-expxpf-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pairs_xpf", "expxpf-bfloat16", 66,
                                    more=("cupy_rowwarp_pdl_q8_pairs", "cupy_rowwarp_pdl_q8_pairs_ld"))


def test_experts_down_staged_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pairs_hs (the pairs pair with its down reading
    the hidden vector from shared memory, copied once a block after its wait; stage rungs53) against cupy_rowwarp_pdl,
    with the step's experts (_q8_pairs_ld, the ids-once down) as a column of its own: perop-exphs-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pairs_hs", "exphs-bfloat16", 72,
                                    more=("cupy_rowwarp_pdl_q8_pairs_ld",))


def test_experts_down_l2pf_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf (the pairs pair with its ids-once down
    asking for its later groups' weight lines in the L2 before its wait; stage rungs54) against cupy_rowwarp_pdl, with
    the step's experts (_q8_pairs_ld) as a column of its own: perop-expl2pf-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pairs_l2pf", "expl2pf-bfloat16", 77,
                                    more=("cupy_rowwarp_pdl_q8_pairs_ld",))


def test_experts_gate_up_grouped_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_grouped (the step's l2pf pair with
    its gate/up's copies in commit groups, each dotted as it lands; stage rungs57) against cupy_rowwarp_pdl, with the
    step's experts (_q8_pairs_l2pf) as a column of its own: perop-expgrp-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pairs_l2pf_grouped", "expgrp-bfloat16", 86,
                                    more=("cupy_rowwarp_pdl_q8_pairs_l2pf",))


def test_experts_gate_up_streamed_after_the_router_side_by_side():
    """The rung's per-op evidence for moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_streamed (the grouped form with one
    group requested ahead, each later one once the one before has landed; stage rungs58) against cupy_rowwarp_pdl,
    with the step's experts (_q8_pairs_l2pf) as a column of its own: perop-expstr-bfloat16.json."""
    _experts_after_the_router_timed("cupy_rowwarp_pdl_q8_pairs_l2pf_streamed", "expstr-bfloat16", 96,
                                    more=("cupy_rowwarp_pdl_q8_pairs_l2pf",))


def test_attention_deep_side_by_side():
    """The rung's per-op evidence for attention=cupy_splitk_bf16_deep (and _deep_active): one token's MLA decode at the
    48B's shape (bf16 cache, pos 63 of 32832 rows, as the d=0 rung's step) under cupy_splitk_bf16, the deep-absorb
    form and the deep form with the empty slices skipped, per layer and
    per token (x the MLA layers), recorded as perop-attndeep-bfloat16.json; then at full depth (perop-attndeep-full-
    bfloat16.json). Asserted: each was captured and timed; which is faster is printed, not asserted (the forecast
    reads the record)."""
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import attention_workload

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(k != "kda" for k in cfg.layer_kinds)
    cat = load_catalog()
    impls = {n: cat.get("attention", n).resolve()
             for n in ("cupy_splitk_bf16", "cupy_splitk_bf16_deep", "cupy_splitk_bf16_deep_active")}
    for label, w in (("attndeep-bfloat16", attention_workload(cfg, 32832, pos=63)),
                     ("attndeep-full-bfloat16", attention_workload(cfg, 32768))):
        times = _per_layer(w, impls, 11, layers, label)
        assert all(t.seconds > 0 for t in times.values()), times
        plain, deep = times["cupy_splitk_bf16"].seconds, times["cupy_splitk_bf16_deep"].seconds
        both = times["cupy_splitk_bf16_deep_active"].seconds
        print(f"{label}: deep absorb x{plain / deep:.3f} ({deep * 1e6:.2f} against {plain * 1e6:.2f} us a layer); "
              f"deep and active x{deep / both:.3f} over deep ({both * 1e6:.2f} us)")


def _attention_before_the_o_proj(names: tuple[str, str], label: str, seed: int) -> dict:
    """One token's MLA layer from its latent row on, as the step runs it at d=0 (pos 63 of a 32832-row bf16 cache) -
    torch's cat of the normed latent and its rope part (a plain kernel, the attention's predecessor in the step), the
    attention, then the o_proj GEMV (2304 x 4096 Q4_K, linear@Q4_K=cupy_rowwarp_pdl_q8_tall, a PDL kernel: it requests
    its weights early only when the kernel before lets it start; one of 8 weights a call, so that they come from DRAM
    as the step's do) - under the two attention forms `names`, and the cat and o_proj alone ("no attention"), per
    layer and per token (x the MLA layers), recorded as perop-LABEL.json. `perop_factor.py --minus "no attention"`
    gives each attention's own time in the chain (what the PDL o_proj gains after it included). Asserted: each was
    captured and timed, and both forms gave the same bits. Returns the timings by name."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.config import load_preset
    from sparkops_cupy._workloads import Workload, attention_workload, linear_workload

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(k != "kda" for k in cfg.layer_kinds)
    lkv = cfg.kv_lora_rank
    cat = load_catalog()
    attn = {n: cat.get("attention", n).resolve() for n in names}
    linear = cat.get("linear", "cupy_rowwarp_pdl_q8_tall").resolve()
    o_sets, _ = linear_workload(Q.Q4_K, cfg.hidden_size, 4096, "o_proj", dtype=torch.bfloat16).build(
        torch.device("cuda"), seed)
    w_o = [s["weight"] for s in o_sets[:8]]  # [D, N * Dv] Q4_K, 5.3 MB each: 42 MB, rotated past the L2's reuse
    o_alone = torch.randn(1, 4096, generator=torch.Generator().manual_seed(seed)).to("cuda", torch.bfloat16)

    def layer(name):
        at = [0]

        def call(q, latent, cache, pos, w_uk, w_uv, scale):
            row = torch.cat([latent[:, :lkv], latent[:, lkv:]], dim=-1)  # [1, Lkv+R] the step's cat
            o = o_alone if name == "no attention" else attn[name](q, row, cache, pos, w_uk, w_uv, scale).reshape(1, -1)
            at[0] += 1
            return linear(o, w_o[at[0] % len(w_o)])  # [1, D]
        return call

    base = attention_workload(cfg, 32832, pos=63)
    work = Workload(base.op, base.label + ", after its cat, before its o_proj", base.build)
    sets, _ = work.build(torch.device("cuda"), seed)
    outs = {}
    for n in attn:  # eager, once a set, the same cache rows written: both forms' outputs bit for bit
        outs[n] = [layer(n)(*s.values()) for s in sets]
    assert all(torch.equal(a, b) for a, b in zip(*outs.values()))
    times = _per_layer(work, {n: layer(n) for n in (*attn, "no attention")}, seed, layers, label)
    assert all(t.seconds > 0 and t.mode == "graph" for t in times.values()), times
    a, b, alone = (times[n].seconds for n in (*names, "no attention"))
    print(f"{names[1]} against {names[0]} before the o_proj: x{a / b:.3f} a layer "
          f"({'faster' if b < a else 'NOT faster'}: {b * 1e6:.2f} against {a * 1e6:.2f} us); its own time in the "
          f"chain {(b - alone) * 1e6:.2f} against {(a - alone) * 1e6:.2f} us")
    return times


def test_attention_deep_pdl_before_the_o_proj_side_by_side():
    """The rung's per-op evidence for attention=cupy_splitk_bf16_deep_pdl (stage rungs44): the step's
    cupy_splitk_bf16_deep and its PDL form between the cat and the o_proj (_attention_before_the_o_proj),
    perop-attnpdl-bfloat16.json; the rung's --expect. Which was faster is printed."""
    _attention_before_the_o_proj(("cupy_splitk_bf16_deep", "cupy_splitk_bf16_deep_pdl"), "attnpdl-bfloat16", 44)


def test_attention_active_pdl_before_the_o_proj_side_by_side():
    """The rung's per-op evidence for attention=cupy_splitk_bf16_deep_active_pdl (stage rungs55): the step's
    cupy_splitk_bf16_deep_pdl and the same with the empty slices skipped, between the cat and the o_proj at d=0 (2 of
    132 slices hold rows; _attention_before_the_o_proj), perop-attnactpdl-bfloat16.json. Which was faster is
    printed; at full depth nothing is skipped (test_attention_active_side_by_side's second record says what the
    skip's test costs there)."""
    _attention_before_the_o_proj(("cupy_splitk_bf16_deep_pdl", "cupy_splitk_bf16_deep_active_pdl"),
                                 "attnactpdl-bfloat16", 55)


def test_attention_active_side_by_side():
    """The rung's per-op evidence for attention=cupy_splitk_bf16_active: one token's MLA decode at the 48B's shape (bf16
    cache) under cupy_splitk_bf16 (the step's) and the active form, per layer and per token (x the MLA layers), at the
    position the step has at d=0+64 (pos 63 of a cache of 32832 rows: 2 of 132 slices hold rows), recorded as
    perop-attention-bfloat16.json (the d=0 rung's forecast); then with every row in use (pos 32767: no slice is
    empty; perop-attention-full-bfloat16.json). Asserted: each was captured, and the active form is not slower at the
    short context (it exists to be faster there). Session 18's first active form (a test of each slice's weight inside
    the combine's loop) was 2.5 us a layer slower at full depth; the mended loop stops at the last slice holding rows
    (38.4 against 39.1 us there, 22.8 against 24.9 at pos 63)."""
    from sparkops.config import load_preset
    from sparkops_cupy._workloads import attention_workload

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(k != "kda" for k in cfg.layer_kinds)
    cat = load_catalog()
    impls = {n: cat.get("attention", n).resolve() for n in ("cupy_splitk_bf16", "cupy_splitk_bf16_active")}
    short = _per_layer(attention_workload(cfg, 32832, pos=63), impls, 7, layers, "attention-bfloat16")
    _per_layer(attention_workload(cfg, 32768), impls, 8, layers, "attention-full-bfloat16")
    assert short["cupy_splitk_bf16_active"].seconds <= short["cupy_splitk_bf16"].seconds, short
