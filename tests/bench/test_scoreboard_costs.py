"""Bytes and FLOPs per token against anchors section 3, the ceilings, and `sparkops diagnose`
(measured on k3-nano on the CPU; on paper for the 2.8T preset, which has no weights)."""

from __future__ import annotations

import json

import pytest
import torch

from sparkops.bench import ceilings as ceil
from sparkops.bench import diagnose as D
from sparkops.bench.costs import token_cost, weight_bytes_loaded, weight_bytes_paper
from sparkops.cli import diagnose_cmd, main
from sparkops.config import load_preset
from sparkops.gguf.mix import bytes_per_token, quant_mix_bytes

K48 = "kimi-linear-48b-a3b"
BW = 4.04e12  # anchors section 1: one H200's measured read bandwidth


@pytest.mark.parametrize("mix,a_gb,rates", [("q4_k_m", 1.96, (1978, 1946, 1751, 1303)),
                                            ("iq1_s", 0.98, (3792, 3678, 3038, 1903))])
def test_decode_bytes_reproduce_the_anchors_roofline(mix, a_gb, rates):
    cfg = load_preset(K48)
    assert token_cost(cfg, "decode", depth=0, mix=mix).bytes_by_class["lm_head"] > 0
    a = sum(v for k, v in token_cost(cfg, "decode", depth=0, mix=mix).bytes_by_class.items()
            if k not in ("mla_cache", "kda_state", "kda_conv_state"))
    assert a / 1e9 == pytest.approx(a_gb, rel=0.01)
    for depth, want in zip((0, 4096, 32768, 131072), rates):
        got = BW / token_cost(cfg, "decode", depth=depth, mix=mix).bytes
        assert got == pytest.approx(want, rel=0.015), depth


@pytest.fixture
def small_measure(monkeypatch):
    """The ceilings' micro-benchmarks sized for these diagnoses of k3-nano (a few MB, a small matmul, 200 launches)."""
    real = ceil.measure
    monkeypatch.setattr(ceil, "measure", lambda device, **kw: real(device, **{**kw, "nbytes": 8 << 20,
                                                                              "matmul_n": 256, "launches": 200}))


def test_prefill_flops_at_32k_match_the_anchors():
    cost = token_cost(load_preset(K48), "prefill", tokens=32768, mix="q4_k_m")
    by = {k: v / 1e9 for k, v in cost.flops_by_class.items()}
    assert cost.flops / 1e9 == pytest.approx(8.0, rel=0.03)
    assert by["linears"] == pytest.approx(5.5, rel=0.02)
    assert by["mla_attention"] == pytest.approx(2.3, rel=0.03)
    assert 0.05 < by["kda"] < 0.3
    assert 790e12 / cost.flops == pytest.approx(99e3, rel=0.03)  # "~99k tok/s at 790 TFLOP/s"


@pytest.mark.parametrize("tokens, depth", [(32768, 0), (4096, 28672), (16384, 0)])
def test_prefill_is_compute_bound_and_reads_each_cache_row_once_per_forward(tokens, depth):
    """A forward of T tokens after D reads every weight and every MLA cache row once (a tiled attention serves a
    tile of queries from each key block): per token, weights / T and the D + T rows / T. At the 48B's prefill
    shapes that is far below the compute floor, so the roofline is compute-bound (session 11 found every query
    charged every earlier row: a 1.07 s "bandwidth floor" at T = 32768 and prefill shares of 81%)."""
    cfg = load_preset(K48)
    cost = token_cost(cfg, "prefill", tokens=tokens, depth=depth, mix="q4_k_m")
    n_mla = sum(k != "kda" for k in cfg.layer_kinds)
    assert n_mla == 7  # spec: 27 layers, every fourth MLA (3, 7, ..., 23) and the last
    assert cost.bytes_by_class["mla_cache"] == pytest.approx(n_mla * cfg.latent_dim * 2 * (depth + tokens) / tokens)
    forward_bytes, forward_flops = cost.bytes * tokens, cost.flops * tokens
    assert forward_bytes / 1e9 < 35  # the ~28 GB of weights and ~0.5 GB of cache, once
    assert forward_flops / 790e12 > 5 * forward_bytes / BW  # compute-bound, several times over


def test_loaded_weights_count_what_the_engine_reads():
    from sparkops.synth import synth_weights

    w = synth_weights("k3-nano", "q4_k_m", seed=0)
    loaded, paper = weight_bytes_loaded(w), weight_bytes_paper(w.config, "q4_k_m")
    assert set(loaded) == set(paper)
    for k in paper:
        if k == "mla":  # w_uk / w_uv are float32 in memory (dequantized at load), Q8_0 in the file
            assert loaded[k] > paper[k]
        else:
            assert loaded[k] == pytest.approx(paper[k]), k


def test_ceilings_are_measured_and_positive():
    read, copy, nbytes = ceil.measure_bandwidth("cpu", 8 << 20, repeats=3)
    assert read > 1e8 and copy > 1e8 and nbytes == 8 << 20
    flops, dtype = ceil.measure_matmul("cpu", 256, repeats=2)
    assert flops > 1e8 and dtype == "float32"
    eager, graph = ceil.measure_launch("cpu", 200)
    assert 0 < eager < 1e-2 and graph is None


def op_calls_per_token(cfg) -> int:
    """Named-op calls of one forward token, from the block structure (engine/graph.py)."""
    n_kda = sum(k == "kda" for k in cfg.layer_kinds)
    n_mla = cfg.num_layers - n_kda
    n_moe = cfg.num_layers - cfg.first_k_dense
    kda = 9 + 3 + 1 + 1  # nine projections, three short convs, the core, the gated norm
    mla = 3 + 1 + 1  # q / kv_a / o projections, the kv norm, attention
    dense, moe = 3 + 1, 2  # gate/up/down + swiglu; router + experts
    return 1 + 1 + n_kda * kda + n_mla * mla + 2 * cfg.num_layers + cfg.first_k_dense * dense + n_moe * moe + 1


def test_diagnose_measures_a_real_decode_step(nano, reference_registry):
    d = D.measured(nano, reference_registry, 16, device="cpu", dtype=torch.float32, steps=2, ceiling_bytes=8 << 20,
                   matmul_n=256)
    p = d.profile
    assert p.kernels == op_calls_per_token(nano.config) == 68
    assert sum(x["calls"] for x in p.by_op.values()) == p.kernels
    assert 0 < p.busy_s <= p.wall_s * 1.05
    v = d.verdict
    assert v["binding"] in ("launch overhead", "occupancy", "bandwidth", "compute")
    assert v["collectives"].startswith("none") and v["predicted_gain"] >= 1.0
    assert v["fraction_of_roofline"] < 1.0
    assert d.decode.bytes == pytest.approx(token_cost(nano.config, "decode", depth=16, weights=nano,
                                                       cache_elsize=4).bytes)


def test_roofline_points_show_the_eager_and_the_graph_step(nano, reference_registry):
    """A CUDA diagnosis has two measured steps (eager, and one graph replay: what the bench times); the PNG
    plots both, each at its own rate, else it shows the eager figure alone (session 5: 2.5% drawn where the
    graph step ran at 17%)."""
    d = D.measured(nano, reference_registry, 16, device="cpu", dtype=torch.float32, steps=2, ceiling_bytes=8 << 20,
                   matmul_n=256)
    labels = [p["label"] for p in D.roofline_points(d)]
    assert "measured decode d=16" in labels and not any("graph" in x for x in labels)  # CPU: no graph step
    d.profile.graph_wall_s = d.profile.wall_s / 8
    pts = {p["label"]: p for p in D.roofline_points(d)}
    eager, graph = pts["measured decode d=16 (eager)"], pts["measured decode d=16 (one CUDA graph)"]
    assert graph["intensity"] == pytest.approx(eager["intensity"])
    assert graph["achieved_flops"] == pytest.approx(8 * eager["achieved_flops"])


def test_diagnose_cli_on_paper_for_the_2_8t(tmp_path, capsys):
    assert main(["diagnose", "--model", "k3-2.8t", "--depth", "131072", "--paper", "--gpus", "8",
                 "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = load_preset("k3-2.8t")
    assert out["paper"] and out["mix"] == "ud_iq1_s" and out["profile"] is None
    assert out["memory_bytes"] / 2**30 == pytest.approx(553.7, rel=0.001)
    assert out["memory_bytes"] == quant_mix_bytes(cfg, "ud_iq1_s")["total"]
    # the cache term at depth D counts D cached rows plus the new token's own
    assert out["decode"]["bytes"] == pytest.approx(bytes_per_token(cfg, "ud_iq1_s", 131072 + 1)["total"], rel=1e-6)
    assert out["ceilings"]["read_bandwidth"] == pytest.approx(8 * 4.04e12)
    assert out["verdict"]["binding"] == "bandwidth" and "ignored on paper" in out["verdict"]["collectives"]
    assert all((tmp_path / p.split("/")[-1]).stat().st_size > 1000 for p in out["pngs"])


def test_diagnose_cli_measured_on_k3_nano(small_measure, nano, tmp_path, capsys, monkeypatch,
                                          reference_registry):
    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    assert main(["diagnose", "--model", "k3-nano", "--depth", "8", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(reference_registry)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "68 kernels per token" in text and "binding ceiling:" in text and "collectives: none: one device" in text
    assert (tmp_path / "diagnose-k3-nano-f32-d8.png").stat().st_size > 1000


def test_diagnose_shows_the_calls_stated_policies_hand_on(small_measure, nano, tmp_path, capsys, monkeypatch,
                                                          reference_registry):
    """A diagnosis counts, per token, the calls its implementations handed on by their stated policies, prints them
    and keeps them in its JSON (GPU session 25: the IQ1_S step's 99% in one dequantizing path, named nowhere). Each
    decode step here hands one call on, as a policy would count it."""
    from sparkops.engine import Engine

    real_decode = Engine.decode

    def decode(self, token):
        self.ops.counters["passed:moe_experts=fake -> torch: IQ1_S weights"] += 1
        return real_decode(self, token)

    monkeypatch.setattr(Engine, "decode", decode)
    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    out = tmp_path / "d.json"
    assert main(["diagnose", "--model", "k3-nano", "--depth", "8", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(reference_registry), "--json-out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "stated policy: moe_experts=fake -> torch: IQ1_S weights: 1 call(s) a token" in text
    doc = json.loads(out.read_text())
    doc = doc[0] if isinstance(doc, list) else doc
    assert doc["verdict"]["passed"] == {"moe_experts=fake -> torch: IQ1_S weights": 1}


def test_diagnose_cli_several_depths_share_one_load(  # and fill their contexts through a fill registry
small_measure, nano, tmp_path, capsys, monkeypatch, reference_registry):
    loads = []
    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: loads.append(spec) or nano)
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0,12", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(reference_registry), "--fill-registry", str(reference_registry), "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert loads == ["k3-nano"] and [d["depth"] for d in docs] == [0, 12]
    assert docs[1]["decode"]["bytes"] > docs[0]["decode"]["bytes"]  # 12 more cached rows read per token
    assert (tmp_path / "diagnose-k3-nano-f32-d12.png").stat().st_size > 1000
    assert main(["diagnose", "--model", "k3-nano", "--depth", "4,x", "--paper"]) != 0
    assert "give integers" in " ".join(capsys.readouterr().err.split())
    loads.clear()
    assert main(["diagnose", "--model", "k3-nano", "--depth", "4", "--fill-registry", str(tmp_path / "no.toml")]) == 2
    assert "--fill-registry" in " ".join(capsys.readouterr().err.split()) and not loads  # refused before any load


def test_kernels_are_counted_under_an_ops_profiler_range():
    """The fallback for a trace without device-side spans: each op's kernels are those its CPU range launched
    directly and through every call beneath it, copies and memsets aside."""
    from types import SimpleNamespace as E

    from sparkops.bench.diagnose import _kernels_under

    k = E(name="gemv_kernel")
    leaf = E(kernels=[k, E(name="Memcpy DtoD")], cpu_children=[])
    op = E(kernels=[k], cpu_children=[leaf, E(kernels=[k, k], cpu_children=[])])
    assert _kernels_under(op) == 4 and _kernels_under(E()) == 0


def _ev(name, start, end, device="DeviceType.CUDA", annotation=False, **kw):
    from types import SimpleNamespace as E

    return E(name=name, device_type=device, time_range=E(start=start, end=end), is_user_annotation=annotation, **kw)


def test_tally_counts_work_once_and_gives_each_kernel_to_its_innermost_op():
    """Session 4 on the H200: the device-side span of each op range was counted as a kernel and its length as
    busy time (1132 'kernels' per token where ~700 ran, busy 12.2 ms of a 4 ms graph step), and Triton's kernels
    were never linked to their op (0 per op). The tally counts kernels, copies and memsets as work, spans never,
    and gives each kernel to the innermost op span it lies in, however it was launched."""
    from sparkops.bench.diagnose import RANGE, tally

    cpu = "DeviceType.CPU"
    events = [
        _ev(RANGE + "linear", 0, 50, cpu, kernels=[], cpu_children=[]),  # Triton: the CPU tree links nothing
        _ev(RANGE + "linear", 10, 40, annotation=True),  # its device-side span: no work
        _ev("gemv_q4k", 10, 20), _ev("gemv_q4k", 30, 40),  # a gap of 10 us inside the span
        _ev("Memset (Device)", 40, 41),  # a copy between ops: busy, not a kernel, nobody's
        _ev("cast_glue", 45, 47),  # the graph's glue between the ops
        _ev(RANGE + "moe_experts", 50, 100, annotation=True),
        _ev(RANGE + "swiglu", 60, 70, annotation=True),  # nested in moe_experts
        _ev("experts_gemv", 50, 58), _ev("swiglu_kernel", 61, 69), _ev("combine", 80, 90),
        _ev("gpu_user_annotation_other", 0, 200, annotation=True),  # somebody else's span: ignored
    ]
    count, busy, by_name, by_op = tally(events)
    assert count == 6  # gemv x2, glue, experts, swiglu, combine; no span, no memset
    assert busy == pytest.approx((10 + 10 + 1 + 2 + 8 + 8 + 10) / 1e6)
    assert by_op["linear"] == (pytest.approx(20e-6), 2)
    assert by_op["swiglu"] == (pytest.approx(8e-6), 1)
    assert by_op["moe_experts"] == (pytest.approx(18e-6), 2)
    assert sum(k for _, k in by_op.values()) == count - 1  # the glue kernel belongs to no op
    assert sum(s for s, _ in by_op.values()) <= busy
    assert by_name["gemv_q4k"] == (pytest.approx(20e-6), 2)  # two launches of one kernel
    assert sum(n for _, n in by_name.values()) == count + 1  # every piece of work by name (the memset too)


def test_tally_overlapping_work_is_busy_once_and_without_spans_falls_back_to_the_cpu_tree():
    from types import SimpleNamespace as E

    from sparkops.bench.diagnose import RANGE, tally

    k = E(name="aten_kernel")
    rng = _ev(RANGE + "rmsnorm", 0, 30, "DeviceType.CPU", kernels=[], cpu_children=[E(kernels=[k, k], cpu_children=[])],
              device_time_total=12.0)
    count, busy, _, by_op = tally([rng, _ev("a", 0, 10), _ev("b", 5, 12)])  # two streams overlapping
    assert count == 2 and busy == pytest.approx(12e-6)
    assert by_op == {"rmsnorm": (pytest.approx(12e-6), 2)}


def test_diagnose_record_puts_each_depths_diagnosis_in_the_ledger(small_measure, nano, tmp_path, capsys,
                                                                    monkeypatch, reference_registry, bench_dir):
    """--record: one 'diagnosis' row per depth (binding ceiling, predicted gain, the profiled figures), its own
    table in LADDER.md, shown by `ledger show`, never offered to the frontier; a paper diagnosis records too."""
    from sparkops.bench import ledger as L

    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0,8", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(reference_registry), "--record"]) == 0
    rows = L.read(bench_dir / L.LEDGER)
    assert [(r["kind"], r["depth"]) for r in rows] == [("diagnosis", 0), ("diagnosis", 8)]
    r = rows[1]
    assert r["binding"] and r["predicted_gain"] >= 1 and r["kernels_per_token"] == 68 and r["registry"] == str(
        reference_registry)
    assert r["pngs"] == ["diagnose-k3-nano-f32-d8.png"] and "--record" in r["command"] and r["code_digest"]
    assert r["by_kernel"] == {}  # the CPU launches no kernels; on CUDA the row keeps the top kernels by name
    assert set(r["by_op"]["linear"]["by_type"]) == {"F32"}  # and each typed op's share per weight type
    assert not (bench_dir / L.FRONTIER).exists() or "diagnosis" not in (bench_dir / L.FRONTIER).read_text()
    ladder = (bench_dir / L.LADDER).read_text()
    assert "## Diagnoses" in ladder and r["id"] in ladder and "diagnose-k3-nano-f32-d8.png" in ladder
    capsys.readouterr()
    assert main(["ledger", "show"]) == 0 and "diagnosis" in capsys.readouterr().out
    assert main(["diagnose", "--model", "k3-2.8t", "--depth", "131072", "--paper", "--out", str(tmp_path),
                 "--record"]) == 0
    assert L.read(bench_dir / L.LEDGER)[-1]["paper"] is True


def test_profile_ops_lists_the_kernels_with_the_most_time_per_token_and_splits_typed_ops(monkeypatch):
    """On CUDA the diagnosis keeps the TOP_KERNELS kernels by device time (per token, most first, names cut to 120
    characters), and a per-type op's calls under op@TYPE inside its op (by_type): here a stand-in profile."""
    from types import SimpleNamespace as NS

    from gguf import GGMLQuantizationType as Q

    from sparkops.bench import diagnose as D
    from sparkops.ops import OP_NAMES

    engine = NS(ops=NS(**{op: (lambda *a, **k: None) for op in OP_NAMES}))
    from sparkops.qweight import QWeight

    w4, w6 = (QWeight.from_float(torch.zeros(2, 256), q) for q in (Q.Q4_K, Q.Q6_K))

    def work():
        for _ in range(3):
            engine.ops.linear(None, w4)
        engine.ops.linear(None, weight=w6)
        engine.ops.rmsnorm(None, None, 1e-6)

    last = D.TOP_KERNELS + 3  # the most time, and a name of 200+ characters (a C++ template's, say)
    names = {f"k{i}" + "x" * (200 if i == last else 0): (float(i + 1) * 1e-6, 2) for i in range(last + 1)}
    # two templated kernels whose names share their first 200 characters (torch's elementwise kernels do, as the
    # H200 showed): two labels, not one overwriting the other
    twin = "void at::native::elementwise_kernel<" + "t" * 200
    names |= {twin + "A>": (float(last) * 1e-6, 2), twin + "B>": (float(last - 1) * 1e-6, 2)}

    def fake_cuda(fn):
        fn()
        return 40, 1e-3, names, {"linear@Q4_K": (3e-4, 3), "linear@Q6_K": (2e-4, 1), "rmsnorm": (1e-5, 1)}

    monkeypatch.setattr(D, "_cuda_kernels", fake_cuda)
    kernels, busy, by_op, how, by_kernel = D.profile_ops(engine, NS(restore=lambda: None), work, "cuda", 2)
    assert (kernels, busy) == (20, 5e-4)
    secs = [x["seconds"] for x in by_kernel.values()]
    assert len(by_kernel) == D.TOP_KERNELS and secs == sorted(secs, reverse=True)
    assert secs[0] == pytest.approx((D.TOP_KERNELS + 4) * 1e-6 / 2) and all(x["launches"] == 1 for x in by_kernel.values())
    assert "k0" not in by_kernel and "k5" not in by_kernel and "k6" in by_kernel  # the least time: not listed
    first = next(iter(by_kernel))
    assert len(first) == 120 and first.startswith(f"k{last}" + "x" * 100)
    assert first == D.kernel_label(f"k{last}" + "x" * 200)
    twins = [k for k in by_kernel if k.startswith("void at::native::elementwise_kernel<")]
    assert len(twins) == 2 and len(set(twins)) == 2 and all(len(k) == 120 for k in twins)
    assert D.kernel_label("short") == "short"
    lin = by_op["linear"]
    assert lin["calls"] == 2 and lin["seconds"] == pytest.approx(2.5e-4) and lin["kernels"] == 2
    assert lin["by_type"] == {"Q4_K": {"calls": 1.5, "seconds": pytest.approx(1.5e-4), "kernels": 1.5},
                              "Q6_K": {"calls": 0.5, "seconds": pytest.approx(1e-4), "kernels": 0.5}}
    assert list(by_op) == ["linear", "rmsnorm"] and "by_type" not in by_op["rmsnorm"]


def test_the_roofline_plot_places_old_prefill_rows_by_todays_cost_model():
    """A prefill row recorded before the cache-read fix stored an intensity of ~60 FLOP/byte for the 48B at 32768
    tokens; the plot takes today's (~2000: compute-bound), and leaves decode rows and unknown models as recorded."""
    from sparkops.bench.plots import _prefill_intensity_now

    old = {"phase": "prefill", "tokens": 32768, "depth": 0, "model": {"name": K48, "mix": "q4_k_m"}}
    now = _prefill_intensity_now(old)
    want = token_cost(load_preset(K48), "prefill", tokens=32768, mix="q4_k_m")
    assert now == pytest.approx(want.flops / want.bytes) and now > 790e12 / BW  # right of the ridge point
    assert _prefill_intensity_now({**old, "phase": "decode"}) is None
    assert _prefill_intensity_now({**old, "model": {"name": "/tmp/a-file.gguf", "mix": "q4_k_m"}}) is None


def test_diagnose_says_in_red_when_a_measurement_is_above_its_roofline(capsys):
    from sparkops.cli.diagnose_cmd import _warn_above_roofline

    _warn_above_roofline(0.99)
    assert capsys.readouterr().err == ""
    _warn_above_roofline(1.2)
    err = " ".join(capsys.readouterr().err.split())
    assert "above the roofline (120%)" in err and "bench/costs.py" in err and "per-op times stand" in err


def test_diagnose_an_fp8_cache_filled_by_a_registry_that_reads_none(small_measure, nano, tmp_path, capsys,
                                                                    monkeypatch, reference_registry):
    """A registry whose attention reads an fp8 cache, filled by one that reads none: the diagnosed engine takes the
    fill's rows rounded to fp8 (said on stderr), and the bytes it counts are the fp8 cache's, one a value."""
    from sparkops.gate.check import prove
    from sparkops.plugins import load_catalog
    from sparkops.registry.file import Registry

    fp8 = tmp_path / "fp8.toml"
    reg = Registry.load(reference_registry)
    reg.path = fp8
    catalog = load_catalog()
    reg.set("attention", "cpu", "torch_fp8cache",
            check=prove(catalog.get("attention", "torch_fp8cache"), "cpu", catalog).record)
    reg.save()
    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    out = tmp_path / "d.json"
    assert main(["diagnose", "--model", "k3-nano", "--depth", "8", "--steps", "2", "--out", str(tmp_path),
                 "--registry", str(fp8), "--fill-registry", str(reference_registry), "--json-out", str(out)]) == 0
    assert "rounded to float8_e4m3fn" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    doc = doc[0] if isinstance(doc, list) else doc
    n_mla = nano.config.layer_kinds.count("mla")
    assert doc["decode"]["bytes_by_class"]["mla_cache"] == n_mla * 9 * nano.config.latent_dim  # rows 0..8, a byte each
