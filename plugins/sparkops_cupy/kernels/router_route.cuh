// router_route.cuh: a token's routing from its logits row by one warp, and the arrival that picks the block doing it:
// shared by moe_router.cu (moe_router=cupy_rowwarp / _pdl) and add_rmsnorm_router.cu (add_rmsnorm_router=
// cupy_rowwarp_pdl), so both route with the same instructions. The contract is moe_router's reference
// (plugins/sparkops_numpy/moe_router.py): s = sigmoid(logit), s' = s + bias chooses; a group's score is the sum of
// its two best s' (its best alone when a group holds one expert); the topk_group best groups are kept (ties: the
// lower group) and s' of the others becomes 0.0; top_k of s' (ties: the lower expert id); w = s[id] / (sum + eps) *
// scale. Lane l holds experts l, l + 32, ... (RT_SLOTS_FEW of them up to 256 experts, else RT_SLOTS: E <= 512),
// groups are lanes (n_group <= 32) and pick k is lane k (top_k <= 32): the callers' hosts hand every other shape on.
#pragma once
#include "common.cuh"

// experts a lane holds while routing: E <= 32 x 16 = 512; up to 256 experts (the 48B's) route with 8 a lane
#define RT_SLOTS 16
#define RT_SLOTS_FEW 8

// the warp's arg-max of (v, i): the larger v, ties to the smaller i; every lane ends with the same pair (the group
// choice: a few rounds a token at most)
__device__ __forceinline__ void rt_argmax(float& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi < i)) {
            v = ov;
            i = oi;
        }
    }
}

// a float's bits as an unsigned key in the same order (-0.0 is made +0.0 first: they compare equal as floats)
__device__ __forceinline__ u32 rt_key(float v) {
    const u32 u = __float_as_uint(v + 0.0f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// the lane's best untaken expert among its SLOTS: (its key, its id), ties to its lower expert (ids ascend with j);
// key 0 and id 0xffffffff when it has none left
template <int SLOTS>
__device__ __forceinline__ void rt_lane_best(const float (&c)[SLOTS], u32 taken, int E, int lane, u32& key, u32& id) {
    float v = 0.0f;
    id = 0xffffffffu;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        if (j * 32 + lane < E && !((taken >> j) & 1u) && (id == 0xffffffffu || c[j] > v)) {
            v = c[j];
            id = (u32)(j * 32 + lane);
        }
    }
    key = id == 0xffffffffu ? 0u : rt_key(v);
}

// the group limit (n_group > 1): a group's score is the sum of its two best s' (its best alone when a group holds one
// expert); the topk_group best groups are kept (ties: the lower group) and s' of the others becomes 0.0. Groups are
// lanes (n_group <= 32)
template <int SLOTS>
__device__ __forceinline__ void rt_groups(float (&c)[SLOTS], int E, int EG, int n_group, int topk_group, int lane) {
    if (n_group <= 1) return;
    int grp[SLOTS];  // each slot's group (-1: no expert)
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) grp[j] = j * 32 + lane < E ? (j * 32 + lane) / EG : -1;
    float gs = NEG_INF;  // lane g: group g's score
    for (int g = 0; g < n_group; ++g) {
        float b1 = NEG_INF, b2 = NEG_INF;  // the lane's two best s' in group g
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            if (grp[j] == g) {
                if (c[j] > b1) {
                    b2 = b1;
                    b1 = c[j];
                } else if (c[j] > b2) {
                    b2 = c[j];
                }
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {  // the warp's two best: the best two of both lanes' pairs
            const float o1 = __shfl_xor_sync(0xffffffffu, b1, o), o2 = __shfl_xor_sync(0xffffffffu, b2, o);
            b2 = fmaxf(fminf(b1, o1), fmaxf(b2, o2));
            b1 = fmaxf(b1, o1);
        }
        if (lane == g) gs = EG > 1 ? b1 + b2 : b1;
    }
    u32 kept = 0u;  // bit g: group g kept
    for (int r = 0; r < topk_group; ++r) {
        float v = gs;
        int g = lane;
        rt_argmax(v, g);
        kept |= 1u << g;
        if (lane == g) gs = NEG_INF;
    }
#pragma unroll
    for (int j = 0; j < SLOTS; ++j)
        if (grp[j] >= 0 && !((kept >> grp[j]) & 1u)) c[j] = 0.0f;  // as the reference code does: 0.0, not -inf
}

// a lane's experts j * 32 + lane: their scores s = sigmoid(logit) (0 past E) and choosers c = s + bias (-inf past E),
// then the group limit (rt_groups); every load issued before any is used (a clamped index, no branch)
template <int SLOTS>
__device__ __forceinline__ void rt_choosers(i64 t, const float* __restrict__ logits, const float* __restrict__ bias,
                                            int E, int EG, int n_group, int topk_group, int lane, float (&s)[SLOTS],
                                            float (&c)[SLOTS]) {
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const int e = min(j * 32 + lane, E - 1);
        s[j] = __ldcg(logits + t * E + e);
        c[j] = __ldg(bias + e);
    }
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const bool ok = j * 32 + lane < E;
        s[j] = ok ? 1.0f / (1.0f + expf(-s[j])) : 0.0f;
        c[j] = ok ? s[j] + c[j] : NEG_INF;
    }
    rt_groups<SLOTS>(c, E, EG, n_group, topk_group, lane);
}

// Routes token t from its logits row, one warp (see the top of the file). SLOTS: experts a lane holds (E <= 32 SLOTS).
// top_k picks by two warp reductions each (__reduce_max_sync of the order-keeping keys of the lanes' bests, then
// __reduce_min_sync of the ids holding that key: ties to the lower expert); only the winning lane looks at its
// slots again.
template <int SLOTS>
__device__ __forceinline__ void rt_route(i64 t, const float* __restrict__ logits, const float* __restrict__ bias,
                                         float* __restrict__ w_out, i64* __restrict__ id_out, int E, int EG,
                                         int n_group, int topk_group, int top_k, float scale, float eps, int lane) {
    float s[SLOTS], c[SLOTS];  // expert j * 32 + lane: its score s and its chooser s'
    rt_choosers<SLOTS>(t, logits, bias, E, EG, n_group, topk_group, lane, s, c);
    float my_w = 0.0f;  // lane k: pick k's unbiased score, then its weight
    u32 my_id = 0u;
    u32 taken = 0u;  // bit j: the lane's slot j already picked
    u32 key, id;
    rt_lane_best<SLOTS>(c, taken, E, lane, key, id);
    for (int k = 0; k < top_k; ++k) {
        const u32 best = __reduce_max_sync(0xffffffffu, key);
        const u32 win = __reduce_min_sync(0xffffffffu, key == best ? id : 0xffffffffu);
        float sp = 0.0f;
        if (id == win) {  // the winner's lane: its score, then its next best
            const int jw = (int)(win >> 5);
#pragma unroll
            for (int j = 0; j < SLOTS; ++j)
                if (j == jw) sp = s[j];
            taken |= 1u << jw;
            rt_lane_best<SLOTS>(c, taken, E, lane, key, id);
        }
        sp = __shfl_sync(0xffffffffu, sp, (int)(win & 31u));
        if (lane == k) {
            my_w = sp;
            my_id = win;
        }
    }
    const float sum = warp_sum(lane < top_k ? my_w : 0.0f);
    if (lane < top_k) {
        w_out[t * top_k + lane] = my_w / (sum + eps) * scale;
        id_out[t * top_k + lane] = (i64)my_id;
    }
}

// The sorted form of rt_route (moe_router=cupy_rowwarp_pdl_sorted): the same routing, the same bits, a shorter serial
// tail. bias_s: the selection biases in shared memory, bias_s[e] copied by lane e % 32 of this warp (each lane reads
// only its own copies, so its cp.async wait is all the ordering it needs). Each lane sorts its SLOTS (key, id, score)
// once, keys descending and equal keys in slot order (a stable exchange network: its lower expert first), so its best
// untaken expert is always its head. A pick is then one __reduce_max_sync of the heads' keys and a ballot of the lanes
// holding it; only a tie of keys across lanes (rare on real data) costs the second reduction (the lower id). The
// winner writes its pick to shared memory and shifts its list; lane k reads pick k at the end. rt_route instead has
// the winner rescan its SLOTS after every pick (~8 dependent compare-selects) and shuffles the score back each time.
// Keys order as the floats do except NaN: with a NaN among a lane's choosers the two forms may pick differently (both
// distinct, in range); the gate's bit-identity runs real data.
template <int SLOTS>
__device__ __forceinline__ void rt_route_sorted(i64 t, const float* __restrict__ logits, const float* bias_s,
                                                float* __restrict__ w_out, i64* __restrict__ id_out, int E, int EG,
                                                int n_group, int topk_group, int top_k, float scale, float eps,
                                                int lane) {
    __shared__ float pick_s[32];  // pick k's unbiased score, then its id (top_k <= 32)
    __shared__ u32 pick_id[32];
    float s[SLOTS], c[SLOTS];  // expert j * 32 + lane: its score s and its chooser s'
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {  // every load issued before any is used (a clamped index, no branch)
        const int e = min(j * 32 + lane, E - 1);
        s[j] = __ldcg(logits + t * E + e);
    }
    cp_async_wait_all();  // this lane's bias copies landed (made at the kernel's start)
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const bool ok = j * 32 + lane < E;
        c[j] = ok ? bias_s[j * 32 + lane] : 0.0f;  // this lane's own copies only
        s[j] = ok ? 1.0f / (1.0f + expf(-s[j])) : 0.0f;
        c[j] = ok ? s[j] + c[j] : NEG_INF;
    }
    rt_groups<SLOTS>(c, E, EG, n_group, topk_group, lane);
    u32 key[SLOTS], id[SLOTS];  // the lane's list: key 0 and id 0xffffffff past the experts
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const bool ok = j * 32 + lane < E;
        key[j] = ok ? rt_key(c[j]) : 0u;
        id[j] = ok ? (u32)(j * 32 + lane) : 0xffffffffu;
    }
#pragma unroll
    for (int i = 0; i < SLOTS - 1; ++i) {  // bubble network: a larger key moves ahead, an equal one never does
#pragma unroll
        for (int j = 0; j < SLOTS - 1 - i; ++j) {
            const bool up = key[j + 1] > key[j];
            const u32 k0 = key[j], i0 = id[j];
            const float s0 = s[j];
            key[j] = up ? key[j + 1] : k0;
            id[j] = up ? id[j + 1] : i0;
            s[j] = up ? s[j + 1] : s0;
            key[j + 1] = up ? k0 : key[j + 1];
            id[j + 1] = up ? i0 : id[j + 1];
            s[j + 1] = up ? s0 : s[j + 1];
        }
    }
    for (int k = 0; k < top_k; ++k) {
        const u32 best = __reduce_max_sync(0xffffffffu, key[0]);
        const u32 holders = __ballot_sync(0xffffffffu, key[0] == best);
        u32 winner = (u32)(__ffs(holders) - 1);  // the lane whose head is the pick
        if (__popc(holders) > 1)  // a tie of keys: the lower expert id (its lane is id % 32)
            winner = __reduce_min_sync(0xffffffffu, key[0] == best ? id[0] : 0xffffffffu) & 31u;
        if ((u32)lane == winner) {
            pick_s[k] = s[0];
            pick_id[k] = id[0];
#pragma unroll
            for (int j = 0; j < SLOTS - 1; ++j) {
                key[j] = key[j + 1];
                id[j] = id[j + 1];
                s[j] = s[j + 1];
            }
            key[SLOTS - 1] = 0u;
            id[SLOTS - 1] = 0xffffffffu;
        }
    }
    __syncwarp();
    const float my_w = lane < top_k ? pick_s[lane] : 0.0f;  // lane k: pick k, as rt_route holds it
    const float sum = warp_sum(my_w);
    if (lane < top_k) {
        w_out[t * top_k + lane] = my_w / (sum + eps) * scale;
        id_out[t * top_k + lane] = (i64)pick_id[lane];
    }
}

// The merged form of rt_route (moe_router=cupy_rowwarp_pdl_merge): the same routing, the same bits, no serial picks.
// GPU session 42 split the routing's 2.79 us (bench/probes/router_anatomy.py): the top_k picks and the weights 1.71,
// the scores 0.69, the loads 0.26. rt_route's picks are top_k rounds in a chain, each two warp reductions, a divergent
// rescan and a shuffle; the sorted form's a reduction and a ballot each (it gained ~0.15 us). Here every lane ranks
// its experts by one 64-bit key (rt_rank: the chooser's order key, then the lower id), sorts its 8 with Batcher's
// network (RT_SORT8: 19 exchanges in 6 rounds, independent within a round), and the warp merges its lists in 5
// butterfly rounds: a lane and its partner (lane ^ o) both keep the top 8 of their 16 (the larger of A[i] and
// B[7 - i]: a bitonic sequence, sorted by 3 rounds of exchanges), so after lane ^ 16 .. lane ^ 1 every lane holds the
// warp's top 8 in order. The order is rt_route's (keys as the floats order, ties to the lower id), so pick k is the
// same expert; its score s comes from shared memory (each lane stores its own), and the weights are rt_route's sum
// and division: the same bits. Only up to 8 slots a lane (E <= 256) and top_k <= 8; rt_token hands other shapes to
// rt_route. NaN choosers: as rt_route_sorted, the forms may pick differently (both distinct, in range). Faster than
// rt_route only while its code is in the L2, which the decode step never leaves it (RT_MERGE_ROLLED below).
#define RT_MERGE_K 8
// The merge's 5 rounds as a loop (1, the registered build) or unrolled (0, for bench/probes/router_code.py alone).
// GPU session 42: the unrolled form took 6.74 against rt_route's 7.15 us a layer after its norm in the per-op pair,
// but 14.6 against 6.4 us in the replayed step, where the weight streams between two routers leave none of its code
// in the L2. bench/probes/router_code.py then flushed the L2 before each pair: the router's share grew from 5.30 to
// 13.06 us unrolled, 5.22 to 7.61 rolled (that call's build; the scores' stores have since moved after their loop),
// 5.56 to 10.28 for rt_route_sorted, and not at all for rt_route (5.72, 5.43). A one-warp tail pays for every
// instruction line it runs once a layer; rt_route's pick loop is short and re-run.
#ifndef RT_MERGE_ROLLED
#define RT_MERGE_ROLLED 1
#endif
// Batcher's odd-even merge sort of 8 values: 19 compare-exchanges (i, j), larger first; its 6 rounds are the lines
// (tests/backends/test_cupy_router_merge_network.py checks that it sorts every 0-1 input, so every input)
#define RT_SORT8 \
    {0, 1}, {2, 3}, {4, 5}, {6, 7}, \
    {0, 2}, {1, 3}, {4, 6}, {5, 7}, \
    {1, 2}, {5, 6}, \
    {0, 4}, {1, 5}, {2, 6}, {3, 7}, \
    {2, 4}, {3, 5}, \
    {1, 2}, {3, 4}, {5, 6}

// an expert's rank key: its chooser's order key (rt_key) above, its id's complement below, so a larger key is a
// better expert and equal choosers go to the lower id; 0 for a slot with no expert (key 0, id 0xffffffff)
__device__ __forceinline__ u64 rt_rank(u32 key, u32 id) { return ((u64)key << 32) | (u64)(~id); }

// a[i] the larger, a[j] the smaller
__device__ __forceinline__ void rt_exchange(u64& hi, u64& lo) {
    const u64 a = hi, b = lo;
    hi = a > b ? a : b;
    lo = a > b ? b : a;
}

template <int SLOTS>
__device__ __forceinline__ void rt_route_merge(i64 t, const float* __restrict__ logits, const float* __restrict__ bias,
                                               float* __restrict__ w_out, i64* __restrict__ id_out, int E, int EG,
                                               int n_group, int topk_group, int top_k, float scale, float eps,
                                               int lane) {
    static_assert(SLOTS == RT_MERGE_K, "a lane's list is its 8 slots");
    __shared__ float s_sh[32 * SLOTS];  // expert e's unbiased score, stored by its lane (e % 32)
    float s[SLOTS], c[SLOTS];  // expert j * 32 + lane: its score s and its chooser s'
    rt_choosers<SLOTS>(t, logits, bias, E, EG, n_group, topk_group, lane, s, c);
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) s_sh[j * 32 + lane] = s[j];
    u64 a[RT_MERGE_K];  // the lane's list, then the warp's top 8, best first
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const bool ok = j * 32 + lane < E;
        a[j] = ok ? rt_rank(rt_key(c[j]), (u32)(j * 32 + lane)) : 0ull;
    }
    constexpr int net[19][2] = {RT_SORT8};
#pragma unroll
    for (int n = 0; n < 19; ++n) rt_exchange(a[net[n][0]], a[net[n][1]]);
#if RT_MERGE_ROLLED
#pragma unroll 1
#else
#pragma unroll
#endif
    for (int o = 16; o > 0; o >>= 1) {
        u64 b[RT_MERGE_K];
#pragma unroll
        for (int i = 0; i < RT_MERGE_K; ++i) b[i] = __shfl_xor_sync(0xffffffffu, a[i], o);
#pragma unroll
        for (int i = 0; i < RT_MERGE_K; ++i) a[i] = a[i] > b[RT_MERGE_K - 1 - i] ? a[i] : b[RT_MERGE_K - 1 - i];
#pragma unroll
        for (int h = RT_MERGE_K / 2; h > 0; h >>= 1)  // the bitonic merge: the larger of each pair h apart first
#pragma unroll
            for (int i = 0; i < RT_MERGE_K; ++i)
                if ((i & h) == 0) rt_exchange(a[i], a[i + h]);
    }
    u64 mine = a[0];  // lane k: pick k
#pragma unroll
    for (int i = 1; i < RT_MERGE_K; ++i)
        if (lane == i) mine = a[i];
    const u32 my_id = ~(u32)mine;
    __syncwarp();  // every lane's scores stored
    const float my_w = lane < top_k ? s_sh[my_id] : 0.0f;  // pick k's unbiased score, as rt_route holds it
    const float sum = warp_sum(my_w);
    if (lane < top_k) {
        w_out[t * top_k + lane] = my_w / (sum + eps) * scale;
        id_out[t * top_k + lane] = (i64)my_id;
    }
}

// a lane's share of the selection biases copied into bias_s (lane l: experts l, l + 32, ...), 4 bytes a copy: issued
// before the PDL wait (the biases are weights; cp.async is the one copy path the PDL order check allows there)
__device__ __forceinline__ void rt_bias_copy(const float* __restrict__ bias, float* bias_s, int E, int lane) {
    for (int e = lane; e < E; e += 32)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(bias_s + e)), "l"(bias + e));
    cp_async_commit();
}

// one arrival at *c, acq_rel at GPU scope: it releases the stores its block ordered before it (a barrier) and acquires
// those of every block that arrived earlier; the old count
__device__ __forceinline__ int rt_arrive(int* c) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    return old;
}
