"""Shape checks shared by the reference ops: a wrong input fails with a message naming it and the fix."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sparkops.errors import BadInput


def expect_shape(op: str, name: str, arr, want: Sequence[int | None], what: str = "") -> None:
    """Raise BadInput unless `arr` has len(want) dims and each non-None entry of `want` matches."""
    shape = tuple(np.shape(arr))
    ok = len(shape) == len(want) and all(w is None or w == s for w, s in zip(want, shape))
    if not ok:
        spelled = "[" + ", ".join("*" if w is None else str(w) for w in want) + "]"
        hint = f" ({what})" if what else ""
        raise BadInput(f"{op}: '{name}' has shape {list(shape)}, expected {spelled}{hint}; "
                       f"pass a tensor of that shape")


def expect_ids(op: str, name: str, ids: np.ndarray, upper: int) -> None:
    """Every id must lie in [0, upper); an out-of-range id would read memory that is not the table."""
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= upper):
        bad = ids[(ids < 0) | (ids >= upper)]
        raise BadInput(f"{op}: '{name}' holds {int(bad.flat[0])}, outside [0, {upper}); "
                       f"ids must index the {upper} rows that exist")


def expect_weight(op: str, name: str, weight, want: Sequence[int | None], what: str = "") -> None:
    """The same check for a QWeight's logical shape (its bytes are never read for this)."""
    if weight is None:
        raise BadInput(f"{op}: '{name}' is None; pass the weight")
    expect_shape(op, name, np.broadcast_to(np.empty((), np.int8), tuple(weight.shape)), want, what)
