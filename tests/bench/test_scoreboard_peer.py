"""The pinned peer: llama-bench's JSON parsed, the peer run interleaved with sparkops at the same
depths, and both recorded. A stand-in executable plays llama-bench (sparkops never builds it)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from sparkops.bench import harness, ledger as L, peer
from sparkops.bench.harness import BenchRequest, run_bench
from sparkops.bench.record import record_run
from sparkops.cli import main

STAND_IN = textwrap.dedent('''\
    #!{python}
    """Prints what llama-bench -o json prints, for the test asked; logs each call."""
    import argparse, json, os, sys
    p = argparse.ArgumentParser()
    for flag in ("-m", "-p", "-n", "-d", "-r", "-o", "-fa", "-ub"):
        p.add_argument(flag)
    a = p.parse_args()
    depth, n_prompt, n_gen, reps = int(a.d), int(a.p), int(a.n), int(a.r)
    with open(os.environ["PEER_LOG"], "a") as log:
        log.write(f"peer d={{depth}} p={{n_prompt}} n={{n_gen}} fa={{a.fa}}\\n")
    if os.environ.get("PEER_FAIL"):
        print("ggml_cuda_init: failed to initialize CUDA", file=sys.stderr)
        sys.exit(3)
    reported = depth + int(os.environ.get("PEER_DEPTH_LIE", "0"))
    calls = len(open(os.environ["PEER_LOG"]).readlines())
    ts = (2000.0 if n_prompt else 50.0) / (1.0 + reported / 1024.0) * (1 + 0.01 * calls)
    test = {{"build_commit": "0123abcd", "build_number": 7000, "cpu_info": "stand-in", "gpu_info": "",
             "backends": "CPU", "model_filename": a.m, "model_type": "kimi-linear ?B F32", "n_prompt": n_prompt,
             "n_gen": n_gen, "n_depth": reported, "test_time": "2026-11-29T00:00:00Z", "avg_ns": int(1e9 / ts),
             "stddev_ns": 0, "avg_ts": ts, "stddev_ts": 0.0, "samples_ns": [int(1e9 / ts)] * reps,
             "samples_ts": [ts] * reps}}
    if os.environ.get("PEER_NO_DEPTH"):
        del test["n_depth"]
    print(json.dumps([test], indent=2))
''')


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    exe = tmp_path / "llama-bench"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    log = tmp_path / "order.log"
    log.write_text("")
    monkeypatch.setenv("PEER_LOG", str(log))
    gguf = tmp_path / "k3-nano.gguf"
    gguf.write_bytes(b"GGUF")  # the stand-in never reads it; the real llama-bench would
    return exe, log, gguf


def test_parse_llama_bench_json_and_jsonl():
    tests = [{"n_prompt": 0, "n_gen": 32, "n_depth": 4096, "avg_ts": 217.3, "stddev_ts": 1.5,
              "samples_ts": [216.0, 218.6], "model_filename": "k48.gguf", "backends": "CUDA",
              "gpu_info": "NVIDIA H200", "build_commit": "abc"},
             {"n_prompt": 32768, "n_gen": 0, "n_depth": 0, "avg_ts": 6808.0, "stddev_ts": 20.0}]
    for text in (json.dumps(tests), "\n".join(json.dumps(t) for t in tests)):
        figs = peer.parse_llama_bench(text)
        assert [(f.phase, f.n_depth, f.avg_ts) for f in figs] == [("decode", 4096, 217.3), ("prefill", 0, 6808.0)]
        assert figs[0].samples_ts == [216.0, 218.6] and figs[0].gpu_info == "NVIDIA H200"
    with pytest.raises(peer.PeerFailed, match="no n_depth field"):
        peer.parse_llama_bench(json.dumps([{"n_prompt": 0, "n_gen": 8, "avg_ts": 1.0}]))
    with pytest.raises(peer.PeerFailed, match="neither JSON nor JSON lines"):
        peer.parse_llama_bench("| model | size |\n| --- | --- |")
    with pytest.raises(peer.PeerFailed, match="printed nothing"):
        peer.parse_llama_bench("  ")


def test_the_command_asks_for_the_same_test():
    spec = peer.PeerSpec("llama.cpp", __import__("pathlib").Path("/x/llama-bench"), ("-fa", "1"))
    assert peer.command(spec, "m.gguf", "decode", 4096, 32) == [
        "/x/llama-bench", "-m", "m.gguf", "-p", "0", "-n", "32", "-d", "4096", "-r", "1", "-o", "json", "-fa", "1"]
    assert peer.command(spec, "m.gguf", "prefill", 0, 32768)[3:8] == ["-p", "32768", "-n", "0", "-d"]


def test_peer_runs_interleaved_and_both_are_recorded(nano, passing_gate, registries, stand_in, monkeypatch, bench_dir):
    exe, log, gguf = stand_in
    real_timer = harness.RegionTimer

    class Logged(real_timer):
        def __enter__(self):
            with open(log, "a") as fh:
                fh.write("sparkops\n")
            return super().__enter__()

    monkeypatch.setattr(harness, "RegionTimer", Logged)
    spec = peer.parse_peer_arg(f"llama.cpp={exe}", "-fa 1")
    req = BenchRequest("decode", (8, 16), 2, [("A", registries[0])], repeats=3, warmup=1, peer=spec, peer_gguf=gguf)
    run = run_bench(req, nano)
    lines = log.read_text().split("\n")[:-1]
    per_depth = [lines[:7], lines[7:]]
    for d, block in zip((8, 16), per_depth):
        peer_line = f"peer d={d} p=0 n=2 fa=1"
        assert block == ["sparkops"] + ["sparkops", peer_line] * 3  # warm-up, then sparkops / peer alternating
    p = run.points[1]
    assert p.order == ["A", "peer"] * 3 and len(p.peer_rates) == 3
    assert all(f["n_depth"] == 16 and f["model_filename"] == str(gguf) for f in p.peer_figures)
    rows = record_run(run, bench_dir)
    kinds = [(r["kind"], r["depth"]) for r in rows]
    assert kinds == [("measurement", 8), ("peer", 8), ("measurement", 16), ("peer", 16)]
    pr = rows[3]
    assert pr["peer"] == "llama.cpp" and pr["key"] == rows[2]["key"] and pr["measurement_row"] == rows[2]["id"]
    assert pr["peer_value"] == pytest.approx(sorted(p.peer_rates)[1])
    assert pr["ratio"] == pytest.approx(rows[2]["after"] / pr["peer_value"])
    assert [r["kind"] for r in L.read(bench_dir / L.LEDGER)] == ["measurement", "peer", "measurement", "peer"]
    ladder = (bench_dir / L.LADDER).read_text()
    assert "## Peer figures" in ladder and "0123abcd" in ladder and "llama.cpp" in ladder


def test_a_peer_that_measured_another_depth_is_refused(stand_in, monkeypatch):
    exe, _, gguf = stand_in
    monkeypatch.setenv("PEER_DEPTH_LIE", "-64")
    spec = peer.parse_peer_arg(f"llama.cpp={exe}")
    with pytest.raises(peer.PeerFailed, match="at depth 128, it reported p=0 n=4 d=64"):
        peer.run(spec, gguf, "decode", 128, 4)


def test_a_failing_peer_is_reported_with_its_stderr(stand_in, monkeypatch):
    exe, _, gguf = stand_in
    monkeypatch.setenv("PEER_FAIL", "1")
    with pytest.raises(peer.PeerFailed, match="exited 3:\nggml_cuda_init: failed to initialize CUDA"):
        peer.run(peer.parse_peer_arg(f"llama.cpp={exe}"), gguf, "decode", 0, 4)


def test_bad_peer_arguments_are_bad_input(tmp_path, capsys):
    plain = tmp_path / "llama-bench"
    plain.write_text("#!/bin/sh\n")
    for arg, why in ((f"llama.cpp={tmp_path}/nope", "no such file"), (f"vllm={plain}", "unknown peer"),
                     (f"llama.cpp={plain}", "not executable"), (str(plain), "expected NAME=PATH")):
        assert main(["bench", "decode", "--model", "k3-nano", "--depth", "8", "--tokens", "2", "--peer", arg]) == 2
        assert why in " ".join(capsys.readouterr().err.split())
