"""What runs inside each rank: set up the process group, build the shard and the engine, then serve
commands from the pool in order (every rank gets the same commands: SPMD).

Each command is a function of (rank state, *args) in HANDLERS; its return value travels back to
the pool (NumPy arrays and plain Python values only). Rank 0 answers with the logits; the other
ranks answer None (or their own timings, where each rank's differ).
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch

from ..errors import BadInput
from .launch import SAFE_ENV, PoolSpec

_DTYPES = {"float32": torch.float32, "f32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "f16": torch.float16}


def dtype_of(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    try:
        return _DTYPES[name.lower()]
    except KeyError:
        raise BadInput(f"dtype '{name}': use one of {', '.join(_DTYPES)}") from None


@dataclass
class Rank:
    rank: int
    spec: PoolSpec
    engine: Any  # ShardedEngine
    build_s: float


def setup(rank: int, spec: PoolSpec) -> Rank:
    """Join the process group, build this rank's shard and its ShardedEngine."""
    import torch.distributed as dist

    from ..engine.loading import make_ops
    from .collectives import Collectives
    from .engine import ShardedEngine

    t0 = time.perf_counter()
    if spec.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        torch.set_num_threads(max(1, spec.threads))
        device = torch.device("cpu")
    if spec.world > 1:
        kwargs: dict[str, Any] = {}
        if spec.device == "cuda":
            kwargs["device_id"] = device
        dist.init_process_group(spec.resolved_backend, init_method=f"file://{spec.init_file}", rank=rank,
                                world_size=spec.world, timeout=timedelta(seconds=spec.timeout_s), **kwargs)
    shard, plan = build_shard(rank, spec, device)
    ops = make_ops(spec.device, spec.registry)
    comm = Collectives(spec.world, rank, device=device, reduce_dtype=dtype_of(spec.reduce_dtype))
    engine = ShardedEngine(shard, ops, plan, comm, max_context=spec.max_context, dtype=dtype_of(spec.dtype),
                           cache_dtype=dtype_of(spec.cache_dtype), placement=spec.placement,
                           prefill_chunk=spec.prefill_chunk)
    return Rank(rank, spec, engine, time.perf_counter() - t0)


def build_shard(rank: int, spec: PoolSpec, device: torch.device):
    from .sharding import ShardPlan, column_blocks_of_mix, column_blocks_of_weights, shard_model

    src = spec.source
    if src.kind == "ondevice":
        from ..config import load_preset
        from .ondevice_synth import synth_shard

        config = load_preset(src.name)
        plan = ShardPlan.build(config, spec.world, rank, column_blocks_of_mix(config, src.mix))
        return synth_shard(plan, src.mix, src.seed, device), plan
    if src.kind == "synth":
        from ..synth import synth_weights

        whole = synth_weights(src.name, src.mix, src.seed)
    elif src.kind == "gguf":
        from ..gguf.reader import load_gguf

        whole = load_gguf(src.name)
    else:
        from ..engine import load_model

        whole = load_model(src.name)
    plan = ShardPlan.build(whole.config, spec.world, rank, column_blocks_of_weights(whole))
    return shard_model(whole, plan), plan


# -- commands -----------------------------------------------------------------------------------------
def _first(r: Rank, value: Any) -> Any:
    return value if r.rank == 0 else None


def _prefill(r: Rank, ids: list[int], last_only: bool, chunk: int | None) -> Any:
    return _first(r, r.engine.prefill(ids, last_only=last_only, chunk_size=chunk).cpu().numpy())


def _prefill_all(r: Rank, ids: list[int]) -> Any:
    return r.engine.prefill(ids).cpu().numpy()


def _decode(r: Rank, token: int) -> Any:
    return _first(r, r.engine.decode(token).cpu().numpy())


def _reset(r: Rank) -> None:
    r.engine.reset()


def _run_depths(r: Rank, tokens: list[int], depths: list[int], decode_steps: int, poison: bool = True,
                tape: dict[int, list] | None = None, tie: float = 0.0) -> Any:
    """The model gate's run (a fresh sequence per depth: prefill d tokens, decode a few) inside the
    ranks, under poisoning like any gate candidate; with `tape` (the single process's expert choices per
    depth and MoE layer), routing pinned to it. Rank 0 returns {"logits": {depth: [P, V]}, "routing": report}."""
    import contextlib

    from ..gate.model_gate import run_depths
    from ..gate.poison import poisoned
    from ..gate.routing import replaying

    router = r.engine.ops.moe_router
    pins = replaying(r.engine.ops, len(next(iter(tape.values()))), tape, tie) if tape else None
    try:
        with poisoned() if poison else contextlib.nullcontext():
            out = run_depths(r.engine, tokens, tuple(depths), decode_steps, pinning=pins)
    finally:
        r.engine.ops.moe_router = router  # the pool's later calls run unpinned
    report = pins.pin.finish().as_json() if pins is not None else None
    return {"logits": {d: v.numpy() for d, v in out.items()}, "routing": report} if r.rank == 0 else None


def _configure(r: Rank, placement: Any) -> None:
    """Change how the graph places reduces / dispatches (the weights stay): lets one pool run variants."""
    r.engine.placement = placement


def _describe(r: Rank) -> dict[str, Any]:
    e = r.engine
    return {"rank": r.rank, "plan": e.plan.as_dict(), "config": e.global_config, "local_config": e.config,
            "weight_bytes": e.model.nbytes, "state_bytes": e.state.nbytes, "build_s": r.build_s,
            "device": str(torch.device("cuda", torch.cuda.current_device())) if e.device.type == "cuda" else "cpu",
            "pid": os.getpid(),
            "cuda_memory": torch.cuda.memory_allocated(e.device) if e.device.type == "cuda" else 0}


def _profile(r: Rank, depth: int, steps: int, rounds: int, seed: int, chunk: int | None) -> dict[str, Any]:
    """Decode `steps` tokens at context `depth`, `rounds` times; this rank's wall and collective seconds.

    The sequence is filled and its depth proven (bench.depth); runbench.time_decode then restores the
    same snapshot before each round and lines the ranks up at a barrier.
    """
    from ..bench import depth as dep
    from .runbench import time_decode

    e = r.engine
    e.reset()
    prompt = dep.random_tokens(depth + steps, e.config.vocab_size, seed)
    dep.fill(e, prompt[:depth], chunk)
    dep.verify_depth(e, depth, fresh=True, need=steps)
    out = time_decode(e, prompt[depth:depth + steps].to(e.device), rounds)
    return {"rank": r.rank, **out}


def _bench(r: Rank, request: dict[str, Any]) -> dict[str, Any]:
    from .runbench import bench_on_rank

    return bench_on_rank(r, request)


def _consistency(r: Rank, n: int, k: int, seed: int) -> dict[str, Any]:
    from .runbench import consistency_on_rank

    return consistency_on_rank(r, n, k, seed)


HANDLERS: dict[str, Callable[..., Any]] = {
    "prefill": _prefill, "prefill_all": _prefill_all, "decode": _decode, "reset": _reset,
    "run_depths": _run_depths, "describe": _describe, "configure": _configure, "profile": _profile, "bench": _bench,
    "consistency": _consistency,
}


def main(rank: int, spec: PoolSpec, commands: Any, results: Any) -> None:
    """The rank process: set up, say ready, serve commands until 'stop'."""
    os.environ.update(SAFE_ENV)
    try:
        r = setup(rank, spec)
        results.put((rank, "ready", _describe(r)))
    except BaseException:  # noqa: BLE001 - the pool reports it with the traceback
        results.put((rank, "error", traceback.format_exc()))
        return
    try:
        while True:
            cmd, args = commands.get()
            if cmd == "stop":
                break
            try:
                results.put((rank, "ok", HANDLERS[cmd](r, *args)))
            except BaseException:  # noqa: BLE001
                results.put((rank, "error", traceback.format_exc()))
    finally:
        _shutdown(spec)


def _shutdown(spec: PoolSpec) -> None:
    if spec.world > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the process is exiting anyway
                pass
