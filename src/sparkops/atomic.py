"""Writing a file so that it is either the old bytes or the new bytes, never half of each."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`."""
    path = Path(path)
    data = text.encode() if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: str | Path, flag: str) -> None:
    """Refuse, before any work, an output path `write_atomic` could not write: its folder must exist and take a new
    file, and the path must not be a folder. `flag` names the option in the error (e.g. "--json-out")."""
    from .errors import BadInput

    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise BadInput(f"{flag} {path}: is a folder; give a file path, e.g. {p / 'result.json'}")
    if not folder.is_dir():
        raise BadInput(f"{flag} {path}: the folder {folder} does not exist; create it or give a path in an existing "
                       f"folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{flag} {path}: the folder {folder} is not writable; give a path in a folder you can write")
