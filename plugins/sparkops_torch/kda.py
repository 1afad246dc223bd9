"""kda in torch: the gated delta rule, recurrent (decode) and chunked (prefill), float32 throughout.

Three registered implementations share this module:
  kda_recurrent  spec 3.3, one token at a time (a Python loop over T: right for decode)
  kda_chunked    spec 3.4, chunks of C tokens; everything inside a chunk is matmul-parallel and
                 computed for many chunks at once, only the state hand-off walks the chunks
  kda            recurrent for T <= RECURRENT_MAX_T, chunked above (a decision on the shape only;
                 chunks of 64 on CUDA, 32 on CPU where that measured faster)

Numerical safety of the chunked form (spec 3.4): every decay factor is exp of a sum of per-token
log decays (all <= 0), so no exp of a positive number is ever taken and exp(-G) is never formed
(G reaches hundreds with the unbounded softplus gate and would overflow float32). The in-chunk
products need exp(G_r - G_s) for s < r; `_intra_chunk` builds them by halving, as products of two
factors <= 1 through a boundary row, without any [C, C, D] tensor. Every exponent is summed from
the decays between its two rows rather than taken as a difference of cumulative sums: with
|G| ~ 500 such a difference loses ~3e-5 absolutely in float32, which measured as a 2e-5 relative
error of the output; summed directly, the chunked form is as accurate as the recurrence (~1e-7).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._common import f32, require

#: the `kda` implementation runs the recurrence up to this many tokens, the chunked form above
RECURRENT_MAX_T = 16
#: chunk length of the chunked form (a power of two), and the one `kda` uses on CPU
CHUNK = 64
CPU_CHUNK = 32
#: upper bound on the values of the in-chunk temporaries built at once (float32: 256 MiB)
TEMP_BUDGET = 1 << 26


def kda(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    if q.shape[0] <= RECURRENT_MAX_T:
        return kda_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)
    chunk = CHUNK if q.device.type == "cuda" else CPU_CHUNK
    return kda_chunked(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, chunk_size=chunk)


def _prepare(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """float32 (q normed and scaled, k normed, v, log decay gate <= 0, beta in (0, 1))."""
    t, h, d = q.shape
    require(k.shape == q.shape and g.shape == q.shape and v.shape[:2] == (t, h),
            f"kda: q {list(q.shape)}, k {list(k.shape)}, g {list(g.shape)} must be [T, H, D] and v "
            f"{list(v.shape)} [T, H, Dv]")
    require(tuple(beta.shape) == (t, h), f"kda: beta must be [T={t}, H={h}], got {list(beta.shape)}")
    require(a.numel() == h and dt_bias.numel() == h * d,
            f"kda: a must hold H={h} values and dt_bias H*D={h * d}, got {a.numel()} and {dt_bias.numel()}")
    require(tuple(state.shape) == (h, d, v.shape[-1]),
            f"kda: state must be [H={h}, D_k={d}, D_v={v.shape[-1]}], got {list(state.shape)}")
    q32, k32 = f32(q), f32(k)
    q32 = q32 * torch.rsqrt((q32 * q32).sum(dim=-1, keepdim=True) + l2_eps) * scale
    k32 = k32 * torch.rsqrt((k32 * k32).sum(dim=-1, keepdim=True) + l2_eps)
    gate = f32(a).reshape(1, h, 1) * F.softplus(f32(g) + f32(dt_bias).reshape(1, h, d))  # [T, H, D] <= 0
    b = torch.sigmoid(f32(beta))  # [T, H]
    return q32, k32, f32(v), gate, b


def _working_state(state: torch.Tensor) -> torch.Tensor:
    return state if state.dtype == torch.float32 else state.to(torch.float32)


def kda_recurrent(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    q32, k32, v32, gate, b = _prepare(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)
    t = q.shape[0]
    s = _working_state(state)  # [H, Dk, Dv], updated in place
    decay = torch.exp(gate).unsqueeze(-1)  # [T, H, Dk, 1]
    out = torch.empty(v32.shape, dtype=torch.float32, device=v32.device)  # [T, H, Dv]
    for i in range(t):
        s.mul_(decay[i])  # decay the key rows first
        kt = k32[i].unsqueeze(1)  # [H, 1, Dk]
        err = (v32[i].unsqueeze(1) - torch.bmm(kt, s)) * b[i].reshape(-1, 1, 1)  # [H, 1, Dv] b (v - S^T k)
        s.baddbmm_(kt.transpose(1, 2), err)  # S += k err^T
        out[i] = torch.bmm(q32[i].unsqueeze(1), s).squeeze(1)  # read after the write
    if s is not state:
        state.copy_(s)
    return out.to(v.dtype)


def kda_chunked(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps, chunk_size=CHUNK):
    q32, k32, v32, gate, b = _prepare(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps)
    t, h, dk = q.shape
    dv = v.shape[-1]
    chunk_size = int(chunk_size)
    require(chunk_size >= 1 and chunk_size & (chunk_size - 1) == 0,
            f"kda_chunked: chunk_size must be a power of two, got {chunk_size}")
    c = min(chunk_size, 1 << max(0, t - 1).bit_length())  # a short prompt: one chunk, the next power of two
    n = -(-t // c)
    pad = n * c - t

    def heads_chunks(x: torch.Tensor) -> torch.Tensor:  # [T, H, ...] -> [H, N, C, ...], zero padded
        if pad:
            x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])], dim=0)
        return x.reshape(n, c, h, *x.shape[2:]).movedim(2, 0).contiguous()

    qc, kc, vc = heads_chunks(q32), heads_chunks(k32), heads_chunks(v32)  # [H, N, C, D]
    bc = heads_chunks(b)  # [H, N, C]; padding: beta = 0, k = 0, gate = 0 leave S untouched
    gc = heads_chunks(gate)  # [H, N, C, Dk] per-token log decay, <= 0
    cum = gc.cumsum(dim=2)  # G_r: in-chunk cumulative log decay

    w_c = torch.empty(h, n, c, dk, dtype=torch.float32, device=v32.device)
    u_c = torch.empty(h, n, c, dv, dtype=torch.float32, device=v32.device)
    a_qk = torch.empty(h, n, c, c, dtype=torch.float32, device=v32.device)
    group = max(1, TEMP_BUDGET // (h * c * (6 * dk + 3 * c)))  # chunks whose temporaries fit at once
    for j0 in range(0, n, group):  # chunks are independent here; groups only bound the memory
        j = slice(j0, min(n, j0 + group))
        w_c[:, j], u_c[:, j], a_qk[:, j] = _intra_chunk(qc[:, j], kc[:, j], vc[:, j], bc[:, j], gc[:, j], cum[:, j])
    q_dec = qc * torch.exp(cum)  # [H, N, C, Dk]  q_r * exp(G_r)
    k_dec = (kc * torch.exp(_later_sums(gc))).transpose(-1, -2).contiguous()  # [H, N, Dk, C] exp(G_C - G_s) k_s
    d_last = torch.exp(cum[:, :, -1:, :]).transpose(-1, -2)  # [H, N, Dk, 1]  exp(G_C)

    s = _working_state(state)  # [H, Dk, Dv], updated in place
    out = torch.empty(h, n, c, dv, dtype=torch.float32, device=v32.device)
    for j in range(n):  # the state hand-off between chunks: the only sequential part
        v_new = u_c[:, j] - torch.bmm(w_c[:, j], s)  # [H, C, Dv]
        out[:, j] = torch.bmm(q_dec[:, j], s) + torch.bmm(a_qk[:, j], v_new)
        s.mul_(d_last[:, j]).baddbmm_(k_dec[:, j], v_new)
    if s is not state:
        state.copy_(s)
    return out.reshape(h, n * c, dv)[:, :t].transpose(0, 1).to(v.dtype)  # [T, H, Dv]


def _later_sums(x: torch.Tensor) -> torch.Tensor:
    """y[..., s, :] = sum of x[..., j, :] over j > s along dim -2 (0 for the last row).

    Summed from the end, so G_C - G_s comes out as a sum of the few decays after s, not as the
    difference of two large cumulative sums (which would cancel catastrophically in float32).
    """
    shifted = torch.cat([x[..., 1:, :], torch.zeros_like(x[..., :1, :])], dim=-2)
    return shifted.flip(-2).cumsum(dim=-2).flip(-2)


def _intra_chunk(qc, kc, vc, bc, gc, cum):
    """Per chunk: Wc = M (exp(G) k), Uc = M v with M = (I + L)^-1 diag(beta), and Aqk (spec 3.4).

    The decayed products P[r, s] = sum_d k_r[d] k_s[d] exp(G_r[d] - G_s[d]) for s < r (and Aqk, the
    same with q_r, for s <= r) are built by halving: at every level the chunk is cut into blocks of
    B rows, and each block's lower-left quadrant (r in its second half, s in its first) is one
    matmul of two factors through the boundary row b (the last row of the first half):
        exp(G_r - G_s) = exp(G_r - G_b) * exp(G_b - G_s),  s <= b < r,
    and G never increases, so neither exponent is positive: no exp of a positive number is ever
    taken (exp(-G) is never formed; a factor may underflow to 0, and then so does the true product
    to float32 precision). Each exponent is summed directly from the per-token decays between the
    two rows (a block-local cumulative sum), never as a difference of the chunk's cumulative sums:
    G reaches hundreds, and G_r - G_s taken as a difference would lose ~|G| * 6e-8 absolutely.
    Levels B = 2, 4, ..., C cover every s < r exactly once; the diagonal is
    exp(0) = 1. Cost per chunk O(C log C * D) exps and O(C^2 D) matmul work, no [C, C, D] tensor.
    """
    h, n, c, dk = kc.shape
    p = torch.zeros(h, n, c, c, dtype=torch.float32, device=kc.device)
    a_qk = torch.zeros_like(p)
    a_qk.diagonal(dim1=-2, dim2=-1).copy_((qc * kc).sum(dim=-1))  # s = r: no decay
    size = 2
    while size <= c:
        half, blocks = size // 2, c // size
        g = gc.reshape(h, n, blocks, size, dk)
        late = torch.exp(g[..., half:, :].cumsum(dim=-2))  # exp(G_r - G_b) <= 1, r in the second half
        early = torch.exp(_later_sums(g[..., :half, :]))  # exp(G_b - G_s) <= 1, s in the first half
        k_early = (kc.reshape(h, n, blocks, size, dk)[..., :half, :] * early).transpose(-1, -2)  # [.., Dk, half]
        quad_p = torch.matmul(kc.reshape(h, n, blocks, size, dk)[..., half:, :] * late, k_early)  # [.., half, half]
        quad_a = torch.matmul(qc.reshape(h, n, blocks, size, dk)[..., half:, :] * late, k_early)
        _block_diagonal(p, size)[..., half:, :half, :] = quad_p.movedim(2, -1)
        _block_diagonal(a_qk, size)[..., half:, :half, :] = quad_a.movedim(2, -1)
        size *= 2

    b_ = bc.unsqueeze(-1)  # [H, N, C, 1]
    lower = b_ * p  # L = strict_lower(diag(beta) P): p is zero on and above the diagonal
    rhs = b_ * torch.cat([kc * torch.exp(cum), vc], dim=-1)  # diag(beta) [exp(G) k, v]
    eye = torch.eye(c, dtype=torch.float32, device=kc.device)
    sol = torch.linalg.solve_triangular(eye + lower, rhs, upper=False, unitriangular=True)
    return sol[..., :dk], sol[..., dk:], a_qk


def _block_diagonal(m: torch.Tensor, size: int) -> torch.Tensor:
    """A writable view [..., size, size, C/size] of the diagonal size x size blocks of m [..., C, C]."""
    c = m.shape[-1]
    blocks = m.reshape(*m.shape[:-2], c // size, size, c // size, size)
    return blocks.diagonal(dim1=-4, dim2=-2)
