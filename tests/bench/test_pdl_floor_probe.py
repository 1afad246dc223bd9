"""bench/probes/pdl_floor.py refuses arguments it cannot run by name, before any GPU work."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _probe():
    spec = importlib.util.spec_from_file_location("pdl_floor", REPO / "bench" / "probes" / "pdl_floor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("args", [["--launches", "1"], ["--replays", "0"], ["--step-launches", "0"]])
def test_the_probe_refuses_a_chain_it_cannot_time(args, capsys):
    with pytest.raises(SystemExit) as e:
        _probe().main(args)
    assert e.value.code == 2
    assert "--launches must be at least 2, --replays and --step-launches at least 1" in capsys.readouterr().err


def test_its_sizes_are_whole_programs_of_real_work():
    for label, n, block in _probe().SIZES:
        assert n >= block > 0 and n % block == 0, label
