"""A probe's CUDA source with its `#include "x.cuh"` lines replaced by the headers' text (each once), found in the
probes' folder or the CuPy plugin's kernels: what NVRTC compiles with no include path, as the plugin compiles its own
modules (sparkops_cupy._runtime.expanded_source, whose patterns these are)."""

from __future__ import annotations

from pathlib import Path

from sparkops_cupy._runtime import _INCLUDE, _PRAGMA_ONCE

HERE = Path(__file__).resolve().parent
DIRS = (HERE, HERE.parents[1] / "plugins" / "sparkops_cupy" / "kernels")


def expanded(source: str, dirs: tuple[Path, ...] = DIRS) -> str:
    """source with every `#include "name"` replaced by the header's text (its own includes expanded; a header
    already expanded becomes nothing, as #pragma once would have it)."""
    done: set[str] = set()

    def header(name: str) -> str:
        if name in done:
            return ""
        done.add(name)
        for d in dirs:
            path = d / name
            if path.is_file():
                return expand(_PRAGMA_ONCE.sub("", path.read_text()))
        raise FileNotFoundError(f'#include "{name}": no such header in {", ".join(str(d) for d in dirs)}')

    def expand(text: str) -> str:
        return _INCLUDE.sub(lambda m: header(m.group(1)), text)

    return expand(source)
