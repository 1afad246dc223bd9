"""The tensor-core Q4_K GEMV's data layout (plugins/sparkops_cupy/kernels/q4k_mma.cuh, linear_mma.cu), checked on the CPU.

The kernel's correctness on a GPU is its GPU tests' (test_cupy_kernels.py). What can be checked anywhere is the part
most likely to be wrong: which code and which activation each lane puts in which register of the mma.m16n8k16
fragments. This test builds every lane's registers exactly as the kernel does - the byte permute and LOP3 of
`mma_pair`, the words and shifts of the loop, the activation words of the lanes with g = 0 - lays them into the A and
B matrices by the PTX ISA's fragment layout for .bf16, multiplies, and checks each sub-block's C against the sum the
kernel's scaling step assumes, and the whole row against the reference linear on bfloat16 activations.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from sparkops.gguf.quants import dequantize, random_blocks


def byte_perm(x: int, y: int, sel: int) -> int:
    """CUDA's __byte_perm: byte i of the result is byte (sel >> 4i) & 7 of the 8 bytes y:x (x the low four)."""
    pool = x.to_bytes(4, "little") + y.to_bytes(4, "little")
    return int.from_bytes(bytes(pool[(sel >> (4 * i)) & 7] for i in range(4)), "little")


def mma_pair(w: int, sel: int) -> int:
    p = byte_perm(w, 0, sel)
    return (p & 0x000F000F) | 0x43004300


def bf16_pair(r: int) -> tuple[float, float]:
    """The two bfloat16 of a 32-bit register (low half first) as floats."""
    lo, hi = r & 0xFFFF, r >> 16
    return (np.array([lo << 16], np.uint32).view(np.float32)[0], np.array([hi << 16], np.uint32).view(np.float32)[0])


def fragments_a(regs: dict[int, list[int]]) -> np.ndarray:
    """A [16, 16] from each lane's 4 registers (PTX: reg0 A[g][2t..], reg1 A[g+8][2t..], reg2 A[g][2t+8..],
    reg3 A[g+8][2t+8..])."""
    a = np.full((16, 16), np.nan)
    for lane, (r0, r1, r2, r3) in regs.items():
        g, t = lane >> 2, lane & 3
        a[g, 2 * t:2 * t + 2] = bf16_pair(r0)
        a[g + 8, 2 * t:2 * t + 2] = bf16_pair(r1)
        a[g, 2 * t + 8:2 * t + 10] = bf16_pair(r2)
        a[g + 8, 2 * t + 8:2 * t + 10] = bf16_pair(r3)
    return a


def fragments_b(regs: dict[int, list[int]]) -> np.ndarray:
    """B [16, 8] from each lane's 2 registers (PTX: reg0 B[2t, 2t+1][g], reg1 B[2t+8, 2t+9][g])."""
    b = np.full((16, 8), np.nan)
    for lane, (r0, r1) in regs.items():
        g, t = lane >> 2, lane & 3
        b[2 * t:2 * t + 2, g] = bf16_pair(r0)
        b[2 * t + 8:2 * t + 10, g] = bf16_pair(r1)
    return b


def test_every_lane_s_fragments_give_the_sums_the_scaling_step_assumes():
    rng = np.random.default_rng(0)
    k = 512  # two super-blocks
    raw = random_blocks(rng, (16, k), Q.Q4_K, 0.05)  # [16 rows, 2 * 144] bytes
    x = torch.randn(k, generator=torch.Generator().manual_seed(0))
    xb = x.to(torch.bfloat16)  # what the kernel stages
    xs = xb.view(torch.int16).numpy().astype(np.uint16)  # [K] the staged bf16 bits
    xb32 = xb.float().numpy().astype(np.float64)
    weights = np.asarray(dequantize(raw, Q.Q4_K, (16, k)), np.float64)  # [16, K]
    got_rows = np.zeros(16)
    for sb in range(k // 256):
        block = raw[:, sb * 144:(sb + 1) * 144]  # [16, 144]
        for j in range(4):
            for n in range(2):
                c = np.zeros((16, 8))
                for h in range(2):
                    a_regs, b_regs = {}, {}
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        off = 16 + 32 * j + 4 * (4 * h + t)  # the kernel's word 4h + t of group j
                        wg = int.from_bytes(block[g, off:off + 4].tobytes(), "little")
                        w8 = int.from_bytes(block[g + 8, off:off + 4].tobytes(), "little")
                        a, b = (wg >> 4, w8 >> 4) if n else (wg, w8)
                        a_regs[lane] = [mma_pair(a, 0x4140), mma_pair(b, 0x4140), mma_pair(a, 0x4342),
                                        mma_pair(b, 0x4342)]
                        b0 = b1 = 0
                        if g == 0:
                            p = sb * 256 + 64 * j + 32 * n + 16 * h + 4 * t
                            b0 = int(xs[p]) | (int(xs[p + 1]) << 16)
                            b1 = int(xs[p + 2]) | (int(xs[p + 3]) << 16)
                        b_regs[lane] = [b0, b1]
                    a_mat, b_mat = fragments_a(a_regs), fragments_b(b_regs)
                    assert not np.isnan(a_mat).any() and not np.isnan(b_mat).any(), "a fragment slot left unfilled"
                    assert (b_mat[:, 1:] == 0).all(), "only the token's column may be non-zero"
                    c += a_mat @ b_mat
                # sub-block s = 2j + n: inputs sb * 256 + 32 s .. + 32; C[:, 0] must be sum((128 + q) xb) over them
                s = 2 * j + n
                lo = sb * 256 + 32 * s
                xsub = xb32[lo:lo + 32]
                d = block[:, 0:2].copy().view(np.float16).astype(np.float64)[:, 0]
                dmin = block[:, 2:4].copy().view(np.float16).astype(np.float64)[:, 0]
                sc, mn = scale_min(block, s)
                q = np.rint((weights[:, lo:lo + 32] + (dmin * mn)[:, None]) / (d * sc)[:, None]).clip(0, 15)
                np.testing.assert_allclose(c[:, 0], ((128 + q) * xsub).sum(axis=1), rtol=1e-12, atol=1e-9)
                ssum = xsub.sum()
                got_rows += (d * sc) * (c[:, 0] - 128 * ssum) - (dmin * mn) * ssum  # the kernel's scaling step
    np.testing.assert_allclose(got_rows, weights @ xb32, rtol=1e-9, atol=1e-9)


def scale_min(block: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 6-bit (scale, min) of sub-block s for each row of `block` [R, 144], as floats (gguf's layout)."""
    sc = block[:, 4:16].astype(np.int64)
    if s < 4:
        return (sc[:, s] & 63).astype(np.float64), (sc[:, s + 4] & 63).astype(np.float64)
    return (((sc[:, s + 4] & 15) | ((sc[:, s - 4] >> 6) << 4)).astype(np.float64),
            ((sc[:, s + 4] >> 4) | ((sc[:, s] >> 6) << 4)).astype(np.float64))


def test_the_pipe_form_s_staged_rows_put_a_fragment_read_in_32_banks():
    """The pipe form reads each super-block's codes from shared memory: lane (g, t) reads word 4h + t of group j in
    row g (and g + 8) of the tile, so one read touches 8 rows x 4 words. Rows are staged `stride` bytes apart
    (mma_pipe_smem's padding: an odd number of 16-byte words): the 32 words must fall in 32 different banks for every
    row length the model has and for odd and even super-block counts, or the read is replayed."""
    from sparkops_cupy.linear import mma_pipe_smem

    for k in (256, 512, 1280, 2304, 4096, 9216):
        nsb = k // 256
        row_bytes = nsb * 144
        stride = row_bytes + (0 if nsb % 2 else 16)
        assert (stride // 16) % 2 == 1, f"K={k}: a staged row of {stride} bytes is an even number of 16-byte words"
        assert mma_pipe_smem(k, row_bytes, 4) == 16 * stride + 2 * k + 4 * (k // 32) + 4 * 16 * 4
        for sb in range(nsb):
            for j in range(4):
                for h in range(2):
                    banks = {((g * stride + sb * 144 + 16 + 32 * j + 4 * (4 * h + t)) // 4) % 32
                             for g in range(8) for t in range(4)}
                    assert len(banks) == 32, f"K={k}, super-block {sb}, group {j}, half {h}: {len(banks)} banks"


def test_the_pipe_form_gives_each_shape_enough_warps_and_no_idle_ones():
    """mma_pipe_warps: the fewest warps a tile (4, 8, 16) that fill the grid to MMA_PIPE_WARPS_PER_SM warps an SM,
    never more warps than super-blocks (a warp without one only waits at the barrier)."""
    from sparkops_cupy.linear import MMA_PIPE_WARPS_PER_SM, mma_pipe_warps

    sms = 132
    for n, k, want in [(12288, 2304, 4), (18432, 2304, 4), (6720, 2304, 8), (2304, 4096, 16), (2304, 9216, 16),
                       (33, 256, 4), (5, 1280, 4)]:
        got = mma_pipe_warps(n, k, sms)
        assert got == want, f"[{n}, {k}]: {got} warps a tile, expected {want}"
        tiles, target, nsb = (n + 15) // 16, MMA_PIPE_WARPS_PER_SM * sms, k // 256
        assert got == 4 or got <= nsb, "more warps than super-blocks"
        bigger = {4: 8, 8: 16}.get(got)
        assert tiles * got >= target or bigger is None or bigger > nsb, "fewer warps than the grid wants"
        assert got == 4 or tiles * (got // 2) < target, "more warps than the grid needs"
