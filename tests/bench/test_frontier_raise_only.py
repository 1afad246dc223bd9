"""bench/frontier.toml is raise-only: no commit may lower a value without the tooling's record.

The checkout's file is checked over its whole git history (each commit against the one before) and
the working tree against HEAD; a value that went down needs a [[lowered]] record written by
`sparkops ledger retract`. The checker itself is proven on a scratch repository where one commit
lowers a value by hand (caught) and another lowers it through a retraction (allowed).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import tomlkit

from sparkops.bench import ledger as L
from sparkops.bench import record as R
from sparkops.bench.frontier import Frontier, history_problems
from sparkops.bench.provenance import now
from sparkops.paths import repo_root

REL = "bench/frontier.toml"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_no_commit_lowered_the_frontier_by_hand():
    root = repo_root()
    if not (root / ".git").exists():
        pytest.skip(f"{root} is not a git checkout: there is no history to check")
    path = root / REL
    problems = history_problems(root, REL, path.read_text() if path.exists() else None)
    if problems is None:
        pytest.skip(f"{REL} has no committed history yet (HEAD~1 has nothing to compare with)")
    assert problems == [], "\n".join(problems)


def test_the_checkout_frontier_agrees_with_its_ledger():
    d = repo_root() / "bench"
    if not (d / L.FRONTIER).exists():
        pytest.skip("the checkout has no bench/frontier.toml yet")
    assert R.consistency_problems(d) == []


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": "/usr/bin:/bin:/usr/local/bin"})


def _row(value, key="decode.k3-nano.f32.cpu.d=128"):
    date = now()
    return {"id": L.new_id(date), "kind": "measurement", "date": date, "key": key, "after": value, "noise": 0.02,
            "figures": [{"label": "A", "registry": "r.toml", "dtype": "float32", "value": value}], "tier": "none"}


@needs_git
def test_the_checker_catches_a_hand_edit_and_allows_a_retraction(tmp_path):
    root = tmp_path / "repo"
    bench = root / "bench"
    bench.mkdir(parents=True)
    _git(root, "init", "-q")
    f = Frontier.load(bench / L.FRONTIER)
    rows = [_row(100.0), _row(150.0)]
    for r in rows:
        L.append(bench / L.LEDGER, r)
        R.offer_row(f, r)
    f.save()
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "bench: 100 then 150")
    assert history_problems(root, REL, (bench / L.FRONTIER).read_text()) == []

    R.retract(bench, rows[1]["id"], "the 150 read the wrong rows", "sparkops ledger retract")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "retract the 150")
    assert Frontier.load(bench / L.FRONTIER).value(rows[0]["key"]) == 100.0
    assert history_problems(root, REL, (bench / L.FRONTIER).read_text()) == []  # a logged retraction may lower

    doc = tomlkit.parse((bench / L.FRONTIER).read_text())
    doc["frontier"][rows[0]["key"]]["value"] = 80.0
    (bench / L.FRONTIER).write_text(tomlkit.dumps(doc))
    uncommitted = history_problems(root, REL, (bench / L.FRONTIER).read_text())
    assert len(uncommitted) == 1 and uncommitted[0].startswith("working tree:")
    assert "100 lowered to 80" in uncommitted[0]
    _git(root, "commit", "-q", "-am", "tidy the frontier")
    committed = history_problems(root, REL, (bench / L.FRONTIER).read_text())
    assert len(committed) == 1 and committed[0].startswith("commit ") and "without a [[lowered]] record" in committed[0]
