"""The depth assertion: a decode figure is recorded only at a context the caches provably hold.

Each test builds a harness variant that flatters itself the way the seed's did (a hard-coded or
capped context, a truncated prompt, rows written in the wrong place, a context overwritten while
timing) and shows the assertion fires - and that the honest path passes.
"""

from __future__ import annotations

import pytest
import torch

from sparkops.bench import depth as dep
from sparkops.bench.harness import BenchRequest, run_bench
from sparkops.engine import Engine
from sparkops.engine.loading import make_ops

D = 24


@pytest.fixture(scope="module")
def ops(reference_registry):
    return make_ops("cpu", reference_registry)


@pytest.fixture(scope="module")
def filled_state(nano, ops):
    """One honest fill to depth D, copied into each test's engine (the fill is the slow part)."""
    eng = Engine(nano, ops, max_context=D + 4)
    dep.fill(eng, dep.random_tokens(D, 320, 0))
    return eng.state


def engine(nano, ops, max_context: int = D + 4) -> Engine:
    return Engine(nano, ops, max_context=max_context)


def filled(nano, ops, state) -> Engine:
    """A new engine holding a copy of the honest fill's state."""
    eng = engine(nano, ops)
    for mine, theirs in zip(eng.state.layers, state.layers):
        for name in vars(mine):
            getattr(mine, name).copy_(getattr(theirs, name))
    eng.state.pos.copy_(state.pos)
    eng.state.length = state.length
    return eng


def test_prompts_are_seeded_random_and_never_constant():
    a, b = dep.random_tokens(64, 320, 7), dep.random_tokens(64, 320, 7)
    assert torch.equal(a, b)
    assert not torch.equal(a, dep.random_tokens(64, 320, 8))
    assert len(set(a.tolist())) > 16
    for s in range(200):  # even two tokens from a vocabulary of two are never both the same
        assert len(set(dep.random_tokens(2, 2, s).tolist())) == 2


def test_honest_fill_passes_and_proves_every_row(nano, ops):
    eng = engine(nano, ops)
    dep.fill(eng, dep.random_tokens(D, 320, 0), chunk=10)  # chunks: 10 + 10 + 4
    proof = dep.verify_depth(eng, D, fresh=True, need=4)
    assert (proof.depth, proof.host_length, proof.device_pos, proof.rows_checked) == (D, D, D, D * proof.mla_layers)
    assert proof.mla_layers == 1 and len(proof.fingerprint) == 1


def test_a_truncated_prompt_is_caught(nano, ops):
    eng = engine(nano, ops)
    dep.fill(eng, dep.random_tokens(D, 320, 0)[:16])  # the harness silently keeps 16 of 24 tokens
    with pytest.raises(dep.DepthError, match="host length is 16, not 24"):
        dep.verify_depth(eng, D, fresh=True)


def test_an_engine_that_caps_its_cache_is_caught(nano, ops, monkeypatch):
    """The seed's max_ctx=64 story in miniature: the engine keeps only the last 8 tokens of any
    prompt in its cache but reports the full length (host and device) - only the rows give it away."""
    cap = 8
    real = Engine.prefill

    def capped(self, tokens, *, last_only=False):
        ids = torch.as_tensor(tokens).reshape(-1)
        skipped = max(0, ids.numel() - cap)
        self.state.pos.add_(skipped)  # pretend the skipped tokens were cached
        self.state.length += skipped
        return real(self, ids[skipped:], last_only=last_only)

    monkeypatch.setattr(Engine, "prefill", capped)
    eng = engine(nano, ops)
    dep.fill(eng, dep.random_tokens(D, 320, 0))
    assert eng.length == D and int(eng.state.pos) == D  # the lie is consistent on both counters...
    with pytest.raises(dep.DepthError, match=r"16 of rows 0..23 never written \(first: row 0\)"):
        dep.verify_depth(eng, D, fresh=True)  # ...but the cache rows are not there


def test_a_device_position_that_disagrees_is_caught(nano, ops, filled_state):
    eng = filled(nano, ops, filled_state)
    eng.state.pos.sub_(8)
    with pytest.raises(dep.DepthError, match="device position is 16, not 24"):
        dep.verify_depth(eng, D, fresh=True)


def test_a_cache_smaller_than_the_claim_is_caught(nano, ops):
    eng = engine(nano, ops, max_context=D)
    dep.fill(eng, dep.random_tokens(D, 320, 0))
    with pytest.raises(dep.DepthError, match="holds 24 tokens, fewer than the 28"):
        dep.verify_depth(eng, D, fresh=True, need=4)


def test_rows_written_at_the_wrong_positions_are_caught(nano, ops, filled_state):
    eng = filled(nano, ops, filled_state)
    cache = dep.mla_caches(eng)[0][1]
    cache[D + 2] = cache[3]  # a stray write past the context on a fresh sequence
    with pytest.raises(dep.DepthError, match=f"row {D + 2} written on a fresh sequence"):
        dep.verify_depth(eng, D, fresh=True)


def test_timed_steps_that_overwrite_the_context_are_caught(nano, ops, filled_state):
    eng = filled(nano, ops, filled_state)
    proof = dep.verify_depth(eng, D, fresh=True, need=4)
    eng.state.pos.zero_()  # the next decode writes its row over row 0
    eng.decode(5)
    with pytest.raises(dep.DepthError, match="changed while timing"):
        dep.check_fingerprint(eng, proof)


def test_snapshot_restores_the_sequence_in_place(nano, ops, filled_state):
    eng = filled(nano, ops, filled_state)
    snap = dep.Snapshot(eng)
    first = eng.decode(9)
    eng.decode(10)
    snap.restore()
    assert eng.length == D and int(eng.state.pos) == D
    assert torch.equal(eng.decode(9), first)  # the same step from the same state: the same logits


def test_the_harness_refuses_a_truncating_fill(nano, passing_gate, registries, monkeypatch):
    """End to end: the harness itself, with its fill swapped for one that truncates, records nothing."""
    real = dep.fill
    monkeypatch.setattr(dep, "fill", lambda eng, tokens, chunk=None: real(eng, tokens[:12], chunk))
    req = BenchRequest("decode", (D,), 2, [("A", registries[0])], repeats=1, warmup=0)
    with pytest.raises(dep.DepthError, match="host length is 12, not 24"):
        run_bench(req, nano)


def test_the_cache_is_sized_from_the_request(nano, passing_gate, registries):
    req = BenchRequest("decode", (0, 24), 3, [("A", registries[0])], repeats=1, warmup=0)
    assert req.max_context == 27
    run = run_bench(req, nano)
    assert [p.depth for p in run.points] == [0, 24]
    for p in run.points:
        assert p.arms["A"].proof["depth"] == p.depth and p.arms["A"].proof["max_context"] == 27
        assert p.arms["A"].proof["rows_checked"] == p.depth


def test_a_long_fill_shows_its_progress(capsys):
    """Filling a deep context (many chunks) reports progress on stderr; a short one stays quiet."""
    from sparkops.bench.depth import PROGRESS_CHUNKS, fill

    class Recorder:  # an engine that only notes what it was fed
        def __init__(self):
            self.fed = []

        def prefill(self, ids, last_only=False):
            self.fed.append(int(ids.numel()))

    e = Recorder()
    fill(e, torch.arange(100), chunk=10)
    assert e.fed == [10] * 10 and "filling the context to 100 tokens" in capsys.readouterr().err
    e = Recorder()
    fill(e, torch.arange(10 * PROGRESS_CHUNKS), chunk=10)
    assert sum(e.fed) == 10 * PROGRESS_CHUNKS and capsys.readouterr().err == ""
