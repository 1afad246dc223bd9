"""The chunk proof of prefill figures (bench/chunking.py): a prefill's result must not depend on its chunk.

A kernel wrong only at the timed chunk's shapes (shapes the gate never ran) is the trap: its cache is
well-formed, so the depth proof passes it; the chunk proof compares the timed chunking with a gate-sized one."""

from __future__ import annotations

import json

import pytest
import torch

from sparkops.bench import chunking
from sparkops.bench import depth as dep
from sparkops.bench import ledger as L
from sparkops.bench.harness import BenchRequest, run_bench
from sparkops.cli import bench_cmd, main
from sparkops.engine import Engine


@pytest.mark.parametrize("tokens, chunk, depths, want", [
    (32768, None, (1, 64, 4096), (4096, 32768)),  # one forward timed: compared with the gate's 4096
    (32768, 16384, (1, 64, 4096), (4096, 16384)),
    (32768, 4096, (1, 64, 4096), (2048, 4096)),  # 64 would take 512 forwards: half the timed chunk
    (20, 8, (1,), (1, 8)),  # 20 one-token forwards: within the limit
    (16, 64, (1, 63, 64, 65, 129), (1, 16)),  # a chunk longer than the prompt is the prompt
    (40, None, (), (20, 40)),  # no gate depths known: half the timed chunk
])
def test_the_reference_chunk_is_a_gate_size_below_the_timed_one(tokens, chunk, depths, want):
    ref, timed, why = chunking.reference_chunk(tokens, chunk, depths)
    assert (ref, timed) == want and why
    assert ref < timed and tokens / ref <= chunking.MAX_REFERENCE_CHUNKS


def test_a_one_token_chunk_has_nothing_to_compare():
    assert chunking.reference_chunk(5, 1, (1, 64))[0] is None
    assert chunking.reference_chunk(1, None, (1, 64))[0] is None


def test_a_prefill_row_carries_each_arms_chunk_proof(nano, passing_gate, registries, bench_dir, monkeypatch,
                                                      capsys):
    """bench prefill --chunk 8 on the NumPy reference: both arms prefill again in one-token chunks (the stand-in
    gate's depth 1), decode CHECK_STEPS tokens after, and agree; the row and the printout carry the proof."""
    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    argv = ["bench", "prefill", "--model", "k3-nano", "--tokens", "12", "--chunk", "8", "--repeats", "2",
            "--registry", str(registries[0]), "--vs", str(registries[1])]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "A: chunking: chunks of 8 vs 1" in out and "B: chunking: chunks of 8 vs 1" in out
    row = [r for r in L.read(bench_dir / L.LEDGER) if r["kind"] == "measurement"][-1]
    for label in ("A", "B"):
        proof = row["chunk_proof"][label]
        assert proof["passed"] and (proof["timed_chunk"], proof["reference_chunk"]) == (8, 1)
        assert proof["rows"] == 1 + chunking.CHECK_STEPS
        # float64 NumPy reference: the chunkings differ only in summation order
        assert 0 <= proof["kl_max"] < 1e-9 and proof["top1"] == 1.0 and "KL <=" in proof["rule"]
    json.dumps(row)  # the ledger keeps it as written


def test_the_arms_caches_have_room_for_the_proofs_decode_steps(nano, passing_gate, registries):
    req = BenchRequest("prefill", (4,), 6, [("A", registries[0])], repeats=1, warmup=0, chunk=3)
    assert req.prompt_length == 10 and req.max_context == 10 + chunking.CHECK_STEPS
    p = run_bench(req, nano).points[0]
    assert p.arms["A"].proof["max_context"] == req.max_context
    assert p.arms["A"].chunking["timed_chunk"] == 3 and p.arms["A"].chunking["passed"]
    decode = BenchRequest("decode", (4,), 6, [("A", registries[0])])
    assert decode.max_context == decode.prompt_length == 10  # decode has no chunk proof


def test_a_kernel_wrong_only_at_the_timed_chunk_is_refused(nano, passing_gate, registries, bench_dir, monkeypatch,
                                                            capsys):
    """A stand-in for a kernel that breaks past the gate's shapes: forwards of more than 4 tokens write their MLA
    cache rows negated. The cache is full and finite (the depth proof passes it); the chunk proof refuses the
    figure, names the chunks and the fix; no figure is recorded, the refusal is (with the failed proof)."""
    real = Engine._forward

    def wrong_when_long(self, ids, last_only):
        out = real(self, ids, last_only)
        if ids.shape[0] > 4:
            end = self.state.length + ids.shape[0]  # the forward's rows; length advances after it
            for _, cache in dep.mla_caches(self):
                cache[end - ids.shape[0]:end].neg_()
        return out

    monkeypatch.setattr(Engine, "_forward", wrong_when_long)
    req = BenchRequest("prefill", (0,), 12, [("A", registries[0])], repeats=1, warmup=0, chunk=8)
    with pytest.raises(chunking.ChunkDependence, match=r"chunks of 8 and of 1 .* --chunk 1"):
        run_bench(req, nano)

    monkeypatch.setattr(bench_cmd, "load_weights", lambda spec: nano)
    assert main(["bench", "prefill", "--model", "k3-nano", "--tokens", "12", "--chunk", "8", "--repeats", "1",
                 "--registry", str(registries[0])]) == 1  # CheckFailed: exit 1, as --help says
    err = " ".join(capsys.readouterr().err.split())
    assert "gives different logits in chunks of 8" in err and "recorded the refusal as ledger row" in err
    rows = L.read(bench_dir / L.LEDGER)
    assert not [r for r in rows if r.get("kind") == "measurement"]
    (refusal,) = [r for r in rows if r.get("kind") == "refusal"]
    assert refusal["refused"] == "A" and refusal["registry"] == str(registries[0]) and refusal["gate"] is None
    proof = refusal["chunk_proof"]
    assert not proof["passed"] and (proof["timed_chunk"], proof["reference_chunk"]) == (8, 1)
    assert "chunks of 8" in refusal["why"] and "bench prefill" in refusal["command"]


def test_the_proof_compares_the_prompts_last_row_and_the_decode_steps_after(nano, reference_registry):
    """prove() itself: S + 1 rows, from the fill callback each time; a chunk that changes nothing agrees exactly."""
    from sparkops.engine.loading import make_ops
    from sparkops.gate.tolerances import model_rule_for

    eng = Engine(nano, make_ops("cpu", reference_registry), max_context=32)
    fills = []

    def fill():
        fills.append(1)
        eng.reset()
        dep.fill(eng, dep.random_tokens(4, nano.config.vocab_size, 7))

    prompt = dep.random_tokens(10, nano.config.vocab_size, 8)
    steps = dep.random_tokens(3, nano.config.vocab_size, 9)
    router = eng.ops.moe_router
    proof = chunking.prove(eng, fill, prompt, steps, None, (1, 5), model_rule_for("fp32"), router_tie("fp32"))
    assert fills == [1, 1] and (proof.timed_chunk, proof.reference_chunk, proof.rows) == (10, 5, 4)
    assert proof.passed and proof.kl_max < 1e-9 and eng.length == 4 + 10 + 3
    assert torch.isfinite(torch.tensor(proof.kl_mean))
    # routing pinned: every MoE layer's choice at each of the prompt's and the steps' positions replayed (the fill's
    # are not on the tape), none flipped on the float64 reference; the engine's router is its own again after
    n_moe = n_moe_layers(nano)
    assert n_moe and f"0 of {(10 + 3) * n_moe} decisions flipped" in proof.routing, proof.routing
    assert "routing pinned" in proof.line() and eng.ops.moe_router is router


def router_tie(variant):
    from sparkops.gate.tolerances import rule_for

    return rule_for("moe_router", variant).tie


def n_moe_layers(weights):
    from sparkops.gate.routing import n_moe_layers as count

    return count(weights)


def _engine_and_fill(nano, reference_registry):
    from sparkops.engine.loading import make_ops

    eng = Engine(nano, make_ops("cpu", reference_registry), max_context=32)

    def fill():
        eng.reset()
        dep.fill(eng, dep.random_tokens(4, nano.config.vocab_size, 7))

    return eng, fill, dep.random_tokens(10, nano.config.vocab_size, 8), dep.random_tokens(3, nano.config.vocab_size, 9)


def test_a_router_wrong_only_at_the_timed_chunk_fails_the_pinned_proof(nano, reference_registry):
    """Forwards of more than 4 tokens (the timed chunk of 10; the reference runs chunks of 4) swap each token's last
    choice for its lowest-scoring expert: not a top-k of the router's own scores, so the replay refuses it whatever
    the logits say, and the proof names the routing."""
    from sparkops.gate.tolerances import model_rule_for

    eng, fill, prompt, steps = _engine_and_fill(nano, reference_registry)
    real = eng.ops.moe_router

    def wrong_when_long(x, weight, bias, top_k, *rest):
        w, ids = real(x, weight, bias, top_k, *rest)
        if x.shape[0] > 4:
            ids = ids.clone()
            ids[:, -1] = (x.double() @ weight.double().T).argmin(dim=1).to(ids.dtype)
        return w, ids

    eng.ops.moe_router = wrong_when_long
    proof = chunking.prove(eng, fill, prompt, steps, None, (1, 4), model_rule_for("fp32"), router_tie("fp32"))
    assert (proof.timed_chunk, proof.reference_chunk) == (10, 4)
    assert not proof.passed and "not a top-k of the router's own scores" in proof.routing, proof.routing
    assert "FAIL" in proof.line() and eng.ops.moe_router is wrong_when_long


def test_without_a_router_tolerance_routing_runs_free_and_says_so(nano, reference_registry):
    from sparkops.gate.tolerances import model_rule_for

    eng, fill, prompt, steps = _engine_and_fill(nano, reference_registry)
    proof = chunking.prove(eng, fill, prompt, steps, None, (1, 5), model_rule_for("fp32"), None)
    assert proof.passed and proof.routing == "routing: free (no router tolerance was given)"
