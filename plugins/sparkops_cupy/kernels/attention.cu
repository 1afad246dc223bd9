// attention.cu: MLA (NoPE) decode over the latent cache, split over the context (flash-decoding).
//
// One call = four launches on one stream:
//   mla_absorb   write the new latent rows into the cache at pos (read from device memory) and form
//                each head's absorbed query qa = [w_uk[h]^T q_nope ; q_pe] * scale * log2(e);
//   mla_split_*  each block takes one slice of the context and, for its heads, keeps a running
//                softmax (max m, sum l, in base 2) and the weighted sum of latent rows acc[Lkv];
//   mla_combine  merges the slices: obar = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s;
//   mla_up       o[h] = w_uv[h] obar[h].
// The slice bounds are computed on the device from pos, so the host never reads the position and a
// captured graph replays correctly at any context length up to the cache size. Rows past pos + t are
// never read (the cache holds garbage there on purpose).
//
// mla_split_mma is the decode path for Kimi-Linear's shape (32 heads, Lkv 512, R 64, one token, bf16
// cache): all 32 heads share every cache row, so a block streams its rows through shared memory once
// (cp.async, two 64-row stages) and does both products on the tensor cores (mma.sync m16n8k16 bf16,
// fp32 accumulate): scores [32 heads x 64 rows] = qa . C^T, then acc [32 x 512] += P . C.
// mla_split_generic covers every other case (fp32 caches, other shapes, several tokens) on CUDA cores.
//
// An fp8 cache (attention=cupy_splitk_fp8_deep_active_pdl; c_dt DT_FP8_E4M3): float8_e4m3fn rows of 576 bytes, which
// the engine rounded before the call (sparkops/kvcache.py), so the absorb copies the latent's bytes as they are and
// every kernel that reads the cache decodes each value exactly (fp8_to_bf16_bits: every e4m3fn value is a bf16 value).
// mla_split_mma_fp8 (and its _pdl form, PDL as mla_split_mma_pdl) is mla_split_mma's body over it: a stage streams 64
// rows of fp8 (half the bf16 stage's bytes) by cp.async, one pass converts the stage into the one bf16 tile, and the
// same tensor-core code reads that tile; mla_split_generic_fp8 is the CUDA-core split for every other fp8 call.
//
// The _pdl kernels (attention=cupy_splitk_bf16_deep_pdl) are the deep absorb, the tensor-core split, the deep combine
// and the deep up projection written for programmatic dependent launch (common.cuh): each may start while the kernel
// before it runs, requests what no kernel writes (the absorb's w_uk, the up projection's w_uv; through __ldcg, never
// the read-only path, which ptxas may move across the wait: tests/test_cuda_pdl_order.py) before its pdl_wait,
// and lets the next kernel start (pdl_launch_dependents) just before that wait, so that the split, the combine, the
// up projection and the o_proj GEMV after it (itself a PDL kernel) each find their blocks resident when the kernel
// before ends, and the two weight reads overlap the kernel before. Everything another kernel writes (q, the latent, pos,
// the cache, qa, the partials, obar) is read after the wait, and nothing is written before it. The same arithmetic in
// the same order as the plain kernels: the same bits (PDL=false is the plain kernel, instruction for instruction).
#include "common.cuh"

#include "bulk_copy.cuh"

#define LOG2E 1.4426950408889634f

// The fp8 cache's dtype code (attention.py's DT_FP8), beside common.cuh's activation codes (DT_F32, DT_BF16, DT_F16):
// float8_e4m3fn, one byte a value. Only the cache and the latent rows take it, and only in this file.
#define DT_FP8_E4M3 3

// One float8_e4m3fn code (bits s eeee mmm: exponent bias 7, subnormals at e = 0, no infinities, 0x7f / 0xff NaN) as
// the bits of the bf16 of the same value, exactly: a normal value (1 + m/8) 2^(e-7) has bf16 exponent e + 120 and
// mantissa m << 4; a subnormal m 2^-9 (m < 8) is formed in float32, exactly (a 3-bit integer times a power of two),
// and its top half taken (its mantissa has at most 3 bits); NaN becomes bf16's quiet NaN, its sign kept.
__device__ __forceinline__ u32 fp8_to_bf16_bits(u32 b) {
    const u32 mag = b & 0x7fu, sign = (b & 0x80u) << 8;
    if (mag == 0x7fu) return sign | 0x7fc0u;
    if (mag >= 8u) return sign | ((mag << 4) + (120u << 7));
    return sign | (__float_as_uint(__uint2float_rn(mag) * 0.001953125f) >> 16);
}

// One fp8 cache value as a float, exactly (the bf16 of the same value, widened).
__device__ __forceinline__ float fp8_to_f32(u8 b) { return __uint_as_float(fp8_to_bf16_bits(b) << 16); }

// Four fp8 codes (the bytes of w, lowest first) as two bf16x2 (lo: bytes 0 and 1, hi: bytes 2 and 3; the lower byte
// into the lower half), exactly. sm_89 and later: the hardware's conversion of each byte pair to f16x2 (exact: every
// nonzero e4m3fn value, 2^-9 .. 448, is a normal f16; NaN stays NaN), each half widened to float (exact), each two
// rounded to bf16 (exact: 3 mantissa bits, exponents -9 .. 8): 8 instructions for the 4 values. Before sm_89 (no e4m3
// conversion): fp8_to_bf16_bits, byte by byte. Either way the bits of fp8_to_bf16_bits (NaN: a NaN).
__device__ __forceinline__ void fp8x4_to_bf16x4(u32 w, u32& lo, u32& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n\t"
        ".reg .b16 b01, b23, h0, h1;\n\t"
        ".reg .b32 p01, p23;\n\t"
        ".reg .f32 f0, f1, f2, f3;\n\t"
        "mov.b32 {b01, b23}, %2;\n\t"
        "cvt.rn.f16x2.e4m3x2 p01, b01;\n\t"
        "cvt.rn.f16x2.e4m3x2 p23, b23;\n\t"
        "mov.b32 {h0, h1}, p01;\n\t"
        "cvt.f32.f16 f0, h0;\n\t"
        "cvt.f32.f16 f1, h1;\n\t"
        "mov.b32 {h0, h1}, p23;\n\t"
        "cvt.f32.f16 f2, h0;\n\t"
        "cvt.f32.f16 f3, h1;\n\t"
        "cvt.rn.bf16x2.f32 %0, f1, f0;\n\t"
        "cvt.rn.bf16x2.f32 %1, f3, f2;\n\t"
        "}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
#else
    lo = fp8_to_bf16_bits(w & 0xffu) | (fp8_to_bf16_bits((w >> 8) & 0xffu) << 16);
    hi = fp8_to_bf16_bits((w >> 16) & 0xffu) | (fp8_to_bf16_bits(w >> 24) << 16);
#endif
}

// The position, read after the wait in a PDL kernel through the coherent path: a plain read of a const __restrict__
// pointer may compile to the read-only path (LDG.CONSTANT), which ptxas may hoist above griddepcontrol.wait
// (tests/test_cuda_pdl_order.py). PDL=false: the plain read, as the plain kernels have always made it.
template <bool PDL>
__device__ __forceinline__ i64 read_pos(const i64* __restrict__ pos) {
    if constexpr (PDL) return __ldcg(pos);
    else return pos[0];
}

// The absorbed query's dot for output column j of head h, with the thread's DEEP weights already requested (the PDL
// absorb requests them before its wait): its q values (one dtype branch outside the loop), then the products in d
// order: sum over d = grp, grp + 4, ... < Dn of q[d] w_uk[h, d, j].
template <int DT, int DEEP>
__device__ __forceinline__ float absorb_dot_loaded(const void* __restrict__ q, i64 qrow, const float (&wv)[DEEP],
                                                   int grp) {
    float qv[DEEP];
#pragma unroll
    for (int i = 0; i < DEEP; ++i) {
        const i64 k = qrow + grp + 4 * i;
        qv[i] = DT == DT_F32 ? ((const float*)q)[k]
              : DT == DT_BF16 ? bf16_to_f32(((const u16*)q)[k]) : f16_to_f32(((const u16*)q)[k]);
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < DEEP; ++i) acc = fmaf(qv[i], wv[i], acc);
    return acc;
}

// The plain form (DEEP = 0, in mla_absorb_body) walks d in a loop unrolled 8 times with q's dtype tested at each load;
// ptxas then keeps ~5 loads ahead of the products (the SASS: 5 LDG before the first FFMA), a chain of dependent
// round trips. DEEP (Dn = 4 x DEEP, Kimi-Linear's 128: DEEP 32): the thread's DEEP weights are all requested first,
// then absorb_dot_loaded: the same sums in the same order, the same bits.
template <int DT, int DEEP>
__device__ __forceinline__ float absorb_dot_deep(const void* __restrict__ q, i64 qrow, const float* __restrict__ w,
                                                 int grp, int Lkv) {
    float wv[DEEP];
#pragma unroll
    for (int i = 0; i < DEEP; ++i) wv[i] = __ldg(w + (i64)(grp + 4 * i) * Lkv);
    return absorb_dot_loaded<DT, DEEP>(q, qrow, wv, grp);
}

// q [T, N, Dn+R] (q_dt); w_uk [N, Dn, Lkv] f32; latent [T, Lkv+R] and cache [Lmax, Lkv+R] (c_dt);
// qa [T, N, Lkv+R] f32 (qa_bf16 = 0) or bf16 (1). Grid (N, ceil((Lkv+R)/64), T), 256 threads.
// DEEP: 0 (the plain loop, any Dn), or Dn / 4 (absorb_dot_deep; the host launches it only for that Dn). PDL (with
// DEEP only): the thread's weights requested first, then the next kernel let start and the wait, then the rest as ever.
template <int DEEP, bool PDL = false>
__device__ __forceinline__ void mla_absorb_body(const void* __restrict__ q, int q_dt, const float* __restrict__ w_uk,
                                                const void* __restrict__ latent, void* __restrict__ cache, int c_dt,
                                                const i64* __restrict__ pos, int T, int N, int Dn, int R, int Lkv,
                                                i64 Lmax, float qscale, void* __restrict__ qa, int qa_bf16) {
    __shared__ float red[4][64];
    const int h = blockIdx.x, t = blockIdx.z, tid = threadIdx.x, grp = tid >> 6;
    const int DQ = Lkv + R;
    const int j = blockIdx.y * 64 + (tid & 63);
    float wv[DEEP > 0 ? DEEP : 1];
    if constexpr (PDL) {
        static_assert(DEEP > 0, "the PDL absorb is the deep one");
        if (j < Lkv) {
            const float* w = w_uk + (i64)h * Dn * Lkv + j;
#pragma unroll
            for (int i = 0; i < DEEP; ++i) wv[i] = __ldcg(w + (i64)(grp + 4 * i) * Lkv);  // not the read-only path
        }
        pdl_launch_dependents();
        pdl_wait();  // q and the latent are the kernels before's; the cache row is written after this
    }
    if (h == 0 && grp == 0 && j < DQ) {  // the new cache row (copied bit for bit)
        const i64 row = read_pos<PDL>(pos) + t;
        if (row >= 0 && row < Lmax) {
            if (c_dt == DT_F32) ((float*)cache)[row * DQ + j] = ((const float*)latent)[(i64)t * DQ + j];
            else if (c_dt == DT_FP8_E4M3) {  // fp8: the engine rounded the row; its bytes as they are
                const unsigned char* src = (const unsigned char*)latent + (i64)t * DQ + j;
                ((u8*)cache)[row * DQ + j] = PDL ? __ldcg(src) : *src;
            } else ((u16*)cache)[row * DQ + j] = ((const u16*)latent)[(i64)t * DQ + j];
        }
    }
    const i64 qrow = ((i64)t * N + h) * (Dn + R);
    float acc = 0.0f;
    if (j < Lkv) {
        if constexpr (PDL) {
            if (q_dt == DT_BF16) acc = absorb_dot_loaded<DT_BF16, DEEP>(q, qrow, wv, grp);
            else if (q_dt == DT_F32) acc = absorb_dot_loaded<DT_F32, DEEP>(q, qrow, wv, grp);
            else acc = absorb_dot_loaded<DT_F16, DEEP>(q, qrow, wv, grp);
        } else if constexpr (DEEP > 0) {
            const float* w = w_uk + (i64)h * Dn * Lkv + j;
            if (q_dt == DT_BF16) acc = absorb_dot_deep<DT_BF16, DEEP>(q, qrow, w, grp, Lkv);
            else if (q_dt == DT_F32) acc = absorb_dot_deep<DT_F32, DEEP>(q, qrow, w, grp, Lkv);
            else acc = absorb_dot_deep<DT_F16, DEEP>(q, qrow, w, grp, Lkv);
        } else {
#pragma unroll 8
            for (int d = grp; d < Dn; d += 4)
                acc = fmaf(load_act(q, qrow + d, q_dt), w_uk[((i64)h * Dn + d) * Lkv + j], acc);
        }
    }
    red[grp][tid & 63] = acc;
    __syncthreads();
    if (grp != 0 || j >= DQ) return;
    float v = j < Lkv ? ((red[0][tid] + red[1][tid]) + red[2][tid]) + red[3][tid] : load_act(q, qrow + Dn + (j - Lkv), q_dt);
    v *= qscale;
    const i64 o = ((i64)t * N + h) * DQ + j;
    if (qa_bf16) ((u16*)qa)[o] = f32_to_bf16(v);
    else ((float*)qa)[o] = v;
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) mla_absorb(const void* __restrict__ q, int q_dt,
                                                             const float* __restrict__ w_uk,
                                                             const void* __restrict__ latent, void* __restrict__ cache,
                                                             int c_dt, const i64* __restrict__ pos, int T, int N,
                                                             int Dn, int R, int Lkv, i64 Lmax, float qscale,
                                                             void* __restrict__ qa, int qa_bf16) {
    mla_absorb_body<0>(q, q_dt, w_uk, latent, cache, c_dt, pos, T, N, Dn, R, Lkv, Lmax, qscale, qa, qa_bf16);
}

// mla_absorb for Dn = 128 (Kimi-Linear's), each thread's 32 weights in flight at once (absorb_dot_deep): the 48B's
// absorb reads 8.4 MB of float32 weights a layer and took 7.6 us (27% of the read ceiling) in the plain form.
// The same sums in the same order: the same bits (attention=cupy_splitk_bf16_deep).
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) mla_absorb_deep(const void* __restrict__ q, int q_dt,
                                                                  const float* __restrict__ w_uk,
                                                                  const void* __restrict__ latent,
                                                                  void* __restrict__ cache, int c_dt,
                                                                  const i64* __restrict__ pos, int T, int N, int Dn,
                                                                  int R, int Lkv, i64 Lmax, float qscale,
                                                                  void* __restrict__ qa, int qa_bf16) {
    mla_absorb_body<32>(q, q_dt, w_uk, latent, cache, c_dt, pos, T, N, Dn, R, Lkv, Lmax, qscale, qa, qa_bf16);
}

// mla_absorb_deep for programmatic dependent launch (attention=cupy_splitk_bf16_deep_pdl): its 32 weights requested
// before the wait. The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) mla_absorb_deep_pdl(const void* __restrict__ q, int q_dt,
                                                                      const float* __restrict__ w_uk,
                                                                      const void* __restrict__ latent,
                                                                      void* __restrict__ cache, int c_dt,
                                                                      const i64* __restrict__ pos, int T, int N,
                                                                      int Dn, int R, int Lkv, i64 Lmax, float qscale,
                                                                      void* __restrict__ qa, int qa_bf16) {
    mla_absorb_body<32, true>(q, q_dt, w_uk, latent, cache, c_dt, pos, T, N, Dn, R, Lkv, Lmax, qscale, qa, qa_bf16);
}

// Rows of the context this slice covers, for a query that sees rows [0, visible): slices split the
// rows all queries need, [0, min(pos + T, Lmax)), into gridDim.x parts of `align`-row multiples.
__device__ __forceinline__ void slice_rows(i64 p0, int T, i64 Lmax, i64 visible, int align, i64& r0, i64& r1) {
    i64 total = p0 + T;
    total = total < 0 ? 0 : (total > Lmax ? Lmax : total);
    i64 chunk = (total + gridDim.x - 1) / gridDim.x;
    chunk = (chunk + align - 1) / align * align;
    r0 = (i64)blockIdx.x * chunk;
    r1 = r0 + chunk;
    if (r1 > visible) r1 = visible;
    if (r1 < r0) r1 = r0;
}

// A cache value as a float: c_dt's (an activation dtype: load_act), or with FP8 a float8_e4m3fn byte, exactly.
template <bool FP8>
__device__ __forceinline__ float generic_cache_value(const void* __restrict__ cache, i64 i, int c_dt) {
    if constexpr (FP8) return fp8_to_f32(((const u8*)cache)[i]);
    else return load_act(cache, i, c_dt);
}

// qa f32 [T, N, DQ] (DQ = Lkv + R <= 1024, Lkv <= 512); cache (c_dt). Partials: m, l [S, T, N];
// acc [S, T, N, Lkv]. Grid (S, N, T), 128 threads (4 warps, rows dealt round-robin).
// FP8 (mla_split_generic_fp8): the cache is float8_e4m3fn, each value decoded exactly (fp8_to_f32), c_dt unread; the
// same float32 arithmetic on the decoded values. FP8 = false is mla_split_generic's code as it was.
template <bool FP8>
__device__ __forceinline__ void mla_split_generic_body(const float* __restrict__ qa, const void* __restrict__ cache,
                                                       int c_dt, const i64* __restrict__ pos, int T, int N, int Lkv,
                                                       int R, i64 Lmax, float* __restrict__ part_m,
                                                       float* __restrict__ part_l, float* __restrict__ part_acc) {
    __shared__ float sq[1024];
    __shared__ float wm[4], wl[4];
    __shared__ float wacc[4][512];
    const int h = blockIdx.y, t = blockIdx.z, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int DQ = Lkv + R;
    for (int e = tid; e < DQ; e += 128) sq[e] = qa[((i64)t * N + h) * DQ + e];
    const i64 p0 = pos[0];
    i64 visible = p0 + t + 1;
    visible = visible > Lmax ? Lmax : visible;
    i64 r0, r1;
    slice_rows(p0, T, Lmax, visible, 1, r0, r1);
    __syncthreads();

    float m = NEG_INF, l = 0.0f, acc[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) acc[k] = 0.0f;
    for (i64 r = r0 + warp; r < r1; r += 4) {
        const i64 c = r * DQ;
        float dot = 0.0f;
        for (int e = lane; e < DQ; e += 32) dot = fmaf(sq[e], generic_cache_value<FP8>(cache, c + e, c_dt), dot);
        dot = warp_sum(dot);
        const float m_new = fmaxf(m, dot);
        const float corr = exp2f(m - m_new), p = exp2f(dot - m_new);
        l = l * corr + p;
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const int e = lane + 32 * k;
            if (e < Lkv) acc[k] = acc[k] * corr + p * generic_cache_value<FP8>(cache, c + e, c_dt);
        }
        m = m_new;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int k = 0; k < 16; ++k)
        if (lane + 32 * k < Lkv) wacc[warp][lane + 32 * k] = acc[k];
    __syncthreads();
    const float M = fmaxf(fmaxf(wm[0], wm[1]), fmaxf(wm[2], wm[3]));
    float w[4], L = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        w[i] = M == NEG_INF ? 0.0f : exp2f(wm[i] - M);
        L += w[i] * wl[i];
    }
    const i64 o = ((i64)blockIdx.x * T + t) * N + h;
    if (tid == 0) {
        part_m[o] = M;
        part_l[o] = L;
    }
    for (int e = tid; e < Lkv; e += 128)
        part_acc[o * Lkv + e] = ((w[0] * wacc[0][e] + w[1] * wacc[1][e]) + w[2] * wacc[2][e]) + w[3] * wacc[3][e];
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) mla_split_generic(const float* __restrict__ qa,
                                                                    const void* __restrict__ cache, int c_dt,
                                                                    const i64* __restrict__ pos, int T, int N,
                                                                    int Lkv, int R, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc) {
    mla_split_generic_body<false>(qa, cache, c_dt, pos, T, N, Lkv, R, Lmax, part_m, part_l, part_acc);
}

// mla_split_generic over a float8_e4m3fn cache (attention=cupy_splitk_fp8_deep_active_pdl: every call but one token of
// the tensor-core shape). Its own entry so that mla_split_generic's code stays as it was; the same arguments (c_dt:
// the host passes DT_FP8_E4M3, unread).
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) mla_split_generic_fp8(const float* __restrict__ qa,
                                                                        const void* __restrict__ cache, int c_dt,
                                                                        const i64* __restrict__ pos, int T, int N,
                                                                        int Lkv, int R, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc) {
    mla_split_generic_body<true>(qa, cache, c_dt, pos, T, N, Lkv, R, Lmax, part_m, part_l, part_acc);
}

// ---- tensor-core split for Kimi-Linear's decode shape ----------------------------------------------------

#define MMA_NH 32    // heads
#define MMA_LKV 512  // latent width
#define MMA_D 576    // cache row: 512 latent + 64 k_pe
#define MMA_DP 584   // shared-memory row pitch (bf16): +16 bytes puts ldmatrix's 8 rows on distinct banks
#define MMA_BL 64    // cache rows per stage
#define MMA_STAGES 2 // pipeline depth: the next tile streams in while one is computed (32-row tiles
                     // four deep measured slower: the score loop is shared-memory bound, and smaller
                     // tiles re-read the queries more often per cache byte)
#define MMA_SS 68    // pitch of the fp32 score tiles
#define MMA_PP 72    // pitch of the bf16 probability tile
#define MMA_SMEM_Q 0
#define MMA_SMEM_C (MMA_SMEM_Q + MMA_NH * MMA_DP * 2)
#define MMA_SMEM_S (MMA_SMEM_C + MMA_STAGES * MMA_BL * MMA_DP * 2)
#define MMA_SMEM_P (MMA_SMEM_S + 2 * MMA_NH * MMA_SS * 4)
#define MMA_SMEM_A (MMA_SMEM_P + MMA_NH * MMA_PP * 2)
#define MMA_SMEM_BYTES (MMA_SMEM_A + MMA_NH * 4)

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
// c += a (16x16 bf16, row) * b (16x8 bf16, col), fp32 accumulators
__device__ __forceinline__ void mma_bf16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x2(u32 addr, u32& r0, u32& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(addr));
}

// Rows [row0, row0 + MMA_BL) of the cache into one stage; rows at or past r1 become zeros (never read).
__device__ __forceinline__ void mma_load_rows(u32 dst, const u16* __restrict__ cache, i64 row0, i64 r1, int tid) {
    for (int c = tid; c < MMA_BL * (MMA_D / 8); c += 256) {
        const int rr = c / (MMA_D / 8), col = c % (MMA_D / 8);
        const i64 row = row0 + rr;
        const bool ok = row < r1;
        cp_async16(dst + (rr * MMA_DP + col * 8) * 2, cache + (ok ? row : row0) * MMA_D + col * 8, ok ? 16 : 0);
    }
}

// ---- the fp8 cache's stages (mla_split_mma_fp8) ----
// The fp8 split takes the bf16 split's shared memory, laid out alike but for region C (MMA_SMEM_C .. MMA_SMEM_S, the
// bf16 split's two 64-row stages, 149504 bytes): there the one bf16 tile the tensor-core code reads (at MMA_SMEM_C,
// MMA_BL rows of pitch MMA_DP: a bf16 stage's layout, 74752 bytes), then MMA_STAGES fp8 stages (MMA_BL rows of MMA_D
// bytes, pitch MMA_D: only the conversion pass reads them, in order; 36864 bytes each). 148480 bytes of the 149504,
// so the block takes MMA_SMEM_BYTES (209024) as the bf16 split does, within the 227 KB an sm_90 block may have.
#define MMA_FP8_TILE_BYTES (MMA_BL * MMA_DP * 2)
#define MMA_FP8_STAGE_BYTES (MMA_BL * MMA_D)
#define MMA_SMEM_F8 (MMA_SMEM_C + MMA_FP8_TILE_BYTES)
static_assert(MMA_SMEM_F8 + MMA_STAGES * MMA_FP8_STAGE_BYTES <= MMA_SMEM_S, "the fp8 stages overrun region C");
static_assert(MMA_BL * (MMA_D / 8) % 256 == 0, "the conversion pass deals whole rounds of 8 bytes a thread");

// Rows [row0, row0 + MMA_BL) of the fp8 cache into one fp8 stage, 16 bytes a copy (9 a thread); rows at or past r1
// become zeros (never read), as in mma_load_rows.
__device__ __forceinline__ void mma_load_rows_fp8(u32 dst, const u8* __restrict__ cache, i64 row0, i64 r1, int tid) {
    for (int c = tid; c < MMA_BL * (MMA_D / 16); c += 256) {
        const int rr = c / (MMA_D / 16), col = c % (MMA_D / 16);
        const i64 row = row0 + rr;
        const bool ok = row < r1;
        cp_async16(dst + rr * MMA_D + col * 16, cache + (ok ? row : row0) * MMA_D + col * 16, ok ? 16 : 0);
    }
}

// One tile's rows into pipeline stage `stage` (sC0: MMA_SMEM_C's address): mma_load_rows for a bf16 cache (the stage is
// the tile the products read), mma_load_rows_fp8 into fp8 stage `stage` for an fp8 one.
__device__ __forceinline__ void mma_load_stage(u32 sC0, const u16* __restrict__ cache, int stage, i64 row0, i64 r1,
                                               int tid) {
    mma_load_rows(sC0 + stage * (MMA_BL * MMA_DP * 2), cache, row0, r1, tid);
}
__device__ __forceinline__ void mma_load_stage(u32 sC0, const u8* __restrict__ cache, int stage, i64 row0, i64 r1,
                                               int tid) {
    mma_load_rows_fp8(sC0 + MMA_FP8_TILE_BYTES + stage * MMA_FP8_STAGE_BYTES, cache, row0, r1, tid);
}

// One fp8 stage (src) into the bf16 tile (dst, pitch MMA_DP), exactly (fp8x4_to_bf16x4): 8 bytes in, 16 out, 18 rounds
// a thread (9 loads in flight, then their conversions and stores, twice), consecutive threads on consecutive bytes (a
// warp's 8-byte loads and 16-byte stores are contiguous but where a row ends). Rows zero-filled by mma_load_rows_fp8
// become bf16 zeros. Round i's 8 bytes are unit u = tid + 256 i of the stage (MMA_D / 8 = 72 a row); with the rounds
// unrolled its row is the thread's first row (tid / 72) plus a constant and one compare, not a division a round.
__device__ __forceinline__ void mma_fp8_to_bf16(const u8* src, u16* dst, int tid) {
    constexpr int UPR = MMA_D / 8;  // 8-byte units a row
    constexpr int ROUNDS = MMA_BL * UPR / 256, BATCH = ROUNDS / 2;  // 18 rounds, loaded 9 at a time
    const int row0 = tid / UPR, col0 = tid - row0 * UPR;
#pragma unroll
    for (int b = 0; b < ROUNDS; b += BATCH) {
        uint2 w[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) w[i] = *(const uint2*)(src + (tid + 256 * (b + i)) * 8);
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int k = 256 * (b + i), u = tid + k;
            const int row = row0 + k / UPR + (col0 + k % UPR >= UPR ? 1 : 0);
            uint4 o;
            fp8x4_to_bf16x4(w[i].x, o.x, o.y);
            fp8x4_to_bf16x4(w[i].y, o.z, o.w);
            *(uint4*)(dst + u * 8 + row * (MMA_DP - MMA_D)) = o;  // row * MMA_DP + (u - row * UPR) * 8
        }
    }
}

// The block's barrier, for the 256 threads of a one-group split (mla_split_mma_body).
struct BlockSync {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// One group's barrier in a block of several 256-thread groups (mla_split_twin_body): bar.sync on barrier `id` (1, 2:
// barrier 0 is __syncthreads') for the group's 256 threads only, so that one group's barriers never wait for the other.
struct GroupSync {
    int id;
    __device__ __forceinline__ void operator()() const { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
};

// One 64-row tile of the cache, already in shared memory at sC (rows row0 .. row0 + 63; those at or past r1 are
// masked out), folded into a running softmax and its weighted sums by the 256 threads that share the tile (tid: 0 ..
// 255 among them; sync(): their barrier): m_run, l_run are head srow's (tid >> 3; each of its 8 threads holds them),
// oacc holds heads x latent dims 64 * warp .. + 63 in the mma accumulator layout. Per tile, NK = 2 (mma_tile): warp w
// computes the scores of rows 16(w&3) .. +15 for all heads over half (w>>2) of the 576 dims from the queries at sQ into
// sS (two [32, MMA_SS] halves); NK = 4 (mla_split_qreg): rows 32(w>>2) .. +31 over quarter w&3 from the query
// fragments qf (mma_load_qfrags) into sS's halves, then sS2's; HALVES (mla_split_ring): the tile's rows 0 .. 31 at sC
// and 32 .. 63 at sC_hi (two ring slots), else all 64 at sC; the softmax runs 8 threads per head, adding the parts
// in order, writing the probabilities (bf16) to sP and each head's rescale to sAlpha; then warp w accumulates latent
// dims 64w .. 64w+63. Called with the tile landed and every thread of the group past a barrier since; returns with sS,
// sS2, sP and sAlpha still being read (the caller's next barrier ends that) and the tile too.
template <int NK, typename Sync, bool HALVES = false>
__device__ __forceinline__ void mma_tile_parts(u32 sQ, const u32 (*qf)[9][4], u32 sC, u32 sC_hi, float* sS, float* sS2,
                                               u16* sP, float* sAlpha, i64 row0, i64 r1, int tid, float& m_run,
                                               float& l_run, float (&oacc)[2][8][4], Sync sync) {
    const int lane = tid & 31, warp = tid >> 5;
    const int srow = tid >> 3, seg = tid & 7;  // softmax role: head srow, columns 8*seg .. 8*seg+7 of the tile
    const u32 sPa = smem_addr(sP);
    if constexpr (NK == 2) {
        const int cgrp = warp & 3, kh = warp >> 2;
        // scores: rows 16*cgrp .. +15 of the tile, dims [288*kh, 288*kh + 288)
        float sacc[2][2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) sacc[mt][nt][e] = 0.0f;
#pragma unroll 2
        for (int ks = 0; ks < 18; ++ks) {
            const int k0 = (kh * 18 + ks) * 16;
            u32 a[2][4], b[4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
                ldsm_x4(sQ + ((mt * 16 + (lane & 15)) * MMA_DP + k0 + (lane >> 4) * 8) * 2, a[mt][0], a[mt][1],
                        a[mt][2], a[mt][3]);
            ldsm_x4(sC + ((16 * cgrp + (lane & 7) + ((lane >> 4) << 3)) * MMA_DP + k0 + ((lane >> 3) & 1) * 8) * 2,
                    b[0], b[1], b[2], b[3]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                mma_bf16(sacc[mt][0], a[mt], b[0], b[1]);
                mma_bf16(sacc[mt][1], a[mt], b[2], b[3]);
            }
        }
        float* sSk = sS + kh * (MMA_NH * MMA_SS);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const int row = mt * 16 + (lane >> 2), col = 16 * cgrp + 8 * nt + 2 * (lane & 3);
                *(float2*)(sSk + row * MMA_SS + col) = make_float2(sacc[mt][nt][0], sacc[mt][nt][1]);
                *(float2*)(sSk + (row + 8) * MMA_SS + col) = make_float2(sacc[mt][nt][2], sacc[mt][nt][3]);
            }
    } else {
        // scores from the queries in registers (qf, mma_load_qfrags): warp w computes rows 32 (w >> 2) .. +31 for all
        // heads over quarter w & 3 of the dims into part w & 3 (sS's halves, then sS2's)
        const int kq = warp & 3, rg = warp >> 2;
        float sacc[2][4][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) sacc[mt][nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < 9; ++ks) {
            const int k0 = (kq * 9 + ks) * 16;
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                u32 b[4];
                if constexpr (HALVES)  // the tile's rows 32 rg .. + 31 at sC (rg 0) or sC_hi (rg 1)
                    ldsm_x4((rg ? sC_hi : sC) + ((16 * np + (lane & 7) + ((lane >> 4) << 3)) * MMA_DP + k0 +
                                                 ((lane >> 3) & 1) * 8) * 2,
                            b[0], b[1], b[2], b[3]);
                else
                    ldsm_x4(sC + ((32 * rg + 16 * np + (lane & 7) + ((lane >> 4) << 3)) * MMA_DP + k0 +
                                  ((lane >> 3) & 1) * 8) * 2,
                            b[0], b[1], b[2], b[3]);
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    mma_bf16(sacc[mt][2 * np], qf[mt][ks], b[0], b[1]);
                    mma_bf16(sacc[mt][2 * np + 1], qf[mt][ks], b[2], b[3]);
                }
            }
        }
        float* sSk = (kq < 2 ? sS : sS2) + (kq & 1) * (MMA_NH * MMA_SS);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int row = mt * 16 + (lane >> 2), col = 32 * rg + 8 * nt + 2 * (lane & 3);
                *(float2*)(sSk + row * MMA_SS + col) = make_float2(sacc[mt][nt][0], sacc[mt][nt][1]);
                *(float2*)(sSk + (row + 8) * MMA_SS + col) = make_float2(sacc[mt][nt][2], sacc[mt][nt][3]);
            }
    }
    sync();

    // online softmax, base 2 (qa carries log2 e); rows at or past r1 are masked out
    {
        float sv[8];
        const float* s0 = sS + srow * MMA_SS + 8 * seg;
        const float* s1 = s0 + MMA_NH * MMA_SS;
        float tmax = NEG_INF;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            if constexpr (NK == 2) {
                sv[e] = row0 + 8 * seg + e < r1 ? s0[e] + s1[e] : NEG_INF;
            } else {
                const float* s2 = sS2 + srow * MMA_SS + 8 * seg;
                const float* s3 = s2 + MMA_NH * MMA_SS;
                sv[e] = row0 + 8 * seg + e < r1 ? ((s0[e] + s1[e]) + s2[e]) + s3[e] : NEG_INF;
            }
            tmax = fmaxf(tmax, sv[e]);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 4));
        const float m_new = fmaxf(m_run, tmax);
        const float m_use = m_new == NEG_INF ? 0.0f : m_new;
        const float alpha = exp2f(m_run - m_use);
        float psum = 0.0f;
        u32 packed[4];
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            const float p0 = exp2f(sv[e] - m_use), p1 = exp2f(sv[e + 1] - m_use);
            psum += p0 + p1;
            packed[e / 2] = (u32)f32_to_bf16(p0) | ((u32)f32_to_bf16(p1) << 16);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        psum += __shfl_xor_sync(0xffffffffu, psum, 4);
        l_run = l_run * alpha + psum;
        m_run = m_new;
        *(uint4*)(sP + srow * MMA_PP + 8 * seg) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        if (seg == 0) sAlpha[srow] = alpha;
    }
    sync();

    // acc[heads, 64*warp .. +63] = alpha * acc + P . C
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        const float a_lo = sAlpha[mt * 16 + (lane >> 2)], a_hi = sAlpha[mt * 16 + 8 + (lane >> 2)];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            oacc[mt][nt][0] *= a_lo;
            oacc[mt][nt][1] *= a_lo;
            oacc[mt][nt][2] *= a_hi;
            oacc[mt][nt][3] *= a_hi;
        }
    }
#pragma unroll
    for (int kk = 0; kk < MMA_BL / 16; ++kk) {
        u32 pa[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
            ldsm_x4(sPa + ((mt * 16 + (lane & 15)) * MMA_PP + kk * 16 + (lane >> 4) * 8) * 2, pa[mt][0],
                    pa[mt][1], pa[mt][2], pa[mt][3]);
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
            u32 b[4];
            // rows kk * 16 .. + 15 of the tile (HALVES: rows 0 .. 31 at sC, 32 .. 63 at sC_hi)
            if constexpr (HALVES)
                ldsm_x4_t((kk < 2 ? sC : sC_hi) + (((kk & 1) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * MMA_DP +
                                                   64 * warp + 8 * (2 * jp + (lane >> 4))) * 2,
                          b[0], b[1], b[2], b[3]);
            else
                ldsm_x4_t(sC + ((kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * MMA_DP + 64 * warp +
                                8 * (2 * jp + (lane >> 4))) * 2,
                          b[0], b[1], b[2], b[3]);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                mma_bf16(oacc[mt][2 * jp], pa[mt], b[0], b[1]);
                mma_bf16(oacc[mt][2 * jp + 1], pa[mt], b[2], b[3]);
            }
        }
    }
}

// mma_tile_parts with the queries read from shared memory each tile (sQ) and the scores in sS's two halves: the
// one-group, twin and bulk splits' tile.
template <typename Sync>
__device__ __forceinline__ void mma_tile(u32 sQ, u32 sC, float* sS, u16* sP, float* sAlpha, i64 row0, i64 r1, int tid,
                                         float& m_run, float& l_run, float (&oacc)[2][8][4], Sync sync) {
    mma_tile_parts<2>(sQ, nullptr, sC, sC, sS, nullptr, sP, sAlpha, row0, r1, tid, m_run, l_run, oacc, sync);
}

// The queries-in-registers split's A fragments (mma_tile_parts<4>): warp w's quarter w & 3 of the 576 dims for all 32
// heads, 9 k-steps of 16 x 2 head tiles, read once from the queries at sQ (pitch MMA_DP) as mma_tile's scores read
// them every tile. 72 registers a thread.
__device__ __forceinline__ void mma_load_qfrags(u32 sQ, u32 (&qf)[2][9][4], int tid) {
    const int lane = tid & 31, kq = (tid >> 5) & 3;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int ks = 0; ks < 9; ++ks)
            ldsm_x4(sQ + ((mt * 16 + (lane & 15)) * MMA_DP + (kq * 9 + ks) * 16 + (lane >> 4) * 8) * 2, qf[mt][ks][0],
                    qf[mt][ks][1], qf[mt][ks][2], qf[mt][ks][3]);
}

// The rows of the context this block's slice covers, [r0, r1) for the one token at pos (read after a PDL kernel's
// wait, read_pos), in MMA_BL-row multiples; returns its number of tiles (0: an empty slice).
template <bool PDL>
__device__ __forceinline__ int mma_slice(const i64* __restrict__ pos, i64 Lmax, i64& r0, i64& r1) {
    const i64 p0 = read_pos<PDL>(pos);
    i64 visible = p0 + 1;
    visible = visible > Lmax ? Lmax : visible;
    slice_rows(p0, 1, Lmax, visible, MMA_BL, r0, r1);
    return (int)((r1 - r0 + MMA_BL - 1) / MMA_BL);
}

// An empty slice's partial (NTHREADS threads, tid 0 .. NTHREADS-1): m = -inf and l = 0 a head, and its zero sums unless
// skip_empty (then the combine never reads them).
template <int NTHREADS>
__device__ __forceinline__ void mma_empty_partial(i64 o, int tid, float* __restrict__ part_m,
                                                  float* __restrict__ part_l, float* __restrict__ part_acc,
                                                  int skip_empty) {
    if (tid < MMA_NH) {
        part_m[o * MMA_NH + tid] = NEG_INF;
        part_l[o * MMA_NH + tid] = 0.0f;
    }
    if (!skip_empty)
        for (int e = tid; e < MMA_NH * MMA_LKV; e += NTHREADS) part_acc[o * MMA_NH * MMA_LKV + e] = 0.0f;
}

// The absorbed queries qa [32, 576] bf16 into shared memory at sQ (pitch MMA_DP) by cp.async, NTHREADS threads; the
// caller commits them with its first tile.
template <int NTHREADS>
__device__ __forceinline__ void mma_load_queries(u32 sQ, const u16* __restrict__ qa, int tid) {
    for (int c = tid; c < MMA_NH * (MMA_D / 8); c += NTHREADS) {
        const int row = c / (MMA_D / 8), col = c % (MMA_D / 8);
        cp_async16(sQ + (row * MMA_DP + col * 8) * 2, qa + row * MMA_D + col * 8, 16);
    }
}

__device__ __forceinline__ void mma_zero(float (&oacc)[2][8][4]) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) oacc[mt][nt][e] = 0.0f;
}

// Slice o's partial from the 256 threads of mma_tile's roles (tid 0 .. 255): m and l from each head's first softmax
// thread, the sums from the accumulators.
__device__ __forceinline__ void mma_write_partial(i64 o, int tid, float m_run, float l_run,
                                                  const float (&oacc)[2][8][4], float* __restrict__ part_m,
                                                  float* __restrict__ part_l, float* __restrict__ part_acc) {
    const int lane = tid & 31, warp = tid >> 5, srow = tid >> 3, seg = tid & 7;
    if (seg == 0) {
        part_m[o * MMA_NH + srow] = m_run;
        part_l[o * MMA_NH + srow] = l_run;
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const int row = mt * 16 + (lane >> 2), col = 64 * warp + 8 * nt + 2 * (lane & 3);
            float* dst = part_acc + (o * MMA_NH + row) * MMA_LKV + col;
            *(float2*)dst = make_float2(oacc[mt][nt][0], oacc[mt][nt][1]);
            *(float2*)(dst + 8 * MMA_LKV) = make_float2(oacc[mt][nt][2], oacc[mt][nt][3]);
        }
}

// ---- the bulk split: mla_split_mma with each tile's rows fetched by the copy engine ---------------------------------
// A 64-row tile is 4608 16-byte cp.async a block in mla_split_mma (18 a thread, each with its address arithmetic), all
// through the load/store pipeline that the tile's ldmatrix loads use too. Here warp 0 issues one bulk copy a row
// (cp.async.bulk, bulk_copy.cuh: 64 a tile) completing on the stage's mbarrier; the rows past the slice's end are
// zeroed in shared memory by every thread, as mla_split_mma's zero-filled copies leave them. Everything else is
// mla_split_mma's (mla_split_mma_body with BULK: two stages, mma_tile), so the partials are its bits. Layout:
// mla_split_mma's, then two mbarriers.
#define BULK_SMEM_BAR MMA_SMEM_BYTES
#define BULK_SMEM_BYTES (MMA_SMEM_BYTES + 16)
static_assert(MMA_SMEM_BYTES % 8 == 0, "the mbarriers must sit on 8 bytes");

static_assert(MMA_D * 2 % 16 == 0 && MMA_DP * 2 % 16 == 0 && MMA_SMEM_C % 16 == 0, "bulk copies move 16-byte units");

// Tile j of the slice into stage j % 2: its rows before r1 by bulk copies issued by warp 0, completing on bars[j % 2];
// the rows past r1 zeroed by every thread (ordered before any read by the block barrier the loop takes next).
__device__ __forceinline__ void bulk_fetch(u8* sC0, const u16* __restrict__ cache, int j, i64 r0, i64 r1, int tid,
                                           unsigned long long* bars) {
    const i64 row0 = r0 + (i64)j * MMA_BL;
    const int rows = (int)(r1 - row0 < MMA_BL ? r1 - row0 : MMA_BL);
    u8* dst = sC0 + (j % 2) * (MMA_BL * MMA_DP * 2);
    if (tid < 32) {
        if (tid == 0) mbar_expect(&bars[j % 2], (unsigned int)(rows * MMA_D * 2));
        __syncwarp();
        for (int r = tid; r < rows; r += 32)
            bulk_copy_tx(dst + r * MMA_DP * 2, cache + (row0 + r) * MMA_D, MMA_D * 2, &bars[j % 2]);
    }
    for (int c = tid; c < (MMA_BL - rows) * (MMA_D / 8); c += 256) {
        const int rr = rows + c / (MMA_D / 8), col = c % (MMA_D / 8);
        *(uint4*)(dst + (rr * MMA_DP + col * 8) * 2) = make_uint4(0u, 0u, 0u, 0u);
    }
}

// The queries-in-registers split over an fp8 cache (mla_split_qreg_fp8) lays out mla_split_mma_fp8's bytes, with the
// queries' region a third fp8 stage once the fragments are loaded, and its third and fourth score parts after them.
#define QF8_SMEM_S2 MMA_SMEM_BYTES
#define QF8_SMEM_BYTES (QF8_SMEM_S2 + 2 * MMA_NH * MMA_SS * 4)
static_assert(MMA_FP8_STAGE_BYTES <= MMA_NH * MMA_DP * 2, "an fp8 stage does not fit where the queries were");
static_assert(QF8_SMEM_BYTES <= 232448, "the fp8 qreg split overruns an sm_90 block's shared memory");

// The ring split (mla_split_ring: the bf16 qreg split, RING) keeps its tiles as 32-row half-tiles in a ring of five
// slots of 32 rows (MMA_DP pitch): region C's four, and the queries' bytes once the fragments are loaded. Half-tile q
// (rows 32 q .. + 31 of the slice) sits in slot q % 5; while tile i (half-tiles 2i, 2i + 1) is computed, half-tiles
// 2i + 2 .. 2i + 4 stream in: one and a half tiles in flight where mla_split_mma has one. Its third and fourth score
// parts sit after mla_split_mma's bytes, as mla_split_qreg_fp8's (QF8_SMEM_S2, QF8_SMEM_BYTES).
#define RING_SLOTS 5
#define RING_AHEAD 3
#define RING_HALF_BYTES (32 * MMA_DP * 2)
static_assert(4 * RING_HALF_BYTES == MMA_SMEM_S - MMA_SMEM_C && RING_HALF_BYTES == MMA_SMEM_C - MMA_SMEM_Q,
              "the ring's slots are region C's four and the queries' bytes");

// Slot of half-tile q: region C's slots 0 .. 3 (from sC0), the queries' bytes (sQ) for slot 4.
__device__ __forceinline__ u32 ring_slot(u32 sC0, u32 sQ, int q) {
    const int slot = q % RING_SLOTS;
    return slot < 4 ? sC0 + slot * RING_HALF_BYTES : sQ;
}

// Half-tile q of the slice into its slot (rows at or past r1 zero-filled, as mma_load_rows leaves them); nothing past
// the slice's last tile.
__device__ __forceinline__ void ring_load_half(u32 sC0, u32 sQ, const u16* __restrict__ cache, int q, int n_tiles,
                                               i64 r0, i64 r1, int tid) {
    if (q / 2 >= n_tiles) return;
    const u32 dst = ring_slot(sC0, sQ, q);
    const i64 row0 = r0 + (i64)q * 32;
    for (int c = tid; c < 32 * (MMA_D / 8); c += 256) {
        const int rr = c / (MMA_D / 8), col = c % (MMA_D / 8);
        const i64 row = row0 + rr;
        const bool ok = row < r1;
        cp_async16(dst + (rr * MMA_DP + col * 8) * 2, cache + (ok ? row : row0) * MMA_D + col * 8, ok ? 16 : 0);
    }
}

// Tile j's rows of the slice (j < n_tiles; those before r1) into the L2 by the copy engine, one bulk prefetch a row
// from threads 0 .. 63, nothing waiting on them: the L2PF split's way to have a second tile's bytes in flight where
// shared memory holds only the next one. GPU session 55's probe_split: with one tile in flight an SM the one-group
// split's loads alone took 59.0 of its 64.6 us at 131072 rows (83% of the read ceiling).
template <typename CT>
__device__ __forceinline__ void mma_prefetch_l2(const CT* __restrict__ cache, int j, int n_tiles, i64 r0, i64 r1,
                                                int tid) {
    const i64 row = r0 + (i64)j * MMA_BL + tid;
    if (j < n_tiles && tid < MMA_BL && row < r1) bulk_prefetch_l2(cache + row * MMA_D, MMA_D * sizeof(CT));
}

// qa bf16 [32, 576] (scaled by scale*log2e); cache bf16 [Lmax, 576]; one token at pos. Partials as in
// mla_split_generic with T = 1. Grid (S), 256 threads, MMA_SMEM_BYTES of dynamic shared memory.
// skip_empty: a slice with no rows (pos short of it) writes only m = -inf and l = 0, not its 64 KB of zero sums;
// mla_combine called with skip_empty never reads them (cupy_splitk_bf16_active). At d = 64 that is 130 of 132 slices.
// Per 64-row tile: warp w computes the scores of rows 16(w&3) .. +15 for all heads over half (w>>2) of
// the 576 dims; the softmax runs 8 threads per head; then warp w accumulates latent dims 64w .. 64w+63.
// PDL: launched with programmatic dependent launch (cupy_splitk_bf16_deep_pdl): the next kernel let start, then the
// wait, before anything is read (pos, qa and the cache row are the absorb's)
// CT: the cache's element, u16 (bf16: each stage is the tile the products read) or u8 (float8_e4m3fn,
// mla_split_mma_fp8: each stage holds fp8 rows, and once tile `it` has landed one pass converts it into the bf16 tile,
// exactly, between two barriers: the one before it, after which no warp reads the tile before, and one after it).
// The products, the softmax and the partials are the same code on the same bf16 values. With CT = u16 the code is the
// bf16 split's as it was (the fp8 steps are `if constexpr`, and mma_load_stage is the same mma_load_rows call; its
// SASS was compared instruction for instruction with the code before the fp8 form).
// L2PF (mla_split_l2pf): each tile's rows asked of the L2 (mma_prefetch_l2) when the tile before is asked of shared
// memory, so two tiles' bytes leave DRAM while one is computed. A hint only: the same values, the same bits.
// RING (mla_split_ring, with QREG): the tiles as half-tiles in a ring of five 32-row slots (ring_slot), three
// half-tiles in flight; the same scores, softmax and sums as mla_split_qreg on the same rows: its bits.
// QREG (mla_split_qreg, mla_split_qreg_fp8): each warp's quarter of the queries in registers, the scores in four parts
// (mma_tile_parts<4>); over an fp8 cache with three fp8 stages, the third where the queries were.
// BULK (with CT = u16; mla_split_bulk): each tile's rows by bulk copies (bulk_fetch) completing on its stage's mbarrier,
// waited on there instead of the cp.async groups; the queries still by cp.async. The same tiles: the same bits.
template <bool PDL, typename CT = u16, bool BULK = false, bool QREG = false, bool L2PF = false, bool RING = false>
__device__ __forceinline__ void mla_split_mma_body(const u16* __restrict__ qa, const CT* __restrict__ cache,
                                                   const i64* __restrict__ pos, i64 Lmax, float* __restrict__ part_m,
                                                   float* __restrict__ part_l, float* __restrict__ part_acc,
                                                   int skip_empty) {
    if constexpr (PDL) {
        pdl_launch_dependents();
        pdl_wait();
    }
    extern __shared__ __align__(16) u8 smem[];
    const int tid = threadIdx.x;
    const u32 sQ = smem_addr(smem + MMA_SMEM_Q);
    const u32 sC0 = smem_addr(smem + MMA_SMEM_C);
    float* sS = (float*)(smem + MMA_SMEM_S);
    u16* sP = (u16*)(smem + MMA_SMEM_P);
    float* sAlpha = (float*)(smem + MMA_SMEM_A);

    i64 r0, r1;
    const int n_tiles = mma_slice<PDL>(pos, Lmax, r0, r1);
    const i64 o = blockIdx.x;  // partial index (T = 1)
    if (n_tiles == 0) {
        mma_empty_partial<256>(o, tid, part_m, part_l, part_acc, skip_empty);
        return;
    }

    static_assert(!BULK || (sizeof(CT) == 2 && MMA_STAGES == 2), "the bulk split is bf16, two stages a mbarrier each");
    unsigned long long* bars = (unsigned long long*)(smem + BULK_SMEM_BAR);
    if constexpr (BULK) {
        if (tid == 0) {
            mbar_init(&bars[0], 1);
            mbar_init(&bars[1], 1);
            mbar_init_fence();
        }
        __syncthreads();
    }
    // QREG over an fp8 cache (mla_split_qreg_fp8): three fp8 stages, the third where the queries were (MMA_SMEM_Q),
    // refilled only from the loop's first barrier on, when every warp holds its query fragments
    constexpr int NST = QREG && sizeof(CT) == 1 ? 3 : MMA_STAGES;
    static_assert(!RING || (QREG && sizeof(CT) == 2 && !BULK), "the ring is the bf16 qreg split's");
    mma_load_queries<256>(sQ, qa, tid);
    if constexpr (BULK) {
        cp_async_commit();
        bulk_fetch(smem + MMA_SMEM_C, (const u16*)cache, 0, r0, r1, tid, bars);
        cp_async_wait_all();  // the queries
    } else if constexpr (RING) {
        cp_async_commit();  // the queries in a group of their own, waited for below
#pragma unroll
        for (int h = 0; h < RING_AHEAD; ++h) {  // half-tiles 0 .. 2 into slots 0 .. 2 (the fifth holds the queries)
            ring_load_half(sC0, sQ, (const u16*)cache, h, n_tiles, r0, r1, tid);
            cp_async_commit();
        }
    } else {
        if constexpr (QREG) cp_async_commit();  // the queries in a group of their own, waited for below
        // tiles 0 .. STAGES-2 in flight (the queries travel with tile 0); always commit: uniform group counts
#pragma unroll
        for (int j = 0; j < NST - 1; ++j) {
            if (j < n_tiles) mma_load_stage(sC0, cache, j, r0 + (i64)j * MMA_BL, r1, tid);
            cp_async_commit();
        }
        if constexpr (L2PF) mma_prefetch_l2(cache, NST - 1, n_tiles, r0, r1, tid);
    }

    u32 qf[QREG ? 2 : 1][9][4];  // QREG: this warp's quarter of the queries, the A fragments of its score MMAs
    if constexpr (QREG) {
        if constexpr (RING) cp_async_wait<RING_AHEAD>();  // the queries' group (the half-tiles' may still fly)
        else if constexpr (!BULK) cp_async_wait<NST - 1>();  // the queries' group (the tiles' may still fly)
        __syncthreads();  // every thread's query copies have landed
        mma_load_qfrags(sQ, qf, tid);  // read before the loop's first barrier, after which parts overwrite them
    }

    float m_run = NEG_INF, l_run = 0.0f;
    float oacc[2][8][4];
    mma_zero(oacc);
    for (int it = 0; it < n_tiles; ++it) {
        if constexpr (BULK) mbar_wait(&bars[it % 2], (unsigned int)((it / 2) & 1));  // stage it % 2's (it / 2)-th phase
        else if constexpr (RING) cp_async_wait<1>();  // half-tiles 2 it, 2 it + 1 (2 it + 2 may still fly)
        else cp_async_wait<NST - 2>();
        __syncthreads();  // tile `it` is in shared memory; everyone is done with the stage refilled next
        const i64 row0 = r0 + (i64)it * MMA_BL;
        if constexpr (BULK) {
            if (it + 1 < n_tiles) bulk_fetch(smem + MMA_SMEM_C, (const u16*)cache, it + 1, r0, r1, tid, bars);
        } else if constexpr (RING) {  // into the slots tile it - 1 left (the queries' at it = 0: the fragments are read)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                ring_load_half(sC0, sQ, (const u16*)cache, 2 * it + RING_AHEAD + h, n_tiles, r0, r1, tid);
                cp_async_commit();
            }
        } else {
            const int j = it + NST - 1;
            if constexpr (NST == 3) {
                if (j < n_tiles) {
                    if (j % 3 == 2) mma_load_rows_fp8(sQ, (const u8*)cache, r0 + (i64)j * MMA_BL, r1, tid);
                    else mma_load_stage(sC0, cache, j % 3, r0 + (i64)j * MMA_BL, r1, tid);
                }
            } else {
                if (j < n_tiles) mma_load_stage(sC0, cache, j % MMA_STAGES, r0 + (i64)j * MMA_BL, r1, tid);
            }
            cp_async_commit();
            if constexpr (L2PF) mma_prefetch_l2(cache, j + 1, n_tiles, r0, r1, tid);
        }
        if constexpr (sizeof(CT) == 1) {  // fp8: tile `it`'s stage into the bf16 tile, then every warp may read it
            const u8* stage = NST == 3 && it % 3 == 2 ? smem + MMA_SMEM_Q : smem + MMA_SMEM_F8 + (it % NST) *
                                                                                     MMA_FP8_STAGE_BYTES;
            mma_fp8_to_bf16(stage, (u16*)(smem + MMA_SMEM_C), tid);
            __syncthreads();
        }
        const u32 sC = RING ? ring_slot(sC0, sQ, 2 * it)
                            : sizeof(CT) == 1 ? sC0 : sC0 + (it % MMA_STAGES) * (MMA_BL * MMA_DP * 2);
        const u32 sC_hi = RING ? ring_slot(sC0, sQ, 2 * it + 1) : sC + 32 * MMA_DP * 2;

        if constexpr (QREG) {
            mma_tile_parts<4, BlockSync, RING>(sQ, qf, sC, sC_hi, sS,
                              (float*)(smem + (sizeof(CT) == 1 || RING ? QF8_SMEM_S2 : MMA_SMEM_Q)), sP, sAlpha, row0,
                              r1, tid, m_run, l_run, oacc, BlockSync{});
        } else {
            mma_tile(sQ, sC, sS, sP, sAlpha, row0, r1, tid, m_run, l_run, oacc, BlockSync{});
        }
    }
    mma_write_partial(o, tid, m_run, l_run, oacc, part_m, part_l, part_acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_mma(const u16* __restrict__ qa,
                                                                   const u16* __restrict__ cache,
                                                                   const i64* __restrict__ pos, i64 Lmax,
                                                                   float* __restrict__ part_m,
                                                                   float* __restrict__ part_l,
                                                                   float* __restrict__ part_acc,
                                                                   int skip_empty) {
    mla_split_mma_body<false>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_mma for programmatic dependent launch (attention=cupy_splitk_bf16_deep_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_mma_pdl(const u16* __restrict__ qa,
                                                                       const u16* __restrict__ cache,
                                                                       const i64* __restrict__ pos, i64 Lmax,
                                                                       float* __restrict__ part_m,
                                                                       float* __restrict__ part_l,
                                                                       float* __restrict__ part_acc,
                                                                       int skip_empty) {
    mla_split_mma_body<true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_mma over a float8_e4m3fn cache [Lmax, 576] (attention=cupy_splitk_fp8_deep_active_pdl's split where it is
// launched plainly; mla_split_mma_body with CT = u8): half the bytes a row streamed, each converted exactly to the bf16
// the same tensor-core code reads. Everything else as mla_split_mma, MMA_SMEM_BYTES of dynamic shared memory.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_mma_fp8(const u16* __restrict__ qa,
                                                                       const u8* __restrict__ cache,
                                                                       const i64* __restrict__ pos, i64 Lmax,
                                                                       float* __restrict__ part_m,
                                                                       float* __restrict__ part_l,
                                                                       float* __restrict__ part_acc,
                                                                       int skip_empty) {
    mla_split_mma_body<false>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_mma_fp8 for programmatic dependent launch (attention=cupy_splitk_fp8_deep_active_pdl), as
// mla_split_mma_pdl: the next kernel let start, then the wait, before anything is read (pos through __ldcg; qa and the
// cache by cp.async, which reads through the L2) or written. The same bits as mla_split_mma_fp8.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_mma_fp8_pdl(const u16* __restrict__ qa,
                                                                           const u8* __restrict__ cache,
                                                                           const i64* __restrict__ pos, i64 Lmax,
                                                                           float* __restrict__ part_m,
                                                                           float* __restrict__ part_l,
                                                                           float* __restrict__ part_acc,
                                                                           int skip_empty) {
    mla_split_mma_body<true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// ---- the twin split: two groups of 8 warps a block, each streaming its own tiles --------------------------------
// mla_split_mma runs one block of 8 warps an SM (its 209 KB of shared memory and 167 registers allow no second one),
// and every 64-row tile is a chain: a cp.async wait, three barriers of all 8 warps, the score MMAs, the softmax, the PV
// MMAs. GPU session 53's Nsight Compute put it at 50% of DRAM, 12.5% occupancy and ~7.6 cycles between issues: the
// chain binds, not the bytes (an fp8 cache, half the bytes, was x1.02). The twin split gives each block 16 warps in two
// groups of 8 that share the queries (37 KB) and nothing else: group g takes tiles g, g + 2, ... of the slice, each
// into its own one-stage tile with its own scores, probabilities and barrier (GroupSync 1 + g), so one group's MMAs,
// loads and barriers overlap the other's (group 1 starts a tile behind, so that the two alternate rather than load and
// compute in step). The per-tile code is mla_split_mma's (mma_tile); at the end group 1 hands its running softmax and
// sums to group 0 through shared memory and group 0 writes the slice's one partial, merged as the combine merges slices
// (each side rescaled by 2^(m_g - M)). So the partials differ from mla_split_mma's in rounding only (the tolerance
// claim, not bit-identity). Layout: the queries, then per group its tile, score halves, probabilities and rescales
// (TW_GROUP_BYTES): 231168 bytes of the 232448 an sm_90 block may have. GPU session 54 (H100): it ties the one-group
// split (74.94 against 73.97 us a layer at 131072 rows): with twice the warps each warp issued half as often.
#define TW_TILE_BYTES (MMA_BL * MMA_DP * 2)
#define TW_S_BYTES (2 * MMA_NH * MMA_SS * 4)
#define TW_P_BYTES (MMA_NH * MMA_PP * 2)
#define TW_GROUP_BYTES (TW_TILE_BYTES + TW_S_BYTES + TW_P_BYTES + MMA_NH * 4)
#define TW_SMEM_G(g) (MMA_NH * MMA_DP * 2 + (g) * TW_GROUP_BYTES)
#define TW_SMEM_BYTES TW_SMEM_G(2)
static_assert(TW_SMEM_BYTES <= 232448, "the twin split overruns an sm_90 block's shared memory");
static_assert(MMA_NH * MMA_LKV * 4 <= TW_TILE_BYTES, "group 1's sums do not fit group 0's tile");

// qa, cache, pos and the partials as mla_split_mma's; grid (S), 512 threads, TW_SMEM_BYTES of dynamic shared memory.
// PDL as mla_split_mma_pdl: the next kernel let start, then the wait, before anything is read or written.
template <bool PDL>
__device__ __forceinline__ void mla_split_twin_body(const u16* __restrict__ qa, const u16* __restrict__ cache,
                                                    const i64* __restrict__ pos, i64 Lmax, float* __restrict__ part_m,
                                                    float* __restrict__ part_l, float* __restrict__ part_acc,
                                                    int skip_empty) {
    if constexpr (PDL) {
        pdl_launch_dependents();
        pdl_wait();
    }
    extern __shared__ __align__(16) u8 smem[];
    const int tid = threadIdx.x, g = tid >> 8, gtid = tid & 255;
    const u32 sQ = smem_addr(smem);
    u8* mine = smem + TW_SMEM_G(g);
    const u32 sC = smem_addr(mine);
    float* sS = (float*)(mine + TW_TILE_BYTES);
    u16* sP = (u16*)(mine + TW_TILE_BYTES + TW_S_BYTES);
    float* sAlpha = (float*)(mine + TW_TILE_BYTES + TW_S_BYTES + TW_P_BYTES);

    i64 r0, r1;
    const int n_tiles = mma_slice<PDL>(pos, Lmax, r0, r1);
    const i64 o = blockIdx.x;  // partial index (T = 1)
    if (n_tiles == 0) {
        mma_empty_partial<512>(o, tid, part_m, part_l, part_acc, skip_empty);
        return;
    }
    // the queries (all 512 threads) and each group's first tile, one commit; seen by everyone past the block barrier
    mma_load_queries<512>(sQ, qa, tid);
    if (g < n_tiles) mma_load_rows(sC, cache, r0 + (i64)g * MMA_BL, r1, gtid);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    float m_run = NEG_INF, l_run = 0.0f;
    float oacc[2][8][4];
    mma_zero(oacc);
    const GroupSync sync{1 + g};
    for (int it = g; it < n_tiles; it += 2) {
        // group 1 starts a tile behind group 0 (barrier 3: group 0 arrives once its first tile is done), so that each
        // group's wait for its next tile falls in the other's MMAs rather than beside them; both groups take this
        // barrier exactly when the slice has a second tile
        if (it == 1) asm volatile("bar.sync 3, 512;" ::: "memory");
        if (it != g) {
            cp_async_wait_all();
            sync();  // tile `it` is in the group's shared memory
        }
        mma_tile(sQ, sC, sS, sP, sAlpha, r0 + (i64)it * MMA_BL, r1, gtid, m_run, l_run, oacc, sync);
        if (it + 2 < n_tiles) {
            sync();  // every warp of the group is done with the tile (and its probabilities) before the refill
            mma_load_rows(sC, cache, r0 + (i64)(it + 2) * MMA_BL, r1, gtid);
            cp_async_commit();
        }
        if (it == 0 && n_tiles > 1) asm volatile("bar.arrive 3, 512;" ::: "memory");
    }

    // group 1's softmax state and sums to group 0: its sums into group 0's tile, a slot a thread (the same gtid holds
    // the same heads and columns in both groups), every m and l into group 1's score halves
    __syncthreads();
    float* sX = (float*)(smem + TW_SMEM_G(0));
    float* sML = (float*)(smem + TW_SMEM_G(1) + TW_TILE_BYTES);  // [group][m: 32, l: 32]
    if ((gtid & 7) == 0) {
        sML[g * 64 + (gtid >> 3)] = m_run;
        sML[g * 64 + 32 + (gtid >> 3)] = l_run;
    }
    if (g == 1) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) sX[((mt * 8 + nt) * 4 + e) * 256 + gtid] = oacc[mt][nt][e];
    }
    __syncthreads();
    if (g == 1) return;
    // the merge: M = max(m0, m1), each side rescaled by 2^(m_g - M) (a group with no tile: m -inf, weight 0, sums 0)
    const int lane = gtid & 31;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int h = mt * 16 + 8 * half + (lane >> 2);
            const float m0 = sML[h], m1 = sML[64 + h], M = fmaxf(m0, m1);
            const float Mu = M == NEG_INF ? 0.0f : M;
            const float a0 = exp2f(m0 - Mu), a1 = exp2f(m1 - Mu);
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; ++e)
                    oacc[mt][nt][e] = fmaf(sX[((mt * 8 + nt) * 4 + e) * 256 + gtid], a1, oacc[mt][nt][e] * a0);
        }
    {
        const int h = gtid >> 3;
        const float m0 = sML[h], m1 = sML[64 + h], M = fmaxf(m0, m1);
        const float Mu = M == NEG_INF ? 0.0f : M;
        m_run = M;
        l_run = fmaf(sML[96 + h], exp2f(m1 - Mu), sML[32 + h] * exp2f(m0 - Mu));
    }
    mma_write_partial(o, gtid, m_run, l_run, oacc, part_m, part_l, part_acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512, 1) mla_split_twin(const u16* __restrict__ qa,
                                                                    const u16* __restrict__ cache,
                                                                    const i64* __restrict__ pos, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc, int skip_empty) {
    mla_split_twin_body<false>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_twin for programmatic dependent launch (attention=cupy_splitk_bf16_twin_active_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512, 1) mla_split_twin_pdl(const u16* __restrict__ qa,
                                                                        const u16* __restrict__ cache,
                                                                        const i64* __restrict__ pos, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc,
                                                                        int skip_empty) {
    mla_split_twin_body<true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_bulk(const u16* __restrict__ qa,
                                                                    const u16* __restrict__ cache,
                                                                    const i64* __restrict__ pos, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc, int skip_empty) {
    mla_split_mma_body<false, u16, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_bulk for programmatic dependent launch (attention=cupy_splitk_bf16_bulk_active_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_bulk_pdl(const u16* __restrict__ qa,
                                                                        const u16* __restrict__ cache,
                                                                        const i64* __restrict__ pos, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc,
                                                                        int skip_empty) {
    mla_split_mma_body<true, u16, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// ---- the queries-in-registers split: mla_split_mma with each warp's share of the queries held in registers ---------
// Per 64-row tile mla_split_mma's 8 warps issue 624 ldmatrix.x4, 288 of them re-reading the same 37 KB of queries for
// the scores (each warp half the dims of all 32 heads, 18 k-steps, two query fragments a step), all through the
// shared-memory pipeline session 54 suspected of binding the split (twice the warps, the same 0.25 issues a cycle;
// half the bytes with an fp8 cache, x1.02). Here warp w reads its quarter of the dims (w & 3) for all heads into registers once
// (mma_load_qfrags, 72 a thread) and each tile computes rows 32 (w >> 2) .. +31 over that quarter: 144 ldmatrix.x4 a
// tile for the scores (the tile's rows, each read once), none for the queries, the same 576 score MMAs in chains of 9
// rather than 18. The scores come in four partial sums over the dims, two in the usual halves and two written over
// the queries (no longer read once the fragments are loaded: the loop's first barrier orders that), added in order by
// the softmax; so the partials differ from mla_split_mma's in rounding (the tolerance claim). Everything else is
// mla_split_mma's (mla_split_mma_body with QREG): the same stages, softmax, P.C and shared memory (MMA_SMEM_BYTES).
// GPU session 55 (H100): it ties mla_split_mma (74.37 against 74.19 us a layer at 131072): its loads bind the split
// (probe_split), which mla_split_ring and mla_split_qreg_fp8 take on.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_qreg(const u16* __restrict__ qa,
                                                                    const u16* __restrict__ cache,
                                                                    const i64* __restrict__ pos, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc, int skip_empty) {
    mla_split_mma_body<false, u16, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_qreg for programmatic dependent launch (attention=cupy_splitk_bf16_qreg_active_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_qreg_pdl(const u16* __restrict__ qa,
                                                                        const u16* __restrict__ cache,
                                                                        const i64* __restrict__ pos, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc,
                                                                        int skip_empty) {
    mla_split_mma_body<true, u16, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_qreg over an fp8 cache (attention=cupy_splitk_fp8_qreg_active_pdl): mla_split_mma_fp8's conversion of each
// tile into the bf16 tile the products read, with three fp8 stages where mla_split_mma_fp8 has two (the third where the
// queries were: 36864 of its 37376 bytes), so two tiles stream in while one is computed. Why: GPU session 55's
// probe_split timed the one-group split's loads alone at 59.0 of its 64.6 us at 131072 rows, with one 64-row tile in
// flight an SM; an fp8 tile is half the bytes, so with one in flight the fp8 split moved half the bytes a second and
// gained x1.02 (session 53). Two in flight are the bf16 split's bytes in flight for half its bytes. QF8_SMEM_BYTES.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_qreg_fp8(const u16* __restrict__ qa,
                                                                        const u8* __restrict__ cache,
                                                                        const i64* __restrict__ pos, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc,
                                                                        int skip_empty) {
    mla_split_mma_body<false, u8, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_qreg_fp8 for programmatic dependent launch (attention=cupy_splitk_fp8_qreg_active_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_qreg_fp8_pdl(const u16* __restrict__ qa,
                                                                            const u8* __restrict__ cache,
                                                                            const i64* __restrict__ pos, i64 Lmax,
                                                                            float* __restrict__ part_m,
                                                                            float* __restrict__ part_l,
                                                                            float* __restrict__ part_acc,
                                                                            int skip_empty) {
    mla_split_mma_body<true, u8, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_mma with each tile's rows prefetched into the L2 a tile ahead of their copies (L2PF, mma_prefetch_l2:
// attention=cupy_splitk_bf16_l2pf_active_pdl). The same copies and arithmetic: the one-group split's bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_l2pf(const u16* __restrict__ qa,
                                                                    const u16* __restrict__ cache,
                                                                    const i64* __restrict__ pos, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc, int skip_empty) {
    mla_split_mma_body<false, u16, false, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_l2pf for programmatic dependent launch (attention=cupy_splitk_bf16_l2pf_active_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_l2pf_pdl(const u16* __restrict__ qa,
                                                                        const u16* __restrict__ cache,
                                                                        const i64* __restrict__ pos, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc,
                                                                        int skip_empty) {
    mla_split_mma_body<true, u16, false, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc, skip_empty);
}

// mla_split_qreg with its tiles in a ring of five 32-row slots, the fifth the queries' bytes (RING: ring_slot,
// ring_load_half), so one and a half tiles stream in while one is computed where shared memory holds one 64-row tile
// in flight (attention=cupy_splitk_bf16_ring_active_pdl). Why: GPU session 55's probe_split timed the one-group
// split's loads alone at 59.0 of its 64.6 us at 131072 rows, one tile in flight an SM. The same arithmetic on the
// same rows as mla_split_qreg: its bits. QF8_SMEM_BYTES of shared memory.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_ring(const u16* __restrict__ qa,
                                                                    const u16* __restrict__ cache,
                                                                    const i64* __restrict__ pos, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc, int skip_empty) {
    mla_split_mma_body<false, u16, false, true, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc,
                                                             skip_empty);
}

// mla_split_ring for programmatic dependent launch (attention=cupy_splitk_bf16_ring_active_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_ring_pdl(const u16* __restrict__ qa,
                                                                        const u16* __restrict__ cache,
                                                                        const i64* __restrict__ pos, i64 Lmax,
                                                                        float* __restrict__ part_m,
                                                                        float* __restrict__ part_l,
                                                                        float* __restrict__ part_acc,
                                                                        int skip_empty) {
    mla_split_mma_body<true, u16, false, true, false, true>(qa, cache, pos, Lmax, part_m, part_l, part_acc,
                                                            skip_empty);
}

// ---- combine and up-projection ---------------------------------------------------------------------------

// part_* [S, T, N, ...] -> obar f32 [T, N, Lkv]. Grid (N, T, ceil(Lkv/32)), 256 threads; S <= 1024.
// Each block merges 32 latent dims of one head: warp w sums slices w, w+8, ... (lane = dim), then the
// eight partial sums are added in warp order.
// skip_empty: the sums are read only up to the last slice that holds rows (m > -inf; slice_rows makes the empty ones a
// tail). An empty slice's term would be fmaf(0, 0, sum) = sum (the sum starts at +0 and never becomes -0), so the
// result is the same bits, and its sums (not written by mla_split_mma's skip_empty) stay unread. The loop bound is the
// only change: session 18's first form tested each slice's weight inside the loop, which cost its unrolled loads
// (41.5 against 39.1 us a layer at L = 32768).
// UNROLL: the slices' loop unrolled that many times (4: the plain form, ~4 loads in flight a lane over ~17 slices at
// S = 132; 16, the deep form); the slices are added in the same order either way (the same bits)
// PDL: launched with programmatic dependent launch (cupy_splitk_bf16_deep_pdl): the next kernel let start, then the
// wait, before the split's partials are read
template <int UNROLL, bool PDL = false>
__device__ __forceinline__ void mla_combine_body(const float* __restrict__ part_m, const float* __restrict__ part_l,
                                                 const float* __restrict__ part_acc, int S, int T, int N, int Lkv,
                                                 float* __restrict__ obar, int skip_empty) {
    __shared__ float sw[1024];
    __shared__ float red[8][33];
    __shared__ int held[8];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if constexpr (PDL) {
        pdl_launch_dependents();
        pdl_wait();
    }
    float M = NEG_INF;
    int last = -1;  // the last slice holding rows
    for (int s = tid; s < S; s += 256) {
        const float m = part_m[((i64)s * T + t) * N + h];
        M = fmaxf(M, m);
        if (m != NEG_INF) last = s;
    }
    M = warp_max(M);
    last = __reduce_max_sync(0xffffffffu, last);
    if (lane == 0) {
        red[warp][32] = M;
        held[warp] = last;
    }
    __syncthreads();
    M = red[0][32];
    for (int w = 1; w < 8; ++w) M = fmaxf(M, red[w][32]);
    for (int w = 0; w < 8; ++w) last = max(last, held[w]);
    const int S_read = skip_empty ? last + 1 : S;
    float den = 0.0f;
    for (int s = tid; s < S; s += 256) {
        const i64 o = ((i64)s * T + t) * N + h;
        const float m = part_m[o];
        const float wgt = m == NEG_INF ? 0.0f : exp2f(m - M);
        sw[s] = wgt;
        den = fmaf(wgt, part_l[o], den);
    }
    den = warp_sum(den);
    __syncthreads();  // everyone has read red[.][32] and written sw
    if (lane == 0) red[warp][32] = den;
    const int j = blockIdx.z * 32 + lane;
    float acc = 0.0f;
    if (j < Lkv) {
#pragma unroll UNROLL
        for (int s = warp; s < S_read; s += 8) acc = fmaf(sw[s], part_acc[(((i64)s * T + t) * N + h) * Lkv + j], acc);
    }
    red[warp][lane] = acc;
    __syncthreads();
    if (warp != 0 || j >= Lkv) return;
    float total = 0.0f, dsum = 0.0f;
    for (int w = 0; w < 8; ++w) {
        total += red[w][lane];
        dsum += red[w][32];
    }
    obar[((i64)t * N + h) * Lkv + j] = total / dsum;
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) mla_combine(const float* __restrict__ part_m,
                                                              const float* __restrict__ part_l,
                                                              const float* __restrict__ part_acc, int S, int T,
                                                              int N, int Lkv, float* __restrict__ obar,
                                                              int skip_empty) {
    mla_combine_body<4>(part_m, part_l, part_acc, S, T, N, Lkv, obar, skip_empty);
}

// mla_combine with 16 slices' sums in flight a lane (attention=cupy_splitk_bf16_deep): the 48B's combine reads 8.6 MB
// of float32 sums a layer (132 slices x 32 heads x 512) and took 5.3 us in session 21's diagnosis. The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) mla_combine_deep(const float* __restrict__ part_m,
                                                            const float* __restrict__ part_l,
                                                            const float* __restrict__ part_acc, int S, int T, int N,
                                                            int Lkv, float* __restrict__ obar, int skip_empty) {
    mla_combine_body<16>(part_m, part_l, part_acc, S, T, N, Lkv, obar, skip_empty);
}

// mla_combine_deep for programmatic dependent launch (attention=cupy_splitk_bf16_deep_pdl). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) mla_combine_deep_pdl(const float* __restrict__ part_m,
                                                                const float* __restrict__ part_l,
                                                                const float* __restrict__ part_acc, int S, int T,
                                                                int N, int Lkv, float* __restrict__ obar,
                                                                int skip_empty) {
    mla_combine_body<16, true>(part_m, part_l, part_acc, S, T, N, Lkv, obar, skip_empty);
}

// o [T, N, Dv] (o_dt) = w_uv [N, Dv, Lkv] . obar [T, N, Lkv]; NaN everywhere when pos + T runs past the
// cache (the host cannot check it without reading pos). Grid (N, ceil(Dv/8), T), 256 threads.
// DEEP: 0 (the loop over j unrolled 8 times: two round trips a warp at Lkv = 512), or Lkv / 32 (Kimi-Linear's 16):
// the warp's DEEP weights and DEEP obar values all requested before its products, added in the same j order (the
// same bits; the host launches it only for that Lkv). PDL (with DEEP only): the warp's weights requested first, then
// the next kernel (the o_proj GEMV) let start and the wait, then obar and pos (the combine's, the step's) as ever.
template <int DEEP, bool PDL = false>
__device__ __forceinline__ void mla_up_body(const float* __restrict__ obar, const float* __restrict__ w_uv, int T,
                                            int N, int Dv, int Lkv, void* __restrict__ out, int o_dt,
                                            const i64* __restrict__ pos, i64 Lmax) {
    const int h = blockIdx.x, t = blockIdx.z, lane = threadIdx.x & 31;
    const int v = blockIdx.y * 8 + (threadIdx.x >> 5);
    if constexpr (PDL) {
        static_assert(DEEP > 0, "the PDL up projection is the deep one");
        if (v >= Dv) {  // a warp past the end loads nothing, but lets the next kernel start and waits like the rest
            pdl_launch_dependents();
            pdl_wait();
            return;
        }
    } else {
        if (v >= Dv) return;
    }
    const float* w = w_uv + ((i64)h * Dv + v) * Lkv;
    const float* x = obar + ((i64)t * N + h) * Lkv;
    float acc = 0.0f;
    if constexpr (DEEP > 0) {
        float wv[DEEP], xv[DEEP];
#pragma unroll
        for (int i = 0; i < DEEP; ++i) wv[i] = PDL ? __ldcg(w + lane + 32 * i) : __ldg(w + lane + 32 * i);
        if constexpr (PDL) {
            pdl_launch_dependents();
            pdl_wait();  // obar is the combine's
        }
#pragma unroll
        for (int i = 0; i < DEEP; ++i) xv[i] = x[lane + 32 * i];
#pragma unroll
        for (int i = 0; i < DEEP; ++i) acc = fmaf(wv[i], xv[i], acc);
    } else {
#pragma unroll 8
        for (int j = lane; j < Lkv; j += 32) acc = fmaf(w[j], x[j], acc);
    }
    acc = warp_sum(acc);
    const i64 p0 = read_pos<PDL>(pos);
    if (p0 < 0 || p0 + T > Lmax) acc = QNAN;
    if (lane == 0) store_act(out, ((i64)t * N + h) * Dv + v, o_dt, acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) mla_up(const float* __restrict__ obar,
                                                         const float* __restrict__ w_uv, int T, int N, int Dv,
                                                         int Lkv, void* __restrict__ out, int o_dt,
                                                         const i64* __restrict__ pos, i64 Lmax) {
    mla_up_body<0>(obar, w_uv, T, N, Dv, Lkv, out, o_dt, pos, Lmax);
}

// mla_up for Lkv = 512 (Kimi-Linear's), each warp's 16 weights and 16 obar values in flight at once (mla_up_body;
// attention=cupy_splitk_bf16_deep, with mla_absorb_deep). The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) mla_up_deep(const float* __restrict__ obar, const float* __restrict__ w_uv,
                                                       int T, int N, int Dv, int Lkv, void* __restrict__ out,
                                                       int o_dt, const i64* __restrict__ pos, i64 Lmax) {
    mla_up_body<16>(obar, w_uv, T, N, Dv, Lkv, out, o_dt, pos, Lmax);
}

// mla_up_deep for programmatic dependent launch (attention=cupy_splitk_bf16_deep_pdl): its 16 weights a lane requested
// before the wait. The same bits.
// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) mla_up_deep_pdl(const float* __restrict__ obar,
                                                           const float* __restrict__ w_uv, int T, int N, int Dv,
                                                           int Lkv, void* __restrict__ out, int o_dt,
                                                           const i64* __restrict__ pos, i64 Lmax) {
    mla_up_body<16, true>(obar, w_uv, T, N, Dv, Lkv, out, o_dt, pos, Lmax);
}
