"""Time the launch-shape variants of the Triton kernels at the 48B shapes, in one call on a GPU.

    python -m sparkops_triton._tune [kda_decode kda_prefill attention_decode attention_prefill linear_gemv
                                     lm_head_q6k linear_q6k_small moe_decode router_gemv moe_decode_prefetch
                                     lm_head_prefetch linear_gemv_prefetch linear_gemv_flat moe_decode_flat
                                     router_prefill dequant_bf16 kda_prefill_split attention_prefill_sdpa
                                     kda_prefill_split_tf32]

Each variant sets module constants (block sizes, warps, stages), checks its output against the
default configuration's on the same inputs (NMSE, so a variant that is fast because it is wrong shows
up), and is timed with `_workloads.time_calls` (rotated inputs beyond the L2; CUDA-graph replay for
decode). The table at the end is the input for choosing the defaults written in the kernel modules.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from . import (attention_prefill, attention_sdpa, attention_splitk, dequantize, kda, kda_chunked, linear, moe_experts,
               moe_router)
from ._workloads import attention_args, expert_stack_args, kda_args, router_args, time_calls

#: linear's GEMV table with one type's (rows per program at T=1, fewest rows, warps) replaced
_q4k, _q6k = int(linear.Q4_K.value), int(linear.Q6_K.value)


def _gemv(rows: int, warps: int, per_sm: int, qtype: int = _q4k) -> dict[str, Any]:
    return {"GEMV_CONFIG": {**linear.GEMV_CONFIG, qtype: (rows, min(linear.GEMV_CONFIG[qtype][1], rows), warps)},
            "GEMV_PROGRAMS_PER_SM": per_sm}


def _q6k_gemv(rows: int, warps: int, wide: bool) -> dict[str, Any]:
    """A Q6_K GEMV variant: its tile (rows per program at T=1, warps; 2 programs per SM) and which fetch decodes
    it (linear.Q6K_WIDE_LOADS: 16-bit word loads; in the interpreter the byte loads' bits at the same tile). Every Q6_K
    variant names the switch, so one variant's setting does not leak into the next."""
    return {**_gemv(rows, warps, 2, _q6k), "Q6K_WIDE_LOADS": wide}


#: the Q6_K GEMV studies' variants: the default (byte loads, default tile) first, then the 16-bit word loads at the
#: default tile (the same per-column sums; "nmse vs default 0.0e+00" says whether the final row sums kept their bits
#: on the GPU too), then the word loads at two other tiles
_Q6K_DEFAULT_TILE = linear.GEMV_CONFIG[_q6k][0], linear.GEMV_CONFIG[_q6k][2]
_Q6K_VARIANTS = [_q6k_gemv(*_Q6K_DEFAULT_TILE, False), _q6k_gemv(*_Q6K_DEFAULT_TILE, True), _q6k_gemv(32, 4, True),
                 _q6k_gemv(16, 8, True)]

#: study -> (module, [{constant: value}, ...]); the first variant is the current default
STUDIES: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "kda_decode": (kda, [{"BLOCK_V": 32}, {"BLOCK_V": 16}, {"BLOCK_V": 64}, {"BLOCK_V": 128}]),
    "kda_prefill": (kda_chunked, [
        {"PREPARE_WARPS": 4, "STATE_WARPS": 8, "BLOCK_V": 32, "DIAG_UNROLL": False},
        {"PREPARE_WARPS": 8},  # session 10's defaults
        {"DIAG_UNROLL": True},  # session 11's fastest, 56 bytes of spills
        {"PREPARE_WARPS": 2},
        {"STATE_WARPS": 4},
        {"STATE_WARPS": 4, "BLOCK_V": 16},
        # the prepare kernel's small products on the tensor cores (its "ieee" FMA products are a latency chain): about
        # float32 (tf32x3; session 11: no faster at 8 warps), or plain tf32 (10-bit operands; the op's claim is bf16,
        # its tolerance NMSE 1e-3 against the reference's 4e-6 measured: the nmse column says what it costs)
        {"PREPARE_PRECISION": "tf32x3"},
        {"PREPARE_PRECISION": "tf32"},
        # the state kernel's W, Qg, Kg in bfloat16 between the kernels (half their bytes)
        {"SCRATCH_BF16": True},
    ]),
    # "triton_chunked_split": its phase kernels' warps
    "kda_prefill_split": (kda_chunked, [{"SPLIT_WARPS": 4, "SPLIT_UNROLL": True}, {"SPLIT_WARPS": 8},
                                        {"SPLIT_UNROLL": False}, {"SPLIT_WARPS": 2}, {"PREPARE_PRECISION": "tf32"},
                                        {"SCRATCH_BF16": True}]),
    # "triton_chunked_split_tf32" (session 12): its launch shape again (tf32 dots change the register budget) and
    # the bf16 scratch on top of tf32 (session 12's study of the split form: 9.17 ms tf32, 9.58 bf16 scratch apart)
    "kda_prefill_split_tf32": (kda_chunked, [{"SPLIT_WARPS": 4, "SPLIT_UNROLL": True}, {"SCRATCH_BF16": True},
                                             {"SPLIT_WARPS": 8}, {"SPLIT_UNROLL": False}, {"SPLIT_WARPS": 2}]),
    "attention_decode": (attention_splitk, [
        {"BLOCK_ROWS": 32, "SPLITS_PER_SM": 1, "SPLIT_STAGES": 3},
        {"BLOCK_ROWS": 16, "SPLITS_PER_SM": 1, "SPLIT_STAGES": 4},
        {"BLOCK_ROWS": 64, "SPLITS_PER_SM": 1, "SPLIT_STAGES": 2},
        {"BLOCK_ROWS": 32, "SPLITS_PER_SM": 2, "SPLIT_STAGES": 3},
    ]),
    # the decode step's small Q4_K GEMVs (session 5: linear took 45% of the bf16 graph step at 16-23% of the read
    # ceiling): rows per program, warps, and how many programs per SM before K is split
    "linear_gemv": (linear, [_gemv(64, 4, 2), _gemv(32, 4, 2), _gemv(64, 4, 4), _gemv(32, 4, 4), _gemv(64, 8, 2),
                             _gemv(128, 8, 2), _gemv(64, 4, 8)]),
    # the Q6_K lm_head (163840 x 2304, 310 MB a token in the q4_k_m mix): session 4's per-op run timed triton at
    # 344 us (22% of the read ceiling) and cupy_dp4a at 126 us; session 6's tiles (16/32/64 rows, 4/8 warps) found
    # nothing faster than the default, so this study now asks whether the byte loads bind it (_Q6K_VARIANTS)
    "lm_head_q6k": (linear, _Q6K_VARIANTS),
    # a layer-sized Q6_K GEMV (4096 x 2304, ~12% of the read ceiling with byte loads): the same variants
    "linear_q6k_small": (linear, _Q6K_VARIANTS),
    # the routed + shared experts of one decode token (session 5: 28% of the bf16 graph step, ~23% of the read
    # ceiling): rows per program of the gate/up and the down GEMV, warps
    "moe_decode": (moe_experts, [{"UP_ROWS": 16, "DOWN_ROWS": 32, "GEMV_WARPS": 4},
                                 {"UP_ROWS": 8, "DOWN_ROWS": 16, "GEMV_WARPS": 4},
                                 {"UP_ROWS": 32, "DOWN_ROWS": 64, "GEMV_WARPS": 4},
                                 {"UP_ROWS": 16, "DOWN_ROWS": 32, "GEMV_WARPS": 8},
                                 {"UP_ROWS": 8, "DOWN_ROWS": 32, "GEMV_WARPS": 4},
                                 {"UP_ROWS": 32, "DOWN_ROWS": 32, "GEMV_WARPS": 8}]),
    # the router's float32 logits GEMV (256 x 2304): 64 programs at 4 experts each by default
    "router_gemv": (moe_router, [{"ROUTER_GEMV_BE": 4, "ROUTER_GEMV_BD": 512, "ROUTER_GEMV_WARPS": 4},
                                 {"ROUTER_GEMV_BE": 2, "ROUTER_GEMV_BD": 512, "ROUTER_GEMV_WARPS": 4},
                                 {"ROUTER_GEMV_BE": 1, "ROUTER_GEMV_BD": 1024, "ROUTER_GEMV_WARPS": 4},
                                 {"ROUTER_GEMV_BE": 2, "ROUTER_GEMV_BD": 256, "ROUTER_GEMV_WARPS": 2}]),
    # "triton_prefetch" (weight loads FETCH_DEPTH chunks ahead; the MoE's gate and up in one loop): the first row of
    # each is depth 1 (the pair loop alone for the MoE; "triton_lastblock"'s stream for linear); the same bits at
    # every depth, so "nmse vs default" must read 0. The MoE's up kernel takes 96 registers at depth 1, ~127 at 2-3
    # (sm_90): 4 programs of 4 warps an SM instead of 5, so its row tile is varied with the depth
    "moe_decode_prefetch": (moe_experts, [{"FETCH_DEPTH": 1, "UP_ROWS": 16}, {"FETCH_DEPTH": 2, "UP_ROWS": 16},
                                          {"FETCH_DEPTH": 3, "UP_ROWS": 16}, {"FETCH_DEPTH": 2, "UP_ROWS": 8},
                                          {"FETCH_DEPTH": 3, "UP_ROWS": 8}, {"FETCH_DEPTH": 2, "UP_ROWS": 32}]),
    "lm_head_prefetch": (linear, [{"FETCH_DEPTH": 1}, {"FETCH_DEPTH": 2}, {"FETCH_DEPTH": 3}]),
    "linear_gemv_prefetch": (linear, [{"FETCH_DEPTH": 1}, {"FETCH_DEPTH": 2}, {"FETCH_DEPTH": 3}]),
    # "triton_flat" (Q4_K through the flat GEMV form: no layout change in the loop, rows cost registers): its tiles.
    # Compare with linear_gemv_prefetch's / moe_decode_prefetch's first rows (the same workloads, the kernels now)
    "linear_gemv_flat": (linear, [{"GEMV_FLAT_CONFIG": (16, 8, 4), "GEMV_PROGRAMS_PER_SM": 2},
                                  {"GEMV_FLAT_CONFIG": (32, 8, 8), "GEMV_PROGRAMS_PER_SM": 2},
                                  {"GEMV_FLAT_CONFIG": (16, 8, 4), "GEMV_PROGRAMS_PER_SM": 4},
                                  {"GEMV_FLAT_CONFIG": (8, 8, 2), "GEMV_PROGRAMS_PER_SM": 4},
                                  {"GEMV_FLAT_CONFIG": (64, 8, 8), "GEMV_PROGRAMS_PER_SM": 2}]),
    "moe_decode_flat": (moe_experts, [{"FLAT_UP_ROWS": up, "FLAT_DOWN_ROWS": down}
                                      for up, down in ((8, 16), (16, 16), (4, 8), (8, 32))]),
    "attention_prefill": (attention_prefill, [
        {"FLASH_BM": 128, "FLASH_BN": 64, "FLASH_WARPS": 8, "FLASH_STAGES": 3},
        {"FLASH_BM": 64, "FLASH_BN": 64, "FLASH_WARPS": 8, "FLASH_STAGES": 2},  # session 10's default
        {"FLASH_STAGES": 4},
        {"FLASH_WARPS": 4},
        {"FLASH_BN": 128, "FLASH_STAGES": 2},
        {"FLASH_BM": 256, "FLASH_STAGES": 2},
    ]),
    # "triton_sdpa"'s prefill on each of torch's fused attention backends alone (a backend that cannot take the shape
    # is a FAILED row), at a 16384-token chunk
    "attention_prefill_sdpa": (attention_sdpa, [{"SDPA_BACKENDS": ("CUDNN_ATTENTION", "FLASH_ATTENTION",
                                                                    "EFFICIENT_ATTENTION")},
                                                {"SDPA_BACKENDS": ("CUDNN_ATTENTION",)},
                                                {"SDPA_BACKENDS": ("EFFICIENT_ATTENTION",)},
                                                {"SDPA_BACKENDS": ("FLASH_ATTENTION",)}]),
    # prefill's router logits GEMM at a 16384-token chunk: (tokens, experts, D slice, warps) per program, tf32x3
    "router_prefill": (moe_router, [{"ROUTER_GEMM_BT": 128, "ROUTER_GEMM_BE": 128, "ROUTER_GEMM_BD": 32,
                                     "ROUTER_GEMM_WARPS": 8, "ROUTER_GEMM_PRECISION": "tf32x3"},
                                    {"ROUTER_GEMM_BT": 64, "ROUTER_GEMM_BE": 64, "ROUTER_GEMM_BD": 32,
                                     "ROUTER_GEMM_WARPS": 4, "ROUTER_GEMM_PRECISION": "ieee"},  # session 10's
                                    {"ROUTER_GEMM_BD": 64}, {"ROUTER_GEMM_BD": 16},
                                    {"ROUTER_GEMM_BT": 64, "ROUTER_GEMM_WARPS": 4},
                                    {"ROUTER_GEMM_BE": 256, "ROUTER_GEMM_BT": 64}]),
    # "triton_dqmm"'s whole-weight decode to bf16 (session 10's 16384-token chunk: ~48 ms over 360 launches, by
    # estimate under a tenth of the read ceiling): rows per program, warps; one 48B expert stack (Q4_K)
    "dequant_bf16": (dequantize, [{"DEQUANT_ROWS": r, "DEQUANT_WARPS": w}
                                  for r, w in ((16, 2), (16, 4), (8, 2), (32, 2), (8, 1), (4, 1))]),
}


#: one decode token's Q4_K GEMV shapes [OUT, IN]: q/k/v-like, o_proj and three experts'
_TOKEN_Q4K = ([(4096, 2304), (2304, 4096), (1024, 2304), (1024, 2304), (2304, 1024)], linear.Q4_K, 16)
#: the Q6_K lm_head, two copies in rotation (2 x 310 MB)
_LM_HEAD_Q6K = ([(163840, 2304)], linear.Q6_K, 2)
#: the linear studies' workloads: ([OUT, IN] shapes, type, sets in rotation), see `_linear_workload`; a study named
#: *_prefetch or *_flat times that implementation on its namesake's workload
LINEAR_WORKLOADS: dict[str, tuple[list[tuple[int, int]], Any, int]] = {
    "linear_gemv": _TOKEN_Q4K,
    "linear_gemv_prefetch": _TOKEN_Q4K,
    "linear_gemv_flat": _TOKEN_Q4K,
    "lm_head_q6k": _LM_HEAD_Q6K,
    "lm_head_prefetch": _LM_HEAD_Q6K,
    "linear_q6k_small": ([(4096, 2304)], linear.Q6_K, 20),  # 7.7 MB a set: 20 sets are ~3x the L2
}


def _workload(study: str) -> tuple[Callable[..., Any], list[tuple], int, bool]:
    if study == "kda_decode":
        sets, nbytes = kda_args(1)
        return kda.kda, sets, nbytes, True
    if study in ("kda_prefill", "kda_prefill_split", "kda_prefill_split_tf32"):
        sets, nbytes = kda_args(32768, n_sets=2)
        fn = {"kda_prefill": kda_chunked.kda_chunked, "kda_prefill_split": kda_chunked.kda_chunked_split,
              "kda_prefill_split_tf32": kda_chunked.kda_chunked_split_tf32}[study]
        return fn, sets, nbytes, False
    if study in LINEAR_WORKLOADS:
        impl = {"_prefetch": linear.linear_prefetch, "_flat": linear.linear_flat}.get(study[study.rfind("_"):],
                                                                                      linear.linear)
        return _linear_workload(*LINEAR_WORKLOADS[study], impl=impl)
    if study == "moe_decode":
        return _moe_workload()
    if study == "moe_decode_prefetch":
        return _moe_workload(impl=moe_experts.moe_experts_prefetch)
    if study == "moe_decode_flat":
        return _moe_workload(impl=moe_experts.moe_experts_flat)
    if study == "router_gemv":
        sets, nbytes = router_args(1)
        return (lambda *a: moe_router.moe_router(*a)[0]), sets, nbytes, True
    if study == "attention_prefill_sdpa":
        sets, nbytes = attention_args(16384, 0, n_sets=1)
        return attention_sdpa.attention_sdpa, sets, nbytes, False
    if study == "router_prefill":
        sets, nbytes = router_args(16384, n_sets=2)
        return (lambda *a: moe_router.moe_router(*a)[0]), sets, nbytes, False
    if study == "dequant_bf16":
        sets, nbytes = expert_stack_args()
        return dequantize.dequantize_bf16, sets, nbytes, True
    if study == "attention_decode":
        sets, nbytes = attention_args(1, 131072)
        return attention_splitk.attention_splitk, sets, nbytes, True
    sets, nbytes = attention_args(32768, 0, n_sets=1)
    return attention_splitk.attention_splitk, sets, nbytes, False


def _linear_workload(shapes: list[tuple[int, int]], qtype: Any, copies: int, device: str = "cuda",
                     impl: Callable[..., Any] | None = None) -> tuple[Callable[..., Any], list[tuple], int, bool]:
    """GEMVs (T=1) of the 48B's [OUT, IN] shapes in one call: random real blocks of `qtype`, `copies` sets in
    rotation so that well beyond the 50 MB L2 is touched between reuses (linear_gemv: one token's Q4_K q/k/v-like,
    o_proj and three experts' shapes, 16 x 14 MB; lm_head_q6k: 2 x 310 MB; linear_q6k_small: 20 x 7.7 MB).
    `impl`: the implementation timed (default linear.linear, "triton")."""
    import numpy as np

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    rng = np.random.default_rng(0)
    sets = []
    for _ in range(copies):
        ws = [QWeight(torch.from_numpy(random_blocks(rng, shape, qtype, 0.02)).to(device), qtype, shape)
              for shape in shapes]
        xs = [torch.randn(1, shape[1], device=device) for shape in shapes]
        sets.append((ws, xs))
    nbytes = sum(w.nbytes + 4 * (w.shape[0] + w.shape[1]) for w in sets[0][0])  # weights + x in + y out

    impl = impl or linear.linear

    def fn(ws, xs):
        return torch.cat([impl(x, w).flatten() for x, w in zip(xs, ws)])

    return fn, sets, nbytes, True


def _moe_workload(preset: str = "kimi-linear-48b-a3b", device: str = "cuda", qtype: Any = linear.Q4_K,
                  impl: Callable[..., Any] | None = None) -> tuple[Callable[..., Any], list[tuple], int, bool]:
    """One decode token through the 48B's experts: 256 routed (Q4_K, [1024, 2304] gate/up, [2304, 1024] down; ~1 GB,
    beyond the L2) plus the shared one; every set routes to 8 other experts. Bytes: what one token reads.
    `impl`: the implementation timed (default moe_experts.moe_experts, "triton")."""
    import numpy as np

    from sparkops.config import load_preset
    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    cfg = load_preset(preset)
    d, f, e, k = cfg.hidden_size, cfg.moe_intermediate_size, cfg.n_experts, cfg.n_experts_per_token
    fs = f * cfg.n_shared_experts
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)

    def qw(shape: tuple[int, ...], std: float) -> QWeight:
        return QWeight(torch.from_numpy(random_blocks(rng, shape, qtype, std)).to(device), qtype, shape)

    w = (qw((e, f, d), d ** -0.5), qw((e, f, d), d ** -0.5), qw((e, d, f), f ** -0.5), qw((fs, d), d ** -0.5),
         qw((fs, d), d ** -0.5), qw((d, fs), fs ** -0.5))
    sets = [(torch.randn(1, d, generator=gen).to(device), (torch.rand(1, k, generator=gen) + 0.1).to(device),
             torch.randperm(e, generator=gen)[:k].reshape(1, k).to(device), *w) for _ in range(16)]
    nbytes = k * sum(x.nbytes for x in w[:3]) // e + sum(x.nbytes for x in w[3:]) + 8 * d
    return impl or moe_experts.moe_experts, sets, nbytes, True


def _copy(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _output(fn: Callable[..., Any], args: tuple) -> torch.Tensor:
    """fn's output on a copy of `args` (a state argument changes in place)."""
    return fn(*_copy(args)).float()


def _label(variant: dict[str, Any], defaults: dict[str, Any]) -> str:
    """A variant as printed: a table constant (linear's GEMV_CONFIG) shows only the entries that differ from
    `defaults`, the module's values before the study set any (not the live ones: the variant is set by then)."""
    def changed(k: str, table: dict) -> dict:
        base = defaults.get(k, {})
        return {q: c for q, c in table.items() if c != base.get(q)} or {"default": "as in the module"}

    return str({k: (changed(k, v) if isinstance(v, dict) else v) for k, v in variant.items()})


def run(study: str) -> list[str]:
    module, variants = STUDIES[study]
    fn, sets, nbytes, graph = _workload(study)
    saved = {k: getattr(module, k) for v in variants for k in v}
    # every variant's check starts from these inputs: the timing calls advance a state argument in place (KDA's),
    # so sets[0] after the first variant's timing is not the input the default saw (session 11's kda studies
    # read "nmse vs default 3.9e-05" for every variant that way, whatever it changed)
    probe = _copy(sets[0])
    rows, baseline = [], None
    try:
        for variant in variants:
            for k, v in {**saved, **variant}.items():  # the defaults, then this variant's changes: nothing leaks on
                setattr(module, k, v)
            try:
                out = _output(fn, probe)
                baseline = out if baseline is None else baseline
                err = float(((out - baseline) ** 2).sum() / (baseline ** 2).sum())
                t = time_calls(fn, sets, nbytes, graph=graph, replays=10 if graph else 3)
                rows.append(f"{study:<18} {_label(variant, saved):<72} {t}  nmse vs default {err:.1e}")
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile or run is a row, not the end
                rows.append(f"{study:<18} {_label(variant, saved):<72} FAILED: {type(exc).__name__}: {exc}"[:400])
            print(rows[-1], flush=True)
    finally:
        for k, v in saved.items():
            setattr(module, k, v)
    return rows


def main(argv: list[str]) -> None:
    unknown = [a for a in argv if a not in STUDIES]
    if unknown:
        raise SystemExit(f"sparkops_triton._tune: no study {', '.join(unknown)}; the studies are {', '.join(STUDIES)}")
    if not torch.cuda.is_available():
        raise SystemExit("sparkops_triton._tune needs a CUDA device")
    rows = [row for study in (argv or list(STUDIES)) for row in run(study)]
    print("\n".join(["", "summary:"] + rows))


if __name__ == "__main__":
    main(sys.argv[1:])
