"""Triton device functions that decode GGUF-stored weights, one 256-value chunk of a tile of rows at a time.

Every supported type is read in chunks of 256 consecutive values of a row (one super-block of Q4_K,
Q6_K and IQ1_S; eight Q8_0 blocks; 256 plain floats), shaped [R, S, L] with S * L = 256: S groups
of L values that share one scale (a sub-block). `decode_chunk` returns, for the rows of a tile,

    q [R, S, L] float32   the codes, exactly as small floats (Q4_K: 0..15, Q6_K: -32..31, ...)
    a [R, S]    float32   the multiplier of each sub-block
    b [R, S]    float32   the offset of each sub-block (Q4_K's min, IQ1_S's delta; 0 for the others)
    k [1, S, L] int32     which value of the row each position holds (chunk * 256 + s * L + l)
    ok [1, S, L] bool     which positions exist (float rows whose length is not a multiple of 256)

so that value = a * q + b, and the order s * L + l is the row's natural order. A GEMV sums
a * sum_l(q x) + b * sum_l(x) per sub-block (one multiply per value); a GEMM or a gather forms the
values. The byte layouts are the ones `sparkops.gguf.quants` documents (and checks against gguf-py).

Integer codes become floats through the exponent trick, float(2^23 + u) = bits(0x4B000000 | u),
minus 2^23: an OR and a subtract, exact for u < 2^23, instead of an int-to-float conversion (which
Hopper runs at an eighth of the FMA rate).

The GEMV form (`gemv_fetch` / `gemv_decode` / `gemv_dot`, below) is laid out for Triton's layout
inference: every big tensor is [R, bytes-of-the-row] (or its transpose for IQ1_S) so the code loads
anchor a layout with many bytes per thread, activations are loaded 1-D and broadcast (the small
tensor is the one converted), and accumulators stay 2-D in the codes' layout. Q4_K turns nibbles into
floats with eight `prmt` per word (inline PTX; plain shifts under the interpreter). Rows of Q6_K,
Q8_0 and IQ1_S are only 2-byte aligned, so their codes are read a byte per thread and accumulated
elementwise, the cross-thread sums left to the end. Q6_K has a second fetch (`Q6_K_WIDE`, a pseudo type id
the host passes instead of Q6_K): its ql and qh bytes as 16-bit words (64 + 32 loads per row-chunk instead of
128 + 128 byte loads), unpacked with shifts and masks into exactly the byte path's codes, in its column order.
"""

import triton
import triton.language as tl

# GGML type ids (gguf.GGMLQuantizationType); the kernels specialize on them as constexpr.
F32 = tl.constexpr(0)
F16 = tl.constexpr(1)
Q8_0 = tl.constexpr(8)
Q4_K = tl.constexpr(12)
Q6_K = tl.constexpr(14)
IQ1_S = tl.constexpr(19)
BF16 = tl.constexpr(30)
#: not a GGML type: Q6_K blocks read through 16-bit word loads (`_gf_q6_k_wide`); the same codes in the same columns
Q6_K_WIDE = tl.constexpr(256 + 14)
#: not a GGML type: Q4_K blocks in the "flat" GEMV form (`_gf_q4_k_flat`): every tensor of a chunk [32 words, R rows]
#: in one layout, one qs word per thread and row, so that nothing in the loop changes layout (no barrier)
Q4_K_FLAT = tl.constexpr(256 + 12)

_MAGIC = tl.constexpr(0x4B000000)  # bits of 2^23 as float32


@triton.jit
def _u2f(u, bias: tl.constexpr):
    """float(u) - bias for int32 u in [0, 2^23), bias a small integer: exact, no conversion instruction."""
    return (u | _MAGIC).to(tl.float32, bitcast=True) - (8388608.0 + bias)


@triton.jit
def _f16_at(p):
    """The little-endian float16 at byte pointer(s) p (2-byte aligned), as float32."""
    return tl.load(p.to(tl.pointer_type(tl.float16))).to(tl.float32)


@triton.jit
def _f16_at_masked(p, mask):
    return tl.load(p.to(tl.pointer_type(tl.float16)), mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _chunk_index(c, S: tl.constexpr, L: tl.constexpr):
    """[1, S, L] value index within the row of each position of chunk c."""
    s = tl.arange(0, S)[None, :, None]
    l = tl.arange(0, L)[None, None, :]
    return c * 256 + s * L + l


@triton.jit
def _dq_float(row, c, rmask, K):
    """F32 / F16 / BF16: row is a typed pointer [R, 1, 1]; values as they are (a = 1, b = 0)."""
    k = _chunk_index(c, 8, 32)                          # [1, 8, 32]
    ok = k < K
    q = tl.load(row + k, mask=rmask & ok, other=0.0).to(tl.float32)  # [R, 8, 32]
    a = tl.full([q.shape[0], 8], 1.0, tl.float32)
    return q, a, a * 0.0, k, ok


@triton.jit
def _dq_q8_0(row, c, rmask, K):
    """Q8_0, 34-byte blocks of 32: fp16 d | int8 q[32]; chunk c is blocks 8c .. 8c+7 (masked past K)."""
    k = _chunk_index(c, 8, 32)                          # [1, 8, 32]
    ok = k < K
    s = tl.arange(0, 8)[None, :]                        # [1, 8]
    blk = row + (c * 8 + s[:, :, None]) * 34            # [R, 8, 1] byte pointers of the blocks
    codes = tl.load(blk + 2 + tl.arange(0, 32)[None, None, :], mask=rmask & ok, other=128)  # [R, 8, 32]
    q = _u2f(codes.to(tl.int32) ^ 0x80, 128)            # int8 value = (byte ^ 0x80) - 128
    sok = (c * 8 + s) * 32 < K                          # [1, 8]
    a = _f16_at_masked(blk.reshape(blk.shape[0], 8), rmask.reshape(rmask.shape[0], 1) & sok)  # [R, 8]
    return q, a, a * 0.0, k, ok


@triton.jit
def _dq_q4_k(row, c, rmask):
    """Q4_K, 144 bytes per 256: fp16 d | fp16 dmin | 12 bytes of 6-bit (scale, min) x 8 | qs[128].

    qs chunk j (32 bytes) holds sub-block 2j in its low nibbles and 2j+1 in its high ones;
    value = (d * scale[s]) * q - dmin * min[s].
    """
    R: tl.constexpr = row.shape[0]
    blk = row + c * 144                                 # [R, 1, 1]
    j = tl.arange(0, 4)[None, :, None, None]            # [1, 4, 1, 1]
    nib = tl.arange(0, 2)[None, None, :, None]          # [1, 1, 2, 1]
    l = tl.arange(0, 32)[None, None, None, :]           # [1, 1, 1, 32]
    byte = tl.load(blk[:, :, :, None] + 16 + j * 32 + l, mask=rmask[:, :, :, None], other=0)  # [R, 4, 1, 32]
    q4 = (byte.to(tl.int32) >> (nib * 4)) & 15          # [R, 4, 2, 32]
    q = _u2f(q4, 0).reshape(R, 8, 32)                   # sub-block s = 2j + nib
    # scales and mins: bytes 4..15 = a[4] | b[4] | c[4]
    hdr = blk.reshape(R, 1)                             # [R, 1]
    m = rmask.reshape(R, 1)
    s = tl.arange(0, 8)[None, :]                        # [1, 8]
    i = s % 4
    ab = tl.load(hdr + 4 + i, mask=m, other=0).to(tl.int32)    # [R, 8] a[s % 4]
    bb = tl.load(hdr + 8 + i, mask=m, other=0).to(tl.int32)    # b[s % 4]
    cb = tl.load(hdr + 12 + i, mask=m, other=0).to(tl.int32)   # c[s % 4]
    low = s < 4
    sc = tl.where(low, ab & 63, (cb & 15) | ((ab >> 6) << 4))
    mn = tl.where(low, bb & 63, (cb >> 4) | ((bb >> 6) << 4))
    d = _f16_at_masked(hdr, m)                          # [R, 1]
    dmin = _f16_at_masked(hdr + 2, m)
    a = d * _u2f(sc, 0)                                 # [R, 8]
    b = -(dmin * _u2f(mn, 0))
    return q, a, b, _chunk_index(c, 8, 32), _chunk_index(c, 8, 32) >= 0


@triton.jit
def _dq_q6_k(row, c, rmask):
    """Q6_K, 210 bytes per 256: ql[128] | qh[64] | int8 scale[16] | fp16 d; value = (d * scale[s]) * (q - 32).

    Value v = 128h + 32r + l (h = 0, 1; r = 0..3; l = 0..31): low 4 bits are nibble r // 2 of
    ql[64h + 32(r % 2) + l], high 2 bits are bits 2r, 2r+1 of qh[32h + l]. Sub-block s = v // 16.
    """
    R: tl.constexpr = row.shape[0]
    blk = row + c * 210                                 # [R, 1, 1]
    s = tl.arange(0, 16)[None, :, None]                 # [1, 16, 1] sub-block of 16 values
    l16 = tl.arange(0, 16)[None, None, :]               # [1, 1, 16]
    h = s // 8
    r = (s // 2) % 4
    l = (s % 2) * 16 + l16                              # [1, 16, 16] position within the 32-run
    lo = tl.load(blk + 64 * h + 32 * (r % 2) + l, mask=rmask, other=0).to(tl.int32)   # [R, 16, 16]
    hi = tl.load(blk + 128 + 32 * h + l, mask=rmask, other=0).to(tl.int32)
    code = ((lo >> (4 * (r // 2))) & 15) | (((hi >> (2 * r)) & 3) << 4)
    q = _u2f(code, 32)
    hdr = blk.reshape(R, 1)
    m = rmask.reshape(R, 1)
    sc = tl.load((hdr + 192 + tl.arange(0, 16)[None, :]).to(tl.pointer_type(tl.int8)), mask=m, other=0)  # [R, 16]
    a = _f16_at_masked(hdr + 208, m) * sc.to(tl.float32)
    return q, a, a * 0.0, _chunk_index(c, 16, 16), _chunk_index(c, 16, 16) >= 0


@triton.jit
def _dq_iq1_s(row, c, rmask, grid):
    """IQ1_S, 50 bytes per 256: fp16 d | qs[32] | uint16 qh[8]; `grid` is the packed table (int32
    [2048 * 4], each entry's 8 values {-1, 0, 1} as bfloat16 pairs, low half first).

    Group g (8 values) of sub-block s uses grid entry qs[4s + g] | ((qh[s] >> 3g) & 7) << 8;
    qh[s] bits 12-14 = k, bit 15 = sign of delta: value = d (2k + 1) (grid + delta), delta = +-1/8.
    """
    R: tl.constexpr = row.shape[0]
    blk = row + c * 50                                  # [R, 1, 1]
    s = tl.arange(0, 8)[None, :, None]                  # [1, 8, 1]
    g = tl.arange(0, 4)[None, None, :]                  # [1, 1, 4]
    qs = tl.load(blk + 2 + 4 * s + g, mask=rmask, other=0).to(tl.int32)  # [R, 8, 4]
    hdr = blk.reshape(R, 1)
    m = rmask.reshape(R, 1)
    qh = tl.load((hdr + 34).to(tl.pointer_type(tl.uint16)) + tl.arange(0, 8)[None, :], mask=m,
                 other=0).to(tl.int32)                  # [R, 8]
    entry = qs | (((qh[:, :, None] >> (3 * g)) & 7) << 8)  # [R, 8, 4]
    gw = tl.load(grid + entry[:, :, :, None] * 4 + tl.arange(0, 4)[None, None, None, :])  # [R, 8, 4, 4]
    even, odd = _bf16_pair(gw)
    q = tl.join(even, odd).reshape(R, 8, 32)           # [R, 8, 4, 4, 2] -> natural order
    a = _f16_at_masked(hdr, m) * _u2f(2 * ((qh >> 12) & 7) + 1, 0)  # [R, 8]
    b = tl.where((qh & 0x8000) != 0, -0.125, 0.125) * a
    return q, a, b, _chunk_index(c, 8, 32), _chunk_index(c, 8, 32) >= 0


@triton.jit
def decode_chunk(QTYPE: tl.constexpr, row, c, rmask, K, grid):
    """Chunk c (values 256c .. 256c+255) of the rows `row` ([R, 1, 1] pointers to each row's start:
    uint8 for block types, the element type for F32/F16/BF16); rmask [R, 1, 1] says which rows exist.
    K: values per row (masks float rows). grid: the IQ1_S table (any pointer for other types).
    Returns (q [R, S, L], a [R, S], b [R, S], k [1, S, L], ok [1, S, L]); value = a * q + b.
    """
    if QTYPE == Q4_K:
        return _dq_q4_k(row, c, rmask)
    elif QTYPE == Q6_K or QTYPE == Q6_K_WIDE:
        return _dq_q6_k(row, c, rmask)
    elif QTYPE == IQ1_S:
        return _dq_iq1_s(row, c, rmask, grid)
    elif QTYPE == Q8_0:
        return _dq_q8_0(row, c, rmask, K)
    else:
        return _dq_float(row, c, rmask, K)


@triton.jit
def round_bf16(v):
    """float32 v rounded to bfloat16 precision (nearest, ties to even), still float32: the interpreter's
    own float32 -> bfloat16 cast truncates, so its runs emulate the GPU's rounding with this."""
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def values(q, a, b):
    """[R, S, L] float32 values of a decoded chunk."""
    return a[:, :, None] * q + b[:, :, None]


# ----------------------------------------------------------------------------------------------
# GEMV form: decode a chunk once into code tensors laid out as the bytes are stored ([R, bytes]:
# 16-byte loads, four rows per thread, sub-block sums reduced inside a thread), then dot it with
# any number of activation rows. gemv_decode returns a tuple (codes..., scales...) and gemv_dot
# the chunk's contribution [R, SA] per sub-block column (SA = gemv_cols(QTYPE)).
# ----------------------------------------------------------------------------------------------

@triton.jit
def _q4k_scale_min(blk, s, rmask):
    """Q4_K's 6-bit (scale, min) of sub-blocks s ([1, n] ints) of the blocks at blk ([R, 1]) as float32."""
    i = s % 4
    ab = tl.load(blk + 4 + i, mask=rmask, other=0).to(tl.int32)   # [R, n]
    bb = tl.load(blk + 8 + i, mask=rmask, other=0).to(tl.int32)
    cb = tl.load(blk + 12 + i, mask=rmask, other=0).to(tl.int32)
    low = s < 4
    sc = tl.where(low, ab & 63, (cb & 15) | ((ab >> 6) << 4))
    mn = tl.where(low, bb & 63, (cb >> 4) | ((bb >> 6) << 4))
    return _u2f(sc, 0), _u2f(mn, 0)


# prmt.b32 d, a, b, sel: byte i of d = byte sel_i of {b, a} (0-3: a, 4-7: b). With b = 0x4B000000 and
# sel = 0x7540 + c, d = 0x4B0000 | (byte c of a): the float 2^23 + byte, one instruction per value.
_NIBBLES_ASM = tl.constexpr("""{
.reg .b32 lo, hi, mg;
mov.b32 mg, 0x4B000000;
and.b32 lo, $8, 0x0F0F0F0F;
shr.u32 hi, $8, 4;
and.b32 hi, hi, 0x0F0F0F0F;
prmt.b32 $0, lo, mg, 0x7540;
prmt.b32 $1, lo, mg, 0x7541;
prmt.b32 $2, lo, mg, 0x7542;
prmt.b32 $3, lo, mg, 0x7543;
prmt.b32 $4, hi, mg, 0x7540;
prmt.b32 $5, hi, mg, 0x7541;
prmt.b32 $6, hi, mg, 0x7542;
prmt.b32 $7, hi, mg, 0x7543;
}""")


@triton.jit
def _magic_byte(w, shift: tl.constexpr):
    return ((w >> shift) & 0xFF) | _MAGIC


@triton.jit
def nibbles(w, PTX: tl.constexpr):
    """The 8 nibbles of int32 words w as float32 codes: (low nibble of byte 0..3, high nibble of byte 0..3).

    PTX: two masks and eight byte permutes (prmt) build the float bits 2^23 + nibble directly;
    the interpreter (no inline PTX) runs the same arithmetic as shifts and masks."""
    if PTX:
        n = tl.inline_asm_elementwise(_NIBBLES_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r", [w], dtype=(tl.int32,) * 8,
                                      is_pure=True, pack=1)
        b0, b1, b2, b3, b4, b5, b6, b7 = n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]
    else:
        lo = w & 0x0F0F0F0F
        hi = (w >> 4) & 0x0F0F0F0F
        b0, b1, b2, b3 = _magic_byte(lo, 0), _magic_byte(lo, 8), _magic_byte(lo, 16), _magic_byte(lo, 24)
        b4, b5, b6, b7 = _magic_byte(hi, 0), _magic_byte(hi, 8), _magic_byte(hi, 16), _magic_byte(hi, 24)
    return (b0.to(tl.float32, bitcast=True) - 8388608.0, b1.to(tl.float32, bitcast=True) - 8388608.0,
            b2.to(tl.float32, bitcast=True) - 8388608.0, b3.to(tl.float32, bitcast=True) - 8388608.0,
            b4.to(tl.float32, bitcast=True) - 8388608.0, b5.to(tl.float32, bitcast=True) - 8388608.0,
            b6.to(tl.float32, bitcast=True) - 8388608.0, b7.to(tl.float32, bitcast=True) - 8388608.0)


@triton.jit
def _gf_q4_k(row, c, rmask):
    """Q4_K chunk's qs as 32 int32 words [R, 32] (16-byte loads; the block's header shares their sectors)."""
    return (tl.load((row + c * 144 + 16).to(tl.pointer_type(tl.int32)) + tl.arange(0, 32)[None, :], mask=rmask,
                    other=0),)


@triton.jit
def _gd_q4_k(raw, row, c, rmask, PTX: tl.constexpr):
    """Q4_K chunk: qs word w (chunk j = w // 8, bytes l = 4(w % 8) + b): the low nibble of byte l is value
    64j + l of sub-block 2j, the high nibble value 64j + 32 + l of 2j + 1.
    Returns 8 code tensors [R, 32] (low b = 0..3, high b = 0..3) and the scales [R, 4] x 4."""
    blk = row + c * 144                                             # [R, 1]
    w = raw[0]
    j = tl.arange(0, 4)[None, :]
    sc_lo, mn_lo = _q4k_scale_min(blk, 2 * j, rmask)                # [R, 4] sub-blocks 0 2 4 6
    sc_hi, mn_hi = _q4k_scale_min(blk, 2 * j + 1, rmask)            # [R, 4] sub-blocks 1 3 5 7
    d = _f16_at_masked(blk, rmask)                                  # [R, 1]
    dmin = _f16_at_masked(blk + 2, rmask)
    q0, q1, q2, q3, q4, q5, q6, q7 = nibbles(w, PTX)
    return (q0, q1, q2, q3, q4, q5, q6, q7, d * sc_lo, d * sc_hi, dmin * mn_lo, dmin * mn_hi)


@triton.jit
def _x_quads(xc, ok, base: tl.constexpr):
    """The activations of Q4_K's 32 qs words, one [1, 32] tensor per byte b of the word: x[base + 64j + 4(w % 8) + b]
    (j = w // 8). Loaded as [32, 4] (one 16-byte load per word, x loaded 1-D-like so the codes keep their
    layout) and split in registers."""
    w = tl.arange(0, 32)[:, None]
    x = tl.load(xc + base + 64 * (w // 8) + 4 * (w % 8) + tl.arange(0, 4)[None, :], mask=ok, other=0.0)
    x02, x13 = tl.split(x.to(tl.float32).reshape(32, 2, 2))        # [32, 2]: bytes (0, 2) and (1, 3)
    x0, x2 = tl.split(x02)
    x1, x3 = tl.split(x13)
    return x0[None, :], x1[None, :], x2[None, :], x3[None, :]


@triton.jit
def _gx_q4_k(dec, xc, ok):
    """Contribution [R, 4] of one Q4_K chunk for the activations at xc (256 values; ok: the row exists)."""
    R: tl.constexpr = dec[0].shape[0]
    x0, x1, x2, x3 = _x_quads(xc, ok, 0)                            # [1, 32] each: x[64j + 4(w % 8) + b]
    x4, x5, x6, x7 = _x_quads(xc, ok, 32)
    d_lo = tl.sum((dec[0] * x0 + dec[1] * x1 + dec[2] * x2 + dec[3] * x3).reshape(R, 4, 8), axis=2)  # [R, 4]
    d_hi = tl.sum((dec[4] * x4 + dec[5] * x5 + dec[6] * x6 + dec[7] * x7).reshape(R, 4, 8), axis=2)
    s_lo = tl.sum((x0 + x1 + x2 + x3).reshape(4, 8), axis=1)[None, :]  # [1, 4] sum of x per sub-block
    s_hi = tl.sum((x4 + x5 + x6 + x7).reshape(4, 8), axis=1)[None, :]
    return dec[8] * d_lo + dec[9] * d_hi - (dec[10] * s_lo + dec[11] * s_hi)


@triton.jit
def _gf_q4_k_flat(row, c, rmask):
    """Q4_K chunk in the flat form, transposed ([32 words, R rows], as IQ1_S's): the qs words [32, R]. The word
    pointers are built from byte offsets (4w), which the compiler cannot prove contiguous in words: every load of
    the chunk gets one layout (threads along the words of a row: a warp reads a row's 128 qs bytes in one go), and
    nothing in the loop changes layout. The header is read in `_gd_q4_k_flat`: its sector comes in with the qs
    (or the block before), and holding it across the loop would cost 4 registers a row for 16 bytes."""
    blk = tl.trans(row) + c * 144                                   # [1, R] byte pointers
    w = tl.arange(0, 32)[:, None]                                   # [32, 1]
    return (tl.load((blk + 16 + 4 * w).to(tl.pointer_type(tl.int32)), mask=tl.trans(rmask), other=0),)  # [32, R]


@triton.jit
def _byte_of(word, i):
    """Byte i (0..3, a tensor) of int32 words, as int32 0..255."""
    return (word >> (8 * i)) & 0xFF


@triton.jit
def _gd_q4_k_flat(raw, row, c, rmask, PTX: tl.constexpr):
    """Q4_K chunk, flat: the 8 code tensors of `nibbles` ([32, R]: word w holds values 64j + 4(w % 8) + b of
    sub-block 2j (low nibbles) and 2j + 1 (high), j = w // 8) and, per word, the multipliers and offsets of its two
    sub-blocks, [32, R] each (d * scale, dmin * min; the 6-bit fields unpacked as `_q4k_scale_min` does). The
    header words (d | dmin, a[4], b[4], c[4]) are read here, [32, R]: every thread of a row the same 16 bytes."""
    qs = raw[0]
    mt = tl.trans(rmask)                                            # [1, R]
    hdr = (tl.trans(row) + c * 144 + 0 * tl.arange(0, 32)[:, None]).to(tl.pointer_type(tl.int32))  # [32, R]
    dw = tl.load(hdr, mask=mt, other=0)
    aw = tl.load(hdr + 1, mask=mt, other=0)
    bw = tl.load(hdr + 2, mask=mt, other=0)
    cw = tl.load(hdr + 3, mask=mt, other=0)
    j = tl.arange(0, 32)[:, None] // 8                              # [32, 1]
    i_lo = (2 * j) % 4                                              # sub-block 2j's byte in a[], b[], c[]
    i_hi = (2 * j + 1) % 4
    low = j < 2                                                     # sub-blocks 0..3 keep 6 bits in a[], b[]
    a_lo, b_lo, c_lo = _byte_of(aw, i_lo), _byte_of(bw, i_lo), _byte_of(cw, i_lo)
    a_hi, b_hi, c_hi = _byte_of(aw, i_hi), _byte_of(bw, i_hi), _byte_of(cw, i_hi)
    sc_lo = tl.where(low, a_lo & 63, (c_lo & 15) | ((a_lo >> 6) << 4))
    mn_lo = tl.where(low, b_lo & 63, (c_lo >> 4) | ((b_lo >> 6) << 4))
    sc_hi = tl.where(low, a_hi & 63, (c_hi & 15) | ((a_hi >> 6) << 4))
    mn_hi = tl.where(low, b_hi & 63, (c_hi >> 4) | ((b_hi >> 6) << 4))
    d = (dw & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)   # little-endian: d first
    dmin = ((dw >> 16) & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    q0, q1, q2, q3, q4, q5, q6, q7 = nibbles(qs, PTX)
    return (q0, q1, q2, q3, q4, q5, q6, q7, d * _u2f(sc_lo, 0), d * _u2f(sc_hi, 0), dmin * _u2f(mn_lo, 0),
            dmin * _u2f(mn_hi, 0))


@triton.jit
def _gx_q4_k_flat(dec, xc, ok):
    """Contribution [R, 32] of one flat Q4_K chunk: per word, its 8 codes times their activations, scaled per
    sub-block, minus the offsets times the activations' sums; computed [32, R] in the codes' layout (the
    activations loaded 1-D, [32], and broadcast along the rows) and transposed at the end (a relabelling)."""
    w = tl.arange(0, 32)
    xp = xc + 64 * (w // 8) + 4 * (w % 8)                           # [32] pointers to byte 0's activation
    m = ok & (w >= 0)
    x0 = tl.load(xp, mask=m, other=0.0).to(tl.float32)[:, None]     # [32, 1]
    x1 = tl.load(xp + 1, mask=m, other=0.0).to(tl.float32)[:, None]
    x2 = tl.load(xp + 2, mask=m, other=0.0).to(tl.float32)[:, None]
    x3 = tl.load(xp + 3, mask=m, other=0.0).to(tl.float32)[:, None]
    x4 = tl.load(xp + 32, mask=m, other=0.0).to(tl.float32)[:, None]
    x5 = tl.load(xp + 33, mask=m, other=0.0).to(tl.float32)[:, None]
    x6 = tl.load(xp + 34, mask=m, other=0.0).to(tl.float32)[:, None]
    x7 = tl.load(xp + 35, mask=m, other=0.0).to(tl.float32)[:, None]
    dot_lo = dec[0] * x0 + dec[1] * x1 + dec[2] * x2 + dec[3] * x3
    dot_hi = dec[4] * x4 + dec[5] * x5 + dec[6] * x6 + dec[7] * x7
    return tl.trans(dec[8] * dot_lo + dec[9] * dot_hi - (dec[10] * (x0 + x1 + x2 + x3) + dec[11] * (x4 + x5 + x6 + x7)))


@triton.jit
def _scale_groups(v, a, G: tl.constexpr):
    """v [R, W] times a [R, G], a[:, g] applying to the g-th run of W // G consecutive columns."""
    R: tl.constexpr = v.shape[0]
    W: tl.constexpr = v.shape[1]
    return (v.reshape(R, G, W // G) * a[:, :, None]).reshape(R, W)


@triton.jit
def _gf_q6_k(row, c, rmask):
    """Q6_K chunk's ql bytes [R, 128] and, for each, its qh byte qh[32h + l] (h = p // 64, l = p % 32)."""
    blk = row + c * 210                                             # [R, 1]
    p = tl.arange(0, 128)[None, :]
    return (tl.load(blk + p, mask=rmask, other=0), tl.load(blk + 128 + 32 * (p // 64) + p % 32, mask=rmask, other=0))


@triton.jit
def _gd_q6_k(raw, row, c, rmask):
    """Q6_K chunk (rows are only 2-byte aligned, so the codes are read a byte per thread along the row and
    accumulated elementwise; the sub-block sums are left to the end). For ql byte p (h = p // 64,
    r = (p // 32) % 2, l = p % 32) the low nibble is value 128h + 32r + l, the high nibble value + 64;
    the top 2 bits come from qh[32h + l]. Returns the scaled codes a * q, [R, 128] for each nibble."""
    blk = row + c * 210                                             # [R, 1]
    p = tl.arange(0, 128)[None, :]
    r = (p // 32) % 2
    ql = raw[0].to(tl.int32)                                        # [R, 128]
    qh = raw[1].to(tl.int32)
    code_lo = (ql & 15) | (((qh >> (2 * r)) & 3) << 4)
    code_hi = (ql >> 4) | (((qh >> (2 * r + 4)) & 3) << 4)
    return _q6k_scaled(code_lo, code_hi, blk, rmask)


@triton.jit
def _q6k_scaled(code_lo, code_hi, blk, rmask):
    """The GEMV form of a Q6_K chunk at blk ([R, 1]) from its codes [R, 128] (column p: ql byte p's low and
    high nibble with their qh bits): a * (code - 32) per nibble; both fetch paths end here."""
    g = tl.arange(0, 8)[None, :]                                    # 16-value group of p: sub-block g + 4 (g // 4)
    sc = (blk + 192).to(tl.pointer_type(tl.int8))
    d = _f16_at_masked(blk + 208, rmask)                            # [R, 1]
    a_lo = d * tl.load(sc + g + 4 * (g // 4), mask=rmask, other=0).to(tl.float32)  # [R, 8]
    a_hi = d * tl.load(sc + g + 4 * (g // 4) + 4, mask=rmask, other=0).to(tl.float32)
    return (_scale_groups(_u2f(code_lo, 32), a_lo, 8), _scale_groups(_u2f(code_hi, 32), a_hi, 8))


@triton.jit
def _gx_q6_k(dec, xc, ok):
    p = tl.arange(0, 128)
    xo = 128 * (p // 64) + p % 64
    x_lo = tl.load(xc + xo, mask=ok, other=0.0).to(tl.float32)      # [128]
    x_hi = tl.load(xc + 64 + xo, mask=ok, other=0.0).to(tl.float32)
    return dec[0] * x_lo[None, :] + dec[1] * x_hi[None, :]          # [R, 128]


@triton.jit
def _gf_q6_k_wide(row, c, rmask):
    """Q6_K chunk's ql as 64 int16 words [R, 64] and qh as 32 int16 words [R, 32] (little-endian byte pairs).

    A chunk starts at an even byte (210c) of an even-length row, so 2-byte words are the widest load whose
    alignment holds for every chunk (210 = 2 mod 4: every other chunk is only 2-byte aligned)."""
    blk = (row + c * 210).to(tl.pointer_type(tl.int16))             # [R, 1] word pointers
    return (tl.load(blk + tl.arange(0, 64)[None, :], mask=rmask, other=0),
            tl.load(blk + 64 + tl.arange(0, 32)[None, :], mask=rmask, other=0))


@triton.jit
def _q6k_codes_of_byte(wl, wh, r, b: tl.constexpr):
    """The two 6-bit codes (low nibble, high nibble) of byte b (0, 1) of ql words wl [R, 2, 2, 16], each
    with its top 2 bits from byte b of the qh words wh [R, 2, 1, 16] (bits 2r, 2r+1 and 2r+4, 2r+5).
    The words are sign-extended int16: every mask below keeps bits 0..15 only, so the sign is harmless."""
    lo = ((wl >> (8 * b)) & 15) | (((wh >> (8 * b + 2 * r)) & 3) << 4)
    hi = ((wl >> (8 * b + 4)) & 15) | (((wh >> (8 * b + 2 * r + 4)) & 3) << 4)
    return lo, hi


@triton.jit
def _gd_q6_k_wide(raw, row, c, rmask):
    """Q6_K chunk from 16-bit words: the byte path's scaled codes, bit for bit, [R, 128] per nibble.

    ql word w holds ql bytes p = 2w, 2w + 1; with w = 32h + 16r + j (h, r in {0, 1}, j < 16) both bytes take
    their top bits from qh bytes 32h + 2j + b, i.e. byte b of qh word 16h + j: so ql is viewed [R, 2, 2, 16]
    and qh [R, 2, 1, 16] broadcast over r (no repeated load). The codes of bytes 0 and 1 are interleaved back
    (join) to column p = 64h + 32r + 2j + b, the byte path's order, and then scaled by the same operations."""
    R: tl.constexpr = raw[0].shape[0]
    blk = row + c * 210                                             # [R, 1]
    wl = raw[0].to(tl.int32).reshape(R, 2, 2, 16)                   # [R, h, r, j]
    wh = raw[1].to(tl.int32).reshape(R, 2, 1, 16)                   # [R, h, 1, j]
    r = tl.arange(0, 2)[None, None, :, None]                        # [1, 1, 2, 1]
    lo0, hi0 = _q6k_codes_of_byte(wl, wh, r, 0)                     # [R, 2, 2, 16] each
    lo1, hi1 = _q6k_codes_of_byte(wl, wh, r, 1)
    code_lo = tl.join(lo0, lo1).reshape(R, 128)                     # [R, 2, 2, 16, 2] -> [R, 128], column p
    code_hi = tl.join(hi0, hi1).reshape(R, 128)
    return _q6k_scaled(code_lo, code_hi, blk, rmask)


@triton.jit
def _gf_iq1_s(row, c, rmask):
    """IQ1_S chunk's qs bytes and each group's qh word, transposed to [32 groups, R]."""
    blk = tl.trans(row) + c * 50                                    # [1, R]
    mt = tl.trans(rmask)
    p = tl.arange(0, 32)[:, None]                                   # [32, 1]
    return (tl.load(blk + 2 + p, mask=mt, other=0), tl.load((blk + 34).to(tl.pointer_type(tl.uint16)) + p // 4,
                                                             mask=mt, other=0))


@triton.jit
def _gd_iq1_s(raw, row, c, rmask, grid):
    """IQ1_S chunk, transposed ([groups, rows]: threads run along the 32 groups, rows repeat inside a
    thread, so one activation load serves several rows). Group p = 4s + g (values 8p .. 8p+7) decodes
    through grid entry qs[p] | ((qh[s] >> 3g) & 7) << 8; `grid` holds each entry as 4 int32 words of
    bfloat16 pairs. Returns the words [32, R, 4] and the sub-block multiplier a and offset b, [32, R]."""
    blk = tl.trans(row) + c * 50                                    # [1, R]
    mt = tl.trans(rmask)
    p = tl.arange(0, 32)[:, None]                                   # [32, 1]
    qs = raw[0].to(tl.int32)                                        # [32, R]
    qh = raw[1].to(tl.int32)
    entry = qs | (((qh >> (3 * (p % 4))) & 7) << 8)
    gw = tl.load(grid + entry[:, :, None] * 4 + tl.arange(0, 4)[None, None, :])  # [32, R, 4]
    a = _f16_at_masked(blk, mt) * _u2f(2 * ((qh >> 12) & 7) + 1, 0)  # [32, R]
    b = tl.where((qh & 0x8000) != 0, -0.125, 0.125) * a
    return gw, a, b


@triton.jit
def _bf16_pair(w):
    """(even, odd) float32 values of int32 words holding two bfloat16s (low half = even)."""
    return (w << 16).to(tl.float32, bitcast=True), (w & -65536).to(tl.float32, bitcast=True)


@triton.jit
def _gx_iq1_s(dec, xc, ok):
    gw, a, b = dec[0], dec[1], dec[2]
    e = 8 * tl.arange(0, 32)[:, None] + 2 * tl.arange(0, 4)[None, :]  # [32, 4] value of each even half
    x_even = tl.load(xc + e, mask=ok, other=0.0).to(tl.float32)
    x_odd = tl.load(xc + e + 1, mask=ok, other=0.0).to(tl.float32)
    g_even, g_odd = _bf16_pair(gw)
    dg = tl.sum(g_even * x_even[:, None, :] + g_odd * x_odd[:, None, :], axis=2)  # [32, R]
    xg = tl.sum(x_even + x_odd, axis=1)[:, None]                    # [32, 1] sum of each group's x
    return tl.trans(a * dg + b * xg)                                # [R, 32]


@triton.jit
def _gf_q8_0(row, c, rmask, K):
    """Q8_0 chunk's codes [R, 256] (blocks 8c .. 8c+7; value k: block k // 32, code k % 32)."""
    k = tl.arange(0, 256)[None, :]
    return (tl.load(row + c * 272 + 34 * (k // 32) + 2 + k % 32, mask=rmask & (c * 256 + k < K), other=128),)


@triton.jit
def _gd_q8_0(raw, row, c, rmask, K):
    """Q8_0 chunk (2-byte aligned blocks: elementwise): the scaled codes d * q, [R, 256]."""
    blk0 = row + c * 272                                            # 8 blocks of 34 bytes
    code = raw[0].to(tl.int32)
    s = tl.arange(0, 8)[None, :]
    d = _f16_at_masked(blk0 + 34 * s, rmask & (c * 256 + 32 * s < K))  # [R, 8]
    return (_scale_groups(_u2f(code ^ 0x80, 128), d, 8),)


@triton.jit
def _gf_float(row, c, rmask, K):
    k = tl.arange(0, 256)[None, :]
    return (tl.load(row + c * 256 + k, mask=rmask & (c * 256 + k < K), other=0.0),)


@triton.jit
def _gx_values(w, xc, ok, K, c):
    """Elementwise contribution [R, 256] of decoded values w (F32/F16/BF16, Q8_0's d * q)."""
    k = tl.arange(0, 256)
    x = tl.load(xc + k, mask=ok & (c * 256 + k < K), other=0.0).to(tl.float32)  # [256]
    return w * x[None, :]


@triton.jit
def gemv_fetch(QTYPE: tl.constexpr, row, c, rmask, K):
    """The bulk loads of chunk c of the rows `row` ([R, 1] pointers; rmask [R, 1]), as a tuple: issued one
    chunk ahead of `gemv_decode`, so their latency hides behind the previous chunk's arithmetic."""
    if QTYPE == Q4_K:
        return _gf_q4_k(row, c, rmask)
    elif QTYPE == Q4_K_FLAT:
        return _gf_q4_k_flat(row, c, rmask)
    elif QTYPE == Q6_K:
        return _gf_q6_k(row, c, rmask)
    elif QTYPE == Q6_K_WIDE:
        return _gf_q6_k_wide(row, c, rmask)
    elif QTYPE == IQ1_S:
        return _gf_iq1_s(row, c, rmask)
    elif QTYPE == Q8_0:
        return _gf_q8_0(row, c, rmask, K)
    else:
        return _gf_float(row, c, rmask, K)


@triton.jit
def gemv_decode(QTYPE: tl.constexpr, raw, row, c, rmask, K, grid, PTX: tl.constexpr):
    """Decode chunk c (its fetched tuple `raw`) into the GEMV form (a tuple). The small loads left here
    (scales) hit the sectors the fetch brought in. PTX: inline PTX allowed (False in the interpreter)."""
    if QTYPE == Q4_K:
        return _gd_q4_k(raw, row, c, rmask, PTX)
    elif QTYPE == Q4_K_FLAT:
        return _gd_q4_k_flat(raw, row, c, rmask, PTX)
    elif QTYPE == Q6_K:
        return _gd_q6_k(raw, row, c, rmask)
    elif QTYPE == Q6_K_WIDE:
        return _gd_q6_k_wide(raw, row, c, rmask)
    elif QTYPE == IQ1_S:
        return _gd_iq1_s(raw, row, c, rmask, grid)
    elif QTYPE == Q8_0:
        return _gd_q8_0(raw, row, c, rmask, K)
    else:
        return (raw[0].to(tl.float32),)


@triton.jit
def gemv_dot(QTYPE: tl.constexpr, dec, xc, ok, K, c):
    """Contribution [R, gemv_cols(QTYPE)] of a decoded chunk for the activations at xc (chunk start)."""
    if QTYPE == Q4_K:
        return _gx_q4_k(dec, xc, ok)
    elif QTYPE == Q4_K_FLAT:
        return _gx_q4_k_flat(dec, xc, ok)
    elif QTYPE == Q6_K or QTYPE == Q6_K_WIDE:                       # one dot: the same sums, in the same order
        return _gx_q6_k(dec, xc, ok)
    elif QTYPE == IQ1_S:
        return _gx_iq1_s(dec, xc, ok)
    else:
        return _gx_values(dec[0], xc, ok, K, c)


#: columns of one chunk's GEMV contribution per type (Q4_K: its sub-block pairs; the others elementwise)
_GEMV_COLS = {12: 4, 14: 128, int(Q6_K_WIDE.value): 128, 19: 32, int(Q4_K_FLAT.value): 32}


def gemv_cols(qtype: int) -> int:
    """Columns of the GEMV accumulator [TP, R, cols] for a type."""
    return _GEMV_COLS.get(int(qtype), 256)


@triton.jit
def _fetch_at(QTYPE: tl.constexpr, row, c, n_chunks, rmask, K):
    """`gemv_fetch` of chunk c, masked off (no memory traffic) past the last chunk n_chunks - 1."""
    return gemv_fetch(QTYPE, row, c, rmask & (c < n_chunks), K)


@triton.jit
def gemv_rows(QTYPE: tl.constexpr, row, rmask, xrow, K, grid, SA: tl.constexpr, PTX: tl.constexpr,
              DEPTH: tl.constexpr):
    """[R] float32: the rows `row` ([R, 1] pointers, rmask [R, 1]) dotted with one activation row at xrow
    (K values), chunk by chunk with the bulk loads of the next DEPTH chunks (1, 2 or 3) in flight. DEPTH changes
    when loads are issued, never the arithmetic: every DEPTH gives the same bits."""
    R: tl.constexpr = row.shape[0]
    n_chunks = tl.cdiv(K, 256)
    acc = tl.zeros([R, SA], tl.float32)
    f1 = _fetch_at(QTYPE, row, 0, n_chunks, rmask, K)
    if DEPTH > 1:
        f2 = _fetch_at(QTYPE, row, 1, n_chunks, rmask, K)
    if DEPTH > 2:
        f3 = _fetch_at(QTYPE, row, 2, n_chunks, rmask, K)
    for c in range(0, n_chunks):
        raw = f1
        if DEPTH == 1:
            f1 = _fetch_at(QTYPE, row, c + 1, n_chunks, rmask, K)
        elif DEPTH == 2:
            f1 = f2
            f2 = _fetch_at(QTYPE, row, c + 2, n_chunks, rmask, K)
        else:
            f1 = f2
            f2 = f3
            f3 = _fetch_at(QTYPE, row, c + 3, n_chunks, rmask, K)
        dec = gemv_decode(QTYPE, raw, row, c, rmask, K, grid, PTX)
        acc += gemv_dot(QTYPE, dec, xrow + c * 256, True, K, c)
    return tl.sum(acc, axis=1)


@triton.jit
def gemv_rows_pair(QTYPE: tl.constexpr, row_a, row_b, rmask, xrow, K, grid, SA: tl.constexpr, PTX: tl.constexpr,
                   DEPTH: tl.constexpr):
    """`gemv_rows` of two weights of one type and shape (a SwiGLU's gate and up rows) against the same activation
    row, in one loop: both weights' chunks stream together, DEPTH chunks ahead, so the two dot products wait on
    one chain of memory round trips instead of two in a row. Each accumulator sees the operations `gemv_rows`
    gives it, in the same order: (gemv_rows(row_a), gemv_rows(row_b)) bit for bit."""
    R: tl.constexpr = row_a.shape[0]
    n_chunks = tl.cdiv(K, 256)
    acc_a = tl.zeros([R, SA], tl.float32)
    acc_b = tl.zeros([R, SA], tl.float32)
    a1 = _fetch_at(QTYPE, row_a, 0, n_chunks, rmask, K)
    b1 = _fetch_at(QTYPE, row_b, 0, n_chunks, rmask, K)
    if DEPTH > 1:
        a2 = _fetch_at(QTYPE, row_a, 1, n_chunks, rmask, K)
        b2 = _fetch_at(QTYPE, row_b, 1, n_chunks, rmask, K)
    if DEPTH > 2:
        a3 = _fetch_at(QTYPE, row_a, 2, n_chunks, rmask, K)
        b3 = _fetch_at(QTYPE, row_b, 2, n_chunks, rmask, K)
    for c in range(0, n_chunks):
        raw_a = a1
        raw_b = b1
        if DEPTH == 1:
            a1 = _fetch_at(QTYPE, row_a, c + 1, n_chunks, rmask, K)
            b1 = _fetch_at(QTYPE, row_b, c + 1, n_chunks, rmask, K)
        elif DEPTH == 2:
            a1 = a2
            b1 = b2
            a2 = _fetch_at(QTYPE, row_a, c + 2, n_chunks, rmask, K)
            b2 = _fetch_at(QTYPE, row_b, c + 2, n_chunks, rmask, K)
        else:
            a1 = a2
            b1 = b2
            a2 = a3
            b2 = b3
            a3 = _fetch_at(QTYPE, row_a, c + 3, n_chunks, rmask, K)
            b3 = _fetch_at(QTYPE, row_b, c + 3, n_chunks, rmask, K)
        xc = xrow + c * 256
        acc_a += gemv_dot(QTYPE, gemv_decode(QTYPE, raw_a, row_a, c, rmask, K, grid, PTX), xc, True, K, c)
        acc_b += gemv_dot(QTYPE, gemv_decode(QTYPE, raw_b, row_b, c, rmask, K, grid, PTX), xc, True, K, c)
    return tl.sum(acc_a, axis=1), tl.sum(acc_b, axis=1)
