// linear_floatrow.cu: the one-token GEMV of decode for float weights (F16, BF16, F32), built like the row-warp Q4_K
// GEMV (linear_rowwarp.cu): a row's weight bytes requested before any is used, no split-K, no second pass.
//
// Why. The 48B's q4_k_m mix keeps KDA's low-rank gates and beta in F16: per KDA layer one [288, 2304] GEMV (f_a, g_a,
// beta stacked by fuse_projections) and two [4096, 128] (f_b, g_b), 60 launches a token. Session 13's diagnosis of the
// decode step timed them at 0.156 ms a token, 2.6 us each for 0.4-1.3 MB: the latency of the Triton GEMV, not bytes.
//
// Layout. LPR lanes own a row (8 or 32: short rows such as f_b's 256 bytes take 8, so a warp holds 4 rows); lane s
// of a row loads its 16-byte vectors s, s + LPR, ..., up to 8 or 12 at a time (all requested before the first is used),
// multiplies each with the activations at the same positions (read through L1: every row of the block wants them),
// and the row's lanes add their sums with shuffles. Float32 products and sums: the reference's arithmetic, another
// order of the sums. 128 threads a block.
#include "common.cuh"

// vectors of 16 bytes a lane has in flight at once: 12 for rows of 32 lanes (a row of 2304 F16 weights is 9 a lane,
// one trip), 8 for rows of 8 lanes
#define FR_INFLIGHT(LPR) ((LPR) == 32 ? 12 : 8)

// the activations of elements e..e+n (n = 8 or 4, e a multiple of n) as float32
__device__ __forceinline__ void fr_acts(const void* __restrict__ x, int xdt, i64 e, int n, float* v) {
    if (xdt == DT_F32) {
        const float4* p = (const float4*)((const float*)x + e);
        for (int i = 0; i < n / 4; ++i) {
            const float4 f = __ldg(p + i);
            v[4 * i] = f.x;
            v[4 * i + 1] = f.y;
            v[4 * i + 2] = f.z;
            v[4 * i + 3] = f.w;
        }
    } else {
        const u16* p = (const u16*)x + e;
        if (n == 8) {
            const uint4 u = __ldg((const uint4*)p);
            const u32 w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[2 * i] = xdt == DT_BF16 ? bf16_to_f32((u16)(w[i] & 0xffffu)) : f16_to_f32((u16)(w[i] & 0xffffu));
                v[2 * i + 1] = xdt == DT_BF16 ? bf16_to_f32((u16)(w[i] >> 16)) : f16_to_f32((u16)(w[i] >> 16));
            }
        } else {
            const uint2 u = __ldg((const uint2*)p);
            const u32 w[2] = {u.x, u.y};
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                v[2 * i] = xdt == DT_BF16 ? bf16_to_f32((u16)(w[i] & 0xffffu)) : f16_to_f32((u16)(w[i] & 0xffffu));
                v[2 * i + 1] = xdt == DT_BF16 ? bf16_to_f32((u16)(w[i] >> 16)) : f16_to_f32((u16)(w[i] >> 16));
            }
        }
    }
}

// one 16-byte vector of weights (WDT) dotted with its activations
template <int WDT>
__device__ __forceinline__ float fr_dot(uint4 u, const void* __restrict__ x, int xdt, i64 e) {
    float a[8];
    const u32 w[4] = {u.x, u.y, u.z, u.w};
    float s = 0.0f;
    if (WDT == DT_F32) {
        fr_acts(x, xdt, e, 4, a);
#pragma unroll
        for (int i = 0; i < 4; ++i) s = fmaf(__uint_as_float(w[i]), a[i], s);
    } else {
        fr_acts(x, xdt, e, 8, a);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float lo = WDT == DT_BF16 ? bf16_to_f32((u16)(w[i] & 0xffffu)) : f16_to_f32((u16)(w[i] & 0xffffu));
            const float hi = WDT == DT_BF16 ? bf16_to_f32((u16)(w[i] >> 16)) : f16_to_f32((u16)(w[i] >> 16));
            s = fmaf(lo, a[2 * i], s);
            s = fmaf(hi, a[2 * i + 1], s);
        }
    }
    return s;
}

// y[row] = x . W[row] for one token: x [K] (dtype xdt, 16-byte aligned), w [N, row_bytes] of WDT (row_bytes = K times
// the element size, a multiple of 16, 16-byte aligned), y [N] in x's dtype. grid ceil(N / (4 * 32 / LPR)).
template <int WDT, int LPR>
__device__ __forceinline__ void floatrow(const void* __restrict__ x, int xdt, const u8* __restrict__ w, i64 row_bytes,
                                         int N, void* __restrict__ y) {
    const int lane = threadIdx.x & 31, sub = lane % LPR;
    const i64 row = ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * (32 / LPR) + lane / LPR;
    const bool ok = row < N;  // lanes past the end read row N - 1 and write nothing (their shuffles still run)
    const uint4* r = (const uint4*)(w + (ok ? row : (i64)N - 1) * row_bytes);
    const int nvec = (int)(row_bytes >> 4), per = WDT == DT_F32 ? 4 : 8;  // vectors a row, elements a vector
    float acc = 0.0f;
    constexpr int INF = FR_INFLIGHT(LPR);
    for (int g = sub; g < nvec; g += LPR * INF) {
        uint4 u[INF];
#pragma unroll
        for (int i = 0; i < INF; ++i)  // every load of the group first
            if (g + i * LPR < nvec) u[i] = __ldcs(r + g + i * LPR);
#pragma unroll
        for (int i = 0; i < INF; ++i)
            if (g + i * LPR < nvec) acc += fr_dot<WDT>(u[i], x, xdt, (i64)(g + i * LPR) * per);
    }
#pragma unroll
    for (int m = LPR / 2; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    if (sub == 0 && ok) store_act(y, row, xdt, acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_floatrow8_f32(const void* __restrict__ x, int xdt,
                                                                      const u8* __restrict__ w, i64 row_bytes, int N,
                                                                      void* __restrict__ y) {
    floatrow<DT_F32, 8>(x, xdt, w, row_bytes, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_floatrow8_bf16(const void* __restrict__ x, int xdt,
                                                                       const u8* __restrict__ w, i64 row_bytes, int N,
                                                                       void* __restrict__ y) {
    floatrow<DT_BF16, 8>(x, xdt, w, row_bytes, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_floatrow8_f16(const void* __restrict__ x, int xdt,
                                                                      const u8* __restrict__ w, i64 row_bytes, int N,
                                                                      void* __restrict__ y) {
    floatrow<DT_F16, 8>(x, xdt, w, row_bytes, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_floatrow32_f32(const void* __restrict__ x, int xdt,
                                                                       const u8* __restrict__ w, i64 row_bytes, int N,
                                                                       void* __restrict__ y) {
    floatrow<DT_F32, 32>(x, xdt, w, row_bytes, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_floatrow32_bf16(const void* __restrict__ x, int xdt,
                                                                        const u8* __restrict__ w, i64 row_bytes,
                                                                        int N, void* __restrict__ y) {
    floatrow<DT_BF16, 32>(x, xdt, w, row_bytes, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_floatrow32_f16(const void* __restrict__ x, int xdt,
                                                                       const u8* __restrict__ w, i64 row_bytes, int N,
                                                                       void* __restrict__ y) {
    floatrow<DT_F16, 32>(x, xdt, w, row_bytes, N, y);
}
