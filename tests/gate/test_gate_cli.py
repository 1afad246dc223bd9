"""The gate through the real command line, with the wrong-implementations plugin found through a real
entry point (a .dist-info on PYTHONPATH), as an installed third-party plugin would be.

One interpreter runs the whole story so the suite stays fast: swap refuses a wrong implementation
and leaves registry.toml byte-for-byte unchanged; swap proves and selects a correct one; the plan
runs; editing the implementation's source makes the plan refuse with what to run; a new check
(`check --write`) lets it run again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.helpers import run_cli

STORY = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from sparkops.cli import main

    registry, source = Path(sys.argv[1]), Path(sys.argv[2])
    before = registry.read_bytes()
    codes = {"swap_wrong": main(["swap", "linear=tp_reduce_twice", "--registry", str(registry)])}
    codes["unchanged"] = registry.read_bytes() == before
    codes["swap_ok"] = main(["swap", "swiglu=fixture_ok", "--registry", str(registry)])
    codes["plan"] = main(["plan", "--registry", str(registry)])
    source.write_text(source.read_text() + "\\n# an edit\\n")
    codes["plan_after_edit"] = main(["plan", "--registry", str(registry)])
    codes["recheck"] = main(["check", "swiglu=fixture_ok", "--write", "--registry", str(registry)])
    codes["plan_after_recheck"] = main(["plan", "--registry", str(registry)])
    print("CODES" + json.dumps(codes))
''')


def test_swap_edit_recheck_through_the_entry_point(tmp_path, plugin_site, private_lock):
    registry = tmp_path / "registry.toml"
    registry.write_text("# my registry: comments survive\n")
    script = tmp_path / "story.py"
    script.write_text(STORY)
    source = plugin_site / "sparkops_wrong_impls" / "swiglu.py"
    original = source.read_text()
    env = {"PYTHONPATH": str(plugin_site), "SPARKOPS_REFERENCE_LOCK": str(private_lock), "COLUMNS": "250"}
    try:
        proc = subprocess.run([sys.executable, str(script), str(registry), str(source)], capture_output=True,
                              text=True, timeout=300, env={**os.environ, **env}, cwd=tmp_path)
    finally:
        source.write_text(original)
    said = proc.stdout + proc.stderr
    codes = json.loads(said.split("CODES", 1)[1].splitlines()[0])
    assert codes == {"swap_wrong": 1, "unchanged": True, "swap_ok": 0, "plan": 0, "plan_after_edit": 1,
                     "recheck": 0, "plan_after_recheck": 0}, said
    flat = " ".join(said.split())
    assert "linear=tp_reduce_twice failed its check on cpu" in flat and "left unchanged" in flat
    assert "its source changed since it was checked" in flat and "sparkops swap swiglu=fixture_ok" in flat
    assert registry.read_text().startswith("# my registry: comments survive")


def test_check_reports_through_the_entry_point(plugin_site, private_lock):
    proc = run_cli("check", "swiglu=last_row_unwritten", "swiglu=fixture_ok", "--json", extra_path=[plugin_site],
                   env={"SPARKOPS_REFERENCE_LOCK": str(private_lock)})
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    verdicts = {r["impl"]: r["passed"] for r in out["results"]}
    assert verdicts == {"last_row_unwritten": False, "fixture_ok": True}
    failing = next(r for r in out["results"] if not r["passed"])
    assert failing["failures"] and all("@" in name for name in failing["failures"])
    assert len(out["seeds"]) == 3 and out["seeds"][:2] == [0, 1]
    assert "failed the gate" in proc.stderr
