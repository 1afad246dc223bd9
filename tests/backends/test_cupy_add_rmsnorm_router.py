"""add_rmsnorm_router=cupy_rowwarp_pdl on CUDA beyond the contract's cases: the 48B's shape (D 2304, 256 experts,
top-8, scale 2.446) and small, grouped and limit shapes against the NumPy reference by the gate's norm_router rule, in
float32, bfloat16 and float16 activations; every output element written (fresh outputs are NaN under the gate's
poisoning); the arrival counters left at zero; a captured CUDA graph replayed after PDL producers of its inputs giving
the eager bits; a NaN in x carried to the weights, never to an invalid id; and the stated policy for the calls it does
not take.

Skipped with a reason where there is no CUDA device (tests/conftest.py) or no CuPy.
"""

from __future__ import annotations

import pytest
import torch

from tests.backends.cupy_support import replays_match

from sparkops.gate.metrics import norm_router as norm_router_verdicts
from sparkops.gate.poison import poisoned
from sparkops.gate.tolerances import rule_for
from sparkops.plugins import load_catalog

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install sparkops[gpu])")

from sparkops_cupy import add_rmsnorm_router as car  # noqa: E402  (after the skip)

DEV = torch.device("cuda")
ROUTE = ("router_weight", "bias", "top_k", "n_group", "topk_group", "scale", "renorm_eps")


def _args(seed, t, d, e, k, n_group=1, topk_group=1, dtype=torch.float32):
    """A call as the contract's cases draw it (residual 3x the block output, a gain near one, router rows of spread
    D^-0.5), its activations in `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(t, d, generator=g).to(dtype), residual=(torch.randn(t, d, generator=g) * 3).to(dtype),
                weight=1.0 + 0.2 * torch.randn(d, generator=g), eps=1e-5,
                router_weight=torch.randn(e, d, generator=g) * d ** -0.5, bias=torch.randn(e, generator=g) * 0.1,
                top_k=k, n_group=n_group, topk_group=topk_group, scale=2.446, renorm_eps=1e-20)


def _on(args, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}


def _judge(args, got):
    """The gate's norm_router verdicts of `got` against the NumPy reference on the same values (the activations
    widened to float32 for the reference, as the gate places a bf16 claim's inputs); 16-bit activations by the bf16
    row (normed and summed rounded to 16 bits), float32 by the fp32 row."""
    inputs = {k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in args.items()}
    ref = load_catalog().reference("add_rmsnorm_router").resolve()(**inputs)
    f32 = args["x"].dtype == torch.float32
    rule = rule_for("add_rmsnorm_router", None if f32 else "bf16")
    verdicts = norm_router_verdicts("add_rmsnorm_router", tuple(o.cpu() for o in got), ref, inputs, rule,
                                    exact_dtype=f32)
    assert all(v.passed for v in verdicts), [v.line() for v in verdicts]


def _call_poisoned(args):
    """One call with every fresh allocation NaN (floats) or the largest integer (ids) until written."""
    with poisoned():
        out = car.add_rmsnorm_router_rowwarp_pdl(**args)
        torch.cuda.synchronize()
    return out


def _all_written(out, args):
    normed, summed, weights, ids = out
    t, d = args["x"].shape
    e, k = args["router_weight"].shape[0], args["top_k"]
    assert normed.shape == summed.shape == (t, d) and normed.dtype == summed.dtype == args["x"].dtype
    assert weights.shape == ids.shape == (t, k) and weights.dtype == torch.float32 and ids.dtype == torch.int64
    for name, o in (("normed", normed), ("summed", summed), ("weights", weights)):
        bad = ~torch.isfinite(o.float())
        assert not bad.any(), f"{name}: {int(bad.sum())} of {o.numel()} values never written (NaN), first at " \
                              f"{torch.nonzero(bad)[0].tolist()}"
    assert bool(((ids >= 0) & (ids < e)).all()), ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t", [1, 3, 8])
@pytest.mark.parametrize("d,e,k,n_group,topk_group", [
    (2304, 256, 8, 1, 1),  # the 48B: one round of loads a lane in bfloat16, two in float32 and float16
    (4096, 64, 6, 8, 4),  # groups (DeepSeek-V3's 8 keep 4), a row of several rounds
    (7168, 512, 32, 32, 7),  # the limits: 512 experts, top-32, 32 groups of 16
    (12, 37, 5, 1, 1),  # 3 chunks a row for 38 warps (an idle one past E): most warps store nothing
    (260, 16, 1, 1, 1),  # 65 chunks for 16 warps: a warp stores 4 or 5 of them; top-1
    (64, 20, 3, 5, 3),  # the contract's odd grouped case: groups of 4
])
def test_matches_the_reference_and_writes_every_output(dtype, t, d, e, k, n_group, topk_group):
    args = _args(d + e + t, t, d, e, k, n_group, topk_group, dtype)
    on = _on(args, DEV)
    assert car.fused_serves(on["x"], on["residual"], on["router_weight"], k, n_group)
    out = _call_poisoned(on)
    _all_written(out, args)
    _judge(args, out)
    assert not car.pool_on(DEV).any(), "a launch left an arrival counter above zero"


def test_the_48b_shape_is_close_to_the_unfused_chain_on_the_device():
    """Against the unfused pair on the device on the same bf16 values - the torch plugin's add_rmsnorm and moe_router
    (float32 maths): summed is the same add rounded once (equal), normed within the bf16 row, and the routing is the
    torch router's on the fused op's own normed row, by the router rule (ids exact but for near ties)."""
    from sparkops.gate.metrics import router as router_verdicts
    from sparkops_torch.add_rmsnorm import add_rmsnorm
    from sparkops_torch.moe_router import moe_router

    for seed in range(4):
        args = _on(_args(seed, 1, 2304, 256, 8, dtype=torch.bfloat16), DEV)
        normed, summed, weights, ids = _call_poisoned(args)
        want_n, want_s = add_rmsnorm(args["x"], args["residual"], args["weight"], args["eps"])
        assert torch.equal(summed, want_s)
        nmse = float(((normed.double() - want_n.double()) ** 2).sum() / (want_n.double() ** 2).sum())
        assert nmse <= rule_for("add_rmsnorm", "bf16").limit, nmse
        own = moe_router(normed, *(args[k] for k in ROUTE))
        routed = {"x": normed.float().cpu(), "weight": args["router_weight"].cpu(), "bias": args["bias"].cpu(),
                  **{k: args[k] for k in ("n_group", "topk_group", "scale", "renorm_eps")}}
        verdicts = router_verdicts("routing", (weights.cpu(), ids.cpu()), tuple(o.cpu() for o in own), routed,
                                   rule_for("moe_router", None))
        assert all(v.passed for v in verdicts), [v.line() for v in verdicts]
        assert not car.pool_on(DEV).any()


def test_a_nan_in_x_reaches_the_weights_never_an_invalid_id():
    """Token 0's x holds a NaN: its whole normed row is NaN (its sum of squares is), so are its logits and its
    weights, and its ids are still distinct experts in range (the kernel's picks never read past its slots); summed
    is NaN at that value alone, and token 1 is routed as without it."""
    args = _args(9, 2, 2304, 256, 8, dtype=torch.bfloat16)
    clean = _call_poisoned(_on(args, DEV))
    args["x"][0, 77] = float("nan")
    normed, summed, weights, ids = _call_poisoned(_on(args, DEV))
    assert torch.isnan(normed[0].float()).all() and torch.isnan(weights[0]).all()
    assert torch.isnan(summed[0].float()).sum() == 1 and torch.isnan(summed[0, 77].float())
    assert bool(((ids >= 0) & (ids < 256)).all()) and len(set(ids[0].tolist())) == 8, ids
    for got, want in zip((normed[1], summed[1], weights[1], ids[1]), (o[1] for o in clean)):
        assert torch.equal(got, want)
    assert not car.pool_on(DEV).any()


def test_the_counters_are_made_before_a_capture_and_refused_inside_one(monkeypatch):
    """The pool is created by a call outside any capture (a zeroing inside one would not be replayed); a first call
    during a capture is refused by name."""
    from sparkops_cupy._counters import CounterPools

    monkeypatch.setattr(car, "_POOLS", CounterPools("add_rmsnorm_router", car.POOL_COUNTERS))
    args = _on(_args(1, 1, 256, 16, 4), DEV)
    graph = torch.cuda.CUDAGraph()
    try:
        with pytest.raises(Exception, match="arrival counters"):
            with torch.cuda.graph(graph):
                car.add_rmsnorm_router_rowwarp_pdl(**args)
    finally:
        graph.reset()
    car.add_rmsnorm_router_rowwarp_pdl(**args)
    torch.cuda.synchronize()
    assert car.pool_on(DEV) is not None and not car.pool_on(DEV).any()


class _Layers:
    """Three MoE layers' norm-and-router at the 48B's width (E experts, top-8) on one residual stream: each layer's
    fused op reads the stream the layer before wrote (its summed output) - a PDL producer of its residual - and, with
    `norm_first`, an x written just before it by add_rmsnorm=triton_pdl, which lets the next kernel be scheduled as it
    starts. Called with pdl=False: the same kernels launched plainly (car.PDL off, add_rmsnorm=triton), the expected
    bits."""

    def __init__(self, seed: int, e: int, dtype: torch.dtype, norm_first: bool = False):
        g = self.g = torch.Generator().manual_seed(seed)
        d = self.d = 2304
        self.norm_first = norm_first
        self.route = dict(top_k=8, n_group=1, topk_group=1, scale=2.446, renorm_eps=1e-20)
        self.routers = [(torch.randn(e, d, generator=g) * d ** -0.5).to(DEV) for _ in range(3)]  # [E, D] each
        self.biases = [(torch.randn(e, generator=g) * 0.1).to(DEV) for _ in range(3)]
        self.gains = [(1.0 + 0.2 * torch.randn(d, generator=g)).to(DEV) for _ in range(3)]
        self.ys = [torch.empty(1, d, dtype=dtype, device=DEV) for _ in range(3)]
        self.resid = torch.empty(1, d, dtype=dtype, device=DEV)

    def refresh(self) -> None:
        self.resid.copy_(torch.randn(1, self.d, generator=self.g) * 3)
        for y in self.ys:
            y.copy_(torch.randn(1, self.d, generator=self.g))

    def __call__(self, pdl: bool) -> list[torch.Tensor]:
        was = car.PDL
        car.PDL = pdl
        try:
            out, h = [], self.resid
            for y, w, b, gain in zip(self.ys, self.routers, self.biases, self.gains):
                if self.norm_first:  # a producer of the fused op's x; with pdl, one that triggers at its start
                    from sparkops_triton.add_rmsnorm import add_rmsnorm, add_rmsnorm_trigger

                    y, _ = (add_rmsnorm_trigger if pdl else add_rmsnorm)(y, y, gain, 1e-5)
                normed, h, weights, ids = car.add_rmsnorm_router_rowwarp_pdl(y, h, gain, 1e-5, w, b, **self.route)
                out += [normed, h, weights, ids]
            return out
        finally:
            car.PDL = was


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_replayed_after_its_own_pdl_launches_gives_the_plain_bits(dtype):
    """Each layer's fused op reads the residual stream the previous PDL launch wrote: replayed from one graph with a
    new stream and new block outputs each time, outputs NaN before every replay, the bits of the plain launches."""
    layers = _Layers(21, 256, dtype)
    replays_match(lambda: layers(True), lambda: layers(False), layers.refresh)


def test_replayed_after_a_triggering_norm_gives_the_plain_bits():
    """The same with add_rmsnorm=triton_pdl writing each layer's x just before the fused op (a producer that lets it
    be scheduled as it starts): a fused op that read x before the norm ended routes the replay before's row, or NaN."""
    pytest.importorskip("triton")
    layers = _Layers(22, 256, torch.bfloat16, norm_first=True)
    replays_match(lambda: layers(True), lambda: layers(False), layers.refresh)


@pytest.mark.parametrize("change", ["tokens", "bf16 weight", "odd row", "experts", "top_k", "float64", "residual"])
def test_other_calls_go_to_the_torch_plugin(change):
    """The stated policy: a call the kernel does not take runs the torch plugin's add_rmsnorm_router (its add_rmsnorm,
    then its moe_router), whose result it returns unchanged."""
    from sparkops_torch.add_rmsnorm_router import add_rmsnorm_router as torch_fused

    t, d, e, k = {"tokens": (20, 256, 64, 8), "odd row": (1, 258, 64, 8), "experts": (1, 64, 520, 8),
                  "top_k": (1, 64, 64, 33)}.get(change, (1, 256, 64, 8))
    args = _on(_args(3, t, d, e, k, dtype=torch.float64 if change == "float64" else torch.bfloat16), DEV)
    if change == "bf16 weight":
        args["router_weight"] = args["router_weight"].bfloat16()
    if change == "residual":
        args["residual"] = args["residual"].float()  # another dtype than x's
    assert not car.fused_serves(args["x"], args["residual"], args["router_weight"], args["top_k"], args["n_group"])
    got, want = car.add_rmsnorm_router_rowwarp_pdl(**args), torch_fused(**args)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
