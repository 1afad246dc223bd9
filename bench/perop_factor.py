"""The per-op speed-up a rung's --expect takes, from a side-by-side GPU test's record (perop-NAME.json).

    python3 bench/perop_factor.py perop-floatrow-bfloat16.json triton_lastblock cupy_floatrow   # prints 1.234
    python3 bench/perop_factor.py perop-rowwarp-bfloat16.json cupy_rowwarp --less 28 1.9e-6    # BEFORE's sum over
                                                                        # the same less 28 calls' 1.9 us each
    python3 bench/perop_factor.py perop-kdanorm-bfloat16.json --fastest triton triton_split     # prints the name
                                                                        # of the candidate with the least time
    python3 bench/perop_factor.py perop-normwait-bfloat16.json triton_pdl triton_pdl_wait --minus "no norm"
                                            # (BEFORE - MINUS) over (AFTER - MINUS): an op timed in a chain
    python3 bench/perop_factor.py perop-oprojnorm-bfloat16.json chain FUSED --minus "no norm" --share 0.5
                                            # the --minus factor on a share of the op's calls (Amdahl on that share:
                                            # 1 / (1 - SHARE + SHARE / factor)), the factor on the whole op
    python3 bench/perop_factor.py perop-moenorm-bfloat16.json FUSED "no closing norm" --gap 26
                                            # (BEFORE - AFTER) / CALLS in microseconds: what a change adds a call

The record holds each implementation's time a token, summed over the step's own calls of that op (the test's list of
shapes and calls per token). The factor is BEFORE's sum over AFTER's. A stage computes its prediction from the proof it
has just run, instead of a number typed into the script (session 13: a hand-made factor rested on a wrong call list).
Exit 2, with the reason on stderr, when the record or an implementation is missing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _columns(record: Path, *names: str) -> dict[str, float]:
    """`record`'s per-token seconds by implementation, each of `names` in it; else the reason (ValueError, KeyError)."""
    data = json.loads(record.read_text())
    sums = data.get("per_token_seconds") if isinstance(data, dict) else None
    if not isinstance(sums, dict) or not all(isinstance(v, (int, float)) for v in sums.values()):
        raise ValueError(f"{record}: not a per-op record (no 'per_token_seconds' table of seconds); the side-by-side "
                         f"GPU tests write them with SPARKOPS_PEROP_DIR set")
    for name in names:
        if name not in sums:
            raise KeyError(f"{record}: no implementation '{name}' (it holds {', '.join(sorted(sums))})")
    return sums


def factor(record: Path, before: str, after: str) -> float:
    """BEFORE's per-token seconds over AFTER's, from `record`."""
    sums = _columns(record, before, after)
    if sums[after] <= 0:
        raise ValueError(f"{record}: {after} has no time a token ({sums[after]})")
    return sums[before] / sums[after]


def factor_minus(record: Path, before: str, after: str, minus: str) -> float:
    """(BEFORE - MINUS) over (AFTER - MINUS), from `record`: the speed-up of an op timed inside a chain (its producer
    before it in each column), where MINUS is the column of the chain without that op. Amdahl applies it to the op's
    own time in the step; the plain BEFORE over AFTER would apply the chain's ratio to the op alone."""
    sums = _columns(record, before, after, minus)
    own_before, own_after = sums[before] - sums[minus], sums[after] - sums[minus]
    if own_before <= 0 or own_after <= 0:
        raise ValueError(f"{record}: '{minus}' ({sums[minus]} s) is not less than both '{before}' ({sums[before]} s) "
                         f"and '{after}' ({sums[after]} s): the op's own time in the chain is not positive")
    return own_before / own_after


def on_share(factor: float, share: float) -> float:
    """A speed-up `factor` of `share` of an op's time (its calls that a change takes, the others unchanged) as the
    speed-up of the whole op: 1 / (1 - share + share / factor)."""
    if not 0 < share <= 1 or factor <= 0:
        raise ValueError(f"--share takes a fraction in (0, 1] of a positive factor, not {share} of {factor}")
    return 1 / (1 - share + share / factor)


def gap_us(record: Path, before: str, after: str, calls: int) -> float:
    """(BEFORE - AFTER) / `calls` in microseconds, from `record`: what a change adds to a call (a fused kernel's longer
    tail, for a critical-path forecast's --shift), where AFTER's column is BEFORE's chain without the change. Refused
    when it is negative (the change would take time away: not the tail the caller asked for)."""
    if calls <= 0:
        raise ValueError(f"--gap takes a positive count of calls, not {calls}")
    sums = _columns(record, before, after)
    gap = (sums[before] - sums[after]) / calls * 1e6
    if gap < 0:
        raise ValueError(f"{record}: '{before}' ({sums[before]} s) is less than '{after}' ({sums[after]} s): no "
                         f"time added a call")
    return gap


def factor_less(record: Path, before: str, calls: int, seconds: float) -> float:
    """BEFORE's per-token seconds over the same less `calls` x `seconds`: a change measured as a saving a call (a
    probe's pair timed with and without it) rather than as an implementation of its own in the record."""
    data = json.loads(record.read_text())
    sums = data.get("per_token_seconds") if isinstance(data, dict) else None
    if not isinstance(sums, dict) or before not in sums:
        raise KeyError(f"{record}: no per-token time of '{before}' (a side-by-side record written with "
                       f"SPARKOPS_PEROP_DIR set)")
    left = sums[before] - calls * seconds
    if left <= 0:
        raise ValueError(f"{record}: {calls} calls x {seconds} s is more than {before}'s {sums[before]} s a token")
    return sums[before] / left


def fastest(record: Path, names: list[str]) -> str:
    """The one of `names` with the least time a token in `record` (a tie: the first named), so that a rung times the
    form its proof found fastest among several built for one change."""
    data = json.loads(record.read_text())
    sums = data.get("per_token_seconds") if isinstance(data, dict) else None
    if not isinstance(sums, dict):
        raise ValueError(f"{record}: not a per-op record (no 'per_token_seconds' table of seconds)")
    missing = [n for n in names if n not in sums]
    if missing or not names:
        raise KeyError(f"{record}: no implementation {', '.join(map(repr, missing)) or '(none named)'} (it holds "
                       f"{', '.join(sorted(sums))})")
    return min(names, key=lambda n: (sums[n], names.index(n)))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 3 and args[1] == "--fastest":
        try:
            print(fastest(Path(args[0]), args[2:]))
        except (OSError, KeyError, ValueError, json.JSONDecodeError) as e:
            print(f"perop_factor: {e}", file=sys.stderr)
            return 2
        return 0
    less = len(args) == 5 and args[2] == "--less"
    minus = len(args) == 5 and args[3] == "--minus"
    gap = len(args) == 5 and args[3] == "--gap"
    share = len(args) == 7 and args[3] == "--minus" and args[5] == "--share"
    if len(args) != 3 and not less and not minus and not gap and not share:
        print("usage: python3 bench/perop_factor.py RECORD.json BEFORE AFTER\n"
              "       python3 bench/perop_factor.py RECORD.json BEFORE --less CALLS SECONDS\n"
              "       python3 bench/perop_factor.py RECORD.json BEFORE AFTER --minus NAME\n"
              "       python3 bench/perop_factor.py RECORD.json BEFORE AFTER --minus NAME --share FRACTION\n"
              "       python3 bench/perop_factor.py RECORD.json BEFORE AFTER --gap CALLS\n"
              "       python3 bench/perop_factor.py RECORD.json --fastest NAME [NAME ...]", file=sys.stderr)
        return 2
    try:
        if less:
            print(f"{factor_less(Path(args[0]), args[1], int(args[3]), float(args[4])):.3f}")
            return 0
        if minus:
            print(f"{factor_minus(Path(args[0]), args[1], args[2], args[4]):.3f}")
            return 0
        if share:
            print(f"{on_share(factor_minus(Path(args[0]), args[1], args[2], args[4]), float(args[6])):.3f}")
            return 0
        if gap:
            print(f"{gap_us(Path(args[0]), args[1], args[2], int(args[4])):.2f}")
            return 0
        print(f"{factor(Path(args[0]), args[1], args[2]):.3f}")
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as e:
        print(f"perop_factor: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
