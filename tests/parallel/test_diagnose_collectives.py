"""`sparkops diagnose --worlds`: the collective share and the Amdahl crossover come from a measured run."""

import json

from tests.helpers import run_cli


def test_diagnose_reports_collective_share_and_crossover(tmp_path):
    r = run_cli("diagnose", "--model", "k3-nano", "--depth", "8", "--steps", "2", "--worlds", "2", "--json",
                "--out", str(tmp_path), env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["verdict"]
    assert 0.0 < v["collective_share"] < 1.0
    assert v["amdahl"]["crossover_world"] >= 1 and "serial_fraction" in v["amdahl"]
    assert "collectives take" in v["collectives"]


def test_diagnose_rejects_bad_worlds(tmp_path):
    r = run_cli("diagnose", "--model", "k3-nano", "--depth", "8", "--worlds", "two", "--out", str(tmp_path))
    assert r.returncode == 2 and "--worlds must be comma-separated integers" in r.stderr
