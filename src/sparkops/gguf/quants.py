"""GGUF storage formats in NumPy: dequantize, quantize, and synthesize random quantized blocks.

Types: F32, F16, BF16, Q8_0, Q4_K, Q6_K, IQ1_S (the ones sparkops reads, see `sparkops.qweight`).

Layout convention (same as `QWeight`): a logical tensor [*lead, rows, cols] is stored as
  - block types: uint8 [*lead, rows, row_bytes], row_bytes = cols / block_size * type_size, each row a run
    of whole blocks (a block never straddles two rows);
  - F32 / F16: the typed array [*lead, rows, cols] itself; BF16 (which NumPy lacks): its bit patterns
    as uint16 [*lead, rows, cols].

Why our own code: these dequantizers are the reference every kernel is checked against, so they are
written from the format description, with the block layout spelled out, and are tested bit-for-bit
against gguf-py's (`gguf.quants.dequantize`), an independent implementation. The arithmetic order
below is the one ggml uses (fp16 scales widened to float32 first, then `(d * sub_scale) * q - min`),
which is what makes the two agree to the last bit.

The quantizers are honest round-to-nearest in each format (Q8_0 is byte-identical to ggml's reference
quantizer; Q4_K / Q6_K use a small scale search of our own; IQ1_S searches the whole grid).
`random_blocks` draws codes and scales directly, for synthesizing large models quickly.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import BadInput

Q = GGMLQuantizationType

#: values per super-block of the K-quants and IQ1_S
QK_K = 256
#: IQ1_S adds +-IQ1S_DELTA to every grid value before scaling (the sign is one bit per 32 values)
IQ1S_DELTA = 0.125

#: the types this module handles, in the order the spec lists them
SUPPORTED = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.IQ1_S)

#: NumPy dtype of the stored elements of the float types (BF16 is kept as its uint16 bit pattern)
FLOAT_DTYPES = {Q.F32: np.dtype(np.float32), Q.F16: np.dtype(np.float16), Q.BF16: np.dtype(np.uint16)}

# Blocks processed per step by dequantize/quantize, so temporaries stay small for huge tensors.
_CHUNK_BLOCKS = 1 << 15


# ----------------------------------------------------------------------------------------------
# Shapes and argument checks
# ----------------------------------------------------------------------------------------------

def _qtype(qtype: int, what: str) -> GGMLQuantizationType:
    """The type as an enum, or BadInput naming it and the supported types."""
    try:
        t = Q(int(qtype))
    except ValueError:
        t = None
    if t not in SUPPORTED:
        shown = t.name if t is not None else f"type id {qtype!r}"
        names = ", ".join(s.name for s in SUPPORTED)
        raise BadInput(f"{what}: quant type {shown} is not supported (supported: {names})")
    return t


def _cols_ok(qtype: GGMLQuantizationType, cols: int, what: str) -> None:
    block = GGML_QUANT_SIZES[qtype][0]
    if cols % block:
        raise BadInput(f"{what}: {qtype.name} stores rows in blocks of {block} values, but a row has {cols} "
                       f"values (not a multiple of {block}); pad the rows or pick another type")


def row_bytes(qtype: int, cols: int) -> int:
    """Bytes one row of `cols` values takes in `qtype` (cols must be a whole number of blocks)."""
    t = _qtype(qtype, "row_bytes")
    _cols_ok(t, int(cols), "row_bytes")
    block, type_size = GGML_QUANT_SIZES[t]
    return int(cols) // block * type_size


def storage_shape(qtype: int, shape) -> tuple[int, ...]:
    """Shape of the stored array for a logical tensor of `shape` (see the module docstring)."""
    t = _qtype(qtype, "storage_shape")
    shape = _shape(shape, t, "storage_shape")
    if t in FLOAT_DTYPES:
        return shape
    return (*shape[:-1], row_bytes(t, shape[-1]))


def _shape(shape, qtype: GGMLQuantizationType, what: str) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 0 for s in shape):
        raise BadInput(f"{what}: {qtype.name} tensor needs a shape with at least one non-negative "
                       f"dimension, got {list(shape)}")
    _cols_ok(qtype, shape[-1], f"{what} of shape {list(shape)}")
    return shape


def _as_blocks(raw, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> np.ndarray:
    """The stored bytes of a block type as uint8 [n_blocks, type_size] (a view where possible)."""
    raw = np.asarray(raw)
    want = storage_shape(qtype, shape)
    if raw.dtype != np.uint8:
        raise BadInput(f"dequantize: {qtype.name} blocks must be uint8 bytes, got dtype {raw.dtype}")
    nbytes = math.prod(want)
    if raw.shape != want and not (raw.ndim == 1 and raw.size == nbytes):
        raise BadInput(f"dequantize: {qtype.name} data of shape {list(raw.shape)} does not hold a "
                       f"{list(shape)} tensor (expected uint8 {list(want)}, or {nbytes} bytes flat)")
    return np.ascontiguousarray(raw).reshape(-1, GGML_QUANT_SIZES[qtype][1])


def _f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian fp16 at byte `offset` of every block, widened to float32: [n_blocks, 1]."""
    return blocks[:, offset:offset + 2].copy().view("<f2").astype(np.float32)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's roundf: nearest integer, halves away from zero (np.round sends halves to even).

    Exact: x - trunc(x) is always representable, so no addition of 0.5 can round up wrongly.
    """
    t = np.trunc(x)
    return t + np.copysign((np.abs(x - t) >= 0.5).astype(x.dtype), x)


# ----------------------------------------------------------------------------------------------
# IQ1_S grid (taken from the installed gguf package at run time; never copied into our source)
# ----------------------------------------------------------------------------------------------

@functools.cache
def iq1s_grid() -> np.ndarray:
    """IQ1_S's 2048 code points, each 8 values in {-1, 0, +1}: read-only int8 [2048, 8].

    Grid entry i is what an 11-bit IQ1_S index i decodes to (before adding delta and scaling).
    GPU kernels upload this table. It comes from gguf-py's IQ1_S class (`init_grid()`), which carries
    ggml's table; it is checked here for shape and values.
    """
    from gguf.quants import IQ1_S

    IQ1_S.init_grid()
    grid = np.asarray(IQ1_S.grid, dtype=np.float32).reshape(-1, 8)
    if grid.shape != (2048, 8) or not np.isin(grid, (-1.0, 0.0, 1.0)).all():
        raise RuntimeError(f"gguf.quants.IQ1_S.grid is not the expected 2048x8 ternary table "
                           f"(shape {grid.shape}); the installed gguf package is unexpected")
    out = grid.astype(np.int8)
    out.flags.writeable = False
    return out


@functools.cache
def _iq1s_grid_f32() -> np.ndarray:
    g = iq1s_grid().astype(np.float32)
    g.flags.writeable = False
    return g


# ----------------------------------------------------------------------------------------------
# Dequantizers: uint8 [n, type_size] -> float32 [n, block_size]
# ----------------------------------------------------------------------------------------------

def _dequant_q8_0(blocks: np.ndarray) -> np.ndarray:
    """Q8_0, 34 bytes per 32 values: fp16 d | int8 q[32].  value = d * q."""
    d = _f16(blocks, 0)                                   # [n, 1]
    q = blocks[:, 2:34].view(np.int8).astype(np.float32)  # [n, 32]
    return q * d


def _q4k_unpack_scales(sc12: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 scale bytes -> (scale, min), each uint8 [n, 8] of 6-bit values.

    Bytes 0-3: low 6 bits = scale[0..3], top 2 bits = bits 4-5 of scale[4..7].
    Bytes 4-7: low 6 bits = min[0..3],   top 2 bits = bits 4-5 of min[4..7].
    Bytes 8-11: low nibble = bits 0-3 of scale[4..7], high nibble = bits 0-3 of min[4..7].
    """
    a, b, c = sc12[:, 0:4], sc12[:, 4:8], sc12[:, 8:12]  # [n, 4] each
    scale = np.concatenate([a & 63, (c & 15) | ((a >> 6) << 4)], axis=1)  # [n, 8]
    mins = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)   # [n, 8]
    return scale, mins


def _q4k_pack_scales(scale: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """Inverse of `_q4k_unpack_scales`: two uint8 [n, 8] of 6-bit values -> uint8 [n, 12]."""
    out = np.empty((scale.shape[0], 12), np.uint8)
    out[:, 0:4] = scale[:, 0:4] | ((scale[:, 4:8] >> 4) << 6)
    out[:, 4:8] = mins[:, 0:4] | ((mins[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (scale[:, 4:8] & 15) | ((mins[:, 4:8] & 15) << 4)
    return out


def _dequant_q4_k(blocks: np.ndarray) -> np.ndarray:
    """Q4_K, 144 bytes per 256 values: fp16 d | fp16 dmin | 12 bytes of 6-bit scale/min x 8 | qs[128].

    8 sub-blocks of 32 values: value = (d * scale[s]) * q - (dmin * min[s]), q a 4-bit code.
    qs is 4 chunks of 32 bytes; chunk j holds sub-block 2j in its low nibbles and 2j+1 in its high ones.
    """
    n = blocks.shape[0]
    d = _f16(blocks, 0)                                    # [n, 1]
    dmin = _f16(blocks, 2)                                 # [n, 1]
    scale, mins = _q4k_unpack_scales(blocks[:, 4:16])      # [n, 8] each
    qs = blocks[:, 16:144].reshape(n, 4, 1, 32)            # [n, chunk, 1, 32]
    q = (qs >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)) & 15  # [n, chunk, nibble, 32]
    q = q.reshape(n, 8, 32).astype(np.float32)             # [n, sub-block, 32]
    ds = (d * scale.astype(np.float32))[:, :, None]        # [n, 8, 1]
    dm = (dmin * mins.astype(np.float32))[:, :, None]      # [n, 8, 1]
    return (ds * q - dm).reshape(n, QK_K)


def _dequant_q6_k(blocks: np.ndarray) -> np.ndarray:
    """Q6_K, 210 bytes per 256 values: ql[128] | qh[64] | int8 scale[16] | fp16 d.

    16 sub-blocks of 16 values: value = (d * scale[s]) * (q - 32), q a 6-bit code.
    Two halves of 128 values, h = 0, 1; in half h, value 32*r + l (r = 0..3, l = 0..31) takes
      low 4 bits: ql[64h + l] (r = 0), ql[64h + 32 + l] (r = 1), their high nibbles for r = 2, 3;
      high 2 bits: bits 2r, 2r+1 of qh[32h + l].
    """
    n = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(n, 2, 1, 2, 32)          # [n, half, 1, which 32, l]
    lo = (ql >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1, 1)) & 15  # [n, half, nibble, which, l]
    lo = lo.reshape(n, 2, 4, 32)                           # [n, half, r = 2*nibble + which, l]
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)           # [n, half, 1, l]
    hi = (qh >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3  # [n, half, r, l]
    q = (lo | (hi << 4)).reshape(n, 16, 16).astype(np.float32) - 32.0  # [n, sub-block, 16]
    scale = blocks[:, 192:208].view(np.int8).astype(np.float32)  # [n, 16]
    d = _f16(blocks, 208)                                  # [n, 1]
    return ((d * scale)[:, :, None] * q).reshape(n, QK_K)


def _dequant_iq1_s(blocks: np.ndarray) -> np.ndarray:
    """IQ1_S, 50 bytes per 256 values: fp16 d | qs[32] | uint16 qh[8].

    8 sub-blocks of 32 values, each 4 groups of 8. Group g of sub-block s uses grid entry
    qs[4s + g] | ((qh[s] >> 3g) & 7) << 8 (11 bits). qh[s] bits 12-14 = k, bit 15 = delta sign:
    value = (d * (2k + 1)) * (grid[entry] + delta), delta = -0.125 if bit 15 is set else +0.125.
    """
    n = blocks.shape[0]
    d = _f16(blocks, 0)                                    # [n, 1]
    qs = blocks[:, 2:34].reshape(n, 8, 4).astype(np.uint16)  # [n, sub-block, group]
    qh = blocks[:, 34:50].copy().view("<u2")               # [n, sub-block]
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & 7  # [n, sub-block, group]
    entry = qs | (high << 8)                               # [n, 8, 4] grid indices
    dl = d * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)  # [n, 8]
    delta = np.where(qh & 0x8000, np.float32(-IQ1S_DELTA), np.float32(IQ1S_DELTA))  # [n, 8]
    vals = _iq1s_grid_f32()[entry] + delta[:, :, None, None]  # [n, 8, 4, 8]
    return (dl[:, :, None, None] * vals).reshape(n, QK_K)


_DEQUANT = {Q.Q8_0: _dequant_q8_0, Q.Q4_K: _dequant_q4_k, Q.Q6_K: _dequant_q6_k, Q.IQ1_S: _dequant_iq1_s}


def _float_bits(raw, qtype: GGMLQuantizationType, shape: tuple[int, ...]) -> np.ndarray:
    """A float type's stored array in its typed form [*shape] (accepts the typed array or its bytes)."""
    raw = np.asarray(raw)
    dt = FLOAT_DTYPES[qtype]
    if raw.dtype == np.uint8:  # the raw little-endian bytes, [*shape[:-1], cols * itemsize] or flat
        want = (*shape[:-1], shape[-1] * dt.itemsize)
        if raw.shape != want and not (raw.ndim == 1 and raw.size == math.prod(want)):
            raise BadInput(f"dequantize: {qtype.name} bytes of shape {list(raw.shape)} do not hold a "
                           f"{list(shape)} tensor (expected uint8 {list(want)})")
        return np.ascontiguousarray(raw).view(dt.newbyteorder("<")).reshape(shape)
    if qtype == Q.BF16 and raw.dtype == np.int16:
        raw = raw.view(np.uint16)
    if raw.dtype != dt:
        raise BadInput(f"dequantize: {qtype.name} data must be {dt} (or its raw bytes as uint8), got {raw.dtype}")
    if raw.shape != shape and not (raw.ndim == 1 and raw.size == math.prod(shape)):
        raise BadInput(f"dequantize: {qtype.name} data of shape {list(raw.shape)} does not hold a "
                       f"{list(shape)} tensor")
    return raw.reshape(shape)


def dequantize(raw: np.ndarray, qtype: int, shape) -> np.ndarray:
    """Stored data of a [*lead, rows, cols] tensor -> float32 values of that shape (a new array).

    raw: uint8 [*lead, rows, row_bytes] for block types (or those bytes flat); for F32 / F16 the
    typed array [*lead, rows, cols]; for BF16 its uint16 bit patterns. Bit-exact with gguf-py.
    """
    t = _qtype(qtype, "dequantize")
    shape = _shape(shape, t, "dequantize")
    if t in FLOAT_DTYPES:
        data = _float_bits(raw, t, shape)
        if t == Q.BF16:  # bf16 is the top half of a float32
            return (data.astype(np.uint32) << 16).view(np.float32)
        return data.astype(np.float32)  # always a copy
    blocks = _as_blocks(raw, t, shape)                     # [n_blocks, type_size]
    block = GGML_QUANT_SIZES[t][0]
    out = np.empty((blocks.shape[0], block), np.float32)   # [n_blocks, block_size]
    fn = _DEQUANT[t]
    for s in range(0, blocks.shape[0], _CHUNK_BLOCKS):
        out[s:s + _CHUNK_BLOCKS] = fn(blocks[s:s + _CHUNK_BLOCKS])
    return out.reshape(shape)


# ----------------------------------------------------------------------------------------------
# Quantizers: float32 [n, block_size] -> uint8 [n, type_size]
# ----------------------------------------------------------------------------------------------

_F16_MAX = float(np.finfo(np.float16).max)


def _to_f16_bytes(x: np.ndarray, qtype: GGMLQuantizationType, what: str) -> np.ndarray:
    """float32 [n, 1] -> its fp16 (round to nearest even) as uint8 [n, 2]; BadInput if it overflows."""
    with np.errstate(over="ignore"):
        h = x.astype("<f2")
    if not np.isfinite(h).all():
        raise BadInput(f"quantize: {qtype.name} {what} {float(np.max(np.abs(x))):.4g} does not fit in fp16 "
                       f"(max {_F16_MAX}); the values are too large for this type, scale them down or use F32")
    return h.view(np.uint8)


def _quant_q8_0(x: np.ndarray) -> np.ndarray:
    """Q8_0 exactly as ggml's reference: d = amax / 127, q = roundf(x * (1 / d)), d stored as fp16."""
    d = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)  # [n, 1]
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)  # [n, 1]
    q = _round_half_away(x * inv).astype(np.int8)          # [n, 32]
    return np.concatenate([_to_f16_bytes(d, Q.Q8_0, "scale"), q.view(np.uint8)], axis=1)


def _fit_offset_scale(x: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares fit x ~ a*q + b over the last axis, with a >= 0 and b <= 0; returns (a, b, squared error)."""
    n = x.shape[-1]
    sq, sqq = q.sum(-1), (q * q).sum(-1)
    sx, sqx = x.sum(-1), (q * x).sum(-1)
    det = n * sqq - sq * sq
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(det > 0, (n * sqx - sq * sx) / det, 0.0)
        b = np.where(det > 0, (sqq * sx - sq * sqx) / det, sx / n)
        # b must be <= 0 (the format subtracts a non-negative min): the constrained optimum is b = 0
        a_b0 = np.where(sqq > 0, sqx / sqq, 0.0)
    a, b = np.where(b > 0, a_b0, a), np.minimum(b, 0.0)
    a = np.maximum(a, 0.0)
    err = ((a[..., None] * q + b[..., None] - x) ** 2).sum(-1)
    return a, b, err


def _q4k_sub_fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per 32-value sub-block, scale a >= 0 and min m >= 0 with x ~ a*q - m, q in 0..15.

    Searches 21 step sizes around range/15 (rounding codes, then refitting a and m by least squares)
    and keeps the one with the least squared error. x: float64 [n, 8, 32] -> (a, m) [n, 8].
    """
    lo = np.minimum(x.min(-1), 0.0)                        # [n, 8]
    rng_ = x.max(-1) - lo                                  # [n, 8]
    best_a = rng_ / 15
    best_b = lo
    best_err = ((np.clip(np.round((x - lo[..., None]) / np.where(best_a > 0, best_a, 1)[..., None]), 0, 15)
                 * best_a[..., None] + lo[..., None] - x) ** 2).sum(-1)
    safe = np.where(rng_ > 0, rng_, 1.0)
    for t in np.linspace(-1.0, 1.0, 21):
        inv = (15 + t) / safe                              # [n, 8]
        q = np.clip(np.round((x - lo[..., None]) * inv[..., None]), 0, 15)  # [n, 8, 32]
        a, b, err = _fit_offset_scale(x, q)
        better = err < best_err
        best_a, best_b, best_err = (np.where(better, a, best_a), np.where(better, b, best_b),
                                    np.where(better, err, best_err))
    return best_a, -best_b


def _quant_q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K: per-sub-block (scale, min) search, both quantized to 6 bits against fp16 d and dmin,
    then every code re-rounded against the scale and min it will actually be decoded with."""
    n = x.shape[0]
    xs = x.reshape(n, 8, 32).astype(np.float64)            # [n, sub-block, 32]
    a, m = _q4k_sub_fit(xs)                                # [n, 8] each
    d_h = _to_f16_bytes((a.max(1, keepdims=True) / 63).astype(np.float32), Q.Q4_K, "scale")
    dmin_h = _to_f16_bytes((m.max(1, keepdims=True) / 63).astype(np.float32), Q.Q4_K, "min scale")
    d = d_h.copy().view("<f2").astype(np.float32)          # [n, 1] as the decoder will see it
    dmin = dmin_h.copy().view("<f2").astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d > 0, np.clip(np.round(a / d), 0, 63), 0).astype(np.uint8)        # [n, 8]
        mn = np.where(dmin > 0, np.clip(np.round(m / dmin), 0, 63), 0).astype(np.uint8)  # [n, 8]
        ds = (d * sc.astype(np.float32))[:, :, None]       # [n, 8, 1] exactly as decoded
        dm = (dmin * mn.astype(np.float32))[:, :, None]
        q = np.where(ds > 0, np.clip(np.round((xs + dm) / ds), 0, 15), 0).astype(np.uint8)  # [n, 8, 32]
    q = q.reshape(n, 4, 2, 32)                             # [n, chunk, nibble, 32]
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(n, 128)
    return np.concatenate([d_h, dmin_h, _q4k_pack_scales(sc, mn), qs], axis=1)


def _q6k_sub_fit(x: np.ndarray) -> np.ndarray:
    """Per 16-value sub-block, a signed scale a with x ~ a*q, q in -32..31.

    Tries step sizes mapping the largest-magnitude value to about -32 or +31 (+-1 code, 11 each),
    refits a by least squares for the rounded codes, keeps the least squared error.
    x: float64 [n, 16, 16] -> a [n, 16].
    """
    idx = np.abs(x).argmax(-1)[..., None]
    xm = np.take_along_axis(x, idx, -1)[..., 0]            # [n, 16] signed extreme value
    safe = np.where(xm != 0, xm, 1.0)
    best_a = np.zeros(x.shape[:-1])
    best_err = (x * x).sum(-1)
    for target in np.concatenate([-32 + np.linspace(-1, 1, 11), 31 + np.linspace(-1, 1, 11)]):
        inv = target / safe                                # [n, 16]
        q = np.clip(np.round(x * inv[..., None]), -32, 31)  # [n, 16, 16]
        sqq, sqx = (q * q).sum(-1), (q * x).sum(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(sqq > 0, sqx / sqq, 0.0)
        err = ((a[..., None] * q - x) ** 2).sum(-1)
        better = err < best_err
        best_a, best_err = np.where(better, a, best_a), np.where(better, err, best_err)
    return best_a


def _quant_q6_k(x: np.ndarray) -> np.ndarray:
    """Q6_K: per-sub-block scale search, scales quantized to int8 against an fp16 d (d = max|a| / 127),
    then every code re-rounded against the scale it will actually be decoded with."""
    n = x.shape[0]
    xs = x.reshape(n, 16, 16).astype(np.float64)           # [n, sub-block, 16]
    a = _q6k_sub_fit(xs)                                   # [n, 16]
    d_h = _to_f16_bytes((np.abs(a).max(1, keepdims=True) / 127).astype(np.float32), Q.Q6_K, "scale")
    d = d_h.copy().view("<f2").astype(np.float32)          # [n, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d > 0, np.clip(np.round(a / d), -127, 127), 0).astype(np.int8)  # [n, 16]
        ds = (d * sc.astype(np.float32))[:, :, None]       # [n, 16, 1] exactly as decoded
        q = np.where(ds != 0, np.clip(np.round(xs / np.where(ds != 0, ds, 1)), -32, 31), 0)
    q = (q + 32).astype(np.uint8).reshape(n, 2, 4, 32)    # [n, half, r, l]
    ql = ((q[:, :, 0:2] & 15) | (q[:, :, 2:4] << 4)).reshape(n, 128)  # [n, half, which, l] -> bytes
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    return np.concatenate([ql, qh.reshape(n, 64), sc.view(np.uint8), d_h], axis=1)


def _ternary_scale(x: np.ndarray) -> np.ndarray:
    """Best scale s for x ~ s*t, t in {-1, 0, 1} free per value (no grid): over the last axis.

    With the m largest |x| set to +-1, the best s is their mean and the error drops by (sum)^2 / m;
    pick the m that drops it most. Used only to place IQ1_S's scales before the grid search.
    """
    srt = -np.sort(-np.abs(x), axis=-1)                    # [..., 32] descending
    csum = np.cumsum(srt, axis=-1)
    m = np.arange(1, x.shape[-1] + 1)
    best = (csum * csum / m).argmax(-1)[..., None]
    return (np.take_along_axis(csum, best, -1) / (best + 1))[..., 0]


@functools.cache
def _iq1s_classes() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The grid sorted into classes of equal (number of non-zeros, sum): the search's lookup tables.

    For one 8-value group x, scale s and delta, the squared error of grid entry g is
      |x|^2 - 2 s delta sum(x) + 8 s^2 delta^2 - 2 s * (x.g - s/2 * (nnz(g) + 2 delta sum(g)))
    (|g|^2 = nnz(g) as g is ternary). Within a class the last bracket's penalty is the same for every
    s and delta, so the best entry of a class is simply its largest x.g, whatever the scale: one
    matmul gives every class winner (39 classes in this grid, 45 possible), and each of the 16
    (scale, delta) pairs is then decided among those few numbers instead of 2048.
    Returns (order: entry ids sorted by class [2048], starts of the classes in that order [C],
    nnz and sum per class [C], the sorted grid transposed, float32 [8, 2048]).
    """
    g = _iq1s_grid_f32()
    nnz, tot = (g != 0).sum(1), g.sum(1)
    key = nnz * 32 + (tot + 8)
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    penalty = np.stack([nnz[order][starts], tot[order][starts]]).astype(np.float32)  # [2, C]
    return order, starts, penalty, np.ascontiguousarray(g[order].T)


def _iq1s_class_winners(xg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of x.g scores [rows, 2048] (columns in class order): each class's best score and its
    grid entry id, both [rows, C]."""
    order, starts, _, _ = _iq1s_classes()
    ends = np.r_[starts[1:], xg.shape[1]]
    pos = np.empty((xg.shape[0], starts.size), np.int64)
    for c, (a, b) in enumerate(zip(starts, ends)):
        pos[:, c] = a + xg[:, a:b].argmax(1)
    return np.take_along_axis(xg, pos, 1), order[pos]


def _quant_iq1_s(x: np.ndarray) -> np.ndarray:
    """IQ1_S: d = (largest sub-block ternary scale) / 15 as fp16; then, given d, for every 32-value
    sub-block the exact minimiser of the squared error over all 8 multipliers (2k+1), both delta
    signs and, for each of its four 8-value groups, all 2048 grid entries (see `_iq1s_classes`)."""
    n = x.shape[0]
    xs = x.reshape(n, 8, 4, 8)                             # [n, sub-block, group, 8]
    s_star = _ternary_scale(xs.reshape(n, 8, 32))          # [n, 8]
    d_h = _to_f16_bytes((s_star.max(1, keepdims=True) / 15).astype(np.float32), Q.IQ1_S, "scale")
    d = d_h.copy().view("<f2").astype(np.float32)          # [n, 1]

    _, _, penalty, grid_t = _iq1s_classes()
    win_xg, win_id = _iq1s_class_winners(xs.reshape(-1, 8) @ grid_t)  # [n*32, C] each
    win_xg = win_xg.reshape(n, 8, 4, -1)                   # [n, sub-block, group, C]
    win_id = win_id.reshape(n, 8, 4, -1)
    xx = (xs * xs).sum(-1)                                 # [n, 8, 4]
    sx = xs.sum(-1)                                        # [n, 8, 4]
    best_err = np.full((n, 8), np.inf, np.float32)
    best_k = np.zeros((n, 8), np.int64)
    best_neg = np.zeros((n, 8), bool)
    best_idx = np.zeros((n, 8, 4), np.int64)
    for k in range(8):
        s = (d * np.float32(2 * k + 1))[:, :, None]        # [n, 1, 1] as decoded
        for sign in (1, -1):
            delta = np.float32(sign * IQ1S_DELTA)
            pen = penalty[0] + 2 * delta * penalty[1]      # [C]
            score = win_xg - (s / 2)[..., None] * pen      # [n, 8, 4, C]
            c = score.argmax(-1)[..., None]                # [n, 8, 4, 1]
            top = np.take_along_axis(score, c, -1)[..., 0]  # [n, 8, 4]
            err = (xx - 2 * s * top - 2 * s * delta * sx + 8 * s * s * delta * delta).sum(-1)  # [n, 8]
            better = err < best_err
            best_err = np.where(better, err, best_err)
            best_k = np.where(better, k, best_k)
            best_neg = np.where(better, sign < 0, best_neg)
            best_idx = np.where(better[..., None], np.take_along_axis(win_id, c, -1)[..., 0], best_idx)

    qs = (best_idx & 255).astype(np.uint8).reshape(n, 32)  # [n, 4*sub-block + group]
    high = (best_idx >> 8).astype(np.uint16)               # [n, 8, 4]
    qh = (high[..., 0] | (high[..., 1] << 3) | (high[..., 2] << 6) | (high[..., 3] << 9)
          | (best_k.astype(np.uint16) << 12) | (best_neg.astype(np.uint16) << 15))  # [n, 8]
    return np.concatenate([d_h, qs, qh.astype("<u2").view(np.uint8)], axis=1)


# Blocks per step of each quantizer (IQ1_S's search holds a [32 * blocks, 2048] float32 score array).
_QUANT = {Q.Q8_0: (_quant_q8_0, 1 << 15), Q.Q4_K: (_quant_q4_k, 1 << 11),
          Q.Q6_K: (_quant_q6_k, 1 << 11), Q.IQ1_S: (_quant_iq1_s, 128)}


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), round to nearest even; NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16   # wraps only on NaN lanes, which are replaced
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def quantize(values: np.ndarray, qtype: int) -> np.ndarray:
    """float32 values [..., cols] -> stored data in `qtype` (round to nearest in that format).

    Block types give uint8 [..., row_bytes]; F32 / F16 the typed array; BF16 uint16 bit patterns.
    Q8_0, F16 and BF16 are byte-identical to ggml's reference conversion. Raises BadInput for
    non-finite values, rows that are not whole blocks, or magnitudes too large for fp16 scales.
    """
    t = _qtype(qtype, "quantize")
    x = np.asarray(values, dtype=np.float32)
    shape = _shape(x.shape, t, "quantize")
    if t == Q.F32:
        return x.copy()
    if t == Q.BF16:
        return _bf16_bits(x)
    if not np.isfinite(x).all():
        raise BadInput(f"quantize: {t.name} input holds NaN or Inf; only finite values can be quantized")
    if t == Q.F16:
        with np.errstate(over="ignore"):
            h = x.astype(np.float16)
        if not np.isfinite(h).all():
            raise BadInput(f"quantize: F16 cannot hold {float(np.max(np.abs(x))):.4g} (max {_F16_MAX}); "
                           f"use F32 or BF16")
        return h
    block, type_size = GGML_QUANT_SIZES[t]
    blocks = np.ascontiguousarray(x).reshape(-1, block)    # [n_blocks, block_size]
    out = np.empty((blocks.shape[0], type_size), np.uint8)  # [n_blocks, type_size]
    fn, step = _QUANT[t]
    for s in range(0, blocks.shape[0], step):
        out[s:s + step] = fn(blocks[s:s + step])
    return out.reshape(storage_shape(t, shape))


# ----------------------------------------------------------------------------------------------
# Random blocks: codes drawn uniformly, scales set so the values have a chosen standard deviation
# ----------------------------------------------------------------------------------------------

# Every block's fp16 scale is one of 16 values spread over a factor of 2 (picked by 4 random bits), so
# kernels that read the wrong block's scale are caught; _JITTER_MS is E[multiplier^2].
_JITTER = 2.0 ** np.linspace(-0.5, 0.5, 16)
_JITTER_MS = float(np.mean(_JITTER ** 2))


def _mean_sq(values) -> float:
    return float(np.mean(np.asarray(values, np.float64) ** 2))


@functools.cache
def _code_power(qtype: GGMLQuantizationType) -> float:
    """E[value^2] / E[d^2] of the values random_blocks draws for a type (the codes are uniform)."""
    if qtype == Q.Q8_0:                                    # q uniform in int8
        return _mean_sq(np.arange(-128, 128))
    if qtype == Q.Q4_K:                                    # scale = min uniform in 32..63, q in 0..15
        return _mean_sq(np.arange(32, 64)) * _mean_sq(np.arange(16) - 7.5)
    if qtype == Q.Q6_K:                                    # |scale| uniform in 64..127, q - 32 in -32..31
        return _mean_sq(np.arange(64, 128)) * _mean_sq(np.arange(-32, 32))
    if qtype == Q.IQ1_S:                                   # 2k+1 uniform odd 1..15, grid entry uniform
        g = _iq1s_grid_f32()
        return _mean_sq(2 * np.arange(8) + 1) * (float(np.mean(g * g)) + IQ1S_DELTA ** 2)
    raise AssertionError(qtype)


def _scale_table(d0: float, factor: float = 1.0) -> np.ndarray:
    """The 16 fp16 bit patterns of d0 * factor * jitter (uint16 [16]); range checked by `_check_scales`."""
    return (d0 * factor * _JITTER).astype(np.float16).view(np.uint16)


# Smallest scale random_blocks writes. Subnormal fp16 is fine (ggml's own Q6_K files are full of
# subnormal d for std ~0.02 weights); below this the 16 jittered values would start to collapse.
_MIN_SCALE = 2.0 ** -22
# The largest multiple of d0 a type writes as a scale (Q4_K's dmin is 7.5 d).
_SCALE_FACTOR = {Q.Q8_0: 1.0, Q.Q4_K: 7.5, Q.Q6_K: 1.0, Q.IQ1_S: 1.0}


def _check_scales(qtype: GGMLQuantizationType, std: float, d0: float) -> None:
    """BadInput when `std` needs fp16 scales out of fp16's range (too small or too large)."""
    lo_scale, hi_scale = d0 * _JITTER[0], d0 * _SCALE_FACTOR[qtype] * _JITTER[-1]
    if d0 > 0 and (lo_scale < _MIN_SCALE or hi_scale > _F16_MAX):
        lo_std = std * _MIN_SCALE / lo_scale
        hi_std = std * _F16_MAX / hi_scale
        raise BadInput(f"random_blocks: std {std:.3g} is out of range for {qtype.name}: its fp16 scales would "
                       f"span {lo_scale:.3g}..{hi_scale:.3g}; use a std between {lo_std:.2g} and {hi_std:.2g}")


def _fill_q8_0(blocks: np.ndarray, d0: float) -> None:
    u16 = blocks.view(np.uint16)                           # [n, 17]; word 0 = d
    u16[:, 0] = _scale_table(d0)[u16[:, 0] & 15]


def _fill_q4_k(blocks: np.ndarray, d0: float) -> None:
    u16 = blocks.view(np.uint16)                           # [n, 72]; word 0 = d, word 1 = dmin
    j = u16[:, 0] & 15
    u16[:, 1] = _scale_table(d0, 7.5)[j]                   # dmin = 7.5 d and min = scale: centred
    u16[:, 0] = _scale_table(d0)[j]
    sc = (blocks[:, 4:12] & 31) | 32                       # [n, 8] scales in 32..63
    blocks[:, 4:16] = _q4k_pack_scales(sc, sc)


def _fill_q6_k(blocks: np.ndarray, d0: float) -> None:
    u16 = blocks.view(np.uint16)                           # [n, 105]; word 104 = d
    u16[:, 104] = _scale_table(d0)[u16[:, 104] & 15]
    b = blocks[:, 192:208]                                 # [n, 16] int8 scales: |s| in 64..127, random sign
    mag = (b & 63) | 64
    blocks[:, 192:208] = np.where(b & 128, (256 - mag.astype(np.uint16)).astype(np.uint8), mag)


def _fill_iq1_s(blocks: np.ndarray, d0: float) -> None:
    u16 = blocks.view(np.uint16)                           # [n, 25]; word 0 = d, the rest all valid
    u16[:, 0] = _scale_table(d0)[u16[:, 0] & 15]


_FILL = {Q.Q8_0: _fill_q8_0, Q.Q4_K: _fill_q4_k, Q.Q6_K: _fill_q6_k, Q.IQ1_S: _fill_iq1_s}


@functools.cache
def _normal_quantiles() -> np.ndarray:
    """The (i + 1/2) / 65536 quantiles of N(0, 1), float32 [65536]: a table that turns 16 uniform
    random bits into a normal draw (finer than fp16/bf16 resolution, ~15x faster than sampling)."""
    from statistics import NormalDist

    inv = NormalDist().inv_cdf
    q = np.array([inv((i + 0.5) / 65536) for i in range(65536)], np.float64)
    q /= np.sqrt(np.mean(q * q))                           # exactly unit variance
    out = q.astype(np.float32)
    out.flags.writeable = False
    return out


# Blocks generated per step: the fix-up of the scale fields then runs on data still in cache.
_RANDOM_STEP_BYTES = 1 << 20


def random_blocks(rng: np.random.Generator, shape, qtype: int, std: float) -> np.ndarray:
    """Stored data of a random [*lead, rows, cols] tensor whose values have about standard deviation std.

    Block types: codes drawn uniformly from the generator's raw bits, fp16 scales set (with a small
    per-block jitter) so that E[value^2] = std^2; every value is finite. Every sub-block is centred
    (Q4_K's min is 7.5 scale steps, Q6_K's and IQ1_S's signs are symmetric), so the mean is ~0.
    F16 / BF16: normal(0, std) through a 65536-entry quantile table; F32: true normal draws (slower,
    ~0.1 GB/s, but F32 tensors are the small ones). Returns the layout `dequantize` takes.
    Block types run at ~1 GB/s (one core) once the output's memory has been touched.
    """
    t = _qtype(qtype, "random_blocks")
    shape = _shape(shape, t, "random_blocks")
    std = float(std)
    if not math.isfinite(std) or std < 0:
        raise BadInput(f"random_blocks: std must be a finite number >= 0, got {std}")
    if t == Q.F32:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    if t in FLOAT_DTYPES:  # 16-bit floats: 16 random bits pick one of 65536 normal quantiles
        table = quantize(_normal_quantiles() * np.float32(std), t)  # [65536] stored form
        out = np.empty(math.prod(shape), table.dtype)
        step = _RANDOM_STEP_BYTES // 2
        for s in range(0, out.size, step):
            e = min(out.size, s + step)
            idx = rng.bit_generator.random_raw((e - s + 3) // 4).view(np.uint16)[:e - s]
            np.take(table, idx, out=out[s:e])
        return out.reshape(shape)
    block, type_size = GGML_QUANT_SIZES[t]
    n_blocks = math.prod(shape) // block
    d0 = std / math.sqrt(_code_power(t) * _JITTER_MS)
    _check_scales(t, std, d0)
    out = np.empty((n_blocks, type_size), np.uint8)        # [n_blocks, type_size]
    flat = out.reshape(-1)
    step = max(1, _RANDOM_STEP_BYTES // type_size)
    for s in range(0, n_blocks, step):
        e = min(n_blocks, s + step)
        nbytes = (e - s) * type_size
        words = rng.bit_generator.random_raw((nbytes + 7) // 8)  # uint64, all bits uniform
        flat[s * type_size:e * type_size] = words.view(np.uint8)[:nbytes]
        _FILL[t](out[s:e], d0)
    return out.reshape(storage_shape(t, shape))
