"""What the CuPy backend's GPU tests share: replaying a captured chain of PDL launches against the same work launched
plainly (tests/backends/test_cupy_pdl.py, test_cupy_add_rmsnorm_router.py), and the MLA attention tests' inputs on
the device (bf16 and fp8 caches), float64 reference, NaN-filled scratch and error measure (test_cupy_attention_fp8.py,
_fp8_qreg.py, _twin.py, _bulk.py, _qreg.py)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

#: the device the GPU tests run on
DEV = torch.device("cuda")
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A float tensor's bits as integers of its size (so -0.0 and +0.0 differ); any other tensor as it is."""
    return t.view(_BITS[t.element_size()]) if t.is_floating_point() else t


def replays_match(capture: Callable[[], Sequence[torch.Tensor]], plain: Callable[[], Sequence[torch.Tensor]],
                  refresh: Callable[[], None], replays: int = 5) -> None:
    """Capture `capture()` (the PDL launches; it returns its output tensors) in a CUDA graph, then before each replay
    `refresh()` the inputs, compute `plain()` (the same work launched plainly: the expected outputs) and poison the
    captured outputs (NaN, or -1 for integers: an id no expert has). Every replay must give the plain bits: a kernel
    that read its input before the kernel before it finished reads the poison or the replay before's values."""
    refresh()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        capture()  # compiled and warmed (counters made) outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            outs = capture()
        for replay in range(replays):
            refresh()
            wants = plain()
            for o in outs:
                o.fill_(float("nan") if o.is_floating_point() else -1)
            graph.replay()
            torch.cuda.synchronize()
            for i, (o, want) in enumerate(zip(outs, wants)):
                assert torch.isfinite(want.float()).all(), f"replay {replay}: plain output {i} is not finite"
                assert torch.equal(_bits(o), _bits(want)), f"replay {replay}: output {i} differs from the plain run"
    finally:
        graph.reset()


def mla_inputs(seed: int, lmax: int, pos: int, n=32, dn=128, r=64, lkv=512, dv=128) -> dict:
    """One token at pos over a bf16 cache whose rows pos.. are NaN (the new row must be written before it is read,
    the later ones never read: a row past the slice in a tile's P.C would make the output NaN)."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(lmax, lkv + r, generator=g).to(torch.bfloat16)
    cache[pos:] = float("nan")
    return dict(q=torch.randn(1, n, dn + r, generator=g).to(torch.bfloat16),
                latent=torch.randn(1, lkv + r, generator=g).to(torch.bfloat16), cache=cache,
                pos=torch.tensor([pos]), w_uk=torch.randn(n, dn, lkv, generator=g) * lkv ** -0.5,
                w_uv=torch.randn(n, dv, lkv, generator=g) * lkv ** -0.5, scale=(dn + r) ** -0.5)


def mla_fp8_inputs(seed: int, lmax: int, pos: int, t=1, n=32, dn=128, r=64, lkv=512, dv=128,
                   q_dtype=torch.bfloat16) -> dict:
    """The engine's fp8 rows (kvcache.to_cache) for the cache's history and the new latent; rows pos.. of the cache
    hold the NaN code (the new ones must be written before they are read, the later ones never read)."""
    from sparkops.kvcache import FP8, to_cache

    g = torch.Generator().manual_seed(seed)
    cache = to_cache(torch.randn(lmax, lkv + r, generator=g), FP8)
    cache.view(torch.uint8)[pos:] = FP8_NAN_CODE
    return dict(q=torch.randn(t, n, dn + r, generator=g).to(q_dtype),
                latent=to_cache(torch.randn(t, lkv + r, generator=g), FP8),
                cache=cache, pos=torch.tensor([pos]), w_uk=torch.randn(n, dn, lkv, generator=g) * lkv ** -0.5,
                w_uv=torch.randn(n, dv, lkv, generator=g) * lkv ** -0.5, scale=(dn + r) ** -0.5)


#: float8_e4m3fn NaN (0xff too)
FP8_NAN_CODE = 0x7F


def mla_reference(q, latent, cache, pos, w_uk, w_uv, scale) -> torch.Tensor:
    """MLA in float64 on the CPU over the cache's values as torch decodes them (a bf16 or fp8 cache, exactly): the
    new rows written, each of the T queries attending rows 0 .. pos + its index (the rows past them are never looked
    at, so NaN there is never read)."""
    q, w_uk, w_uv = q.double(), w_uk.double(), w_uv.double()
    rows = cache.double()
    t, p0 = q.shape[0], int(pos[0])
    rows[p0:p0 + t] = latent.double()
    dn, lkv = w_uk.shape[1], w_uk.shape[2]
    out = []
    for i in range(t):
        seen = rows[:p0 + i + 1]
        qa = torch.einsum("hd,hdl->hl", q[i, :, :dn], w_uk)
        scores = (qa @ seen[:, :lkv].T + q[i, :, dn:] @ seen[:, lkv:].T) * scale
        obar = torch.softmax(scores, dim=-1) @ seen[:, :lkv]
        out.append(torch.einsum("hvl,hl->hv", w_uv, obar))
    return torch.stack(out)


def tiles_a_slice(pos: int, slices: int = 132) -> int:
    """The 64-row tiles of the fullest slice for one token at pos (attention.cu's slice_rows)."""
    chunk = -(-(pos + 1) // slices)
    return -(-chunk // 64)


#: (lmax, pos) for the tensor-core splits: a fresh cache; a tile's last row and the next tile's first; one tile a slice
#: over 8192 rows; two, three and five tiles a slice (odd counts leave the twin's group 1 a tile short), each slice's
#: last tile partial somewhere; the 48B's longest context (16 tiles a slice)
MLA_CASES = [(200, 0), (200, 63), (200, 64), (9000, 8191), (13000, 12000), (20001, 20000), (40000, 39999),
             (131072, 131071)]


def on_device(args: dict) -> dict:
    """A call's arguments with every tensor copied to the device (the CPU originals stay as they were)."""
    return {k: v.clone().to(DEV) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def nan_scratch_in(monkeypatch, attention_module) -> None:
    """The attention module's intermediate buffers (its `_scratch`) NaN-filled: a value read that no kernel wrote
    shows in the output."""
    monkeypatch.setattr(attention_module, "_scratch",
                        lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype, device=device))


def nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want||^2 / ||want||^2 in float64 on the CPU; got must be finite (a NaN or Inf is an unwritten value or
    a stale row read, never an error of size)."""
    got = got.detach().double().cpu()
    assert torch.isfinite(got).all(), "NaN/Inf in the output (an unwritten value or a stale row read)"
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def mla_forms_same_bits(args: dict, *forms: Callable) -> None:
    """Each of `forms` called on its own copy of `args` on the device: the first's output finite (NaN there is an
    unwritten value or a stale row read), and every other's output and written cache bit for bit the first's (the
    caches as bytes: their rows past pos are NaN, and a bf16 or fp8 NaN is not equal to itself as a value)."""
    outs, caches = [], []
    for fn in forms:
        dev = on_device(args)
        outs.append(fn(**dev))
        caches.append(dev["cache"])
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0].float()).all(), forms[0].__name__
    for fn, out, cache in zip(forms[1:], outs[1:], caches[1:]):
        assert torch.equal(_bits(out), _bits(outs[0])), f"{fn.__name__}: output bits differ from {forms[0].__name__}"
        assert torch.equal(cache.view(torch.uint8), caches[0].view(torch.uint8)), f"{fn.__name__}: cache bits differ"


def mla_replays_match(fn: Callable, want_fn: Callable, dev: dict, positions: Sequence[int]) -> None:
    """One call of the MLA attention `fn` on the device arguments `dev` captured in a CUDA graph, then replayed at each
    position: its output and written cache bitwise those of `want_fn` called eagerly there on the same cache (the
    position is read on the device; the empty slices, and each group's tiles, are decided from it)."""
    cache0 = dev["cache"].clone()
    fn(**dev)  # compiled outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(**dev)
    try:
        for p in positions:
            dev["cache"].copy_(cache0)
            dev["pos"].fill_(p)
            graph.replay()
            torch.cuda.synchronize()
            got, got_cache = out.clone(), _bits(dev["cache"]).clone()
            dev["cache"].copy_(cache0)
            want = want_fn(**dev)
            torch.cuda.synchronize()
            assert torch.isfinite(want.float()).all(), p
            assert torch.equal(got, want), p
            assert torch.equal(got_cache, _bits(dev["cache"])), p
    finally:
        graph.reset()  # a failed assertion must not leave the graph to be freed inside the next test's capture


def mla_side_by_side(forms: dict, record: str, title: str) -> None:
    """The attention forms `forms` (name -> the cache dtype it reads) timed on one token's MLA decode at the 48B's
    shape, each in one CUDA graph (plugins/sparkops_cupy/_workloads.py), at 32768 and 131072 rows in use; printed per
    layer and per token (x the MLA layers) with each form's read bandwidth; the 131072 sums written as perop-RECORD
    (`record`) with SPARKOPS_PEROP_DIR set, a rung's --expect. Asserted: each was captured."""
    from sparkops.bench.perop import write_record
    from sparkops.config import load_preset
    from sparkops.plugins import load_catalog
    from sparkops_cupy._workloads import attention_workload, time_op

    cfg = load_preset("kimi-linear-48b-a3b")
    layers = sum(k != "kda" for k in cfg.layer_kinds)
    cat = load_catalog()
    for context in (32768, 131072):
        times, rows = {}, []
        for name, cache_dtype in forms.items():
            w = attention_workload(cfg, context, cache_dtype=cache_dtype)
            sets, nbytes = w.build(DEV, 11)
            times[name] = t = time_op("attention", cat.get("attention", name).resolve(), sets, nbytes)
            assert t.mode == "graph", (name, t.mode)
            rows.append(f"{name} on {w.label}: {t.seconds * 1e6:7.2f} us ({t.bandwidth / 1e9:.0f} GB/s), "
                        f"{layers * t.seconds * 1e6:.0f} us a token")
            del sets
        print(f"\nattention, one token at {context} rows:\n  " + "\n  ".join(rows))
        if context == 131072:
            write_record(record, f"MLA decode L={context}, {title}", {n: layers * t.seconds for n, t in times.items()},
                         rows=rows)


def split_kernels_compile_clean(tmp_path, kernels: Sequence[str], max_registers: int = 255) -> None:
    """ptxas (nvcc for sm_90) reports each of attention.cu's `kernels` with no stack frame and no spills, and at most
    `max_registers` a thread (255: one block of 256 threads an SM; 128 for 512 threads)."""
    import re

    from tests.cuda_sass import KERNEL_DIR, nvcc_compile, tools

    nvcc, _ = tools()
    code, report, _ = nvcc_compile(KERNEL_DIR / "attention.cu", tmp_path, nvcc)
    assert code == 0, report
    for name in kernels:
        m = re.search(rf"Function properties for {name}\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                      rf"(\d+) bytes spill loads\s*\n.*?Used (\d+) registers", report)
        assert m, (name, report[-2000:])
        stack, stores, loads, regs = map(int, m.groups())
        assert (stack, stores, loads) == (0, 0, 0) and regs <= max_registers, (name, m.groups())


#: the SASS opcodes that touch global memory (loads, stores, atomics, reductions, cp.async's LDGSTS)
GLOBAL_OPS = ("LDG", "STG", "ATOM", "RED", "LD.", "ST.")


def pdl_split_waits_first(tmp_path, pdl_kernel: str, also: Sequence[str] = ()) -> dict:
    """attention.cu's `pdl_kernel` touches no global memory (GLOBAL_OPS, and the opcodes in `also`) before its
    griddepcontrol.wait (ACQBULK) on any path; returns every function's listing for the caller's own checks."""
    from tests.cuda_sass import KERNEL_DIR, listing

    functions = listing(KERNEL_DIR / "attention.cu", tmp_path)
    fn = functions[pdl_kernel]
    assert fn.waits, f"{pdl_kernel} has no griddepcontrol.wait"
    touches = fn.before_wait(lambda ins: ins.opcode.startswith(GLOBAL_OPS + tuple(also)))
    assert touches == [], [f"{i.opcode} at {i.address:#x}" for i in touches]
    return functions


def uses_opcode(functions: dict, name: str, prefix: str) -> bool:
    """Whether function `name` of a listing issues an instruction whose opcode starts with `prefix`."""
    return any(i.opcode.startswith(prefix) for i in functions[name].instructions)

