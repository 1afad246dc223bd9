"""Every Triton kernel of the plugin compiles for the H200 (sm_90) - on this CPU-only machine, no GPU needed -
with no register spills, at the 48B shapes and as the host code launches it.

The interpreter tests prove the arithmetic but not that the compiler accepts a kernel (a variable
redefined with another shape in one branch, say) nor what it costs in registers. Here each op's
host function runs on CPU tensors with kernel launches replaced by compile-only calls (Triton's own
binder and compiler, target sm_90), and ptxas' resource report (cuobjdump, shipped with Triton) must
show no stack frame (spilled registers live there). The prefetching router GEMV (moe_router=triton_prefetch)
must also keep its schedule: in its SASS every load of the D loop comes before the first FFMA (ptxas sinks
them back without the launch's .maxnreg). Slow the first time (compiling ~30 kernels takes a minute or two);
Triton's cache makes reruns quick.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (pip install sparkops[gpu])")

from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile as triton_compile, make_backend  # noqa: E402
from triton.runtime import jit as triton_jit  # noqa: E402

pytestmark = pytest.mark.slow

TARGET = GPUTarget("cuda", 90, 32)  # H100 / H200
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
BF = torch.bfloat16


@contextlib.contextmanager
def compile_only(compiled: dict):
    """Kernel launches compile for TARGET (recorded in `compiled`) instead of running; CPU tensors pass the
    host code's device check."""
    from sparkops_triton import _runtime

    def run(self, *args, grid, warmup, **kwargs):
        kwargs["debug"] = kwargs.get("debug", self.debug) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        backend = make_backend(TARGET)
        binder = triton_jit.create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = self._pack_args(backend, kwargs, bound, specialization, options)
        key = (self.fn.__qualname__, str(constexprs), options.num_warps, options.num_stages)
        if key not in compiled:
            compiled[key] = triton_compile(ASTSource(self, signature, constexprs, attrs), target=TARGET,
                                           options=options.__dict__)

    real_run, real_interpreting = triton_jit.JITFunction.run, _runtime.interpreting
    triton_jit.JITFunction.run = run
    _runtime.interpreting = lambda: True  # only the device check reads it: CPU tensors are accepted
    try:
        yield
    finally:
        triton_jit.JITFunction.run = real_run
        _runtime.interpreting = real_interpreting


def stack_bytes(kernel) -> int:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        report = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True,
                                check=True).stdout
    return int(re.search(r"STACK:(\d+)", report).group(1))


def sass_functions(kernel) -> dict:
    """The kernel's SASS, function by function (tests/cuda_sass.py: nvdisasm, shipped with Triton)."""
    from tests.cuda_sass import nvdisasm, parse

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return parse(subprocess.run([nvdisasm(), f.name], capture_output=True, text=True, check=True).stdout)


def sass_opcodes(kernel) -> list[str]:
    """The kernel's SASS instructions' opcodes (predicates dropped), in program order."""
    return [ins.opcode for fn in sass_functions(kernel).values() for ins in fn.instructions]


def pdl_loads_before_wait(kernel) -> list:
    """The read-only loads (ld.global.nc) of a PDL kernel's SASS that some path reaches before its wait (ACQBULK):
    tests/cuda_sass.py, which also checks the CuPy kernels (tests/test_cuda_pdl_order.py, where GPU session 21's
    race is)."""
    functions = [fn for fn in sass_functions(kernel).values() if fn.waits]
    assert functions, "the PDL kernel's listing holds no griddepcontrol.wait (ACQBULK)"
    return [load for fn in functions for load in fn.loads_before_wait()]


#: kernels whose small stack frame is known, measured and kept: kernel -> the most bytes allowed
KNOWN_FRAMES = {
    # kda_norm = triton_split / triton_split_pdl (kda's kernel with NORM): 8 bytes (two STL, two LDL.LU a thread in
    # its SASS), found when this test first compiled it (session 22). It was timed as it is: 5.90 us a KDA layer on
    # the H200 against the unfused chain's 6.88 (session 22), and it is the step's kda_norm
    "_kda_recurrent_kernel": 8,
}


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def launch_every_kernel():
    """Each op's host function at the 48B shapes: decode and prefill sizes, every path."""
    from sparkops_triton import (add_rmsnorm, attention, attention_splitk, gated_rmsnorm, kda, kda_chunked,
                                 moe_router, rmsnorm, sample, short_conv)

    for t in (1, 64):
        rmsnorm.rmsnorm(r(t, 2304, dtype=BF), r(2304), 1e-5)
        add_rmsnorm.add_rmsnorm(r(t, 2304, dtype=BF), r(t, 2304, dtype=BF), r(2304), 1e-5)
        gated_rmsnorm.gated_rmsnorm(r(t, 32, 128, dtype=BF), r(t, 32, 128, dtype=BF), r(128), 1e-5)
        short_conv.short_conv(r(t, 4096, dtype=BF), r(4096, 4), r(3, 4096))
        moe_router.moe_router(r(t, 2304, dtype=BF), r(256, 2304), r(256), 8, 1, 1, 2.446, 1e-20)
        moe_router.moe_router_lastblock(r(t, 2304, dtype=BF), r(256, 2304), r(256), 8, 1, 1, 2.446, 1e-20)
    for t, d in ((1, 2304), (8, 2304), (1, 4096)):  # "triton_prefetch": all loads up front; 4096: 8 tiles, the cap
        moe_router.moe_router_prefetch(r(t, d, dtype=BF), r(256, d), r(256), 8, 1, 1, 2.446, 1e-20)
    for t in (1, 128):
        args = [r(t, 32, 128, dtype=BF) for _ in range(4)] + [r(t, 32, dtype=BF), -r(32).exp(), r(4096),
                                                               r(32, 128, 128), 128 ** -0.5, 1e-6]
        kda.kda(*args)
        kda_chunked.kda_chunked(*args)
        kda_chunked.kda_chunked_split(*args)
        kda_chunked.kda_chunked_split_tf32(*args)
        kda_chunked.kda_chunked_split_tf32_bf16scratch(*args)
    for t in (1, 100):
        args = (r(t, 32, 192, dtype=BF), r(t, 576, dtype=BF), r(256, 576, dtype=BF), torch.tensor([3]),
                r(32, 128, 512), r(32, 128, 512), 192 ** -0.5)
        attention.attention(*args)
        attention_splitk.attention_splitk(*args)
        if t == 1:  # "triton_splitk_wide": the wide combine (and the split kernel's SKIP_EMPTY), at the interpreter's
            attention_splitk.attention_splitk_wide(*args)  # 4 splits and at the H200's 132 (NS: the max unrolled)
            real_sm_count = attention_splitk.sm_count
            attention_splitk.sm_count = lambda device: 132
            try:
                attention_splitk.attention_splitk_wide(*args)
            finally:
                attention_splitk.sm_count = real_sm_count
        fp32_args = (r(t, 32, 192), r(t, 576), r(256, 576), torch.tensor([3]), r(32, 128, 512), r(32, 128, 512),
                     192 ** -0.5)  # a float32 run: float32 activations and cache, tf32x3 dots
        attention_splitk.attention_splitk_fp32(*fp32_args)
    logits, step = r(1, 163840), torch.tensor([3])
    for temperature, top_k, top_p in ((0.0, 0, 1.0), (0.8, 0, 1.0), (0.8, 50, 0.9), (0.8, 0, 0.9), (0.8, 500, 1.0)):
        sample.sample(logits, temperature, top_k, top_p, 1, step)


def launch_trigger_norms(monkeypatch):
    """The norms that let the next kernel start (add_rmsnorm, gated_rmsnorm, kda_norm = triton_pdl; add_rmsnorm =
    triton_pdl_wait and kda_norm = triton_split_pdl, launched with PDL too; short_conv = triton_pdl), as the GPU
    compiles them (griddepcontrol in:
    they only leave it out in the interpreter); the KDA ones at the 48B's decode shape (32 heads of 128)."""
    from sparkops_triton import add_rmsnorm, gated_rmsnorm, kda_norm

    for mod in (add_rmsnorm, gated_rmsnorm, kda_norm):
        monkeypatch.setattr(mod, "interpreting", lambda: False)
    add_rmsnorm.add_rmsnorm_trigger(r(1, 2304, dtype=BF), r(1, 2304, dtype=BF), r(2304), 1e-5)
    add_rmsnorm.add_rmsnorm_wait(r(1, 2304, dtype=BF), r(1, 2304, dtype=BF), r(2304), 1e-5)  # launched with PDL
    gated_rmsnorm.gated_rmsnorm_trigger(r(1, 32, 128, dtype=BF), r(1, 32, 128, dtype=BF), r(128), 1e-5)
    h, d = 32, 128
    step = dict(q=r(1, h, d, dtype=BF), k=r(1, h, d, dtype=BF), v=r(1, h, d, dtype=BF), g=r(1, h, d, dtype=BF),
                beta=r(1, h, dtype=BF), a=r(h), dt_bias=r(h * d), scale=d ** -0.5, l2_eps=1e-6,
                gate=r(1, h, d, dtype=BF), weight=r(d), eps=1e-5)
    kda_norm.kda_norm_trigger(**step, state=r(h, d, d))
    kda_norm.kda_norm_split_pdl(**step, state=r(h, d, d))
    # kda_lowrank_norm: the decay logits and the gate from f_a's and g_a's codes through the F16 up-projections
    # (rank 128), plain (triton_split) and launched with PDL (triton_split_pdl)
    from gguf import GGMLQuantizationType as Q

    from sparkops.qweight import QWeight
    from sparkops_triton import kda_lowrank_norm

    monkeypatch.setattr(kda_lowrank_norm, "interpreting", lambda: False)
    up = {n: QWeight(r(h * d, d, dtype=torch.float16), Q.F16, (h * d, d), name=n) for n in ("f_b", "g_b")}
    low = dict({k: v for k, v in step.items() if k not in ("g", "gate")}, f=r(1, d, dtype=BF), ga=r(1, d, dtype=BF),
               **up)
    kda_lowrank_norm.kda_lowrank_norm_split(**low, state=r(h, d, d))
    kda_lowrank_norm.kda_lowrank_norm_split_pdl(**low, state=r(h, d, d))
    # short_conv=triton_pdl at the fused q/k/v conv (12288 channels): one token (the window and taps before the
    # wait), and a prefill chunk (the wait first); widths 2 and 3 too, where the prefetched taps' block (W_TAPS) and
    # the window's rows (W_POW2) differ in size - GPU session 25's contract case at W=3 found a variable the two
    # blocks shared, which width 4 (both 4 rows) compiles
    from sparkops_triton import short_conv

    monkeypatch.setattr(short_conv, "interpreting", lambda: False)
    for t in (1, 64):
        short_conv.short_conv_pdl(r(t, 3 * 4096, dtype=BF), r(3 * 4096, 4), r(3, 3 * 4096))
    for w in (2, 3):
        short_conv.short_conv_pdl(r(1, 128, dtype=BF), r(128, w), r(w - 1, 128))
    # short_conv_kda_norm: the merged q/k/v conv in kda_norm=triton_split's grid, plain and with PDL (the state, taps
    # and window before the wait), at one token and the engine's limit of 8; widths 2 and 3 (the taps' and the
    # window's blocks then differ from 4 rows)
    from sparkops_triton import short_conv_kda_norm

    monkeypatch.setattr(short_conv_kda_norm, "interpreting", lambda: False)
    fused = {k: v for k, v in step.items() if k not in ("q", "k", "v")}
    for t, w in ((1, 4), (8, 4), (1, 2), (1, 3)):
        call = dict(fused, g=r(t, h, d, dtype=BF), beta=r(t, h, dtype=BF), gate=r(t, h, d, dtype=BF),
                    x=r(t, 3 * h * d, dtype=BF), conv_weight=r(3 * h * d, w))
        short_conv_kda_norm.short_conv_kda_norm_split(**call, window=r(w - 1, 3 * h * d), state=r(h, d, d))
        short_conv_kda_norm.short_conv_kda_norm_split_pdl(**call, window=r(w - 1, 3 * h * d), state=r(h, d, d))


def launch_lastblock_kernels(monkeypatch):
    """The last-block GEMVs (`_arrival`) as the 48B decode launches them: split-K on the H200's 132 SMs."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.qweight import QWeight
    from sparkops_triton import linear, moe_experts

    monkeypatch.setattr(linear, "sm_count", lambda device: 132)
    for mod in (linear, moe_experts):  # the GPU's configuration (PTX decoders, row tiles), however imported
        monkeypatch.setattr(mod, "interpreting", lambda: False)

    def q4k(*shape):  # zero blocks: only the shapes matter when compiling
        return QWeight(torch.zeros(*shape[:-1], shape[-1] // 256 * 144, dtype=torch.uint8), Q.Q4_K, shape)

    w = q4k(2304, 4096)  # o_proj: 36 row tiles at T=1, so K is split
    for t in (1, 8):
        linear.linear_lastblock(r(t, 4096, dtype=BF), w)
        linear.linear_pdl(r(t, 4096, dtype=BF), w)  # the same GEMV with PDL (griddepcontrol, launch_pdl)
    linear.linear_pdl(r(1, 4096, dtype=BF), q4k(163840, 4096))  # PDL without a split (no counters)
    e, f, d = 4, 1024, 2304
    moe_experts.moe_experts_lastblock(r(1, d, dtype=BF), r(1, 2), torch.tensor([[0, 1]]), q4k(e, f, d), q4k(e, f, d),
                                      q4k(e, d, f), q4k(f, d), q4k(f, d), q4k(d, f))
    for t in (1, 8):  # "triton_flat": the flat Q4_K GEMV form (its loops must hold no barrier, see the test)
        linear.linear_flat(r(t, 4096, dtype=BF), w)
        moe_experts.moe_experts_flat(r(t, d, dtype=BF), r(t, 2), torch.tensor([[0, 1]] * t), q4k(e, f, d),
                                     q4k(e, f, d), q4k(e, d, f), q4k(f, d), q4k(f, d), q4k(d, f))
    linear.linear_flat(r(1, 2304, dtype=BF), q4k(163840, 2304))
    for depth in (2, 3):  # "triton_prefetch": deeper weight streams (depth 1 is the last-block kernels above)
        monkeypatch.setattr(linear, "FETCH_DEPTH", depth)
        monkeypatch.setattr(moe_experts, "FETCH_DEPTH", depth)
        for t in (1, 8):
            linear.linear_prefetch(r(t, 4096, dtype=BF), w)
        linear.linear_prefetch(r(1, 2304, dtype=BF), q4k(163840, 2304))  # the lm_head's shape: 9 chunks a program
        for t in (1, 8):
            moe_experts.moe_experts_prefetch(r(t, d, dtype=BF), r(t, 2), torch.tensor([[0, 1]] * t), q4k(e, f, d),
                                             q4k(e, f, d), q4k(e, d, f), q4k(f, d), q4k(f, d), q4k(d, f))


def launch_q6k_gemvs(monkeypatch):
    """The Q6_K GEMVs with both fetches (byte loads; linear.Q6K_WIDE_LOADS' 16-bit words): the lm_head (163840 x 2304)
    and a layer-sized 4096 x 2304 (split-K on 132 SMs) at T = 1 and 8, and the MoE decode with Q6_K down weights."""
    from gguf import GGMLQuantizationType as Q

    from sparkops.qweight import QWeight
    from sparkops_triton import linear, moe_experts

    monkeypatch.setattr(linear, "sm_count", lambda device: 132)
    for mod in (linear, moe_experts):
        monkeypatch.setattr(mod, "interpreting", lambda: False)

    def blocks(qtype, nbytes, *shape):  # never read (compile only): uninitialized is enough
        return QWeight(torch.empty(*shape[:-1], shape[-1] // 256 * nbytes, dtype=torch.uint8), qtype, shape)

    e, f, d = 4, 1024, 2304
    for wide in (False, True):
        monkeypatch.setattr(linear, "Q6K_WIDE_LOADS", wide)
        for out in (163840, 4096):
            w = blocks(Q.Q6_K, 210, out, 2304)
            for t in (1, 8):
                linear.linear(r(t, 2304, dtype=BF), w)
        moe_experts.moe_experts(r(1, d, dtype=BF), r(1, 2), torch.tensor([[0, 1]]), blocks(Q.Q4_K, 144, e, f, d),
                                blocks(Q.Q4_K, 144, e, f, d), blocks(Q.Q6_K, 210, e, d, f), blocks(Q.Q4_K, 144, f, d),
                                blocks(Q.Q4_K, 144, f, d), blocks(Q.Q6_K, 210, d, f))


def launch_dequantize(monkeypatch):
    """"triton_dqmm"'s whole-weight decode to bfloat16 for every type at the 48B's expert stacks and the lm_head."""
    from gguf import GGMLQuantizationType as Q

    from sparkops_triton import dequantize, linear

    monkeypatch.setattr(linear, "interpreting", lambda: False)
    unit = {Q.Q4_K: 144, Q.Q6_K: 210, Q.Q8_0: 34 * 8, Q.IQ1_S: 50}
    for qtype, nbytes in unit.items():  # never read (compile only): uninitialized is enough
        raw = torch.empty(4, 1024, 2304 // 256 * nbytes, dtype=torch.uint8)
        grid = torch.empty(2048 * 4, dtype=torch.int32)  # IQ1_S's table (int32 words; any pointer for the others)
        dequantize.dequantize_bf16(raw, qtype, grid, 2304)
    for dtype, qtype in ((torch.bfloat16, Q.BF16), (torch.float16, Q.F16), (torch.float32, Q.F32)):
        dequantize.dequantize_bf16(torch.empty(64, 2304, dtype=dtype), qtype, torch.empty(1), 2304)


def launch_moe_glue():
    """"triton_dqmm_fused"'s element-wise kernels at a 16384-token chunk of the 48B (top-8: 131072 slots), bf16 and
    float32 outputs, with and without the shared expert's rows."""
    from sparkops_triton import moe_glue

    n, t, f, d = 131072, 16384, 1024, 2304
    moe_glue.swiglu_pairs(torch.empty(n, 2 * f, dtype=BF))
    for out_dtype in (BF, torch.float32):
        for add in (None, torch.empty(t, d)):
            moe_glue.combine_slots(torch.empty(n, d, dtype=BF), torch.zeros(t, 8, dtype=torch.int64), torch.empty(t, 8),
                                   torch.zeros(t, dtype=torch.bool), torch.empty(t, d, dtype=out_dtype), add=add)


def loop_barriers(ptx: str) -> list[int]:
    """bar.sync count of each loop body of a PTX listing (a backward branch to a label: the body in between)."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\$L__BB\d+_\d+):", line.strip()))}
    counts = []
    for i, line in enumerate(lines):
        m = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if m and labels.get(m.group(1), i) < i:
            counts.append(sum("bar.sync" in x for x in lines[labels[m.group(1)]:i]))
    return counts


def test_every_kernel_compiles_for_sm90_without_spills(monkeypatch):
    compiled: dict = {}
    with compile_only(compiled):
        launch_every_kernel()
        launch_trigger_norms(monkeypatch)
        launch_lastblock_kernels(monkeypatch)
        launch_q6k_gemvs(monkeypatch)
        launch_dequantize(monkeypatch)
        launch_moe_glue()
    from sparkops_triton._dequant import Q6_K_WIDE

    wide = {k[0] for k in compiled if f"): {int(Q6_K_WIDE.value)}," in k[1]}  # a constexpr (QTYPE) of that value
    assert wide == {"_gemv_kernel", "_moe_down_kernel"}, f"the Q6_K word-load GEMVs were not all compiled: {wide}"
    pdl = {k: v for k, v in compiled.items() if v.metadata.launch_pdl}
    assert pdl and {k[0] for k in pdl} == {"_gemv_kernel", "_kda_recurrent_kernel", "_kda_lowrank_kernel",
                                           "_short_conv_kernel", "_conv_kda_kernel", "_add_rmsnorm_kernel"}, \
        f"the PDL GEMVs, KDA norms and short conv were not compiled: {sorted(pdl)}"
    triggering = set()
    for k, v in compiled.items():  # PDL kernels wait once and then let the next kernel launch; the triggering norms
        ptx = v.asm["ptx"]        # (launched plainly) only let the next one launch, first thing; no other kernel does
        wait, trigger = ptx.find("griddepcontrol.wait"), ptx.find("griddepcontrol.launch_dependents")
        if k in pdl:
            assert ptx.count("griddepcontrol.wait") == 1 and 0 <= wait < trigger, f"{k[0]}: PDL instructions {k[1]}"
            assert "atom.global" not in ptx[:wait] and "st.global" not in ptx[:wait], f"{k[0]}: writes before the wait"
            early = pdl_loads_before_wait(v)  # the PTX's order is not the machine's: ptxas may hoist read-only loads
            assert not early, f"{k[0]}: {len(early)} read-only loads can run before griddepcontrol.wait {k[1]}"
        elif trigger >= 0:
            triggering.add(k[0])
            assert wait < 0 and "ld.global" not in ptx[:trigger], f"{k[0]}: the trigger is not first {k[1]}"
        else:
            assert wait < 0, f"{k[0]} was not launched with PDL but waits on griddepcontrol: {k[1]}"
    want = {"_add_rmsnorm_kernel", "_gated_rmsnorm_kernel", "_kda_norm_kernel"}
    assert triggering == want, f"triggering kernels: {sorted(triggering)}"
    # the fused conv adds its few loads and FMAs to the recurrence, not barriers: session 33's first form picked each
    # tap and window row out of a [4, N] block by a masked sum across threads, 95 bar.sync against the recurrence's
    # 22, and ran 11.1 us in the step where the recurrence ran 6.3
    bars = {k: v.asm["ptx"].count("bar.sync") for k, v in compiled.items()
            if k[0] in ("_conv_kda_kernel", "_kda_recurrent_kernel")}
    recurrence = max(n for k, n in bars.items() if k[0] == "_kda_recurrent_kernel")
    fused = {k[1][:60]: n for k, n in bars.items() if k[0] == "_conv_kda_kernel"}
    assert fused and all(n <= recurrence + 8 for n in fused.values()), (recurrence, fused)
    from sparkops_triton._dequant import Q4_K_FLAT

    # the flat Q4_K GEMVs exist to keep layout changes (shared memory and a barrier each) out of the chunk loop: the
    # byte-form Q4_K GEMV's loop has 16 barriers (session 7's count); the flat ones must have none
    flat = {k: v for k, v in compiled.items() if f"): {int(Q4_K_FLAT.value)}," in k[1]}
    assert {k[0] for k in flat} == {"_gemv_kernel", "_moe_up_kernel", "_moe_down_kernel"}, sorted(flat)
    for k, v in flat.items():
        loops = loop_barriers(v.asm["ptx"])
        assert loops and not any(loops), f"{k[0]} (flat Q4_K) has barriers in its loops: {loops} {k[1]}"
    byte_form = [v for k, v in compiled.items() if k[0] == "_gemv_kernel" and "): 12," in k[1]]  # QTYPE Q4_K
    assert byte_form and all(any(loop_barriers(v.asm["ptx"])) for v in byte_form), "the barrier count sees nothing"
    deep = {k[0] for k in compiled if "): 3" in k[1] and k[0] in ("_gemv_kernel", "_moe_up_kernel", "_moe_down_kernel")}
    assert deep == {"_gemv_kernel", "_moe_up_kernel", "_moe_down_kernel"}, f"depth-3 GEMVs not all compiled: {deep}"
    from sparkops_triton.moe_router import _logits_gemv_kernel

    on = f"({_logits_gemv_kernel.arg_names.index('PREFETCH')},): True"
    router = {k: v for k, v in compiled.items() if k[0] == "_logits_gemv_kernel" and on in k[1]}
    assert len(router) == 2, f"the prefetching router GEMVs (D = 2304 and 4096) were not compiled: {sorted(router)}"
    for k, v in router.items():  # up to the cross-warp reduction's first barrier, no global load after the first FFMA
        ops = sass_opcodes(v)
        gemv = ops[:next(i for i, o in enumerate(ops) if o.startswith("BAR"))]
        first = next(i for i, o in enumerate(gemv) if o == "FFMA")
        late = [o for o in gemv[first:] if o.startswith("LDG")]
        assert not late, f"router GEMV {k[1]}: {len(late)} loads issued after the first multiply (ptxas sank them)"
    names = {key[0] for key in compiled}
    assert len(names) >= 20, sorted(names)  # every op's kernels were reached
    dq = {k[1] for k in compiled if k[0] == "_dequant_kernel"}
    assert len(dq) == 7, f"the whole-weight decode was not compiled for every type: {sorted(dq)}"
    split = {"_split_norms_kernel", "_split_products_kernel", "_split_inverse_kernel", "_split_wu_kernel"}
    assert split <= {k[0] for k in compiled}, "kda=triton_chunked_split's prepare kernels were not all compiled"
    tf32 = {k[0] for k in compiled if k[0] in split and "'tf32'" in k[1]}
    assert tf32 == split - {"_split_norms_kernel"}, f"kda=triton_chunked_split_tf32's tf32 kernels: {sorted(tf32)}"
    glue = [k for k in compiled if k[0] in ("_swiglu_pairs_kernel", "_combine_slots_kernel")]
    assert len(glue) == 3, f"the fused MoE glue kernels were not all compiled: {sorted(glue)}"  # HAS_ADD both ways
    spills = {f"{k[0]} (warps {k[2]}, stages {k[3]})": n for k, v in compiled.items()
              if (n := stack_bytes(v)) > KNOWN_FRAMES.get(k[0], 0)}
    assert not spills, f"kernels with a stack frame (spilled registers), bytes: {spills}"
    too_big = {k[0]: v.metadata.shared for k, v in compiled.items() if v.metadata.shared > 227 * 1024}
    assert not too_big, f"kernels asking for more shared memory than an H200 SM has (227 KiB): {too_big}"
