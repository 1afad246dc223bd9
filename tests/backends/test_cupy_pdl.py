"""sparkops_cupy._pdl and the copy form written for programmatic dependent launch (PDL).

A PDL kernel may start before the kernel before it ends, so what can go wrong is a race: a read of the previous
output before it is written, or a write of a buffer the previous kernel still reads. The GPU tests replay a chain
of dependent GEMVs launched so, with every buffer refilled with NaN between replays, and require the chain's bits to
be the plain copy form's. Whether PDL pays is bench/probes/pdl_chain.py's question (bench/GPU-PROBES.md).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from tests.backends.cupy_support import replays_match

from sparkops.errors import BadInput


# ---- the driver structures, on the CPU -------------------------------------------------------------------

def test_the_launch_structures_have_the_driver_layout():
    from sparkops_cupy._pdl import LaunchAttribute, LaunchAttributeValue, LaunchConfig

    # cuda.h (CUDA 12.0+): the value union pads to 64 bytes; the attribute pads its id to 8 bytes
    assert ctypes.sizeof(LaunchAttributeValue) == 64
    assert ctypes.sizeof(LaunchAttribute) == 72
    assert LaunchAttribute.value.offset == 8
    # 7 unsigned ints (28 bytes), the stream pointer aligned to 8, the attribute pointer, the count
    assert LaunchConfig.sharedMemBytes.offset == 24
    assert LaunchConfig.hStream.offset == 32
    assert LaunchConfig.attrs.offset == 40
    assert LaunchConfig.numAttrs.offset == 48
    assert ctypes.sizeof(LaunchConfig) == 56


def test_the_attribute_asks_for_programmatic_serialization():
    from sparkops_cupy._pdl import programmatic_attribute

    attr = programmatic_attribute()
    raw = bytes(attr)
    assert int.from_bytes(raw[0:4], "little") == 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert int.from_bytes(raw[8:12], "little") == 1  # programmaticStreamSerializationAllowed
    assert raw[12:] == bytes(60)


def test_the_config_carries_grid_block_memory_and_stream():
    from sparkops_cupy._pdl import launch_config, programmatic_attribute

    attr = programmatic_attribute()
    c = launch_config((768,), (128,), 40960, 0xDEADBEEF0, attr)
    assert (c.gridDimX, c.gridDimY, c.gridDimZ) == (768, 1, 1)
    assert (c.blockDimX, c.blockDimY, c.blockDimZ) == (128, 1, 1)
    assert c.sharedMemBytes == 40960 and c.hStream == 0xDEADBEEF0 and c.numAttrs == 1
    assert c.attrs.contents.id == 6


def test_kernel_params_point_at_each_arguments_bytes():
    from sparkops_cupy._pdl import kernel_params

    args = (np.uint64(0x1234_5678_9ABC), np.int64(-5), np.int32(2304), np.float32(0.5))
    params, holders = kernel_params(args)
    assert len(holders) == 4
    assert ctypes.c_uint64.from_address(params[0]).value == 0x1234_5678_9ABC
    assert ctypes.c_int64.from_address(params[1]).value == -5
    assert ctypes.c_int32.from_address(params[2]).value == 2304
    assert ctypes.c_float.from_address(params[3]).value == 0.5


def test_a_python_int_argument_is_refused_naming_the_fix():
    from sparkops_cupy._pdl import kernel_params

    with pytest.raises(TypeError, match="numpy scalar"):
        kernel_params((np.int32(1), 7))


def test_pdl_is_refused_for_forms_not_written_for_it():
    from sparkops_cupy.linear import launch_rowwarp

    for form in ("octet", "copy2", "staged"):
        with pytest.raises(BadInput, match="copy and warp forms only"):
            launch_rowwarp(None, 1, None, 12288, 2304, None, form, pdl=True)


def test_the_q8_hidden_gate_up_forms_refuse_a_form_they_do_not_have_naming_the_constant(monkeypatch):
    """The pipelined and pairs gate/ups read their form from a module constant at each call (PIPE_STAGES, PAIRS_X): a
    value with no kernel is refused before anything launches, naming the constant and the forms there are; so are
    the two forms asked for together or without the Q8 hidden vector they are written for. No GPU needed: the checks
    come before the launch."""
    from types import SimpleNamespace

    from sparkops_cupy import moe_experts as cme

    kw = SimpleNamespace(row_bytes=1296, raw=None)
    one = SimpleNamespace(x=torch.zeros(1, 2304), code=1, ids=None, weights=None, h=None, y=None, d=2304, k=8, e=24,
                          f=1024, fs=1024, rows=9216, kg=kw, ku=kw, kd=kw, sg=kw, su=kw, sd=kw)
    q8h = dict(gateup="q8", pdl=True, q8_hidden=True)
    monkeypatch.setattr(cme, "PIPE_STAGES", 5)
    stages = r"forms are \[3, 4\] stages, not 5 \(sparkops_cupy\.moe_experts\.PIPE_STAGES\)"
    with pytest.raises(BadInput, match=stages):
        cme._launch_rowwarp(one, **q8h, pipe=True)
    monkeypatch.setattr(cme, "PAIRS_X", "wide")
    forms_x = r"x are \['dense', 'padded'\], not 'wide' \(sparkops_cupy\.moe_experts\.PAIRS_X\)"
    with pytest.raises(BadInput, match=forms_x):
        cme._launch_rowwarp(one, **q8h, pairs=True)
    with pytest.raises(BadInput, match="pairs gate/up is the one-wave Q8 hidden form's"):
        cme._launch_rowwarp(one, **q8h, pipe=True, pairs=True)
    with pytest.raises(BadInput, match="pipelined gate/up is the Q8 hidden form's"):
        cme._launch_rowwarp(one, gateup="q8", pdl=True, pipe=True)


# ---- on the GPU ------------------------------------------------------------------------------------------

def _q4k(out_f: int, in_f: int, seed: int, dev: torch.device):
    from gguf import GGMLQuantizationType as Q

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight
    from sparkops_cupy._weights import kernel_weight

    raw = np.ascontiguousarray(random_blocks(np.random.default_rng(seed), (out_f, in_f), Q.Q4_K, 0.02))
    w = QWeight(torch.from_numpy(raw).to(dev), Q.Q4_K, (out_f, in_f), f"w{seed}")
    return kernel_weight("linear", "weight", w, dev)


def _chain(n_pairs: int, seed: int):
    """(weights, x0) of a chain A, B, A, B, ... of the 48B's q/k/v (12288 x 2304) and an o_proj-sized (2304 x 4096)
    GEMV on this GPU; B reads the first 4096 of A's outputs, A reads B's 2304; x0 [1, 2304] bf16."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    dev = torch.device("cuda", torch.cuda.current_device())
    pairs = [(_q4k(12288, 2304, 2 * i, dev), _q4k(2304, 4096, 2 * i + 1, dev)) for i in range(n_pairs)]
    x0 = torch.randn(1, 2304, generator=torch.Generator().manual_seed(seed)).to(dev, torch.bfloat16)
    return pairs, x0


def _gemv_chain(pairs, x0: torch.Tensor, launch) -> list[torch.Tensor]:
    """_chain's GEMVs A, B, A, B, ... each by `launch(x, kw, n, k, y)` into a fresh bf16 output: the outputs."""
    x, bufs = x0, []
    for a, b in pairs:
        for kw, n, k in ((a, 12288, 2304), (b, 2304, 4096)):
            y = torch.empty((1, n), dtype=torch.bfloat16, device=x0.device)
            launch(x[:, :k], kw, n, k, y)
            bufs.append(y)
            x = y
    return bufs


def _run_chain(pairs, x0: torch.Tensor, bufs: list[torch.Tensor], pdl: bool, kernel_pdl: bool | None = None):
    """Launch the chain into bufs (one per GEMV), each in the form the step gives it (copy for A, warp for B);
    kernel_pdl picks the PDL-written kernels without the launch attribute (pdl False, kernel_pdl True)."""
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy.linear import launch_rowwarp

    code = rt.DTYPE_CODE[x0.dtype]
    x = x0
    for i, (a, b) in enumerate(pairs):
        for j, (kw, n, k) in enumerate(((a, 12288, 2304), (b, 2304, 4096))):
            y = bufs[2 * i + j]
            xin = x[:, :k]
            if kernel_pdl and not pdl:
                copy = n >= 4096
                rows = 16 if copy else 4
                smem = 4 * k + 4 * (k // 16) + rows * kw.row_bytes if copy else 0
                rt.launch("linear_rowwarp.cu", f"linear_q4_k_{'rowcppdl' if copy else 'rowwarppdl'}_bf16", x.device,
                          ((n + rows - 1) // rows,), (128,), (rt.ptr(xin), rt.ptr(kw.raw), rt.i64(kw.row_bytes),
                                                              rt.i32(k), rt.i32(n), rt.ptr(y)), shared_mem=smem)
            else:
                launch_rowwarp(xin, code, kw, n, k, y, None, pdl=pdl)
            x = y
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["copy", "warp"])
@pytest.mark.parametrize("out_f,in_f", [(5, 3072), (1027, 1024), (19, 1280), (4097, 256), (4100, 4352), (2, 9216)])
def test_gpu_pdl_kernels_give_their_forms_bits_at_odd_shapes(form, out_f, in_f):
    """Each PDL kernel launched with PDL, from NaN, against its form launched plainly: blocks past the end, rows of
    1 to 36 super-blocks (the warp form's later groups after the wait), bf16 and float32 activations."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy.linear import launch_rowwarp

    dev = torch.device("cuda", torch.cuda.current_device())
    kw = _q4k(out_f, in_f, out_f + in_f, dev)
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f)).to(dev, dtype)
        ys = [torch.full((1, out_f), float("nan"), dtype=dtype, device=dev) for _ in range(2)]
        launch_rowwarp(x, rt.DTYPE_CODE[dtype], kw, out_f, in_f, ys[0], form)
        launch_rowwarp(x, rt.DTYPE_CODE[dtype], kw, out_f, in_f, ys[1], form, pdl=True)
        torch.cuda.synchronize()
        assert torch.isfinite(ys[0].float()).all()
        assert torch.equal(ys[1], ys[0]), f"{form} {out_f}x{in_f} {dtype}"


@pytest.mark.gpu
def test_gpu_pdl_copy_form_is_bitwise_the_copy_form_eagerly():
    pairs, x0 = _chain(2, seed=1)
    dev = x0.device
    outs = {}
    for label, pdl, kernel_pdl in (("plain", False, False), ("pdl kernel, plain launch", False, True),
                                   ("pdl", True, True)):
        bufs = [torch.full((1, n), float("nan"), dtype=torch.bfloat16, device=dev)
                for _ in pairs for n in (12288, 2304)]
        _run_chain(pairs, x0, bufs, pdl, kernel_pdl)
        torch.cuda.synchronize()
        outs[label] = bufs
    for label in ("pdl kernel, plain launch", "pdl"):
        for i, (got, want) in enumerate(zip(outs[label], outs["plain"])):
            assert torch.isfinite(want.float()).all(), f"GEMV {i} of the plain chain is not finite"
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"{label}: GEMV {i} differs"


@pytest.mark.gpu
def test_gpu_pdl_chain_replayed_from_a_graph_never_reads_a_stale_input():
    """A chain of 8 dependent GEMVs (copy, warp, copy, ...) launched with PDL, replayed with new first inputs."""
    pairs, x0 = _chain(4, seed=2)
    g = torch.Generator().manual_seed(9)
    shapes = [n for _ in pairs for n in (12288, 2304)]

    def run(pdl: bool) -> list[torch.Tensor]:
        bufs = [torch.empty((1, n), dtype=torch.bfloat16, device=x0.device) for n in shapes]
        _run_chain(pairs, x0, bufs, pdl=pdl)
        return bufs

    replays_match(lambda: run(True), lambda: run(False), lambda: x0.copy_(torch.randn(1, 2304, generator=g)))


@pytest.mark.gpu
@pytest.mark.parametrize("gemv", ["copy_form", "q8_gemv"])
def test_gpu_pdl_gemv_after_a_triggering_norm_reads_the_norm_s_output(gemv):
    """The step's pair (rungs17d): add_rmsnorm=triton_pdl lets the next kernel be scheduled as it starts, and the
    tall projection launched with PDL after it requests its weights at once but must read the norm's output only
    after the norm ends. A new residual before each replay makes the replay before's norm output stale. For the
    copy form (cupy_rowwarp_pdl's) and the Q8 GEMV (cupy_rowwarp_pdl_q8's, which quantizes the norm's output)."""
    pytest.importorskip("triton")
    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_trigger

    from sparkops_cupy import _runtime as rt
    from sparkops_cupy.linear import launch_rowwarp

    pairs, x0 = _chain(1, seed=3)
    kw = pairs[0][0]  # 12288 x 2304
    g = torch.Generator().manual_seed(4)
    resid = torch.empty(1, 2304, dtype=torch.bfloat16, device=x0.device)
    gain = torch.randn(2304, generator=g).to(x0.device)

    def step(pdl: bool) -> list[torch.Tensor]:
        normed, _ = (add_rmsnorm_trigger if pdl else add_rmsnorm)(x0, resid, gain, 1e-5)
        y = torch.empty((1, 12288), dtype=torch.bfloat16, device=x0.device)
        if gemv == "q8_gemv":
            _q8_gemv(normed, kw, 12288, 2304, y, pdl)
        else:
            launch_rowwarp(normed, rt.DTYPE_CODE[x0.dtype], kw, 12288, 2304, y, "copy", pdl=pdl)
        return [y]

    replays_match(lambda: step(True), lambda: step(False), lambda: resid.copy_(torch.randn(1, 2304, generator=g)))


@pytest.mark.gpu
def test_gpu_pdl_o_proj_after_a_triggering_gated_norm_reads_the_norm_s_output():
    """KDA's pair (rungs17d): gated_rmsnorm=triton_pdl lets the next kernel start, and o_proj (2304 x 4096, the warp
    form) launched with PDL after it issues its first weight loads at once but reads the norm's output only after the
    norm ends. New norm inputs before each replay."""
    pytest.importorskip("triton")
    from sparkops_triton.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_trigger

    from sparkops_cupy import _runtime as rt
    from sparkops_cupy.linear import launch_rowwarp

    pairs, _ = _chain(1, seed=5)
    kw = pairs[0][1]  # 2304 x 4096
    dev = kw.raw.device
    g = torch.Generator().manual_seed(6)
    o = torch.empty(1, 32, 128, dtype=torch.bfloat16, device=dev)
    gate = torch.empty_like(o)
    gain = torch.randn(128, generator=g).to(dev)

    def step(pdl: bool) -> list[torch.Tensor]:
        normed = (gated_rmsnorm_trigger if pdl else gated_rmsnorm)(o, gate, gain, 1e-5)
        y = torch.empty((1, 2304), dtype=torch.bfloat16, device=dev)
        launch_rowwarp(normed.reshape(1, 4096), rt.DTYPE_CODE[o.dtype], kw, 2304, 4096, y, "warp", pdl=pdl)
        return [y]

    def refresh() -> None:
        o.copy_(torch.randn(1, 32, 128, generator=g))
        gate.copy_(torch.randn(1, 32, 128, generator=g))

    replays_match(lambda: step(True), lambda: step(False), refresh)


def _q8_gemv(x, kw, n, k, y, pdl: bool = True) -> None:
    """linear=cupy_rowwarp_pdl_q8's kernel on a checked call, launched with PDL or plainly (the same kernel: its wait
    returns at once), for a replay's expected bits."""
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear as cl

    cl.launch_rowwarp_q8(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y, pdl=pdl)


@pytest.mark.gpu
@pytest.mark.parametrize("out_f,in_f", [(12288, 2304), (2304, 4096), (5, 3072), (1027, 1024), (19, 1280), (4097, 256),
                                        (4100, 4352), (2, 9216)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_q8_gemv_is_close_to_the_float_product_and_its_own_bits(out_f, in_f, dtype):
    """linear=cupy_rowwarp_pdl_q8's kernel (both forms: 16 rows a block from 4096 rows, 8 below) from NaN, against
    x . dequantize(W) in float64: x rounded through Q8 blocks of 32, so close, not equal - act_q8's linear limit is
    looser, asserted under 2e-3 so that a wrong scale, sub-block or row cannot hide in it. Blocks past the end, rows
    of 1 to 36 super-blocks, three activation dtypes; the same bits twice."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    dev = torch.device("cuda", torch.cuda.current_device())
    kw = _q4k(out_f, in_f, out_f + in_f, dev)
    from gguf import GGMLQuantizationType as Q

    from sparkops.qweight import QWeight

    dense = QWeight(kw.raw.cpu(), Q.Q4_K, (out_f, in_f), "w").dequantize().double()  # [OUT, IN]
    x = torch.randn(1, in_f, generator=torch.Generator().manual_seed(in_f)).to(dev, dtype)
    want = x.double().cpu() @ dense.T
    ys = [torch.full((1, out_f), float("nan"), dtype=dtype, device=dev) for _ in range(2)]
    for y in ys:
        _q8_gemv(x, kw, out_f, in_f, y)
    torch.cuda.synchronize()
    assert torch.isfinite(ys[0].float()).all() and torch.equal(ys[0], ys[1])
    err = _nmse(ys[0].cpu(), want)
    assert err < 2e-3, f"{out_f}x{in_f} {dtype}: nmse {err:.3g} against the float64 product"


def _chain_form_matches(seed: int, launch, plain, each) -> None:
    """_chain's GEMVs by `launch` (a registered form's launcher) replayed from one graph with new first inputs and NaN
    outputs against the same chain by `plain` (plain launches), then eagerly bitwise the chain by `each` (the kernels
    the form claims to run, each launched as its own implementation launches it)."""
    pairs, x0 = _chain(3, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    replays_match(lambda: _gemv_chain(pairs, x0, launch), lambda: _gemv_chain(pairs, x0, plain),
                  lambda: x0.copy_(torch.randn(1, 2304, generator=g)))
    got, want = _gemv_chain(pairs, x0, launch), _gemv_chain(pairs, x0, each)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.gpu
def test_gpu_q8_gemv_shortplain_chain_gives_the_pdl_forms_bits_replayed():
    """linear=cupy_rowwarp_pdl_q8_shortplain: the chain of q/k/v-sized (PDL) and o_proj-sized (plain) Q8 GEMVs through
    its own launcher, replayed from one graph against the same chain launched plainly; and eagerly, every GEMV bitwise
    cupy_rowwarp_pdl_q8's (the same kernels)."""
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear as cl

    def shortplain(x, kw, n, k, y):
        cl._launch_q8_shortplain(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y)

    _chain_form_matches(32, shortplain, lambda x, kw, n, k, y: _q8_gemv(x, kw, n, k, y, pdl=False), _q8_gemv)


@pytest.mark.gpu
def test_gpu_q8_tall_chain_is_each_forms_bits_replayed():
    """linear=cupy_rowwarp_pdl_q8_tall: the chain of q/k/v-sized GEMVs (the Q8 form) and o_proj-sized ones (the float
    warp form), all with PDL, replayed from one graph against the same chain launched plainly; and eagerly, each tall
    output bitwise cupy_rowwarp_pdl_q8's kernel and each short one cupy_rowwarp_pdl's."""
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear as cl

    def tall(x, kw, n, k, y):
        cl._launch_q8_tall(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y)

    def by_rows(pdl: bool):  # Q8 for the tall weights, the float warp form for the short ones
        def launch(x, kw, n, k, y):
            if n >= cl.ROWWARP_TALL_ROWS:
                _q8_gemv(x, kw, n, k, y, pdl=pdl)
            else:
                cl.launch_rowwarp(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y, cl.rowwarp_form(n), pdl=pdl)
        return launch

    _chain_form_matches(39, tall, by_rows(False), by_rows(True))


#: the o_proj-sized warp form's ways of reading x early, by test id: its launch_rowwarp option, the q8_tall launcher
#: that uses it, and the name its refusal gives (xpf: prefetched into L1, session 38; xregs: loaded into registers two
#: rounds at a time, session 39)
_X_EARLY = {"xpf": ("xpf", "_launch_q8_tall_xpf", "the x prefetch"),
            "xregs": ("xr", "_launch_q8_tall_xr", "x in registers")}


@pytest.mark.gpu
@pytest.mark.parametrize("early", sorted(_X_EARLY))
def test_gpu_q8_tall_early_x_chain_gives_the_q8_tall_bits_replayed(early):
    """linear=cupy_rowwarp_pdl_q8_tall_xpf and _xr claim cupy_rowwarp_pdl_q8_tall's bits: the chain through each
    launcher (the o_proj-sized GEMVs' warp form reading x early after its wait: prefetched, or into registers),
    replayed from one graph with new first inputs and NaN outputs against the same chain launched plainly - an early
    read of a value the kernel before had not yet written gives NaN or the replay before's bits - and eagerly bitwise
    the q8_tall launcher's chain."""
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear as cl

    launcher = getattr(cl, _X_EARLY[early][1])

    def form(x, kw, n, k, y):
        launcher(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y)

    def q8_tall(x, kw, n, k, y):
        cl._launch_q8_tall(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y)

    def by_rows(x, kw, n, k, y):  # the same kernels launched plainly
        if n >= cl.ROWWARP_TALL_ROWS:
            _q8_gemv(x, kw, n, k, y, pdl=False)
        else:
            cl.launch_rowwarp(x, rt.DTYPE_CODE[x.dtype], kw, n, k, y, cl.rowwarp_form(n), pdl=False)

    _chain_form_matches(47, form, by_rows, q8_tall)


@pytest.mark.gpu
@pytest.mark.parametrize("early", sorted(_X_EARLY))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
@pytest.mark.parametrize("n,k", [(2304, 4096), (2304, 9216), (1023, 256), (37, 1280)],
                         ids=["o_proj", "dense_down", "1023x256", "37x1280"])
def test_gpu_early_x_warp_form_gives_the_warp_forms_bits(n, k, dtype, early):
    """The warp form reading x early (linear_q4_k_rowwarppdlxpf_*: prefetched; _rowwarppdlxr_*: into registers, two
    rounds at a time, a clamped index past the row's end) against the PDL warp form, eagerly, at the o_proj shape, a K
    of two groups and a part (9216: 36 super-blocks), one super-block, and 5 a row with a partial block of rows: an
    early read of the wrong place cannot be summed unnoticed, and a lane reading past its row's activations would read
    past x (16 x K values a lane at most); launched without PDL, or in the copy form, it is refused by name."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import _runtime as rt
    from sparkops_cupy import linear as cl

    from sparkops.errors import BadInput

    option, _, name = _X_EARLY[early]
    dev = torch.device("cuda", torch.cuda.current_device())
    kw = _q4k(n, k, 48, dev)
    x = torch.randn(1, k, generator=torch.Generator().manual_seed(49)).to(dev, dtype)
    code = rt.DTYPE_CODE[dtype]
    got, want = (torch.full((1, n), float("nan"), dtype=dtype, device=dev) for _ in range(2))
    cl.launch_rowwarp(x, code, kw, n, k, got, "warp", pdl=True, **{option: True})
    cl.launch_rowwarp(x, code, kw, n, k, want, "warp", pdl=True)
    torch.cuda.synchronize()
    assert torch.isfinite(want.float()).all()
    assert torch.equal(got, want)
    for form, pdl in (("warp", False), ("copy", True)):
        with pytest.raises(BadInput, match=f"{name} is written for the row-warp GEMV's warp form"):
            cl.launch_rowwarp(x, code, kw, n, k, got, form, pdl=pdl, **{option: True})
    with pytest.raises(BadInput, match="either prefetched"):
        cl.launch_rowwarp(x, code, kw, n, k, got, "warp", pdl=True, xpf=True, xr=True)


@pytest.mark.gpu
def test_gpu_pdl_q8_gemv_chain_replayed_from_a_graph_never_reads_a_stale_input():
    """A chain of 8 dependent Q8 GEMVs (q/k/v-sized, o_proj-sized, ...: both forms) launched with PDL, replayed from
    one graph with new first inputs and NaN outputs, against the same kernels launched plainly: a block that read x or
    staged it before the GEMV before it ended gives NaN or the replay before's bits."""
    pairs, x0 = _chain(4, seed=12)
    g = torch.Generator().manual_seed(13)

    def run(pdl: bool) -> list[torch.Tensor]:
        return _gemv_chain(pairs, x0, lambda x, kw, n, k, y: _q8_gemv(x, kw, n, k, y, pdl))

    replays_match(lambda: run(True), lambda: run(False), lambda: x0.copy_(torch.randn(1, 2304, generator=g)))


@pytest.mark.gpu
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_gpu_pdl_q8_gemv_a_non_finite_activation_makes_every_output_nan(bad):
    """A NaN or inf in x reaches every output as NaN through the Q8 staging (its block's scale carries it), as the
    float GEMV's products carry it."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    dev = torch.device("cuda", torch.cuda.current_device())
    for n, k in ((12288, 2304), (2304, 4096)):
        kw = _q4k(n, k, 16, dev)
        x = torch.randn(1, k, generator=torch.Generator().manual_seed(17)).to(dev, torch.bfloat16)
        x[0, 100] = bad
        y = torch.empty((1, n), dtype=torch.bfloat16, device=dev)
        _q8_gemv(x, kw, n, k, y)
        torch.cuda.synchronize()
        assert torch.isnan(y.float()).all(), f"{n}x{k}"


def _nmse(got: torch.Tensor, want: torch.Tensor) -> float:
    """sum((got - want)^2) / sum(want^2), in float64."""
    got, want = got.double(), want.double()
    return float(((got - want) ** 2).sum() / (want ** 2).sum())


def _moe_48b(seed: int, dev: torch.device):
    """One token's arguments at the 48B's MoE shape (2304 wide, 1024 hidden, 24 of the 256 experts stored, top-8,
    a shared expert), Q4_K, bf16 activations."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    d, f, e, k = 2304, 1024, 24, 8

    def qw(shape, std, name):
        raw = np.ascontiguousarray(random_blocks(rng, shape, Q.Q4_K, std))
        return QWeight(torch.from_numpy(raw).to(dev), Q.Q4_K, shape, name)

    w = dict(w_gate=qw((e, f, d), d ** -0.5, "g"), w_up=qw((e, f, d), d ** -0.5, "u"),
             w_down=qw((e, d, f), f ** -0.5, "d"), s_gate=qw((f, d), d ** -0.5, "sg"),
             s_up=qw((f, d), d ** -0.5, "su"), s_down=qw((d, f), f ** -0.5, "sd"))
    ids = torch.randperm(e, generator=g)[:k].reshape(1, k).to(dev)
    x = torch.randn(1, d, generator=g).to(dev, torch.bfloat16)
    weights = (torch.rand(1, k, generator=g) + 0.1).to(dev)
    return x, weights, ids, w


@pytest.mark.gpu
def test_gpu_pdl_moe_experts_give_cupy_rowwarp_s_bits_and_replay_from_a_graph():
    """moe_experts=cupy_rowwarp_pdl against cupy_rowwarp: eagerly, then three layers' worth of calls replayed from one
    graph (each layer's gate/up waits for the down before it) with new tokens, new routing and NaN outputs before
    every replay: the down kernel reads the routing before it waits, so a stale or early read shows here."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy.moe_experts import moe_experts_rowwarp, moe_experts_rowwarp_pdl

    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(7, dev)
    want = moe_experts_rowwarp(x, weights, ids, **w)
    got = moe_experts_rowwarp_pdl(x, weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isfinite(want.float()).all() and torch.equal(got.view(torch.int16), want.view(torch.int16))

    g = torch.Generator().manual_seed(8)
    xs = [torch.empty_like(x) for _ in range(3)]
    wts = [torch.empty_like(weights) for _ in range(3)]
    idss = [torch.empty_like(ids) for _ in range(3)]

    def refresh() -> None:
        for a, b, c in zip(xs, wts, idss):
            a.copy_(torch.randn(1, 2304, generator=g))
            b.copy_(torch.rand(1, 8, generator=g) + 0.1)
            c.copy_(torch.randperm(24, generator=g)[:8].reshape(1, 8))

    def layers(fn) -> list[torch.Tensor]:
        return [fn(a, b, c, **w) for a, b, c in zip(xs, wts, idss)]

    replays_match(lambda: layers(moe_experts_rowwarp_pdl), lambda: layers(moe_experts_rowwarp), refresh, replays=4)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["moe_experts_rowwarp_pdl", "moe_experts_rowwarp_pdl_shared",
                                  "moe_experts_rowwarp_pdl_wide", "moe_experts_rowwarp_pdl_split",
                                  "moe_experts_rowwarp_pdl_q8", "moe_experts_rowwarp_pdl_q8_split",
                                  "moe_experts_rowwarp_pdl_q8_hidden", "moe_experts_rowwarp_pdl_q8_pipe",
                                  "moe_experts_rowwarp_pdl_q8_pairs", "moe_experts_rowwarp_pdl_q8_hidden_cp",
                                  "moe_experts_rowwarp_pdl_q8_pairs_cp", "moe_experts_rowwarp_pdl_q8_hidden_ld",
                                  "moe_experts_rowwarp_pdl_q8_pairs_ld", "moe_experts_rowwarp_pdl_q8_pairs_xpf",
                                  "moe_experts_rowwarp_pdl_q8_pairs_hs", "moe_experts_rowwarp_pdl_q8_pairs_l2pf",
                                  "moe_experts_rowwarp_pdl_q8_pairs_l2pf_grouped",
                                  "moe_experts_rowwarp_pdl_q8_pairs_l2pf_streamed"],
                         ids=["pdl", "pdl_shared_first", "pdl_wide_down", "pdl_split_down", "pdl_q8_gate_up",
                              "pdl_q8_gate_up_split", "pdl_q8_hidden", "pdl_q8_pipe", "pdl_q8_pairs",
                              "pdl_q8_hidden_copy_down", "pdl_q8_pairs_copy_down", "pdl_q8_hidden_down_loads",
                              "pdl_q8_pairs_down_loads", "pdl_q8_pairs_down_xpf", "pdl_q8_pairs_down_staged",
                              "pdl_q8_pairs_down_l2pf", "pdl_q8_pairs_l2pf_grouped", "pdl_q8_pairs_l2pf_streamed"])
def test_gpu_pdl_moe_an_expert_id_out_of_range_gives_nan(impl):
    """The PDL down reads the routing before it waits: an expert id outside [0, E) must still poison the token's
    output (as cupy_rowwarp's does), not read past the stacked weights. The shared-first gate/up's shared blocks never
    read the routing; its routed blocks still do. The wide down reads every slot's id before it waits; the split
    down's warps each read their share's, and the output is poisoned when any warp saw a bad one."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(10, dev)
    for bad in (-1, 24):
        wrong = ids.clone()
        wrong[0, 3] = bad
        got = getattr(cme, impl)(x, weights, wrong, **w)
        torch.cuda.synchronize()
        assert torch.isnan(got.float()).all(), f"expert id {bad}"


class _NormRouterLayers:
    """Three layers of the step's norm-and-router pairs at the 48B's width (E experts, top-8, float32 router weights):
    calling it with pdl=True runs add_rmsnorm=triton_pdl and moe_router=cupy_rowwarp_pdl, with pdl=False add_rmsnorm=
    triton and cupy_rowwarp, and gives each layer's (normed input, (weights, ids)); refresh() draws a new residual and
    new layer inputs."""

    def __init__(self, dev: torch.device, seed: int, e: int, dtype: torch.dtype):
        self.g, self.d = torch.Generator().manual_seed(seed), 2304
        d, g = self.d, self.g
        self.route = dict(top_k=8, n_group=1, topk_group=1, scale=2.446, renorm_eps=1e-20)
        self.routers = [(torch.randn(e, d, generator=g) * d ** -0.5).to(dev) for _ in range(3)]  # [E, D] each
        self.biases = [(torch.randn(e, generator=g) * 0.1).to(dev) for _ in range(3)]
        self.ys = [torch.empty(1, d, dtype=dtype, device=dev) for _ in range(3)]
        self.resid = torch.empty(1, d, dtype=dtype, device=dev)
        self.gain = torch.randn(d, generator=g).to(dev)

    def refresh(self) -> None:
        self.resid.copy_(torch.randn(1, self.d, generator=self.g))
        for y in self.ys:
            y.copy_(torch.randn(1, self.d, generator=self.g))

    def __call__(self, pdl: bool) -> list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]:
        from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_trigger

        from sparkops_cupy import moe_router as cmr

        norm = add_rmsnorm_trigger if pdl else add_rmsnorm
        router = cmr.moe_router_rowwarp_pdl if pdl else cmr.moe_router_rowwarp
        out, h = [], self.resid
        for y, w, b in zip(self.ys, self.routers, self.biases):
            f, h = norm(y, h, self.gain, 1e-5)
            out.append((f, router(f, w, b, **self.route)))
        return out


def _experts_after_the_router_match(name: str, seed: int) -> None:
    """moe_experts=NAME (a PDL form claiming cupy_rowwarp's bits) against cupy_rowwarp: eagerly, then three layers of
    the step's chain - the triggering norm, the PDL router (24 experts stored, top-8), the experts - replayed from one
    graph with a new residual and new inputs, the outputs NaN before every replay, against the same chain launched
    plainly: a block that read the router's ids or gate/up's hidden vector early gives the replay before's, or NaN."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    pytest.importorskip("triton")
    from sparkops_cupy import moe_experts as cme

    form = getattr(cme, f"moe_experts_{name.removeprefix('cupy_')}")
    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(seed, dev)
    want = cme.moe_experts_rowwarp(x, weights, ids, **w)
    got = form(x, weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isfinite(want.float()).all() and torch.equal(got.view(torch.int16), want.view(torch.int16))

    chain = _NormRouterLayers(dev, seed + 1, 24, torch.bfloat16)

    def layers(pdl: bool) -> list[torch.Tensor]:
        experts = form if pdl else cme.moe_experts_rowwarp
        return [experts(f, wts, idx, **w) for f, (wts, idx) in chain(pdl)]

    replays_match(lambda: layers(True), lambda: layers(False), chain.refresh, replays=4)


@pytest.mark.gpu
def test_gpu_pdl_shared_first_experts_after_the_router_give_cupy_rowwarp_s_bits():
    """moe_experts=cupy_rowwarp_pdl_shared: the shared expert's blocks copy their rows before they wait for the router;
    every other read waits (_experts_after_the_router_match)."""
    _experts_after_the_router_match("cupy_rowwarp_pdl_shared", 13)


@pytest.mark.gpu
def test_gpu_pdl_wide_down_experts_after_the_router_give_cupy_rowwarp_s_bits():
    """moe_experts=cupy_rowwarp_pdl_wide: down requests its whole row (the routing read, the weights streamed) before
    it waits for gate/up; h is read only after (_experts_after_the_router_match)."""
    _experts_after_the_router_match("cupy_rowwarp_pdl_wide", 27)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [2, 4, 8], ids=["2_warps", "4_warps", "8_warps"])
def test_gpu_pdl_split_down_experts_match_cupy_rowwarp_and_their_own_bits_when_replayed(split, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_split: down as four warps an output (another order of the sum), so against
    cupy_rowwarp it is close (the tolerance row's nmse), not equal. Its own order is fixed, so it is deterministic:
    three layers of the step's chain (the triggering norm, the PDL router, the split experts) replayed from one graph,
    the outputs NaN before every replay, must give the bits of the same split experts after the plain norm and router,
    launched eagerly - a warp that read gate/up's hidden vector or the router's ids before its wait gives the replay
    before's, or NaN. Also a shape whose super-blocks do not divide by four (one slot of F = 256 and no shared expert:
    a quarter of one is empty). Each form (DOWN_SPLIT: 2, 4 or 8 warps an output)."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    pytest.importorskip("triton")
    from sparkops_cupy import moe_experts as cme

    monkeypatch.setattr(cme, "DOWN_SPLIT", split)
    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(31, dev)
    want = cme.moe_experts_rowwarp(x, weights, ids, **w)
    got = cme.moe_experts_rowwarp_pdl_split(x, weights, ids, **w)
    again = cme.moe_experts_rowwarp_pdl_split(x, weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isfinite(got.float()).all() and torch.equal(got.view(torch.int16), again.view(torch.int16))
    assert _nmse(got, want) < 1e-4  # bf16 outputs: a sum in another order may round to the next bf16 (~1e-5)

    chain = _NormRouterLayers(dev, 32, 24, torch.bfloat16)

    def layers(pdl: bool) -> list[torch.Tensor]:
        return [cme.moe_experts_rowwarp_pdl_split(f, wts, idx, **w) for f, (wts, idx) in chain(pdl)]

    replays_match(lambda: layers(True), lambda: layers(False), chain.refresh, replays=4)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [2, 4, 8], ids=["2_warps", "4_warps", "8_warps"])
def test_gpu_pdl_split_down_with_an_empty_quarter_matches_the_torch_experts(split, monkeypatch):
    """One slot of F = 256, no shared expert: 1 super-block a row, so all warps but the first have nothing to add (and
    the one that has waits, adds and is the output). Against the torch plugin's float32 moe_experts (proven against
    the NumPy reference), within the tolerance row's 1e-10; each form (DOWN_SPLIT)."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from gguf import GGMLQuantizationType as Q
    from sparkops_cupy import moe_experts as cme
    from sparkops_torch.moe_experts import moe_experts as torch_experts

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    monkeypatch.setattr(cme, "DOWN_SPLIT", split)
    dev = torch.device("cuda", torch.cuda.current_device())
    rng, g = np.random.default_rng(33), torch.Generator().manual_seed(33)
    d, f, e = 256, 256, 4

    def qw(shape, name):
        raw = np.ascontiguousarray(random_blocks(rng, shape, Q.Q4_K, 0.05))
        return QWeight(torch.from_numpy(raw).to(dev), Q.Q4_K, shape, name)

    w = dict(w_gate=qw((e, f, d), "g"), w_up=qw((e, f, d), "u"), w_down=qw((e, d, f), "d"), s_gate=None, s_up=None,
             s_down=None)
    x = torch.randn(1, d, generator=g).to(dev)
    weights, ids = (torch.rand(1, 1, generator=g) + 0.1).to(dev), torch.tensor([[2]], device=dev)
    assert cme.rowwarp_serves(x, **w)  # the split kernels take it (not the stated policy's torch path)
    got = cme.moe_experts_rowwarp_pdl_split(x, weights, ids, **w)
    want = torch_experts(x, weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isfinite(got).all() and _nmse(got, want) < 1e-10


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cupy_rowwarp_pdl_q8", "cupy_rowwarp_pdl_q8_split", "cupy_rowwarp_pdl_q8_hidden",
                                  "cupy_rowwarp_pdl_q8_pairs", "cupy_rowwarp_pdl_q8_hidden_cp",
                                  "cupy_rowwarp_pdl_q8_pairs_cp", "cupy_rowwarp_pdl_q8_hidden_ld",
                                  "cupy_rowwarp_pdl_q8_pairs_ld", "cupy_rowwarp_pdl_q8_pairs_xpf",
                                  "cupy_rowwarp_pdl_q8_pairs_hs", "cupy_rowwarp_pdl_q8_pairs_l2pf",
                                  "cupy_rowwarp_pdl_q8_pairs_l2pf_grouped", "cupy_rowwarp_pdl_q8_pairs_l2pf_streamed"],
                         ids=["q8_gate_up", "q8_gate_up_split", "q8_gate_up_q8_hidden", "q8_gate_up_q8_pairs",
                              "q8_gate_up_q8_hidden_copy_down", "q8_gate_up_q8_pairs_copy_down",
                              "q8_gate_up_q8_hidden_down_loads", "q8_gate_up_q8_pairs_down_loads",
                              "q8_gate_up_q8_pairs_down_xpf", "q8_gate_up_q8_pairs_down_staged",
                              "q8_gate_up_q8_pairs_down_l2pf", "q8_gate_up_q8_pairs_l2pf_grouped",
                              "q8_gate_up_q8_pairs_l2pf_streamed"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_q8_gate_up_experts_are_close_to_torch_and_their_own_bits_when_replayed(name, dtype):
    """moe_experts=cupy_rowwarp_pdl_q8 (and _q8_split, _q8_hidden): x rounded through Q8 blocks of 32 before
    gate/up's integer dots (and with _q8_hidden the hidden vector through Q8 groups of 8 before down's), so against
    the torch plugin's float32 experts it is close, not equal: act_q8's nmse for this op is 1e-2, and Q8 activations
    alone land near 1e-4 (asserted under 2e-3, so that a wrong scale, sub-block or group cannot hide in the claim's
    margin). Its integer dots and fixed sums make it deterministic: three layers of the step's chain replayed
    from one graph, the outputs NaN before every replay, give the bits of the same experts after the plain norm and
    router - a block that read x or the ids before its wait gives the replay before's, or NaN."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    pytest.importorskip("triton")
    from sparkops_cupy import moe_experts as cme
    from sparkops_torch.moe_experts import moe_experts as torch_experts

    form = getattr(cme, f"moe_experts_{name.removeprefix('cupy_')}")
    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(41, dev)
    x = x.to(dtype)
    got, again = form(x, weights, ids, **w), form(x, weights, ids, **w)
    want = torch_experts(x.float(), weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isfinite(got.float()).all() and torch.equal(got.float(), again.float())
    err = _nmse(got.float(), want)
    assert err < 2e-3, f"{name} ({dtype}): nmse {err:.3g} against the float32 experts"

    chain = _NormRouterLayers(dev, 42, 24, torch.bfloat16)

    def layers(pdl: bool) -> list[torch.Tensor]:
        return [form(f, wts, idx, **w) for f, (wts, idx) in chain(pdl)]

    replays_match(lambda: layers(True), lambda: layers(False), chain.refresh, replays=4)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["moe_experts_rowwarp_pdl_q8", "moe_experts_rowwarp_pdl_q8_hidden",
                                  "moe_experts_rowwarp_pdl_q8_pipe", "moe_experts_rowwarp_pdl_q8_pairs",
                                  "moe_experts_rowwarp_pdl_q8_hidden_cp", "moe_experts_rowwarp_pdl_q8_pairs_cp",
                                  "moe_experts_rowwarp_pdl_q8_hidden_ld", "moe_experts_rowwarp_pdl_q8_pairs_ld",
                                  "moe_experts_rowwarp_pdl_q8_pairs_xpf", "moe_experts_rowwarp_pdl_q8_pairs_hs",
                                  "moe_experts_rowwarp_pdl_q8_pairs_l2pf",
                                  "moe_experts_rowwarp_pdl_q8_pairs_l2pf_grouped",
                                  "moe_experts_rowwarp_pdl_q8_pairs_l2pf_streamed"],
                         ids=["q8_gate_up", "q8_hidden", "q8_pipe", "q8_pairs", "q8_hidden_copy_down",
                              "q8_pairs_copy_down", "q8_hidden_down_loads", "q8_pairs_down_loads",
                              "q8_pairs_down_xpf", "q8_pairs_down_staged", "q8_pairs_down_l2pf",
                              "q8_pairs_l2pf_grouped", "q8_pairs_l2pf_streamed"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_gpu_pdl_q8_gate_up_a_non_finite_activation_makes_the_output_nan(bad, impl):
    """A NaN or inf in x reaches the output as NaN through the Q8 staging (the block's scale carries it; a max would
    drop a NaN and quantize it to 0), as it does through the float forms; with the Q8 hidden vector, through each
    group's scale as well."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(43, dev)
    x[0, 100] = bad
    got = getattr(cme, impl)(x, weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isnan(got.float()).all()


def _moe_small(seed: int, dev: torch.device, d: int, f: int, fs: int, e: int, k: int):
    """One token's arguments at a small Q4_K MoE shape: width d, f hidden rows an expert, e experts stored, top-k, a
    shared expert of fs rows (none when fs is 0), bf16 activations (the arguments as _moe_48b gives them)."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.gguf.quants import random_blocks
    from sparkops.qweight import QWeight

    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)

    def qw(shape, name):
        raw = np.ascontiguousarray(random_blocks(rng, shape, Q.Q4_K, shape[-1] ** -0.5))
        return QWeight(torch.from_numpy(raw).to(dev), Q.Q4_K, shape, name)

    shared = dict(s_gate=qw((fs, d), "sg"), s_up=qw((fs, d), "su"), s_down=qw((d, fs), "sd")) if fs \
        else dict(s_gate=None, s_up=None, s_down=None)
    w = dict(w_gate=qw((e, f, d), "g"), w_up=qw((e, f, d), "u"), w_down=qw((e, d, f), "d"), **shared)
    ids = torch.randperm(e, generator=g)[:k].reshape(1, k).to(dev)
    x = torch.randn(1, d, generator=g).to(dev, torch.bfloat16)
    weights = (torch.rand(1, k, generator=g) + 0.1).to(dev)
    return x, weights, ids, w


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [None, 7], ids=["its_grid", "7_blocks"])
@pytest.mark.parametrize("stages", [3, 4], ids=["3_stages", "4_stages"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_q8_pipe_gives_the_q8_hidden_pair_s_bits_eagerly_and_replayed(dtype, stages, grid, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_q8_pipe claims cupy_rowwarp_pdl_q8_hidden's bits: every row's sum is the one-wave
    form's code, only the order of the groups' copies and which block dots them change. At the 48B's MoE shape (1152
    groups of 8 hidden rows) in each stage form, with the grid the SMs hold (3 or 2 blocks an SM: 2-5 groups a block)
    and with 7 blocks (~165 groups a block: every stage refilled ~55 times), eagerly, then three layers replayed from
    one graph after the PDL norm and router, outputs NaN before each replay, against the one-wave pair after the
    plain ones: a stage read before its copy landed, or refilled while a warp still read it, gives other bits."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    pytest.importorskip("triton")
    from sparkops_cupy import moe_experts as cme

    monkeypatch.setattr(cme, "PIPE_STAGES", stages)
    if grid is not None:
        real = cme._pipe_grid
        monkeypatch.setattr(cme, "_pipe_grid", lambda groups, smem, dev: min(real(groups, smem, dev), grid))
    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(45, dev)
    x = x.to(dtype)
    want = cme.moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, **w)
    got = cme.moe_experts_rowwarp_pdl_q8_pipe(x, weights, ids, **w)
    torch.cuda.synchronize()
    assert torch.isfinite(want.float()).all() and torch.equal(got.view(torch.int16), want.view(torch.int16))

    chain = _NormRouterLayers(dev, 46, 24, torch.bfloat16)

    def layers(form, pdl: bool) -> list[torch.Tensor]:
        return [form(f, wts, idx, **w) for f, (wts, idx) in chain(pdl)]

    replays_match(lambda: layers(cme.moe_experts_rowwarp_pdl_q8_pipe, True),
                   lambda: layers(cme.moe_experts_rowwarp_pdl_q8_hidden, False), chain.refresh, replays=3)


@pytest.mark.gpu
def test_gpu_pdl_q8_pipe_takes_shapes_with_fewer_groups_than_blocks():
    """Shapes away from the 48B's, with fewer groups of 8 hidden rows than the SMs hold blocks (the grid shrinks to
    the groups, a group a block): K = 3 of 6 experts of 256 hidden rows, a shared one, 2 super-blocks wide; K = 5 of
    12 of 512 rows, a shared expert of 256 (a group boundary at the routed and shared rows' seam), 3 super-blocks
    wide. Each against cupy_rowwarp_pdl_q8_hidden's bits (the 7-block grid of the test above takes ragged shares)."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    for seed, (d, f, fs, e, k) in enumerate(((512, 256, 256, 6, 3), (768, 512, 256, 12, 5)), start=47):
        x, weights, ids, w = _moe_small(seed, dev, d, f, fs, e, k)
        assert cme.rowwarp_serves(x, **w), (d, f, fs)  # the kernels take it, not the stated policy's torch path
        want = cme.moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, **w)
        got = cme.moe_experts_rowwarp_pdl_q8_pipe(x, weights, ids, **w)
        torch.cuda.synchronize()
        assert torch.isfinite(want.float()).all() and torch.equal(got.view(torch.int16), want.view(torch.int16)), \
            (d, f, fs, e, k)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_q8_pairs_is_the_q8_hidden_pair_within_float_rounding(dtype, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_q8_pairs dots the same Q8 codes with the same 4-bit weights as
    cupy_rowwarp_pdl_q8_hidden; only the order of the products' float sums differs (a lane a sub-block pair, the
    scales applied to integer sums). So against it the output is equal to float rounding (asserted nmse < 1e-6,
    where a wrong nibble, scale, min or sub-block gives ~1e-2), at the 48B's MoE shape and at widths of 2 and 3
    super-blocks (lanes with no second super-block, and an odd count). Its padded form of x (PAIRS_X = "padded":
    the codes at another stride, read in the same order) must give the dense form's bits at each."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(48, dev), _moe_small(49, dev, 512, 256, 256, 6, 3), _moe_small(50, dev, 768, 512, 0, 12, 5)]
    for x, weights, ids, w in sets:
        x = x.to(dtype)
        assert cme.rowwarp_serves(x, **w)  # the kernels take it, not the stated policy's torch path
        want = cme.moe_experts_rowwarp_pdl_q8_hidden(x, weights, ids, **w)
        monkeypatch.setattr(cme, "PAIRS_X", "dense")
        got = cme.moe_experts_rowwarp_pdl_q8_pairs(x, weights, ids, **w)
        monkeypatch.setattr(cme, "PAIRS_X", "padded")
        padded = cme.moe_experts_rowwarp_pdl_q8_pairs(x, weights, ids, **w)
        torch.cuda.synchronize()
        err = _nmse(got.float(), want.float())
        assert torch.isfinite(got.float()).all() and err < 1e-6, f"width {x.shape[1]}: nmse {err:.3g}"
        assert torch.equal(padded.view(torch.int16), got.view(torch.int16)), f"width {x.shape[1]}: padded x"


def _pairs_give_their_bits(pairs, sets, dtype: torch.dtype, fits=None) -> None:
    """Eagerly, at each of `sets` (_moe_48b / _moe_small arguments) in `dtype`: each of `pairs` (a form's function
    name, the function whose bits it claims) gives that function's bits, which are finite; the kernels take every set
    (rowwarp_serves, and `fits(ids, w)` where given), not the stated policy's torch path."""
    from sparkops_cupy import moe_experts as cme

    for x, weights, ids, w in sets:
        x = x.to(dtype)
        assert cme.rowwarp_serves(x, **w)
        assert fits is None or fits(ids, w), (x.shape[1], ids.shape[1])
        for form, ref in pairs:
            want = getattr(cme, ref)(x, weights, ids, **w)
            got = getattr(cme, form)(x, weights, ids, **w)
            torch.cuda.synchronize()
            assert torch.isfinite(want.float()).all(), (form, x.shape[1], ids.shape[1])
            same = torch.equal(got.view(torch.int16), want.view(torch.int16))
            assert same, f"{form} at width {x.shape[1]}, K {ids.shape[1]}"


#: the copy-down pairs and the warp-down pairs whose bits they claim
_COPY_DOWN_PAIRS = (("moe_experts_rowwarp_pdl_q8_hidden_cp", "moe_experts_rowwarp_pdl_q8_hidden"),
                    ("moe_experts_rowwarp_pdl_q8_pairs_cp", "moe_experts_rowwarp_pdl_q8_pairs"))


@pytest.mark.gpu
@pytest.mark.parametrize("groups", [1, 3, 6], ids=["1_group", "3_groups", "6_groups"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_copy_down_gives_its_warp_down_pairs_bits(dtype, groups, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_q8_hidden_cp and _q8_pairs_cp claim the bits of cupy_rowwarp_pdl_q8_hidden and
    _q8_pairs: the copy down (down_q8cp_q4_k) dots each warp's super-blocks from shared memory with the warp down's
    products in its order. At the 48B's MoE shape (36 super-blocks a warp, a shared expert), at K = 3 of 6 experts of
    256 rows with a shared one (4 a warp: fewer than a group's lanes, and groups of none) and at K = 5 of 12 of 512
    rows without one (10 a warp), in each form of the copy's commit groups: a group dotted before its copies landed,
    a unit at the wrong offset, slot or scale, or a lane's units out of order gives other bits."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    monkeypatch.setattr(cme, "DOWN_CP_GROUPS", groups)
    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(51, dev), _moe_small(52, dev, 512, 256, 256, 6, 3), _moe_small(53, dev, 768, 512, 0, 12, 5)]
    _pairs_give_their_bits(_COPY_DOWN_PAIRS, sets, dtype, lambda ids, w: cme.down_cp_fits(
        ids.shape[1], w["w_down"].shape[2], w["s_down"].shape[1] if w["s_down"] is not None else 0))


def _replays_give_the_warp_downs_bits(pairs, seed: int) -> None:
    """Three layers of the step's chain (the PDL norm, the PDL router, the experts) replayed from one graph, outputs
    NaN before each replay, new activations each time: each of `pairs` (a form's function, the warp-down pair's)
    must give the warp-down pair's bits after the plain norm and router."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    pytest.importorskip("triton")
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    _, _, _, w = _moe_48b(seed, dev)
    chain = _NormRouterLayers(dev, seed + 1, 24, torch.bfloat16)
    for form, warp in pairs:
        def layers(fn, pdl: bool) -> list[torch.Tensor]:
            return [fn(f, wts, idx, **w) for f, (wts, idx) in chain(pdl)]

        replays_match(lambda: layers(getattr(cme, form), True), lambda: layers(getattr(cme, warp), False),
                       chain.refresh, replays=3)


@pytest.mark.gpu
def test_gpu_pdl_copy_down_replayed_after_the_norm_and_router_gives_the_warp_downs_bits():
    """The copy-down pairs replayed in the step's chain: a warp that copied its rows from a stale expert id, or read
    the hidden vector before gate/up ended, gives the replay before's bits or NaN."""
    _replays_give_the_warp_downs_bits(_COPY_DOWN_PAIRS, 54)


@pytest.mark.gpu
def test_gpu_pdl_copy_down_past_its_shared_memory_runs_the_warp_down_by_its_policy(monkeypatch):
    """With DOWN_CP_SMEM_LIMIT below the block's shared memory the copy-down pairs run the warp down (the same bits)
    and their stated policy says so, naming the bytes; within it the policy names nothing."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import _policies
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    x, weights, ids, w = _moe_48b(56, dev)
    assert _policies.experts_cp_passes(x, weights, ids, **w) is None
    monkeypatch.setattr(cme, "DOWN_CP_SMEM_LIMIT", cme.down_cp_smem(8, 1024, 1024) - 1)
    assert "the warp down on the Q8 hidden vector" in _policies.experts_cp_passes(x, weights, ids, **w)
    for copy, warp in _COPY_DOWN_PAIRS:
        want = getattr(cme, warp)(x, weights, ids, **w)
        got = getattr(cme, copy)(x, weights, ids, **w)
        torch.cuda.synchronize()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), copy


#: the q8-loads pairs and the warp-down pairs whose bits they claim
_DOWN_LOADS_PAIRS = (("moe_experts_rowwarp_pdl_q8_hidden_ld", "moe_experts_rowwarp_pdl_q8_hidden"),
                     ("moe_experts_rowwarp_pdl_q8_pairs_ld", "moe_experts_rowwarp_pdl_q8_pairs"))


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["ids", "ahead", "l2pf"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_down_loads_give_the_warp_down_pairs_bits(dtype, form, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_q8_hidden_ld and _q8_pairs_ld claim the bits of cupy_rowwarp_pdl_q8_hidden and
    _q8_pairs: their down reads the slots' ids once a warp and shuffles each unit's, and (form "ahead") requests each
    round's hidden values a round early or (form "l2pf") asks for its later groups' weight lines in the L2 before its
    wait, with the warp down's products in its order. At the 48B's MoE shape (36
    super-blocks a warp in three groups), at K = 3 of 6 experts of 256 rows with a shared one, at K = 5 of 12 of 512
    rows without one, and at K = 33 of 40 (past DOWN_LD_MAX_K: the warp down by the stated policy), in each form: a
    unit given another slot's expert or weight, a round dotted with another's hidden values, or a lane's units out of
    order gives other bits."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    monkeypatch.setattr(cme, "DOWN_LD_FORM", form)
    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(57, dev), _moe_small(58, dev, 512, 256, 256, 6, 3), _moe_small(59, dev, 768, 512, 0, 12, 5),
            _moe_small(60, dev, 256, 256, 0, 40, cme.DOWN_LD_MAX_K + 1)]
    _pairs_give_their_bits(_DOWN_LOADS_PAIRS, sets, dtype)


def _down_form_refused_with_others(moe_set, dtype: torch.dtype, flag: str, match: str, *others: dict) -> None:
    """_launch_rowwarp refuses down form `flag` by name (`match`) before it launches anything, asked of the float
    copy+pdl pair or of the Q8 hidden pair together with each of `others` (another down form's flag)."""
    from sparkops_cupy import moe_experts as cme

    x, weights, ids, w = moe_set
    one = cme._one_token(x.to(dtype), weights, ids, *(w[n] for n in ("w_gate", "w_up", "w_down", "s_gate", "s_up",
                                                                      "s_down")))
    for forms in (dict(gateup="copy", pdl=True), *(dict(gateup="q8", pdl=True, q8_hidden=True, **o) for o in others)):
        with pytest.raises(BadInput, match=match):
            cme._launch_rowwarp(one, **{flag: True}, **forms)


#: the prefetching-down pair and the warp-down pair whose bits it claims
_DOWN_PREFETCH_PAIRS = (("moe_experts_rowwarp_pdl_q8_pairs_xpf", "moe_experts_rowwarp_pdl_q8_pairs"),)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_down_xpf_gives_the_pairs_bits(dtype):
    """moe_experts=cupy_rowwarp_pdl_q8_pairs_xpf claims cupy_rowwarp_pdl_q8_pairs' bits: its down prefetches every
    line of the hidden vector its lanes read, then reads and sums as the warp down does. At the 48B's MoE shape (36
    units a warp in three groups), at K = 3 of 6 experts of 256 rows with a shared one, and at K = 5 of 12 of 512 rows
    without one (units not a multiple of 4: lanes with fewer units). Asked of another down (the float one, the ld or
    the copy down) the prefetch is refused by name before anything is launched."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(62, dev), _moe_small(63, dev, 512, 256, 256, 6, 3), _moe_small(64, dev, 768, 512, 0, 12, 5)]
    _pairs_give_their_bits(_DOWN_PREFETCH_PAIRS, sets, dtype)
    _down_form_refused_with_others(sets[0], dtype, "xpf_down", "the prefetching down is the Q8 hidden forms' warp down",
                                   dict(ld_q8_down=True), dict(copy_q8_down=True))


@pytest.mark.gpu
def test_gpu_pdl_down_xpf_replayed_after_the_norm_and_router_gives_the_pairs_bits():
    """The prefetching down replayed in the step's chain: a line prefetched before gate/up had written it must not be
    read in its place (the prefetch comes after the wait), or the replay gives the replay before's bits, or NaN."""
    _replays_give_the_warp_downs_bits(_DOWN_PREFETCH_PAIRS, 65)


#: the L2-prefetching ids-once down's pair and the warp-down pair whose bits it claims
_DOWN_L2PF_PAIRS = (("moe_experts_rowwarp_pdl_q8_pairs_l2pf", "moe_experts_rowwarp_pdl_q8_pairs"),)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_down_l2pf_gives_the_pairs_bits(dtype, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf claims cupy_rowwarp_pdl_q8_pairs' bits: its down asks for its later
    groups' weight lines in the L2 before its wait, then loads and sums as the ids form does; its gate/up asks for the
    shared expert's rows there before its wait. At the 48B's MoE shape
    (36 units a warp: two later groups), at K = 3 of 6 experts of 256 rows with a shared one (one group: nothing to
    prefetch), at K = 5 of 12 of 512 rows without one, and at K = 33 of 40 (past DOWN_LD_MAX_K: the warp down by the
    stated policy); whatever DOWN_LD_FORM says (it names its form). A form named without the ld down, and the shared
    expert's prefetch asked of another gate/up, are refused by name before anything is launched."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    monkeypatch.setattr(cme, "DOWN_LD_FORM", "ahead")
    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(72, dev), _moe_small(73, dev, 512, 256, 256, 6, 3), _moe_small(74, dev, 768, 512, 0, 12, 5),
            _moe_small(75, dev, 256, 256, 0, 40, cme.DOWN_LD_MAX_K + 1)]
    _pairs_give_their_bits(_DOWN_L2PF_PAIRS, sets, dtype)
    x, weights, ids, w = sets[0]
    one = cme._one_token(x.to(dtype), weights, ids, *(w[n] for n in ("w_gate", "w_up", "w_down", "s_gate", "s_up",
                                                                      "s_down")))
    with pytest.raises(BadInput, match="names the ld down's form"):
        cme._launch_rowwarp(one, gateup="q8", pdl=True, q8_hidden=True, pairs=True, ld_form="l2pf")
    with pytest.raises(BadInput, match="the shared expert's L2 prefetch is written for the pairs gate/up"):
        cme._launch_rowwarp(one, gateup="q8", pdl=True, q8_hidden=True, ld_q8_down=True, shared_l2=True)


@pytest.mark.gpu
def test_gpu_pdl_down_l2pf_replayed_after_the_norm_and_router_gives_the_pairs_bits():
    """The L2-prefetching down replayed in the step's chain: its ids are read before the wait, once, so a stale id (the
    replay before's routing) gives other bits; a prefetched line is a request, never a value."""
    _replays_give_the_warp_downs_bits(_DOWN_L2PF_PAIRS, 76)


def _gate_up_groups_give_the_pairs_bits(pairs, seed: int, dtype):
    """The gate/up group forms' shapes (seeds seed .. seed + 4): the 48B's MoE (9 super-blocks a row: 3 a group), D =
    512 with K = 3 of 6 experts of 256 rows and a shared one (2 a row: a group empty), D = 768 with K = 5 of 12 of 512
    rows and none (one a group), D = 1280 (5: groups of 1, 2, 2, a lane's parity in a group not the group's start's)
    and D = 256 with K = 33 of 40 (one: two groups empty; past DOWN_LD_MAX_K, the warp down by the stated policy).
    Each pair's bits on all five; then the 48B's one-token arguments, for the caller's refusals."""
    from sparkops_cupy import moe_experts as cme

    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(seed, dev), _moe_small(seed + 1, dev, 512, 256, 256, 6, 3),
            _moe_small(seed + 2, dev, 768, 512, 0, 12, 5), _moe_small(seed + 3, dev, 1280, 512, 256, 8, 4),
            _moe_small(seed + 4, dev, 256, 256, 0, 40, cme.DOWN_LD_MAX_K + 1)]
    _pairs_give_their_bits(pairs, sets, dtype)
    x, weights, ids, w = sets[0]
    return cme._one_token(x.to(dtype), weights, ids, *(w[n] for n in ("w_gate", "w_up", "w_down", "s_gate", "s_up",
                                                                       "s_down")))


#: the grouped gate/up's pair and the warp-down pair whose bits it claims
_GU_GROUPED_PAIRS = (("moe_experts_rowwarp_pdl_q8_pairs_l2pf_grouped", "moe_experts_rowwarp_pdl_q8_pairs"),)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_gate_up_grouped_gives_the_pairs_bits(dtype):
    """moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_grouped claims cupy_rowwarp_pdl_q8_pairs' bits: its gate/up requests
    its rows' weights in GU_GROUPS commit groups of super-blocks and dots each as it lands, each lane's super-blocks
    in the same order. At the 48B's MoE shape (9 super-blocks a row: 3 a group), at D = 512 with K = 3 of 6 experts of
    256 rows and a shared one (2 super-blocks a row: a group empty), at D = 768 with K = 5 of 12 of 512 rows and none
    (one a group), at D = 1280 (5: groups of 1, 2, 2, a lane's parity in a group not the group's start's) and at
    D = 256 with K = 33 of 40 (one super-block: two groups empty; past DOWN_LD_MAX_K, the warp down by the stated
    policy, the grouped gate/up still). Another group count, or the groups asked of a gate/up without the shared
    expert's prefetch, are refused by name before anything is launched."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    one = _gate_up_groups_give_the_pairs_bits(_GU_GROUPED_PAIRS, 80, dtype)
    with pytest.raises(BadInput, match=r"the grouped gate/up is the L2-prefetching pairs gate/up's .* not 2"):
        cme._launch_rowwarp(one, gateup="q8", pdl=True, q8_hidden=True, pairs=True, ld_q8_down=True,
                            ld_form="l2pf", shared_l2=True, gu_groups=2)
    with pytest.raises(BadInput, match="the grouped gate/up is the L2-prefetching pairs gate/up's"):
        cme._launch_rowwarp(one, gateup="q8", pdl=True, q8_hidden=True, pairs=True, ld_q8_down=True, gu_groups=3)


@pytest.mark.gpu
def test_gpu_pdl_gate_up_grouped_replayed_after_the_norm_and_router_gives_the_pairs_bits():
    """The grouped gate/up replayed in the step's chain: each group is waited for by every thread before any reads it
    (a group dotted before it landed gives the replay before's rows, other bits, or NaN)."""
    _replays_give_the_warp_downs_bits(_GU_GROUPED_PAIRS, 85)


#: the streamed gate/up's pair and the warp-down pair whose bits it claims
_GU_STREAMED_PAIRS = (("moe_experts_rowwarp_pdl_q8_pairs_l2pf_streamed", "moe_experts_rowwarp_pdl_q8_pairs"),)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_gate_up_streamed_gives_the_pairs_bits(dtype):
    """moe_experts=cupy_rowwarp_pdl_q8_pairs_l2pf_streamed claims cupy_rowwarp_pdl_q8_pairs' bits: its gate/up requests
    only the first of its GU_DEPTH groups of super-blocks after the wait and each later group once the one before has
    landed, dotting each as it lands, each lane's super-blocks in the same order. The grouped form's five shapes
    (_gate_up_groups_give_the_pairs_bits: empty groups among them, so a group requested late may be empty too).
    Another (groups, ahead) pair is refused by name before anything is launched."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    one = _gate_up_groups_give_the_pairs_bits(_GU_STREAMED_PAIRS, 90, dtype)
    with pytest.raises(BadInput, match=r"the streamed gate/up's forms are \[\(3, 1\)\] .* not \(3, 2\)"):
        cme._launch_rowwarp(one, gateup="q8", pdl=True, q8_hidden=True, pairs=True, ld_q8_down=True,
                            ld_form="l2pf", shared_l2=True, gu_groups=3, gu_depth=2)


@pytest.mark.gpu
def test_gpu_pdl_gate_up_streamed_replayed_after_the_norm_and_router_gives_the_pairs_bits():
    """The streamed gate/up replayed in the step's chain: a group requested only after the one before has landed is
    still waited for by every thread before any reads it (read early, it holds the replay before's rows: other bits,
    or NaN)."""
    _replays_give_the_warp_downs_bits(_GU_STREAMED_PAIRS, 95)


#: the staged-down pair and the warp-down pair whose bits it claims
_DOWN_STAGED_PAIRS = (("moe_experts_rowwarp_pdl_q8_pairs_hs", "moe_experts_rowwarp_pdl_q8_pairs"),)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16], ids=["bf16", "fp32", "fp16"])
def test_gpu_pdl_down_staged_gives_the_pairs_bits(dtype, monkeypatch):
    """moe_experts=cupy_rowwarp_pdl_q8_pairs_hs claims cupy_rowwarp_pdl_q8_pairs' bits: its down copies the whole
    hidden vector into shared memory after its wait and reads every lane's share there. At the 48B's MoE shape (36
    units a warp in three groups, 18 KB of shared memory), at K = 3 of 6 experts of 256 rows with a shared one, at
    K = 5 of 12 of 512 rows without one (units not a multiple of 4: lanes with fewer units), and at K = 33 of 40 (past
    DOWN_LD_MAX_K: the warp down by the stated policy); then past DOWN_HS_SMEM_LIMIT, where the stated policy runs the
    warp down and says so. Asked of another down, the staged form is refused by name before anything is launched."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme
    from sparkops_cupy._policies import experts_hs_passes

    dev = torch.device("cuda", torch.cuda.current_device())
    sets = [_moe_48b(67, dev), _moe_small(68, dev, 512, 256, 256, 6, 3), _moe_small(69, dev, 768, 512, 0, 12, 5),
            _moe_small(70, dev, 256, 256, 0, 40, cme.DOWN_LD_MAX_K + 1)]
    _pairs_give_their_bits(_DOWN_STAGED_PAIRS, sets, dtype)
    x, weights, ids, w = sets[0]
    assert experts_hs_passes(x, weights, ids, **w) is None
    monkeypatch.setattr(cme, "DOWN_HS_SMEM_LIMIT", cme.down_hs_smem(8, 1024, 1024) - 1)
    assert "over DOWN_HS_SMEM_LIMIT" in experts_hs_passes(x, weights, ids, **w)
    _pairs_give_their_bits(_DOWN_STAGED_PAIRS, sets[:1], dtype)
    _down_form_refused_with_others(sets[0], dtype, "hs_down", "the staged down is the Q8 hidden forms'",
                                   dict(ld_q8_down=True), dict(xpf_down=True))


@pytest.mark.gpu
def test_gpu_pdl_down_staged_replayed_after_the_norm_and_router_gives_the_pairs_bits():
    """The staged down replayed in the step's chain: its copy of the hidden vector comes after the wait, so a replay
    never dots the vector of the replay before (which would give that replay's bits, or NaN)."""
    _replays_give_the_warp_downs_bits(_DOWN_STAGED_PAIRS, 71)


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["ids", "ahead", "l2pf"])
def test_gpu_pdl_down_loads_replayed_after_the_norm_and_router_give_the_warp_downs_bits(form, monkeypatch):
    """The q8-loads pairs replayed in the step's chain, in each form: their ids are read before the PDL wait, once,
    so a stale id (the replay before's routing) gives other bits."""
    pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")
    from sparkops_cupy import moe_experts as cme

    monkeypatch.setattr(cme, "DOWN_LD_FORM", form)
    _replays_give_the_warp_downs_bits(_DOWN_LOADS_PAIRS, 61)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gpu_pdl_router_after_a_triggering_norm_gives_cupy_rowwarp_s_bits(dtype):
    """moe_router=cupy_rowwarp_pdl against cupy_rowwarp at the 48B's router (2304 x 256 float32, top-8): eagerly, then
    three layers' norm-and-router pairs (add_rmsnorm=triton_pdl lets the router be scheduled as it starts; the router
    requests its weight rows, then waits) replayed from one graph with a new residual, weights NaN and ids -1 before
    every replay: a router that read x before its norm ended routes the replay before's token or NaN."""
    pytest.importorskip("triton")
    from sparkops_cupy import moe_router as cmr

    dev = torch.device("cuda", torch.cuda.current_device())
    chain = _NormRouterLayers(dev, 12, 256, dtype)
    x = torch.randn(1, chain.d, generator=chain.g).to(dev, dtype)
    want = cmr.moe_router_rowwarp(x, chain.routers[0], chain.biases[0], **chain.route)
    got = cmr.moe_router_rowwarp_pdl(x, chain.routers[0], chain.biases[0], **chain.route)
    torch.cuda.synchronize()
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])

    def layers(pdl: bool) -> list[torch.Tensor]:
        return [o for _, routed in chain(pdl) for o in routed]

    refresh = chain.refresh
    refresh()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layers(True)  # compiled, warmed and the counters made outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            outs = layers(True)
        for replay in range(4):
            refresh()
            wants = layers(False)
            for o in outs:
                o.fill_(float("nan") if o.is_floating_point() else -1)
            graph.replay()
            torch.cuda.synchronize()
            for i, (o, w) in enumerate(zip(outs, wants)):
                assert torch.equal(o, w), f"replay {replay}: output {i} differs"
        assert not cmr.pool_on(dev).any(), "a launch left an arrival counter above zero"
    finally:
        graph.reset()

