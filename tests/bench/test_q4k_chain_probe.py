"""bench/probes/q4k_chain.py: its chain is the 48B step's stages (bytes, widths), it refuses what it cannot time
before any GPU work, and its kernels hold the sizes its host code assumes."""

import math
import re

import numpy as np
import pytest
import torch

from tests.helpers import load_probe


@pytest.fixture(scope="module")
def probe():
    return load_probe("q4k_chain")


def test_each_stage_reads_the_bytes_of_the_steps_stage_at_its_width(probe):
    """The six stages are a KDA layer with MoE of the 48B step (persistent_forecast, local merges), each within 0.1%
    as near the step stage's bytes as whole rows allow (rows in 16s; the down's in experts of 2304 rows, each on its
    own 1024 inputs); o_proj's 4096 inputs."""
    shapes = {s.name: s for s in probe.layer_shapes()}
    assert list(shapes) == ["in", "gates", "out", "router", "experts", "down"]
    for s in shapes.values():
        assert abs(s.nbytes - s.step_bytes) <= (s.grp if s.name == "down" else 16) / 2 * s.row_bytes, s
        assert s.nbytes == s.m * s.k // 256 * 144
    assert shapes["out"].k == 4096 and shapes["out"].m == 2304
    down = shapes["down"]
    assert (down.k, down.grp, down.m, down.xlen) == (1024, 2304, 9 * 2304, 9 * 1024)
    assert shapes["experts"].m == 16384 and shapes["experts"].xlen == 2304


def test_the_chain_is_beyond_the_l2_and_every_x_fits_the_output_before_it(probe):
    shapes = probe.chain_shapes(4, probe.layer_shapes())
    assert len(shapes) == 24 and sum(s.nbytes for s in shapes) > 5 * 50e6  # five H200 L2s
    assert all(cur.xlen <= prev.m for prev, cur in zip(shapes, shapes[1:]))


def test_a_chain_whose_stage_reads_more_than_the_stage_before_wrote_is_refused(probe):
    small = probe.StageShape("small", 2304, 2304, 2304, 0.0)
    wide = probe.StageShape("wide", 2304, 4096, 2304, 0.0)
    with pytest.raises(ValueError, match="stage 'wide' reads 4096 inputs but 'small' writes only 2304"):
        probe.chain_shapes(2, [small, wide])
    too_long = probe.StageShape("long", 4 * 2304, 4096, 2304, 0.0)  # x of 4 x 4096 > XMAX
    with pytest.raises(ValueError, match="does not fit the kernels"):
        probe.chain_shapes(1, [too_long])


def test_a_ring_too_small_for_a_round_of_rows_is_refused_not_deadlocked(probe):
    """A round of 60 octets (16 warps) on o_proj's rows of 2304 bytes spans up to 6 copies of 14 rows: 6 slots of
    32 KB hold it, 5 would leave the round waiting for a slot no warp releases."""
    out = probe.StageShape("out", 2304, 4096, 2304, 0.0)
    assert probe.round_fits(out, 16, 32 * 1024, 6)
    assert not probe.round_fits(out, 16, 32 * 1024, 5)
    assert not probe.round_fits(out, 16, 2048, 32)  # a slot without one whole row
    every = probe.layer_shapes()
    limit = 232448  # an H100's / H200's opt-in shared memory a block
    for warps, kb, _ in probe.FORMS:
        n = probe.slots_for(kb * 1024, limit)
        assert n >= 2 and all(probe.round_fits(s, warps, kb * 1024, n) for s in every)
    assert probe.slots_for(64 * 1024, probe.STATIC_SMEM + 100 * 1024) == 0


def test_the_kernels_sizes_are_the_hosts(probe):
    src = probe.SOURCE
    for name in ("XMAX", "MAX_SLOTS", "ROWS_A_BLOCK"):
        assert int(re.search(rf"#define {name} (\d+)", src).group(1)) == getattr(probe, name)
    assert int(re.search(r"#define SBB (\d+)", src).group(1)) == probe.SB_BYTES
    for kernel in ("q4k_step", "q4k_paced", "q4k_read"):
        assert re.search(rf'extern "C" __global__ void __launch_bounds__\(\d+(, \d+)?\) {kernel}\(', src), kernel
    # the static shared memory ptxas reports (13312 bytes at session 49) stays inside the host's allowance
    static = probe.XMAX + probe.XMAX // 32 * 4 + probe.XMAX // 16 * 4 + 2 * probe.MAX_SLOTS * 8
    assert static <= 13312 <= probe.STATIC_SMEM


def test_the_random_weights_are_q4k_rows_of_the_stages_scale(probe):
    """Dequantized by the project's reference, the synthetic rows are centred with std 1/sqrt(k): each stage keeps
    x's scale, so a chain of 24 neither overflows nor underflows."""
    from sparkops.gguf.quants import dequantize

    k, m = 1024, 64
    raw = probe.synth_q4k(m, k, 0, "t", "cpu").numpy()
    assert raw.dtype == np.uint8 and raw.size == m * k // 256 * 144
    w = dequantize(raw, 12, (m, k))  # GGML Q4_K
    assert abs(float(w.mean())) < 0.1 / math.sqrt(k)
    assert 0.7 / math.sqrt(k) < float(w.std()) < 1.3 / math.sqrt(k)
    again = probe.synth_q4k(m, k, 0, "t", "cpu").numpy()
    other = probe.synth_q4k(m, k, 0, "u", "cpu").numpy()
    assert np.array_equal(raw, again) and not np.array_equal(raw, other)


def test_stage_phases_are_medians_a_stage_kind(probe):
    """Two kinds alternating over 4 stages and 3 blocks: each phase's median over its kind's stages and the blocks;
    the last phase runs to the next stage's top and has none after the chain's last stage."""
    S, G = 4, 3
    t = torch.zeros(S, G, 5, dtype=torch.int64)
    for s in range(S):
        top = 1000 * s
        steps = [10, 20, 30, 40] if s % 2 == 0 else [1, 2, 3, 4]
        t[s, :, 0] = top
        for k in range(4):
            t[s, :, k + 1] = t[s, :, k] + steps[k]
    out = probe.stage_phases(t, 1e6, ["a", "b", "a", "b"])  # 1 GHz: a cycle is 1 ns
    assert out["a"]["counter wait"]["cycles"] == 10 and out["b"]["arrival"]["cycles"] == 4
    assert out["a"]["to the next top"]["cycles"] == 1000 - 100
    assert out["b"]["to the next top"]["cycles"] == 1000 - 10  # stage 1 only: stage 3 is the last
    assert math.isclose(out["a"]["rows dotted"]["us"], 0.03)


@pytest.mark.parametrize("args, said", [(["--layers", "0"], "--layers and --replays must be at least 1"),
                                        (["--trace", "paced_w3"], "--trace must name a paced form")])
def test_the_probe_refuses_bad_arguments_by_name(probe, args, said, capsys):
    with pytest.raises(SystemExit) as e:
        probe.main(args)
    assert e.value.code == 2
    assert said in capsys.readouterr().err


def _emulated_outputs(probe, shape, wbytes, x, group_of):
    """What a correct kernel writes (Q8 x, float32 dots, bf16 out), with x's group for row r given by group_of(r)."""
    from sparkops.gguf.quants import dequantize
    from sparkops_numpy.quantize_act import quantize_act

    q, d = quantize_act(x.reshape(1, -1).astype(np.float32))
    codes, scales = np.asarray(q, dtype=np.float32), np.asarray(d, dtype=np.float32)
    xq = (codes.reshape(-1, 32) * scales.reshape(-1, 1)).reshape(-1)
    w = dequantize(wbytes, 12, (shape.m, shape.k)).astype(np.float32)
    y = np.array([w[r] @ xq[group_of(r) * shape.k:(group_of(r) + 1) * shape.k] for r in range(shape.m)])
    return torch.from_numpy(y.astype(np.float32)).to(torch.bfloat16).float().numpy()


def test_the_reference_check_passes_a_correct_chain_and_fails_a_wrong_group(probe):
    """A down-like stage (3 groups of 32 rows, each on its own 256 inputs): Q8 outputs pass the act_q8 claim; the same
    outputs with every row dotted with group 0's inputs (a kernel that forgot the experts' offsets) fail it."""
    from sparkops.gate.tolerances import OP_RULES

    shape = probe.StageShape("down", 96, 256, 32, 0.0)
    wbytes = probe.synth_q4k(shape.m, shape.k, 0, "down", "cpu").numpy()
    x = np.random.default_rng(0).standard_normal(shape.xlen).astype(np.float32)
    rows = probe.sample_rows(shape, 8)
    assert {0, 31, 32, 63, 64, 95} <= set(rows)
    limit = OP_RULES["linear"]["act_q8"].limit
    good = probe.reference_nmse(shape, wbytes, x, _emulated_outputs(probe, shape, wbytes, x, lambda r: r // 32), rows)
    bad = probe.reference_nmse(shape, wbytes, x, _emulated_outputs(probe, shape, wbytes, x, lambda r: 0), rows)
    assert good < limit / 10 and bad > 10 * limit


def _ring_runs(shapes, warps, slot_bytes, slots, rows_of):
    """A step-by-step model of one block of q4k_paced (fetch_rows and the compute warps' rounds, as the CUDA source
    writes them): True when every stage finishes, False when no warp and no copy can move (a deadlock). rows_of(shape):
    the block's rows of that stage."""
    cw = warps - 1
    no = 4 * cw
    plan = []  # per stage: (first copy, copies, rows a copy, rows)
    n = 0
    for s in shapes:
        nr, per = rows_of(s), slot_bytes // s.row_bytes
        nch = -(-nr // per)
        plan.append((n, nch, per, nr))
        n += nch
    total = n
    issued = 0  # copies issued by the fetching warp so far
    released = [[0] * total for _ in range(cw)]  # released[w][copy]: 1 once warp w has arrived on its empty barrier
    # each warp: (stage, round base, copies of this stage it has released)
    pos = [[0, 0, 0] for _ in range(cw)]

    def landed(c):
        return c < issued

    moved = True
    while moved:
        moved = False
        while issued < total and (issued < slots or all(released[w][issued - slots] for w in range(cw))):
            issued += 1
            moved = True
        for w in range(cw):
            s, base, rel = pos[w]
            if s >= len(plan) or (s > min(p[0] for p in pos)):  # done, or waiting at the stage's block barrier
                continue
            first, nch, per, nr = plan[s]
            if base < nr:  # a round: its octets' rows must have landed, then release what the next round is past
                need = [first + (base + 4 * w + k) // per for k in range(4) if base + 4 * w + k < nr]
                if not all(landed(c) for c in need):
                    continue
                done, was = min(nch, (base + no + 4 * w) // per), rel
                while rel < done and landed(first + rel):
                    released[w][first + rel] = 1
                    rel += 1
                if rel < done:  # (waits on a copy not yet landed: try again later, the round already dotted)
                    pos[w] = [s, base, rel]
                    moved = moved or rel > was
                    continue
                pos[w] = [s, base + no, rel]
                moved = True
            else:  # the stage's tail: release every copy left, then the barrier
                was = rel
                while rel < nch and landed(first + rel):
                    released[w][first + rel] = 1
                    rel += 1
                if rel < nch:
                    pos[w] = [s, base, rel]
                    moved = moved or rel > was
                    continue
                pos[w] = [s + 1, 0, 0]
                moved = True
    return all(p[0] >= len(plan) for p in pos)


def test_the_ring_model_agrees_with_round_fits(probe):
    """The kernel's schedule, modelled copy by copy on the block with the most rows, finishes every form the host
    times; and a ring that round_fits refuses does deadlock there (the check is not vacuous)."""
    shapes = probe.chain_shapes(2, probe.layer_shapes())
    rows_of = lambda s: -(-s.m // 132)  # noqa: E731 - the largest block's rows on 132 SMs
    for warps, kb, _ in probe.FORMS:
        n = probe.slots_for(kb * 1024, 232448)
        assert _ring_runs(shapes, warps, kb * 1024, n, rows_of), (warps, kb)
    out = probe.StageShape("out", 2304, 4096, 2304, 0.0)
    assert not probe.round_fits(out, 16, 32 * 1024, 4)
    # 120 rows in copies of 14: the first round's 60 rows span 5 copies; with 4 slots the warps with rows in the 5th
    # wait for it, and it waits for their release of the 1st
    assert not _ring_runs([out], 16, 32 * 1024, 4, lambda s: 120)
    assert _ring_runs([out], 16, 32 * 1024, 6, lambda s: 120)


@pytest.mark.parametrize("k", [1024, 4096])
def test_round_fits_never_passes_a_ring_that_deadlocks(probe, k):
    """Over rings of 2-13 slots, 8 or 16 warps, 16 or 32 KB slots and blocks of 101 or 157 rows (two stages): every
    ring round_fits accepts finishes in the model (the rule is conservative: it refuses some that would finish)."""
    shape = probe.StageShape("t", 4 * 2304, k, 4 * 2304, 0.0)
    for warps in (8, 16):
        for kb in (16, 32):
            for slots in range(2, 14):
                for rows in (101, 157):
                    if probe.round_fits(shape, warps, kb * 1024, slots):
                        assert _ring_runs([shape, shape], warps, kb * 1024, slots, lambda s: rows), \
                            (warps, kb, slots, rows)


def test_outputs_are_compared_by_their_bits_so_the_nan_fill_compares_equal(probe):
    a = torch.full((2, 4), float("nan"), dtype=torch.bfloat16)
    a[:, :2] = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    b = a.clone()
    assert probe.same_bits(a, b) and not torch.equal(a, b)  # torch.equal: NaN != NaN
    c = b.clone()
    c[1, 1] = float("nan")  # an output left unwritten
    assert not probe.same_bits(a, c)
    c = b.clone()
    c[0, 0] = 1.0078125  # the next bf16 after 1.0
    assert not probe.same_bits(a, c)
