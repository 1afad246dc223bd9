"""Which commit's sources a recorded figure ran: a row's `code_digest` matched against the digests of the commits in
the checkout's history.

Why: a row's `commit` is what `git rev-parse HEAD` said on the machine that measured it. A copy of the tree on a GPU
box may carry an older `.git` (the device tool keeps the session's first one) with the newer files as changes, so
a row there reads `<old commit>+dirty` although the code that ran is a commit of this history. The digest is computed
from the files that ran (provenance.code_digest); the same digest over a commit's blobs names that commit. A digest
no commit has means the code that ran was never committed: an audit must treat that figure as unreproducible.
"""

from __future__ import annotations

import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from .provenance import CODE_GLOBS, digest_of


def is_code(path: str, globs: tuple[str, ...] = CODE_GLOBS) -> bool:
    """Does `path` (posix, relative to the checkout) match one of the globs as `code_digest`'s Path.glob does?

    Each glob is "PREFIX/**/NAME": any file under PREFIX (at any depth) whose name matches NAME."""
    if "__pycache__" in path.split("/"):
        return False
    for g in globs:
        prefix, _, name = g.partition("/**/")
        if path.startswith(prefix + "/") and fnmatch(path.rsplit("/", 1)[-1], name):
            return True
    return False


def _git(root: Path, *args: str, stdin: bytes | None = None) -> bytes:
    out = subprocess.run([shutil.which("git") or "git", "-C", str(root), *args], input=stdin, capture_output=True,
                         timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout


def digest_of_commit(root: Path, commit: str, globs: tuple[str, ...] = CODE_GLOBS) -> str:
    """code_digest over `commit`'s blobs instead of the working tree: the same paths in the same order, the same
    bytes (blobs as committed; a checkout with line-ending conversion would differ, this repository has none)."""
    prefixes = sorted({g.partition("/**/")[0] for g in globs})
    listing = _git(root, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *prefixes)
    entries = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, path = item.split(b"\t", 1)
        mode, kind, sha = meta.split()
        p = path.decode()
        if kind == b"blob" and mode != b"120000" and is_code(p, globs):
            entries.append((p, sha.decode()))
    entries.sort()
    blobs = _git(root, "cat-file", "--batch", stdin="".join(f"{sha}\n" for _, sha in entries).encode())
    return digest_of(zip((p for p, _ in entries), _batch_bodies(blobs)))


def _batch_bodies(out: bytes):
    """The blob bodies of `git cat-file --batch` output, in order (each: "<sha> blob <size>\\n<body>\\n")."""
    at = 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        yield out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1


def resolve(root: Path, digests: set[str], depth: int = 400) -> dict[str, str]:
    """{digest: the oldest commit (of the last `depth` on HEAD) whose sources have it - the commit that made that
    code; later commits that changed no source have it too}; digests not found are absent. Commits whose code trees
    are the same are hashed once."""
    found: dict[str, str] = {}
    if not digests or not (root / ".git").exists():
        return found
    seen: dict[str, str] = {}  # the code trees' combined ids -> digest
    prefixes = sorted({g.partition("/**/")[0] for g in CODE_GLOBS})
    for commit in _git(root, "rev-list", f"--max-count={depth}", "HEAD").decode().split():
        try:
            key = " ".join(_git(root, "rev-parse", *(f"{commit}:{p}" for p in prefixes)).decode().split())
        except RuntimeError:  # a commit from before one of the source folders existed: hashed on its own
            key = f"commit {commit}"
        digest = seen.get(key)
        if digest is None:
            digest = seen[key] = digest_of_commit(root, commit)
        if digest in digests:
            found[digest] = commit  # newest first: the last one written is the oldest
    return found


def checkout_of(path: Path) -> Path | None:
    """The git checkout holding `path` (a scoreboard directory), or None outside one or without git."""
    if not shutil.which("git"):
        return None
    p = Path(path).resolve()
    out = subprocess.run(["git", "-C", str(p if p.is_dir() else p.parent), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, timeout=20)
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def row_sources(rows: list[dict[str, Any]], root: Path, depth: int = 400) -> list[dict[str, Any]]:
    """For each measurement, refusal and diagnosis row: what it says ran (commit, dirty), its digest, and the commit
    whose sources have that digest ("" where none of the last `depth` commits has it)."""
    kinds = ("measurement", "refusal", "diagnosis")
    picked = [r for r in rows if r.get("kind") in kinds]
    found = resolve(root, {r["code_digest"] for r in picked if r.get("code_digest")}, depth)
    out = []
    for r in picked:
        dg = r.get("code_digest") or ""
        resolved = found.get(dg, "")
        if not dg:
            verdict = "no digest recorded (rows before the digest existed)"
        elif resolved and not r.get("dirty") and resolved.startswith(str(r.get("commit"))):
            verdict = "the recorded commit"
        elif resolved:
            verdict = "a commit of this history (the recording box's .git was older)" if r.get("dirty") else \
                "a commit of this history with the same sources as the recorded one"
        else:
            verdict = "in no commit: the code that ran was never committed"
        out.append({"id": r["id"], "kind": r["kind"], "commit": r.get("commit"), "dirty": r.get("dirty"),
                    "code_digest": dg, "sources_commit": resolved, "verdict": verdict})
    return out
