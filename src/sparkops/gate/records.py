"""Check records: what the gate writes when an implementation passes, and when a record still holds.

A record is stale when the implementation's source (its module and declared kernel files) changed,
when it was made on another device class, when the check failed, or when the pinned reference
changed since. The engine refuses a selection whose record is stale; the message says what to run.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..ops import get_contract
from ..plugins.implementation import Implementation


def source_hash(impl: Implementation) -> str:
    """sha256 over the bytes of every file that defines the implementation, in a stable order."""
    h = hashlib.sha256()
    h.update(impl.key.encode())
    for path in sorted(set(impl.source_files()), key=str):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def record_problem(impl: Implementation, record: dict[str, Any] | None, device: str) -> str | None:
    """None when `record` lets `impl` run on `device`, else what is wrong with it."""
    if impl.name == get_contract(impl.op).reference:
        return None
    if not record:
        return "no check record"
    if record.get("passed") is not True:
        return "its recorded check failed"
    if record.get("device_class") != device:
        return f"it was checked on {record.get('device_class')!r}, not {device!r}"
    try:
        current = source_hash(impl)
    except OSError as exc:
        return f"its source cannot be read to verify the record ({exc})"
    if record.get("source_hash") != current:
        return "its source changed since it was checked"
    from .lockref import reference_digest

    ref = reference_digest()
    if ref is not None and record.get("reference_digest") not in (None, ref):
        return "the pinned reference (reference.lock) changed since it was checked"
    return None
