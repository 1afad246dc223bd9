"""The stated policies of the plugin's one-token kernels, as the dispatcher counts them (Implementation.policy).

Each function takes its op's arguments and gives None where the implementation's own kernels take the call, else
what runs it instead and why. They restate the tests the implementations make (`rowwarp_serves`, `_one_token`)
without running anything, so that a bench, a diagnosis and `generate` can say which calls went elsewhere: GPU session
25's IQ1_S step passed every expert layer to the float32 path that dequantizes the experts each call (6.5 tok/s),
and nothing said so. They live apart from the implementations' modules on purpose: a policy's wording is not the
implementation's arithmetic, so it is not part of the source hash that a check record pins.
"""

from __future__ import annotations

from gguf import GGMLQuantizationType as Q

from sparkops.qweight import QWeight

from . import add_rmsnorm_router as _norm_router
from . import linear_add_rmsnorm as _linear_norm
from . import moe_experts_add_rmsnorm as _experts_norm
from .attention import (BULK_SMEM_BYTES, DEEP_DN, DEEP_LKV, QF8_SMEM_BYTES, TW_SMEM_BYTES, bulk_fits, qf8_fits,
                        twin_fits, uses_fp8_tensor_cores, uses_tensor_cores)
from .linear import ROWWARP_GEMV_MAX_T, x16_serves
from . import moe_experts as _experts
from .moe_experts import rowwarp_serves as experts_served
from .moe_experts_iq1s import MAX_K as _IQ1S_MAX_K, MAX_T as _IQ1S_MAX_T, iq1s_serves as _iq1s_experts_served
from .moe_router import ROUTER_MAX_T, rowwarp_serves as router_served


def one_token_q4k_passes(x, weight) -> str | None:
    """The one-token Q4_K GEMVs (cupy_rowwarp and its forms, cupy_rowhalf, cupy_mma): linear.py's `_one_token`."""
    return _one_token_passes(x, weight, lambda w: w.qtype == Q.Q4_K, "Q4_K")


def iq1s_gemv_passes(x, weight) -> str | None:
    """The one-token IQ1_S GEMVs (linear_iq1s.py: cupy_rowwarp_pdl_q8_iq1s and its _short, _sg, _sg_short, _sg_mixed,
    _t2, _t2_rows16 forms): linear.py's `_one_token` with IQ1_S weights."""
    return _one_token_passes(x, weight, lambda w: w.qtype == Q.IQ1_S, "IQ1_S")


def floatrow_passes(x, weight) -> str | None:
    """cupy_floatrow (rows that are not whole 16-byte vectors, checked where the call runs, are not looked at)."""
    return _one_token_passes(x, weight, lambda w: w.is_float, "F16, BF16 or F32")


def x16_passes(x, weight) -> str | None:
    """cupy_x16_pdl (the one-token Q6_K GEMV): linear.py's `x16_serves`."""
    return _one_token_passes(x, weight, x16_serves, "Q6_K rows whose bytes end on 16, a block of them fitting shared memory")


def _one_token_passes(x, weight, serves, kind: str) -> str | None:
    if x.dim() == 2 and x.shape[0] > ROWWARP_GEMV_MAX_T:
        return f"torch (float32, the weight dequantized each call): {x.shape[0]} tokens"
    if x.dim() != 2 or x.shape[0] != 1:
        return f"cupy_float: {x.shape[0] if x.dim() == 2 else 'not [T, K]'} tokens"
    if not isinstance(weight, QWeight) or not serves(weight):
        name = weight.qtype.name if isinstance(weight, QWeight) else "unquantized"
        return f"cupy_float: {name} weights (the kernel takes {kind})"
    return None


def experts_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> str | None:
    """The one-token Q4_K expert kernels (cupy_rowwarp and its forms, cupy_rowhalf, cupy_mma): `rowwarp_serves`."""
    if experts_served(x, w_gate, w_up, w_down, s_gate, s_up, s_down):
        return None
    if x.dim() == 2 and x.shape[0] != 1:
        why = f"{x.shape[0]} tokens"
    else:
        types = dict.fromkeys(w.qtype.name if isinstance(w, QWeight) else "float"
                              for w in (w_gate, w_up, w_down, s_gate, s_up, s_down) if w is not None)
        why = "/".join(types) + " weights (the kernels read Q4_K rows of whole blocks)"
    return f"torch (float32, the weights dequantized each call): {why}"


def iq1s_experts_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> str | None:
    """The one-token IQ1_S experts (moe_experts_iq1s.py: cupy_rowwarp_pdl_q8_iq1s, cupy_rowwarp_pdl_q8h_iq1s and its
    _sg, _staged, _staged_pair, _staged_flat, _t2 forms): moe_experts_iq1s.py's `iq1s_serves`."""
    if _iq1s_experts_served(x, ids, w_gate, w_up, w_down, s_gate, s_up, s_down):
        return None
    if x.dim() == 2 and not 1 <= x.shape[0] <= _IQ1S_MAX_T:
        why = f"{x.shape[0]} tokens (the kernels take 1 to {_IQ1S_MAX_T}, one after another)"
    elif ids.dim() == 2 and ids.shape[1] > _IQ1S_MAX_K:
        why = f"{ids.shape[1]} experts a token (the kernel takes at most {_IQ1S_MAX_K})"
    else:
        types = dict.fromkeys(w.qtype.name if isinstance(w, QWeight) else "float"
                              for w in (w_gate, w_up, w_down, s_gate, s_up, s_down) if w is not None)
        why = f"{', '.join(types)} experts (the kernels take IQ1_S, widths of whole blocks)"
    return f"torch (float32, the experts dequantized each call): {why}"


def experts_cp_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> str | None:
    """The Q8 hidden pairs with the copy down (cupy_rowwarp_pdl_q8_hidden_cp, _q8_pairs_cp): `experts_passes`, then
    moe_experts.py's `down_cp_fits` (a call whose down block would not fit runs the warp down, the same bits)."""
    if (why := experts_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)) is not None:
        return why
    return _down_block_past(ids, w_down, s_down, "copy", _experts.down_cp_smem, "DOWN_CP_SMEM_LIMIT")


def _down_block_past(ids, w_down, s_down, form: str, smem, limit: str) -> str | None:
    """None where a down form's block (`smem` of K, F, Fs: its bytes of shared memory) fits moe_experts.py's `limit`,
    else what runs instead, naming the bytes: the warp down on the Q8 hidden vector (the same bits)."""
    k, f = ids.shape[-1], w_down.shape[-1]
    fs = s_down.shape[-1] if s_down is not None else 0
    need, most = smem(k, f, fs), getattr(_experts, limit)
    if need <= most:
        return None
    return (f"the warp down on the Q8 hidden vector (down_q8_q4_k, the same bits): the {form} down's block would take "
            f"{need} bytes of shared memory, over {limit} ({most})")


def experts_ld_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> str | None:
    """The Q8 hidden pairs with the q8-loads down (cupy_rowwarp_pdl_q8_hidden_ld, _q8_pairs_ld, _q8_pairs_l2pf and
    _q8_pairs_l2pf_grouped and _streamed):
    `experts_passes`,
    then the slots a warp reads a lane each (a call with more runs the warp down, the same bits)."""
    if (why := experts_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)) is not None:
        return why
    k = ids.shape[-1]
    if k <= _experts.DOWN_LD_MAX_K:
        return None
    return (f"the warp down on the Q8 hidden vector (down_q8_q4_k, the same bits): {k} chosen experts, more than the "
            f"{_experts.DOWN_LD_MAX_K} the q8-loads down reads a lane each (DOWN_LD_MAX_K)")


def experts_hs_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down) -> str | None:
    """The pairs pair with the staged down (cupy_rowwarp_pdl_q8_pairs_hs): `experts_ld_passes` (the staged down reads
    the slots as the q8-loads down does), then the shared memory its block takes (a call past it runs the warp down,
    the same bits)."""
    if (why := experts_ld_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)) is not None:
        return why
    return _down_block_past(ids, w_down, s_down, "staged", _experts.down_hs_smem, "DOWN_HS_SMEM_LIMIT")


def linear_norm_passes(x, weight, residual, norm_weight, eps) -> str | None:
    """The o_proj GEMV with the norm in its last block (cupy_rowwarp_pdl_norm): the `fused_serves` of
    linear_add_rmsnorm.py; what else runs the projection is then cupy_rowwarp_pdl's (`one_token_q4k_passes`)."""
    if _linear_norm.fused_serves(x, weight, residual, norm_weight):
        return None
    gemv = one_token_q4k_passes(x, weight)
    if gemv is None:
        tall = isinstance(weight, QWeight) and weight.shape[0] >= _linear_norm.ROWWARP_TALL_ROWS
        why = (f"{weight.shape[0]} rows, at least ROWWARP_TALL_ROWS (the copy form's)" if tall
               else "a residual or norm gain of another shape or dtype than the projection's output")
        return f"cupy_rowwarp_pdl (linear), then torch's add_rmsnorm: {why}"
    return f"cupy_rowwarp_pdl's policy ({gemv}), then torch's add_rmsnorm"


def experts_norm_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight,
                        eps) -> str | None:
    """The experts with the norm in the down's last block (cupy_rowwarp_pdl_q8_hidden_norm): the `fused_serves` of
    moe_experts_add_rmsnorm.py; what else runs the experts is then `experts_passes`' answer."""
    if _experts_norm.fused_serves(x, w_gate, w_up, w_down, s_gate, s_up, s_down, residual, norm_weight):
        return None
    experts = experts_passes(x, weights, ids, w_gate, w_up, w_down, s_gate, s_up, s_down)
    if experts is None:
        why = "a residual or norm gain of another shape or dtype than x's"
        return f"cupy_rowwarp_pdl_q8_hidden (moe_experts), then torch's add_rmsnorm: {why}"
    return f"cupy_rowwarp_pdl_q8_hidden's policy ({experts}), then torch's add_rmsnorm"


def router_passes(x, weight, bias, top_k, n_group, topk_group, scale, renorm_eps) -> str | None:
    """The one-launch router (cupy_rowwarp, cupy_rowwarp_pdl): moe_router.py's `rowwarp_serves`."""
    if router_served(x, weight, top_k, n_group):
        return None
    if x.dim() == 2 and x.shape[0] > ROUTER_MAX_T:
        return f"torch: {x.shape[0]} tokens (more than {ROUTER_MAX_T})"
    return "torch: a weight, shape or top_k outside the one-launch kernel's (moe_router.py's docstring)"


def norm_router_passes(x, residual, weight, eps, router_weight, bias, top_k, n_group, topk_group, scale,
                       renorm_eps) -> str | None:
    """The one-launch norm and router (cupy_rowwarp_pdl): add_rmsnorm_router.py's `fused_serves`."""
    if _norm_router.fused_serves(x, residual, router_weight, top_k, n_group):
        return None
    if x.dim() == 2 and x.shape[0] > _norm_router.ROUTER_MAX_T:
        return f"torch (add_rmsnorm, then moe_router): {x.shape[0]} tokens (more than {_norm_router.ROUTER_MAX_T})"
    return ("torch (add_rmsnorm, then moe_router): a dtype, weight, shape or top_k outside the one-launch kernel's "
            "(add_rmsnorm_router.py's docstring)")


def attention_deep_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The deep forms (cupy_splitk_bf16_deep, _deep_active): their absorb and up kernels are built for Dn = DEEP_DN and
    Lkv = DEEP_LKV; another shape runs the plain kernel of that step (attention.py's `_attention`)."""
    dn, lkv = (w_uk.shape[1], w_uk.shape[2]) if getattr(w_uk, "dim", lambda: 0)() == 3 else (None, None)
    plain = [k for k, ok in (("mla_absorb", dn == DEEP_DN), ("mla_up", lkv == DEEP_LKV)) if not ok]
    if not plain:
        return None
    return f"the plain {' and '.join(plain)} kernel(s): Dn {dn}, Lkv {lkv} (the deep ones: {DEEP_DN}, {DEEP_LKV})"


def attention_deep_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The deep PDL form (cupy_splitk_bf16_deep_pdl): the deep form's policy, and the kernels launched plainly because
    they have no PDL form for the call - the plain absorb and up projection (attention_deep_passes), the CUDA-core
    split (any call but one token of the tensor-core shape: uses_tensor_cores)."""
    return _deep_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale, uses_tensor_cores, "mla_split_generic")


def attention_fp8_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The fp8-cache form (cupy_splitk_fp8_deep_active_pdl): the deep PDL form's policy with the fp8 split - the
    CUDA-core split (mla_split_generic_fp8) launched plainly for any call but one token of the tensor-core shape on a
    cache whose rows start on 16 bytes (uses_fp8_tensor_cores). A cache of another dtype is refused, not passed on."""
    return _deep_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale, uses_fp8_tensor_cores, "mla_split_generic_fp8")


def attention_twin_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The twin form (cupy_splitk_bf16_twin_active_pdl): the deep PDL form's policy, and the one-group tensor-core
    split (mla_split_mma_pdl) at the tensor-core shape on a device whose blocks cannot opt into the twin split's shared
    memory (attention.py's TW_SMEM_BYTES)."""
    return _split_falls_back(q, latent, cache, pos, w_uk, w_uv, scale, uses_tensor_cores, "mla_split_generic",
                             lambda c: not twin_fits(c.device),
                             f"the one-group split (mla_split_mma_pdl): this device's blocks cannot opt into the twin "
                             f"split's {TW_SMEM_BYTES} bytes of shared memory")


def attention_fp8_qreg_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The fp8 queries-in-registers form (cupy_splitk_fp8_qreg_active_pdl): the fp8 form's policy, and the fp8
    one-group split (mla_split_mma_fp8_pdl) at the fp8 tensor-core shape on a device whose blocks cannot opt into
    mla_split_qreg_fp8's shared memory (attention.py's QF8_SMEM_BYTES)."""
    return _split_falls_back(q, latent, cache, pos, w_uk, w_uv, scale, uses_fp8_tensor_cores, "mla_split_generic_fp8",
                             lambda c: not qf8_fits(c.device),
                             f"the fp8 one-group split (mla_split_mma_fp8_pdl): this device's blocks cannot opt into "
                             f"the fp8 qreg split's {QF8_SMEM_BYTES} bytes of shared memory")


def attention_ring_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The ring form (cupy_splitk_bf16_ring_active_pdl): the deep PDL form's policy, and the qreg split
    (mla_split_qreg_pdl: the same bits) at the tensor-core shape on a device whose blocks cannot opt into the ring's
    shared memory (attention.py's QF8_SMEM_BYTES)."""
    return _split_falls_back(q, latent, cache, pos, w_uk, w_uv, scale, uses_tensor_cores, "mla_split_generic",
                             lambda c: not qf8_fits(c.device),
                             f"the qreg split (mla_split_qreg_pdl, the same bits): this device's blocks cannot opt "
                             f"into the ring's {QF8_SMEM_BYTES} bytes of shared memory")


def attention_bulk_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale) -> str | None:
    """The bulk form (cupy_splitk_bf16_bulk_active_pdl): the deep PDL form's policy, and the one-group tensor-core
    split (mla_split_mma_pdl: the same bits) at the tensor-core shape when the device's blocks cannot opt into the
    bulk split's shared memory (bulk_fits). A cache whose rows do not start on 16 bytes takes no tensor-core split
    (uses_tensor_cores): the deep PDL form's words say so."""
    return _split_falls_back(q, latent, cache, pos, w_uk, w_uv, scale, uses_tensor_cores, "mla_split_generic",
                             lambda c: not bulk_fits(c),
                             f"the one-group split (mla_split_mma_pdl): this device's blocks cannot opt into the bulk "
                             f"split's {BULK_SMEM_BYTES} bytes of shared memory")


def _split_falls_back(q, latent, cache, pos, w_uk, w_uv, scale, tensor_cores, generic: str, short,
                      instead: str) -> str | None:
    """The deep PDL form's words for the call (`tensor_cores` says whether its tensor-core split takes it, `generic`
    names the CUDA-core one), and `instead` where the call has the tensor-core shape but short(cache) says the form's
    own split cannot take it there (its shared memory on this device)."""
    said = _deep_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale, tensor_cores, generic)
    try:
        t, n, dqh = q.shape
        _, dn, lkv = w_uk.shape
        falls = tensor_cores(t, n, lkv, dqh - dn, cache) and short(cache)
    except (AttributeError, ValueError, TypeError, RuntimeError):
        falls = False
    if not falls:
        return said
    return instead if said is None else f"{said}; {instead}"


def _deep_pdl_passes(q, latent, cache, pos, w_uk, w_uv, scale, tensor_cores, generic: str) -> str | None:
    said = attention_deep_passes(q, latent, cache, pos, w_uk, w_uv, scale)
    plain = []
    if said is not None:
        plain.append(said)
    try:
        t, n, dqh = q.shape
        _, dn, lkv = w_uk.shape
        mma = tensor_cores(t, n, lkv, dqh - dn, cache)
    except (AttributeError, ValueError, TypeError, RuntimeError):
        mma = False
    if not mma:
        plain.append(f"the CUDA-core split ({generic}), which has no PDL form")
    if not plain:
        return None
    return "launched plainly, without programmatic dependent launch: " + "; ".join(plain)
