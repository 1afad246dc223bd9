// linear_q6k_x16.cu: one token times a Q6_K weight (the 48B's lm_head, 163840 x 2304, 310 MB) with integer dot
// products on activations held to 16 bits, for decode (the GEMV of linear=cupy_x16_pdl).
//
// Why. The step's lm_head ran linear=cupy_float at 151 us a token for 310 MB (49% of the read ceiling), and its float
// chunk loop is 219 SASS instructions for 32 weights (6.8 a weight), the whole issue budget of the read (GPU session
// 28). __dp4a makes 4 products an instruction, but session 6's gate refused int8 activations for the linears (top-1
// 0.75 at depth 1). So here x is quantized to 16 bits and split into two int8 planes: each dot is two __dp4a, one a
// plane; x is within ~1.5e-5 of each 16-group's largest value (an nmse of ~2e-10 at the lm_head's width: over the
// float row of the tolerances, 1e-10, far inside the bf16 row, 5e-4), at about half the float loop's instructions.
//
// Two launches:
// 1. q6k_x16_quantize: x [K] (dtype x_dt) -> xq16, 2.5 K bytes: per group of 16 values (the weight's scale group)
//    s = amax / 32512 and q = rint(x / s) in [-32512, 32512], split q = 256 hi + lo with hi in [-127, 127] and lo in
//    [-128, 127]; c = 32 * sum(q) (the codes are stored biased by +32). Layout: hi [K] i8, lo [K] i8, s [K/16] f32,
//    c [K/16] i32. A group whose amax is not finite gets s = NaN (so y is NaN, as a float GEMV's would be). One
//    block; each thread a group. It lets the GEMV be scheduled at its start (PDL), so the GEMV's first blocks copy
//    their rows while it runs.
// 2. q6k_x16_gemv<ROWS, THREADS>: a block's ROWS consecutive rows copied whole into shared memory (cp.async of the
//    16-byte-aligned span around them: Q6_K rows of 210-byte blocks are only 2-byte aligned), then, after the PDL
//    wait, xq16. A "unit" is 64 weights of a super-block: its half h and quarter j, which share 16 ql bytes a pair and
//    16 qh bytes (ggml's dequantize_row_q6_K layout); the block's ROWS x K / 64 units are dealt to its threads in
//    turn, row fastest, each unit's sum (float) into shared memory; then a warp a row adds its units in a fixed order. Every form
//    (ROWS, THREADS) computes each unit and each row's sum the same way: the same bits.
//    y [N] in dtype y_dt. grid ceil(N / ROWS). Needs N * row_bytes a multiple of 16 (the span's end) and K a
//    multiple of 256.
#include "common.cuh"

#define Q6K_BYTES 210
#define X16_MAX 32512.0f

// ---- 1. the activations, 16 bits a value in two int8 planes ------------------------------------------------------

// xq16 byte offsets for K inputs: hi, lo, s, c (each a multiple of 16 for K a multiple of 256)
__device__ __forceinline__ int x16_lo(int K) { return K; }
__device__ __forceinline__ int x16_s(int K) { return 2 * K; }
__device__ __forceinline__ int x16_c(int K) { return 2 * K + 4 * (K >> 4); }
__device__ __forceinline__ int x16_bytes(int K) { return 2 * K + 8 * (K >> 4); }

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) q6k_x16_quantize(const void* __restrict__ x, int x_dt, int K,
                                                                     u8* __restrict__ xq16) {
    pdl_launch_dependents();  // the GEMV may be scheduled now: it copies its rows, then waits for this kernel
    i8* hi = (i8*)xq16;
    i8* lo = (i8*)(xq16 + x16_lo(K));
    float* s = (float*)(xq16 + x16_s(K));
    int* c = (int*)(xq16 + x16_c(K));
    for (int g = threadIdx.x; g < (K >> 4); g += blockDim.x) {
        float v[16], amax = 0.0f;
        bool nan = false;  // a NaN or an inf among the 16 (fmaxf alone would drop a NaN)
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            v[i] = load_act(x, 16 * g + i, x_dt);
            amax = fmaxf(amax, fabsf(v[i]));
            nan |= !isfinite(v[i]);
        }
        const float inv = amax > 0.0f && !nan ? __fdiv_rn(X16_MAX, amax) : 0.0f;
        int sum = 0;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            int q = nan ? 0 : __float2int_rn(__fmul_rn(v[i], inv));
            q = max(-32512, min(32512, q));
            const int h = (q + 128) >> 8;  // arithmetic: floor((q + 128) / 256)
            hi[16 * g + i] = (i8)h;
            lo[16 * g + i] = (i8)(q - 256 * h);
            sum += q;
        }
        s[g] = nan ? QNAN : __fdiv_rn(amax, X16_MAX);
        c[g] = 32 * sum;
    }
}

// ---- 2. the GEMV ------------------------------------------------------------------------------------------------

// 16 bytes at byte offset off (2-byte aligned) of the shared-memory words sm: the 5 words around them, funnel-shifted
// into place (offsets, not pointers, so that ptxas keeps them shared-memory loads)
__device__ __forceinline__ uint4 lds16_a2(const u32* sm, int off) {
    const u32* w = sm + (off >> 2);
    const u32 sh = (u32)(off & 3) * 8u;
    const u32 w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4];
    return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh), __funnelshift_r(w2, w3, sh),
                      __funnelshift_r(w3, w4, sh));
}

// 8 bytes at byte offset off (2-byte aligned) of sm, as two words
__device__ __forceinline__ void lds8_a2(const u32* sm, int off, u32& a, u32& b) {
    const u32* w = sm + (off >> 2);
    const u32 sh = (u32)(off & 3) * 8u;
    const u32 w0 = w[0], w1 = w[1], w2 = w[2];
    a = __funnelshift_r(w0, w1, sh);
    b = __funnelshift_r(w1, w2, sh);
}

// the biased 6-bit codes (0..63) of 4 consecutive weights of group m: ql word a (m = 0, 2) or b (m = 1, 3), qh word
__device__ __forceinline__ int q6_codes(u32 a, u32 b, u32 qh, int m) {
    const u32 lo4 = 0x0F0F0F0Fu, hi2 = 0x30303030u;
    switch (m) {
        case 0: return (int)((a & lo4) | ((qh << 4) & hi2));
        case 1: return (int)((b & lo4) | ((qh << 2) & hi2));
        case 2: return (int)(((a >> 4) & lo4) | (qh & hi2));
        default: return (int)(((b >> 4) & lo4) | ((qh >> 2) & hi2));
    }
}

// One unit: the 64 weights of the super-block at byte offset blk of the shared words sm, at half h, quarter j - its groups m = 0..3 are the
// weights 128 h + 32 m + 16 j + [0, 16), with scales sc[8 h + j + 2 m] - dotted with x from x index x0 = 256 sb +
// 128 h + 16 j on. Per group the integer sum t = 256 (codes . hi) + (codes . lo) - c_g is exact (|t| < 2^24), then
// sum_m (sc_m s_g) t_m in float, times the super-block's d.
__device__ __forceinline__ float q6k_x16_unit(const u32* sm, int blk, int h, int j, const i8* __restrict__ xh,
                                              const i8* __restrict__ xl, const float* __restrict__ xs,
                                              const int* __restrict__ xc, int x0) {
    const uint4 qa = lds16_a2(sm, blk + 64 * h + 16 * j);
    const uint4 qb = lds16_a2(sm, blk + 64 * h + 32 + 16 * j);
    const uint4 qh = lds16_a2(sm, blk + 128 + 32 * h + 16 * j);
    u32 s0, s1;
    lds8_a2(sm, blk + 192 + 8 * h, s0, s1);  // sc[8 h .. 8 h + 8)
    const float d = f16_to_f32(((const u16*)sm)[(blk + 208) >> 1]);
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int xi = x0 + 32 * m;
        const int4 hv = *(const int4*)(xh + xi), lv = *(const int4*)(xl + xi);
        int A = 0, B = 0, c;
        c = q6_codes(qa.x, qb.x, qh.x, m);
        A = __dp4a(c, hv.x, A);
        B = __dp4a(c, lv.x, B);
        c = q6_codes(qa.y, qb.y, qh.y, m);
        A = __dp4a(c, hv.y, A);
        B = __dp4a(c, lv.y, B);
        c = q6_codes(qa.z, qb.z, qh.z, m);
        A = __dp4a(c, hv.z, A);
        B = __dp4a(c, lv.z, B);
        c = q6_codes(qa.w, qb.w, qh.w, m);
        A = __dp4a(c, hv.w, A);
        B = __dp4a(c, lv.w, B);
        const int g = xi >> 4;
        const int t = A * 256 + B - xc[g];
        const int sc = (int)(i8)(((m < 2 ? s0 : s1) >> (8 * (j + 2 * (m & 1)))) & 0xffu);
        acc = __fmaf_rn(__fmul_rn((float)sc, xs[g]), (float)t, acc);
    }
    return __fmul_rn(d, acc);
}

// xq16 is q6k_x16_quantize's output; w [N, K] Q6_K rows of row_bytes = K / 256 * 210. Shared memory:
// x16_bytes(K), ROWS * K / 64 float unit sums, then ROWS rows (+ 32 bytes of alignment slack).
template <int ROWS, int THREADS>
__device__ __forceinline__ void q6k_x16_gemv(const u8* __restrict__ xq16, const u8* __restrict__ w, i64 row_bytes,
                                             int K, int N, void* __restrict__ y, int y_dt) {
    static_assert(ROWS == 16 || ROWS == 32, "a power of two, a warp's lanes at most");
    extern __shared__ __align__(16) u8 x16_smem[];
    const int xbytes = x16_bytes(K), upr = K >> 6;  // 4 units a super-block
    const i8* xh = (const i8*)x16_smem;
    const i8* xl = (const i8*)(x16_smem + x16_lo(K));
    const float* xs = (const float*)(x16_smem + x16_s(K));
    const int* xc = (const int*)(x16_smem + x16_c(K));
    float* part = (float*)(x16_smem + xbytes);          // [upr, ROWS]
    u8* sw = (u8*)(part + ROWS * upr);                   // 16-byte aligned: upr * 4 * ROWS is a multiple of 16
    const int tid = threadIdx.x, lane = tid & 31;
    const i64 r0 = (i64)blockIdx.x * ROWS;
    const int rows = (int)min((i64)ROWS, (i64)N - r0);
    const u8* start = w + r0 * row_bytes;
    const u8* a0 = (const u8*)((size_t)start & ~(size_t)15);
    const int lead = (int)(start - a0);
    const int chunks = (lead + rows * (int)row_bytes + 15) >> 4;
    const u32 dw = smem_addr(sw);
    for (int i = tid; i < chunks; i += THREADS) cp_async16(dw + 16u * i, a0 + 16 * (i64)i, 16);
    cp_async_commit();
    pdl_wait();  // xq16: the quantize kernel's output
    pdl_launch_dependents();
    const u32 dx = smem_addr(x16_smem);
    for (int i = tid; i < (xbytes >> 4); i += THREADS) cp_async16(dx + 16u * i, xq16 + 16 * i, 16);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    // unit u is row u % ROWS's unit u / ROWS: a warp's lanes take one or two units of many rows, so their reads of
    // x are one or two addresses (broadcasts), and their weight reads fall on distinct banks (rows 1890 bytes apart)
    for (int u = tid; u < ROWS * upr; u += THREADS) {
        const int row = u & (ROWS - 1), ur = u / ROWS, sb = ur >> 2, h = (ur >> 1) & 1, j = ur & 1;
        if (row >= rows) continue;
        const int blk = lead + row * (int)row_bytes + sb * Q6K_BYTES;
        part[u] = q6k_x16_unit((const u32*)sw, blk, h, j, xh, xl, xs, xc, 256 * sb + 128 * h + 16 * j);
    }
    __syncthreads();
    for (int row = tid >> 5; row < rows; row += THREADS >> 5) {  // a warp a row: its units in order, then a butterfly
        float v = 0.0f;
        for (int i = lane; i < upr; i += 32) v = __fadd_rn(v, part[i * ROWS + row]);
        v = warp_sum(v);
        if (lane == 0) store_act(y, r0 + row, y_dt, v);
    }
}

// The forms (linear.py's X16_FORMS): rows a block x threads a block. 16 x 96 puts the 48B's 576 units of a block
// six to a thread; the others trade units a thread for warps an SM (shared memory: ~38 KB a block at 16 rows, ~70 KB
// at 32).
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(96) linear_q6_k_x16pdl_r16t96(const u8* __restrict__ xq16,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y,
                                                                           int y_dt) {
    q6k_x16_gemv<16, 96>(xq16, w, row_bytes, K, N, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(192) linear_q6_k_x16pdl_r16t192(const u8* __restrict__ xq16,
                                                                            const u8* __restrict__ w, i64 row_bytes,
                                                                            int K, int N, void* __restrict__ y,
                                                                            int y_dt) {
    q6k_x16_gemv<16, 192>(xq16, w, row_bytes, K, N, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(192) linear_q6_k_x16pdl_r32t192(const u8* __restrict__ xq16,
                                                                            const u8* __restrict__ w, i64 row_bytes,
                                                                            int K, int N, void* __restrict__ y,
                                                                            int y_dt) {
    q6k_x16_gemv<32, 192>(xq16, w, row_bytes, K, N, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(384) linear_q6_k_x16pdl_r32t384(const u8* __restrict__ xq16,
                                                                            const u8* __restrict__ w, i64 row_bytes,
                                                                            int K, int N, void* __restrict__ y,
                                                                            int y_dt) {
    q6k_x16_gemv<32, 384>(xq16, w, row_bytes, K, N, y, y_dt);
}
