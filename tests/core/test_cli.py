"""The CLI surface: version, help, exit codes."""

import os

from sparkops import __version__
from sparkops.cli import main
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


def test_ops_shows_why_an_implementation_is_unavailable_verbatim():
    """An unavailable implementation's reason names its fix; square brackets in it ("pip install sparkops[gpu]")
    are text, not rich markup that would vanish from the table."""
    from sparkops.plugins import load_catalog

    reasons = {i.unavailable for op in ("linear", "attention") for i in load_catalog().implementations(op).values()
               if not i.available and "[" in str(i.unavailable)}
    if not reasons:
        import pytest

        pytest.skip("every implementation is available here (no reason with brackets to show)")
    for argv in (("ops", "linear"), ("plugins",)):  # the table, and the plugins' report
        r = run_cli(*argv, env={"COLUMNS": "400"})
        assert r.returncode == 0, r.stderr
        shown = " ".join(r.stdout.split())
        assert any(" ".join(str(why).split()) in shown for why in reasons), (argv, reasons, shown[-2000:])


def test_ops_unknown_op_is_exit_2_listing_ops():
    r = run_cli("ops", "flash")
    assert r.returncode == 2 and "the ops are: embedding" in r.stderr


def test_an_output_path_that_cannot_be_written_is_refused_before_the_work(tmp_path, capsys, monkeypatch):
    """--json-out to a missing folder, a folder, or a read-only folder: a clear error naming the flag and the fix,
    given before the check or the diagnosis runs (a long measurement is never lost to a bad path at the end)."""
    from sparkops.cli import check_cmd

    ran = []
    monkeypatch.setattr(check_cmd, "_save_json", lambda *a: ran.append(a))
    for path, says in ((tmp_path / "nowhere" / "x.json", "does not exist"), (tmp_path, "is a folder")):
        for argv in (["check", "rmsnorm=torch", "--json-out", str(path)],
                     ["diagnose", "--model", "k3-nano", "--paper", "--depth", "0", "--json-out", str(path)]):
            assert main(argv) == 2
            err = " ".join(capsys.readouterr().err.split())
            assert "--json-out" in err and says in err, err
    assert not ran
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if not os.access(ro, os.W_OK):  # root writes anywhere: nothing to refuse then
            assert main(["check", "rmsnorm=torch", "--json-out", str(ro / "x.json")]) == 2
            assert "not writable" in " ".join(capsys.readouterr().err.split())
    finally:
        ro.chmod(0o700)
    assert main(["check", "rmsnorm=torch", "--json-out", str(tmp_path / "ok.json")]) == 0
