"""attention "triton_sdpa": "triton_splitk"; a long first prefill call (no history) on torch's fused attention (cuDNN).

Why: session 10's diagnosis of a 16384-token prefill chunk of the 48B put `_flash_kernel` at 109 ms (7 MLA layers,
~170 TFLOP/s of the bf16 matmul ceiling's ~790): 16% of the chunk. torch's `scaled_dot_product_attention` has
tuned Hopper kernels (cuDNN's accepts keys of 192 and values of 128 per head, the MLA naive form).

A call of T >= SDPA_MIN_T new tokens at position p = 0 (pos read on the host once: a prefill is never captured in a
CUDA graph, unlike decode):
  1. cache[t] = latent[t] (`write_rows`, as the other implementations);
  2. the rows 0 .. T-1 in naive form: k_nope[s, h] = w_uk[h] c_s and v[s, h] = w_uv[h] c_s (`_project_kernel`, bf16
     out), k[s, h] = [k_nope ; k_pe_s] with the row's shared k_pe;
  3. o = softmax(q k^T * scale, causal) v (`is_causal`: the query at t sees rows 0 .. t).
A call after a history (p > 0) runs "triton_splitk"'s code, the Triton naive-form history and flash kernels: torch
has no cuDNN path for a causal mask from the lower right (`causal_lower_right` dispatches to the memory-efficient
kernel), which was slower there (session 11, H200, 4096 rows after 28672: 20.9 ms against 13.0 for the Triton
kernels at their old tile, 8.8 at the tuned one). It is correct: the GPU test test_gpu_sdpa_long_calls_against_exact_attention
measures both torch paths against exact float32 attention at the 48B's shapes (NMSE ~9e-6). (Session 11's chunk
proof first refused this implementation as chunk-dependent; that was near-tie routing flips cascading in unpinned
runs, since fixed in bench/chunking.py, not the attention.) From an empty cache cuDNN leads: 21.4 ms at T = 32768
(~510 TFLOP/s) against 28.9 ms for the Triton flash kernel at its tuned tile.
The backends are cuDNN, flash and memory-efficient attention only (SDPA_BACKENDS, in that priority): torch's math
backend would build the [T, S] scores of every head at once (34 GB at a 16384-token chunk), so a shape none of the
three takes is refused with the fix, never run slowly. Interpreted runs (CPU, TRITON_INTERPRET=1: the tests) allow
the math backend too - stated, since the fused ones are CUDA kernels.
Operands bf16 (q, k, v), softmax in float32 inside the fused kernels: claim "bf16". Short calls (T < SDPA_MIN_T)
and decode are "triton_splitk"'s own code.
"""

import torch

from sparkops.errors import BadInput

from ._runtime import cdiv, interpreting
from .attention_prefill import PROJECT_BK, PROJECT_WARPS, _project_kernel, check_args, dims, write_rows
from .attention_splitk import _attention

#: calls of at least this many new tokens go to torch's fused attention (shorter ones: "triton_splitk")
SDPA_MIN_T = 64
#: rows per program of the projection into naive form
PROJECT_BM = 64
#: torch's fused attention backends allowed, first preferred (`sdpa_kernel(..., set_priority=True)`): cuDNN's takes
#: keys and values of different widths; flash's needs them equal (it is skipped for the MLA's 192 / 128); the
#: memory-efficient one takes any mask. The tune study attention_prefill_sdpa times each alone
SDPA_BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")


def _backends() -> list:
    from torch.nn.attention import SDPBackend

    fused = [getattr(SDPBackend, name) for name in SDPA_BACKENDS]
    return fused + ([SDPBackend.MATH] if interpreting() else [])


def _sdpa_context():
    """sdpa_kernel over _backends(), in that priority where this torch can take one (set_priority: torch >= 2.6)."""
    import inspect

    from torch.nn.attention import sdpa_kernel

    if "set_priority" in inspect.signature(sdpa_kernel).parameters:
        return sdpa_kernel(_backends(), set_priority=True)
    return sdpa_kernel(_backends())


def naive_rows(cache, pos, upto: int, w_uk, w_uv, lkv: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(k [S, N, Dn+R], v [S, N, Dv]) bfloat16 of cache rows 0 .. upto-1 in naive form (S = upto)."""
    n, dn, _ = w_uk.shape
    dv = w_uv.shape[1]
    wrow = cache.shape[1]
    r = wrow - lkv
    dnp, _, lkp, dvp = dims(dn, r, lkv, dv)
    dev = cache.device
    k_nope = torch.empty((upto, n, dnp), dtype=torch.bfloat16, device=dev)  # [S, N, DNP]
    v = torch.empty((upto, n, dvp), dtype=torch.bfloat16, device=dev)       # [S, N, DVP]
    if upto:
        import triton.language as tl

        _project_kernel[(cdiv(upto, PROJECT_BM), n)](
            cache, w_uk.contiguous(), w_uv.contiguous(), k_nope, v, pos, upto, n, dn, dv, lkv, wrow, BM=PROJECT_BM,
            BK=min(PROJECT_BK, lkp), DNP=dnp, DVP=dvp, OPD=tl.bfloat16, num_warps=PROJECT_WARPS, num_stages=3)
    k_pe = cache[:upto, lkv:].to(torch.bfloat16)                            # [S, R]: one per row, every head
    k = torch.cat([k_nope[:, :, :dn], k_pe[:, None, :].expand(upto, n, r)], dim=-1)  # [S, N, Dn+R]
    return k, v[:, :, :dv]


def prefill_sdpa(q, latent, cache, pos, w_uk, w_uv, scale):
    """Steps 1-3 of the module docstring on checked arguments; [T, N, Dv] in q's dtype."""
    t, n, _ = q.shape
    lkv = w_uk.shape[2]
    p = int(pos.reshape(-1)[0])                                              # host read: prefill is never captured
    s = p + t
    if s > cache.shape[0]:  # refused before any row is written
        raise BadInput(f"attention: {t} new rows at position {p} overrun the cache of {cache.shape[0]} rows; "
                       f"make the cache longer (max_context)")
    if p > 0:  # after a history: the Triton kernels (the module docstring says why)
        return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=False)
    write_rows(latent, cache, pos)
    k, v = naive_rows(cache, pos, s, w_uk, w_uv, lkv)                        # [S, N, Dn+R], [S, N, Dv]
    # heads first, each contiguous (a copy of ~0.5 GB at a 16384-token chunk, ~0.3 ms): the layout every fused
    # backend takes, rather than strides one of them may refuse
    qh = q.to(torch.bfloat16).permute(1, 0, 2).contiguous().unsqueeze(0)     # [1, N, T, Dn+R]
    kh = k.permute(1, 0, 2).contiguous().unsqueeze(0)                        # [1, N, S, Dn+R]
    vh = v.permute(1, 0, 2).contiguous().unsqueeze(0)                        # [1, N, S, Dv]
    try:
        with _sdpa_context():
            o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, scale=float(scale), is_causal=True)
    except RuntimeError as exc:
        raise BadInput(f"attention \"triton_sdpa\": no fused attention of this torch ({torch.__version__}) takes "
                       f"{t} queries over {s} rows, {n} heads, keys of {kh.shape[-1]} and values of {vh.shape[-1]} "
                       f"per head on {q.device} ({str(exc).splitlines()[0][:200]}); select attention=triton_splitk "
                       f"for prefill") from None
    return o[0].permute(1, 0, 2).to(q.dtype).contiguous()                   # [T, N, Dv]


def attention_sdpa(q, latent, cache, pos, w_uk, w_uv, scale):
    """Implementation "triton_sdpa": decode, short calls and calls after a history as "triton_splitk"; T >= SDPA_MIN_T
    from an empty cache on torch's fused attention over the naive form (claim "bf16")."""
    t = check_args("attention", q, latent, cache, pos, w_uk, w_uv)[0]
    if t < SDPA_MIN_T:
        return _attention(q, latent, cache, pos, w_uk, w_uv, scale, fp32=False)
    return prefill_sdpa(q, latent, cache, pos, w_uk, w_uv, scale)
