"""The CLI surface: version, help, exit codes."""

from sparkops import __version__
from tests.helpers import run_cli


def test_version():
    r = run_cli("--version")
    assert r.returncode == 0 and __version__ in r.stdout


def test_no_command_is_usage_error():
    assert run_cli().returncode == 2


def test_unknown_command_is_usage_error():
    r = run_cli("frobnicate")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_ops_describes_a_contract():
    r = run_cli("ops", "attention")
    assert r.returncode == 0, r.stderr
    assert "1/sqrt(Dn + R)" in r.stdout and "w_uk" in r.stdout


def test_ops_unknown_op_is_exit_2_listing_ops():
    r = run_cli("ops", "flash")
    assert r.returncode == 2 and "the ops are: embedding" in r.stderr
