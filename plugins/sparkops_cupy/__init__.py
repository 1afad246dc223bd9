"""The CuPy plugin: hand-written CUDA C kernels (kernels/*.cu) for the decode path, loaded with
cupy.RawModule and launched on torch's current stream, so a decode step can be captured in one CUDA
graph with everything else.

Each op lives in its own module here (`sparkops_cupy/<op>.py`); this module registers them through
the public hook, exactly as an outside plugin would. The implementations are unavailable (with the
reason shown by `sparkops plan`) where CuPy is not installed or there is no CUDA device.

`rmsnorm_quantize` comes twice: `cupy_unfused` (this backend's rmsnorm kernel, then its quantize_act
kernel) claims the tolerance row, and `cupy` (one fused kernel) claims to be bit-identical to it,
which the gate proves byte for byte.
"""

from sparkops.plugins import bit_identical, hookimpl, tolerance

from . import _runtime

#: files every implementation depends on besides its module and its kernel sources
_COMMON = ("_runtime.py", "_weights.py")

#: the torch plugin's modules an implementation runs when its stated policy hands a call to the torch plugin
_TORCH_DELEGATE = ("../sparkops_torch/_common.py", "../sparkops_torch/_weights.py", "../sparkops_torch/dequant.py")

#: (op, implementation name, "module:function", claim, kernel source(s)[, other Python sources it runs]) for every
#: implementation
IMPLEMENTATIONS = [
    # the Q8_0 quantizer is exact arithmetic: the same bytes as the reference, not merely close
    ("quantize_act", "cupy", "sparkops_cupy.quantize_act:quantize_act", bit_identical(to="numpy"), "quantize_act.cu"),
    ("rmsnorm", "cupy", "sparkops_cupy.rmsnorm:rmsnorm", tolerance(), "rmsnorm.cu"),
    # the pair as two kernels, and fused: the same row code, so the fused kernel must equal it byte for byte
    ("rmsnorm_quantize", "cupy_unfused", "sparkops_cupy.rmsnorm_quantize:rmsnorm_quantize_unfused", tolerance(),
     ("rmsnorm.cu", "quantize_act.cu")),
    ("rmsnorm_quantize", "cupy", "sparkops_cupy.rmsnorm_quantize:rmsnorm_quantize", bit_identical(to="cupy_unfused"),
     "rmsnorm.cu"),
    # integer dot products on Q8_0 activations: llama.cpp's arithmetic, not the float reference's
    ("linear", "cupy_dp4a", "sparkops_cupy.linear:linear", tolerance("act_q8"), "linear.cu"),
    # the same weight stream dotted with float32 activations: the reference's arithmetic, other sums
    ("linear", "cupy_float", "sparkops_cupy.linear:linear_float", tolerance(), "linear.cu"),
    # decode's one-token Q4_K GEMV as one warp per row, all its loads at once; every other call is cupy_float's
    # (a prefill goes to the torch plugin's float32 linear: its sources are part of this implementation's record)
    ("linear", "cupy_rowwarp", "sparkops_cupy.linear:linear_rowwarp", tolerance(), ("linear.cu", "linear_rowwarp.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    # the same in its "staged" form at every shape (a warp a row from staged activations): a name of its own, so that
    # one interleaved pair can time it against cupy_rowwarp
    ("linear", "cupy_rowwarp_staged", "sparkops_cupy.linear:linear_rowwarp_staged", tolerance(),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    # cupy_rowwarp with the tall weights' copy in two groups (copy2): the same products in the same order, so the
    # same bits, which the gate proves; a name of its own for one interleaved pair
    ("linear", "cupy_rowwarp_copy2", "sparkops_cupy.linear:linear_rowwarp_copy2", bit_identical(to="cupy_rowwarp"),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    # copy2 with each block's first activations requested before its weight copies (copy2x): the same bits
    ("linear", "cupy_rowwarp_copy2x", "sparkops_cupy.linear:linear_rowwarp_copy2x", bit_identical(to="cupy_rowwarp"),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    # cupy_rowwarp launched with programmatic dependent launch (each block's weights requested before it waits for
    # the kernel before it): the same bits
    ("linear", "cupy_rowwarp_pdl", "sparkops_cupy.linear:linear_rowwarp_pdl", bit_identical(to="cupy_rowwarp"),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the PDL copy form on Q8 activations and __dp4a (llama.cpp's arithmetic): the act_q8 row
    ("linear", "cupy_rowwarp_pdl_q8", "sparkops_cupy.linear:linear_rowwarp_pdl_q8", tolerance("act_q8"),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the Q8 GEMV for the tall weights, cupy_rowwarp_pdl's float warp form for the short ones (o_proj), all with PDL
    ("linear", "cupy_rowwarp_pdl_q8_tall", "sparkops_cupy.linear:linear_rowwarp_pdl_q8_tall", tolerance("act_q8"),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # cupy_rowwarp_pdl_q8_tall with the short weights' warp form prefetching x into L1 after its wait: the same bits
    ("linear", "cupy_rowwarp_pdl_q8_tall_xpf", "sparkops_cupy.linear:linear_rowwarp_pdl_q8_tall_xpf",
     bit_identical(to="cupy_rowwarp_pdl_q8_tall"), ("linear.cu", "linear_rowwarp.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # cupy_rowwarp_pdl_q8_tall with the short weights' warp form loading x into registers two rounds at a time after
    # its wait: the same bits
    ("linear", "cupy_rowwarp_pdl_q8_tall_xr", "sparkops_cupy.linear:linear_rowwarp_pdl_q8_tall_xr",
     bit_identical(to="cupy_rowwarp_pdl_q8_tall"), ("linear.cu", "linear_rowwarp.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the warp form's GEMV for the short weights (the o_proj shapes) whose last block adds the output to the residual
    # and norms it (the fused op linear_add_rmsnorm): the projection's bits the warp form's, the norm's sum another
    # order, so the float32 row
    ("linear_add_rmsnorm", "cupy_rowwarp_pdl_norm", "sparkops_cupy.linear_add_rmsnorm:linear_add_rmsnorm_rowwarp_pdl",
     tolerance(), "linear_norm.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "../sparkops_torch/add_rmsnorm.py", "_pdl.py", "_counters.py",
                        "linear.cu", "linear.py")),
    # the same kernels with the short weights (the o_proj shapes) launched plainly, the tall ones with PDL: the same bits
    ("linear", "cupy_rowwarp_pdl_q8_shortplain", "sparkops_cupy.linear:linear_rowwarp_pdl_q8_shortplain",
     bit_identical(to="cupy_rowwarp_pdl_q8"), ("linear.cu", "linear_rowwarp.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the one-token IQ1_S GEMV on Q8 activations (session 50): cupy_rowwarp_pdl_q8's form over the IQ1_S grid
    ("linear", "cupy_rowwarp_pdl_q8_iq1s", "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s", tolerance("act_q8"),
     ("linear.cu", "linear_iq1s_q8.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the same with short weights two octets a row (session 50, after the o_proj's 144 blocks)
    ("linear", "cupy_rowwarp_pdl_q8_iq1s_short", "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s_short",
     tolerance("act_q8"), ("linear.cu", "linear_iq1s_q8.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the two with the grid in shared memory (session 51): their bits
    ("linear", "cupy_rowwarp_pdl_q8_iq1s_sg", "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s_sg",
     bit_identical(to="cupy_rowwarp_pdl_q8_iq1s"), ("linear.cu", "linear_iq1s_q8.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    ("linear", "cupy_rowwarp_pdl_q8_iq1s_sg_short", "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s_sg_short",
     bit_identical(to="cupy_rowwarp_pdl_q8_iq1s_short"), ("linear.cu", "linear_iq1s_q8.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # per shape the faster of the global-grid 16-row form and the shared-grid short form (session 51): their sums
    ("linear", "cupy_rowwarp_pdl_q8_iq1s_sg_mixed", "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s_sg_mixed",
     tolerance("act_q8"), ("linear.cu", "linear_iq1s_q8.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the GEMV over the weight repacked two bits a weight, no grid (session 51): the shared-grid short form's bits,
    # and the 16-row form's
    ("linear", "cupy_rowwarp_pdl_q8_iq1s_t2", "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s_t2",
     bit_identical(to="cupy_rowwarp_pdl_q8_iq1s_sg_short"), ("linear.cu", "linear_iq1s_t2.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py", "_iq1s_t2.py")),
    ("linear", "cupy_rowwarp_pdl_q8_iq1s_t2_rows16",
     "sparkops_cupy.linear_iq1s:linear_rowwarp_pdl_q8_iq1s_t2_rows16",
     bit_identical(to="cupy_rowwarp_pdl_q8_iq1s"), ("linear.cu", "linear_iq1s_t2.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py", "_iq1s_t2.py")),
    # one token's IQ1_S experts on Q8 activations (session 50): the IQ1_S GEMV's form for gate/up and down
    ("moe_experts", "cupy_rowwarp_pdl_q8_iq1s", "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8_iq1s",
     tolerance("act_q8"), "moe_iq1s_q8.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the same with the hidden vector quantized once by gate/up and a down of a warp an output row (session 50)
    ("moe_experts", "cupy_rowwarp_pdl_q8h_iq1s", "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8h_iq1s",
     tolerance("act_q8"), "moe_iq1s_q8.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the same with the grid in shared memory and a down of 8 rows a block (session 51): its bits
    ("moe_experts", "cupy_rowwarp_pdl_q8h_iq1s_sg",
     "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8h_iq1s_sg",
     bit_identical(to="cupy_rowwarp_pdl_q8h_iq1s"), "moe_iq1s_q8.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # that with the down's rows and the hidden vector staged in shared memory (session 51): the q8h pair's bits
    ("moe_experts", "cupy_rowwarp_pdl_q8h_iq1s_staged",
     "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8h_iq1s_staged",
     bit_identical(to="cupy_rowwarp_pdl_q8h_iq1s"), "moe_iq1s_q8.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # and with a gate/up of two octets a row (session 51): other sums
    ("moe_experts", "cupy_rowwarp_pdl_q8h_iq1s_staged_pair",
     "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8h_iq1s_staged_pair",
     tolerance("act_q8"), "moe_iq1s_q8.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # and with the down's (slot, super-block) pairs dealt over a row's octets (session 51): other sums
    ("moe_experts", "cupy_rowwarp_pdl_q8h_iq1s_staged_flat",
     "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8h_iq1s_staged_flat",
     tolerance("act_q8"), "moe_iq1s_q8.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the flat staged pair over the experts repacked two bits a weight, no grid (session 51): its bits
    ("moe_experts", "cupy_rowwarp_pdl_q8h_iq1s_t2",
     "sparkops_cupy.moe_experts_iq1s:moe_experts_rowwarp_pdl_q8h_iq1s_t2",
     bit_identical(to="cupy_rowwarp_pdl_q8h_iq1s_staged_flat"), "moe_iq1s_t2.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py", "_iq1s_t2.py")),
    # cupy_rowwarp's copy form with packed half2 products (fp16 activations and partial sums): the bf16 row
    ("linear", "cupy_rowhalf", "sparkops_cupy.linear:linear_rowhalf", tolerance("bf16"),
     ("linear.cu", "linear_rowwarp.cu"), _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    # the one-token Q4_K GEMV on the tensor cores: bf16 activations in the products, so the bf16 row of the tolerances
    ("linear", "cupy_mma", "sparkops_cupy.linear:linear_mma", tolerance("bf16"), ("linear.cu", "linear_mma.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    # the one-token Q6_K GEMV (the lm_head) on 16-bit activations in two int8 planes and __dp4a: ~2e-10 nmse, over
    # the float row's 1e-10 and far inside the bf16 row's 5e-4 (bfloat16 activations carry 8 bits), so the bf16 row
    ("linear", "cupy_x16_pdl", "sparkops_cupy.linear:linear_x16_pdl", tolerance("bf16"),
     ("linear.cu", "linear_q6k_x16.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py", "_pdl.py")),
    # the same for float weights (F16 / BF16 / F32 rows, 8 or 32 lanes a row), with the same policy for other calls
    ("linear", "cupy_floatrow", "sparkops_cupy.linear:linear_floatrow", tolerance(),
     ("linear.cu", "linear_floatrow.cu"),
     _TORCH_DELEGATE + ("../sparkops_torch/linear.py",)),
    ("kda", "cupy_recurrent", "sparkops_cupy.kda:kda", tolerance(), "kda.cu"),
    ("attention", "cupy_splitk", "sparkops_cupy.attention:attention", tolerance(), "attention.cu"),
    # the same function judged on bfloat16 inputs: a bf16 cache at the 48B decode shape takes the
    # tensor-core split (bf16 operands), which only this claim's cases reach
    ("attention", "cupy_splitk_bf16", "sparkops_cupy.attention:attention", tolerance("bf16"), "attention.cu"),
    # the same launches with the slices a short context leaves empty neither written nor read: the same bits
    ("attention", "cupy_splitk_bf16_active", "sparkops_cupy.attention:attention_active",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu"),
    # the same launches with the absorb's, the combine's and the up projection's loads requested before their
    # products: the same bits
    ("attention", "cupy_splitk_bf16_deep", "sparkops_cupy.attention:attention_deep",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu"),
    # both of those: the deep kernels, the empty slices neither written nor read: the same bits
    ("attention", "cupy_splitk_bf16_deep_active", "sparkops_cupy.attention:attention_deep_active",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu"),
    # the deep form with its kernels launched with programmatic dependent launch (each may start while the kernel
    # before runs; the absorb and the up projection request their weights before they wait): the same bits
    ("attention", "cupy_splitk_bf16_deep_pdl", "sparkops_cupy.attention:attention_deep_pdl",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu", ("_pdl.py",)),
    # that PDL form with the active form's skip (a short context's empty slices neither written nor read): the same bits
    ("attention", "cupy_splitk_bf16_deep_active_pdl", "sparkops_cupy.attention:attention_deep_active_pdl",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu", ("_pdl.py",)),
    # that PDL form with the twin split (two groups of 8 warps a block, each streaming its own tiles, merged in the
    # block): the partials round differently, so the bf16 tolerance
    ("attention", "cupy_splitk_bf16_twin_active_pdl", "sparkops_cupy.attention:attention_twin_active_pdl",
     tolerance("bf16"), "attention.cu", ("_pdl.py",)),
    # that PDL form with the bulk split (each tile's rows fetched by one bulk copy a row, the copy engine's, instead of
    # the threads' 16-byte cp.async): the same tiles and arithmetic, the same bits
    ("attention", "cupy_splitk_bf16_bulk_active_pdl", "sparkops_cupy.attention:attention_bulk_active_pdl",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu", ("_pdl.py",)),
    # that PDL form with each tile prefetched into the L2 a tile ahead of its copies: the same copies and arithmetic,
    # the same bits
    ("attention", "cupy_splitk_bf16_l2pf_active_pdl", "sparkops_cupy.attention:attention_l2pf_active_pdl",
     bit_identical(to="cupy_splitk_bf16"), "attention.cu", ("_pdl.py",)),
    # that PDL form with the queries-in-registers split (each warp's quarter of the queries' dims in registers, the
    # scores as four partial sums over the dims): the partials round differently, so the bf16 tolerance
    ("attention", "cupy_splitk_bf16_qreg_active_pdl", "sparkops_cupy.attention:attention_qreg_active_pdl",
     tolerance("bf16"), "attention.cu", ("_pdl.py",)),
    # the queries-in-registers form with its tiles in a ring of five 32-row slots (the fifth the queries' bytes): one
    # and a half tiles in flight, the same arithmetic on the same rows, so the qreg form's bits
    ("attention", "cupy_splitk_bf16_ring_active_pdl", "sparkops_cupy.attention:attention_ring_active_pdl",
     bit_identical(to="cupy_splitk_bf16_qreg_active_pdl"), "attention.cu", ("_pdl.py",)),
    # the deep PDL form over an MLA cache in float8_e4m3fn (the engine rounds each new row; the split decodes each
    # value exactly to the bf16 the tensor-core code reads): judged on the same fp8 values as the reference, by the
    # bf16 row
    ("attention", "cupy_splitk_fp8_deep_active_pdl", "sparkops_cupy.attention:attention_fp8_deep_active_pdl",
     tolerance("fp8_cache"), "attention.cu", ("_pdl.py",)),
    # that fp8 form with the queries-in-registers split (three fp8 stages, the third where the queries were): the
    # partials round differently, so the fp8 cache's tolerance, judged as that form's
    ("attention", "cupy_splitk_fp8_qreg_active_pdl", "sparkops_cupy.attention:attention_fp8_qreg_active_pdl",
     tolerance("fp8_cache"), "attention.cu", ("_pdl.py",)),
    # decode's router in one launch: a warp an expert's float32 logit, the last block of a token routes it; every
    # other call is the torch plugin's moe_router
    ("moe_router", "cupy_rowwarp", "sparkops_cupy.moe_router:moe_router_rowwarp", tolerance(), "moe_router.cu",
     ("../sparkops_torch/_common.py", "../sparkops_torch/moe_router.py")),
    # the same launch with programmatic dependent launch (each warp's weight row requested before it waits for the
    # norm that writes x): the same bits
    ("moe_router", "cupy_rowwarp_pdl", "sparkops_cupy.moe_router:moe_router_rowwarp_pdl",
     bit_identical(to="cupy_rowwarp"), "moe_router.cu",
     ("../sparkops_torch/_common.py", "../sparkops_torch/moe_router.py", "_pdl.py")),
    # that PDL launch with a shorter routing tail (the biases in shared memory before the wait, each routing lane's
    # experts sorted once, a pick one warp reduction and a ballot): the same bits
    ("moe_router", "cupy_rowwarp_pdl_sorted", "sparkops_cupy.moe_router:moe_router_rowwarp_pdl_sorted",
     bit_identical(to="cupy_rowwarp"), "moe_router.cu",
     ("../sparkops_torch/_common.py", "../sparkops_torch/moe_router.py", "_pdl.py")),
    # that PDL launch with the picks made without pick rounds (each lane's experts sorted by a network, the lanes'
    # lists merged in 5 butterfly rounds): the same bits
    ("moe_router", "cupy_rowwarp_pdl_merge", "sparkops_cupy.moe_router:moe_router_rowwarp_pdl_merge",
     bit_identical(to="cupy_rowwarp"), "moe_router.cu",
     ("../sparkops_torch/_common.py", "../sparkops_torch/moe_router.py", "_pdl.py")),
    # decode's residual add, FFN norm and router in one PDL launch: every warp norms the token's row itself and dots it
    # with its expert's row (the sum of squares in another order than the Triton norm's: the tolerance row); every
    # other call is the torch plugin's add_rmsnorm_router (its add_rmsnorm, then its moe_router)
    ("add_rmsnorm_router", "cupy_rowwarp_pdl", "sparkops_cupy.add_rmsnorm_router:add_rmsnorm_router_rowwarp_pdl",
     tolerance(), "add_rmsnorm_router.cu",
     ("../sparkops_torch/_common.py", "../sparkops_torch/add_rmsnorm.py", "../sparkops_torch/moe_router.py",
      "../sparkops_torch/add_rmsnorm_router.py", "_pdl.py")),
    ("moe_experts", "cupy_dp4a", "sparkops_cupy.moe_experts:moe_experts", tolerance("act_q8"), "moe_experts.cu"),
    # one token's Q4_K experts in two row-warp launches; every other call is the torch plugin's float32 moe_experts
    ("moe_experts", "cupy_rowwarp", "sparkops_cupy.moe_experts:moe_experts_rowwarp", tolerance(), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py",)),
    # the same with the "staged" gate/up form (a warp a hidden row), its own name for one interleaved pair
    ("moe_experts", "cupy_rowwarp_staged", "sparkops_cupy.moe_experts:moe_experts_rowwarp_staged", tolerance(),
     "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py",)),
    # the same two launches with programmatic dependent launch (down's first weight loads overlap gate/up): same bits
    ("moe_experts", "cupy_rowwarp_pdl", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl",
     bit_identical(to="cupy_rowwarp"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the PDL pair with the shared expert's gate/up rows requested before the wait for the router: same bits
    ("moe_experts", "cupy_rowwarp_pdl_shared", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_shared",
     bit_identical(to="cupy_rowwarp"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the PDL pair with down's whole row (the 48B's 36 super-blocks a warp) requested before its wait: same bits
    ("moe_experts", "cupy_rowwarp_pdl_wide", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_wide",
     bit_identical(to="cupy_rowwarp"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the PDL pair with down split four warps an output (its sum in another order): the tolerance row
    ("moe_experts", "cupy_rowwarp_pdl_split", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_split", tolerance(),
     "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the PDL pair with gate/up on Q8 activations and __dp4a (llama.cpp's arithmetic): the act_q8 row; and the same
    # gate/up with the split down
    ("moe_experts", "cupy_rowwarp_pdl_q8", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8", tolerance("act_q8"),
     "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    ("moe_experts", "cupy_rowwarp_pdl_q8_split", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_split",
     tolerance("act_q8"), "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the Q8 gate/up writing the hidden vector in Q8 too, and down on it by __dp4a: the act_q8 row
    ("moe_experts", "cupy_rowwarp_pdl_q8_hidden", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_hidden",
     tolerance("act_q8"), "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the Q8 hidden pair whose down's last block adds the experts' output to the residual and norms it (the fused op
    # moe_experts_add_rmsnorm): the experts' bits are the pair's, the norm's sum another order, so the act_q8 row
    ("moe_experts_add_rmsnorm", "cupy_rowwarp_pdl_q8_hidden_norm",
     "sparkops_cupy.moe_experts_add_rmsnorm:moe_experts_add_rmsnorm_q8_hidden", tolerance("act_q8"),
     "moe_down_norm.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "../sparkops_torch/add_rmsnorm.py", "_pdl.py",
                        "_counters.py", "moe_experts.py")),
    # that pair with a lane a whole sub-block pair in gate/up's dot loop (other sums): the act_q8 row
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs",
     tolerance("act_q8"), "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the pairs pair with its down prefetching the hidden vector into L1 after its wait: the same bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_xpf", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_xpf",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the Q8 hidden pair and the pairs pair with down in a copy form (each warp's rows copied into shared memory before
    # the wait, dotted group by group as they land): the same products in the same order, so their pairs' bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_hidden_cp", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_hidden_cp",
     bit_identical(to="cupy_rowwarp_pdl_q8_hidden"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_cp", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_cp",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the same two pairs with their down's expert ids read once a warp (in one form its hidden values a round ahead too):
    # the same values and products in the same order, so their pairs' bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_hidden_ld", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_hidden_ld",
     bit_identical(to="cupy_rowwarp_pdl_q8_hidden"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_ld", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_ld",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the pairs pair with its ids-once down asking for its later weights in the L2 before its wait, and gate/up the
    # shared expert's: the same bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_l2pf", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_l2pf",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the L2-prefetching pairs with gate/up's copies in commit groups, each dotted as it lands: the same bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_l2pf_grouped",
     "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_l2pf_grouped",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the same with only one group requested ahead, each later group once the one before has landed: the same bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_l2pf_streamed",
     "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_l2pf_streamed",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the pairs pair with its down reading the hidden vector from shared memory, copied once a block: the same bits
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_hs", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pairs_hs",
     bit_identical(to="cupy_rowwarp_pdl_q8_pairs"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # that pair with its gate/up pipelined through stages of shared memory, a few blocks an SM: the same rows' sums
    ("moe_experts", "cupy_rowwarp_pdl_q8_pipe", "sparkops_cupy.moe_experts:moe_experts_rowwarp_pdl_q8_pipe",
     bit_identical(to="cupy_rowwarp_pdl_q8_hidden"), "moe_rowwarp.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py", "_pdl.py")),
    # the same with gate/up in packed half2 (fp16 activations and partial sums): the bf16 row
    ("moe_experts", "cupy_rowhalf", "sparkops_cupy.moe_experts:moe_experts_rowhalf", tolerance("bf16"),
     "moe_rowwarp.cu", _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py",)),
    # the same two launches on the tensor cores: bf16 activations and hidden vector in the products
    ("moe_experts", "cupy_mma", "sparkops_cupy.moe_experts:moe_experts_mma", tolerance("bf16"), "moe_mma.cu",
     _TORCH_DELEGATE + ("../sparkops_torch/moe_experts.py",)),
]


#: the stated policies the dispatcher counts and shows (Implementation.policy): (op, implementation) -> the function
#: of the op's arguments naming what runs a call the implementation's own kernels do not take
_Q4K_GEMV = "sparkops_cupy._policies:one_token_q4k_passes"
_Q4K_EXPERTS = "sparkops_cupy._policies:experts_passes"
POLICIES = {
    **{("linear", n): _Q4K_GEMV for n in ("cupy_rowwarp", "cupy_rowwarp_staged", "cupy_rowwarp_copy2",
                                          "cupy_rowwarp_copy2x", "cupy_rowwarp_pdl", "cupy_rowwarp_pdl_q8",
                                          "cupy_rowwarp_pdl_q8_shortplain", "cupy_rowwarp_pdl_q8_tall",
                                          "cupy_rowwarp_pdl_q8_tall_xpf", "cupy_rowwarp_pdl_q8_tall_xr",
                                          "cupy_rowhalf",
                                          "cupy_mma")},
    ("linear", "cupy_floatrow"): "sparkops_cupy._policies:floatrow_passes",
    **{("linear", n): "sparkops_cupy._policies:iq1s_gemv_passes"
       for n in ("cupy_rowwarp_pdl_q8_iq1s", "cupy_rowwarp_pdl_q8_iq1s_short", "cupy_rowwarp_pdl_q8_iq1s_sg",
                 "cupy_rowwarp_pdl_q8_iq1s_sg_short", "cupy_rowwarp_pdl_q8_iq1s_sg_mixed",
                 "cupy_rowwarp_pdl_q8_iq1s_t2", "cupy_rowwarp_pdl_q8_iq1s_t2_rows16")},
    **{("moe_experts", n): "sparkops_cupy._policies:iq1s_experts_passes"
       for n in ("cupy_rowwarp_pdl_q8_iq1s", "cupy_rowwarp_pdl_q8h_iq1s", "cupy_rowwarp_pdl_q8h_iq1s_sg",
                 "cupy_rowwarp_pdl_q8h_iq1s_staged", "cupy_rowwarp_pdl_q8h_iq1s_staged_pair",
                 "cupy_rowwarp_pdl_q8h_iq1s_staged_flat", "cupy_rowwarp_pdl_q8h_iq1s_t2")},
    ("linear", "cupy_x16_pdl"): "sparkops_cupy._policies:x16_passes",
    **{("moe_experts", n): "sparkops_cupy._policies:experts_cp_passes"
       for n in ("cupy_rowwarp_pdl_q8_hidden_cp", "cupy_rowwarp_pdl_q8_pairs_cp")},
    **{("moe_experts", n): "sparkops_cupy._policies:experts_ld_passes"
       for n in ("cupy_rowwarp_pdl_q8_hidden_ld", "cupy_rowwarp_pdl_q8_pairs_ld", "cupy_rowwarp_pdl_q8_pairs_l2pf",
                 "cupy_rowwarp_pdl_q8_pairs_l2pf_grouped", "cupy_rowwarp_pdl_q8_pairs_l2pf_streamed")},
    ("moe_experts", "cupy_rowwarp_pdl_q8_pairs_hs"): "sparkops_cupy._policies:experts_hs_passes",
    **{("attention", n): "sparkops_cupy._policies:attention_deep_passes"
       for n in ("cupy_splitk_bf16_deep", "cupy_splitk_bf16_deep_active")},
    **{("attention", n): "sparkops_cupy._policies:attention_deep_pdl_passes"
       for n in ("cupy_splitk_bf16_deep_pdl", "cupy_splitk_bf16_deep_active_pdl", "cupy_splitk_bf16_qreg_active_pdl",
                 "cupy_splitk_bf16_l2pf_active_pdl")},
    ("attention", "cupy_splitk_fp8_deep_active_pdl"): "sparkops_cupy._policies:attention_fp8_pdl_passes",
    ("attention", "cupy_splitk_fp8_qreg_active_pdl"): "sparkops_cupy._policies:attention_fp8_qreg_pdl_passes",
    ("attention", "cupy_splitk_bf16_ring_active_pdl"): "sparkops_cupy._policies:attention_ring_pdl_passes",
    ("attention", "cupy_splitk_bf16_twin_active_pdl"): "sparkops_cupy._policies:attention_twin_pdl_passes",
    ("attention", "cupy_splitk_bf16_bulk_active_pdl"): "sparkops_cupy._policies:attention_bulk_pdl_passes",
    **{("moe_router", n): "sparkops_cupy._policies:router_passes"
       for n in ("cupy_rowwarp", "cupy_rowwarp_pdl", "cupy_rowwarp_pdl_sorted", "cupy_rowwarp_pdl_merge")},
    ("add_rmsnorm_router", "cupy_rowwarp_pdl"): "sparkops_cupy._policies:norm_router_passes",
    ("moe_experts_add_rmsnorm", "cupy_rowwarp_pdl_q8_hidden_norm"): "sparkops_cupy._policies:experts_norm_passes",
    ("linear_add_rmsnorm", "cupy_rowwarp_pdl_norm"): "sparkops_cupy._policies:linear_norm_passes",
    **{("moe_experts", n): _Q4K_EXPERTS for n in ("cupy_rowwarp", "cupy_rowwarp_staged", "cupy_rowwarp_pdl",
                                                  "cupy_rowwarp_pdl_shared", "cupy_rowwarp_pdl_wide",
                                                  "cupy_rowwarp_pdl_split", "cupy_rowwarp_pdl_q8",
                                                  "cupy_rowwarp_pdl_q8_split", "cupy_rowwarp_pdl_q8_hidden",
                                                  "cupy_rowwarp_pdl_q8_pipe", "cupy_rowwarp_pdl_q8_pairs",
                                                  "cupy_rowwarp_pdl_q8_pairs_xpf",
                                                  "cupy_rowhalf", "cupy_mma")},
}


@hookimpl
def register_implementations(register):
    why = _runtime.unavailable_reason()
    for op, name, fn, claim, source, *delegate in IMPLEMENTATIONS:
        kernels = (source,) if isinstance(source, str) else source
        files = dict.fromkeys(f for cu in kernels for f in _runtime.source_files(cu))  # headers once, in order
        register(op=op, name=name, backend="cupy", devices=("cuda",), fn=fn, claim=claim, unavailable=why,
                 sources=tuple(files) + _COMMON + (delegate[0] if delegate else ()), policy=POLICIES.get((op, name)))
