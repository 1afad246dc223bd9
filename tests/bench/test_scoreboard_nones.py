"""`sparkops ledger nones`: the `none` changes that gained in every pair at every depth, judged against a step
registry (held, lacking, or moved to a third form), each counted once in the candidates and their naive estimate."""

from __future__ import annotations

import json

import pytest

from sparkops.bench import ledger as L
from sparkops.bench.nones import candidates, estimate, judge, none_changes
from sparkops.cli import main

UP = [1.004, 1.006, 1.005, 1.007, 1.003, 1.006]  # six pairs, every one a gain


def row(rid, depth, ratio, differs, tier="none", pairs=UP, phase="decode", command=None, date=None):
    """A measurement row as bench writes it, with what matters here."""
    return {"id": rid, "kind": "measurement", "date": date or rid[:15], "phase": phase, "depth": depth,
            "ratio": ratio, "tier": tier, "pair_ratios": list(pairs), "differs": differs,
            "change": f"change of {rid}", "command": command or f"sparkops bench decode ({rid[:15]})"}


STEP = """
[ops.attention.cuda]
impl = "cupy_splitk_bf16_deep"
fallback = "error"

[ops.linear.cuda]
impl = "triton_lastblock"
fallback = "error"

[ops.linear.cuda.by_type.Q4_K]
impl = "cupy_rowwarp"

[ops.gated_rmsnorm.cuda]
impl = "triton"
fallback = "error"

[ops.swiglu.cuda]
impl = "triton"
fallback = "error"

[engine]
fuse_projections = true
fuse_kda_norm = true
"""


@pytest.fixture
def step(tmp_path):
    p = tmp_path / "step.toml"
    p.write_text(STEP)
    return p


def ledger():
    lin = ["triton_lastblock; Q6_K: cupy_float; Q4_K: cupy_rowwarp",
           "triton_lastblock; Q6_K: cupy_float; Q4_K: cupy_rowwarp_pdl"]
    return [
        # the PDL pair at two depths: the step lacks both of its pairs (it runs their A sides)
        row("20261201-005527-aaaaaa", 0, 1.006, {"gated_rmsnorm": ["triton", "triton_pdl"], "linear": lin}),
        row("20261201-005527-bbbbbb", 32768, 1.008, {"gated_rmsnorm": ["triton", "triton_pdl"], "linear": lin},
            command="sparkops bench decode (20261201-005527)"),
        # an [engine] option the step does not set (annotated as the arms recorded it)
        row("20261201-025908-cccccc", 0, 1.007, {"[engine]": ["fuse_projections",
                                                             "fuse_projections, side_stream (20 of 20 KDA layers)"]}),
        row("20261130-044758-dddddd", 0, 1.010, {"[engine]": ["fuse_projections", "fuse_projections, fuse_low_rank"]}),
        # the same option timed again earlier: counted once (the later one stands)
        row("20261130-044133-eeeeee", 0, 1.009, {"[engine]": ["fuse_projections", "fuse_projections, fuse_low_rank"]}),
        # held by the step
        row("20261201-104627-ffffff", 0, 1.002, {"swiglu": ["torch", "triton"]}),
        # the step moved attention to a third form: a conflict, not a candidate
        row("20261201-025024-gggggg", 0, 1.007, {"attention": ["cupy_splitk_bf16", "cupy_splitk_bf16_active"]}),
        # a median gain with one losing pair: not gained
        row("20261201-103556-hhhhhh", 0, 1.001, {"[engine]": ["side_stream", "side_stream, side_priority"]},
            pairs=[1.002, 0.9995, 1.001, 1.001, 1.002, 1.001]),
        # a win, a prefill none, a retracted none, an old none with no differs: none of them listed
        row("20261201-105214-iiiiii", 0, 1.035, {"swiglu": ["torch", "triton"]}, tier="win"),
        row("20261130-123920-jjjjjj", 0, 1.05, {"attention": ["triton", "triton_sdpa"]}, phase="prefill"),
        row("20261130-000000-kkkkkk", 0, 1.02, {"moe_router": ["triton", "triton_lastblock"]}),
        {"id": "20261130-000001-llllll", "kind": "retraction", "retracts": "20261130-000000-kkkkkk", "why": "x"},
        {**row("20261129-150000-mmmmmm", 0, 1.01, None), "differs": None},
    ]


def test_each_none_is_judged_against_the_step(step):
    changes, unjudged = none_changes(ledger())
    judge(changes, step)
    by = {c.ids[0][-6:]: c for c in changes}
    assert unjudged == 1 and set(by) == {"aaaaaa", "cccccc", "dddddd", "eeeeee", "ffffff", "gggggg", "hhhhhh"}
    pdl = by["aaaaaa"]
    assert pdl.ids == ["20261201-005527-aaaaaa", "20261201-005527-bbbbbb"]  # one bench run, a row a depth
    assert pdl.ratios == {0: 1.006, 32768: 1.008} and pdl.gained and not pdl.held
    assert pdl.missing == ["gated_rmsnorm=triton_pdl", "linear@Q4_K=cupy_rowwarp_pdl"] and not pdl.conflicts
    assert by["cccccc"].missing == ["engine side_stream=on"]  # the annotation is not part of the option's name
    assert by["ffffff"].held
    assert by["gggggg"].conflicts == ["attention=cupy_splitk_bf16_active (from cupy_splitk_bf16; the step: "
                                      "cupy_splitk_bf16_deep)"]
    assert not by["hhhhhh"].gained  # 0.9995 in one pair


def test_the_candidates_are_counted_once_and_multiplied_as_an_estimate(step):
    changes, _ = none_changes(ledger())
    judge(changes, step)
    chosen = candidates(changes)
    assert sorted(c.ids[0][-6:] for c in chosen) == ["aaaaaa", "cccccc", "dddddd"]  # eeeeee gives way to dddddd
    # only depth 0 is timed by every candidate
    assert estimate(changes) == {0: pytest.approx(1.006 * 1.007 * 1.010)}


def test_a_change_inside_a_larger_one_gives_way_to_it(step):
    lin = ["triton_lastblock; Q4_K: cupy_rowwarp", "triton_lastblock; Q4_K: cupy_rowwarp_pdl"]
    rows = [row("20261201-005527-aaaaaa", 0, 1.006, {"linear": lin}),
            row("20261201-005942-bbbbbb", 0, 1.008, {"linear": lin, "gated_rmsnorm": ["triton", "triton_pdl"]})]
    changes, _ = none_changes(rows)
    judge(changes, step)
    assert [c.ids[0][-6:] for c in candidates(changes)] == ["bbbbbb"]


def test_the_cli_lists_them_and_says_what_to_take(step, tmp_path, capsys):
    d = tmp_path / "bench"
    d.mkdir()
    for r in ledger():
        L.append(d / L.LEDGER, r)
    assert main(["ledger", "nones", "--registry", str(step), "--bench-dir", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unjudged_rows"] == 1 and out["estimate"] == {"0": pytest.approx(1.006 * 1.007 * 1.010)}
    taken = {c["ids"][0][-6:] for c in out["changes"] if c["candidate"]}
    assert taken == {"aaaaaa", "cccccc", "dddddd"}
    assert main(["ledger", "nones", "--registry", str(step), "--bench-dir", str(d)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "3 to take together" in text and "engine fuse_low_rank=on" in text and "naive estimate" in text


def test_the_cli_needs_the_step(tmp_path, capsys):
    assert main(["ledger", "nones", "--bench-dir", str(tmp_path)]) != 0
    assert "needs --registry STEP.toml" in " ".join(capsys.readouterr().err.split())
