"""bench/probes/fold_anatomy.py: it refuses what it cannot time by name, its stages are the ones the folds' kernels
can leave out, and the kernels it swaps are the registered ones the modules launch."""

import re

import pytest
import torch

from tests.helpers import REPO, load_probe

KERNELS = REPO / "plugins/sparkops_cupy/kernels"


def test_the_probe_refuses_zero_replays(capsys):
    with pytest.raises(SystemExit) as e:
        load_probe("fold_anatomy").main(["--out", "x.json", "--replays", "0"])
    assert e.value.code == 2
    assert "--replays must be at least 1" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_the_probe_needs_a_cuda_device(capsys, tmp_path):
    assert load_probe("fold_anatomy").main(["--out", str(tmp_path / "p.json")]) == 2
    assert "fold_anatomy probe: needs a CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_each_stage_it_leaves_out_is_one_both_folds_can_leave_out():
    """RAN_PROBE 1 and 2 are tested in each fold's kernel, 3 and 4 in the shared norm; 0 (the registered build) is the
    header's default, so the registered kernels never leave anything out."""
    header = (KERNELS / "row_add_norm.cuh").read_text()
    assert "#ifndef RAN_PROBE\n#define RAN_PROBE 0\n#endif" in header
    assert "RAN_PROBE != 3 && D <= RAN_MAX * step" in header  # 3: the scalar norm's loop form
    assert "RAN_PROBE != 3 && RAN_PROBE != 4 && (addr & 15u) == 0" in header  # 3, 4: not the vector norm
    for cu, _ in load_probe("fold_anatomy").FOLDS.values():
        src = (KERNELS / cu).read_text()
        assert {int(v) for v in re.findall(r"if \(RAN_PROBE == (\d)\) return;", src)} == {1, 2}, cu
        # no arrival, no norm before the arrival; no norm right after it
        assert src.index("RAN_PROBE == 2") < src.index("ran_last_block<GLOBAL>") < src.index("RAN_PROBE == 1")
    assert set(load_probe("fold_anatomy").STAGES) == {0, 1, 2, 3, 4}


def test_the_kernels_it_swaps_are_the_ones_the_modules_launch_by_default():
    """The probe swaps one kernel name a fold: the global-scratch entry the modules' default SCRATCH launches."""
    from sparkops_cupy import linear_add_rmsnorm as cln
    from sparkops_cupy import moe_experts_add_rmsnorm as cmn
    from sparkops_cupy._counters import ran_scratch

    folds = load_probe("fold_anatomy").FOLDS
    for module, fold, launch in ((cmn, "moe", 'f"moe_q4_k_downq8{infix}pdl"'),
                                 (cln, "oproj", 'f"linear_q4_k_rowwarp{infix}pdl_{_DT_SUFFIX[code]}"')):
        cu, name = folds[fold]
        src = (REPO / "plugins/sparkops_cupy" / f"{module.__name__.rsplit('.', 1)[1]}.py").read_text()
        assert launch in src and f'"{cu}"' in src, fold
        infix = ran_scratch(fold, module.SCRATCH)
        assert name.startswith(launch.split("{")[0][2:] + infix), (fold, name, infix)
        assert f"void __launch_bounds__(128) {name}(" in (KERNELS / cu).read_text(), name
