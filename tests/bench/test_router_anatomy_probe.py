"""bench/probes/router_anatomy.py: it refuses a chain it cannot time by name, and its stages are the kernel's."""

import re

import pytest

from tests.helpers import REPO, load_probe


@pytest.mark.parametrize("args", [["--pairs", "0"], ["--replays", "0"]])
def test_the_probe_refuses_a_chain_it_cannot_time(args, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("router_anatomy").main(args)
    assert e.value.code == 2
    assert "--pairs and --replays must be at least 1" in capsys.readouterr().err


def test_each_stage_it_leaves_out_is_one_the_kernel_can_leave_out():
    """RT_PROBE values 1..3 are tested in moe_router.cu, and the routing's split (-1, -2, -4) is compiled only under
    `#if RT_PROBE < 0` and told apart there; 0 (the registered build) is its default."""
    src = (REPO / "plugins/sparkops_cupy/kernels/moe_router.cu").read_text()
    assert "#define RT_PROBE 0" in src
    tested = {int(v) for v in re.findall(r"RT_PROBE >= (\d)", src)}
    split = {int(v) for v in re.findall(r"RT_PROBE (?:<=|!=) (-\d)", src)}
    assert src.count("#if RT_PROBE < 0") == 2  # the partial routing's function and its call, nothing else
    assert set(load_probe("router_anatomy").STAGES) == {0, -1} | tested | split == {0, 1, 2, 3, -1, -2, -4}


def test_the_routing_split_is_computed_from_the_variants_it_times(monkeypatch, tmp_path):
    """The routing's parts are differences of the variants' router times: picks = whole - (-2), scores = -2 - (-1),
    loads = -1 - (-4), writes = -4 - 1 (a probe that mislabelled them would send the next session after the wrong
    part). Checked on the stage table alone, with made-up times."""
    probe = load_probe("router_anatomy")
    times = {0: 5.9, -2: 4.0, -1: 3.7, -4: 3.3, 1: 3.1, 2: 2.3, 3: 1.9}
    assert set(times) == set(probe.STAGES)
    parts = probe.routing_parts(times)
    assert parts == pytest.approx({"picks_and_weights": 1.9, "scores": 0.3, "loads": 0.4, "output_writes": 0.2})
    assert sum(parts.values()) == pytest.approx(times[0] - times[1])
