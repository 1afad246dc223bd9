// moe_iq1s_q8.cu: one token's IQ1_S experts on Q8 activations ("cupy_rowwarp_pdl_q8_iq1s", written in session 50):
// the gate/up of the K routed experts and the shared one, then their down, two launches with PDL.
//
// Why. The IQ1_S step's experts run on triton_prefetch (session 25's fix: the step's one-token Q4_K expert kernels pass
// every other type to the torch plugin's float32 path, 6.5 tok/s), a float kernel of the ladder's early sessions;
// the Q4_K experts gained most in the ladder from Q8 activations and __dp4a (session 27: x1.157 in the step). This is
// the GEMV of linear_iq1s_q8.cu for the experts: rows copied whole into shared memory (16 a block, an octet a row), the
// activations quantized once a block to Q8 (q4k_q8.cuh's q8_stage), iq1s_q8.cuh's dots.
//
// gate/up: block b takes hidden rows 16 b .. 16 b + 15 of h [K F + Fs] (slot b / (F / 16) for the routed ones, then the
// shared expert's): those 16 gate and 16 up rows (one contiguous range each, 16-byte aligned: 16 rows are 800 bytes a
// super-block), x staged, h = silu(gate . x) * (up . x) in float32. The shared expert's blocks copy their rows before
// the PDL wait (known weights), the routed ones after it (the router's ids are the kernel before's output).
// down: block b takes outputs 16 b .. 16 b + 15: the shared expert's 16 down rows copied before the wait, each slot's
// expert's 16 after it; h staged to Q8 as x is (its K F + Fs values, slot s's from s F on); y = sum over slots of
// weight_s (down_s . h_s), then the shared expert's, each lane's partial sums in that order, then the octet's sum.
// An expert id outside [0, E) reads expert 0's rows and makes its hidden rows (so the output) NaN, as the other
// implementations do. Deterministic: each output is one octet's sum in a fixed order.
#include "moe_iq1s_common.cuh"

// x [D] (dtype DT), ids [K] int64, w_gate / w_up [E, F, D] IQ1_S, s_gate / s_up [Fs, D] (null when Fs = 0), h [K F +
// Fs] float32; D a multiple of 256, F and Fs multiples of 16. Shared memory: D code bytes, D / 32 float scales, D / 16
// int sums of 16, then 16 gate rows and 16 up rows. 128 threads; grid (K F + Fs) / 16.
template <int DT>
__device__ __forceinline__ void gateup_q8_iq1_s(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                                int F, int Fs, int D, const u8* __restrict__ w_gate,
                                                const u8* __restrict__ w_up, const u8* __restrict__ s_gate,
                                                const u8* __restrict__ s_up, float* __restrict__ h,
                                                const uint2* __restrict__ grid) {
    extern __shared__ __align__(16) u8 mq_smem[];
    i8* xq = (i8*)mq_smem;
    float* dx = (float*)(mq_smem + D);
    int* s16 = (int*)(dx + (D >> 5));
    const int nsb = D >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 rb = (i64)nsb * IQ1S_SBB;
    u8* sg = (u8*)(s16 + (D >> 4));  // 16-byte aligned: D is a multiple of 256
    u8* su = sg + 16 * rb;
    const i64 R0 = (i64)blockIdx.x * 16;
    const bool shared = R0 >= (i64)K * F;
    bool valid = true;
    if (shared) {  // the shared expert's rows: known before the router is done
        const i64 r0 = R0 - (i64)K * F;
        iq1s_copy_range(s_gate + r0 * rb, 16 * rb, sg);
        iq1s_copy_range(s_up + r0 * rb, 16 * rb, su);
        cp_async_commit();
    }
    pdl_launch_dependents();
    pdl_wait();  // x and ids are the kernels' before output; h may still be the last down's input
    if (!shared) {
        const int s = (int)(R0 / F);
        const i64 e = iq_expert(ids, s, E, valid), r0 = e * F + (R0 - (i64)s * F);
        iq1s_copy_range(w_gate + r0 * rb, 16 * rb, sg);
        iq1s_copy_range(w_up + r0 * rb, 16 * rb, su);
        cp_async_commit();
    }
    q8_stage<DT>(x, D, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + (lane >> 3);  // the block's octet, 0..15: its hidden row
    const float g = iq1s_octet_sum(iq1s_q8_row(sg + local * rb, nsb, o, xq, dx, s16, 0, grid));
    const float u = iq1s_octet_sum(iq1s_q8_row(su + local * rb, nsb, o, xq, dx, s16, 0, grid));
    if (o == 0) h[R0 + local] = valid ? iq_silu(g) * u : QNAN;
}

// h [K F + Fs] float32 (gate/up's), ids [K] int64, weights [K] float32, w_down [E, D, F] IQ1_S, s_down [D, Fs] (null
// when Fs = 0), y [D] (dtype DT); F and Fs multiples of 256, K <= moe_experts_iq1s.MAX_K. Shared memory: K F + Fs code
// bytes, its / 32 float scales and / 16 int sums, then 16 shared-expert rows and K slots' 16 rows. 128 threads; grid
// ceil(D / 16).
template <int DT>
__device__ __forceinline__ void down_q8_iq1_s(const float* __restrict__ h, const i64* __restrict__ ids,
                                              const float* __restrict__ weights, int K, int E, int F, int Fs, int D,
                                              const u8* __restrict__ w_down, const u8* __restrict__ s_down,
                                              void* __restrict__ y, const uint2* __restrict__ grid) {
    extern __shared__ __align__(16) u8 mq_smem[];
    const int H = K * F + Fs;  // the hidden vector's length
    i8* xq = (i8*)mq_smem;
    float* dx = (float*)(mq_smem + H);
    int* s16 = (int*)(dx + (H >> 5));
    const int nf = F >> 8, nfs = Fs >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 rb = (i64)nf * IQ1S_SBB, rbs = (i64)nfs * IQ1S_SBB, r0 = (i64)blockIdx.x * 16;
    const int rows = (int)min((i64)16, (i64)D - r0);
    u8* ss = (u8*)(s16 + (H >> 4));  // 16-byte aligned: H is a multiple of 256
    u8* sw = ss + 16 * rbs;          // 16 rbs = 800 nfs bytes: still 16-byte aligned
    if (Fs) {
        iq1s_copy_range(s_down + r0 * rbs, rows * rbs, ss);
        cp_async_commit();
    }
    pdl_launch_dependents();
    pdl_wait();  // h is gate/up's output, ids and weights the router's
    for (int s = 0; s < K; ++s) {
        bool valid;
        const i64 e = iq_expert(ids, s, E, valid);
        iq1s_copy_range(w_down + (e * D + r0) * rb, rows * rb, sw + s * 16 * rb);
    }
    cp_async_commit();
    q8_stage<DT_F32>(h, H, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + (lane >> 3);  // the block's octet, 0..15: its output row
    const bool ok = local < rows;  // an octet past the end dots row 0 and writes nothing
    const int row = ok ? local : 0;
    float acc = 0.0f;
    for (int s = 0; s < K; ++s)
        acc += __ldcg(weights + s) * iq1s_q8_row(sw + (s * 16 + row) * rb, nf, o, xq, dx, s16, s * (F >> 5), grid);
    if (Fs) acc += iq1s_q8_row(ss + row * rbs, nfs, o, xq, dx, s16, K * (F >> 5), grid);
    acc = iq1s_octet_sum(acc);
    if (o == 0 && ok) store_act(y, r0 + local, DT, acc);
}

// The Q8-hidden pair ("cupy_rowwarp_pdl_q8h_iq1s", written in session 50 after Nsight Compute on the pair above: its
// down ran 144 blocks at 6.8% achieved occupancy, each block quantizing the whole 9216-value hidden vector again).
// gate/up: 32 hidden rows a block (8 warps), so a block holds one whole Q8 block of h and writes it quantized, once
// (common.cuh's Q8_0 rule, as q8_stage's: codes, the scale through fp16, NaN in the block -> NaN scale), with its code
// sum: codes hq [H], scales hd [H / 32], sums hs [H / 32] in h's own bytes. down: a warp an output row, its 4 octets
// taking the slots in turn (slot s by octet s % 4, the shared expert last), each lane one sub-block of each of the slot
// row's super-blocks read from global memory, the hidden codes read where gate/up wrote them; the octets' sums added in
// a fixed order. 576 blocks for the 48B's 2304 outputs.
// SG (session 51, cupy_rowwarp_pdl_q8h_iq1s_sg): the grid from shared memory, the nibble grid (table) copied in first
// with the first rows (iq1s_q8.cuh's header); the same bits. Otherwise table is the global grid (uint2 rows).
// PAIR (session 51, cupy_rowwarp_pdl_q8h_iq1s_staged_pair, with SG): two octets a row, the even and the odd
// super-blocks, their sums added (a + b: the same bits whichever lane adds), in 16 warps: Nsight Compute put the
// shared-grid gate/up at 26% achieved occupancy, its 288 blocks of 8 warps about two an SM. Other sums: act_q8's claim.
template <int DT, bool SG, bool PAIR = false>
__device__ __forceinline__ void gateup_q8h_iq1_s(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                                 int F, int Fs, int D, const u8* __restrict__ w_gate,
                                                 const u8* __restrict__ w_up, const u8* __restrict__ s_gate,
                                                 const u8* __restrict__ s_up, u8* __restrict__ hbytes,
                                                 const void* __restrict__ table) {
    extern __shared__ __align__(16) u8 mq_smem[];
    u32* sgrid = (u32*)mq_smem;  // SG: the nibble grid, first
    i8* xq = (i8*)(mq_smem + (SG ? IQ1S_NIB_BYTES : 0));
    float* dx = (float*)(xq + D);
    int* s16 = (int*)(dx + (D >> 5));
    const int nsb = D >> 8, tid = threadIdx.x, lane = tid & 31, o = lane & 7;
    const i64 rb = (i64)nsb * IQ1S_SBB;
    u8* sg = (u8*)(s16 + (D >> 4));  // 16-byte aligned: D is a multiple of 256
    u8* su = sg + 32 * rb;
    __shared__ float hv[32];
    const int H = K * F + Fs;
    const i64 R0 = (i64)blockIdx.x * 32;
    const bool shared = R0 >= (i64)K * F;
    bool valid = true;
    if (SG) iq1s_grid_copy((const u32*)table, sgrid);  // a constant: before the wait
    if (shared) {  // the shared expert's rows: known before the router is done
        const i64 r0 = R0 - (i64)K * F;
        iq1s_copy_range(s_gate + r0 * rb, 32 * rb, sg);
        iq1s_copy_range(s_up + r0 * rb, 32 * rb, su);
    }
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();  // x and ids are the kernels' before output; h may still be the last down's input
    if (!shared) {
        const int s = (int)(R0 / F);
        const i64 e = iq_expert(ids, s, E, valid), r0 = e * F + (R0 - (i64)s * F);
        iq1s_copy_range(w_gate + r0 * rb, 32 * rb, sg);
        iq1s_copy_range(w_up + r0 * rb, 32 * rb, su);
        cp_async_commit();
    }
    q8_stage<DT>(x, D, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    float g, u;
    if constexpr (PAIR) {
        static_assert(SG, "the paired gate/up reads the grid from shared memory");
        const int slot = tid >> 3, local = slot >> 1;  // the block's octet, 0..63; its hidden row, 0..31
        g = u = 0.0f;
        for (int sb = slot & 1; sb < nsb; sb += 2) {
            g += iq1s_q8_block(sg + local * rb + sb * IQ1S_SBB, o, xq, dx, s16, 8 * sb + o, (const u32*)sgrid);
            u += iq1s_q8_block(su + local * rb + sb * IQ1S_SBB, o, xq, dx, s16, 8 * sb + o, (const u32*)sgrid);
        }
        g = iq1s_octet_sum(g);
        u = iq1s_octet_sum(u);
        g += __shfl_xor_sync(0xffffffffu, g, 8);  // and the pair's: even + odd super-blocks
        u += __shfl_xor_sync(0xffffffffu, u, 8);
        if (o == 0 && (slot & 1) == 0) hv[local] = valid ? iq_silu(g) * u : QNAN;
    } else {
        const int local = (tid >> 5) * 4 + (lane >> 3);  // the block's octet, 0..31: its hidden row
        if constexpr (SG) {
            g = iq1s_octet_sum(iq1s_q8_row(sg + local * rb, nsb, o, xq, dx, s16, 0, (const u32*)sgrid));
            u = iq1s_octet_sum(iq1s_q8_row(su + local * rb, nsb, o, xq, dx, s16, 0, (const u32*)sgrid));
        } else {
            g = iq1s_octet_sum(iq1s_q8_row(sg + local * rb, nsb, o, xq, dx, s16, 0, (const uint2*)table));
            u = iq1s_octet_sum(iq1s_q8_row(su + local * rb, nsb, o, xq, dx, s16, 0, (const uint2*)table));
        }
        if (o == 0) hv[local] = valid ? iq_silu(g) * u : QNAN;
    }
    __syncthreads();
    if (tid < 32) iq_h8_quantize(hv, lane, R0, H, hbytes);  // warp 0: the block's 32 hidden values, one Q8 block
}

// lane o's sub-block of one super-block of a row in global memory (blk) dotted with the hidden vector's Q8 block q as
// gate/up wrote it (codes hq, scales hd, code sums hs), read through L2 (the kernel before's output)
template <typename G>
__device__ __forceinline__ float iq1s_h8_block(const u8* __restrict__ blk, int o, const u8* __restrict__ hq,
                                               const float* __restrict__ hd, const int* __restrict__ hs, i64 q,
                                               G grid) {
    const u32 qs = ld_u32_a2(blk + 2 + 4 * o), qh = ld_u16(blk + 34 + 2 * o);
    const int4 xa = __ldcg((const int4*)(hq + 32 * q)), xb = __ldcg((const int4*)(hq + 32 * q + 16));
    return iq1s_scaled(iq1s_grid_dot(qs, qh, xa, xb, grid), ld_f16(blk), qh, __ldcg(hd + q), __ldcg(hs + q),
                       iq1s_delta(qh, grid));
}

// hbytes: gate/up's Q8 hidden vector (codes [H], scales [H / 32], sums [H / 32]); ids [K] int64, weights [K] float32,
// w_down [E, D, F] IQ1_S, s_down [D, Fs] (null when Fs = 0), y [D] (dtype DT). 32 WARPS threads, a warp an output row;
// grid ceil(D / WARPS). No shared memory, or (SG: session 51) the nibble grid alone, copied before the wait; each row
// the same arithmetic whatever WARPS and SG, so the same bits.
template <int DT, bool SG, int WARPS>
__device__ __forceinline__ void down_q8h_iq1_s(const u8* __restrict__ hbytes, const i64* __restrict__ ids,
                                               const float* __restrict__ weights, int K, int E, int F, int Fs, int D,
                                               const u8* __restrict__ w_down, const u8* __restrict__ s_down,
                                               void* __restrict__ y, const void* __restrict__ table) {
    extern __shared__ __align__(16) u8 mq_smem[];
    u32* sgrid = (u32*)mq_smem;  // SG: the nibble grid
    const int H = K * F + Fs, tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 row = (i64)blockIdx.x * WARPS + (tid >> 5);
    const int nf = F >> 8, nfs = Fs >> 8;
    const u8* hq = hbytes;
    const float* hd = (const float*)(hbytes + H);
    const int* hs = (const int*)(hbytes + H + (H >> 3));
    if (SG) {
        iq1s_grid_copy((const u32*)table, sgrid);  // a constant: before the wait
        cp_async_commit();
    }
    pdl_launch_dependents();
    pdl_wait();  // the hidden vector is gate/up's output, ids and weights the router's
    if (SG) {
        cp_async_wait_all();
        __syncthreads();
    }
    float acc = 0.0f;
    if (row < D) {
        for (int s = oct; s < K + (Fs ? 1 : 0); s += 4) {  // this octet's slots; slot K is the shared expert
            const bool routed = s < K;
            bool valid = true;
            const i64 e = routed ? iq_expert(ids, s, E, valid) : 0;
            const int n = routed ? nf : nfs;
            const u8* r = routed ? w_down + (e * D + row) * (i64)nf * IQ1S_SBB : s_down + row * (i64)nfs * IQ1S_SBB;
            const i64 q0 = (i64)s * (F >> 5);  // the slot's first Q8 block of h (the shared expert's after the routed)
            float part = 0.0f;
            for (int sb = 0; sb < n; ++sb)
                part += SG ? iq1s_h8_block(r + sb * IQ1S_SBB, o, hq, hd, hs, q0 + 8 * sb + o, (const u32*)sgrid)
                           : iq1s_h8_block(r + sb * IQ1S_SBB, o, hq, hd, hs, q0 + 8 * sb + o, (const uint2*)table);
            acc += routed ? __ldcg(weights + s) * part : part;
        }
    }
    acc = iq1s_octet_sum(acc);
    acc += __shfl_xor_sync(0xffffffffu, acc, 8);  // the octets' sums: (0 + 1) + (2 + 3), the same order in every lane
    acc += __shfl_xor_sync(0xffffffffu, acc, 16);
    if (lane == 0 && row < D) store_act(y, row, DT, acc);
}

// lane o's sub-block of one super-block (at blk, in shared memory) dotted with the hidden vector's Q8 block q staged in
// shared memory as gate/up wrote it (codes hq, scales hd, code sums hs), the grid from shared memory: iq1s_h8_block's
// arithmetic
__device__ __forceinline__ float iq1s_hs_block(const u8* blk, int o, const u8* hq, const float* hd, const int* hs,
                                               int q, const u32* sgrid) {
    const u32 qs = ld_u32_a2(blk + 2 + 4 * o), qh = ld_u16(blk + 34 + 2 * o);
    const int4 xa = *(const int4*)(hq + 32 * q), xb = *(const int4*)(hq + 32 * q + 16);
    return iq1s_scaled(iq1s_grid_dot(qs, qh, xa, xb, sgrid), ld_f16(blk), qh, hd[q], hs[q], iq1s_delta(qh, sgrid));
}

// The staged down (session 51: cupy_rowwarp_pdl_q8h_iq1s_staged and _staged_pair), after Nsight Compute on the
// shared-grid pair: its down ran 25.5 us at 4.9% of DRAM, its warps stalled 18 of 23 cycles on global loads (each warp
// read its rows 6 bytes a lane at a time, and the hidden codes again through L2: 2304 warps x 9 KB). A block of WARPS
// output rows copies by cp.async, before the wait, the nibble grid and the shared expert's rows, and after it every
// slot's rows and the whole Q8 hidden vector (codes, scales, sums: H + H / 4 bytes, the layout gate/up wrote); then each
// warp dots its row as down_q8h_iq1_s does (an octet a slot, the same sums in the same order): its bits.
// hbytes, ids, weights, w_down, s_down, y as down_q8h_iq1_s's; nib the nibble grid. Shared memory: the grid, the hidden
// vector, WARPS shared-expert rows, K slots' WARPS rows. 32 WARPS threads; grid ceil(D / WARPS).
// FLAT (session 51, cupy_rowwarp_pdl_q8h_iq1s_staged_flat): a row's (slot, super-block) pairs dealt over its 4 octets
// in turn (the 48B's 36 pairs, 9 an octet) instead of whole slots (3, 2, 2, 2 slots of 4), each pair's value times its
// slot's weight as it is added; other sums (act_q8's claim).
template <int DT, int WARPS, bool FLAT = false>
__device__ __forceinline__ void down_q8hs_iq1_s(const u8* __restrict__ hbytes, const i64* __restrict__ ids,
                                                const float* __restrict__ weights, int K, int E, int F, int Fs, int D,
                                                const u8* __restrict__ w_down, const u8* __restrict__ s_down,
                                                void* __restrict__ y, const u32* __restrict__ nib) {
    extern __shared__ __align__(16) u8 mq_smem[];
    const int H = K * F + Fs, tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const int nf = F >> 8, nfs = Fs >> 8;
    const i64 rb = (i64)nf * IQ1S_SBB, rbs = (i64)nfs * IQ1S_SBB, r0 = (i64)blockIdx.x * WARPS;
    const int rows = (int)min((i64)WARPS, (i64)D - r0);
    u32* sgrid = (u32*)mq_smem;
    u8* hq = mq_smem + IQ1S_NIB_BYTES;  // H codes, then H / 32 scales and H / 32 sums (H a multiple of 256)
    const float* hd = (const float*)(hq + H);
    const int* hs = (const int*)(hd + (H >> 5));
    u8* ss = hq + H + (H >> 2);  // the shared expert's rows (16-byte aligned), then slot s's at sw + s WARPS rb
    u8* sw = ss + WARPS * rbs;   // WARPS rbs = 50 WARPS nfs bytes: aligned for WARPS a multiple of 8
    iq1s_grid_copy(nib, sgrid);  // constants: before the wait
    if (Fs) iq1s_copy_range(s_down + r0 * rbs, rows * rbs, ss);
    cp_async_commit();
    pdl_launch_dependents();
    pdl_wait();  // the hidden vector is gate/up's output, ids and weights the router's
    iq1s_copy_range(hbytes, (i64)H + (H >> 2), hq);
    for (int s = 0; s < K; ++s) {
        bool valid;
        const i64 e = iq_expert(ids, s, E, valid);
        iq1s_copy_range(w_down + (e * D + r0) * rb, rows * rb, sw + s * WARPS * rb);
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    const int local = tid >> 5;  // the block's warp: its output row
    const bool ok = local < rows;  // a warp past the end dots row 0 and writes nothing
    const int row = ok ? local : 0;
    float acc = 0.0f;
    if constexpr (FLAT) {
        const int routed_pairs = K * nf;
        for (int p = oct; p < routed_pairs + (Fs ? nfs : 0); p += 4) {  // this octet's pairs; the shared expert's last
            const bool routed = p < routed_pairs;
            const int s = routed ? p / nf : K, sb = routed ? p - s * nf : p - routed_pairs;
            const u8* r = routed ? sw + (s * WARPS + row) * rb : ss + row * rbs;
            const float v = iq1s_hs_block(r + sb * IQ1S_SBB, o, hq, hd, hs, s * (F >> 5) + 8 * sb + o, sgrid);
            acc += routed ? __ldcg(weights + s) * v : v;
        }
    } else {
        for (int s = oct; s < K + (Fs ? 1 : 0); s += 4) {  // this octet's slots; slot K is the shared expert
            const bool routed = s < K;
            const int n = routed ? nf : nfs;
            const u8* r = routed ? sw + (s * WARPS + row) * rb : ss + row * rbs;
            const int q0 = s * (F >> 5);  // the slot's first Q8 block of h (the shared expert's after the routed)
            float part = 0.0f;
            for (int sb = 0; sb < n; ++sb)
                part += iq1s_hs_block(r + sb * IQ1S_SBB, o, hq, hd, hs, q0 + 8 * sb + o, sgrid);
            acc += routed ? __ldcg(weights + s) * part : part;
        }
    }
    acc = iq1s_octet_sum(acc);
    acc += __shfl_xor_sync(0xffffffffu, acc, 8);  // the octets' sums: (0 + 1) + (2 + 3), the same order in every lane
    acc += __shfl_xor_sync(0xffffffffu, acc, 16);
    if (lane == 0 && ok) store_act(y, r0 + local, DT, acc);
}

#define GATE_UP_IQ1S_ARGS                                                                                          \
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, int F, int Fs, int D,                  \
        const u8* __restrict__ w_gate, const u8* __restrict__ w_up, const u8* __restrict__ s_gate,                \
        const u8* __restrict__ s_up, float* __restrict__ h, const uint2* __restrict__ grid
#define GATE_UP_IQ1S_PASS x, ids, K, E, F, Fs, D, w_gate, w_up, s_gate, s_up, h, grid
#define DOWN_IQ1S_ARGS                                                                                             \
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,    \
        int F, int Fs, int D, const u8* __restrict__ w_down, const u8* __restrict__ s_down, void* __restrict__ y,  \
        const uint2* __restrict__ grid
#define DOWN_IQ1S_PASS h, ids, weights, K, E, F, Fs, D, w_down, s_down, y, grid

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_gateupq8pdl_f32(GATE_UP_IQ1S_ARGS) {
    gateup_q8_iq1_s<DT_F32>(GATE_UP_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_gateupq8pdl_bf16(GATE_UP_IQ1S_ARGS) {
    gateup_q8_iq1_s<DT_BF16>(GATE_UP_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_gateupq8pdl_f16(GATE_UP_IQ1S_ARGS) {
    gateup_q8_iq1_s<DT_F16>(GATE_UP_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8pdl_f32(DOWN_IQ1S_ARGS) {
    down_q8_iq1_s<DT_F32>(DOWN_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8pdl_bf16(DOWN_IQ1S_ARGS) {
    down_q8_iq1_s<DT_BF16>(DOWN_IQ1S_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8pdl_f16(DOWN_IQ1S_ARGS) {
    down_q8_iq1_s<DT_F16>(DOWN_IQ1S_PASS);
}

#define GATE_UP_H8_ARGS                                                                                            \
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, int F, int Fs, int D,                  \
        const u8* __restrict__ w_gate, const u8* __restrict__ w_up, const u8* __restrict__ s_gate,                \
        const u8* __restrict__ s_up, u8* __restrict__ hbytes, const uint2* __restrict__ grid
#define GATE_UP_H8_PASS x, ids, K, E, F, Fs, D, w_gate, w_up, s_gate, s_up, hbytes, grid
#define DOWN_H8_ARGS                                                                                               \
    const u8* __restrict__ hbytes, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,   \
        int F, int Fs, int D, const u8* __restrict__ w_down, const u8* __restrict__ s_down, void* __restrict__ y,  \
        const uint2* __restrict__ grid
#define DOWN_H8_PASS hbytes, ids, weights, K, E, F, Fs, D, w_down, s_down, y, grid

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_gateupq8hpdl_f32(GATE_UP_H8_ARGS) {
    gateup_q8h_iq1_s<DT_F32, false>(GATE_UP_H8_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_gateupq8hpdl_bf16(GATE_UP_H8_ARGS) {
    gateup_q8h_iq1_s<DT_BF16, false>(GATE_UP_H8_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_gateupq8hpdl_f16(GATE_UP_H8_ARGS) {
    gateup_q8h_iq1_s<DT_F16, false>(GATE_UP_H8_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8hpdl_f32(DOWN_H8_ARGS) {
    down_q8h_iq1_s<DT_F32, false, 4>(DOWN_H8_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8hpdl_bf16(DOWN_H8_ARGS) {
    down_q8h_iq1_s<DT_BF16, false, 4>(DOWN_H8_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_iq1_s_downq8hpdl_f16(DOWN_H8_ARGS) {
    down_q8h_iq1_s<DT_F16, false, 4>(DOWN_H8_PASS);
}

#define GATE_UP_H8SG_ARGS                                                                                          \
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, int F, int Fs, int D,                  \
        const u8* __restrict__ w_gate, const u8* __restrict__ w_up, const u8* __restrict__ s_gate,                \
        const u8* __restrict__ s_up, u8* __restrict__ hbytes, const u32* __restrict__ nib
#define GATE_UP_H8SG_PASS x, ids, K, E, F, Fs, D, w_gate, w_up, s_gate, s_up, hbytes, nib
#define DOWN_H8SG_ARGS                                                                                             \
    const u8* __restrict__ hbytes, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,   \
        int F, int Fs, int D, const u8* __restrict__ w_down, const u8* __restrict__ s_down, void* __restrict__ y,  \
        const u32* __restrict__ nib
#define DOWN_H8SG_PASS hbytes, ids, weights, K, E, F, Fs, D, w_down, s_down, y, nib

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_gateupq8hsgpdl_f32(GATE_UP_H8SG_ARGS) {
    gateup_q8h_iq1_s<DT_F32, true>(GATE_UP_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_gateupq8hsgpdl_bf16(GATE_UP_H8SG_ARGS) {
    gateup_q8h_iq1_s<DT_BF16, true>(GATE_UP_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_gateupq8hsgpdl_f16(GATE_UP_H8SG_ARGS) {
    gateup_q8h_iq1_s<DT_F16, true>(GATE_UP_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hsgpdl_f32(DOWN_H8SG_ARGS) {
    down_q8h_iq1_s<DT_F32, true, 8>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hsgpdl_bf16(DOWN_H8SG_ARGS) {
    down_q8h_iq1_s<DT_BF16, true, 8>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hsgpdl_f16(DOWN_H8SG_ARGS) {
    down_q8h_iq1_s<DT_F16, true, 8>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512) moe_iq1_s_gateupq8hpairsgpdl_f32(GATE_UP_H8SG_ARGS) {
    gateup_q8h_iq1_s<DT_F32, true, true>(GATE_UP_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512) moe_iq1_s_gateupq8hpairsgpdl_bf16(GATE_UP_H8SG_ARGS) {
    gateup_q8h_iq1_s<DT_BF16, true, true>(GATE_UP_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(512) moe_iq1_s_gateupq8hpairsgpdl_f16(GATE_UP_H8SG_ARGS) {
    gateup_q8h_iq1_s<DT_F16, true, true>(GATE_UP_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hstagedpdl_f32(DOWN_H8SG_ARGS) {
    down_q8hs_iq1_s<DT_F32, 8>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hstagedpdl_bf16(DOWN_H8SG_ARGS) {
    down_q8hs_iq1_s<DT_BF16, 8>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hstagedpdl_f16(DOWN_H8SG_ARGS) {
    down_q8hs_iq1_s<DT_F16, 8>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hflatpdl_f32(DOWN_H8SG_ARGS) {
    down_q8hs_iq1_s<DT_F32, 8, true>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hflatpdl_bf16(DOWN_H8SG_ARGS) {
    down_q8hs_iq1_s<DT_BF16, 8, true>(DOWN_H8SG_PASS);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_iq1_s_downq8hflatpdl_f16(DOWN_H8SG_ARGS) {
    down_q8hs_iq1_s<DT_F16, 8, true>(DOWN_H8SG_PASS);
}
