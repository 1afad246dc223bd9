"""The CI check of a kernel's load schedule where a form exists for it: the compiled code (SASS) must issue the loads
the form is built to put in flight before the products that use them. No GPU needed (nvcc and nvdisasm).

mla_absorb_deep and mla_up_deep (attention=cupy_splitk_bf16_deep) exist because the plain absorb's SASS keeps ~5 loads ahead of its
products, so a thread waits out a chain of DRAM round trips for its 32 weights; the deep form requests all 32 weights
and its 32 query values first, for each activation dtype; the up projection's plain loop makes two round trips a
lane, the deep one requests its 16 weights and 16 obar values at once; the combine's slice loop keeps 4 slices' sums in
flight, the deep one 16. ptxas does so only with room for them (__maxnreg__(96):
left to itself it sinks each load back beside its product, as it did the router's, session 14).
"""

from __future__ import annotations

from collections import Counter

from tests.cuda_sass import KERNEL_DIR, listing, load_runs, parse, round_trips


def test_the_deep_absorb_requests_every_weight_first_and_the_plain_one_does_not(tmp_path):
    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    deep, plain = load_runs(functions["mla_absorb_deep"]), load_runs(functions["mla_absorb"])
    # one run of 64 loads (32 weights, 32 query values) a dtype path: bf16, fp32, fp16
    assert sum(r >= 64 for r in deep) == 3, f"mla_absorb_deep's runs of loads before a product: {deep}"
    assert max(plain) < 32, f"the plain absorb's runs: {plain} (if ptxas now batches them, the deep form may be moot)"


def test_the_deep_up_projection_requests_every_value_first(tmp_path):
    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    deep, plain = load_runs(functions["mla_up_deep"]), load_runs(functions["mla_up"])
    assert max(deep) >= 32, f"mla_up_deep's runs of loads before a product: {deep}"  # 16 weights + 16 obar values
    assert max(plain) < 32, f"the plain up projection's runs: {plain}"


def test_the_deep_combine_keeps_four_times_the_slices_in_flight(tmp_path):
    """The combine's slice loop: 4 sums requested ahead in the plain form, 16 in the deep one (the runs of the loops
    over part_m before it are the same in both)."""
    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    deep, plain = load_runs(functions["mla_combine_deep"]), load_runs(functions["mla_combine"])
    assert deep[:-1] == plain[:-1] and plain[-1] <= 4 and deep[-1] >= 16, (plain, deep)


def _after_last_wait(fn) -> list:
    """The instructions after the function's last griddepcontrol.wait (ACQBULK), in program order."""
    waits = [i for i, ins in enumerate(fn.instructions) if ins.opcode.split(".")[0] == "ACQBULK"]
    assert waits, f"{fn.name} has no ACQBULK: not a PDL kernel"
    return fn.instructions[waits[-1] + 1:]


def _runs_of(instructions, load, use) -> list[int]:
    """Runs of instructions passing `load` with none passing `use` between them (load_runs for other opcodes)."""
    runs, run = [], 0
    for ins in instructions:
        if load(ins.opcode):
            run += 1
        elif use(ins.opcode) and run:
            runs.append(run)
            run = 0
    return runs + ([run] if run else [])


def _wide(op: str) -> bool:
    return op.startswith("LDG.E.128")


def _arith(op: str) -> bool:
    return op.startswith(("FADD", "FFMA", "HADD2", "FMUL"))


def test_the_folds_vector_norm_requests_every_chunk_before_its_first_sum(tmp_path):
    """row_add_norm.cuh's vector norm (session 38): the last block's 16-byte loads of y and the residual (3 + 3 for a
    bf16 row of 2304) all issued before the first add. Session 38 found the scalar form's 2-byte loads each converted
    right after it under a runtime dtype branch, waiting one by one: ~15 us in the MoE down's last block."""
    for source, name in (("moe_down_norm.cu", "moe_q4_k_downq8normgpdl"),
                         ("linear_norm.cu", "linear_q4_k_rowwarpnormgpdl_bf16")):
        norm = _after_last_wait(listing(KERNEL_DIR / source, tmp_path)[name])
        runs = _runs_of(norm, _wide, _arith)
        assert runs and max(runs) >= 6, f"{name}: runs of 16-byte loads before an add after the wait: {runs}"


def test_the_xpf_forms_prefetch_their_activations_before_their_first_read(tmp_path):
    """The xpf warp GEMV and down (session 38): right after the wait, L1 prefetches (CCTL...PF1) of the activations'
    lines before the first activation load; the plain PDL forms have none, and load each round's activations only
    after the round before's products (the runs of activation loads between products stay short), which is the
    reason the xpf forms exist: if ptxas batches them one day, the prefetch may be moot."""
    rowwarp = listing(KERNEL_DIR / "linear_rowwarp.cu", tmp_path)
    moe = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)
    for fns, xpf, plain, use in ((rowwarp, "linear_q4_k_rowwarppdlxpf_bf16", "linear_q4_k_rowwarppdl_bf16", "FFMA"),
                                 (moe, "moe_q4_k_downq8xpfpdl", "moe_q4_k_downq8pdl", "IDP")):
        after = _after_last_wait(fns[xpf])
        first_read = next(i for i, ins in enumerate(after) if _wide(ins.opcode))
        prefetches = [ins for ins in after[:first_read] if ins.opcode.startswith("CCTL") and "PF1" in ins.opcode]
        assert len(prefetches) >= 2, f"{xpf}: L1 prefetches before its first activation load: {len(prefetches)}"
        assert not any(ins.opcode.startswith("CCTL") and "PF1" in ins.opcode for ins in fns[plain].instructions)
        runs = _runs_of(_after_last_wait(fns[plain]), _wide, lambda op, use=use: op.startswith(use))
        assert len(runs) >= 4 and max(runs) <= 4, f"{plain}: runs of activation loads between products: {runs}"


def test_the_xr_warp_form_waits_fewer_round_trips_after_its_wait(tmp_path):
    """linear_q4_k_rowwarppdlxr_* (session 39): x loaded into registers two rounds at a time after the wait. Counted on
    the compiled code (round_trips: loads placed after a use of an earlier load start a round trip later), the 16-bit
    forms wait out at most 3 L2 round trips in turn after the wait, where the plain PDL warp form waits 6 or more (8
    when written: each round's loads split by products that use its first ones). Under __maxnreg__(96) with no spills
    (test_cuda_sources' budget), so 5 blocks fit an SM. If ptxas ever batches the plain form, the xr form may be
    moot."""
    fns = listing(KERNEL_DIR / "linear_rowwarp.cu", tmp_path)
    for dt in ("bf16", "f16"):
        xr = round_trips(_after_last_wait(fns[f"linear_q4_k_rowwarppdlxr_{dt}"]))
        plain = round_trips(_after_last_wait(fns[f"linear_q4_k_rowwarppdl_{dt}"]))
        assert xr <= 3, f"linear_q4_k_rowwarppdlxr_{dt}: {xr} round trips in turn after the wait"
        assert plain >= 6, f"linear_q4_k_rowwarppdl_{dt}: {plain} (if ptxas now batches it, the xr form may be moot)"
        assert xr < plain


def _listing(body: str) -> list:
    return parse(".text.k:\n" + "".join(f"        /*{16 * i:04x}*/                   {line} ;\n"
                                        for i, line in enumerate(body.strip().splitlines())))["k"].instructions


def test_round_trips_counts_loads_issued_after_a_use_of_an_earlier_load():
    # two loads, then their products: one round trip
    assert round_trips(_listing("""
        LDG.E.128.STRONG.SM R4, desc[UR6][R2.64]
        LDG.E.128.STRONG.SM R8, desc[UR6][R2.64+0x10]
        FFMA R20, R4, R11, RZ""")) == 1
    # a product of the first load between the loads: the second waits for the first (two)
    assert round_trips(_listing("""
        LDG.E.128.STRONG.SM R4, desc[UR6][R2.64]
        FFMA R20, R7, R7, RZ
        LDG.E.128.STRONG.SM R8, desc[UR6][R2.64+0x10]
        FFMA R20, R8, R20, RZ""")) == 2
    # through a computed value and an address: a load whose address came from a load is a level further
    assert round_trips(_listing("""
        LDG.E R4, desc[UR6][R2.64]
        IMAD.WIDE R6, R4, 0x4, R2
        LDG.E R8, desc[UR6][R6.64]
        LDG.E R9, desc[UR6][R6.64+0x4]""")) == 2
    # a use of an unrelated register does not wait; an overwritten register forgets its load
    assert round_trips(_listing("""
        LDG.E R4, desc[UR6][R2.64]
        MOV R4, RZ
        FADD R5, R4, R3
        LDG.E R8, desc[UR6][R2.64+0x4]""")) == 1


def test_the_staged_down_reads_the_hidden_vector_from_shared_memory_after_one_barrier(tmp_path):
    """moe_q4_k_downq8hspdl (session 40's staged down): after its wait, the whole hidden vector is copied into shared
    memory (cp.async: LDGSTS, then one wait and one barrier) before the first product, and no product reads it from
    global memory; the ids form it is built from loads each group's share of the vector through L1 (__ldca: 16
    LDG.E.128.STRONG.SM, four a round) between its products, waiting out 4 L2 round trips in turn (round_trips). If
    ptxas ever batches the ids form's loads, the staged form may be moot."""
    fns = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)
    staged, ids = _after_last_wait(fns["moe_q4_k_downq8hspdl"]), _after_last_wait(fns["moe_q4_k_downq8idspdl"])

    def first(instructions, prefix):
        return next(i for i, ins in enumerate(instructions) if ins.opcode.startswith(prefix))

    dot, bar, copy = first(staged, "IDP"), first(staged, "BAR.SYNC"), first(staged, "LDGSTS")
    assert copy < bar < dot, (copy, bar, dot)
    assert any(ins.opcode == "LDGDEPBAR" for ins in staged[copy:bar]), "no cp.async commit before the barrier"
    assert not any(ins.opcode.startswith("LDG.E.128.STRONG.SM") for ins in staged), "the staged down reads h from L1"
    assert sum(ins.opcode.startswith("LDS.128") for ins in staged[bar:]) >= 16  # four rounds of 4 shares
    assert round_trips(ids) >= 4 and round_trips(staged) < round_trips(ids)


def test_the_l2pf_down_asks_for_its_later_weights_before_its_wait_and_nothing_else_moves(tmp_path):
    """moe_q4_k_downq8l2pfpdl (session 40): the ids-once down with an L2 prefetch (CCTL.E.PF2) of each later group's
    weight lines before its PDL wait - at least two a later round (a unit's header line and a lane's qs line) - and
    none after it; the ids form has none. After the wait both forms issue the same loads and products (ptxas schedules
    the rest its own way): the prefetch is the whole change."""
    fns = listing(KERNEL_DIR / "moe_rowwarp.cu", tmp_path)

    def split(name):
        ins = fns[name].instructions
        wait = max(i for i, x in enumerate(ins) if x.opcode.split(".")[0] == "ACQBULK")
        return ins[:wait], ins[wait + 1:]

    before, after = split("moe_q4_k_downq8l2pfpdl")
    ids_before, ids_after = split("moe_q4_k_downq8idspdl")
    assert sum(x.opcode.startswith("CCTL.E.PF2") for x in before) >= 2
    assert not any(x.opcode.startswith("CCTL") for x in after + ids_before + ids_after)
    def loads_and_dots(instructions):
        return Counter(x.opcode for x in instructions if x.opcode.startswith(("LDG", "IDP")))

    assert loads_and_dots(after) == loads_and_dots(ids_after)
