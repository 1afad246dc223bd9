"""kda on CUDA: the gated delta rule with its state in registers (kernels/kda.cu).

One launch per call whatever the number of tokens: block (h, j) holds head h's state columns
32j..32j+31, reads them once, runs the tokens one after another and writes them back once. Built for
the decode step (T = 1); a prefill chunk runs its T steps serially (correct, not fast).
"""

from __future__ import annotations

import torch

from sparkops.errors import BadInput

from . import _runtime as rt

SOURCES = rt.source_files("kda.cu")
#: largest head dimension: 8 warps x 16 rows held per thread
MAX_D = 128


def kda(q, k, v, g, beta, a, dt_bias, state, scale, l2_eps):
    op = "kda"
    dev = rt.cuda_device(op, q=q, k=k, v=v, g=g, beta=beta, a=a, dt_bias=dt_bias, state=state)
    rt.expect_shape(op, "q", q, (None, None, None), "[T, H, D]")
    t, h, d = q.shape
    for name, ten in (("k", k), ("v", v), ("g", g)):
        rt.expect_shape(op, name, ten, (t, h, d), "the same [T, H, D] as q")
    rt.expect_shape(op, "beta", beta, (t, h), "[T, H]")
    rt.expect_shape(op, "a", a, (h,), "one value per head")
    rt.expect_shape(op, "dt_bias", dt_bias, (h * d,), "[H*D], head-major")
    rt.expect_shape(op, "state", state, (h, d, d), "[H, D_k, D_v]")
    if d > MAX_D:
        raise BadInput(f"{op}: head dimension {d} is larger than the cupy kernel's {MAX_D}; use another "
                       f"implementation")
    if state.dtype != torch.float32 or not state.is_contiguous():
        raise BadInput(f"{op}: 'state' must be a contiguous float32 tensor (it is updated in place), got "
                       f"{state.dtype}{'' if state.is_contiguous() else ', not contiguous'}")
    code = rt.act_code(op, "q", q)
    for name, ten in (("k", k), ("v", v), ("g", g), ("beta", beta)):
        if ten.dtype != q.dtype:
            raise BadInput(f"{op}: '{name}' has dtype {ten.dtype} but q has {q.dtype}; pass one activation dtype")
    q, k, v, g, beta = (rt.contiguous(ten) for ten in (q, k, v, g, beta))
    a = rt.contiguous(a.float())
    dt_bias = rt.contiguous(dt_bias.float())
    out = torch.empty_like(v)
    rt.launch("kda.cu", "kda_recurrent", dev, (h, (d + 31) // 32), (256,),
              (rt.ptr(q), rt.ptr(k), rt.ptr(v), rt.ptr(g), rt.ptr(beta), rt.i32(code), rt.ptr(a), rt.ptr(dt_bias),
               rt.ptr(state), rt.ptr(out), rt.i32(t), rt.i32(h), rt.i32(d), rt.f32(scale), rt.f32(l2_eps)))
    return out
