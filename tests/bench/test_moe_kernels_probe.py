"""bench/probes/moe_kernels.py: refused without a GPU by name, and its launch count is the one the suite's ncu stage
skips and measures (a mismatch would profile the warm-up pass, or half of each)."""

import re
from pathlib import Path

import pytest
import torch

from tests.helpers import load_probe

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_the_probe_needs_a_cuda_device(capsys):
    assert load_probe("moe_kernels").main([]) == 2
    assert "moe_kernels probe: needs a CUDA device" in capsys.readouterr().err


def test_the_suite_skips_and_counts_one_pass_of_launches():
    probe = load_probe("moe_kernels")
    stage = re.search(r"ncu_passes moe \"[^\"]+\" (\d+) bench/probes/moe_kernels.py",
                      (REPO / "bench" / "gpu_suite.sh").read_text())
    assert stage, "stage probe_ncu_moe not found in bench/gpu_suite.sh"
    assert int(stage.group(1)) == probe.LAUNCHES
    assert f"--launch-skip {probe.LAUNCHES} --launch-count {probe.LAUNCHES}" in probe.__doc__


def test_only_refuses_a_label_the_pass_does_not_make_naming_them():
    probe = load_probe("moe_kernels")
    with pytest.raises(SystemExit) as e:
        probe.main(["--only", "cupy_rowwarp_pdl_q8_hiden"])
    assert "no launch labelled 'cupy_rowwarp_pdl_q8_hiden'" in str(e.value)
    assert "'cupy_rowwarp_pdl_q8_hidden'" in str(e.value)


def test_the_source_stage_names_launches_the_probe_makes():
    """stage probe_ncu_source_moe runs `moe_kernels.py --only LABEL` for each kernel it reads: every such label must
    be one of the pass's (an unknown one would stop the probe before ncu saw a launch)."""
    probe = load_probe("moe_kernels")
    suite = (REPO / "bench" / "gpu_suite.sh").read_text()
    stage = suite[suite.index("probe_ncu_source_moe)"):]
    stage = stage[:stage.index(";;")]
    labels = re.findall(r'"(?:down[a-z0-9]+pdl|gateup[a-z0-9_]+):([^"]+)"', stage)
    assert len(labels) == 3 and all(label in probe.LABELS for label in labels), labels
    assert len(probe.LABELS) == len(set(probe.LABELS))


def test_the_router_probes_stages_count_its_launches():
    """bench/probes/router_kernels.py: stage probe_router skips and measures one pass (LAUNCHES), and stage
    probe_ncu_source_router skips the PDL router's first three launches of four (its last router, bf16 last)."""
    probe = load_probe("router_kernels")
    suite = (REPO / "bench" / "gpu_suite.sh").read_text()
    stage = re.search(r'ncu_passes router "[^"]+" (\d+) bench/probes/router_kernels.py', suite)
    assert stage and int(stage.group(1)) == probe.LAUNCHES == 2 * len(probe.ROUTERS)
    assert probe.ROUTERS.count("cupy_rowwarp_pdl") == 1  # its kernel's two launches a pass, float32 then bf16
    assert "--launch-skip 3 --launch-count 1" in suite[suite.index("probe_ncu_source_router)"):]
