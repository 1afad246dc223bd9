"""kda: every implementation against the reference; the reference's two forms (recurrent 3.3 and
chunked 3.4) against each other and against an independent torch recurrence; the classic bugs of
spec 7 (gate formula, read after write, q/k L2-norm, state layout)."""

import pytest
import torch
import torch.nn.functional as F

from sparkops.errors import BadInput
from sparkops_numpy.kda import kda, kda_chunked

from ._check import check_against_reference, rel_l2

OP = "kda"


def test_matches_reference_on_contract_cases(impl, seed):
    check_against_reference(OP, impl, seed)


def make_inputs(seed, t, h, d, *, gate_std=1.0, log_a=(-1.0, 1.0), state_std=0.1, dtype=torch.float64):
    """Random kda arguments and an initial state (nonzero unless state_std == 0)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    lo, hi = log_a
    a = -torch.exp(torch.rand(h, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    args = dict(q=rnd(t, h, d), k=rnd(t, h, d), v=rnd(t, h, d), g=rnd(t, h, d, std=gate_std),
                beta=rnd(t, h, std=2.0), a=a, dt_bias=rnd(h * d, std=0.5), scale=d ** -0.5, l2_eps=1e-6)
    return args, rnd(h, d, d, std=state_std)


def torch_recurrence(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    """Spec 3.3 in its matrix form S_t = (I - b k k^T) Diag(alpha) S + b k v^T, o = S^T q, per head, float64."""
    t, h, d = q.shape
    q, k, v, g = (x.double() for x in (q, k, v, g))
    qn = scale * q * torch.rsqrt((q * q).sum(-1, keepdim=True) + l2_eps)
    kn = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + l2_eps)
    alpha = torch.exp(a.double()[:, None] * F.softplus(g + dt_bias.double().view(h, d)))  # [T, H, D]
    b = torch.sigmoid(beta.double())
    s = state.double().clone()
    out = torch.empty(t, h, d, dtype=torch.float64)
    eye = torch.eye(d, dtype=torch.float64)
    for i in range(t):
        for j in range(h):
            kk = kn[i, j][:, None]
            s[j] = (eye - b[i, j] * kk @ kk.T) @ torch.diag(alpha[i, j]) @ s[j] + b[i, j] * kk @ v[i, j][None, :]
            out[i, j] = s[j].T @ qn[i, j]
    return out, s


@pytest.mark.parametrize("t,h,d", [(1, 2, 8), (9, 3, 16), (20, 1, 32)])
def test_recurrent_form_matches_independent_torch_recurrence(t, h, d):
    args, state = make_inputs(10 + t, t, h, d)
    want_out, want_state = torch_recurrence(**args, state=state)
    got = kda(**args, state=state)
    assert got.dtype == torch.float64 and got.shape == (t, h, d)
    assert rel_l2(got, want_out) < 1e-12
    assert rel_l2(state, want_state) < 1e-12


@pytest.mark.parametrize("t,chunk", [(1, 64), (37, 8), (64, 64), (70, 64), (130, 64), (50, 16), (23, 1), (45, 16)])
def test_chunked_form_matches_recurrent_form(t, chunk):
    args, state0 = make_inputs(100 + t + chunk, t, 2, 16, state_std=0.3)  # continuing from a nonzero state
    s_rec, s_chk = state0.clone(), state0.clone()
    o_rec = kda(**args, state=s_rec)
    o_chk = kda_chunked(**args, state=s_chk, chunk_size=chunk)
    assert rel_l2(o_chk, o_rec) < 1e-10
    assert rel_l2(s_chk, s_rec) < 1e-10
    assert not torch.equal(s_rec, state0)  # the state really moved


def test_chunked_form_survives_decay_that_overflows_a_factorised_exp():
    """Γ within a chunk reaches below -709: exp(-Γ) overflows even float64, so only a form that masks
    before exp and never factors exp(Γ_r)·exp(-Γ_s) stays finite (spec 3.4, FlashKDA#7)."""
    args, state0 = make_inputs(7, 130, 2, 16, gate_std=6.0, log_a=(2.0, 2.5), state_std=0.3)
    gate = args["a"][:, None] * F.softplus(args["g"] + args["dt_bias"].view(2, 16))
    assert gate[:64].sum(0).min() < -709  # the case really is that strong
    s_rec, s_chk = state0.clone(), state0.clone()
    o_rec = kda(**args, state=s_rec)
    o_chk = kda_chunked(**args, state=s_chk)
    assert torch.isfinite(o_chk).all() and torch.isfinite(s_chk).all()
    assert rel_l2(o_chk, o_rec) < 1e-10
    assert rel_l2(s_chk, s_rec) < 1e-10


def test_prefill_then_decode_equals_one_pass():
    """A chunked prefill then recurrent decode steps, through the same state tensor, equal one recurrence."""
    args, state0 = make_inputs(3, 75, 2, 16)
    whole = state0.clone()
    o_all = kda(**args, state=whole)
    split = state0.clone()
    pieces = []
    for lo, hi, fn in [(0, 70, kda_chunked), (70, 71, kda), (71, 75, kda_chunked)]:
        part = {n: (x[lo:hi] if n in ("q", "k", "v", "g", "beta") else x) for n, x in args.items()}
        pieces.append(fn(**part, state=split))
    assert rel_l2(torch.cat(pieces), o_all) < 1e-10
    assert rel_l2(split, whole) < 1e-10


def one_token(seed, h=3, d=16):
    args, state = make_inputs(seed, 1, h, d, state_std=1.0, dtype=torch.float32)
    return args, state


def test_gate_is_a_times_softplus_of_g_plus_dt_bias_on_key_rows(impl_fn):
    """With beta -> 0 the step only decays: S_new[h, i, :] = exp(a_h softplus(g_i + dt_bias_i)) S[h, i, :].
    Catches a missing dt_bias, the bias added after softplus, a doubled -exp, and decay on the wrong axis."""
    args, state = one_token(5)
    args["beta"] = torch.full_like(args["beta"], -1e4)  # sigmoid = 0: no write
    s0 = state.clone()
    impl_fn(**args, state=state)
    h, d = s0.shape[:2]
    g, dtb, a = args["g"][0].double(), args["dt_bias"].double().view(h, d), args["a"].double()[:, None]
    right = torch.exp(a * F.softplus(g + dtb))[:, :, None] * s0.double()
    wrong = {"no dt_bias": torch.exp(a * F.softplus(g)), "bias after softplus": torch.exp(a * F.softplus(g) + dtb),
             "double -exp": torch.exp(-torch.exp(a) * F.softplus(g + dtb))}
    assert rel_l2(state, right) < 1e-5
    for name, decay in wrong.items():
        assert rel_l2(decay[:, :, None] * s0.double(), right) > 1e-2, name  # the test can tell them apart
    cols = torch.exp(a * F.softplus(g + dtb))[:, None, :] * s0.double()  # decaying value columns instead
    assert rel_l2(cols, right) > 1e-2


def test_output_reads_the_state_after_the_write(impl_fn):
    """o_t = S_t^T q_t with S_t the state after decay AND write (spec 7 bug 7)."""
    args, state = one_token(6)
    s0 = state.clone()
    out = impl_fn(**args, state=state)
    q = args["q"][0].double()
    qn = args["scale"] * q / torch.sqrt((q * q).sum(-1, keepdim=True) + args["l2_eps"])
    after = torch.einsum("hkv,hk->hv", state.double(), qn)
    before = torch.einsum("hkv,hk->hv", s0.double(), qn)
    assert rel_l2(out[0], after) < 1e-5
    assert rel_l2(before, after) > 1e-2


def test_q_and_k_are_l2_normalised_and_v_is_not(impl_fn):
    """Rescaling q or k changes nothing; rescaling v (from a zero state) scales the output (spec 7 bug 6)."""
    args, _ = make_inputs(8, 6, 2, 16, dtype=torch.float32)
    base = impl_fn(**args, state=torch.zeros(2, 16, 16))
    scaled_qk = impl_fn(**{**args, "q": args["q"] * 7.0, "k": args["k"] * 0.3}, state=torch.zeros(2, 16, 16))
    scaled_v = impl_fn(**{**args, "v": args["v"] * 3.0}, state=torch.zeros(2, 16, 16))
    assert rel_l2(scaled_qk, base) < 1e-5
    assert rel_l2(scaled_v, 3.0 * base) < 1e-5
    half_scale = impl_fn(**{**args, "scale": args["scale"] * 0.5}, state=torch.zeros(2, 16, 16))
    assert rel_l2(half_scale, 0.5 * base) < 1e-5  # the query scale multiplies the output


def test_output_dtype_follows_v_and_state_stays_float32():
    args, state = make_inputs(9, 5, 2, 16, dtype=torch.float32)
    args = {n: (x.to(torch.bfloat16) if n in ("q", "k", "v", "g", "beta") else x) for n, x in args.items()}
    out = kda(**args, state=state)
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_bad_shapes_are_named():
    args, state = make_inputs(1, 3, 2, 16)
    with pytest.raises(BadInput, match="dt_bias"):
        kda(**{**args, "dt_bias": args["dt_bias"][:-1]}, state=state)
    with pytest.raises(BadInput, match="state"):
        kda_chunked(**args, state=state[:, :8])
    with pytest.raises(BadInput, match="chunk_size"):
        kda_chunked(**args, state=state, chunk_size=0)
