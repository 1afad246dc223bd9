"""The digest of the pinned reference that check records are made against."""

from __future__ import annotations

import hashlib

from ..paths import repo_root


def reference_digest() -> str | None:
    """sha256 of reference.lock's bytes, or None where the checkout has none."""
    path = repo_root() / "reference.lock"
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()
