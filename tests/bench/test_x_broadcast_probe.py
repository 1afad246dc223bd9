"""bench/probes/x_broadcast.py's arguments: bad grids are refused by name before any GPU work (the probe itself runs
in the GPU suite's stage probe_xcast)."""

import pytest

from tests.helpers import load_probe


def test_grids_parse_a_comma_list():
    assert load_probe("x_broadcast").grids("132, 768,") == [132, 768]


@pytest.mark.parametrize("text", ["", "0,768", "132,x", "-4"])
def test_grids_refuse_empty_zero_and_words(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="program"):
        load_probe("x_broadcast").grids(text)


@pytest.mark.parametrize("args,says", [(["--grids", "0"], "--grids"),
                                       (["--replays", "0"], "--replays must be at least 1")])
def test_the_probe_refuses_bad_arguments_by_name(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("x_broadcast").main(args)
    assert e.value.code == 2
    assert says in capsys.readouterr().err
