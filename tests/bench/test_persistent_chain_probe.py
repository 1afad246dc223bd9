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


def test_the_kernels_and_the_host_agree_on_the_width():
    """The CUDA source's D (and its lane chunks: D / 256 of 8 values) is the host's D, and a multiple of 256."""
    probe = load_probe("persistent_chain")
    assert int(re.search(r"#define D (\d+)", probe.SOURCE).group(1)) == probe.D
    assert probe.D % 256 == 0 and probe.ROWS_A_BLOCK % 8 == 0
