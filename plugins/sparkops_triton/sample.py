"""sample in Triton: greedy, or temperature / top-k / top-p + Gumbel-max with the shared counter RNG.

The noise is `sparkops.sampling_rng` bit for bit: the lowbias32 hash chain in uint32 arithmetic
(multiplications taken modulo 2^32 through 64-bit products), u = ((h >> 8) + 0.5) / 2^24, and
z - log(-log(u)) in float64 like the reference, with z = float64(logit) / temperature (IEEE
division, so the same value). temperature and top_p travel as the two 32-bit halves of their float64
bits (a Python float kernel argument would be rounded to float32), as signed 32-bit ints that are not
specialized, so every temperature shares one compiled kernel. `step` is read from device memory.

Paths (chosen on the host from the scalar arguments, never from data):
  greedy / no filter: per chunk of the vocabulary the best (value, id), then a per-row combine.
  filtered: every token gets a 64-bit rank key (order-preserving bits of its logit, then the
    complement of its id, so ties go to the lower id, as the reference's stable sort). Each chunk
    sorts its keys and keeps its best KC; the row's candidates are sorted again, which gives the
    exact top-KC of the row. top-k (k <= KC) and top-p inside it are then exact. With top-k off
    and top-p on, the top-KC candidates suffice when their mass reaches top_p (the kept prefix ends
    inside them); otherwise, and for k > KC_MAX, `_exact_kernel` finds the cut points by binary
    search over the rank keys with passes over the whole row (slow, exact).
Sums of probabilities are taken in a different order than NumPy's cumsum, so a mass landing within
~1e-16 of top_p may be cut on the other side; nothing else differs from the reference.
"""

import struct

import torch
import triton
import triton.language as tl

from sparkops.errors import BadInput

from ._runtime import cdiv, expect, expect_device, expect_dtype, next_pow2

KC_MAX = 64  # candidates per chunk of the fast filtered path (top_k up to this)
CANDIDATES = 4096  # candidates sorted per row in the combine step
CHUNK_PLAIN = 8192  # vocabulary entries per program of the greedy / unfiltered scan

#: scalar arguments whose values must not select a compiled variant (each variant costs seconds to compile)
NO_SPECIALIZE = ["t_hi", "t_lo", "p_hi", "p_lo", "seed_mix", "top_k"]

_M1 = 0x7FEB352D
_M2 = 0x846CA68B


def _mix32_host(x: int) -> int:
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * _M1) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * _M2) & 0xFFFFFFFF
    x ^= x >> 16
    return x


def _i32(bits: int) -> int:
    """A 32-bit pattern as the signed int with the same bits (kernel arguments stay int32 whatever the value)."""
    bits &= 0xFFFFFFFF
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def _halves(value: float) -> tuple[int, int]:
    """The float64 bits of value as (high, low) 32-bit halves, each as a signed 32-bit int."""
    bits = struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    return _i32(bits >> 32), _i32(bits)


@triton.jit
def _f64(hi, lo):
    """Reassemble a float64 from its two 32-bit halves (passed as int32 kernel arguments)."""
    return ((hi.to(tl.uint32).to(tl.uint64) << 32) | lo.to(tl.uint32).to(tl.uint64)).to(tl.float64, bitcast=True)


@triton.jit
def _ones32():
    return (tl.full((), 65535, tl.uint32) << 16) | 65535


@triton.jit
def _mix32(x):
    """lowbias32 on uint32; products modulo 2^32 via 64-bit arithmetic."""
    x = x ^ (x >> 16)
    x = ((x.to(tl.uint64) * 0x7FEB352D) & 0xFFFFFFFF).to(tl.uint32)
    x = x ^ (x >> 15)
    x = ((x.to(tl.uint64) * 0x846CA68B) & 0xFFFFFFFF).to(tl.uint32)
    x = x ^ (x >> 16)
    return x


@triton.jit
def _row_hash(seed_mix, step_ptr, row):
    """mix32(row + mix32(step + mix32(seed))) as uint32 (seed_mix = mix32(seed), computed on the host)."""
    step = (tl.load(step_ptr) & 0xFFFFFFFF).to(tl.uint32)
    s = _mix32(step + seed_mix.to(tl.uint32))
    return _mix32(row.to(tl.uint32) + s)


@triton.jit
def _noisy(z, ids, row_mix):
    """z - log(-log(u)) with u = ((mix32(id + row_mix) >> 8) + 0.5) / 2^24, float64."""
    h = _mix32(ids.to(tl.uint32) + row_mix)
    u = ((h >> 8).to(tl.float64) + 0.5) / 16777216.0
    return z - tl.log(-tl.log(u))


@triton.jit
def _rank_key(x, ids):
    """uint64 whose order is (logit descending = key descending, then lower id first)."""
    x = x + 0.0  # -0.0 -> +0.0: equal logits must tie
    bits = x.to(tl.uint32, bitcast=True)
    sign = tl.full((), 1, tl.uint32) << 31
    key = tl.where((bits >> 31) == 1, bits ^ _ones32(), bits | sign)
    return (key.to(tl.uint64) << 32) | (ids.to(tl.uint32) ^ _ones32()).to(tl.uint64)


@triton.jit
def _id_of(packed):
    return (packed.to(tl.uint32) ^ _ones32()).to(tl.int32)


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _scan_kernel(logit_ptr, step_ptr, best_ptr, best_id_ptr, V, n_chunks, t_hi, t_lo, seed_mix,
                 NOISE: tl.constexpr, CH: tl.constexpr):
    """Best (value, id) of one chunk: of the logits (greedy) or of z + Gumbel noise (all ids kept)."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    ids = c * CH + tl.arange(0, CH)
    ok = ids < V
    x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=ok, other=float("-inf"))
    if NOISE:
        z = x.to(tl.float64) / _f64(t_hi, t_lo)
        val = tl.where(ok, _noisy(z, ids, _row_hash(seed_mix, step_ptr, row)), float("-inf"))
    else:
        val = x.to(tl.float64)
    best = tl.max(val, axis=0)
    best_id = tl.min(tl.where(val == best, ids, V), axis=0)  # ties: the lower id
    tl.store(best_ptr + row * n_chunks + c, best)
    tl.store(best_id_ptr + row * n_chunks + c, best_id)


@triton.jit
def _pick_kernel(best_ptr, best_id_ptr, out_ptr, n_chunks, NCP: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, NCP)
    ok = c < n_chunks
    val = tl.load(best_ptr + row * n_chunks + c, mask=ok, other=float("-inf"))
    ids = tl.load(best_id_ptr + row * n_chunks + c, mask=ok, other=2147483647)
    best = tl.max(val, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(val == best, ids, 2147483647), axis=0).to(tl.int64))


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _candidates_kernel(logit_ptr, cand_ptr, cmax_ptr, csum_ptr, V, n_chunks, t_hi, t_lo, CH: tl.constexpr,
                       KC: tl.constexpr):
    """Per chunk: its KC best rank keys (sorted), max z and sum exp(z - max) (for the row's softmax)."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    ids = c * CH + tl.arange(0, CH)
    ok = ids < V
    x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=ok, other=float("-inf"))
    z = x.to(tl.float64) / _f64(t_hi, t_lo)
    zmax = tl.max(z, axis=0)
    tl.store(cmax_ptr + row * n_chunks + c, zmax)
    tl.store(csum_ptr + row * n_chunks + c, tl.sum(tl.where(ok, tl.exp(z - zmax), 0.0), axis=0))
    packed = tl.where(ok, _rank_key(x, ids), 0)  # 0 ranks below every real token
    ranked = tl.sort(packed, descending=True)
    pos = tl.arange(0, CH)
    tl.store(cand_ptr + (row * n_chunks + c).to(tl.int64) * KC + pos, ranked, mask=pos < KC)


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _filtered_kernel(logit_ptr, step_ptr, cand_ptr, cmax_ptr, csum_ptr, out_ptr, need_ptr, V, n_chunks, top_k,
                     t_hi, t_lo, p_hi, p_lo, seed_mix, KC: tl.constexpr, NC: tl.constexpr, NCP: tl.constexpr,
                     P_OFF: tl.constexpr):
    """The row's exact top-KC from the chunks' candidates; top-k, top-p, noise, argmax. Flags the rows
    whose top-p prefix does not end inside the top-KC (then `_exact_kernel` decides them)."""
    row = tl.program_id(0)
    temperature = _f64(t_hi, t_lo)
    top_p = _f64(p_hi, p_lo)
    pos = tl.arange(0, NC)
    packed = tl.load(cand_ptr + row.to(tl.int64) * n_chunks * KC + pos, mask=pos < n_chunks * KC, other=0)
    ranked = tl.sort(packed, descending=True)  # ranks 0..KC-1 are the row's exact top-KC
    ids = _id_of(ranked)
    real = (ranked != 0) & (pos < KC)
    x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=real, other=float("-inf"))
    z = x.to(tl.float64) / temperature
    z_top = tl.max(z, axis=0)  # the row's largest z (rank 0)
    if top_k > 0:  # survivors: ranks < k; softmax over them
        alive = real & (pos < top_k)
        p = tl.where(alive, tl.exp(z - z_top), 0.0)
        p = p / tl.sum(p, axis=0)
        reached = tl.sum(p, axis=0) >= 0.0  # always: k <= KC ranks are exact
    else:  # every token survives top-k: softmax over the whole row, from the chunks' partial sums
        cc = tl.arange(0, NCP)
        cmax = tl.load(cmax_ptr + row * n_chunks + cc, mask=cc < n_chunks, other=float("-inf"))
        csum = tl.load(csum_ptr + row * n_chunks + cc, mask=cc < n_chunks, other=0.0)
        total = tl.sum(csum * tl.exp(cmax - z_top), axis=0)
        alive = real
        p = tl.where(alive, tl.exp(z - z_top), 0.0) / total
        reached = tl.sum(p, axis=0) >= top_p  # the kept prefix ends inside the exact top-KC
    before = tl.cumsum(p, axis=0) - p  # mass of the strictly better-ranked survivors
    if P_OFF:
        keep = alive
    else:
        keep = alive & (before < top_p)
    noisy = tl.where(keep, _noisy(z, ids, _row_hash(seed_mix, step_ptr, row)), float("-inf"))
    best = tl.max(noisy, axis=0)
    token = tl.min(tl.where(noisy == best, ids, 2147483647), axis=0)
    tl.store(out_ptr + row, token.to(tl.int64))
    tl.store(need_ptr + row, tl.where(reached, 0, 1).to(tl.int32))


@triton.jit
def _mass_above(logit_ptr, row, V, temperature, z_top, norm, cut_k, cut, BLOCK: tl.constexpr):
    """sum of exp(z - z_top) / norm over tokens with rank key > cut (and >= cut_k)."""
    acc = tl.zeros((BLOCK,), dtype=tl.float64)
    for i0 in range(0, V, BLOCK):
        ids = i0 + tl.arange(0, BLOCK)
        ok = ids < V
        x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=ok, other=float("-inf"))
        key = _rank_key(x, ids)
        sel = ok & (key > cut) & (key >= cut_k)
        acc += tl.where(sel, tl.exp(x.to(tl.float64) / temperature - z_top), 0.0)
    return tl.sum(acc, axis=0) / norm


@triton.jit
def _count_above(logit_ptr, row, V, cut, BLOCK: tl.constexpr):
    n = tl.zeros((BLOCK,), dtype=tl.int32)
    for i0 in range(0, V, BLOCK):
        ids = i0 + tl.arange(0, BLOCK)
        ok = ids < V
        x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=ok, other=float("-inf"))
        n += (ok & (_rank_key(x, ids) > cut)).to(tl.int32)
    return tl.sum(n, axis=0)


@triton.jit(do_not_specialize=NO_SPECIALIZE)
def _exact_kernel(logit_ptr, step_ptr, out_ptr, need_ptr, V, top_k, t_hi, t_lo, p_hi, p_lo, seed_mix,
                  FORCE: tl.constexpr, BLOCK: tl.constexpr):
    """Binary search over rank keys with passes over the row: the smallest key whose count (top-k) or
    mass (top-p) of better-ranked tokens stays under the limit; then the noisy argmax over the kept."""
    row = tl.program_id(0)
    if FORCE or tl.load(need_ptr + row) != 0:
        temperature = _f64(t_hi, t_lo)
        top_p = _f64(p_hi, p_lo)
        zero = tl.full((), 0, tl.uint64)
        top = (_ones32().to(tl.uint64) << 32) | _ones32().to(tl.uint64)  # the largest uint64
        # the row's largest z (every filter keeps rank 0)
        zm = tl.full((BLOCK,), float("-inf"), dtype=tl.float64)
        for i0 in range(0, V, BLOCK):
            ids = i0 + tl.arange(0, BLOCK)
            x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=ids < V, other=float("-inf"))
            zm = tl.maximum(zm, x.to(tl.float64) / temperature)
        z_top = tl.max(zm, axis=0)
        cut_k = zero
        if top_k > 0:  # smallest key with fewer than k better-ranked tokens
            lo = zero
            hi = top
            for _ in range(64):
                mid = lo + ((hi - lo) >> 1)
                below = _count_above(logit_ptr, row, V, mid, BLOCK) < top_k
                hi = tl.where(below, mid, hi)
                lo = tl.where(below, lo, mid + 1)
            cut_k = lo
        cut_p = zero
        if top_p < 1.0:  # smallest key with less than top_p of the survivors' mass ranked above it
            norm = _mass_above(logit_ptr, row, V, temperature, z_top, 1.0, cut_k, zero, BLOCK)
            lo = zero
            hi = top
            for _ in range(64):
                mid = lo + ((hi - lo) >> 1)
                below = _mass_above(logit_ptr, row, V, temperature, z_top, norm, cut_k, mid, BLOCK) < top_p
                hi = tl.where(below, mid, hi)
                lo = tl.where(below, lo, mid + 1)
            cut_p = lo
        cut = tl.maximum(cut_k, cut_p)
        row_mix = _row_hash(seed_mix, step_ptr, row)
        best = tl.full((BLOCK,), float("-inf"), dtype=tl.float64)
        best_id = tl.full((BLOCK,), 2147483647, dtype=tl.int32)
        for i0 in range(0, V, BLOCK):
            ids = i0 + tl.arange(0, BLOCK)
            ok = ids < V
            x = tl.load(logit_ptr + row.to(tl.int64) * V + ids, mask=ok, other=float("-inf"))
            keep = ok & (_rank_key(x, ids) >= cut)
            noisy = tl.where(keep, _noisy(x.to(tl.float64) / temperature, ids, row_mix), float("-inf"))
            better = noisy > best  # strictly: an earlier (lower) id wins a tie
            best_id = tl.where(better, ids, best_id)
            best = tl.where(better, noisy, best)
        top_val = tl.max(best, axis=0)
        tl.store(out_ptr + row, tl.min(tl.where(best == top_val, best_id, 2147483647), axis=0).to(tl.int64))


def sample(logits, temperature, top_k, top_p, seed, step):
    op = "sample"
    expect(op, "logits", logits, (None, None), "[B, V]")
    expect(op, "step", step, (1,), "a one-element step counter")
    expect_dtype(op, "logits", logits, (torch.float32, torch.float16, torch.bfloat16))
    expect_device(op, logits=logits, step=step)
    if temperature < 0 or top_k < 0 or not 0.0 < top_p <= 1.0:
        raise BadInput(f"{op}: temperature={temperature}, top_k={top_k}, top_p={top_p}; need temperature >= 0, "
                       f"top_k >= 0 (0 = off) and 0 < top_p <= 1 (1 = off)")
    b, v = logits.shape
    dev = logits.device
    out = torch.empty((b,), dtype=torch.int64, device=dev)
    if b == 0:
        return out
    if v >= 2**31 - 1:
        raise BadInput(f"{op}: a vocabulary of {v} does not fit the kernel's int32 ids; split the logits")
    logits = logits.float().contiguous() if logits.dtype != torch.float32 else logits.contiguous()
    t_hi, t_lo = _halves(temperature if temperature > 0 else 1.0)
    p_hi, p_lo = _halves(top_p)
    seed_mix = _i32(_mix32_host(int(seed)))
    top_k = int(top_k) if 0 < int(top_k) < v else 0  # k >= V keeps everything, like k = 0
    if temperature == 0 or (top_k == 0 and top_p >= 1.0):
        ch = min(CHUNK_PLAIN, next_pow2(v))
        n_chunks = cdiv(v, ch)
        best = torch.empty((b, n_chunks), dtype=torch.float64, device=dev)
        best_id = torch.empty((b, n_chunks), dtype=torch.int32, device=dev)
        _scan_kernel[(b, n_chunks)](logits, step, best, best_id, v, n_chunks, t_hi, t_lo, seed_mix,
                                    NOISE=temperature != 0, CH=ch, num_warps=8)
        _pick_kernel[(b,)](best, best_id, out, n_chunks, NCP=next_pow2(n_chunks), num_warps=1)
        return out
    need = torch.empty((b,), dtype=torch.int32, device=dev)
    if top_k <= KC_MAX:
        kc = max(16, next_pow2(top_k)) if top_k else KC_MAX
        ch = max(kc, next_pow2(cdiv(v, CANDIDATES // kc)))  # at most CANDIDATES // kc chunks
        n_chunks = cdiv(v, ch)
        cand = torch.empty((b, n_chunks, kc), dtype=torch.uint64, device=dev)
        cmax = torch.empty((b, n_chunks), dtype=torch.float64, device=dev)
        csum = torch.empty((b, n_chunks), dtype=torch.float64, device=dev)
        _candidates_kernel[(b, n_chunks)](logits, cand, cmax, csum, v, n_chunks, t_hi, t_lo, CH=ch, KC=kc,
                                          num_warps=8)
        _filtered_kernel[(b,)](logits, step, cand, cmax, csum, out, need, v, n_chunks, top_k, t_hi, t_lo, p_hi, p_lo,
                               seed_mix, KC=kc, NC=next_pow2(n_chunks * kc), NCP=next_pow2(n_chunks),
                               P_OFF=top_p >= 1.0, num_warps=8)
        force = False
    else:
        force = True
    _exact_kernel[(b,)](logits, step, out, need, v, top_k, t_hi, t_lo, p_hi, p_lo, seed_mix, FORCE=force, BLOCK=1024,
                        num_warps=8)
    return out
