"""`sparkops ledger provenance` (sparkops.bench.sources): a row's code digest names the commit whose sources ran,
also when the measuring box's .git was older than its files ("+dirty" rows), and says so when no commit has them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkops.bench.provenance import CODE_GLOBS, code_digest
from sparkops.bench.sources import digest_of_commit, is_code, resolve, row_sources

pytestmark = pytest.mark.skipif(not shutil.which("git"), reason="needs git")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(root: Path, msg: str) -> str:
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", msg)
    return _git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for rel, text in {"src/sparkops/a.py": "A = 1\n", "src/sparkops/sub/deep/b.py": "B = 2\n",
                      "plugins/p/k.cu": "// kernel\n", "plugins/p/h.cuh": "// header\n", "plugins/p/m.py": "M\n",
                      "plugins/p/notes.md": "not code\n", "README.md": "not code\n", "src/other.py": "not ours\n",
                      "src/sparkops/__pycache__/a.cpython-311.pyc": "bytes\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".gitignore").write_text("__pycache__/\n")
    _git(root, "init", "-q")
    return root


def test_is_code_selects_what_the_working_tree_digest_globs(repo):
    on_disk = sorted(p.relative_to(repo).as_posix() for g in CODE_GLOBS for p in repo.glob(g)
                     if p.is_file() and "__pycache__" not in p.parts)
    every = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts)
    assert sorted(p for p in every if is_code(p)) == on_disk
    assert "plugins/p/notes.md" not in on_disk and "src/other.py" not in on_disk


def test_a_commits_digest_is_the_digest_of_its_checkout(repo):
    first = _commit(repo, "first")
    assert digest_of_commit(repo, first) == code_digest(repo)
    (repo / "plugins/p/k.cu").write_text("// kernel, faster\n")
    (repo / "README.md").write_text("docs change\n")
    second = _commit(repo, "second")
    assert digest_of_commit(repo, second) == code_digest(repo) != digest_of_commit(repo, first)


def test_rows_resolve_to_the_commit_that_made_their_sources(repo):
    first = _commit(repo, "first")
    d1 = code_digest(repo)
    (repo / "src/sparkops/a.py").write_text("A = 3\n")
    d2 = code_digest(repo)  # measured before it was committed: the box's .git still said `first`, dirty
    second = _commit(repo, "code")
    (repo / "README.md").write_text("docs only\n")
    _commit(repo, "docs")  # the same sources as `second`: the digest names the commit that made them
    (repo / "src/sparkops/a.py").write_text("A = 4\n")
    d3 = code_digest(repo)  # never committed
    assert resolve(repo, {d1, d2, d3}) == {d1: first, d2: second}
    rows = [{"id": "r1", "kind": "measurement", "commit": first, "dirty": False, "code_digest": d1},
            {"id": "r2", "kind": "measurement", "commit": first, "dirty": True, "code_digest": d2},
            {"id": "r3", "kind": "refusal", "commit": second, "dirty": True, "code_digest": d3},
            {"id": "r4", "kind": "measurement", "commit": first, "dirty": False},
            {"id": "r5", "kind": "retraction", "retracts": "r1"}]
    got = {r["id"]: r for r in row_sources(rows, repo)}
    assert set(got) == {"r1", "r2", "r3", "r4"}
    assert got["r1"]["sources_commit"] == first and got["r1"]["verdict"] == "the recorded commit"
    assert got["r2"]["sources_commit"] == second and "older" in got["r2"]["verdict"]
    assert got["r3"]["sources_commit"] == "" and got["r3"]["verdict"].startswith("in no commit")
    assert got["r4"]["verdict"].startswith("no digest recorded")


def test_history_from_before_the_plugins_folder_existed_is_searched_too(tmp_path):
    root = tmp_path / "young"
    (root / "src/sparkops").mkdir(parents=True)
    (root / "src/sparkops/a.py").write_text("A = 1\n")
    _git(root, "init", "-q")
    first = _commit(root, "no plugins yet")
    d1 = code_digest(root)
    (root / "plugins/p").mkdir(parents=True)
    (root / "plugins/p/m.py").write_text("M\n")
    second = _commit(root, "plugins")
    assert resolve(root, {d1, code_digest(root)}) == {d1: first, code_digest(root): second}


def test_the_cli_reports_a_row_from_an_older_git_and_refuses_an_unknown_id(repo, tmp_path):
    """End to end through `sparkops ledger provenance` on a scoreboard directory inside the repository: the history
    searched is that checkout's (the one the ledger lives in), not sparkops' own."""
    _commit(repo, "first")
    (repo / "plugins/p/m.py").write_text("M2\n")
    digest = code_digest(repo)
    made = _commit(repo, "kernel")
    bench = repo / "bench"
    bench.mkdir()
    row = {"id": "20991231-000000-abcdef", "kind": "measurement", "commit": "0" * 40, "dirty": True,
           "code_digest": digest}
    (bench / "ledger.jsonl").write_text(json.dumps(row) + "\n")
    cmd = [sys.executable, "-m", "sparkops", "ledger", "provenance", "--bench-dir", str(bench), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, env=_env())
    assert out.returncode == 0, out.stderr
    (found,) = json.loads(out.stdout)
    assert found["sources_commit"] == made and "older" in found["verdict"]
    bad = subprocess.run(cmd[:5] + ["nosuchrow", "--bench-dir", str(bench)], capture_output=True, text=True,
                         cwd=repo, env=_env())
    assert bad.returncode != 0 and "no row id starts with 'nosuchrow'" in bad.stdout + bad.stderr
    none = subprocess.run(cmd[:5] + ["--depth", "0", "--bench-dir", str(bench)], capture_output=True, text=True,
                          cwd=repo, env=_env())
    assert none.returncode != 0 and "--depth 0 searches no commit" in none.stdout + none.stderr


def _env():
    import os

    return dict(os.environ)
