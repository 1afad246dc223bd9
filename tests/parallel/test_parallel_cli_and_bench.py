"""`sparkops parallel ...` and the multi-rank bench (gate first, the ledger row beside the seed's figures)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sparkops.bench import ledger as L
from sparkops.bench.record import steady
from sparkops.cli import main
from sparkops.engine import Engine
from sparkops.engine.loading import make_ops
from sparkops.errors import BadInput
from sparkops.parallel import runbench
from sparkops.parallel.launch import ModelSource, PoolSpec
from sparkops.synth import synth_weights


def test_plan_k3_2_8t_json(capsys):
    assert main(["parallel", "plan", "--model", "k3-2.8t", "--world", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mix"] == "ud_iq1_s" and len(out["ranks"]) == 8
    assert out["ranks"][7]["experts"] == [784, 896]
    assert all(r["bytes"]["total"] < 80 * 2**30 for r in out["ranks"])


def test_plan_refuses_more_ranks_than_heads(capsys):
    assert main(["parallel", "plan", "--model", "k3-nano", "--world", "8"]) == 2
    assert "use at most 4 ranks" in capsys.readouterr().err


def test_no_action_is_bad_usage(capsys):
    assert main(["parallel"]) == 2
    assert "give an action" in capsys.readouterr().err


def test_check_cli_refuses_the_late_reduce(capsys):
    code = main(["parallel", "check", "--world", "2", "--depths", "9", "--late-reduce", "ffn"])
    captured = capsys.readouterr()
    assert code == 1
    assert "LATE reduce at ffn" in captured.out and "FAIL" in captured.out and "refused" in captured.err


def test_logits_cli_matches_one_process(tmp_path, capsys):
    out = tmp_path / "l.npy"
    tokens = [3, 99, 250, 7, 7]
    assert main(["parallel", "logits", "--world", "2", "--tokens", ",".join(map(str, tokens)), "--prefill-split", "3",
                 "-o", str(out)]) == 0
    got = np.load(out)
    e = Engine(synth_weights("k3-nano", "f32", 0), make_ops("cpu"), max_context=8)
    ref = torch.cat([e.prefill(tokens[:3])] + [e.decode(t) for t in tokens[3:]]).numpy()
    assert got.shape == ref.shape == (5, 320)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_bench_gates_then_times_and_records(tmp_path):
    spec = PoolSpec(2, ModelSource("ondevice", "k3-nano", "q8_0", 1), max_context=64)
    result = runbench.run(spec, prefill=24, depth=20, steps=2, rounds=2, chunk=16, gate_depths=(9,),
                          consistency=(8, 2))
    assert "refused" not in result
    assert result["gates"]["sharded_graph_k3-nano"]["passed"]
    sc = result["gates"]["self_consistency"]
    assert sc["passed"] and sc["ranks_identical"] and sc["positions"] == 10
    s = result["summary"]
    assert s["prefill"]["proof"]["depth"] == 24 and s["decode"]["proof"]["depth"] == 20
    for phase in ("prefill", "decode"):
        assert 0 < s[phase]["collective_share"] < 1 and s[phase]["tok_s"] > 0
    assert s["decode"]["reduces_per_step"] == {"attn": 4.0, "ffn": 4.0}
    # the chunk proof: the 24-token prompt again in chunks of 16 and of 9 (the gate's depth), 8 decode steps after
    cp = result["gates"]["chunk_proof_prefill"]
    assert cp["passed"] and (cp["timed_chunk"], cp["reference_chunk"], cp["rows"]) == (16, 9, 9)
    assert s["prefill"]["chunk_proof"]["passed"]
    rows = runbench.record(result, "sparkops parallel bench (test)", tmp_path)
    assert rows[0]["chunk_proof"]["A"]["passed"] and "chunk_proof" not in rows[1]
    assert [r["key"] for r in rows] == ["prefill.k3-nano.q8_0.2xcpu.t=24", "decode.k3-nano.q8_0.2xcpu.d=20"]
    assert [r["id"] for r in L.read(tmp_path / L.LEDGER)] == [r["id"] for r in rows]
    # a figure moves the frontier only if its rounds agree (bench/record.py's steady); two CPU rounds may not
    assert all(r["frontier"] == {"A": "new" if steady(r["figures"][0]) else "unsteady"} and r["parallel"]["world"] == 2
               for r in rows)
    assert (tmp_path / L.FRONTIER).exists()


def _fake_result(fill: str) -> dict:
    proof = {"depth": 131072}
    return {"spec": {"world": 8, "device": "cuda", "backend": "nccl", "registry": None, "dtype": "bfloat16",
                     "source": {"kind": "ondevice", "name": "k3-2.8t", "mix": "ud_iq1_s", "seed": 0},
                     "placement": {"dispatch": "compact", "late": []}, "prefill_chunk": 2048},
            "gates": {"sharded_graph_k3-nano": {"passed": True, "worst_depth": {"kl_max": 1e-9, "top1": 1.0,
                                                                                "depth": 65}}},
            "summary": {"decode": {"depth": 131072, "steps": 8, "fill": fill, "fill_s": None, "tok_s": 30.0,
                                   "rates": [29.0, 30.0, 31.0], "step_s": 1 / 30, "collective_s": 0.005,
                                   "collective_share": 0.15, "reduces_per_step": {"attn": 93, "ffn": 93},
                                   "proof": proof},
                        "prefill": {"tokens": 32768, "wall_s": 400.0, "tok_s": 81.92, "collective_s": 20.0,
                                    "collective_share": 0.05, "proof": {"depth": 32768}}}}


ENV = {"device": "cuda", "device_name": "NVIDIA H200", "device_slug": "nvidia-h200", "clocks": {}, "versions": {},
       "commit": "abc", "dirty": False, "host": "box"}


def test_rows_stand_beside_the_seed_figures():
    rows = runbench.ledger_rows(_fake_result("prefill"), "cmd", env=ENV)
    by = {r["phase"]: r for r in rows}
    d = by["decode"]["seed_figures"]
    assert d["figures"]["SparkInfer-K3 (current)"] == 60.17 and d["figures"]["llama.cpp"] == 18.44
    assert d["ratio_to"]["llama.cpp"] == pytest.approx(30.0 / 18.44)
    p = by["prefill"]["seed_figures"]["figures"]
    assert p["SparkInfer-K3 (current)"] == 99.68 and p["llama.cpp"] == 143.88
    assert by["decode"]["key"] == "decode.k3-2.8t.ud_iq1_s.8xnvidia-h200.d=131072" and by["decode"]["parallel"]["collective_share"] == 0.15


def test_a_synthetic_fill_is_its_own_labelled_workload():
    row = next(r for r in runbench.ledger_rows(_fake_result("synthetic"), "cmd", env=ENV) if r["phase"] == "decode")
    assert row["key"].endswith(".fill=synthetic") and "synthetically" in row["change"]


def test_a_refused_run_records_no_figure_only_the_refusal(tmp_path, monkeypatch, capsys):
    with pytest.raises(BadInput, match="nothing recorded"):
        runbench.record({"refused": "gate failed", "spec": {}, "gates": {}}, "cmd", tmp_path)
    assert not (tmp_path / L.LEDGER).exists()
    refused = _fake_result("prefill")
    del refused["summary"]
    refused["spec"] = {**refused["spec"], "device": "cpu", "backend": "gloo", "world": 2}
    refused["gates"]["self_consistency"] = {"passed": False, "kl_max": 0.3, "top1": 0.7, "what": "prefill 19 vs ..."}
    refused["refused"] = "the model failed its self-consistency gate"
    refused["request"] = {"prefill": 32768, "depth": 131072, "steps": 8, "fill": "prefill"}
    monkeypatch.setattr(runbench, "run", lambda spec, **kw: refused)
    argv = ["parallel", "bench", "--world", "2", "--depth", "8", "--record", "--bench-dir", str(tmp_path)]
    assert main(argv) == 1  # the row records the command as given
    (row,) = L.read(tmp_path / L.LEDGER)
    assert row["kind"] == "refusal" and row["refused"] == "self_consistency" and row["worst_kl"] == 0.3
    assert row["depths"] == [131072] and row["tokens"] == 32768 and "figures" not in row and "after" not in row
    assert "parallel bench" in row["command"] and not (tmp_path / L.FRONTIER).exists()
    assert "recorded the refusal" in capsys.readouterr().out


def test_a_chunk_dependent_prefill_is_a_failed_gate_and_its_refusal_names_it():
    """chunk_gate turns rank 0's chunk proof into a gate verdict; a failing one is what the refusal row names."""
    per_rank = [{"prefill": {"chunk_proof": {"timed_chunk": 2048, "reference_chunk": 1024, "why": "half", "rows": 9,
                                             "kl_max": 3.5, "kl_mean": 1.0, "top1": 0.4, "rule": "KL <= 2",
                                             "passed": False}}}]
    cp = runbench.chunk_gate(per_rank)
    assert not cp["passed"] and "chunks of 2048 vs 1024" in cp["what"]
    assert runbench.chunk_gate([{"decode": {}}]) is None
    result = _fake_result("prefill")
    result["gates"]["chunk_proof_prefill"] = cp
    result["refused"] = "the prefill's result depends on its chunk"
    row = runbench.refusal_row(result, "cmd", env=ENV)
    assert row["refused"] == "chunk_proof_prefill" and row["worst_kl"] == 3.5 and row["worst_top1"] == 0.4
