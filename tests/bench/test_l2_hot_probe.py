"""bench/probes/l2_hot.py: it refuses what it cannot time by name, and every kernel it names is a registered cupy
implementation of the op it says."""

import re

import pytest

from tests.helpers import REPO, load_probe


@pytest.mark.parametrize("args, says", [(["--only", "lm_head"], "no kernel named 'lm_head'"),
                                        (["--replays", "2"], "--replays must be at least 3")])
def test_the_probe_refuses_what_it_cannot_time(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("l2_hot").main(args)
    assert e.value.code == 2
    assert says in capsys.readouterr().err


def test_each_kernel_is_a_registered_implementation_of_its_op():
    init = (REPO / "plugins/sparkops_cupy/__init__.py").read_text()
    for name, (op, where, _) in load_probe("l2_hot").KERNELS.items():
        module, fn = where.split(":")
        src = (REPO / f"plugins/sparkops_cupy/{module}.py").read_text()
        assert re.search(rf"^def {fn}\(", src, re.M), f"{name}: sparkops_cupy.{module} has no {fn}"
        assert re.search(rf'\("{op}", "[a-z0-9_]+", "sparkops_cupy\.{where}"', init), \
            f"{name}: sparkops_cupy.{where} is not registered as an implementation of {op}"
