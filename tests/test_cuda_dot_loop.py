"""The length of the one-token Q8 gate/up's inner loops, read from the SASS (no GPU needed).

GPU session 28 found the Q8 hidden gate/up (`moe_q4_k_gateupq8hpdl_*`) issue-bound at ~5.2 thread instructions a
weight, against the ~4.6 a weight that the H200's schedulers have at the read roofline. Its disassembly put 87
instructions a lane a super-block in the dot loop (32 weights: 2.7 a weight, 8 of them __dp4a) and 16 a 16-byte
cp.async in the row copy. `moe_experts=cupy_rowwarp_pdl_q8_pairs` exists to shorten both: a lane a whole Q4_K
sub-block pair (64 weights, 16 __dp4a) and the row copies two a turn. Those counts are properties of the compiled
code, so they are held here, as the load schedules are in test_cuda_load_schedule.py: a change that lengthened the
pairs form's loops back would fail CI, not wait for a GPU session to show it. Instructions are counted statically,
one turn of the loop, as ptxas laid it out for sm_90.
"""

from __future__ import annotations

import pytest

from tests.cuda_sass import KERNEL_DIR, Function, listing

#: weights one __dp4a (SASS IDP.4A) takes: four int8 codes
WEIGHTS_AN_IDP = 4


def _loops(fn: Function) -> list[tuple[int, int]]:
    """(start, end) instruction indices of every backward branch's body: a loop, one turn."""
    out = []
    for i, ins in enumerate(fn.instructions):
        if ins.opcode.split(".")[0] != "BRA":
            continue
        for label, at in fn.labels.items():
            if f"`({label})" in ins.operands and at <= i:
                out.append((at, i + 1))
    return out


def _count(fn: Function, lo: int, hi: int, prefix: str) -> int:
    return sum(ins.opcode.startswith(prefix) for ins in fn.instructions[lo:hi])


def dot_loop(fn: Function) -> tuple[int, int]:
    """(instructions, IDP.4A) of one turn of the loop holding the most __dp4a."""
    best = max(_loops(fn), key=lambda span: _count(fn, *span, "IDP"), default=None)
    assert best is not None and _count(fn, *best, "IDP"), f"{fn.name}: no loop with __dp4a in it"
    return best[1] - best[0], _count(fn, *best, "IDP")


def copy_loop(fn: Function) -> tuple[int, int]:
    """(instructions, LDGSTS) of one turn of the loop holding the most cp.async."""
    best = max(_loops(fn), key=lambda span: _count(fn, *span, "LDGSTS"), default=None)
    assert best is not None and _count(fn, *best, "LDGSTS"), f"{fn.name}: no loop with cp.async in it"
    return best[1] - best[0], _count(fn, *best, "LDGSTS")


@pytest.fixture(scope="module")
def moe_rowwarp(tmp_path_factory) -> dict[str, Function]:
    return listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path_factory.mktemp("sass"))


@pytest.mark.parametrize("form", ["hw", "hwx"], ids=["dense_x", "padded_x"])
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_the_pairs_dot_loop_spends_under_two_instructions_a_weight(moe_rowwarp, dt, form):
    """The pairs form's dot loop (both forms of the staged x): 16 __dp4a a turn (64 weights), under 2 instructions a
    weight (106 when written: 1.66), and under 0.7x the one-wave form's (87 for 32 weights when session 28 counted
    it: 2.72)."""
    pairs, one_wave = moe_rowwarp[f"moe_q4_k_gateupq8{form}pdl_{dt}"], moe_rowwarp[f"moe_q4_k_gateupq8hpdl_{dt}"]
    n, idp = dot_loop(pairs)
    n0, idp0 = dot_loop(one_wave)
    assert (idp, idp0) == (16, 8), (idp, idp0)
    per, per0 = n / (idp * WEIGHTS_AN_IDP), n0 / (idp0 * WEIGHTS_AN_IDP)
    assert per < 2.0, f"pairs: {n} instructions for {idp * WEIGHTS_AN_IDP} weights ({per:.2f} a weight)"
    assert per < 0.7 * per0, f"pairs {per:.2f} against the one-wave form's {per0:.2f} instructions a weight"


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_the_pairs_row_copy_takes_two_copies_a_turn_in_few_instructions(moe_rowwarp, dt):
    """The paired row copy: two cp.async a turn, at most 8 instructions a copy (6 when written), where the one-wave
    form's select between the gate and up ranges costs 16 for one."""
    n, copies = copy_loop(moe_rowwarp[f"moe_q4_k_gateupq8hwpdl_{dt}"])
    n0, copies0 = copy_loop(moe_rowwarp[f"moe_q4_k_gateupq8hpdl_{dt}"])
    assert copies == 2 and n / copies <= 8, f"pairs: {n} instructions for {copies} copies"
    assert n / copies < n0 / copies0, (n, copies, n0, copies0)


@pytest.fixture(scope="module")
def linear_x16(tmp_path_factory) -> dict[str, Function]:
    return listing(KERNEL_DIR / "linear_q6k_x16.cu", tmp_path_factory.mktemp("sass"))


@pytest.mark.parametrize("form", ["r16t96", "r16t192", "r32t192", "r32t384"])
def test_the_x16_lm_head_dot_loop_spends_about_half_the_float_loops_instructions(linear_x16, form):
    """linear=cupy_x16_pdl's unit loop (64 Q6_K weights against two int8 planes of x: 32 __dp4a a turn) under 4
    instructions a weight (228 for 64 when written: 3.56), where cupy_float's Q6_K chunk loop spends 6.8 (219 for 32,
    session 28): the float decode of 6-bit codes was the whole issue budget of the lm_head's read."""
    n, idp = dot_loop(linear_x16[f"linear_q6_k_x16pdl_{form}"])
    assert idp == 32, idp
    per = n / (idp * WEIGHTS_AN_IDP / 2)  # two __dp4a (the hi and lo planes) a 4 weights
    assert per < 4.0, f"{form}: {n} instructions for 64 weights ({per:.2f} a weight)"

