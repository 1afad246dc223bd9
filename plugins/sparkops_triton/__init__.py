"""The Triton backend: GPU kernels written in Triton, one module per op (`sparkops_triton/<op>.py`).

Registered through the public hook like any outside plugin. Triton itself is imported lazily, so
the catalog loads (and says why these kernels cannot run) on a machine without Triton.

Where they run:
  TRITON_INTERPRET=1            devices ("cpu",): Triton's interpreter runs the kernels on CPU tensors
                                (slow; CI checks the kernels this way on small shapes)
  a CUDA device                 devices ("cuda",)
  neither, or no triton         registered as unavailable, with the reason
"""

from __future__ import annotations

from sparkops.plugins import bit_identical, hookimpl, tolerance

from ._runtime import availability

#: (op, implementation name, "module:function", claim, kernel sources). The function's own module is
#: always hashed by the gate; `sources` adds the other files (relative to this package) whose bytes
#: define the kernel, so editing a shared helper invalidates the check record too.
IMPLEMENTATIONS = [
    ("rmsnorm", "triton", "sparkops_triton.rmsnorm:rmsnorm", tolerance(), ("_runtime.py",)),
    ("add_rmsnorm", "triton", "sparkops_triton.add_rmsnorm:add_rmsnorm", tolerance(), ("_runtime.py", "rmsnorm.py")),
    # the same kernel letting the next kernel of the stream be scheduled as it starts (programmatic dependent launch:
    # a PDL-launched projection after it requests its weights while it runs): the same bits
    ("add_rmsnorm", "triton_pdl", "sparkops_triton.add_rmsnorm:add_rmsnorm_trigger", bit_identical(to="triton"),
     ("_runtime.py", "rmsnorm.py")),
    # that launched as a PDL dependent itself: it may start while the kernel before runs, requests the gain, then
    # waits for it (the launch and the gain's round trip leave the chain): the same bits
    ("add_rmsnorm", "triton_pdl_wait", "sparkops_triton.add_rmsnorm:add_rmsnorm_wait", bit_identical(to="triton"),
     ("_runtime.py", "rmsnorm.py")),
    ("gated_rmsnorm", "triton", "sparkops_triton.gated_rmsnorm:gated_rmsnorm", tolerance(), ("_runtime.py",)),
    # the same kernel letting the next kernel (KDA's o_proj, launched with PDL) be scheduled as it starts: same bits
    ("gated_rmsnorm", "triton_pdl", "sparkops_triton.gated_rmsnorm:gated_rmsnorm_trigger", bit_identical(to="triton"),
     ("_runtime.py",)),
    ("short_conv", "triton", "sparkops_triton.short_conv:short_conv", tolerance(), ("_runtime.py",)),
    # the same launched with PDL: the next kernel let start at once, and at one token the window and taps requested
    # before the wait for the kernel before (x): the same bits
    ("short_conv", "triton_pdl", "sparkops_triton.short_conv:short_conv_pdl", bit_identical(to="triton"),
     ("_runtime.py",)),
    # silu(gate) * up in one launch (torch's is five at decode: casts, silu, product, cast back)
    ("swiglu", "triton", "sparkops_triton.swiglu:swiglu", tolerance(), ("_runtime.py",)),
    ("kda", "triton", "sparkops_triton.kda:kda", tolerance(), ("_runtime.py", "_arrival.py")),
    # kda then gated_rmsnorm in one kernel, a program a head (the decode fusion); "triton_pdl" lets the next kernel
    # (KDA's o_proj, launched with PDL) be scheduled as it starts: the same bits
    ("kda_norm", "triton", "sparkops_triton.kda_norm:kda_norm", tolerance(), ("_runtime.py", "kda.py")),
    ("kda_norm", "triton_pdl", "sparkops_triton.kda_norm:kda_norm_trigger", bit_identical(to="triton"),
     ("_runtime.py", "kda.py")),
    # kda's kernel and grid (a head over D / 32 programs), the norm by each head's last program to arrive (arrival
    # counters)
    ("kda_norm", "triton_split", "sparkops_triton.kda_norm:kda_norm_split", tolerance(),
     ("_runtime.py", "kda.py", "_arrival.py")),
    # the same launched with PDL: its state requested while the kernel before it finishes, then KDA's o_proj
    # (launched with PDL) let start: the same bits
    ("kda_norm", "triton_split_pdl", "sparkops_triton.kda_norm:kda_norm_split_pdl",
     bit_identical(to="triton_split"), ("_runtime.py", "kda.py", "_arrival.py")),
    # kda_norm=triton_split's grid forming the decay logits and the output gate itself from f_a's and g_a's codes (the
    # two low-rank up-projections f_b, g_b: two GEMV launches a KDA layer fewer at decode)
    ("kda_lowrank_norm", "triton_split", "sparkops_triton.kda_lowrank_norm:kda_lowrank_norm_split", tolerance(),
     ("_runtime.py", "kda.py", "_arrival.py")),
    # the same launched with PDL (its state requested while the kernel before it finishes): the same bits
    ("kda_lowrank_norm", "triton_split_pdl", "sparkops_triton.kda_lowrank_norm:kda_lowrank_norm_split_pdl",
     bit_identical(to="triton_split"), ("_runtime.py", "kda.py", "_arrival.py")),
    # kda_norm=triton_split's grid convolving its own q, k and v from the projected q|k|v row (the merged short conv:
    # one launch a KDA layer fewer at decode), the head's last program rolling its q/k window rows
    ("short_conv_kda_norm", "triton_split", "sparkops_triton.short_conv_kda_norm:short_conv_kda_norm_split",
     tolerance(), ("_runtime.py", "kda.py", "_arrival.py")),
    # the same launched with PDL (its state, taps and window requested while the kernel before it finishes): the same
    # bits
    ("short_conv_kda_norm", "triton_split_pdl", "sparkops_triton.short_conv_kda_norm:short_conv_kda_norm_split_pdl",
     bit_identical(to="triton_split"), ("_runtime.py", "kda.py", "_arrival.py")),
    ("kda", "triton_chunked", "sparkops_triton.kda_chunked:kda_chunked", tolerance("bf16"),
     ("_runtime.py", "kda.py")),
    # "triton_chunked_split": the prepare kernel's phases as four launches over 4x the programs; the same helpers in
    # the same order, bitwise the one-kernel form in the interpreter but not compiled (session 11, H200), so it claims
    # the tolerance, not bit-identity
    ("kda", "triton_chunked_split", "sparkops_triton.kda_chunked:kda_chunked_split", tolerance("bf16"),
     ("_runtime.py", "kda.py")),
    # "triton_chunked_split_tf32": the split form with the prepare phases' small products on plain tf32 tensor-core
    # dots (session 12's tune study: 0.85x its time a layer at T=32768, nmse 2.3e-6 from it)
    ("kda", "triton_chunked_split_tf32", "sparkops_triton.kda_chunked:kda_chunked_split_tf32", tolerance("bf16"),
     ("_runtime.py", "kda.py")),
    # "triton_chunked_split_tf32_bf16scratch": that, with the state kernel's W, Qg, Kg in bfloat16 between the kernels
    # (session 12's tune study: 0.86x its time a layer at T=32768, nmse 2.5e-7 from it)
    ("kda", "triton_chunked_split_tf32_bf16scratch", "sparkops_triton.kda_chunked:kda_chunked_split_tf32_bf16scratch",
     tolerance("bf16"), ("_runtime.py", "kda.py")),
    ("attention", "triton", "sparkops_triton.attention:attention", tolerance("bf16"),
     ("_runtime.py", "attention_prefill.py")),
    ("attention", "triton_splitk", "sparkops_triton.attention_splitk:attention_splitk", tolerance("bf16"),
     ("_runtime.py", "attention_prefill.py")),
    # the split-K / flash kernels on float32 operands with tf32x3 dots (about float32 accuracy)
    ("attention", "triton_fp32", "sparkops_triton.attention_splitk:attention_splitk_fp32", tolerance(),
     ("_runtime.py", "attention_prefill.py")),
    # "triton_splitk_wide": "triton_splitk" whose decode combine runs on (head, row group) programs and skips the
    # acc of splits without rows (stored by none, loaded by none: they held +0.0, the masked loads' value); the
    # loads move, the arithmetic does not
    ("attention", "triton_splitk_wide", "sparkops_triton.attention_splitk:attention_splitk_wide",
     bit_identical(to="triton_splitk"), ("_runtime.py", "attention_prefill.py")),
    # "triton_sdpa": "triton_splitk", except that a prefill call of 64 or more tokens from an empty cache runs on
    # torch's fused attention (cuDNN first; never the math backend) in naive form
    ("attention", "triton_sdpa", "sparkops_triton.attention_sdpa:attention_sdpa", tolerance("bf16"),
     ("_runtime.py", "attention_prefill.py", "attention_splitk.py")),
    ("moe_router", "triton", "sparkops_triton.moe_router:moe_router", tolerance(), ("_runtime.py",)),
    ("moe_router", "triton_lastblock", "sparkops_triton.moe_router:moe_router_lastblock", bit_identical(to="triton"),
     ("_runtime.py", "_arrival.py")),
    # "triton_prefetch": "triton_lastblock" whose decode logits GEMV issues every D tile's loads before its first
    # multiply (the D loop unrolled): the loads move, the arithmetic does not
    ("moe_router", "triton_prefetch", "sparkops_triton.moe_router:moe_router_prefetch",
     bit_identical(to="triton_lastblock"), ("_runtime.py", "_arrival.py")),
    ("sample", "triton", "sparkops_triton.sample:sample", tolerance(), ("_runtime.py",)),
    # quantized matmuls: float32 GEMVs for T <= 8; "triton" runs larger T on bf16 tensor-core dots,
    # "triton_fp32" on tf32x3 dots (about float32 accuracy)
    ("linear", "triton", "sparkops_triton.linear:linear", tolerance("bf16"), ("_runtime.py", "_dequant.py")),
    ("linear", "triton_fp32", "sparkops_triton.linear:linear_fp32", tolerance(), ("_runtime.py", "_dequant.py")),
    # "triton_lastblock": the same kernels with the second (combine / routing) launch folded into the split
    # kernel's last program to finish (`_arrival`): one launch fewer per split kernel, and claimed bit-identical to
    # "triton" (the gate compares the bytes op by op, and the model gate reruns the model with "triton" in place)
    ("linear", "triton_lastblock", "sparkops_triton.linear:linear_lastblock", bit_identical(to="triton"),
     ("_runtime.py", "_dequant.py", "_arrival.py")),
    # "triton_pdl" (an experiment no registry selects by default): "triton_lastblock" with the decode GEMV launched
    # with programmatic dependent launch (Hopper): its first weight chunk is fetched while the previous kernel of the
    # stream finishes; everything the previous kernel may write is read after griddepcontrol.wait. Same arithmetic,
    # so bit-identity to "triton_lastblock" is the claim
    ("linear", "triton_pdl", "sparkops_triton.linear:linear_pdl", bit_identical(to="triton_lastblock"),
     ("_runtime.py", "_dequant.py", "_arrival.py")),
    # "triton_prefetch": "triton_lastblock" with FETCH_DEPTH chunks of weight loads in flight per decode GEMV
    # program, and (moe_experts) a slot's gate and up GEMVs in one loop: the loads move, the arithmetic does not
    ("linear", "triton_prefetch", "sparkops_triton.linear:linear_prefetch", bit_identical(to="triton_lastblock"),
     ("_runtime.py", "_dequant.py", "_arrival.py")),
    # "triton_flat" (an experiment no registry selects yet): Q4_K decode GEMVs in a form whose loop never changes
    # layout (no shared-memory round trip, no barrier); other sums, so the tolerance claim of "triton"
    ("linear", "triton_flat", "sparkops_triton.linear:linear_flat", tolerance("bf16"),
     ("_runtime.py", "_dequant.py", "_arrival.py")),
    # "triton_dqmm" (session 9, not yet on a GPU when written): decode as "triton_lastblock"; prefill (T > 8) decodes
    # the weight once to bfloat16 and multiplies on cuBLAS instead of decoding a weight tile per tile of tokens
    ("linear", "triton_dqmm", "sparkops_triton.linear:linear_dqmm", tolerance("bf16"),
     ("_runtime.py", "_dequant.py", "_arrival.py", "dequantize.py")),
    ("embedding", "triton", "sparkops_triton.embedding:embedding", tolerance(),
     ("_runtime.py", "_dequant.py", "linear.py")),
    ("moe_experts", "triton", "sparkops_triton.moe_experts:moe_experts", tolerance("bf16"),
     ("_runtime.py", "_dequant.py", "linear.py")),
    ("moe_experts", "triton_fp32", "sparkops_triton.moe_experts:moe_experts_fp32", tolerance(),
     ("_runtime.py", "_dequant.py", "linear.py")),
    ("moe_experts", "triton_lastblock", "sparkops_triton.moe_experts:moe_experts_lastblock", bit_identical(to="triton"),
     ("_runtime.py", "_dequant.py", "linear.py", "_arrival.py")),
    ("moe_experts", "triton_prefetch", "sparkops_triton.moe_experts:moe_experts_prefetch",
     bit_identical(to="triton_lastblock"), ("_runtime.py", "_dequant.py", "linear.py", "_arrival.py")),
    ("moe_experts", "triton_flat", "sparkops_triton.moe_experts:moe_experts_flat", tolerance("bf16"),
     ("_runtime.py", "_dequant.py", "linear.py", "_arrival.py")),
    # "triton_dqmm" (session 9, not yet on a GPU when written): decode as "triton_prefetch"; a prefill with enough
    # slots per expert decodes every stacked weight once to bfloat16 and multiplies with torch's grouped GEMM
    ("moe_experts", "triton_dqmm", "sparkops_triton.moe_experts:moe_experts_dqmm", tolerance("bf16"),
     ("_runtime.py", "_dequant.py", "linear.py", "_arrival.py", "dequantize.py")),
    # "triton_dqmm_fused" (session 10, not yet on a GPU when written): "triton_dqmm" whose prefill does gate and up in
    # one grouped GEMM and the element-wise steps between and after the GEMMs in two kernels (moe_glue.py)
    ("moe_experts", "triton_dqmm_fused", "sparkops_triton.moe_experts:moe_experts_dqmm_fused", tolerance("bf16"),
     ("_runtime.py", "_dequant.py", "linear.py", "_arrival.py", "dequantize.py", "moe_glue.py")),
]


@hookimpl
def register_implementations(register):
    devices, reason = availability()
    for op, name, fn, claim, sources in IMPLEMENTATIONS:
        register(op=op, name=name, backend="triton", devices=devices, fn=fn, claim=claim, unavailable=reason,
                 sources=sources)
