"""bench/probes/pdl_floor.py refuses arguments it cannot run by name, before any GPU work."""

import pytest

from tests.helpers import load_probe


@pytest.mark.parametrize("args", [["--launches", "1"], ["--replays", "0"], ["--step-launches", "0"]])
def test_the_probe_refuses_a_chain_it_cannot_time(args, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("pdl_floor").main(args)
    assert e.value.code == 2
    assert "--launches must be at least 2, --replays and --step-launches at least 1" in capsys.readouterr().err


def test_its_sizes_are_whole_programs_of_real_work():
    for label, n, block in load_probe("pdl_floor").SIZES:
        assert n >= block > 0 and n % block == 0, label
