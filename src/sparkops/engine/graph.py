"""One Kimi-Linear forward, written against the named ops only.

The graph never imports a backend: every computation is `ops.<name>(...)`. What it does itself is
layout (views, reshapes, column slices, one concatenation of the MLA cache row) and the position bookkeeping.
Shapes: T new tokens, D hidden, H/Dk KDA heads and head size, P = H*Dk, N MLA heads.
"""

from __future__ import annotations

import dataclasses

import torch

from ..config import ModelConfig
from ..dispatch import Ops
from ..kvcache import to_cache
from ..weights import DenseFFNWeights, KDAWeights, MLAWeights, ModelWeights, MoEWeights
from ..qweight import QWeight
from .branches import SideStream
from .fusion import CONV_INPUTS, LOW_RANK, LOW_RANK_INPUTS, QKV, Group, Groups, SharedFFN, columns, project
from .state import KDAState, MLAState, SequenceState


#: a KDA layer's gate inputs: projections of the normed input that only the recurrence and the output norm read
GATE_INPUTS: tuple[str, ...] = ("f_a", "g_a", "beta")

#: with `[engine] fuse_kda_norm`, the calls of at most this many tokens (decode) whose recurrence and output norm run
#: as one op (kda_norm); a longer call (a prefill chunk) keeps kda - chunked there - and gated_rmsnorm apart. With
#: `[engine] fuse_kda_gates` the same calls also take the two low-rank up-projections into that op (kda_lowrank_norm);
#: with `[engine] fuse_conv_kda` those of a layer with the merged q|k|v conv take the short conv (short_conv_kda_norm)
FUSED_NORM_MAX_T = 1

#: with `[engine] fuse_router_norm`, the calls of at most this many tokens (decode, a few speculative tokens) whose MoE
#: layers run the residual add, the FFN norm and the router as one op (add_rmsnorm_router); a longer call (a prefill
#: chunk) keeps add_rmsnorm and moe_router apart. The CUDA kernel's own limit (its grid row a token) is the same 8
ROUTER_NORM_MAX_T = 8

#: with `[engine] fuse_oproj_norm`, the calls of at most this many tokens (decode) whose attention blocks end with
#: their output projection and the FFN's residual add and norm as one op (linear_add_rmsnorm); a longer call (a
#: prefill chunk) keeps the o_proj linear and add_rmsnorm apart. The CUDA kernel takes one token, as the GEMVs do
OPROJ_NORM_MAX_T = 1

#: with `[engine] fuse_moe_norm`, the calls of at most this many tokens (decode) whose MoE layers run their experts and
#: the next block's residual add and norm as one op (moe_experts_add_rmsnorm); a longer call (a prefill chunk, whose
#: experts are GEMMs) keeps moe_experts and add_rmsnorm apart. The CUDA kernels take one token, as the experts' do
MOE_NORM_MAX_T = 1

#: with `[engine] shared_expert_side`, the calls of at most this many tokens (decode, a few speculative tokens) whose
#: MoE layers run their shared expert apart from the routed ones, on the side stream (shared_apart); a longer call (a
#: prefill chunk, whose experts are GEMMs) keeps the shared expert inside moe_experts
SHARED_SIDE_MAX_T = 8


def gates_apart(groups: tuple[Group, ...]) -> bool:
    """Whether no fused group of a KDA layer holds a gate input together with q, k or v: its gate projections can then
    run apart from them (on the side stream). A float model fuses all six into one linear, which cannot be split."""
    return not any(set(g.names) & set(GATE_INPUTS) and not set(g.names) <= set(GATE_INPUTS) for g in groups)


def kda_block(ops: Ops, cfg: ModelConfig, w: KDAWeights, st: KDAState, a: torch.Tensor,
              groups: tuple[Group, ...] = (), window: torch.Tensor | None = None,
              low_rank: QWeight | None = None, side: SideStream | None = None,
              fuse_norm: bool = False, fuse_gates: bool = False, fuse_conv: bool = False,
              out_proj: bool = True) -> torch.Tensor:
    """The KDA layer's output [T, D]; with `out_proj` False, its input to o_proj [T, P] (the caller projects it,
    fuse_oproj_norm's linear_add_rmsnorm).
    `window`: the [W-1, 3P] buffer of which st.conv_q/conv_k/conv_v are column views, if the state has one.
    `low_rank`: the block-diagonal [[f_b, 0], [0, g_b]] weight [2P, 2Dk] (fusion.py, fuse_low_rank).
    `side`: the gate projections (GATE_INPUTS, then f_b and g_b) run there, concurrent with q/k/v and their short
    conv (branches.py), when no fused group mixes a gate input with q, k or v (one linear cannot be split).
    `fuse_norm` (fuse_kda_norm): a call of at most FUSED_NORM_MAX_T tokens runs the recurrence and the output norm
    as one op, kda_norm (g_b then runs before it, not after the recurrence).
    `fuse_gates` (fuse_kda_gates): such a call runs f_b, g_b, the recurrence and the output norm as one op,
    kda_lowrank_norm, on f_a's and g_a's outputs: no up-projection linear (nor the block-diagonal one of
    `low_rank`) runs, and the side stream, if any, carries only the GATE_INPUTS projections. It implies the norm
    fusion for those calls, whatever `fuse_norm` says. A longer call (a prefill chunk) is as without it.
    `fuse_conv` (fuse_conv_kda): such a call of a layer whose q, k, v share one merged conv (a group with `conv`, and
    `window`) runs the short conv, the recurrence and the output norm as one op, short_conv_kda_norm, on the raw
    q|k|v projection: no short_conv runs, and the gates are computed before it (as with `fuse_norm`, which it
    implies for those calls). A layer without the merged conv, and a longer call, are as without it. Both take the
    same calls, so the registry and the Engine refuse it together with fuse_kda_gates (registry/file.py
    ENGINE_EXCLUDES); given both, this function would run fuse_gates' op."""
    t = a.shape[0]
    h, dk = cfg.kda_heads, cfg.kda_head_dim
    short = t <= FUSED_NORM_MAX_T
    merged = _merged_conv(groups, window)
    if fuse_gates and short:
        q, k, v, (f, ga, beta) = _qkv_and_codes(ops, cfg, w, st, a, groups, window, low_rank, side)  # f, ga [T, Dk]
        y = ops.kda_lowrank_norm(q.view(t, h, dk), k.view(t, h, dk), v.view(t, h, dk), f, w.f_b, beta, w.a,
                                 w.dt_bias, st.recurrent, dk ** -0.5, cfg.l2_eps, ga, w.g_b, w.o_norm,
                                 cfg.rms_norm_eps)  # [T, H, Dk]
    elif fuse_conv and short and merged is not None:
        y = _conv_kda_norm(ops, cfg, w, st, a, groups, merged, window, low_rank, side)
    else:
        y = _kda_with_gate_linears(ops, cfg, w, st, a, groups, window, low_rank, side, fuse_norm and short)
    if not out_proj:
        return y.reshape(t, h * dk)  # [T, P]
    return ops.linear(y.reshape(t, h * dk), w.o_proj)  # [T, D]


def _kda_with_gate_linears(ops: Ops, cfg: ModelConfig, w: KDAWeights, st: KDAState, a: torch.Tensor,
                           groups: tuple[Group, ...], window: torch.Tensor | None, low_rank: QWeight | None,
                           side: SideStream | None, fuse_norm: bool) -> torch.Tensor:
    """The KDA layer up to o_proj with the up-projections f_b and g_b run as linears (or as the one block-diagonal
    linear of `low_rank`): then the recurrence and the output norm, as one op (kda_norm) with `fuse_norm`, else as
    kda (chunked for a long call) then gated_rmsnorm. y [T, H, Dk]."""
    t = a.shape[0]
    h, dk = cfg.kda_heads, cfg.kda_head_dim
    joints = (LOW_RANK_INPUTS,) if low_rank is not None else ()
    if side is not None and gates_apart(groups):
        gate_groups, line_groups = _split_groups(groups)
        first = _gate_inputs_first(ops, a, w, side, gate_groups, joints)
        with side.fork():
            g, gate, beta = _gates(ops, w, a, t, h, dk, gate_groups, joints, low_rank, late_gate=False, p=first)
        q, k, v = _qkv(ops, w, st, a, t, h, dk, line_groups, window, (), ("q", "k", "v"))
        side.join(g, gate, beta)
        p = None
    else:
        q, k, v, p = _qkv(ops, w, st, a, t, h, dk, groups, window, joints, ("q", "k", "v") + GATE_INPUTS,
                          keep=True)
        g, gate, beta = _gates(ops, w, a, t, h, dk, groups, joints, low_rank, late_gate=True, p=p)
    core = (q.view(t, h, dk), k.view(t, h, dk), v.view(t, h, dk), g.view(t, h, dk), beta, w.a, w.dt_bias,
            st.recurrent, dk ** -0.5, cfg.l2_eps)
    if fuse_norm:
        if gate is None:
            gate = ops.linear(p["g_a"], w.g_b)  # [T, P]
        return ops.kda_norm(*core, gate.view(t, h, dk), w.o_norm, cfg.rms_norm_eps)  # [T, H, Dk]
    o = ops.kda(*core)  # [T, H, Dk]
    if gate is None:  # the one-stream order: g_b after the recurrence
        gate = ops.linear(p["g_a"], w.g_b)  # [T, P]
    return ops.gated_rmsnorm(o, gate.view(t, h, dk), w.o_norm, cfg.rms_norm_eps)  # [T, H, Dk]


def _conv_kda_norm(ops: Ops, cfg: ModelConfig, w: KDAWeights, st: KDAState, a: torch.Tensor,
                   groups: tuple[Group, ...], merged: Group, window: torch.Tensor, low_rank: QWeight | None,
                   side: SideStream | None) -> torch.Tensor:
    """The KDA layer up to o_proj with its short conv, recurrence and output norm as one op (short_conv_kda_norm,
    fuse_conv_kda): the raw q|k|v projection [T, 3P] goes in with the merged conv's taps and `window` (rolled in
    place), the gates (g, gate, beta) are computed before it, g_b included, as fuse_norm's order has them.
    With the side stream (the gate inputs apart from q/k/v) the gate projections fork there, the main line runs only
    the q|k|v projection - no conv - and joins before the fused op, the first to read g, gate and beta. y [T, H, Dk]."""
    t = a.shape[0]
    h, dk = cfg.kda_heads, cfg.kda_head_dim
    joints = (LOW_RANK_INPUTS,) if low_rank is not None else ()
    if side is not None and gates_apart(groups):
        gate_groups, line_groups = _split_groups(groups)
        first = _gate_inputs_first(ops, a, w, side, gate_groups, joints)
        with side.fork():
            g, gate, beta = _gates(ops, w, a, t, h, dk, gate_groups, joints, low_rank, late_gate=False, p=first)
        x = project(ops, a, w, CONV_INPUTS, line_groups, joints=(CONV_INPUTS,))[QKV]  # [T, 3P], before the conv
        side.join(g, gate, beta)
    else:
        p = project(ops, a, w, CONV_INPUTS + GATE_INPUTS, groups, joints=(CONV_INPUTS, *joints))
        x = p[QKV]  # [T, 3P], before the conv
        g, gate, beta = _gates(ops, w, a, t, h, dk, groups, joints, low_rank, late_gate=True, p=p)
        if gate is None:
            gate = ops.linear(p["g_a"], w.g_b)  # [T, P]
    return ops.short_conv_kda_norm(x, merged.conv, window, g.view(t, h, dk), beta, w.a, w.dt_bias, st.recurrent,
                                   dk ** -0.5, cfg.l2_eps, gate.view(t, h, dk), w.o_norm,
                                   cfg.rms_norm_eps)  # [T, H, Dk]


def _merged_conv(groups: tuple[Group, ...], window: torch.Tensor | None) -> Group | None:
    """The group whose q|k|v run one short conv over 3P channels (fusion.py: its `conv` taps), if the state holds
    that conv's one [W-1, 3P] `window`; else None (three convs)."""
    merged = next((g for g in groups if g.conv is not None), None)
    return merged if window is not None else None


def _gate_inputs_first(ops: Ops, a: torch.Tensor, w: KDAWeights, side: SideStream, gate_groups: tuple[Group, ...],
                       joints: tuple[tuple[str, ...], ...]) -> dict[str, torch.Tensor] | None:
    """With [engine] gates_first (side.gates_first): the gate inputs' projections (f_a | g_a | beta), run here on the
    main line before q/k/v is enqueued; else None (they fork with the rest of the gates).

    Why: GPU session 33's H100 timeline, read by bench/probes/critical_path.py, has a KDA layer's critical path on the
    side stream. Its first GEMV (1.3 MB) starts after the tall q|k|v GEMV has requested its 16 MB (under PDL, while
    the norm still runs) and ends 1.3 us after it, ~10 us for a GEMV of ~2.6 alone; the up-projections and the
    recurrence wait for it. Run first, it reads its bytes before the tall GEMV's; the up-projections still run beside
    q/k/v. The same ops on the same inputs: the same bits as the side stream's order."""
    if not side.gates_first:
        return None
    return project(ops, a, w, GATE_INPUTS, gate_groups, joints=joints)


def _split_groups(groups: tuple[Group, ...]) -> tuple[tuple[Group, ...], tuple[Group, ...]]:
    """(the groups of gate inputs only, the rest): what the side stream runs, and what the main line runs."""
    gate_groups = tuple(g for g in groups if set(g.names) <= set(GATE_INPUTS))
    line_groups = tuple(g for g in groups if not set(g.names) <= set(GATE_INPUTS))
    return gate_groups, line_groups


def _qkv_and_codes(ops: Ops, cfg: ModelConfig, w: KDAWeights, st: KDAState, a: torch.Tensor,
                   groups: tuple[Group, ...], window: torch.Tensor | None, low_rank: QWeight | None,
                   side: SideStream | None):
    """q, k, v after their short convs ([T, P] each) and the gate codes (f, ga, beta) that kda_lowrank_norm takes:
    f_a's and g_a's outputs [T, Dk] (the gates' low rank, as weights.py stores f_a) and beta [T, H] - the
    projections only, no up-projection.
    With the side stream (and the gate inputs apart from q/k/v) the GATE_INPUTS projections run there."""
    t = a.shape[0]
    h, dk = cfg.kda_heads, cfg.kda_head_dim
    joints = (LOW_RANK_INPUTS,) if low_rank is not None else ()  # the projections' layout, as without fuse_gates
    if side is not None and gates_apart(groups):
        gate_groups, line_groups = _split_groups(groups)
        first = _gate_inputs_first(ops, a, w, side, gate_groups, joints)
        if first is not None:  # gates_first: the codes are all the side stream would run, so nothing forks
            q, k, v = _qkv(ops, w, st, a, t, h, dk, line_groups, window, (), ("q", "k", "v"))
            return q, k, v, _codes(w, first)
        with side.fork():
            codes = _codes(w, project(ops, a, w, GATE_INPUTS, gate_groups, joints=joints))
        q, k, v = _qkv(ops, w, st, a, t, h, dk, line_groups, window, (), ("q", "k", "v"))
        side.join(*codes)
        return q, k, v, codes
    q, k, v, p = _qkv(ops, w, st, a, t, h, dk, groups, window, joints, ("q", "k", "v") + GATE_INPUTS, keep=True)
    return q, k, v, _codes(w, p)


def _codes(w: KDAWeights, p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(f, ga, beta) from the gate inputs' projections `p`: f_a's and g_a's outputs [T, Dk] each, beta [T, H].
    Where fuse_low_rank's joint made f_a | g_a one slice, its two column halves (views for one token: no copy
    kernel)."""
    if LOW_RANK in p:
        fg = p[LOW_RANK]  # [T, 2Dk]: [f_a | g_a]
        rank = int(w.f_a.shape[0])
        return columns(fg, 0, rank), columns(fg, rank, int(w.g_a.shape[0])), p["beta"]
    return p["f_a"], p["g_a"], p["beta"]


def _qkv(ops: Ops, w: KDAWeights, st: KDAState, a: torch.Tensor, t: int, h: int, dk: int,
         groups: tuple[Group, ...], window: torch.Tensor | None, joints: tuple[tuple[str, ...], ...],
         names: tuple[str, ...], keep: bool = False):
    """q, k, v after their short convs ([T, P] each), from the projections of `names`; with `keep`, also the
    projections (for the gate inputs projected with them)."""
    merged = _merged_conv(groups, window)
    if merged is not None:  # q|k|v adjacent in one group: one conv over 3P channels
        p = project(ops, a, w, names, groups, joints=(CONV_INPUTS, *joints))  # the projections of a (fusion.py)
        qkv = ops.short_conv(p[QKV], merged.conv, window)  # [T, 3P], bit-identical to the three below
        q, k, v = (columns(qkv, j * h * dk, h * dk) for j in range(3))  # [T, P] each
    else:
        p = project(ops, a, w, names, groups, joints=joints)  # the projections of a (fusion.py)
        q = ops.short_conv(p["q"], w.conv_q, st.conv_q)  # [T, P]
        k = ops.short_conv(p["k"], w.conv_k, st.conv_k)  # [T, P]
        v = ops.short_conv(p["v"], w.conv_v, st.conv_v)  # [T, P]
    return (q, k, v, p) if keep else (q, k, v)


def _gates(ops: Ops, w: KDAWeights, a: torch.Tensor, t: int, h: int, dk: int, groups: tuple[Group, ...],
           joints: tuple[tuple[str, ...], ...], low_rank: QWeight | None, late_gate: bool,
           p: dict[str, torch.Tensor] | None = None):
    """(g, gate, beta): the decay logits and the output gate [T, P] and beta [T, H], from the gate inputs' projections
    `p` (projected here when None). With `late_gate` and no block-diagonal weight, gate is None: the caller runs g_b
    after the recurrence, as the one-stream forward always has."""
    if p is None:
        p = project(ops, a, w, GATE_INPUTS, groups, joints=joints)
    if LOW_RANK in p:  # f_a | g_a adjacent: both up-projections as one block-diagonal linear
        fg = ops.linear(p[LOW_RANK], low_rank)  # [T, 2P]: [f | gate]
        g, gate = columns(fg, 0, h * dk), columns(fg, h * dk, h * dk)  # [T, P] each
    else:
        g = ops.linear(p["f_a"], w.f_b)  # [T, P] decay logits
        gate = None if late_gate else ops.linear(p["g_a"], w.g_b)  # [T, P]
    return g, gate, p["beta"]  # beta [T, H]


def mla_block(ops: Ops, cfg: ModelConfig, w: MLAWeights, st: MLAState, pos: torch.Tensor,
              a: torch.Tensor, groups: tuple[Group, ...] = (), out_proj: bool = True) -> torch.Tensor:
    """The MLA layer's output [T, D]; with `out_proj` False, its input to o_proj [T, N * Dv] (the caller projects it,
    fuse_oproj_norm's linear_add_rmsnorm)."""
    t = a.shape[0]
    n, lkv = cfg.mla_heads, cfg.kv_lora_rank
    p = project(ops, a, w, ("q", "kv_a"), groups)
    q = p["q"].view(t, n, cfg.qk_head_dim)  # [T, N, Dn+R]
    ckv = p["kv_a"]  # [T, Lkv+R]
    c = ops.rmsnorm(ckv[:, :lkv].contiguous(), w.kv_norm, cfg.kv_norm_eps)  # [T, Lkv]
    latent = to_cache(torch.cat([c, ckv[:, lkv:]], dim=-1), st.cache.dtype)  # [T, Lkv+R], the cache row
    o = ops.attention(q, latent, st.cache, pos, w.w_uk, w.w_uv, cfg.qk_head_dim ** -0.5)  # [T, N, Dv]
    if not out_proj:
        return o.reshape(t, n * cfg.v_head_dim)  # [T, N * Dv]
    return ops.linear(o.reshape(t, n * cfg.v_head_dim), w.o_proj)  # [T, D]


def ffn_block(ops: Ops, cfg: ModelConfig, w: DenseFFNWeights | MoEWeights, f: torch.Tensor,
              groups: tuple[Group, ...] = (), routed: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The FFN of the normed input f [T, D]: a dense SwiGLU, or the MoE router then its experts. `routed`: the MoE
    layer's (weights, ids) already computed with the norm (add_rmsnorm_router, fuse_router_norm); no router runs."""
    if isinstance(w, DenseFFNWeights):
        p = project(ops, f, w, ("gate", "up"), groups)
        return ops.linear(ops.swiglu(p["gate"], p["up"]), w.down)
    if routed is None:
        routed = ops.moe_router(f, w.router, w.bias, cfg.n_experts_per_token, cfg.n_group, cfg.topk_group,
                                cfg.routed_scaling_factor, cfg.router_renorm_eps)  # [T, K], [T, K]
    weights, ids = routed
    return ops.moe_experts(f, weights, ids, w.gate_exps, w.up_exps, w.down_exps, w.s_gate, w.s_up, w.s_down)


def moe_block_norm(ops: Ops, cfg: ModelConfig, w: MoEWeights, f: torch.Tensor, h: torch.Tensor,
                   next_norm: torch.Tensor, routed: tuple[torch.Tensor, torch.Tensor] | None = None):
    """A MoE layer's FFN of the normed input f [T, D] with the next block's residual add and norm ([engine]
    fuse_moe_norm): the router (unless `routed` holds its (weights, ids) already), then the experts, the add into the
    stream h [T, D] and the norm by `next_norm` as one op, moe_experts_add_rmsnorm. Returns (the next block's normed
    input, the stream), as the unfused ffn_block and add_rmsnorm return them."""
    if routed is None:
        routed = ops.moe_router(f, w.router, w.bias, cfg.n_experts_per_token, cfg.n_group, cfg.topk_group,
                                cfg.routed_scaling_factor, cfg.router_renorm_eps)  # [T, K], [T, K]
    weights, ids = routed
    return ops.moe_experts_add_rmsnorm(f, weights, ids, w.gate_exps, w.up_exps, w.down_exps, w.s_gate, w.s_up,
                                       w.s_down, h, next_norm, cfg.rms_norm_eps)  # [T, D], [T, D]


def shared_apart(ops: Ops, cfg: ModelConfig, w: MoEWeights, f: torch.Tensor, h: torch.Tensor,
                 next_norm: torch.Tensor, shared: SharedFFN, side: SideStream,
                 routed: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A MoE layer's FFN with its shared expert apart ([engine] shared_expert_side): (the routed experts' output
    [T, D], the residual stream [T, D] with the shared expert's output added).

    The shared expert reads only the normed input f, as the router does; inside moe_experts its rows are 1/9 of the
    48B's gate/up and down, on the critical path after the router. Here it runs as the dense SwiGLU FFN it is
    (`shared`: fusion.shared_ffns, gate and up one linear where fuse_projections) on the side stream, beside the router
    and the routed experts, and adds its output into the residual there with add_rmsnorm (the op that adds a layer's
    output to the residual; its normed half is not used: a norm's work on the side stream, off the critical path).
    The main line runs the router and moe_experts with no shared expert (the contract's None), joins, and the layer's
    closing add_rmsnorm adds the routed output to that residual. So h + shared + routed is summed in another order
    than h + (routed + shared), each sum rounded to the activations' dtype: not the one-stream bits; the gate judges
    it. Off CUDA the side block runs inline (branches.py's stated policy): the same ops, the same order."""
    with side.fork():
        ys = ffn_block(ops, cfg, shared[0], f, shared[1])  # [T, D] the shared expert
        _, hs = ops.add_rmsnorm(ys, h, next_norm, cfg.rms_norm_eps)  # [T, D] h + shared; the normed half unused
    y = ffn_block(ops, cfg, dataclasses.replace(w, s_gate=None, s_up=None, s_down=None), f, (), routed)  # [T, D]
    side.join(hs)
    return y, hs


def ffn_norm(ops: Ops, cfg: ModelConfig, layer, y: torch.Tensor, h: torch.Tensor, fuse_router: bool):
    """The residual add and the FFN norm of a block's output y [T, D] into the stream h [T, D]: (f, h, routed). With
    `fuse_router` (fuse_router_norm), a MoE layer's call of at most ROUTER_NORM_MAX_T tokens runs the norm and the
    router as one op, add_rmsnorm_router, and `routed` is its (weights, ids); otherwise add_rmsnorm runs alone and
    `routed` is None (ffn_block routes)."""
    if fuse_router and isinstance(layer.ffn, MoEWeights) and y.shape[0] <= ROUTER_NORM_MAX_T:
        w = layer.ffn
        f, h, weights, ids = ops.add_rmsnorm_router(y, h, layer.ffn_norm, cfg.rms_norm_eps, w.router, w.bias,
                                                    cfg.n_experts_per_token, cfg.n_group, cfg.topk_group,
                                                    cfg.routed_scaling_factor, cfg.router_renorm_eps)
        return f, h, (weights, ids)  # [T, D], [T, D], ([T, K], [T, K])
    f, h = ops.add_rmsnorm(y, h, layer.ffn_norm, cfg.rms_norm_eps)
    return f, h, None


def forward(ops: Ops, model: ModelWeights, state: SequenceState, tokens: torch.Tensor, dtype: torch.dtype,
            last_only: bool, fused: Groups | None = None,
            low_rank: dict[int, QWeight] | None = None, side: SideStream | None = None,
            fuse_norm: bool = False, *, fuse_gates: bool = False, fuse_router: bool = False,
            fuse_conv: bool = False, shared: dict[int, SharedFFN] | None = None,
            fuse_moe_norm: bool = False, fuse_oproj_norm: bool = False) -> torch.Tensor:
    """Run T new tokens through the model, advancing `state`; logits [T, V] (or [1, V] if last_only).
    `fused`: the projection groups per (layer, block) when the engine fuses them (fusion.py); `low_rank`: the KDA
    layers' block-diagonal low-rank weights when it fuses those too; `side`: the side stream of the KDA layers' gate
    projections (branches.py), None for one line of work; `fuse_norm`: KDA's recurrence and output norm as one op
    (kda_norm) in calls of at most FUSED_NORM_MAX_T tokens; `fuse_gates`: in those calls the two low-rank gate
    up-projections too, with the recurrence and the norm as one op (kda_lowrank_norm), whatever `fuse_norm` says;
    `fuse_router`: a MoE layer's residual add, FFN norm and router as one op (add_rmsnorm_router) in calls of at most
    ROUTER_NORM_MAX_T tokens; `fuse_conv`: in calls of at most FUSED_NORM_MAX_T tokens, a KDA layer with the merged
    q|k|v conv runs that conv, the recurrence and the norm as one op (short_conv_kda_norm; not with `fuse_gates`);
    `shared` (shared_expert_side, with `side`): in calls of at most SHARED_SIDE_MAX_T tokens, the MoE layers it holds
    run their shared expert on the side stream (shared_apart); `fuse_moe_norm`: in calls of at most MOE_NORM_MAX_T
    tokens, the MoE layers that do not run their shared expert apart end with their experts and the next block's
    residual add and norm as one op (moe_block_norm); `fuse_oproj_norm`: in calls of at most OPROJ_NORM_MAX_T tokens,
    every layer's attention output projection and the FFN's residual add and norm run as one op (linear_add_rmsnorm;
    not with `fuse_router`, which takes that norm into the router's op)."""
    cfg = model.config
    fused = fused or {}
    low_rank = low_rank or {}
    shared = shared or {}
    h = ops.embedding(model.embed, tokens, dtype)  # [T, D] residual stream
    a = ops.rmsnorm(h, model.layers[0].attn_norm, cfg.rms_norm_eps)
    for i, layer in enumerate(model.layers):
        st = state.layers[i]
        fold = fuse_oproj_norm and tokens.shape[0] <= OPROJ_NORM_MAX_T
        if layer.kind == "kda":
            y = kda_block(ops, cfg, layer.attn, st, a, fused.get((i, "attn"), ()), state.conv_windows.get(i),
                          low_rank.get(i), side, fuse_norm, fuse_gates, fuse_conv, out_proj=not fold)
        else:
            y = mla_block(ops, cfg, layer.attn, st, state.pos, a, fused.get((i, "attn"), ()), out_proj=not fold)
        if fold:  # y is the o_proj's input: the projection, the add and the FFN norm as one op
            f, h = ops.linear_add_rmsnorm(y, layer.attn.o_proj, h, layer.ffn_norm, cfg.rms_norm_eps)  # [T, D] x2
            routed = None
        else:
            f, h, routed = ffn_norm(ops, cfg, layer, y, h, fuse_router)
        next_norm = model.layers[i + 1].attn_norm if i + 1 < len(model.layers) else model.output_norm
        if side is not None and i in shared and tokens.shape[0] <= SHARED_SIDE_MAX_T:
            y, h = shared_apart(ops, cfg, layer.ffn, f, h, next_norm, shared[i], side, routed)
        elif fuse_moe_norm and isinstance(layer.ffn, MoEWeights) and tokens.shape[0] <= MOE_NORM_MAX_T:
            a, h = moe_block_norm(ops, cfg, layer.ffn, f, h, next_norm, routed)
            continue
        else:
            y = ffn_block(ops, cfg, layer.ffn, f, fused.get((i, "ffn"), ()), routed)
        a, h = ops.add_rmsnorm(y, h, next_norm, cfg.rms_norm_eps)
    if last_only:
        a = a[-1:]
    state.pos.add_(tokens.shape[0])
    return ops.linear(a, model.output)  # [T or 1, V]
