"""bench/registry_selects.py: a rung's registry must select every change the rung names."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO

REG = """
[ops.attention.cuda]
impl = "cupy_splitk_bf16_deep"
fallback = "error"

[ops.linear.cuda]
impl = "triton_lastblock"

[ops.linear.cuda.by_type.Q4_K]
impl = "cupy_rowwarp"

[ops.swiglu.cpu]
impl = "triton"
"""


def _run(tmp_path, *pairs, text=REG):
    reg = tmp_path / "r.toml"
    reg.write_text(text)
    return subprocess.run([sys.executable, "bench/registry_selects.py", str(reg), *pairs], cwd=REPO,
                          capture_output=True, text=True)


def test_every_pair_selected_on_cuda_passes(tmp_path):
    p = _run(tmp_path, "attention=cupy_splitk_bf16_deep", "linear=triton_lastblock", "linear@Q4_K=cupy_rowwarp")
    assert p.returncode == 0, p.stderr
    assert "selects all 3 on cuda" in p.stdout


def test_a_pair_not_selected_fails_naming_it_and_what_is_selected(tmp_path):
    # linear@Q6_K has no per-type table; swiglu is selected on cpu only; attention selects another impl
    p = _run(tmp_path, "attention=cupy_splitk_bf16", "linear@Q6_K=cupy_float", "swiglu=triton",
             "linear@Q4_K=cupy_rowwarp")
    assert p.returncode == 1
    assert "attention=cupy_splitk_bf16 (it selects cupy_splitk_bf16_deep)" in p.stderr
    assert "linear@Q6_K=cupy_float (it selects nothing)" in p.stderr
    assert "swiglu=triton (it selects nothing)" in p.stderr
    assert "linear@Q4_K=cupy_rowwarp" not in p.stderr


def test_bad_input_is_refused_with_its_reason(tmp_path):
    assert _run(tmp_path, "attention").returncode == 2  # not OP=IMPL
    p = _run(tmp_path, "attention=x", text="[ops\n")
    assert p.returncode == 2 and "registry_selects:" in p.stderr
    p = subprocess.run([sys.executable, "bench/registry_selects.py", str(tmp_path / "none.toml"), "a=b"], cwd=REPO,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "none.toml" in p.stderr
