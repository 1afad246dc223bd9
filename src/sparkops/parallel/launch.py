"""Starting the N ranks of a sharded model and driving them from one process.

    spec = PoolSpec(world=2, source=ModelSource("synth", "k3-nano", mix="f32"))
    with ShardedPool(spec) as pool:                  # 2 processes, gloo, one shard each
        logits = pool.prefill([1, 2, 3])             # [3, V]: rank 0's logits
        logits = pool.decode(4)                      # [1, V]

The pool looks like an Engine to its caller (reset / prefill / decode / length / config), so the
model gate's `run_depths` and the scoreboard's depth helpers can drive it; each call is broadcast
to every rank, which all run it in lockstep (SPMD), and rank 0's answer comes back. Heavier work
(a whole gate run, a timed decode loop) is sent as one command so no per-token round trip to this
process is ever timed (`call`).

Processes come from torch.multiprocessing's "forkserver" start method (spawn where there is none;
answers travel as NumPy arrays, so no tensor is shared between processes): torch and sparkops
are imported once in the server, each rank is a fork of it (cheap on a small CI box), and no rank
inherits an initialised CUDA context or thread pool. Ranks meet through a file store in a fresh
temporary directory (no TCP port to race for). CPU: backend gloo; CUDA: NCCL, rank r on GPU r.
Every process started here gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 (no NVLink multicast: the machines this runs on must not use it).

A rank that raises reports its traceback; the pool then stops every rank (a rank left waiting in a
collective would otherwise hang until the process-group timeout) and raises ParallelError.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

from ..errors import BadInput, SparkopsError
from .graph import Placement

#: set in this process and in every rank before any CUDA / NCCL initialisation
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

SOURCES = ("synth", "ondevice", "gguf", "preset")

#: imported once in the fork server, so no rank pays for them (a missing one is skipped). None of them
#: touches CUDA at import: the server must never initialise it, or no forked rank could use it.
PRELOAD = ["sparkops.parallel.worker", "sparkops.parallel.runbench", "sparkops.gate.model_gate", "sparkops.gate.poison",
           "sparkops.synth", "sparkops_numpy", "sparkops_torch"]
#: on a machine without CUDA also what torch.use_deterministic_algorithms imports (~1.5 s per rank on a
#: small CPU box; the gate's poisoning calls it). Not preloaded where CUDA exists: it is a large import
#: tree, and a rank on a GPU box pays its 1.5 s once.
PRELOAD_CPU_ONLY = ["torch._inductor.config"]


class ParallelError(SparkopsError):
    """A rank failed (its traceback is in the message) or did not answer in time."""


def apply_safe_env() -> None:
    os.environ.update(SAFE_ENV)


@dataclass(frozen=True)
class ModelSource:
    """Where each rank's shard comes from.

    synth     `synth_weights(name, mix, seed)` built whole on the CPU in every rank, then sliced: the
              same model a single process builds, so logits can be compared (the CPU tests);
    ondevice  the rank's shard drawn directly on its device (ondevice_synth; no file, no whole model
              anywhere: k3-2.8t on 8 GPUs);
    gguf      a GGUF file at `name`, memory-mapped, sliced;
    preset    `engine.load_model(name)` (k3-nano's cached synthesized file).
    """

    kind: str
    name: str
    mix: str = "f32"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SOURCES:
            raise BadInput(f"model source '{self.kind}': use one of {', '.join(SOURCES)}")
        if self.kind == "synth" and too_large_to_synth_whole(self.name):
            raise BadInput(f"{self.name} is too large to synthesize whole in every rank's memory; draw each rank's "
                           f"shard on its device instead (--source ondevice)")


#: above this many parameters a preset is never built whole in a rank (source "synth"): use "ondevice"
SYNTH_WHOLE_MAX_PARAMS = 5_000_000_000


def too_large_to_synth_whole(preset: str) -> bool:
    from ..config import load_preset, preset_names

    return preset in preset_names() and load_preset(preset).param_counts()["total"] > SYNTH_WHOLE_MAX_PARAMS


@dataclass(frozen=True)
class PoolSpec:
    world: int
    source: ModelSource
    device: str = "cpu"
    backend: str | None = None  # default: gloo on cpu, nccl on cuda
    registry: str | None = None
    dtype: str = "float32"
    cache_dtype: str | None = None
    max_context: int = 4096
    placement: Placement = field(default_factory=Placement)
    reduce_dtype: str | None = "float32"
    threads: int = 1  # torch threads per rank on the CPU
    prefill_chunk: int | None = None
    timeout_s: float = 600.0  # process-group timeout: a rank stuck in a collective this long fails
    init_file: str = ""  # filled in by the pool

    def __post_init__(self) -> None:
        if self.world < 1:
            raise BadInput(f"--world {self.world}: give at least 1 rank")
        if self.device not in ("cpu", "cuda"):
            raise BadInput(f"device '{self.device}': use cpu or cuda")
        if self.device == "cuda" and self.backend == "gloo" or self.device == "cpu" and self.backend == "nccl":
            raise BadInput(f"backend {self.backend} does not run on {self.device}: gloo is for cpu, nccl for cuda")

    @property
    def resolved_backend(self) -> str:
        return self.backend or ("nccl" if self.device == "cuda" else "gloo")


def _context() -> Any:
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD + ([] if torch.cuda.is_available() else PRELOAD_CPU_ONLY))
        return ctx
    return mp.get_context("spawn")


class ShardedPool:
    """N rank processes holding one sharded model; an Engine-like driver for them (module doc)."""

    def __init__(self, spec: PoolSpec, *, start_timeout: float = 900.0):
        if spec.device == "cuda":
            if not torch.cuda.is_available():
                raise BadInput("--device cuda was asked for, but this machine has no CUDA device; use --device cpu")
            if torch.cuda.device_count() < spec.world:
                raise BadInput(f"{spec.world} ranks need {spec.world} GPUs, this machine has "
                               f"{torch.cuda.device_count()}; lower --world")
        apply_safe_env()
        self._dir = tempfile.mkdtemp(prefix="sparkops-world-")
        self.spec = replace(spec, init_file=os.path.join(self._dir, "rendezvous"))
        self.world = spec.world
        ctx = _context()
        self._results = ctx.Queue()
        self._commands = [ctx.Queue() for _ in range(self.world)]
        from .worker import main

        self._procs = [ctx.Process(target=main, args=(r, self.spec, self._commands[r], self._results), daemon=True,
                                   name=f"sparkops-rank{r}") for r in range(self.world)]
        self._closed = False
        for p in self._procs:
            p.start()
        ready = self._gather(start_timeout, "start")
        self.info = ready[0]
        self.config = ready[0]["config"]  # the whole model's config
        self.length = 0

    # -- commands ------------------------------------------------------------------------------------
    def call(self, cmd: str, *args: Any, timeout: float | None = None) -> list[Any]:
        """Run `cmd` on every rank (worker.HANDLERS); the answers, by rank."""
        if self._closed:
            raise ParallelError("the pool is closed (a rank failed earlier, or close() was called); start a new one")
        for q in self._commands:
            q.put((cmd, args))
        return self._gather(timeout, cmd)

    def _gather(self, timeout: float | None, what: str) -> list[Any]:
        got: dict[int, Any] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(got) < self.world:
            try:
                rank, status, payload = self._results.get(timeout=0.5)
            except queue.Empty:
                dead = [p for p in self._procs if p.exitcode is not None]
                if dead:
                    self.close()
                    raise ParallelError(f"{what}: rank process {dead[0].name} exited with code {dead[0].exitcode} "
                                        f"without answering (killed for memory? see its stderr)") from None
                if deadline is not None and time.monotonic() > deadline:
                    self.close()
                    raise ParallelError(f"{what}: no answer from ranks {sorted(set(range(self.world)) - set(got))} "
                                        f"within {timeout:g} s; the pool was stopped") from None
                continue
            if status == "error":
                self.close()
                raise ParallelError(f"{what}: rank {rank} failed:\n{payload}")
            got[rank] = payload
        return [got[r] for r in range(self.world)]

    # -- the Engine-like face ---------------------------------------------------------------------
    def reset(self) -> None:
        self.call("reset")
        self.length = 0

    def prefill(self, tokens: Any, *, last_only: bool = False, chunk_size: int | None = None) -> torch.Tensor:
        ids = [int(t) for t in torch.as_tensor(tokens).reshape(-1).tolist()]
        out = self.call("prefill", ids, last_only, chunk_size)[0]
        self.length += len(ids)
        return torch.from_numpy(out)

    def decode(self, token: Any) -> torch.Tensor:
        ids = [int(t) for t in torch.as_tensor(token).reshape(-1).tolist()]
        if len(ids) != 1:
            raise BadInput(f"decode takes exactly one token, got {len(ids)}")
        out = self.call("decode", ids[0])[0]
        self.length += 1
        return torch.from_numpy(out)

    def logits_all_ranks(self, tokens: list[int]) -> list[np.ndarray]:
        """Prefill on a fresh sequence and return every rank's logits (they must be identical)."""
        self.reset()
        out = self.call("prefill_all", [int(t) for t in tokens])
        self.reset()
        return out

    # -- lifetime ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for q in self._commands:
            try:
                q.put(("stop", ()))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 10
        for p in self._procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self._procs:  # only our own rank processes, by their handles
            if p.exitcode is None:
                p.terminate()
                p.join(timeout=5)
            if p.exitcode is None:
                p.kill()
                p.join(timeout=5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "ShardedPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - a safety net; callers use `with` or close()
        try:
            self.close()
        except Exception:
            pass
