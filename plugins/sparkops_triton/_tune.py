"""Time the launch-shape variants of the Triton kernels at the 48B shapes, in one call on a GPU.

    python -m sparkops_triton._tune [kda_decode kda_prefill attention_decode attention_prefill]

Each variant sets module constants (block sizes, warps, stages), checks its output against the
default configuration's on the same inputs (NMSE, so a variant that is fast because it is wrong shows
up), and is timed with `_workloads.time_calls` (rotated inputs beyond the L2; CUDA-graph replay for
decode). The table at the end is the input for choosing the defaults written in the kernel modules.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from . import attention_prefill, attention_splitk, kda, kda_chunked
from ._workloads import attention_args, kda_args, time_calls

#: study -> (module, [{constant: value}, ...]); the first variant is the current default
STUDIES: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "kda_decode": (kda, [{"BLOCK_V": 32}, {"BLOCK_V": 16}, {"BLOCK_V": 64}, {"BLOCK_V": 128}]),
    "kda_prefill": (kda_chunked, [
        {"PREPARE_WARPS": 8, "STATE_WARPS": 8, "BLOCK_V": 32},
        {"PREPARE_WARPS": 4, "STATE_WARPS": 8, "BLOCK_V": 32},
        {"PREPARE_WARPS": 8, "STATE_WARPS": 4, "BLOCK_V": 16},
        {"PREPARE_WARPS": 8, "STATE_WARPS": 8, "BLOCK_V": 64},
    ]),
    "attention_decode": (attention_splitk, [
        {"BLOCK_ROWS": 32, "SPLITS_PER_SM": 1, "SPLIT_STAGES": 3},
        {"BLOCK_ROWS": 16, "SPLITS_PER_SM": 1, "SPLIT_STAGES": 4},
        {"BLOCK_ROWS": 64, "SPLITS_PER_SM": 1, "SPLIT_STAGES": 2},
        {"BLOCK_ROWS": 32, "SPLITS_PER_SM": 2, "SPLIT_STAGES": 3},
    ]),
    "attention_prefill": (attention_prefill, [
        {"FLASH_BM": 64, "FLASH_BN": 64, "FLASH_WARPS": 8, "FLASH_STAGES": 2},
        {"FLASH_BM": 128, "FLASH_BN": 64, "FLASH_WARPS": 8, "FLASH_STAGES": 3},
        {"FLASH_BM": 64, "FLASH_BN": 32, "FLASH_WARPS": 4, "FLASH_STAGES": 3},
    ]),
}


def _workload(study: str) -> tuple[Callable[..., Any], list[tuple], int, bool]:
    if study == "kda_decode":
        sets, nbytes = kda_args(1)
        return kda.kda, sets, nbytes, True
    if study == "kda_prefill":
        sets, nbytes = kda_args(32768, n_sets=2)
        return kda_chunked.kda_chunked, sets, nbytes, False
    if study == "attention_decode":
        sets, nbytes = attention_args(1, 131072)
        return attention_splitk.attention_splitk, sets, nbytes, True
    sets, nbytes = attention_args(32768, 0, n_sets=1)
    return attention_splitk.attention_splitk, sets, nbytes, False


def _output(fn: Callable[..., Any], args: tuple) -> torch.Tensor:
    fresh = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)  # state changes in place
    return fn(*fresh).float()


def run(study: str) -> list[str]:
    module, variants = STUDIES[study]
    fn, sets, nbytes, graph = _workload(study)
    saved = {k: getattr(module, k) for v in variants for k in v}
    rows, baseline = [], None
    try:
        for variant in variants:
            for k, v in variant.items():
                setattr(module, k, v)
            out = _output(fn, sets[0])
            baseline = out if baseline is None else baseline
            err = float(((out - baseline) ** 2).sum() / (baseline ** 2).sum())
            t = time_calls(fn, sets, nbytes, graph=graph, replays=10 if graph else 3)
            rows.append(f"{study:<18} {str(variant):<72} {t}  nmse vs default {err:.1e}")
            print(rows[-1], flush=True)
    finally:
        for k, v in saved.items():
            setattr(module, k, v)
    return rows


def main(argv: list[str]) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("sparkops_triton._tune needs a CUDA device")
    rows = [row for study in (argv or list(STUDIES)) for row in run(study)]
    print("\n".join(["", "summary:"] + rows))


if __name__ == "__main__":
    main(sys.argv[1:])
