"""tests/interpreter_speed.py's patches change the interpreter's time, never its bits: every registered Triton
implementation (tests/interpreter_bits.py) gives the same output and state bytes under the patched interpreter, in
two fresh copies of the kernel modules (the second runs the rewrites the first kept), as under Triton's own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def bits(*args: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "tests.interpreter_bits", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_the_patched_interpreter_gives_every_kernel_s_bits():
    plain, patched = bits("--plain", "--copies", "1"), bits("--copies", "2")
    if not patched["installed"]:
        pytest.skip("tests/interpreter_speed.py patched nothing on this Triton: the interpreter ran as it comes")
    assert not plain["installed"]
    errors = {k: v for k, v in plain["digests"].items() if v.startswith("error")}
    assert not errors, errors  # a kernel that cannot run proves nothing about the patches
    want = {k.rsplit(" ", 1)[0]: v for k, v in plain["digests"].items()}
    got = patched["digests"]
    assert len(want) >= 90 and len(got) == 2 * len(want)
    differ = sorted(k for k, v in got.items() if v != want[k.rsplit(" ", 1)[0]])
    assert not differ, f"{len(differ)} runs' bytes changed under the patches, e.g. {differ[:4]}"
