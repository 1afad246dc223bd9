// kda.cu: the Kimi Delta Attention recurrence (decode form, spec 3.3), state kept in registers.
//
// Block (h, j) owns head h's state columns j*32 .. j*32+31 (the value channels; 32 lanes, one column
// each) and all D <= 128 rows (key channels: warp w holds rows w, w+8, ..., 16 per thread). Every
// column evolves on its own once the token's q, k, gate and beta are known:
//     S[:, c] <- alpha * S[:, c];   u = v[c] - k . S[:, c];   S[:, c] += beta * k * u;
//     o[c] = q . S_new[:, c] = q . S[:, c] (decayed) + beta * u * (k . q)
// so the state is read once and written once per call, whatever the number of tokens T: a prefill
// chunk runs its tokens one after the other with the state in registers. q and k are L2-normalised
// here (and q scaled), and the gate alpha = exp(a[h] * softplus(g + dt_bias)) is computed here.
#include "common.cuh"

#define KDA_ROWS 16  // rows per thread: D <= 8 warps * 16

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// q, k, v, g [T, H, D] and beta [T, H] of dtype act_dt; a [H], dt_bias [H*D] float32;
// state [H, D, D] float32 (updated in place); out [T, H, D] of dtype act_dt. Grid (H, ceil(D/32)), 256 threads.
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) kda_recurrent(
    const void* __restrict__ q, const void* __restrict__ k, const void* __restrict__ v, const void* __restrict__ g,
    const void* __restrict__ beta, int act_dt, const float* __restrict__ a, const float* __restrict__ dt_bias,
    float* __restrict__ state, void* __restrict__ out, int T, int H, int D, float scale, float l2_eps) {
    __shared__ float s_q[128], s_k[128], s_alpha[128];
    __shared__ float red_k[8][32], red_q[8][32], red3[8][3];
    const int h = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int col = blockIdx.y * 32 + lane;
    const bool col_ok = col < D;
    float* Sh = state + (i64)h * D * D;

    float S[KDA_ROWS];  // S[r] = state[h, warp + 8r, col]
#pragma unroll
    for (int r = 0; r < KDA_ROWS; ++r) {
        const int i = warp + 8 * r;
        S[r] = (i < D && col_ok) ? Sh[(i64)i * D + col] : 0.0f;
    }
    const float ah = a[h];

    for (int t = 0; t < T; ++t) {
        const i64 base = ((i64)t * H + h) * D;
        // 1. this token's q, k, gate (one channel per thread) and the three reductions q.q, k.k, k.q
        float qv = 0.0f, kv = 0.0f, alpha = 0.0f;
        if (tid < D) {
            qv = load_act(q, base + tid, act_dt);
            kv = load_act(k, base + tid, act_dt);
            alpha = expf(ah * softplus(load_act(g, base + tid, act_dt) + dt_bias[(i64)h * D + tid]));
        }
        const float vv = col_ok ? load_act(v, base + col, act_dt) : 0.0f;
        const float bt = 1.0f / (1.0f + expf(-load_act(beta, (i64)t * H + h, act_dt)));
        float qq = warp_sum(qv * qv), kk = warp_sum(kv * kv), kq = warp_sum(kv * qv);
        if (lane == 0) {
            red3[warp][0] = qq;
            red3[warp][1] = kk;
            red3[warp][2] = kq;
        }
        __syncthreads();
        qq = kk = kq = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            qq += red3[w][0];
            kk += red3[w][1];
            kq += red3[w][2];
        }
        const float rq = scale / sqrtf(qq + l2_eps), rk = 1.0f / sqrtf(kk + l2_eps);
        kq *= rq * rk;  // (k . q) of the normalised, scaled vectors
        if (tid < D) {
            s_q[tid] = qv * rq;
            s_k[tid] = kv * rk;
            s_alpha[tid] = alpha;
        }
        __syncthreads();

        // 2. decay the rows, then the column dots k . S and q . S with the decayed state
        float pk = 0.0f, pq = 0.0f;
#pragma unroll
        for (int r = 0; r < KDA_ROWS; ++r) {
            const int i = warp + 8 * r;
            if (i < D) {
                const float s = S[r] * s_alpha[i];
                S[r] = s;
                pk = fmaf(s, s_k[i], pk);
                pq = fmaf(s, s_q[i], pq);
            }
        }
        red_k[warp][lane] = pk;
        red_q[warp][lane] = pq;
        __syncthreads();
        float kS = 0.0f, qS = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            kS += red_k[w][lane];
            qS += red_q[w][lane];
        }

        // 3. delta-rule write and the read after it
        const float bu = bt * (vv - kS);
#pragma unroll
        for (int r = 0; r < KDA_ROWS; ++r) {
            const int i = warp + 8 * r;
            if (i < D) S[r] = fmaf(s_k[i], bu, S[r]);
        }
        if (warp == 0 && col_ok) store_act(out, base + col, act_dt, fmaf(bu, kq, qS));
    }

#pragma unroll
    for (int r = 0; r < KDA_ROWS; ++r) {
        const int i = warp + 8 * r;
        if (i < D && col_ok) Sh[(i64)i * D + col] = S[r];
    }
}
