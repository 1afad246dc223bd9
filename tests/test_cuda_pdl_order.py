"""The CI check of the CuPy plugin's PDL kernels: in the compiled code (SASS), no read-only load can run before the
kernel's griddepcontrol.wait. No GPU needed: nvcc compiles each source that calls pdl_wait() for sm_90 and nvdisasm
lists it (tests/cuda_sass.py reads the listing and walks every path from the kernel's entry).

Why the SASS and not the source: a read-only load (`__ldg`, `ld.global.nc`) tells the compiler that nothing writes
the data while the kernel runs, so ptxas may hoist it above the wait, where the kernel before is still writing. GPU
session 21 found moe_router_rowwarp_pdl routing a stale x that way: its source read x after pdl_wait(), its SASS did
not. The rule the check holds every PDL kernel to: before the wait, weights go through __ldcs / __ldcg / cp.async,
never the read-only path (the listing cannot tell a weight's address from an activation's), and the wait runs on
every path (one inside a loop, taken on its first round only, cannot be proven from the compiled code).

Without nvcc or nvdisasm the check cannot run: under CI=true that is a failure, anywhere else the tests skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cuda_sass import KERNEL_DIR, Function, Instruction, listing, parse

PDL_SOURCES = sorted(p for p in KERNEL_DIR.glob("*.cu") if "pdl_wait();" in p.read_text())
#: the PDL kernels as of session 21: the check must see each (a listing it failed to read would pass vacuously)
KNOWN = {
    "linear_rowwarp.cu": {"linear_q4_k_rowwarppdl_bf16", "linear_q4_k_rowcppdl_bf16", "linear_q4_k_rowq8pdl_bf16",
                          "linear_q4_k_rowq8pairpdl_bf16"},
    "moe_rowwarp.cu": {"moe_q4_k_downpdl", "moe_q4_k_downpdlw", "moe_q4_k_downsplitpdl", "moe_q4_k_downsplit2pdl",
                       "moe_q4_k_downsplit8pdl", "moe_q4_k_gateupcppdl_bf16", "moe_q4_k_gateupcppdlsh_bf16",
                       "moe_q4_k_gateupq8pdl_bf16", "moe_q4_k_gateupq8hpdl_bf16", "moe_q4_k_downq8pdl",
                       "moe_q4_k_gateupq8hp3pdl_bf16", "moe_q4_k_gateupq8hp4pdl_bf16", "moe_q4_k_gateupq8hwpdl_bf16",
                       "moe_q4_k_gateupq8hwxpdl_bf16", "moe_q4_k_downq8cp1pdl", "moe_q4_k_downq8cp3pdl",
                       "moe_q4_k_downq8cp6pdl", "moe_q4_k_downq8idspdl", "moe_q4_k_downq8aheadpdl",
                       "moe_q4_k_downq8hspdl", "moe_q4_k_downq8l2pfpdl"},
    "moe_router.cu": {"moe_router_rowwarp_pdl", "moe_router_rowwarp_pdl_sorted", "moe_router_rowwarp_pdl_merge"},
    "moe_down_norm.cu": {"moe_q4_k_downq8normpdl"},  # with moe_rowwarp.cu's, which it includes
    "linear_norm.cu": {"linear_q4_k_rowwarpnormpdl_f32", "linear_q4_k_rowwarpnormpdl_bf16",
                       "linear_q4_k_rowwarpnormpdl_f16"},  # with linear_rowwarp.cu's, which it includes
    "add_rmsnorm_router.cu": {"add_rmsnorm_router_pdl_f32", "add_rmsnorm_router_pdl_bf16",
                              "add_rmsnorm_router_pdl_f16"},
    "linear_q6k_x16.cu": {"linear_q6_k_x16pdl_r16t96", "linear_q6_k_x16pdl_r16t192", "linear_q6_k_x16pdl_r32t192",
                          "linear_q6_k_x16pdl_r32t384"},
    "attention.cu": {"mla_absorb_deep_pdl", "mla_split_mma_pdl", "mla_combine_deep_pdl", "mla_up_deep_pdl",
                     "mla_split_mma_fp8_pdl", "mla_split_twin_pdl", "mla_split_bulk_pdl",
                     "mla_split_qreg_pdl", "mla_split_qreg_fp8_pdl",
                     "mla_split_l2pf_pdl", "mla_split_ring_pdl"},
    "linear_iq1s_q8.cu": {"linear_iq1_s_rowq8pdl_f32", "linear_iq1_s_rowq8pdl_bf16", "linear_iq1_s_rowq8pdl_f16",
                          "linear_iq1_s_rowq8pairpdl_bf16"},
    "moe_iq1s_q8.cu": {"moe_iq1_s_gateupq8pdl_bf16", "moe_iq1_s_downq8pdl_bf16", "moe_iq1_s_gateupq8hpdl_bf16",
                       "moe_iq1_s_downq8hpdl_bf16", "moe_iq1_s_gateupq8hpairsgpdl_bf16", "moe_iq1_s_downq8hflatpdl_bf16"},
    "linear_iq1s_t2.cu": {"linear_iq1_s_t2rowq8pdl_bf16", "linear_iq1_s_t2rowq8pairpdl_bf16"},
    "moe_iq1s_t2.cu": {"moe_iq1_s_t2gateupq8hpdl_bf16", "moe_iq1_s_t2downq8hpdl_bf16"},
}


def violations(functions: dict[str, Function]) -> dict[str, list[Instruction]]:
    """PDL kernel -> the read-only loads a path reaches before its wait (kernels without a wait are not PDL)."""
    return {name: bad for name, fn in functions.items() if fn.waits and (bad := fn.loads_before_wait())}


def test_the_pdl_sources_are_found():
    assert {p.name for p in PDL_SOURCES} == set(KNOWN), "a PDL source was added or renamed: update KNOWN"


@pytest.mark.parametrize("source", PDL_SOURCES, ids=[p.name for p in PDL_SOURCES])
def test_no_read_only_load_before_the_wait(source: Path, tmp_path):
    functions = listing(source, tmp_path)
    waiting = {name for name, fn in functions.items() if fn.waits}
    assert KNOWN[source.name] <= waiting, f"PDL kernels not found in the listing: {KNOWN[source.name] - waiting}"
    bad = violations(functions)
    lines = [f"  {name}: {len(loads)} loads, first {loads[0].opcode} at {loads[0].address:#x}"
             for name, loads in bad.items()]
    assert not bad, "read-only loads before griddepcontrol.wait (SASS ACQBULK):\n" + "\n".join(lines)


MENDED = """        rt_w_round(wr, 0, n4, lane, wv);
        pdl_launch_dependents();
        pdl_wait();  // x is the kernel before's output
        for (int base = 0; base < n4; base += 32 * RT_CHUNKS) {
            if (base > 0) rt_w_round(wr, base, n4, lane, wv);
            acc = rt_x_round<DT, false>(x, xr, base, n4, lane, wv, acc);
        }"""
#: session 19's form: the wait inside the loop on its first round, x through the read-only path
RACING = """        for (int base = 0; base < n4; base += 32 * RT_CHUNKS) {
            rt_w_round(wr, base, n4, lane, wv);
            if (base == 0) {
                pdl_launch_dependents();
                pdl_wait();
            }
            acc = rt_x_round<DT, true>(x, xr, base, n4, lane, wv, acc);
        }"""


def test_the_race_session_21_found_is_caught(tmp_path):
    """moe_router.cu's PDL logit loop as session 19 wrote it: the check must name the router, and among the loads it
    names must be x's vector loads (float4 / uint2: .128 / .64), which ptxas put above the wait - not only the bias's
    scalar loads that a path skipping the loop's wait would reach.

    The racing file goes through the front end whole, as the real one does, and ptxas assembles only the router this
    test reads: the same instructions the whole file's compile gives it (only its labels are numbered otherwise), where
    the file's three other kernels, 51k of its 63k SASS instructions, cost ptxas most of the compile's time."""
    text = (KERNEL_DIR / "moe_router.cu").read_text()
    assert MENDED in text, "moe_router.cu's PDL logit loop changed: update MENDED and RACING here"
    source = tmp_path / "moe_router.cu"
    source.write_text(text.replace(MENDED, RACING))
    bad = violations(listing(source, tmp_path, entries=("moe_router_rowwarp_pdl",)))
    assert "moe_router_rowwarp_pdl" in bad, "the check missed the session-19 PDL router"
    vector = [i.opcode for i in bad["moe_router_rowwarp_pdl"] if ".64." in i.opcode or ".128." in i.opcode]
    assert vector, "the check found no hoisted x load in the session-19 PDL router"


# -- the path walk on hand-written listings ------------------------------------------------------------------------

def _fn(body: str) -> Function:
    return parse(".text.k:\n" + body)["k"]


def test_a_load_after_the_wait_is_fine():
    fn = _fn("        /*0000*/                   ACQBULK ;\n"
             "        /*0010*/                   LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n"
             "        /*0020*/                   EXIT ;\n")
    assert fn.waits and fn.loads_before_wait() == []


def test_a_load_above_the_wait_is_caught():
    fn = _fn("        /*0000*/                   LDG.E.64.CONSTANT R2, desc[UR4][R2.64] ;\n"
             "        /*0010*/                   LDG.E.EF.128 R4, desc[UR4][R6.64] ;\n"
             "        /*0020*/                   ACQBULK ;\n"
             "        /*0030*/                   EXIT ;\n")
    assert [i.opcode for i in fn.loads_before_wait()] == ["LDG.E.64.CONSTANT"]  # the streamed weight load is fine


def test_a_branch_around_the_wait_is_caught():
    fn = _fn("        /*0000*/               @P0 BRA `(.L_x_1) ;\n"
             "        /*0010*/                   ACQBULK ;\n"
             ".L_x_1:\n"
             "        /*0020*/                   LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n"
             "        /*0030*/                   EXIT ;\n")
    assert len(fn.loads_before_wait()) == 1


def test_an_unconditional_branch_past_the_load_and_a_conditional_exit():
    fn = _fn("        /*0000*/                   BRA `(.L_x_1) ;\n"
             "        /*0010*/                   LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n"
             ".L_x_1:\n"
             "        /*0020*/               @P1 EXIT ;\n"
             "        /*0030*/                   ACQBULK ;\n"
             "        /*0040*/                   LDG.E.CONSTANT R2, desc[UR4][R2.64] ;\n"
             "        /*0050*/                   EXIT ;\n")
    assert fn.loads_before_wait() == []  # the first load is dead code, the second is after the wait


def test_the_shared_first_gate_up_requests_the_shared_experts_rows_before_its_wait(tmp_path):
    """moe_experts=cupy_rowwarp_pdl_shared's gate/up: the shared expert's blocks copy their weight rows (cp.async:
    LDGSTS) before griddepcontrol.wait, so those bytes stream while the router runs - the form's whole point, which a
    compiler that sank the copies below the wait would undo without changing a bit. The plain PDL form copies nothing
    before its wait (its rows depend on the router's ids)."""
    functions = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)
    copies = lambda fn: fn.before_wait(lambda ins: ins.opcode.startswith("LDGSTS"))  # noqa: E731
    for dt in ("f32", "bf16", "f16"):
        assert copies(functions[f"moe_q4_k_gateupcppdlsh_{dt}"]), \
            f"moe_q4_k_gateupcppdlsh_{dt}: no copy before the wait"
        assert not copies(functions[f"moe_q4_k_gateupcppdl_{dt}"]), f"moe_q4_k_gateupcppdl_{dt} copies before its wait"


def test_the_q8_gemv_requests_its_rows_before_its_wait(tmp_path):
    """linear=cupy_rowwarp_pdl_q8's kernels (both forms, every dtype): the block's weight rows are copied (cp.async:
    LDGSTS) before griddepcontrol.wait, so they stream while the kernel before ends, as the copy+pdl form's do - and
    none after it, so the listing has the whole copy there."""
    functions = listing(KERNEL_DIR / "linear_rowwarp.cu", tmp_path)
    for form in ("rowq8pdl", "rowq8pairpdl", "rowcppdl"):
        for dt in ("f32", "bf16", "f16"):
            fn = functions[f"linear_q4_k_{form}_{dt}"]
            wait = min(i.address for i in fn.instructions if i.opcode.split(".")[0] == "ACQBULK")
            copies = [i.address for i in fn.instructions if i.opcode.startswith("LDGSTS")]
            assert copies and all(a < wait for a in copies), f"linear_q4_k_{form}_{dt}: copies {copies}, wait {wait}"


def test_the_copy_downs_request_every_row_before_their_wait(tmp_path):
    """moe_experts=cupy_rowwarp_pdl_q8_hidden_cp's down in each form (1, 3, 6 commit groups): every copy of the warp's
    rows (cp.async: LDGSTS) sits above griddepcontrol.wait, so all its bytes are requested while gate/up ends - the
    form's point, which a compiler that sank a group's copies below the wait would undo without changing a bit. The
    warp down copies nothing."""
    functions = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)
    for g in (1, 3, 6):
        fn = functions[f"moe_q4_k_downq8cp{g}pdl"]
        wait = min(i.address for i in fn.instructions if i.opcode.split(".")[0] == "ACQBULK")
        copies = [i.address for i in fn.instructions if i.opcode.startswith("LDGSTS")]
        assert copies and all(a < wait for a in copies), f"moe_q4_k_downq8cp{g}pdl: copies {copies}, wait {wait}"
    assert not any(i.opcode.startswith("LDGSTS") for i in functions["moe_q4_k_downq8pdl"].instructions)


def test_the_down_loads_read_the_ids_once_and_the_ahead_form_requests_a_round_early(tmp_path):
    """moe_experts=cupy_rowwarp_pdl_q8_hidden_ld's downs: one coherent load of the slots' ids (64-bit) and one of
    their weights a thread (LDG.E.64.STRONG.GPU, LDG.E.STRONG.GPU), where the warp down makes one of each a round of
    its first two groups - session 30's source page had a fifth of its stall samples there. In the "ahead" form each
    round's hidden-vector loads (__ldca: LDG.E.128.STRONG.SM, four a round) come before the round before's first
    __dp4a; in the others after it. A compiler that moved them would undo the form without changing a bit."""
    functions = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)

    def loads(name: str, opcode: str) -> list[int]:
        return [n for n, i in enumerate(functions[name].instructions) if i.opcode == opcode]

    for name in ("moe_q4_k_downq8idspdl", "moe_q4_k_downq8aheadpdl"):
        assert len(loads(name, "LDG.E.64.STRONG.GPU")) == 1 and len(loads(name, "LDG.E.STRONG.GPU")) == 1, name
    assert len(loads("moe_q4_k_downq8pdl", "LDG.E.64.STRONG.GPU")) > 1

    def rounds_early(name: str) -> bool:
        hidden = loads(name, "LDG.E.128.STRONG.SM")
        dots = [n for n, i in enumerate(functions[name].instructions) if i.opcode.startswith("IDP.4A")]
        first_dot = dots[0]  # round 0's
        return sum(n < first_dot for n in hidden) >= 8  # rounds 0 and 1 requested before round 0 is dotted

    assert rounds_early("moe_q4_k_downq8aheadpdl")
    assert not rounds_early("moe_q4_k_downq8idspdl") and not rounds_early("moe_q4_k_downq8pdl")


def _rounds(name: str) -> int:
    """A #define of moe_rowwarp.cu or q4k_rows.cuh, read from the source (the test follows the kernel's constants)."""
    import re

    for source in ("moe_rowwarp.cu", "q4k_rows.cuh"):
        if m := re.search(rf"#define {name} (\d+)", (KERNEL_DIR / source).read_text()):
            return int(m.group(1))
    raise AssertionError(f"#define {name} not found")


def test_the_wide_down_requests_its_whole_group_above_its_wait(tmp_path):
    """moe_experts=cupy_rowwarp_pdl_wide's down: every streamed weight load of its first group (LDG.E.EF.128, two a
    super-block: the header and the lane's quants) sits above griddepcontrol.wait in the listing - DOWN_WIDE_ROUNDS x
    2, the 48B's whole row, against RW_ROUNDS x 2 in the plain PDL down. That is the form's point; a compiler that sank
    the loads below the wait would undo it without changing a bit."""
    functions = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)

    def above_wait(name: str) -> tuple[int, int]:
        ins = functions[name].instructions
        wait = min(i.address for i in ins if i.opcode.split(".")[0] == "ACQBULK")
        loads = [i.address for i in ins if i.opcode == "LDG.E.EF.128"]
        return sum(a < wait for a in loads), len(loads)

    wide, plain, split = _rounds("DOWN_WIDE_ROUNDS"), _rounds("RW_ROUNDS"), _rounds("DOWN_SPLIT_ROUNDS")
    assert wide > plain
    assert above_wait("moe_q4_k_downpdlw") == (2 * wide, 2 * wide)
    assert above_wait("moe_q4_k_downpdl") == (2 * plain, 2 * plain)
    # the split downs (cupy_rowwarp_pdl_split's forms): a warp's whole group (the 48B's share of its 36) above the wait
    assert above_wait("moe_q4_k_downsplitpdl")[0] == 2 * split
    assert above_wait("moe_q4_k_downsplit2pdl")[0] == 2 * _rounds("DOWN_SPLIT2_ROUNDS")
    assert above_wait("moe_q4_k_downsplit8pdl")[0] == 2 * _rounds("DOWN_SPLIT8_ROUNDS")
    # the down on the Q8 hidden vector (cupy_rowwarp_pdl_q8_hidden): the plain PDL down's first group, above its wait
    assert above_wait("moe_q4_k_downq8pdl") == (2 * plain, 2 * plain)


def test_the_down_loads_slot_limit_is_one_number_in_the_kernel_and_its_launcher():
    """down_q8ld_q4_k reads a slot a lane, so a call with more than DOWN_LD_MAX_K slots must never reach it: the
    launcher (moe_experts.DOWN_LD_MAX_K, which sends such calls to the warp down) and the kernel's #define agree, and
    neither exceeds a warp's lanes."""
    from sparkops_cupy import moe_experts as cme

    assert cme.DOWN_LD_MAX_K == _rounds("DOWN_LD_MAX_K") <= 32
