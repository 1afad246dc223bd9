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
    """RT_PROBE values 1..3 are tested in moe_router.cu; 0 (the registered build) is its default."""
    src = (REPO / "plugins/sparkops_cupy/kernels/moe_router.cu").read_text()
    assert "#define RT_PROBE 0" in src
    tested = {int(v) for v in re.findall(r"RT_PROBE >= (\d)", src)}
    assert set(load_probe("router_anatomy").STAGES) == {0} | tested == {0, 1, 2, 3}
