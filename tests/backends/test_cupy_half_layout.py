"""The half2 Q4_K GEMV's layout and arithmetic (plugins/sparkops_cupy/kernels/q4k_half.cuh, linear_rowwarp.cu's rowhc),
checked on the CPU.

The kernel's correctness on a GPU is its GPU tests' (test_cupy_kernels.py). What can be checked anywhere is what is
most likely to be wrong, and whether the claim can hold:
- which codes each LOP3 of a word puts into which half;
- which activations the staging puts into the slot a lane reads;
- whether the magic constants turn codes into exact fp16 values;
- whether fp16 products and partial sums stay within the claim's row (bf16, NMSE 5e-4) over ordinary, outlying, tiny
  and huge activations.
The test builds every lane's words as the kernel does (uint32 masks, shifts and ORs), fills the staged slots by
rh_stage's formula, and runs the kernel's sequence of fused fp16 multiply-adds. numpy's float16 rounds once per
operation, as fma.rn.f16x2 does: the product and the addend are exact in float32 here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.gate.tolerances import rule_for
from sparkops.gguf.quants import dequantize, random_blocks

MAGIC, MASK_LO, MASK_HI = 0x64006400, 0x000F000F, 0x00F000F0


def halves(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint32 words as their two fp16 halves (the low half first), as float32."""
    w = word.astype(np.uint32)
    lo = (w & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
    hi = (w >> 16).astype(np.uint16).view(np.float16).astype(np.float32)
    return lo, hi


def scale_exponent(x: np.ndarray) -> int:
    """rh_scale: the largest |x| times 2^s below 256 (s = 7 - e for a largest magnitude of 1.f * 2^e)."""
    m = np.float32(np.abs(x).max())
    if not (m > 0) or m > 3.0e38:
        return 0
    e = int((m.view(np.uint32) >> 23) & 0xFF) - 127
    return min(max(7 - e, -100), 100)


def staged(x: np.ndarray, s: int) -> np.ndarray:
    """rh_stage's slots: [K / 8, 4] uint32 (4 half2 a slot), slot rh_slot(sb, o, k) = sb * 32 + k * 8 + o."""
    k_total = x.size
    xs = (x.astype(np.float32) * np.float32(2.0 ** s)).astype(np.float16).view(np.uint16).astype(np.uint32)
    out = np.zeros((k_total // 8, 4), np.uint32)
    for u in range(k_total // 32):  # the staging loop's unit u, as the kernel decodes it
        sb, o = u >> 3, u & 7
        for k in range(4):
            lo = sb * 256 + 64 * (o >> 1) + 16 * (o & 1) + 4 * k
            hi = lo + 32
            out[sb * 32 + k * 8 + o] = [xs[lo] | xs[lo + 2] << 16, xs[lo + 1] | xs[lo + 3] << 16,
                                        xs[hi] | xs[hi + 2] << 16, xs[hi + 1] | xs[hi + 3] << 16]
    return out


def h2_fma(a_lo, a_hi, b_lo, b_hi, c_lo, c_hi):
    """fma.rn.f16x2 on halves held as float32: one rounding to fp16 per half."""
    return ((a_lo * b_lo + c_lo).astype(np.float16).astype(np.float32),
            (a_hi * b_hi + c_hi).astype(np.float16).astype(np.float32))


def half_gemv(raw: np.ndarray, n: int, k_total: int, x: np.ndarray) -> tuple[np.ndarray, float]:
    """rowhc's result for Q4_K rows raw [n, K / 256 * 144] and one token x [K] (float32 values of the activation
    dtype), and the largest |partial sum| any lane held in fp16."""
    nsb = k_total // 256
    blocks = raw.reshape(n, nsb, 144)
    s = scale_exponent(x)
    slots = staged(x, s)
    inv = 2.0 ** -s
    sums16 = x.astype(np.float64).reshape(-1, 16).sum(1)  # rh_stage's float32 sums of 16 (float64 here)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)  # [n, nsb]
    dmin = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    from sparkops.gguf.quants import _q4k_unpack_scales

    sc, mn = (a.reshape(n, nsb, 8).astype(np.float64) for a in _q4k_unpack_scales(blocks[..., 4:16].reshape(-1, 12)))
    words = blocks[..., 16:144].copy().view(np.uint32)  # [n, nsb, 32]: lane o's word k is 4o + k
    total = np.zeros(n)
    biggest = 0.0
    for sb in range(nsb):
        for o in range(8):
            j, b = o >> 1, o & 1
            al = [np.zeros(n, np.float32), np.zeros(n, np.float32)]
            ah = [np.zeros(n, np.float32), np.zeros(n, np.float32)]
            for k in range(4):
                w = words[:, sb, 4 * o + k]
                w8 = w >> np.uint32(8)
                xv = slots[sb * 32 + k * 8 + o]
                l02 = [v - 1024 for v in halves((w & MASK_LO) | MAGIC)]  # fma(h, 1, -1024): exact
                l13 = [v - 1024 for v in halves((w8 & MASK_LO) | MAGIC)]
                h02 = [v / 16 - 64 for v in halves((w & MASK_HI) | MAGIC)]  # fma(h, 1/16, -64): exact
                h13 = [v / 16 - 64 for v in halves((w8 & MASK_HI) | MAGIC)]
                x02, x13, y02, y13 = (halves(np.full(n, xv[i], np.uint32)) for i in range(4))
                al = list(h2_fma(*l02, *x02, *al))
                al = list(h2_fma(*l13, *x13, *al))
                ah = list(h2_fma(*h02, *y02, *ah))
                ah = list(h2_fma(*h13, *y13, *ah))
                biggest = max(biggest, *(float(np.abs(v).max()) for v in (*al, *ah)))
            s16 = sb * 16 + 4 * j + b
            total += d[:, sb] * sc[:, sb, 2 * j] * ((al[0].astype(np.float64) + al[1]) * inv) \
                - dmin[:, sb] * mn[:, sb, 2 * j] * sums16[s16]
            total += d[:, sb] * sc[:, sb, 2 * j + 1] * ((ah[0].astype(np.float64) + ah[1]) * inv) \
                - dmin[:, sb] * mn[:, sb, 2 * j + 1] * sums16[s16 + 2]
    return total, biggest


def test_the_magic_constants_make_exact_codes():
    """0x6400 with a code OR'd into its low mantissa bits is 1024 + code; with the code four bits up, 1024 + 16 code,
    which / 16 - 64 gives the code back. Every code 0..15, both halves."""
    codes = np.arange(16, dtype=np.uint32)
    lo, hi = halves((codes | codes << 16) | MAGIC)
    assert np.array_equal(lo - 1024, codes) and np.array_equal(hi - 1024, codes)
    lo, hi = halves((codes << 4 | codes << 20) | MAGIC)
    assert np.array_equal(lo / 16 - 64, codes) and np.array_equal(hi / 16 - 64, codes)


def test_each_lane_meets_the_activations_of_its_codes():
    """With activations that name their own index (x[i] = i, unscaled and exact in fp16 below 2048), the slot a lane
    reads for word k holds, half for half, the indices of the codes the LOP3s take from that word."""
    x = np.arange(512, dtype=np.float32)
    slots = staged(x, 0)
    for sb in range(2):
        for o in range(8):
            for k in range(4):
                p = sb * 256 + 64 * (o >> 1) + 16 * (o & 1) + 4 * k  # byte n of the word: positions p + n
                got = [halves(np.array([v], np.uint32)) for v in slots[sb * 32 + k * 8 + o]]
                assert [(float(a[0]), float(b[0])) for a, b in got] == [(p, p + 2), (p + 1, p + 3),
                                                                        (p + 32, p + 34), (p + 33, p + 35)]


@pytest.mark.parametrize("kind", ["normal", "outliers", "tiny", "huge"])
def test_fp16_products_stay_far_inside_the_bf16_claim(kind):
    """rowhc's arithmetic against the float64 reference on the same (bfloat16) activations: NMSE ~1e-6, 500x inside
    the claim's row, for ordinary activations, 1% of them 300x larger, activations of 1e-6 and of 5000 - the power
    of two keeps every fp16 partial sum below 65504 and out of the subnormals."""
    rng = np.random.default_rng({"normal": 1, "outliers": 2, "tiny": 3, "huge": 4}[kind])
    n, k_total = 48, 1280
    raw = random_blocks(rng, (n, k_total), Q.Q4_K, 0.02)
    x = rng.standard_normal(k_total)
    x = {"normal": x, "outliers": x * np.where(rng.random(k_total) < 0.01, 300.0, 1.0), "tiny": x * 1e-6,
         "huge": x * 5000.0}[kind]
    x = torch.tensor(x, dtype=torch.float32).bfloat16().float().numpy()
    want = dequantize(raw, Q.Q4_K, (n, k_total)).astype(np.float64) @ x.astype(np.float64)
    got, biggest = half_gemv(raw, n, k_total, x)
    err = float(((got - want) ** 2).sum() / (want ** 2).sum())
    assert err <= 1e-5, err
    assert err * 100 <= rule_for("linear", "bf16").limit
    assert biggest < 30720.0 + 1  # 8 products of codes <= 15 and |x| * 2^s < 256
