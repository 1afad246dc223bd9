"""`sparkops diagnose --prefill-chunk`: one prefill chunk after a verified context, its time per op, each FLOP
class's achieved rate, and what binds (measured on k3-nano on the CPU)."""

from __future__ import annotations

import json

import pytest
import torch

from sparkops.bench import depth as dep
from sparkops.bench import diagnose_prefill as P
from sparkops.bench.costs import token_cost
from sparkops.cli import diagnose_cmd, main


def test_a_chunk_after_a_context_is_profiled_per_op(nano, reference_registry):
    d = P.measured(nano, reference_registry, 24, 16, device="cpu", dtype=torch.float32, ceiling_bytes=8 << 20,
                   matmul_n=256)
    assert (d.depth, d.chunk) == (24, 16) and d.tok_s == pytest.approx(16 / d.wall_s)
    # the cost is the chunk's own: 16 tokens after 24 (the attention FLOPs grow with the history)
    want = token_cost(nano.config, "prefill", tokens=16, depth=24, weights=nano, cache_elsize=4)
    assert d.cost.flops == pytest.approx(want.flops)
    assert d.cost.flops_by_class["mla_attention"] > token_cost(nano.config, "prefill", tokens=16, depth=0,
                                                               weights=nano).flops_by_class["mla_attention"]
    # one forward: every layer's ops once per chunk (op calls are the CPU's "kernels")
    assert d.kernels == sum(x["calls"] for x in d.by_op.values()) == 68
    assert d.by_op["attention"]["calls"] == len(nano.config.full_attn_layers)
    assert 0 < d.busy_s <= d.wall_s
    v = d.verdict
    assert v["binding"] in ("host", "kernels") and v["predicted_gain"] >= 1
    lin = v["flop_classes"]["linears"]
    assert lin["ops"] == ["linear", "moe_experts"]
    assert lin["seconds"] == pytest.approx(d.by_op["linear"]["seconds"] + d.by_op["moe_experts"]["seconds"])
    assert lin["flops_per_s"] == pytest.approx(want.flops_by_class["linears"] * 16 / lin["seconds"])
    assert 0 < v["fraction_of_roofline"] < 1


def test_the_timed_chunk_must_really_append_its_rows(nano, reference_registry, monkeypatch):
    """A prefill that silently dropped the chunk (or part of it) would time nothing: the depth proof after the
    timed forwards catches it."""
    real = dep.verify_depth
    calls = []

    def check(engine, depth, **kw):
        calls.append(depth)
        return real(engine, depth if depth != 24 + 16 else depth - 1, **kw)  # as if one row went missing

    monkeypatch.setattr(P.dep, "verify_depth", check)
    with pytest.raises(Exception, match="depth|row|length"):
        P.measured(nano, reference_registry, 24, 16, device="cpu", dtype=torch.float32, ceiling_bytes=8 << 20,
                   matmul_n=256)
    assert calls == [24, 40]


def test_the_cli_prints_writes_json_and_a_png_per_depth(nano, tmp_path, capsys, monkeypatch, reference_registry):
    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: nano)
    out = tmp_path / "d.json"
    assert main(["diagnose", "--model", "k3-nano", "--depth", "0,16", "--prefill-chunk", "8", "--out", str(tmp_path),
                 "--registry", str(reference_registry), "--json-out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "prefill: one chunk of 8 tokens after 16" in text and "binding:" in text and "linear/moe_experts" in text
    docs = json.loads(out.read_text())
    assert [(x["phase"], x["depth"], x["chunk"]) for x in docs] == [("prefill", 0, 8), ("prefill", 16, 8)]
    assert docs[1]["profile"]["by_op"]["attention"]["calls"] == len(nano.config.full_attn_layers)
    for x in docs:
        assert all((tmp_path / p.split("/")[-1]).stat().st_size > 1000 for p in x["pngs"])


@pytest.mark.parametrize("extra,says", [(["--paper"], "--paper does not apply"),
                                        (["--record"], "--record does not apply"),
                                        (["--gpus", "2"], "--gpus does not apply"),
                                        (["--prefill-chunk", "0"], "at least 1")])
def test_what_a_prefill_diagnosis_refuses(extra, says, capsys, monkeypatch):
    monkeypatch.setattr(diagnose_cmd, "load_weights", lambda spec: pytest.fail("refused before loading"))
    argv = ["diagnose", "--model", "k3-nano", "--depth", "8", "--prefill-chunk", "8"]
    assert main(argv + extra) == 2
    assert says in " ".join(capsys.readouterr().err.split())
