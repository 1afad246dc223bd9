// linear_rowwarp.cu: the one-token Q4_K GEMV of decode. One warp per output row, and every weight byte the
// warp needs is requested before any of it is used.
//
// Why. A decode step's Q4_K projections hold 1-12 MB each: a few microseconds of bytes at 4.04 TB/s. Session
// 13's probe (bench/GPU-PROBES.md) timed one plain read of such a weight at 2.9 us a launch inside a CUDA graph,
// and the split-K Triton GEMV on the same bytes at 6.8 us (6.2 with the bytes already in the L2): the GEMV's own
// chain (chunk loop, partials, the last block's combine) costs more than its bytes. Here a warp owns a row: its
// lanes issue all the row's loads at once (rows up to 4096 inputs; longer ones in groups of 16 super-blocks), so
// a warp waits out one DRAM round trip, then decodes in registers and sums with shuffles. No split-K, no partial
// sums, no second pass: one launch, and each output is written by one warp in a fixed order (deterministic).
//
// The Q4_K decoding and the activation staging both forms use are in q4k_rows.cuh (moe_rowwarp.cu shares them).
#include "prefetch.cuh"
#include "q4k_half.cuh"
#include "q4k_q8.cuh"

// y[row] = x . dequantize(W[row]) for one token: x [K] (dtype DT), w [N, row_bytes] Q4_K (row_bytes = K / 256 * 144,
// 16-byte aligned), y [N] (x's dtype). 128 threads = 4 rows a block; grid ceil(N / 4).
// PDL (the "warp+pdl" kernel, launched with programmatic dependent launch; session 16, proven in session 17): the first
// group's weight loads are issued before the wait for the kernel before it (x is its output), then the next kernel may
// be scheduled. The same sums in the same order: the same bits.
// XPF (with PDL: the "warp+pdl+xpf" kernel, written after GPU session 38): right after the wait, every line of x the
// lane will read is prefetched into L1 (prefetch_l1). The compiled PDL kernel (nvdisasm, sm_90) loads each round's x
// after the round before has been summed, so the four rounds of a 4096-wide row wait four L2 round trips in turn for a
// vector the kernel before has just written; prefetched, they wait about one. The same loads and sums: the same bits.
// GPU session 39 (H200) timed it slower: 17.21 against 7.33 us a GEMV after the gated norm (x0.426), its rung (with the
// MoE down's xpf form) x0.740 / x0.749. Not looked into; a likely reading is that each prefetch is an L1 request of
// its own, ~300 k of them a GEMV (576 blocks x 128 lanes x 4), costing more than the round trips they were to save.
// XR (with PDL: the "warp+pdl+xr" kernel, written in session 39 after that): x loaded into registers XR rounds at a
// time (rw_raw16: 4 loads a round and a lane for a 16-bit x, 8 for float32), then those rounds summed in order
// (rw_block_raw). Counted on the compiled code (tests/cuda_sass.py's round_trips, sm_90): after the wait the plain PDL
// form waits out 8 L2 round trips in turn (each round's loads split by products that use the first of them), this
// one 3. XR_ROUNDS = 2 under __maxnreg__(96): 94 registers for a 16-bit x, so 5 blocks an SM and the 48B's o_proj
// (576 blocks) in one wave on 132 SMs; all 4 rounds at once would wait 1 round trip but take 123 registers (4 blocks
// an SM: 528 at once, the last 48 blocks a second wave). Past the row's end a lane loads the row's last super-block's
// x again (a clamped index, no branch) and adds nothing for it. The same values, products and sums: the same bits.
// GPU session 39 (H100): per op after the gated norm a tie (7.80 against 7.70 us); in the step, over the ids-once
// down, x1.015 / x1.014, and with it over the s49 step x1.029 / x1.028 (rungs52, a win).
#define XR_ROUNDS 2
template <int DT, bool PDL = false, bool XPF = false, int XR = 0>
__device__ __forceinline__ void rowwarp_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                             int K, int N, void* __restrict__ y) {
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;  // the whole warp
    const u8* r = w + row * row_bytes;
    const int nsb = K >> 8;
    float acc = 0.0f;
    for (int g = 0; g < nsb; g += 4 * RW_ROUNDS) {
        uint4 h[RW_ROUNDS], q[RW_ROUNDS];
#pragma unroll
        for (int i = 0; i < RW_ROUNDS; ++i) {  // every load of the group first
            const int sb = g + 4 * i + oct;
            if (sb < nsb) q4k_load(r + (i64)sb * 144, o, h[i], q[i]);
        }
        if (PDL && g == 0) {
            pdl_launch_dependents();
            pdl_wait();  // x is the kernel before's output; y may still be its input
            if (XPF) {  // every line of x this lane reads (rw_block's two runs of 16 values a super-block)
                const u8* xb = (const u8*)x;
                constexpr int size = DT == DT_F32 ? 4 : 2;
                for (int sb = oct; sb < nsb; sb += 4) {
                    const i64 base = (i64)sb * 256 + 64 * (o >> 1) + 16 * (o & 1);
                    prefetch_l1(xb + base * size);
                    if (size == 4) prefetch_l1(xb + (base + 32) * size);  // 16-bit: the same 128-byte line
                }
            }
        }
        if (XR) {
#pragma unroll
            for (int b = 0; b < RW_ROUNDS; b += XR) {
                uint4 xl[XR > 0 ? XR : 1][4], xh[XR > 0 ? XR : 1][4];  // a round's two runs of 16 values, as loaded
#pragma unroll
                for (int i = 0; i < XR; ++i) {  // the batch's x first
                    const i64 base = rw_lane_base((i64)min(g + 4 * (b + i) + oct, nsb - 1) * 256, o);
                    rw_raw16<DT, !PDL>(x, base, xl[i]);
                    rw_raw16<DT, !PDL>(x, base + 32, xh[i]);
                }
#pragma unroll
                for (int i = 0; i < XR; ++i)
                    if (g + 4 * (b + i) + oct < nsb) acc += rw_block_raw<DT>(h[b + i], q[b + i], xl[i], xh[i], o);
            }
        } else {
#pragma unroll
            for (int i = 0; i < RW_ROUNDS; ++i) {
                const int sb = g + 4 * i + oct;
                if (sb < nsb) acc += rw_block<DT, !PDL>(h[i], q[i], x, (i64)sb * 256, o);
            }
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) store_act(y, row, DT, acc);
}

// The same sums for tall weights, four rows a warp. A first GPU run of the one-row form (session 13) lost to the
// Triton GEMV once the rows no longer fit one wave (12288 x 2304: 16 against 13.8 us): it spends ~6 instructions a
// weight (the activation's conversion, the nibble, the product, the sum of the activations) and reads 16 bytes of
// activations from L1 per weight byte. Here a block of 4 warps first issues its weight loads, then stages the
// activations once in shared memory as float32, with the sum of every 16 (what the min term multiplies), and each
// octet of a warp owns a row: the four octets take the same super-block at once, so one shared-memory read serves
// four rows, and a weight costs 3 instructions (the nibble's two, one product). Each octet walks its row's
// super-blocks with 4 in flight (a ring of 4 register slots, each reloaded 4 super-blocks ahead once used).
// Shared memory: K floats of activations (16-byte groups swizzled so the 8 lanes of an octet read 8 different bank
// groups), then K / 16 sums. 128 threads = 16 rows a block.

template <int DT>
__device__ __forceinline__ void rowoct_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                            int K, int N, void* __restrict__ y) {
    extern __shared__ __align__(16) float ro_smem[];
    float4* sx = (float4*)ro_smem;
    float* ssum = ro_smem + K;
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 row = ((i64)blockIdx.x * (blockDim.x >> 5) + (tid >> 5)) * 4 + oct;
    const bool ok = row < N;  // an octet past the end computes row N - 1 and writes nothing (all reach the barrier)
    const u8* r = w + (ok ? row : (i64)N - 1) * row_bytes;
    const int nsb = K >> 8;
    uint4 h[4], q[4];
    ro_ring_start(r, nsb, o, h, q);  // the weights first: their round trip overlaps the staging below
    ro_stage<DT>(x, K, sx, ssum);
    __syncthreads();
    float acc = ro_ring_walk(r, nsb, o, h, q, sx, ssum);
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    if (o == 0 && ok) store_act(y, row, DT, acc);
}

// The copy forms' start (rowcp_q4_k, rowhc_q4_k): the block's rows r0.. (16, fewer in the last block: returned), one
// contiguous range of the weight, copied into shared memory at sw with cp.async, committed and not waited on
// (row_bytes = K / 256 * 144, a multiple of 16)
template <int ROWS = 16>
__device__ __forceinline__ int rc_copy_rows(const u8* __restrict__ w, i64 row_bytes, int N, i64 r0, u8* sw) {
    const int rows = (int)min((i64)ROWS, (i64)N - r0);
    const int n16 = (int)(rows * row_bytes / 16);
    const u8* src = w + r0 * row_bytes;
    const u32 dst = smem_addr(sw);
    for (int c = threadIdx.x; c < n16; c += blockDim.x) cp_async16(dst + 16 * c, src + 16 * (i64)c, 16);
    cp_async_commit();
    return rows;
}

// The octet form with every weight byte in flight at once ("copy"). In the octet form each octet holds 4 super-blocks
// in registers and reloads one as it uses one: a row of 9 is ~3 dependent DRAM round trips, the step's bottleneck
// once the instructions are counted (session 13: 12.8 us at 12288 x 2304 for ~6 us of issue). Here the block copies
// its 16 rows (one contiguous range, 20 KB for 2304 inputs) into shared memory with cp.async before it stages the
// activations, so the whole weight is requested in the first microsecond, as a plain read of it would be; then the
// octets decode from shared memory. No register ring: fewer registers, more warps. Shared memory: the staged
// activations and sums (as the octet form), then 16 rows of weights. 128 threads = 16 rows a block.
// PDL (the "copy+pdl" form, launched with programmatic dependent launch; session 16, proven in session 17): the
// block's weight copy is requested before the wait for the kernel before it, so a kernel's rows stream in while the
// previous kernel finishes; the block then lets the next kernel be scheduled and waits before it reads x. The sums and
// their order are the copy form's: the same bits.
// XFIRST (the "copyx" form, session 17's control for copy2x): the first activations requested before the weight copy,
// with every weight byte still waited for before the decode. The same bits.
template <int DT, bool PDL = false, bool XFIRST = false>
__device__ __forceinline__ void rowcp_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                           int K, int N, void* __restrict__ y) {
    static_assert(!(PDL && XFIRST), "x is the kernel before's output under PDL: it cannot be requested first");
    extern __shared__ __align__(16) float ro_smem[];
    float4* sx = (float4*)ro_smem;
    float* ssum = ro_smem + K;
    u8* sw = (u8*)(ssum + (K >> 4));  // 16-byte aligned: K is a multiple of 256
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 r0 = (i64)blockIdx.x * 16;
    RoXEarly early;
    if (XFIRST) ro_stage_request<DT>(x, K, early);
    const int rows = rc_copy_rows(w, row_bytes, N, r0, sw);
    if (PDL) {
        pdl_launch_dependents();
        pdl_wait();  // x is the kernel before's output; y may still be its input
    }
    if (XFIRST)
        ro_stage_from<DT>(x, K, early, sx, ssum);
    else
        ro_stage<DT, !PDL>(x, K, sx, ssum);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + oct;
    const bool ok = local < rows;  // an octet past the end decodes row 0 and writes nothing
    const u8* r = sw + (ok ? local : 0) * row_bytes;
    const float acc = ro_copied_row(r, K >> 8, o, sx, ssum);
    if (o == 0 && ok) store_act(y, r0 + local, DT, acc);
}

// The copy+pdl form on Q8 activations and integer dots ("q8", the GEMV of cupy_rowwarp_pdl_q8, written after GPU
// session 27): the block's rows copied into shared memory before the PDL wait, as rowcp_q4_k<DT, true>; then x
// quantized once a block to Q8 blocks of 32 (q4k_q8.cuh's q8_stage) and each lane's 32 weights of a super-block dotted
// by 8 __dp4a (q8_block). Why: session 27 put the experts' Q8 gate/up at 15.5 us against the float copy form's 19.6
// alone, and the hidden vector in Q8 won 1.157 in the step; the Q4_K GEMVs are the step's next largest kernels
// (~0.52 ms a token in session 23's profiled step) and still spend ~6.5 instructions a weight on float32 x.
// ROWS = 16 (tall weights): an octet a row, as the copy form. ROWS = 8 (the others, which the warp form served:
// twice the blocks for the same rows): two octets a row, the even and the odd super-blocks, their two sums added
// (a + b: the same bits whichever lane adds). Shared memory: K code bytes, K / 32 float scales, K / 16 int sums of
// 16, then ROWS rows of weights. 128 threads; grid ceil(N / ROWS).
template <int DT, int ROWS>
__device__ __forceinline__ void rowq8_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                           int K, int N, void* __restrict__ y) {
    static_assert(ROWS == 16 || ROWS == 8, "an octet a row, or two");
    extern __shared__ __align__(16) u8 lq_smem[];
    i8* xq = (i8*)lq_smem;
    float* dx = (float*)(lq_smem + K);
    int* s16 = (int*)(dx + (K >> 5));
    u8* sw = (u8*)(s16 + (K >> 4));  // 16-byte aligned: K is a multiple of 256
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 r0 = (i64)blockIdx.x * ROWS;
    const int rows = rc_copy_rows<ROWS>(w, row_bytes, N, r0, sw);
    pdl_launch_dependents();
    pdl_wait();  // x is the kernel before's output; y may still be its input
    q8_stage<DT>(x, K, xq, dx, s16);
    cp_async_wait_all();
    __syncthreads();
    const int slot = (tid >> 5) * 4 + oct;  // the block's octet, 0..15
    const int local = ROWS == 16 ? slot : slot >> 1, first = ROWS == 16 ? 0 : slot & 1, step = ROWS == 16 ? 1 : 2;
    const bool ok = local < rows;  // an octet past the end decodes row 0 and writes nothing
    const u8* r = sw + (ok ? local : 0) * row_bytes;
    float acc = 0.0f;
    for (int sb = first; sb < (K >> 8); sb += step) acc += q8_block(r + (i64)sb * 144, o, xq, dx, s16, sb);
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);  // the octet's sum
    if (ROWS == 8) acc += __shfl_xor_sync(0xffffffffu, acc, 8);  // and the pair's: even + odd super-blocks
    if (o == 0 && (ROWS == 16 || (oct & 1) == 0) && ok) store_act(y, r0 + local, DT, acc);
}

// The copy form with its weight copy in two commit groups ("copy2"; session 16; session 17: a tie): every block's
// rows first up to super-block h = ceil(nsb / 2), then the rest, so the octets decode the first half while the second
// lands. Session 16's reading of the copy form: every block of the grid is resident at once, so all of them request
// their rows in the first microsecond and then all decode, and DRAM idles while the SMs compute (the copy form runs
// ~12 us at 12288 x 2304 where a plain read of its bytes takes ~6). If that holds, this form is faster by about the
// second half's load. The sums and their order are the copy form's: the same bits. One more barrier.
// Shared memory and threads: the copy form's.
__device__ __forceinline__ void rc_copy_span(const u8* __restrict__ w, i64 row_bytes, int rows, i64 r0, u8* sw,
                                             int c0, int c1) {
    const int per = c1 - c0, n = rows * per;  // 16-byte chunks [c0, c1) of each of the block's rows
    const u8* src = w + r0 * row_bytes;
    const u32 dst = smem_addr(sw);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int r = i / per;
        const i64 off = r * row_bytes + 16 * (i64)(c0 + i - r * per);
        cp_async16(dst + (u32)off, src + off, 16);
    }
    cp_async_commit();
}

// XFIRST (the "copy2x" form, session 17): the block's first activations are requested before its weight copies
// (ro_stage_request). The copy form's warps stalled a quarter of their samples on the first use of x, requested after
// 20 KB of weights; the reading was that x queued behind them. Measured: a tie in the step (0.995, as copy2), with
// 16.6% of the samples still on x, and no L2 contention in a probe: the wait is x's own latency. The same bits.
template <int DT, bool XFIRST = false>
__device__ __forceinline__ void rowcp2_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                            int K, int N, void* __restrict__ y) {
    extern __shared__ __align__(16) float ro_smem[];
    float4* sx = (float4*)ro_smem;
    float* ssum = ro_smem + K;
    u8* sw = (u8*)(ssum + (K >> 4));
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 r0 = (i64)blockIdx.x * 16;
    const int rows = (int)min((i64)16, (i64)N - r0), nsb = K >> 8, h = (nsb + 1) >> 1;
    RoXEarly early;
    if (XFIRST) ro_stage_request<DT>(x, K, early);
    rc_copy_span(w, row_bytes, rows, r0, sw, 0, 9 * h);  // 144-byte super-blocks: 9 chunks each
    rc_copy_span(w, row_bytes, rows, r0, sw, 9 * h, 9 * nsb);
    if (XFIRST)
        ro_stage_from<DT>(x, K, early, sx, ssum);
    else
        ro_stage<DT>(x, K, sx, ssum);
    cp_async_wait<1>();
    __syncthreads();
    const int local = (tid >> 5) * 4 + oct;
    const bool ok = local < rows;
    const u8* r = sw + (ok ? local : 0) * row_bytes;
    const RoLane lp = ro_lane(o);
    float acc = ro_copied_span(r, 0, h, lp, o, sx, ssum, 0.0f);
    cp_async_wait_all();
    __syncthreads();
    acc = ro_octet_sum(ro_copied_span(r, h, nsb, lp, o, sx, ssum, acc));
    if (o == 0 && ok) store_act(y, r0 + local, DT, acc);
}

// The warp form from staged activations ("staged"). Session 14's Nsight Compute run (12288 x 2304) found every
// form latency-bound: the octet and copy forms hold ~4.8 warps a scheduler (the grid's 3072 warps, 4 rows each) and
// ~1.3 can issue; the warp form holds ~6.8, 2.7 eligible, but spends ~6.5 instructions a weight, converting the
// activations it reads from global memory at every use. Here a warp owns a row, as in the warp form (4 super-blocks a
// round, one an octet, a group's loads all first: 4x the octet form's warps), and reads the activations the octet form
// stages once a block in shared memory (float32, swizzled, with the sums of 16; ro_block: ~3 instructions a weight).
// The row's first group of loads is requested before the staging, so the two round trips overlap. 256 threads = 8
// rows a block (the staging is shared by 8 rows). Shared memory: K floats and K / 16 sums, as the octet form's.
template <int DT>
__device__ __forceinline__ void rowstg_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                            int K, int N, void* __restrict__ y) {
    extern __shared__ __align__(16) float ro_smem[];
    float4* sx = (float4*)ro_smem;
    float* ssum = ro_smem + K;
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (tid >> 5);
    const bool ok = row < N;  // a warp past the end reads row N - 1 and writes nothing (all reach the barrier)
    const u8* r = w + (ok ? row : (i64)N - 1) * row_bytes;
    const int nsb = K >> 8;
    uint4 h[RW_ROUNDS], q[RW_ROUNDS];
    rs_group_load<RW_ROUNDS>(r, nsb, 0, oct, 4, o, h, q);  // the first group's loads, before the staging
    ro_stage<DT>(x, K, sx, ssum);
    __syncthreads();
    float acc = rs_walk<RW_ROUNDS>(r, nsb, oct, 4, o, h, q, sx, ssum);
    acc = warp_sum(acc);
    if (lane == 0 && ok) store_act(y, row, DT, acc);
}

// The copy form in packed half2 arithmetic ("half", implementation cupy_rowhalf; session 16: 13.0 against the copy
// form's 12.2 us at 12288 x 2304 once its staging was one pass, its rung 0.943 before; selected by nothing). The copy
// form's structure - the block's 16 rows copied whole into shared memory with
// cp.async first, an octet a row - with the activations staged as fp16 pairs scaled by a power of two (q4k_half.cuh),
// so a weight costs ~1.75 instructions in the inner loop instead of ~3.6. One more barrier than the copy form: the
// block's largest |x| picks the scale before the staging. Shared memory: K / 8 slots of 16 bytes (the fp16 pairs),
// K / 16 float sums, then 16 rows of weights. 128 threads = 16 rows a block.
template <int DT>
__device__ __forceinline__ void rowhc_q4_k(const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes,
                                           int K, int N, void* __restrict__ y) {
    extern __shared__ __align__(16) float ro_smem[];
    __shared__ float red[32];
    uint4* shx = (uint4*)ro_smem;
    float* ssum = ro_smem + 4 * (K >> 3);
    u8* sw = (u8*)(ssum + (K >> 4));  // 16-byte aligned: K is a multiple of 256
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 r0 = (i64)blockIdx.x * 16;
    const int rows = rc_copy_rows(w, row_bytes, N, r0, sw);
    const int s = rh_stage<DT>(x, K, red, shx, ssum);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 4 + oct;
    const bool ok = local < rows;  // an octet past the end decodes row 0 and writes nothing
    const u8* r = sw + (ok ? local : 0) * row_bytes;
    const float acc = rh_copied_row(r, K >> 8, o, shx, ssum, rh_pow2(-s));
    if (o == 0 && ok) store_act(y, r0 + local, DT, acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowhc_f32(const void* __restrict__ x,
                                                                       const u8* __restrict__ w, i64 row_bytes,
                                                                       int K, int N, void* __restrict__ y) {
    rowhc_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowhc_bf16(const void* __restrict__ x,
                                                                        const u8* __restrict__ w, i64 row_bytes,
                                                                        int K, int N, void* __restrict__ y) {
    rowhc_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowhc_f16(const void* __restrict__ x,
                                                                       const u8* __restrict__ w, i64 row_bytes,
                                                                       int K, int N, void* __restrict__ y) {
    rowhc_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) linear_q4_k_rowstg_f32(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowstg_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) linear_q4_k_rowstg_bf16(const void* __restrict__ x,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y) {
    rowstg_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) linear_q4_k_rowstg_f16(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowstg_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp_f32(const void* __restrict__ x,
                                                                       const u8* __restrict__ w, i64 row_bytes,
                                                                       int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp_bf16(const void* __restrict__ x,
                                                                        const u8* __restrict__ w, i64 row_bytes,
                                                                        int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp_f16(const void* __restrict__ x,
                                                                       const u8* __restrict__ w, i64 row_bytes,
                                                                       int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp2_f32(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowcp2_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp2_bf16(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowcp2_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp2_f16(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowcp2_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcpx_f32(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_F32, false, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcpx_bf16(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_BF16, false, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcpx_f16(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_F16, false, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp2x_f32(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowcp2_q4_k<DT_F32, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp2x_bf16(const void* __restrict__ x,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y) {
    rowcp2_q4_k<DT_BF16, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcp2x_f16(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowcp2_q4_k<DT_F16, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcppdl_f32(const void* __restrict__ x,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_F32, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcppdl_bf16(const void* __restrict__ x,
                                                                            const u8* __restrict__ w, i64 row_bytes,
                                                                            int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_BF16, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowcppdl_f16(const void* __restrict__ x,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y) {
    rowcp_q4_k<DT_F16, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowq8pdl_f32(const void* __restrict__ x,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y) {
    rowq8_q4_k<DT_F32, 16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowq8pdl_bf16(const void* __restrict__ x,
                                                                            const u8* __restrict__ w, i64 row_bytes,
                                                                            int K, int N, void* __restrict__ y) {
    rowq8_q4_k<DT_BF16, 16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowq8pdl_f16(const void* __restrict__ x,
                                                                           const u8* __restrict__ w, i64 row_bytes,
                                                                           int K, int N, void* __restrict__ y) {
    rowq8_q4_k<DT_F16, 16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowq8pairpdl_f32(const void* __restrict__ x,
                                                                               const u8* __restrict__ w, i64 row_bytes,
                                                                               int K, int N, void* __restrict__ y) {
    rowq8_q4_k<DT_F32, 8>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowq8pairpdl_bf16(const void* __restrict__ x,
                                                                                const u8* __restrict__ w, i64 row_bytes,
                                                                                int K, int N, void* __restrict__ y) {
    rowq8_q4_k<DT_BF16, 8>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowq8pairpdl_f16(const void* __restrict__ x,
                                                                               const u8* __restrict__ w, i64 row_bytes,
                                                                               int K, int N, void* __restrict__ y) {
    rowq8_q4_k<DT_F16, 8>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarppdl_f32(const void* __restrict__ x,
                                                                             const u8* __restrict__ w, i64 row_bytes,
                                                                             int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F32, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarppdl_bf16(const void* __restrict__ x,
                                                                              const u8* __restrict__ w, i64 row_bytes,
                                                                              int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_BF16, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarppdl_f16(const void* __restrict__ x,
                                                                             const u8* __restrict__ w, i64 row_bytes,
                                                                             int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F16, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarppdlxpf_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F32, true, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarppdlxpf_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_BF16, true, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarppdlxpf_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F16, true, true>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) linear_q4_k_rowwarppdlxr_f32(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F32, true, false, XR_ROUNDS>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) linear_q4_k_rowwarppdlxr_bf16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_BF16, true, false, XR_ROUNDS>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __maxnreg__(96) linear_q4_k_rowwarppdlxr_f16(
    const void* __restrict__ x, const u8* __restrict__ w, i64 row_bytes, int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F16, true, false, XR_ROUNDS>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) linear_q4_k_rowoct_f32(const void* __restrict__ x,
                                                                        const u8* __restrict__ w, i64 row_bytes,
                                                                        int K, int N, void* __restrict__ y) {
    rowoct_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) linear_q4_k_rowoct_bf16(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowoct_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) linear_q4_k_rowoct_f16(const void* __restrict__ x,
                                                                        const u8* __restrict__ w, i64 row_bytes,
                                                                        int K, int N, void* __restrict__ y) {
    rowoct_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarp_f32(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F32>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarp_bf16(const void* __restrict__ x,
                                                                          const u8* __restrict__ w, i64 row_bytes,
                                                                          int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_BF16>(x, w, row_bytes, K, N, y);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) linear_q4_k_rowwarp_f16(const void* __restrict__ x,
                                                                         const u8* __restrict__ w, i64 row_bytes,
                                                                         int K, int N, void* __restrict__ y) {
    rowwarp_q4_k<DT_F16>(x, w, row_bytes, K, N, y);
}
