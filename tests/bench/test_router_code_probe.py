"""bench/probes/router_code.py: it refuses a chain it cannot time, its forms are kernels moe_router.cu defines, and
the code penalty is computed against rt_route's own cold-less-warm difference."""

import re

import pytest

from tests.helpers import REPO, load_probe


@pytest.mark.parametrize("args", [["--pairs", "0"], ["--replays", "0"], ["--flush-mb", "0"]])
def test_the_probe_refuses_a_chain_it_cannot_time(args, capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("router_code").main(args)
    assert e.value.code == 2
    assert "--pairs, --replays and --flush-mb must be at least 1" in capsys.readouterr().err


def test_each_form_is_a_kernel_of_moe_router_cu_and_the_unrolled_define_is_the_headers_knob():
    src = (REPO / "plugins/sparkops_cupy/kernels/moe_router.cu").read_text()
    header = (REPO / "plugins/sparkops_cupy/kernels/router_route.cuh").read_text()
    kernels = set(re.findall(r'extern "C" __global__ void __maxnreg__\(RT_MAXNREG\)\s+(\w+)\(', src))
    forms = load_probe("router_code").FORMS
    assert {name for name, _ in forms.values()} <= kernels, kernels
    assert "#define RT_MERGE_ROLLED 1" in header and "#if RT_MERGE_ROLLED" in header
    assert forms["merge, unrolled"][1] == "#define RT_MERGE_ROLLED 0" and forms["merge, rolled"][1] == ""


def test_the_code_penalty_is_each_forms_cold_growth_beyond_rt_routes():
    probe = load_probe("router_code")
    times = {"rt_route": {"warm": 5.5, "cold": 6.0}, "sorted": {"warm": 5.3, "cold": 5.9},
             "merge, rolled": {"warm": 5.0, "cold": 5.8}, "merge, unrolled": {"warm": 5.1, "cold": 13.0}}
    assert probe.code_penalties(times) == pytest.approx(
        {"rt_route": 0.0, "sorted": 0.1, "merge, rolled": 0.3, "merge, unrolled": 7.4})
