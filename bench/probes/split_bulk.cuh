// split_bulk.cuh (bench/probes/split_anatomy.py): mla_split_mma with each tile's rows fetched by bulk copies instead of
// the threads' 16-byte cp.async. A 64-row tile is 4608 cp.async a block (18 a thread, each with its address arithmetic)
// through the load/store pipeline; here one warp issues one bulk copy a row (cp.async.bulk: the copy engine, completing
// on the stage's mbarrier's transaction count), 64 a tile. Included after attention.cu's expanded text (mma_tile and
// the split's helpers). Rows past the slice's end are zeros in shared memory, as mla_split_mma's zero-filled copies
// leave them, so the partials are mla_split_mma's bits.
#include "chain_sync.cuh"

#define BULK_SMEM_BAR MMA_SMEM_BYTES  // two mbarriers (8 bytes each) after mla_split_mma's layout
#define BULK_SMEM_BYTES (MMA_SMEM_BYTES + 16)
static_assert(MMA_SMEM_BYTES % 8 == 0, "the mbarriers must sit on 8 bytes");

// tile j of the slice into stage j % 2: its rows (those before r1) by bulk copies issued by warp 0, completing on
// bars[j % 2]; the rows past r1 zeroed by every thread (ordered before any read by the barrier the loop takes first)
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

// qa, cache, pos and the partials as mla_split_mma's; grid (S), 256 threads, BULK_SMEM_BYTES of dynamic shared memory
extern "C" __global__ void __launch_bounds__(256, 1) mla_split_bulk(const u16* __restrict__ qa,
                                                                    const u16* __restrict__ cache,
                                                                    const i64* __restrict__ pos, i64 Lmax,
                                                                    float* __restrict__ part_m,
                                                                    float* __restrict__ part_l,
                                                                    float* __restrict__ part_acc, int skip_empty) {
    extern __shared__ __align__(16) u8 smem[];
    const int tid = threadIdx.x;
    const u32 sQ = smem_addr(smem + MMA_SMEM_Q);
    u8* sC0 = smem + MMA_SMEM_C;
    float* sS = (float*)(smem + MMA_SMEM_S);
    u16* sP = (u16*)(smem + MMA_SMEM_P);
    float* sAlpha = (float*)(smem + MMA_SMEM_A);
    unsigned long long* bars = (unsigned long long*)(smem + BULK_SMEM_BAR);
    i64 r0, r1;
    const int n_tiles = mma_slice<false>(pos, Lmax, r0, r1);
    const i64 o = blockIdx.x;
    if (n_tiles == 0) {
        mma_empty_partial<256>(o, tid, part_m, part_l, part_acc, skip_empty);
        return;
    }
    if (tid == 0) {
        mbar_init(&bars[0], 1);
        mbar_init(&bars[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    mma_load_queries<256>(sQ, qa, tid);
    cp_async_commit();
    bulk_fetch(sC0, cache, 0, r0, r1, tid, bars);
    float m_run = NEG_INF, l_run = 0.0f;
    float oacc[2][8][4];
    mma_zero(oacc);
    cp_async_wait_all();  // the queries
    for (int it = 0; it < n_tiles; ++it) {
        mbar_wait(&bars[it % 2], (unsigned int)((it / 2) & 1));
        __syncthreads();  // tile `it` landed for all; everyone is done with the stage refilled next
        if (it + 1 < n_tiles) bulk_fetch(sC0, cache, it + 1, r0, r1, tid, bars);
        const u32 sCb = smem_addr(sC0 + (it % 2) * (MMA_BL * MMA_DP * 2));
        mma_tile(sQ, sCb, sS, sP, sAlpha, r0 + (i64)it * MMA_BL, r1, tid, m_run, l_run, oacc, BlockSync{});
    }
    mma_write_partial(o, tid, m_run, l_run, oacc, part_m, part_l, part_acc);
}
