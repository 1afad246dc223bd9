// moe_rowwarp.cu: one token's routed and shared SwiGLU experts, Q4_K, in two launches built like the row-warp
// GEMVs of linear_rowwarp.cu (q4k_rows.cuh): every weight row a warp needs is requested before it is used, no
// split-K, no partial sums in memory beyond the one hidden vector, each output written by one warp in a fixed order.
//
// Why. Session 13's decode step spent ~36% of its busy time in the experts: Triton's decode GEMVs take 38.5 us a
// layer for 34 MB (23% of 4.04 TB/s), a chunk loop of dependent round trips per program.
//
// 1. gate/up (the "octet" form, or "copy": the block's weights copied whole into shared memory first; "half": the copy
//    form's products in packed half2, cupy_rowhalf's): the hidden
//    vector h [K * F + Fs] (the K chosen experts' F rows slot by slot, then
//    the shared expert's Fs) as h[r] = silu(gate_r . x) * (up_r . x). A warp owns two rows r, r + 1: octets 0, 1
//    take their gate rows, octets 2, 3 their up rows, all four on the same super-block at once from the activations
//    staged in shared memory (ro_stage), each walking its row with 4 super-blocks in flight. 128 threads = 8 rows.
// 2. down (the "warp" form): y[d] = sum_k weights[k] * (down_{e_k}[d] . h_k) + (s_down[d] . h_shared). The warp
//    for output d walks its K * F / 256 + Fs / 256 super-blocks, all of them consecutive in h (unit u's 256
//    activations are h[256u..]), 16 in flight at a time, each scaled by its slot's routing weight; h is float32,
//    read through L1. 128 threads = 4 outputs.
// An expert id outside [0, E) reads expert 0's rows and makes the output NaN (as the other implementations do).
#include "prefetch.cuh"
#include "q4k_half.cuh"
#include "q4k_q8.cuh"
#include "q4k_mma.cuh"  // cp_async_wait_pending (the grouped gate/up's waits)

// the wide down's rounds of 4 super-blocks a group (down_q4_k): 9, the 48B's 36 a row (8 slots of F = 1024, the
// shared expert's 1024) in one group
#define DOWN_WIDE_ROUNDS 9

__device__ __forceinline__ float mr_silu(float g) { return g / (1.0f + expf(-g)); }

// ids [K] int64, w_gate / w_up [E, F, D] Q4_K rows of row_bytes = D / 256 * 144; s_gate / s_up [Fs, D] (null, Fs = 0:
// no shared expert); h [K * F + Fs] float32. F and Fs even, D a multiple of 256. grid ceil((K * F + Fs) / 8).
template <int DT>
__device__ __forceinline__ void gateup_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                            const u8* __restrict__ w_gate, const u8* __restrict__ w_up, i64 row_bytes,
                                            int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up, int Fs,
                                            int D, float* __restrict__ h) {
    extern __shared__ __align__(16) float mr_smem[];
    float4* sx = (float4*)mr_smem;
    float* ssum = mr_smem + D;
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 rows = (i64)K * F + Fs;
    const i64 r0 = ((i64)blockIdx.x * (blockDim.x >> 5) + (tid >> 5)) * 2;
    const i64 r = r0 + (oct & 1);
    const bool ok = r < rows;  // a pair past the end computes row 0 and writes nothing (all reach the barrier)
    const i64 rr = ok ? r : 0;
    const bool up = oct >= 2;
    bool bad = false;
    const u8* w;
    if (rr < (i64)K * F) {
        i64 e = ids[rr / F];
        bad = e < 0 || e >= E;
        e = bad ? 0 : e;
        w = (up ? w_up : w_gate) + (e * F + rr % F) * row_bytes;
    } else {
        w = (up ? s_up : s_gate) + (rr - (i64)K * F) * row_bytes;
    }
    const int nsb = D >> 8;
    uint4 hd[4], q[4];
    ro_ring_start(w, nsb, o, hd, q);  // the weights first: their round trip overlaps the staging below
    ro_stage<DT>(x, D, sx, ssum);
    __syncthreads();
    float acc = ro_ring_walk(w, nsb, o, hd, q, sx, ssum);
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    const float u = __shfl_down_sync(0xffffffffu, acc, 16);  // lanes 0 and 8: the up row of their gate row
    if (o == 0 && oct < 2 && ok) h[r] = bad ? QNAN : mr_silu(acc) * u;
}

// The copy forms' start (gateup_cp_q4_k, gateup_hc_q4_k): block r0 / 8's hidden rows are one slot's (F and Fs are
// multiples of 256), so its 8 gate rows and 8 up rows are two contiguous ranges, copied into shared memory at sw (the
// gate rows, then the up rows 8 rows further) with cp.async, committed and not waited on. here: the block's rows (8,
// fewer in the last block); bad: the slot's expert id is outside [0, E) (expert 0's rows are copied instead). The
// per-thread address arithmetic differs from the inline code it replaced (session 15: gateupcp's SASS changed, its
// sums did not).
struct GuRows {
    int here;
    bool bad;
};

// `here` gate rows from g and as many up rows from u, copied into shared memory at sw (the up rows 8 rows further) with
// cp.async, committed and not waited on: the copy forms' loads, shared by the routed and the shared expert's blocks.
// PAIRED (the pairs form's): each thread copies chunk c of the gate rows and chunk c of the up rows in one turn of the
// loop, with no select between the two ranges (session 28's disassembly: 16 instructions a 16-byte copy otherwise,
// ~0.6 a weight). The same bytes to the same places either way.
template <bool PAIRED = false>
__device__ __forceinline__ void gu_copy_range(const u8* g, const u8* u, int here, i64 row_bytes, u8* sw) {
    const int n16 = (int)(here * row_bytes / 16);
    const u32 dst = smem_addr(sw);
    const u32 dst_up = dst + (u32)(8 * row_bytes);
    if (PAIRED) {
        for (int c = threadIdx.x; c < n16; c += blockDim.x) {
            cp_async16(dst + 16 * c, g + 16 * (i64)c, 16);
            cp_async16(dst_up + 16 * c, u + 16 * (i64)c, 16);
        }
    } else {
        for (int c = threadIdx.x; c < 2 * n16; c += blockDim.x) {
            const bool second = c >= n16;
            const int cc = second ? c - n16 : c;
            cp_async16((second ? dst_up : dst) + 16 * cc, (second ? u : g) + 16 * (i64)cc, 16);
        }
    }
    cp_async_commit();
}

// the block of hidden rows from r0: how many there are (8, fewer at the end) and whether its slot's expert id is
// outside [0, E); e: the expert whose rows it reads (expert 0 for a bad id; unset for the shared expert's rows, r0 >=
// K * F). The copy forms and the pipelined form's dot (which copies a group ahead of dotting it) ask the same way.
__device__ __forceinline__ GuRows gu_rows(const i64* __restrict__ ids, int K, int E, int F, int Fs, i64 r0, i64& e) {
    const int here = (int)min((i64)8, (i64)K * F + Fs - r0);
    bool bad = false;
    if (r0 < (i64)K * F) {
        e = ids[r0 / F];
        bad = e < 0 || e >= E;
        e = bad ? 0 : e;
    }
    return {here, bad};
}

// the first super-block of group g of a row's nsb when they are split into GROUPS commit groups (the last ends at nsb)
__device__ __forceinline__ int gu_sb0(int g, int groups, int nsb) { return g * nsb / groups; }

// The grouped copy (gate/up's GROUPS > 1, the "grouped" form of GPU session 43): the block's 8 gate and 8 up rows
// requested in GROUPS commit groups of whole super-blocks - group g the super-blocks [gu_sb0(g), gu_sb0(g + 1)) of
// every row, all of a group's copies issued before the next group's - into gu_copy_range's layout. Every block of the
// one wave issues its first group before its second, so the DRAM serves the first groups first and a block can dot
// them while its later groups stream (session 43's probe_gateup: the copies alone 8.96, the whole 13.57 us, the dots
// 4.0 us of it, all after a block's last byte). A group may be empty (fewer super-blocks than groups). GPU session 43
// (H200): slower at every group count (12.3 / 13.4 / 13.4 / 17.6 us at 2 / 3 / 4 / 9 groups against 11.9; rungs57
// x0.976): all requested at once, the groups land interleaved with every other block's, and each wait only adds.
// group grp of the block's rows' copies (gu_copy_range_grouped's), committed as one cp.async group
template <int GROUPS>
__device__ __forceinline__ void gu_copy_group(const u8* g, const u8* u, int here, int grp, i64 row_bytes, u8* sw) {
    const u32 dst = smem_addr(sw), dst_up = dst + (u32)(8 * row_bytes);
    const int nsb = (int)(row_bytes / 144);
    const int s0 = gu_sb0(grp, GROUPS, nsb), n = (gu_sb0(grp + 1, GROUPS, nsb) - s0) * 9;  // 16-byte chunks a row
    for (int c = threadIdx.x; c < here * n; c += blockDim.x) {
        const int r = c / n;
        const i64 off = r * row_bytes + s0 * 144 + 16 * (c - r * n);
        cp_async16(dst + (u32)off, g + off, 16);
        cp_async16(dst_up + (u32)off, u + off, 16);
    }
    cp_async_commit();
}

// DEPTH (<= GROUPS) of the groups requested here; with DEPTH < GROUPS gu_q8_group requests group g + DEPTH once group
// g has landed (GPU session 43, after the grouped form lost: every group requested at once lands interleaved with
// every other block's, so no block's first group comes first; requested later, a group cannot)
template <int GROUPS, int DEPTH = GROUPS>
__device__ __forceinline__ void gu_copy_range_grouped(const u8* g, const u8* u, int here, i64 row_bytes, u8* sw) {
#pragma unroll
    for (int grp = 0; grp < DEPTH; ++grp) gu_copy_group<GROUPS>(g, u, here, grp, row_bytes, sw);
}

// GROUPS > 1: the rows' copies in GROUPS commit groups (gu_copy_range_grouped, always paired), the first DEPTH of them
// requested here; g_src and u_src (where given) get the block's first gate and up rows, from which the rest are asked
template <bool PAIRED = false, int GROUPS = 1, int DEPTH = GROUPS>
__device__ __forceinline__ GuRows gu_copy_rows(const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
                                               const u8* __restrict__ w_up, i64 row_bytes, int F,
                                               const u8* __restrict__ s_gate, const u8* __restrict__ s_up, int Fs,
                                               i64 r0, u8* sw, const u8** g_src = nullptr,
                                               const u8** u_src = nullptr) {
    i64 e = 0;
    const GuRows b = gu_rows(ids, K, E, F, Fs, r0, e);
    const bool routed = r0 < (i64)K * F;
    const u8* g = routed ? w_gate + (e * F + r0 % F) * row_bytes : s_gate + (r0 - (i64)K * F) * row_bytes;
    const u8* u = routed ? w_up + (e * F + r0 % F) * row_bytes : s_up + (r0 - (i64)K * F) * row_bytes;
    if (g_src) *g_src = g;
    if (u_src) *u_src = u;
    if (GROUPS > 1)
        gu_copy_range_grouped<GROUPS, DEPTH>(g, u, b.here, row_bytes, sw);
    else
        gu_copy_range<PAIRED>(g, u, b.here, row_bytes, sw);
    return b;
}

// gate/up with every weight byte of the block in flight at once ("copy", as linear_rowwarp.cu's rowcp): the block's
// 8 gate rows and 8 up rows copied into shared memory (gu_copy_rows) before the activations are staged; the octets
// then decode from shared memory. Shared memory: the staged activations and sums, then 8 gate rows and 8 up rows. Same arguments and
// grid as gateup_q4_k.
// PDL (the "copy+pdl" gate/up of cupy_rowwarp_pdl; session 16, proven in session 17): launched with programmatic
// dependent launch, it waits for the kernel before it (the router: ids) first, then lets the down kernel be scheduled,
// so that the down kernel's weight loads overlap this kernel. The same sums: the same bits.
// SHARED_FIRST (with PDL: "copy+pdl+shared", implementation cupy_rowwarp_pdl_shared, written after GPU session 25):
// the grid's first ceil(Fs / 8) blocks take the shared expert's rows and the others the routed rows in order, and the
// shared expert's blocks copy their weight rows before the wait. Those rows do not depend on the router's ids, so
// their bytes (1/9 of a 48B layer's gate/up) stream while the router runs (~6 us a layer in session 25's timeline);
// blocks are scheduled in index order, so they are the ones resident then. Each row's sum is the same: the same bits.
template <int DT, bool PDL = false, bool SHARED_FIRST = false>
__device__ __forceinline__ void gateup_cp_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                               const u8* __restrict__ w_gate, const u8* __restrict__ w_up,
                                               i64 row_bytes, int F, const u8* __restrict__ s_gate,
                                               const u8* __restrict__ s_up, int Fs, int D, float* __restrict__ h) {
    extern __shared__ __align__(16) float mr_smem[];
    float4* sx = (float4*)mr_smem;
    float* ssum = mr_smem + D;
    u8* sw = (u8*)(ssum + (D >> 4));
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 routed = (i64)K * F, nsh = ((i64)Fs + 7) / 8;  // rows before the shared expert's; its blocks
    const i64 r0 = !SHARED_FIRST ? (i64)blockIdx.x * 8
                   : (i64)blockIdx.x < nsh ? routed + (i64)blockIdx.x * 8 : ((i64)blockIdx.x - nsh) * 8;
    GuRows b;
    if (PDL) {
        const bool early = SHARED_FIRST && r0 >= routed;  // the shared expert's rows: no ids needed
        if (early) {
            b = {(int)min((i64)8, routed + Fs - r0), false};
            gu_copy_range(s_gate + (r0 - routed) * row_bytes, s_up + (r0 - routed) * row_bytes, b.here, row_bytes, sw);
        }
        pdl_wait();  // ids and x: the router's and the norm's outputs
        pdl_launch_dependents();  // after the wait: the down kernel may read ids before its own wait
        if (!early) b = gu_copy_rows(ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, r0, sw);
    } else {
        b = gu_copy_rows(ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, r0, sw);
    }
    const int here = b.here;
    const bool bad = b.bad;
    ro_stage<DT, !PDL>(x, D, sx, ssum);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 2 + (oct & 1);  // the hidden row of this octet within the block
    const bool ok = local < here;
    const u8* r = sw + ((oct >= 2 ? 8 : 0) + (ok ? local : 0)) * row_bytes;
    const float acc = ro_copied_row(r, D >> 8, o, sx, ssum);
    const float up = __shfl_down_sync(0xffffffffu, acc, 16);  // lanes 0 and 8: the up row of their gate row
    if (o == 0 && oct < 2 && ok) h[r0 + local] = bad ? QNAN : mr_silu(acc) * up;
}

// gate/up in the copy form on Q8 activations and integer dots ("q8", with PDL: the gate/up of cupy_rowwarp_pdl_q8,
// written after GPU session 26). Nsight Compute on the float copy form (session 26, alone): 18.8 us a layer, 9.56 M
// warp instructions (~7.2 a weight), ~0.59 issued a cycle a scheduler - close to issue-bound. Here each block
// quantizes x once to Q8 blocks of 32 (ggml's Q8_0 rule, common.cuh's q8_inverse / q8_code, as quantize_act.cu's; a
// Q4_K sub-block is one such block) and each lane dots its 32 weights of a super-block with 8 __dp4a: ~1.3
// instructions a weight. The products
// are exact integers; the activations' rounding is the claim's (tolerance "act_q8", llama.cpp's arithmetic).
// Shared memory: D code bytes, D / 32 float scales, D / 16 int sums of 16 codes, then 8 gate rows and 8 up rows
// (~24 KB at the 48B's width against the float form's ~30.5: 9 blocks an SM, the 1152 blocks in one wave). Launched
// with programmatic dependent launch as the copy+pdl form: it waits for the router first, then lets down start.
// Same arguments and grid as gateup_q4_k.

// The hidden vector in Q8 ("q8 hidden", the gate/up and down of cupy_rowwarp_pdl_q8_hidden, written after GPU session
// 27): gate/up quantizes each block's 8 hidden values as one group, h's bytes becoming codes hq [rows] (int8) then
// hds [rows / 8] of float2 (d, d * sum of the group's codes), d = amax / 127 kept in float32 (not through fp16: this
// format is the kernels' own, not a GGUF type); a NaN or inf among the 8 makes d NaN, so down's output is NaN as the
// float forms' is. Down (down_q8_q4_k) then dots each super-block's codes with the 4-bit weights by __dp4a. Why:
// Nsight Compute in session 27 had the float down at ~10 thread-instructions a weight (its float32 h, 32 values a
// lane a super-block, read through L1, each summed again), 19.2 us for ~12 MB alone, while the read budget at the
// roofline is ~4.6 instructions a weight; the Q8 gate/up had already taken gate/up from 19.6 to 15.5 us.
__device__ __forceinline__ void hq8_store_group(float v, int lane, int here, i64 r0, u8* __restrict__ hq,
                                                float2* __restrict__ hds, i64 group) {
    // lanes 0..7 of a warp hold the group's values (the others 0 and out of every 8-lane reduction but their own)
    float amax = fabsf(v);
    int bad = !(fabsf(v) <= 3.402823466e38f);  // NaN or inf
#pragma unroll
    for (int m = 1; m < 8; m <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        bad |= __shfl_xor_sync(0xffffffffu, bad, m);
    }
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const int q = bad ? 0 : q8_code(v, id);
    int sum = q;
#pragma unroll
    for (int m = 1; m < 8; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane < here) hq[r0 + lane] = (u8)(i8)q;
    if (lane == 0) hds[group] = make_float2(bad ? QNAN : d, bad ? QNAN : __fmul_rn(d, (float)sum));
}

// One group of 8 hidden rows dotted with the staged x (q8_stage's xq, dx, s16): the group's 8 gate rows at sw and its
// 8 up rows 8 rows further, b its rows and whether its expert id was bad, r0 its first hidden row, group its index.
// Writes h[r0 ..] in float32, or (HQ8) the group's codes and scales into h's bytes (hq8_store_group; hv: 8 floats of
// shared memory, a barrier between their writes and warp 0's reads). Every Q8 gate/up form computes its rows here, so
// that their sums are one code's: the same bits whichever form runs. PAIRS: each lane of the octet a whole sub-block
// pair of every other super-block (lane o: pair o % 4, super-blocks o / 4, + 2, ...; q8_block64), not half a pair of
// every one (q8_block): the "pairs" form, its own bits. XPAD (with PAIRS): the codes at q8_stage's padded stride.
template <bool HQ8, bool PAIRS = false, bool XPAD = false, int GROUPS = 1, int DEPTH = GROUPS>
__device__ __forceinline__ void gu_q8_group(const u8* sw, i64 row_bytes, int D, const i8* xq, const float* dx,
                                            const int* s16, GuRows b, i64 r0, i64 group, i64 rows,
                                            float* __restrict__ h, float* hv, const u8* g_src = nullptr,
                                            const u8* u_src = nullptr) {
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const int local = (tid >> 5) * 2 + (oct & 1);  // the hidden row of this octet within the group
    const bool ok = local < b.here;
    const u8* r = sw + ((oct >= 2 ? 8 : 0) + (ok ? local : 0)) * row_bytes;
    float acc = 0.0f;
    if (PAIRS && GROUPS > 1) {  // each commit group dotted once it has landed; the lane's super-blocks in the same
                                // order as below (o / 4, o / 4 + 2, ...): the same sum, the same bits
#pragma unroll
        for (int grp = 0; grp < GROUPS; ++grp) {
            cp_async_wait_pending(min(GROUPS, grp + DEPTH) - grp - 1);  // groups 0 .. min(GROUPS, grp + DEPTH) - 1
                                                                        // asked by now
            __syncthreads();  // every thread's copies of the group (and, the first time, the staged x)
            if (grp + DEPTH < GROUPS)  // its region of shared memory is nobody's yet
                gu_copy_group<GROUPS>(g_src, u_src, b.here, grp + DEPTH, row_bytes, (u8*)sw);
            const int s1 = gu_sb0(grp + 1, GROUPS, D >> 8);
            int sb = gu_sb0(grp, GROUPS, D >> 8);
            for (sb += (sb ^ (o >> 2)) & 1; sb < s1; sb += 2)
                acc += q8_block64<XPAD>(r + (i64)sb * 144, o & 3, xq, dx, s16, sb);
        }
    } else if (PAIRS)
        for (int sb = o >> 2; sb < (D >> 8); sb += 2)
            acc += q8_block64<XPAD>(r + (i64)sb * 144, o & 3, xq, dx, s16, sb);
    else
        for (int sb = 0; sb < (D >> 8); ++sb) acc += q8_block(r + (i64)sb * 144, o, xq, dx, s16, sb);
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);  // the octet's row
    const float up = __shfl_down_sync(0xffffffffu, acc, 16);  // lanes 0 and 8: the up row of their gate row
    if (!HQ8) {
        if (o == 0 && oct < 2 && ok) h[r0 + local] = b.bad ? QNAN : mr_silu(acc) * up;
        return;
    }
    if (o == 0 && oct < 2) hv[local] = ok ? (b.bad ? QNAN : mr_silu(acc) * up) : 0.0f;
    __syncthreads();
    if (tid < 32) {
        u8* hq = (u8*)h;
        hq8_store_group(lane < 8 ? hv[lane & 7] : 0.0f, lane, b.here, r0, hq, (float2*)(hq + rows), group);
    }
}

// the Q8 gate/up itself (the comment above q8_stage says what and why); HQ8: h written in Q8 (hq8_store_group);
// PAIRS: gu_q8_group's pairs form (with HQ8: the gate/up of cupy_rowwarp_pdl_q8_pairs); XPAD (with PAIRS): x's codes
// staged at the padded stride (q8_stage), the dense form's sums in the same order: the same bits. SHARED_L2 (the
// gate/up of cupy_rowwarp_pdl_q8_pairs_l2pf, written in GPU session 40): a block of the shared expert's rows, whose
// addresses need no expert id, asks for its weight lines in the L2 (prefetch_l2) before the wait, while the router
// runs, so that its copy after the wait finds them there (1/9 of the 48B's gate/up bytes). Unlike SHARED_FIRST (the
// float copy form's, session 26: 0.996), the blocks keep their order and nothing is copied before the wait. The
// same loads and sums: the same bits.
template <int DT, bool HQ8 = false, bool PAIRS = false, bool XPAD = false, bool SHARED_L2 = false,
          int GROUPS = 1, int DEPTH = GROUPS>
__device__ __forceinline__ void gateup_q8_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                               const u8* __restrict__ w_gate, const u8* __restrict__ w_up,
                                               i64 row_bytes, int F, const u8* __restrict__ s_gate,
                                               const u8* __restrict__ s_up, int Fs, int D, float* __restrict__ h) {
    extern __shared__ __align__(16) u8 mq_smem[];
    __shared__ float hv[8];
    i8* xq = (i8*)mq_smem;
    float* dx = (float*)(mq_smem + q8_xq_bytes(D, XPAD));
    int* s16 = (int*)(dx + (D >> 5));
    u8* sw = (u8*)(s16 + (D >> 4));
    const i64 r0 = (i64)blockIdx.x * 8;
    if (SHARED_L2 && r0 >= (i64)K * F) {  // the shared expert's rows [r0, r0 + here): a line a thread, the last byte
        const i64 off = (r0 - (i64)K * F) * row_bytes, bytes = min((i64)8, (i64)K * F + Fs - r0) * row_bytes;
        for (i64 c = (i64)threadIdx.x * 128; c < bytes; c += (i64)blockDim.x * 128) {
            prefetch_l2(s_gate + off + c);
            prefetch_l2(s_up + off + c);
        }
        if (threadIdx.x == 0) {  // the line of the range's last byte, which a start at off + 128 i may miss
            prefetch_l2(s_gate + off + bytes - 1);
            prefetch_l2(s_up + off + bytes - 1);
        }
    }
    pdl_wait();  // ids and x: the router's and the norm's outputs
    pdl_launch_dependents();  // after the wait: the down kernel may read ids before its own wait
    const u8 *g_src = nullptr, *u_src = nullptr;  // the rows' sources, for a group requested later (DEPTH < GROUPS)
    const GuRows b = gu_copy_rows<PAIRS, GROUPS, DEPTH>(ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, r0, sw,
                                                        &g_src, &u_src);
    q8_stage<DT, XPAD>(x, D, xq, dx, s16);
    if (GROUPS == 1) {  // the grouped form waits for each group inside gu_q8_group
        cp_async_wait_all();
        __syncthreads();
    }
    gu_q8_group<HQ8, PAIRS, XPAD, GROUPS, DEPTH>(sw, row_bytes, D, xq, dx, s16, b, r0, blockIdx.x, (i64)K * F + Fs, h,
                                                 hv, g_src, u_src);
}

// The pipelined Q8 gate/up ("q8 pipe", the gate/up of cupy_rowwarp_pdl_q8_pipe, written after GPU session 28): the
// Q8 hidden form's rows and sums (gu_q8_group), but a grid of a few blocks an SM, each taking groups of 8 hidden rows
// g = blockIdx.x, + gridDim.x, ... through STAGES stages of shared memory (as linear.cu's weight stream): STAGES - 1
// groups' rows requested ahead of the one its warps dot, x staged once a block. Why: Nsight Compute in session 28
// had the one-wave form (1152 blocks of one group each) at 15.8 us for ~24 MB, 32% of DRAM, 5.2 thread-instructions
// a weight of which the staging of x in every block is about a third. Every block requests its rows at once and waits
// for them, so the bytes all land near the end and no dot overlaps a transfer; here rows are requested in the order
// they are dotted, and x is quantized by 1/3 .. 1/4 as many blocks. Each row's sum is gu_q8_group's: the same bits as
// the one-wave form. Shared memory: q8_stage's, then STAGES x 16 rows. Launched with programmatic dependent launch:
// it waits for the router first, then lets down start. Session 28 measured it slower: 16.35 against 15.52 us alone
// (Nsight Compute), 862 against 788 us a token per op, its rung 0.958. The staging was a tenth of the instructions,
// not a third, and at 3 blocks an SM (2.9 warps a scheduler) the dot loop's 87 instructions a super-block bind.
template <int DT, int STAGES>
__device__ __forceinline__ void gateup_q8pipe_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K,
                                                   int E, const u8* __restrict__ w_gate, const u8* __restrict__ w_up,
                                                   i64 row_bytes, int F, const u8* __restrict__ s_gate,
                                                   const u8* __restrict__ s_up, int Fs, int D,
                                                   float* __restrict__ h) {
    extern __shared__ __align__(16) u8 mq_smem[];
    __shared__ float hv[8];
    i8* xq = (i8*)mq_smem;
    float* dx = (float*)(mq_smem + D);
    int* s16 = (int*)(dx + (D >> 5));
    u8* sw0 = (u8*)(s16 + (D >> 4));
    const i64 stage_bytes = 16 * row_bytes, rows = (i64)K * F + Fs;
    const i64 groups = rows / 8;  // rows % 8 == 0 (the host checks)
    const int mine = (i64)blockIdx.x < groups ? (int)((groups - 1 - blockIdx.x) / gridDim.x) + 1 : 0;
    pdl_wait();  // ids and x: the router's and the norm's outputs
    pdl_launch_dependents();  // after the wait: the down kernel may read ids before its own wait
    // the j-th group of this block into stage j % STAGES (always one commit: uniform group counts)
    auto issue = [&](int j) {
        if (j < mine)
            gu_copy_rows(ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs,
                         ((i64)blockIdx.x + (i64)j * gridDim.x) * 8, sw0 + (j % STAGES) * stage_bytes);
        else
            cp_async_commit();
    };
#pragma unroll
    for (int j = 0; j < STAGES - 1; ++j) issue(j);
    q8_stage<DT>(x, D, xq, dx, s16);
    for (int j = 0; j < mine; ++j) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // group j landed (and x staged); every warp is past group j - 1 and its hv
        issue(j + STAGES - 1);  // into group j - 1's stage
        const i64 g = (i64)blockIdx.x + (i64)j * gridDim.x, r0 = g * 8;
        i64 e;
        const GuRows b = gu_rows(ids, K, E, F, Fs, r0, e);  // as gu_copy_rows found them when it copied this group
        gu_q8_group<true>(sw0 + (j % STAGES) * stage_bytes, row_bytes, D, xq, dx, s16, b, r0, g, rows, h, hv);
    }
    cp_async_wait_all();  // leave no copy in flight into memory the next kernel may own
}

// gate/up in the copy form with packed half2 products ("half", implementation cupy_rowhalf; session 16: 35.8 against
// triton_prefetch's 34.9 us a layer, its rung 0.939 before the staging was mended; selected by nothing):
// gateup_cp_q4_k with the activations staged as fp16 pairs scaled by a power of two (q4k_half.cuh's rh_stage) and
// each row decoded by rh_copied_row. Shared memory: D / 8 slots of 16 bytes,
// D / 16 float sums, then 8 gate rows and 8 up rows. Same arguments and grid as gateup_q4_k.
template <int DT>
__device__ __forceinline__ void gateup_hc_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                               const u8* __restrict__ w_gate, const u8* __restrict__ w_up,
                                               i64 row_bytes, int F, const u8* __restrict__ s_gate,
                                               const u8* __restrict__ s_up, int Fs, int D, float* __restrict__ h) {
    extern __shared__ __align__(16) float mr_smem[];
    __shared__ float red[32];
    uint4* shx = (uint4*)mr_smem;
    float* ssum = mr_smem + 4 * (D >> 3);
    u8* sw = (u8*)(ssum + (D >> 4));
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 r0 = (i64)blockIdx.x * 8;
    const GuRows b = gu_copy_rows(ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, r0, sw);
    const int here = b.here;
    const bool bad = b.bad;
    const int s = rh_stage<DT>(x, D, red, shx, ssum);
    cp_async_wait_all();
    __syncthreads();
    const int local = (tid >> 5) * 2 + (oct & 1);  // the hidden row of this octet within the block
    const bool ok = local < here;
    const u8* r = sw + ((oct >= 2 ? 8 : 0) + (ok ? local : 0)) * row_bytes;
    const float acc = rh_copied_row(r, D >> 8, o, shx, ssum, rh_pow2(-s));
    const float up = __shfl_down_sync(0xffffffffu, acc, 16);  // lanes 0 and 8: the up row of their gate row
    if (o == 0 && oct < 2 && ok) h[r0 + local] = bad ? QNAN : mr_silu(acc) * up;
}

// gate/up as a warp a hidden row ("staged", as linear_rowwarp.cu's rowstg): octets 0 and 1 take the gate row's even
// and odd super-blocks, octets 2 and 3 the up row's, each octet's group of loads all first (the first before the
// staging), decoded from the staged activations; the octets' sums added in a fixed order (within an octet, then the
// pair). Twice the octet form's warps for the same rows (session 14: the octet and copy forms hold too few warps an
// SM to hide their latency). 256 threads = 8 rows; the octet form's shared memory and grid.
// Super-blocks an octet has in flight: 3 (two trips for the 48B's 5 a row-half) keeps the kernel within 64 registers,
// where RW_ROUNDS' 4 spilled
#define MR_STG_ROUNDS 3
template <int DT>
__device__ __forceinline__ void gateup_stg_q4_k(const void* __restrict__ x, const i64* __restrict__ ids, int K, int E,
                                                const u8* __restrict__ w_gate, const u8* __restrict__ w_up,
                                                i64 row_bytes, int F, const u8* __restrict__ s_gate,
                                                const u8* __restrict__ s_up, int Fs, int D, float* __restrict__ h) {
    extern __shared__ __align__(16) float mr_smem[];
    float4* sx = (float4*)mr_smem;
    float* ssum = mr_smem + D;
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3, par = oct & 1;
    const i64 rows = (i64)K * F + Fs;
    const i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (tid >> 5);
    const bool ok = r < rows;  // a warp past the end computes row 0 and writes nothing (all reach the barrier)
    const i64 rr = ok ? r : 0;
    const bool up = oct >= 2;
    bool bad = false;
    const u8* w;
    if (rr < (i64)K * F) {
        i64 e = ids[rr / F];
        bad = e < 0 || e >= E;
        e = bad ? 0 : e;
        w = (up ? w_up : w_gate) + (e * F + rr % F) * row_bytes;
    } else {
        w = (up ? s_up : s_gate) + (rr - (i64)K * F) * row_bytes;
    }
    const int nsb = D >> 8;
    uint4 hd[MR_STG_ROUNDS], q[MR_STG_ROUNDS];
    rs_group_load<MR_STG_ROUNDS>(w, nsb, 0, par, 2, o, hd, q);  // the first group's loads, before the staging
    ro_stage<DT>(x, D, sx, ssum);
    __syncthreads();
    float acc = rs_walk<MR_STG_ROUNDS>(w, nsb, par, 2, o, hd, q, sx, ssum);
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 8));  // even + odd super-blocks: the row's dot
    const float u = __shfl_down_sync(0xffffffffu, acc, 16);         // lane 0: the up row's
    if (lane == 0 && ok) h[r] = bad ? QNAN : mr_silu(acc) * u;
}

// One group of a down warp's loads (down_q4_k, down_split_q4_k), all issued before any is used: the super-blocks
// u = g + 4 i + oct (i < ROUNDS) below u_end of output d, each from its slot's expert row (an id outside [0, E): expert
// 0's, and bad set) or the shared expert's, its scale the slot's routing weight (1 for the shared expert's).
template <bool PDL, int ROUNDS>
__device__ __forceinline__ void down_group_load(int g, int u_end, int oct, int o, const i64* __restrict__ ids,
                                                const float* __restrict__ weights, int E,
                                                const u8* __restrict__ w_down, i64 row_bytes, int per, int routed,
                                                const u8* __restrict__ s_down, i64 s_row_bytes, int D, i64 d,
                                                uint4 (&hd)[ROUNDS], uint4 (&q)[ROUNDS], float (&scale)[ROUNDS],
                                                bool& bad) {
#pragma unroll
    for (int i = 0; i < ROUNDS; ++i) {
        const int u = g + 4 * i + oct;
        scale[i] = 1.0f;
        if (u < u_end) {
            const u8* b;
            if (u < routed) {
                const int slot = u / per;
                i64 e = PDL ? __ldcg(ids + slot) : ids[slot];
                if (e < 0 || e >= E) {
                    bad = true;
                    e = 0;
                }
                scale[i] = PDL ? __ldcg(weights + slot) : weights[slot];
                b = w_down + (e * D + d) * row_bytes + (i64)(u - slot * per) * 144;
            } else {
                b = s_down + d * s_row_bytes + (i64)(u - routed) * 144;
            }
            q4k_load(b, o, hd[i], q[i]);
        }
    }
}

// That group's products with h (float32; with PDL read coherently, after the wait), added to acc in order.
template <bool PDL, int ROUNDS>
__device__ __forceinline__ float down_group_add(int g, int u_end, int oct, int o, const float* __restrict__ h,
                                                const uint4 (&hd)[ROUNDS], const uint4 (&q)[ROUNDS],
                                                const float (&scale)[ROUNDS], float acc) {
#pragma unroll
    for (int i = 0; i < ROUNDS; ++i) {
        const int u = g + 4 * i + oct;
        if (u < u_end) acc += scale[i] * rw_block<DT_F32, !PDL>(hd[i], q[i], h, (i64)u * 256, o);
    }
    return acc;
}

// h [K * F + Fs] float32, ids [K], weights [K] float32, w_down [E, D, F] Q4_K (rows of row_bytes = F / 256 * 144),
// s_down [D, Fs] (rows of s_row_bytes; null, Fs = 0: none); y [D] in dtype y_dt. grid ceil(D / 4).
// PDL (the down of cupy_rowwarp_pdl): launched with programmatic dependent launch after the PDL gate/up, which lets it
// be scheduled only once the router (ids, weights) has completed; its first group of weight loads is issued before it
// waits for gate/up (h), h then read from L2. The same sums: the same bits.
// ROUNDS: a warp's group of loads is 4 * ROUNDS super-blocks (RW_ROUNDS: 16, three groups for the 48B's 36). WIDE
// (DOWN_WIDE_ROUNDS, the down of cupy_rowwarp_pdl_wide, written after GPU session 26): the 48B's whole row in one
// group, so with PDL every weight byte of the warp is requested before the wait for gate/up. Session 26's timeline
// had down ending ~18 us after gate/up for 12 MB (~3 us of bytes), its second and third groups each a round trip
// after the wait. A lane adds its super-blocks u = oct, oct + 4, ... in the same order whatever ROUNDS is (each
// group's in turn, ascending), so every ROUNDS gives the same bits. Session 26: slower (rung 0.966; 29.7 against 19.6
// us alone under Nsight Compute): 128 registers, fewer warps, in a kernel short of warps.
template <bool PDL = false, int ROUNDS = RW_ROUNDS>
__device__ __forceinline__ void down_q4_k(const float* __restrict__ h, const i64* __restrict__ ids,
                                          const float* __restrict__ weights, int K, int E,
                                          const u8* __restrict__ w_down, i64 row_bytes, int F,
                                          const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                          void* __restrict__ y, int y_dt) {
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3;
    const i64 d = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (d >= D) return;  // the whole warp
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    float acc = 0.0f;
    bool bad = false;
    for (int g = 0; g < units; g += 4 * ROUNDS) {
        uint4 hd[ROUNDS], q[ROUNDS];
        float scale[ROUNDS];
        down_group_load<PDL, ROUNDS>(g, units, oct, o, ids, weights, E, w_down, row_bytes, per, routed, s_down,
                                     s_row_bytes, D, d, hd, q, scale, bad);
        if (PDL && g == 0) pdl_wait();  // h: gate/up's output
        acc = down_group_add<PDL, ROUNDS>(g, units, oct, o, h, hd, q, scale, acc);
    }
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d, y_dt, bad ? QNAN : acc);
}

// One lane's share of one super-block's Q8 hidden values (hq8_store_group's format, read through L1 after the PDL
// wait): its 16 low-nibble codes (two groups of 8) and 16 high-nibble ones 32 further on, and the (d, d sum) of their
// four groups. __ldca is asm volatile: each load stays where the source puts it (session 30's source page of
// down_q8_q4_k found each round's loads issued next to their use), so a form that wants them early must say so.
struct Hq8Lane {
    int4 cl, ch;
    float4 fl, fh;
};
__device__ __forceinline__ Hq8Lane hq8_load(const u8* __restrict__ hq, const float4* __restrict__ hds16, i64 sb0,
                                            int o) {
    const i64 base = sb0 + 64 * (o >> 1) + 16 * (o & 1);
    return {__ldca((const int4*)(hq + base)), __ldca((const int4*)(hq + base + 32)), __ldca(hds16 + (base >> 4)),
            __ldca(hds16 + ((base + 32) >> 4))};
}

// That share's product with the lane's 32 weights of the super-block: header hd, qs bytes q.
__device__ __forceinline__ float hq8_dot(uint4 hd, uint4 q, const Hq8Lane& v, int o) {
    const int j = o >> 1;
    const int4 cl = v.cl, ch = v.ch;
    const float4 fl = v.fl, fh = v.fh;  // (d, d sum) x 2
    float sc_l, mn_l, sc_h, mn_h;
    rw_scale_min(hd.y, hd.z, hd.w, 2 * j, sc_l, mn_l);
    rw_scale_min(hd.y, hd.z, hd.w, 2 * j + 1, sc_h, mn_h);
    const float d = f16_to_f32((u16)(hd.x & 0xffffu)), dmin = f16_to_f32((u16)(hd.x >> 16));
    const u32 m = 0x0F0F0F0Fu;
    int l0 = __dp4a((int)(q.x & m), cl.x, 0), l1 = __dp4a((int)(q.z & m), cl.z, 0);
    l0 = __dp4a((int)(q.y & m), cl.y, l0);
    l1 = __dp4a((int)(q.w & m), cl.w, l1);
    int h0 = __dp4a((int)((q.x >> 4) & m), ch.x, 0), h1 = __dp4a((int)((q.z >> 4) & m), ch.z, 0);
    h0 = __dp4a((int)((q.y >> 4) & m), ch.y, h0);
    h1 = __dp4a((int)((q.w >> 4) & m), ch.w, h1);
    const float lo = (d * sc_l) * (fl.x * (float)l0 + fl.z * (float)l1) - (dmin * mn_l) * (fl.y + fl.w);
    const float hi = (d * sc_h) * (fh.x * (float)h0 + fh.z * (float)h1) - (dmin * mn_h) * (fh.y + fh.w);
    return lo + hi;
}

// One lane's share of one super-block against the Q8 hidden vector: header hd, qs bytes q, the super-block's first
// hidden index sb0 (hq8_load, then hq8_dot).
__device__ __forceinline__ float hq8_block(uint4 hd, uint4 q, const u8* __restrict__ hq,
                                           const float4* __restrict__ hds16, i64 sb0, int o) {
    return hq8_dot(hd, q, hq8_load(hq, hds16, sb0, o), o);
}

// down on the Q8 hidden vector (the comment above hq8_store_group says why): down_q4_k<true>'s warp an output, its
// first group of weight loads issued before the PDL wait, each super-block's product by hq8_block. hq: the hidden
// vector's bytes as gate/up's HQ8 form wrote them (codes [K * F + Fs], then their groups' float2). Same other
// arguments and grid as down_q4_k.
// XPF (the "xpf" down, written after GPU session 38): right after the wait, every line of the hidden vector the lane
// will read (its codes and their scales, for every unit of every group) is prefetched into L1 (common.cuh's
// prefetch_l1). The compiled down (nvdisasm, sm_90) loads each round's share of hq after the round before has been
// summed, so a group's four rounds wait four L2 round trips in turn for the vector gate/up has just written. The same
// loads and sums: the same bits.
template <int ROUNDS = RW_ROUNDS, bool XPF = false>
__device__ __forceinline__ void down_q8_q4_k(const u8* __restrict__ hq, const i64* __restrict__ ids,
                                             const float* __restrict__ weights, int K, int E,
                                             const u8* __restrict__ w_down, i64 row_bytes, int F,
                                             const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                             void* __restrict__ y, int y_dt) {
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3;
    const i64 d = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (d >= D) return;  // the whole warp
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    const float4* hds16 = (const float4*)(hq + (i64)units * 256);
    float acc = 0.0f;
    bool bad = false;
    for (int g = 0; g < units; g += 4 * ROUNDS) {
        uint4 hd[ROUNDS], q[ROUNDS];
        float scale[ROUNDS];
        down_group_load<true, ROUNDS>(g, units, oct, o, ids, weights, E, w_down, row_bytes, per, routed, s_down,
                                      s_row_bytes, D, d, hd, q, scale, bad);
        if (g == 0) {
            pdl_wait();  // hq: gate/up's output
            if (XPF) {  // hq8_load's lines for every unit this lane reads: its codes' line, its scales' line
                for (int u = oct; u < units; u += 4) {
                    const i64 base = (i64)u * 256 + 64 * (o >> 1) + 16 * (o & 1);
                    prefetch_l1(hq + base);
                    prefetch_l1((const u8*)hds16 + base);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int u = g + 4 * i + oct;
            if (u < units) acc += scale[i] * hq8_block(hd[i], q[i], hq, hds16, (i64)u * 256, o);
        }
    }
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d, y_dt, bad ? QNAN : acc);
}

// down on the Q8 hidden vector with its loads requested earlier ("q8 loads", the down of
// cupy_rowwarp_pdl_q8_hidden_ld and _q8_pairs_ld, written after GPU session 30). Nsight Compute's source page of
// down_q8_q4_k (session 30, launched alone, caches flushed) put 60% of its warps' stall samples on long-scoreboard
// waits at three kinds of instruction: ~22% on the compare after each round's expert-id load (ids[slot] through
// __ldcg: four a group, each a round trip before that round's weights can be requested), ~16% on the __dp4a after
// each round's hidden-vector loads (__ldca, issued next to their use), ~10% on the first weights after the wait.
// CUDA's __ldcg and __ldca are asm volatile, so each stays where the source puts it. Here a warp reads its K slots'
// ids and routing weights once, lane s slot s (one round trip; K at most 32: DOWN_LD_MAX_K), and takes each unit's
// from its lane by shuffle. AHEAD (the "ahead" form): each round's hidden values are requested before the round
// before is dotted, one round ahead (94 registers against 80). The same values, the same products in the same order:
// down_q8_q4_k's bits. Session 30, per op in the norm-router-experts chain: 736.9 us a token without AHEAD, 746.3 with
// it, against down_q8_q4_k's pair's 785.3: the id loads were the wait that mattered.
// L2PF (the "l2pf" form, written in GPU session 40): before the wait, every later group's weight lines (the addresses
// the lane will load after it: each unit's header and its qs share) are asked into the L2 (prefetch.cuh's prefetch_l2:
// no register). Why: session 40's staged down took the hidden vector's round trips after the wait to none and tied,
// and the timeline has the down ending 8.0 us after gate/up for 11.9 MB; after the wait the ids form still requests
// its second and third groups' weights (20 of the 48B's 36 super-blocks a row, 6.6 MB) from DRAM, each group only once
// the group before is dotted, and the 72 registers a row's weights take at once would cost the one wave. The same
// loads and products: down_q8_q4_k's bits.
#define DOWN_LD_MAX_K 32
template <bool AHEAD, int ROUNDS = RW_ROUNDS, bool L2PF = false>
__device__ __forceinline__ void down_q8ld_q4_k(const u8* __restrict__ hq, const i64* __restrict__ ids,
                                               const float* __restrict__ weights, int K, int E,
                                               const u8* __restrict__ w_down, i64 row_bytes, int F,
                                               const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                               void* __restrict__ y, int y_dt) {
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3;
    const i64 d = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (d >= D) return;  // the whole warp
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    const float4* hds16 = (const float4*)(hq + (i64)units * 256);
    i64 mine = 0;        // lane s: slot s's expert (a bad id read as expert 0)
    float wmine = 1.0f;  // and its routing weight
    bool bad = false;
    if (lane < K) {
        mine = __ldcg(ids + lane);
        wmine = __ldcg(weights + lane);
        if (mine < 0 || mine >= E) {
            bad = true;
            mine = 0;
        }
    }
    float acc = 0.0f;
    for (int g = 0; g < units; g += 4 * ROUNDS) {
        uint4 hd[ROUNDS], q[ROUNDS];
        float scale[ROUNDS];
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int u = g + 4 * i + oct;
            const int slot = u < routed ? u / per : 0;
            const i64 e = __shfl_sync(0xffffffffu, mine, slot);  // every lane shuffles; a unit past the row unused
            const float w = __shfl_sync(0xffffffffu, wmine, slot);
            scale[i] = u < routed ? w : 1.0f;
            if (u < units) {
                const u8* b = u < routed ? w_down + (e * D + d) * row_bytes + (i64)(u - slot * per) * 144
                                         : s_down + d * s_row_bytes + (i64)(u - routed) * 144;
                q4k_load(b, o, hd[i], q[i]);
            }
        }
        if (L2PF && g == 0) {  // the later groups' lines, r the same for every lane (the shuffle's whole warp)
            for (int r = 4 * ROUNDS; r < units; r += 4) {
                const int u = r + oct;
                const int slot = u < routed ? u / per : 0;
                const i64 e = __shfl_sync(0xffffffffu, mine, slot);
                if (u < units) {
                    const u8* b = u < routed ? w_down + (e * D + d) * row_bytes + (i64)(u - slot * per) * 144
                                             : s_down + d * s_row_bytes + (i64)(u - routed) * 144;
                    prefetch_l2(b);
                    prefetch_l2(b + 16 + 16 * o);
                }
            }
        }
        if (g == 0) pdl_wait();  // hq: gate/up's output
        Hq8Lane next{};
        if (AHEAD && g + oct < units) next = hq8_load(hq, hds16, (i64)(g + oct) * 256, o);
#pragma unroll
        for (int i = 0; i < ROUNDS; ++i) {
            const int u = g + 4 * i + oct;
            if (AHEAD) {
                const Hq8Lane v = next;
                if (i + 1 < ROUNDS && u + 4 < units) next = hq8_load(hq, hds16, (i64)(u + 4) * 256, o);
                if (u < units) acc += scale[i] * hq8_dot(hd[i], q[i], v, o);
            } else if (u < units) {
                acc += scale[i] * hq8_dot(hd[i], q[i], hq8_load(hq, hds16, (i64)u * 256, o), o);
            }
        }
    }
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d, y_dt, bad ? QNAN : acc);
}

// One lane's share of one super-block's Q8 hidden values, as hq8_load reads it, from the copy of the hidden vector in
// shared memory (down_q8hs_q4_k's): codes [units * 256], then their scales, the float4 of codes [16 i, 16 i + 16) at
// the scales' byte 16 i (hq8_load's hds16 + i).
__device__ __forceinline__ Hq8Lane hq8_load_shared(const u8* s, int units, int sb0, int o) {
    const int base = sb0 + 64 * (o >> 1) + 16 * (o & 1);
    const u8* sc = s + units * 256;
    return {*(const int4*)(s + base), *(const int4*)(s + base + 32), *(const float4*)(sc + base),
            *(const float4*)(sc + base + 32)};
}

// down on the Q8 hidden vector staged in shared memory ("hs", the down of cupy_rowwarp_pdl_q8_pairs_hs, written in
// GPU session 40): down_q8ld_q4_k's "ids" form (the slots' ids and routing weights read once a warp, its first group
// of weights requested before the wait), but right after the wait the block's threads copy the whole hidden vector
// (codes and scales, units x 512 bytes, contiguous in h) into shared memory with cp.async, every copy issued before
// any is waited on, and the dots read it there. Why: the compiled ids-once down (nvdisasm, sm_90; tests/cuda_sass.py's
// round_trips) waits out 4 L2 round trips in turn for the hidden vector in a group, in each of its 3 groups of 16
// super-blocks (the 48B's 36 a row); here the vector is one L2 round trip and a barrier, once. The price: every block
// reads the whole vector from the L2 (18 KB at the 48B's shape), where the ids form's lanes read their shares through
// L1, shared by the blocks of an SM. Each lane adds the same products in the same order (units oct, oct + 4, ...):
// down_q8_q4_k's bits. A row's 36 super-blocks in one group (ROUNDS 9) would also request every weight before the wait,
// but its 72 registers of weights need more than the 96 a thread that 18 warps an SM allow (one wave of the 48B's
// 2304 warps on 132 SMs): ptxas spills 48 bytes. Dynamic shared memory: units x 512 bytes (moe_experts.py's
// down_hs_smem); a warp past the last output copies its share and skips the rest. Its id reads and weight loads are
// down_q8ld_q4_k's, written again rather than shared: moving them into helpers changed the ids form's register
// allocation (nvdisasm), and that form is the step's. GPU session 40: a tie (x0.991 per op, x1.001 / x1.001 in
// the step, its own time 207.4 against the ids form's 209.0 us a token): the vector's round trips are not its wait.
template <int ROUNDS = RW_ROUNDS>
__device__ __forceinline__ void down_q8hs_q4_k(const u8* __restrict__ hq, const i64* __restrict__ ids,
                                               const float* __restrict__ weights, int K, int E,
                                               const u8* __restrict__ w_down, i64 row_bytes, int F,
                                               const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                               void* __restrict__ y, int y_dt) {
    extern __shared__ __align__(16) u8 hs[];  // [units * 256] codes, then [units * 256] bytes of their scales
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3;
    const i64 d = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const bool live = d < D;  // the whole warp
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    i64 mine = 0;        // lane s: slot s's expert (a bad id read as expert 0)
    float wmine = 1.0f;  // and its routing weight
    bool bad = false;
    if (live && lane < K) {
        mine = __ldcg(ids + lane);
        wmine = __ldcg(weights + lane);
        if (mine < 0 || mine >= E) {
            bad = true;
            mine = 0;
        }
    }
    float acc = 0.0f;
    for (int g = 0; g < units; g += 4 * ROUNDS) {
        uint4 hd[ROUNDS], q[ROUNDS];
        float scale[ROUNDS];
        if (live) {
#pragma unroll
            for (int i = 0; i < ROUNDS; ++i) {
                const int u = g + 4 * i + oct;
                const int slot = u < routed ? u / per : 0;
                const i64 e = __shfl_sync(0xffffffffu, mine, slot);  // every lane shuffles; a unit past the row unused
                const float w = __shfl_sync(0xffffffffu, wmine, slot);
                scale[i] = u < routed ? w : 1.0f;
                if (u < units) {
                    const u8* b = u < routed ? w_down + (e * D + d) * row_bytes + (i64)(u - slot * per) * 144
                                             : s_down + d * s_row_bytes + (i64)(u - routed) * 144;
                    q4k_load(b, o, hd[i], q[i]);
                }
            }
        }
        if (g == 0) {
            pdl_wait();  // hq: gate/up's output
            for (int c = threadIdx.x; c < units * 32; c += blockDim.x)  // 16-byte chunks: codes, then scales
                cp_async16(smem_addr(hs + 16 * c), hq + 16 * (i64)c, 16);
            cp_async_commit();
            cp_async_wait_all();
            __syncthreads();
        }
        if (live) {
#pragma unroll
            for (int i = 0; i < ROUNDS; ++i) {
                const int u = g + 4 * i + oct;
                if (u < units) acc += scale[i] * hq8_dot(hd[i], q[i], hq8_load_shared(hs, units, u * 256, o), o);
            }
        }
    }
    if (!live) return;
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d, y_dt, bad ? QNAN : acc);
}

// down on the Q8 hidden vector with every weight byte of a warp requested at once ("q8 copy", the down of
// cupy_rowwarp_pdl_q8_hidden_cp and cupy_rowwarp_pdl_q8_pairs_cp, written after GPU session 29). Nsight Compute in
// session 29 had down_q8_q4_k alone at ~12 us for ~12 MB: 20% of DRAM, ~4.3 warps a scheduler (the grid's 17 an SM)
// with 0.58 eligible, long-scoreboard ~6.7 an issue, and only ~3.7 M warp instructions (~3.5 us of issue): its 36
// super-blocks a warp come in three groups of loads, each a dependent round trip after the last one's products, so
// the warps wait on memory with their bytes not yet requested. Here each warp copies its own output's rows (a slot's
// row after another, then the shared expert's) into its share of shared memory with cp.async before the PDL wait,
// in G commit groups of consecutive units; after the wait it dots group g as soon as its own copies of g have landed
// (cp.async.wait_group, then __syncwarp: the warp's other lanes' copies are visible), while later groups still
// stream. No register arrays hold loads, so no register cost for the bytes in flight, and no block barrier: a warp
// depends on its own copies only. Each lane adds its units u = oct, oct + 4, ... in ascending order with the same
// products (hq8_block) and the same scale as down_q8_q4_k: the same bits. Shared memory a warp (dcp_warp_bytes):
// the units' super-blocks (unit u at 144 u), then the K slots' expert ids and routing weights; 4 warps a block.
// GPU session 30 refuted the reading above: alone under Nsight Compute this down took 14.9 us (G = 1; G = 3 17.0,
// G = 6 17.5) against down_q8_q4_k's 11.7-12.5, with 1.3-1.7x its warp instructions (this copy loop's address
// arithmetic) and its long-scoreboard stalls still ~6.4 an issue once every weight byte sat in shared memory: the
// warp down's warps were not waiting on late weights. Kept as a measured form, selected by nothing.
__device__ __forceinline__ int dcp_warp_bytes(int K, int units) { return (units * 144 + 8 * K + 15) & ~15; }

// group GI of G: wait for this lane's copies of it (G - 1 - GI groups may stay in flight), make the warp's visible,
// add this lane's units of it to acc in order; then the next group
template <int G, int GI>
__device__ __forceinline__ void dcp_walk(const u8* sw, const float* sg, int units, int routed, int per, int oct,
                                         int o, const u8* __restrict__ hq, const float4* __restrict__ hds16,
                                         float& acc) {
    cp_async_wait<G - 1 - GI>();
    __syncwarp();
    const int lo = units * GI / G, hi = units * (GI + 1) / G;
    for (int u = lo + ((oct - lo) & 3); u < hi; u += 4) {
        const uint4* b = (const uint4*)(sw + 144 * u);
        const float scale = u < routed ? sg[u / per] : 1.0f;
        acc += scale * hq8_block(b[0], b[1 + o], hq, hds16, (i64)u * 256, o);
    }
    if constexpr (GI + 1 < G) dcp_walk<G, GI + 1>(sw, sg, units, routed, per, oct, o, hq, hds16, acc);
}

// Same arguments and grid as down_q8_q4_k (ceil(D / 4) blocks of 128 threads), 4 x dcp_warp_bytes of dynamic shared
// memory. The expert ids and weights are read before the wait, as down_q8_q4_k reads them (the router has completed
// before gate/up lets this kernel be scheduled), through L2.
template <int G>
__device__ __forceinline__ void down_q8cp_q4_k(const u8* __restrict__ hq, const i64* __restrict__ ids,
                                               const float* __restrict__ weights, int K, int E,
                                               const u8* __restrict__ w_down, i64 row_bytes, int F,
                                               const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                               void* __restrict__ y, int y_dt) {
    extern __shared__ __align__(16) u8 md_smem[];
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3, warp = threadIdx.x >> 5;
    const i64 d = (i64)blockIdx.x * (blockDim.x >> 5) + warp;
    if (d >= D) return;  // the whole warp (no barrier of the block below)
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    u8* sw = md_smem + warp * dcp_warp_bytes(K, units);
    int* se = (int*)(sw + units * 144);  // [K] the slots' expert ids (a bad one as 0)
    float* sg = (float*)(se + K);        // [K] their routing weights
    bool bad = false;
    for (int s = lane; s < K; s += 32) {
        i64 e = __ldcg(ids + s);
        if (e < 0 || e >= E) {
            bad = true;
            e = 0;
        }
        se[s] = (int)e;
        sg[s] = __ldcg(weights + s);
    }
    __syncwarp();
    const u32 base = smem_addr(sw);
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {  // units [lo, hi): 9 chunks of 16 bytes a super-block, dealt over the lanes
        const int lo = units * gi / G, hi = units * (gi + 1) / G;
        for (int c = lane; c < (hi - lo) * 9; c += 32) {
            const int u = lo + c / 9, k = c - 9 * (c / 9);
            const u8* src;
            if (u < routed) {
                const int slot = u / per;
                src = w_down + ((i64)se[slot] * D + d) * row_bytes + (i64)(u - slot * per) * 144;
            } else {
                src = s_down + d * s_row_bytes + (i64)(u - routed) * 144;
            }
            cp_async16(base + 144u * u + 16u * k, src + 16 * k, 16);
        }
        cp_async_commit();
    }
    pdl_wait();  // hq: gate/up's output
    const float4* hds16 = (const float4*)(hq + (i64)units * 256);
    float acc = 0.0f;
    dcp_walk<G, 0>(sw, sg, units, routed, per, oct, o, hq, hds16, acc);
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d, y_dt, bad ? QNAN : acc);
}

// down split across the block's warps ("split", the down of cupy_rowwarp_pdl_split, written after GPU session 26):
// the block's S warps share one output d, warp w taking the w-th of S shares of its K * F / 256 + Fs / 256
// super-blocks (the 48B's 36, S = 4: 9 a warp, every load of the share requested before the PDL wait), each lane
// adding its super-blocks in order; each warp's sum goes to shared memory and thread 0 adds the S in warp order.
// Why: Nsight Compute on the warp form (session 26, the 48B's layer alone): 17.8 us for ~12 MB, 14% of DRAM, ~4.3
// warps a scheduler with 0.68 eligible, stalled on its loads - the grid (a warp an output) holds too few warps for
// the latency, and the wide form (every load of the row up front, 128 registers) was slower still. S warps an
// output: S x the warps, each 1 / S of the chain. The sum's order differs from the warp form's, so its claim is the
// tolerance row, not those bits.
// Same arguments as down_q4_k; grid D, S x 32 threads (S warps an output). The forms: S = 4 (the default,
// moe_q4_k_downsplitpdl; 64 registers on sm_90: 8 blocks, 32 warps an SM, against the warp form's ~17, its grid's;
// bounds for 10 or 12 blocks an SM spill), S = 2 and S = 8 (moe_q4_k_downsplit2pdl / 8pdl), for the side-by-side to
// choose between.
// ROUNDS of 4 super-blocks a warp's group: enough for the 48B's share of its 36 in one group
#define DOWN_SPLIT_ROUNDS 3   // S = 4: 9 a warp, 12 slots
#define DOWN_SPLIT2_ROUNDS 5  // S = 2: 18 a warp, 20 slots
#define DOWN_SPLIT8_ROUNDS 2  // S = 8: 5 a warp (the last 1), 8 slots
template <bool PDL, int S, int ROUNDS>
__device__ __forceinline__ void down_split_q4_k(const float* __restrict__ h, const i64* __restrict__ ids,
                                                const float* __restrict__ weights, int K, int E,
                                                const u8* __restrict__ w_down, i64 row_bytes, int F,
                                                const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                                void* __restrict__ y, int y_dt) {
    __shared__ float part[S];
    __shared__ int part_bad[S];
    const int lane = threadIdx.x & 31, o = lane & 7, oct = lane >> 3, w = threadIdx.x >> 5;
    const i64 d = blockIdx.x;
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    const int share = (units + S - 1) / S;
    const int u0 = w * share, u1 = min(units, u0 + share);
    float acc = 0.0f;
    bool bad = false;
    bool waited = false;
    for (int g = u0; g < u1 || (PDL && !waited); g += 4 * ROUNDS) {
        uint4 hd[ROUNDS], q[ROUNDS];
        float scale[ROUNDS];
        down_group_load<PDL, ROUNDS>(g, u1, oct, o, ids, weights, E, w_down, row_bytes, per, routed, s_down,
                                     s_row_bytes, D, d, hd, q, scale, bad);
        if (PDL && !waited) {  // h: gate/up's output (every warp waits, on its first round, whatever its share)
            pdl_wait();
            waited = true;
        }
        acc = down_group_add<PDL, ROUNDS>(g, u1, oct, o, h, hd, q, scale, acc);
    }
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
        part[w] = acc;
        part_bad[w] = bad;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = part[0];
        int any_bad = part_bad[0];
#pragma unroll
        for (int i = 1; i < S; ++i) {
            sum += part[i];
            any_bad |= part_bad[i];
        }
        store_act(y, d, y_dt, any_bad ? QNAN : sum);
    }
}

// down with every weight byte of the block in flight at once ("copy"): the block's 4 outputs d0..d0+3 are 4
// consecutive rows of each chosen expert's down matrix (and of the shared one), so K + 1 contiguous ranges of 4 rows,
// copied into shared memory with cp.async first; then each warp walks its output's super-blocks from shared memory
// (h still read through L1). Shared memory: (K + 1) x 4 rows of F / 256 (Fs / 256) super-blocks. Same arguments as
// down_q4_k; grid ceil(D / 4).
__device__ __forceinline__ void down_cp_q4_k(const float* __restrict__ h, const i64* __restrict__ ids,
                                             const float* __restrict__ weights, int K, int E,
                                             const u8* __restrict__ w_down, i64 row_bytes, int F,
                                             const u8* __restrict__ s_down, i64 s_row_bytes, int Fs, int D,
                                             void* __restrict__ y, int y_dt) {
    extern __shared__ __align__(16) u8 md_smem[];
    const int tid = threadIdx.x, lane = tid & 31, o = lane & 7, oct = lane >> 3;
    const i64 d0 = (i64)blockIdx.x * 4;
    const int here = (int)min((i64)4, (i64)D - d0);
    const int per = F >> 8, routed = K * per, units = routed + (Fs >> 8);
    const u32 base = smem_addr(md_smem);
    bool bad = false;
    // the copies: slot s's rows d0..d0+here-1 to md_smem + s * 4 * row_bytes; the shared expert's after the K slots
    for (int s = 0; s <= K; ++s) {
        if (s == K && Fs == 0) break;
        const u8* src;
        i64 len;
        if (s < K) {
            i64 e = ids[s];
            if (e < 0 || e >= E) {
                bad = true;
                e = 0;
            }
            src = w_down + (e * D + d0) * row_bytes;
            len = here * row_bytes;
        } else {
            src = s_down + d0 * s_row_bytes;
            len = here * s_row_bytes;
        }
        const u32 dst = base + (u32)((i64)s * 4 * row_bytes);
        for (int c = tid; c < (int)(len / 16); c += blockDim.x) cp_async16(dst + 16 * c, src + 16 * (i64)c, 16);
    }
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    const int i = tid >> 5;  // this warp's output: d0 + i
    if (i >= here) return;  // the whole warp (after the barrier)
    float acc = 0.0f;
    for (int u = oct; u < units; u += 4) {
        const u8* b;
        float scale = 1.0f;
        if (u < routed) {
            const int slot = u / per;
            scale = weights[slot];
            b = md_smem + ((i64)slot * 4 + i) * row_bytes + (u - slot * per) * 144;
        } else {
            b = md_smem + (i64)K * 4 * row_bytes + i * s_row_bytes + (u - routed) * 144;
        }
        const uint4* bb = (const uint4*)b;
        acc += scale * rw_block<DT_F32>(bb[0], bb[1 + o], h, (i64)u * 256, o);
    }
    acc = warp_sum(acc);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) store_act(y, d0 + i, y_dt, bad ? QNAN : acc);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downcp(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_cp_q4_k(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) moe_q4_k_gateup_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q4_k<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) moe_q4_k_gateup_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q4_k<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 8) moe_q4_k_gateup_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q4_k<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) moe_q4_k_gateupstg_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_stg_q4_k<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) moe_q4_k_gateupstg_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_stg_q4_k<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256, 4) moe_q4_k_gateupstg_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_stg_q4_k<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcp_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcp_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcp_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcppdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_F32, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcppdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_BF16, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcppdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_F16, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcppdlsh_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_F32, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcppdlsh_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_BF16, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupcppdlsh_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_cp_q4_k<DT_F16, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_down(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q4_k(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downpdl(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q4_k<true>(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downpdlw(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q4_k<true, DOWN_WIDE_ROUNDS>(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y,
                                      y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downsplitpdl(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_split_q4_k<true, 4, DOWN_SPLIT_ROUNDS>(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs,
                                                D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(64) moe_q4_k_downsplit2pdl(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_split_q4_k<true, 2, DOWN_SPLIT2_ROUNDS>(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs,
                                                 D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) moe_q4_k_downsplit8pdl(
    const float* __restrict__ h, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_split_q4_k<true, 8, DOWN_SPLIT8_ROUNDS>(h, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs,
                                                 D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8pdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8pdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8pdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hpdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hpdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hpdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwpdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwpdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwpdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32, true, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16, true, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16, true, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpf_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32, true, true, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpf_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16, true, true, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpf_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16, true, true, true, true>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpfg3_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32, true, true, true, true, 3>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D,
                                                     h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpfg3_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16, true, true, true, true, 3>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D,
                                                     h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpfg3_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16, true, true, true, true, 3>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D,
                                                     h);
}

// the same three groups, each group after the first requested once the one before has landed (DEPTH 1: GPU session
// 46's probe_gateup, H100: 12.22 against 13.27 us a call for the whole form, the same bits)
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpfg3d1_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F32, true, true, true, true, 3, 1>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D,
                                                         h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpfg3d1_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_BF16, true, true, true, true, 3, 1>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D,
                                                          h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hwxpdlpfg3d1_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8_q4_k<DT_F16, true, true, true, true, 3, 1>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D,
                                                         h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hp3pdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8pipe_q4_k<DT_F32, 3>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hp3pdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8pipe_q4_k<DT_BF16, 3>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hp3pdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8pipe_q4_k<DT_F16, 3>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hp4pdl_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8pipe_q4_k<DT_F32, 4>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hp4pdl_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8pipe_q4_k<DT_BF16, 4>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateupq8hp4pdl_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_q8pipe_q4_k<DT_F16, 4>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8pdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8_q4_k(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8xpfpdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8_q4_k<RW_ROUNDS, true>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 6) moe_q4_k_downq8idspdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8ld_q4_k<false>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 6) moe_q4_k_downq8hspdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8hs_q4_k(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 6) moe_q4_k_downq8l2pfpdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8ld_q4_k<false, RW_ROUNDS, true>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y,
                                           y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128, 5) moe_q4_k_downq8aheadpdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8ld_q4_k<true>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8cp1pdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8cp_q4_k<1>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8cp3pdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8cp_q4_k<3>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_downq8cp6pdl(
    const u8* __restrict__ hq, const i64* __restrict__ ids, const float* __restrict__ weights, int K, int E,
    const u8* __restrict__ w_down, i64 row_bytes, int F, const u8* __restrict__ s_down, i64 s_row_bytes, int Fs,
    int D, void* __restrict__ y, int y_dt) {
    down_q8cp_q4_k<6>(hq, ids, weights, K, E, w_down, row_bytes, F, s_down, s_row_bytes, Fs, D, y, y_dt);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateuphc_f32(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_hc_q4_k<DT_F32>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateuphc_bf16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_hc_q4_k<DT_BF16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}

// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(128) moe_q4_k_gateuphc_f16(
    const void* __restrict__ x, const i64* __restrict__ ids, int K, int E, const u8* __restrict__ w_gate,
    const u8* __restrict__ w_up, i64 row_bytes, int F, const u8* __restrict__ s_gate, const u8* __restrict__ s_up,
    int Fs, int D, float* __restrict__ h) {
    gateup_hc_q4_k<DT_F16>(x, ids, K, E, w_gate, w_up, row_bytes, F, s_gate, s_up, Fs, D, h);
}
