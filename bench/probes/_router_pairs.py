"""The norm-and-router pairs the router probes time (router_anatomy.py, router_code.py): the 48B's router shape, one
random float32 weight a pair (past the L2 together), bf16 activations, and the router's PDL launch of a kernel compiled
from moe_router.cu with a line of #defines before it (a probe stage, a form's knob). Made on first use: it needs a GPU,
CuPy and Triton."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class RouterPairs:
    """What a probe's pairs share: the 48B's config, its sizes, PAIRS router weights and the norm's inputs."""

    cfg: Any
    d: int  # hidden size
    e: int  # experts
    k: int  # top-k
    dev: torch.device
    weights: list[torch.Tensor]  # [E, D] float32 each
    bias: torch.Tensor  # [E]
    x: torch.Tensor  # [1, D] bf16
    resid: torch.Tensor  # [1, D] bf16
    gain: torch.Tensor  # [D]
    generator: torch.Generator  # the one that made them, for a probe's further tensors

    def kernel(self, name: str, defines: str = ""):
        """moe_router.cu's kernel NAME compiled with DEFINES (#define lines) before the source."""
        import cupy
        from sparkops_cupy import _runtime as rt

        source = (defines + "\n" if defines else "") + rt.expanded_source("moe_router.cu")
        with cupy.cuda.Device(self.dev.index):
            return cupy.RawModule(code=source, options=rt.OPTIONS, backend="nvrtc").get_function(name)

    def norm(self) -> torch.Tensor:
        """The step's add_rmsnorm ("triton_pdl": it lets the PDL router start) of x and the residual: [1, D]."""
        from sparkops_triton.add_rmsnorm import add_rmsnorm_trigger

        return add_rmsnorm_trigger(self.x, self.resid, self.gain, 1e-5)[0]

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weights [1, K] NaN, ids [1, K] -1, logits scratch [1, E]) for one chain of launches."""
        return (torch.full((1, self.k), float("nan"), device=self.dev),
                torch.full((1, self.k), -1, dtype=torch.int64, device=self.dev),
                torch.empty((1, self.e), dtype=torch.float32, device=self.dev))

    def launch(self, fn, w: torch.Tensor, xn: torch.Tensor, warps: int, out) -> None:
        """The router kernel `fn` on weight w and normed xn with programmatic dependent launch, `warps` a block, into
        `out` (outputs()), on the current stream."""
        import cupy
        from sparkops_cupy import _runtime as rt
        from sparkops_cupy import moe_router as cr
        from sparkops_cupy._pdl import launch_pdl

        cfg, (out_w, out_ids, logits) = self.cfg, out
        args = (rt.ptr(xn), rt.i32(rt.DTYPE_CODE[xn.dtype]), rt.ptr(w), rt.i32(self.e), rt.i32(self.d),
                rt.ptr(logits), rt.ptr(self.bias), rt.ptr(out_w), rt.ptr(out_ids), rt.ptr(cr.counters(self.dev)),
                rt.i32(self.e // cfg.n_group), rt.i32(cfg.n_group), rt.i32(cfg.topk_group), rt.i32(self.k),
                rt.f32(cfg.routed_scaling_factor), rt.f32(cfg.router_renorm_eps))
        with cupy.cuda.Device(self.dev.index):
            launch_pdl(fn.kernel.ptr, (-(-self.e // warps), 1), (32 * warps,), args, 0,
                       torch.cuda.current_stream(self.dev.index).cuda_stream)


def router_pairs(pairs: int, seed: int = 0) -> RouterPairs:
    """PAIRS random router weights of the 48B's shape and the norm's inputs, on the current CUDA device."""
    from sparkops.config import load_preset

    cfg = load_preset("kimi-linear-48b-a3b")
    d, e = cfg.hidden_size, cfg.n_experts
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator().manual_seed(seed)
    weights = [(torch.randn(e, d, generator=g) * d ** -0.5).to(dev) for _ in range(pairs)]
    bias = (torch.randn(e, generator=g) * 0.1).to(dev)
    x = torch.randn(1, d, generator=g).to(dev, torch.bfloat16)
    resid = torch.randn(1, d, generator=g).to(dev, torch.bfloat16)
    gain = (1.0 + 0.1 * torch.randn(d, generator=g)).to(dev)
    return RouterPairs(cfg, d, e, cfg.n_experts_per_token, dev, weights, bias, x, resid, gain, g)
