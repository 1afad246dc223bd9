"""bench/probes/persistent_chain.py refuses a chain it cannot time by name, before any GPU work, and its kernels
hold the shapes its host code assumes."""

import re

import pytest

from tests.helpers import load_probe


@pytest.mark.parametrize("args", [["--layers", "1"], ["--replays", "0"]])
def test_the_probe_refuses_a_chain_it_cannot_time(args, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("persistent_chain").main(args)
    assert e.value.code == 2
    assert "--layers must be at least 2 and --replays at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("rows", ["0", "100", str(2304 + 8)])
def test_the_probe_refuses_a_row_count_its_kernels_cannot_split(rows, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("persistent_chain").main(["--rows", rows])
    assert e.value.code == 2
    assert f"--rows must be a multiple of 8 from 8 to 2304 (got {rows})" in capsys.readouterr().err


def test_the_kernels_and_the_host_agree_on_the_width():
    """The CUDA source's D (and its lane chunks: D / 256 of 8 values) is the host's D, and a multiple of 256."""
    probe = load_probe("persistent_chain")
    assert int(re.search(r"#define D (\d+)", probe.SOURCE).group(1)) == probe.D
    assert probe.D % 256 == 0 and probe.ROWS_A_BLOCK % 8 == 0


def test_every_warp_ring_the_host_times_is_a_kernel_of_the_source():
    """Each ring variant the host launches names a kernel the CUDA source instantiates with the variant's slots (a
    missing one is a name error on the GPU, after the machine's start-up was paid), and the source makes none the host
    leaves out; the bulk-copy rings (session 47) are their own kernels beside the lanes' cp.async ones, and so are the
    tagged-output rings."""
    probe = load_probe("persistent_chain")
    made = {name: (int(slots), bulk == "true") for name, slots, bulk in
            re.findall(r"^WARP_RING\((\w+), (\d+), (true|false)\)$", probe.SOURCE, re.M)}
    launched = probe.ring_variants()
    assert {kernel for _, kernel in launched.values()} == set(made)
    for name, (slots, kernel) in launched.items():
        assert made[kernel] == (slots, name.endswith("_bulk")), name
    assert sorted(s for s, bulk in made.values() if bulk) == sorted(probe.BULK_SLOTS)
    assert sorted(s for s, bulk in made.values() if not bulk) == sorted(probe.RING_SLOTS)
    assert all(s >= 2 for s, _ in made.values())  # cp.async.wait_group S - 1 leaves the next row in flight from 2
    tagged = {name: (int(slots), w0 == "true") for name, slots, w0 in
              re.findall(r"^LL_RING\((\w+), (\d+), (true|false)\)$", probe.SOURCE, re.M)}
    lls = probe.ll_variants()
    assert {kernel: (slots, name.endswith("_w0")) for name, (slots, kernel) in lls.items()} == tagged
    for w0 in (False, True):
        assert sorted(s for s, w in tagged.values() if w == w0) == sorted(probe.LL_SLOTS)
    name, slots, kernel = probe.LOADED  # the streaming-under-load form: its own kernel, the slots it instantiates
    assert re.search(rf"void __launch_bounds__\(256, 1\) {kernel}\(", probe.SOURCE)
    assert re.search(rf"ll_ring_chain<{slots}, false, true>", probe.SOURCE) and name.endswith("_loaded")
    beside = probe.beside_names()  # the counter chain with a second kernel streaming next to it
    assert re.search(r"__global__ void __launch_bounds__\(256\) stream_beside\(", probe.SOURCE)
    assert sorted(beside.values()) == sorted(probe.BESIDE_NS) and beside["persistent_direct_x_beside"] == 0
    assert "unsigned long long* ctl) {" in probe.SOURCE.split("chain_persistent(", 1)[1].split("{", 1)[0] + "{"
    assert re.search(r"void __launch_bounds__\(256, 1\) chain_paced\(", probe.SOURCE)  # its own kernel
    paced = probe.paced_names()
    assert sorted(ns for ns, xs in paced.values() if not xs) == sorted(probe.PACES_NS)
    assert sorted(ns for ns, xs in paced.values() if xs) == sorted(probe.PACES_XS_NS)
    assert all(n == "persistent_paced_" + ("xs_" if xs else "") + f"p{ns}" for n, (ns, xs) in paced.items())
    assert f"bars[{probe.PACED_SLOTS}]" in probe.SOURCE.split("chain_paced(", 1)[1]
    pace, xs = probe.PACED_BESIDE  # the form timed beside a stream and traced is one the probe times alone
    assert paced["persistent_paced_" + ("xs_" if xs else "") + f"p{pace}"] == (pace, xs)
    assert "persistent_paced_p250" in paced  # the other traced form
    assert sorted(probe.paced_beside_names().values()) == sorted(probe.BESIDE_NS)
    assert all(n.startswith(f"persistent_paced_xs_p{pace}_beside") for n in probe.paced_beside_names())
    assert len(probe.PACED_PHASES) == 6 and "G * 6 + 5" in probe.SOURCE.split("chain_paced(", 1)[1]
    ahead = probe.ahead_names()  # the counter chain with a second kernel asking the L2 for its rows ahead of it
    assert re.search(r"__global__ void __launch_bounds__\(256\) stream_ahead\(", probe.SOURCE)
    assert sorted(ahead.values()) == sorted(probe.AHEAD) and "persistent_direct_x_ahead3" in ahead
    assert all(n == ("persistent_direct_x" if dx == 1 else "persistent_rx") + f"_ahead{a}" + ("_ld" if ld else "")
               for n, (a, ld, dx) in ahead.items())
    assert {dx for _, _, dx in ahead.values()} == {1, 2} and "if (direct_x == 2)" in probe.SOURCE
    assert "cp.async.bulk.prefetch.L2.global" in probe.SOURCE.split("stream_ahead(", 1)[1]
    forms = probe.loaded_variants()
    assert forms[name] == (0, False) and forms[f"{name}_apart"] == (0, True)
    assert sorted(ns for ns, apart in forms.values() if not apart) == sorted(set(probe.THROTTLES_NS))
    assert sorted(ns for ns, apart in forms.values() if apart) == sorted(set(probe.APART_NS))
    assert all(n == name + ("_apart" if apart else "") + (f"_s{ns}" if ns else "") for n, (ns, apart) in forms.items())


def test_phase_medians_reads_each_span_between_two_points_and_the_loop_back():
    """A trace whose every layer takes 10, 20, 30, 40 cycles between its points and 50 from its arrival to the next
    layer's top gives those medians, and microseconds at the rated clock (1 GHz here: 1000 kHz -> 1 cycle = 1 ns)."""
    import torch

    probe = load_probe("persistent_chain")
    layers, blocks = 4, 3
    t = torch.zeros(layers, blocks, 5, dtype=torch.int64)
    top = 0
    for layer in range(layers):
        points = [top, top + 10, top + 30, top + 60, top + 100]
        t[layer, :, :] = torch.tensor(points)
        top = points[-1] + 50
    got = probe.phase_medians(t, clock_khz=1e6)
    assert [round(v["cycles"]) for v in got.values()] == [10, 20, 30, 40, 50]
    assert list(got) == list(probe.PHASES)
    assert abs(got["rows dotted"]["us"] - 0.030) < 1e-9


def test_phase_medians_reads_the_warp_ring_s_four_points_and_refuses_a_name_count_that_differs():
    import torch

    probe = load_probe("persistent_chain")
    layers, blocks = 3, 2
    t = torch.zeros(layers, blocks, 4, dtype=torch.int64)
    top = 0
    for layer in range(layers):
        t[layer, :, :] = torch.tensor([top, top + 7, top + 9, top + 20])
        top += 25
    got = probe.phase_medians(t, clock_khz=1e6, names=probe.RING_PHASES)
    assert [round(v["cycles"]) for v in got.values()] == [7, 2, 11, 5]
    with pytest.raises(ValueError, match="4 points a layer need 4 phase names, got 5"):
        probe.phase_medians(t, clock_khz=1e6)


def test_paced_slots_fill_the_shared_memory_up_to_the_mbarriers_and_refuse_fewer_than_two():
    """chain_paced's slots: a slot holds maxr rows of D bf16; as many as fit beside 8 KB of static bytes, at most
    PACED_SLOTS (one mbarrier each), none where two do not fit (the fetching warp needs one slot ahead)."""
    probe = load_probe("persistent_chain")
    limit = 232448  # the H100/H200 opt-in shared memory a block
    row = probe.D * 2
    assert probe.paced_slots(18, limit) == (limit - 8192) // (18 * row) == 2  # 2304 rows on 132 SMs
    assert probe.paced_slots(9, limit) == 5  # 1152 rows
    assert probe.paced_slots(1, limit) == probe.PACED_SLOTS  # 8 rows: capped by the mbarriers
    assert probe.paced_slots(30, limit) == 0  # one slot of 30 rows is 138 KB: no second


def test_beside_stream_reads_the_control_words_and_says_when_the_stream_was_not_beside_the_chain():
    """stream_beside's control words [bytes, stop, blocks done, checksum, time-out] -> its rate over the chain's round;
    a stream that ran into its limit is marked, so its chain's figure is not taken for a stage under a stream."""
    import torch

    probe = load_probe("persistent_chain")
    out = probe.beside_stream(torch.tensor([2_000_000, 1, 132, 7, 0]), 1000.0, 250)
    assert out == {"sleep_ns": 250, "bytes": 2_000_000, "tbs": pytest.approx(2e6 / 1e-3 / 1e12), "blocks_done": 132,
                   "stream_timed_out": False}
    assert probe.beside_stream(torch.tensor([5, 0, 0, 0, 1]), 1000.0, 0)["stream_timed_out"] is True


def test_phases_text_gives_each_phase_in_cycles_and_microseconds_in_order():
    probe = load_probe("persistent_chain")
    text = probe.phases_text({"wait": {"cycles": 1980.4, "us": 1.0}, "dot": {"cycles": 99.0, "us": 0.05}})
    assert text == "wait 1980 cycles (1.00 us), dot 99 cycles (0.05 us)"
