// quantize_act.cu: activations -> GGUF Q8_0 blocks (int8 values + an fp16-rounded scale per 32).
//
// One warp per 32-value block, one value per lane: the block's absolute maximum is a warp max, then
// every lane quantizes its own value with the shared arithmetic of common.cuh (q8_quantize_lane),
// bit-identical to the NumPy reference and to the fused rmsnorm+quantize kernel.
#include "common.cuh"

// x [rows, D] (dtype x_dt), D a multiple of 32 -> q int8 [rows, D], d float32 [rows, D/32].
// budget: stack 0, spills 0
extern "C" __global__ void __launch_bounds__(256) quantize_act_q8(const void* __restrict__ x, int x_dt,
                                                                  i8* __restrict__ q, float* __restrict__ d,
                                                                  i64 n_blocks) {
    const int lane = threadIdx.x & 31;
    const i64 b = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (b >= n_blocks) return;  // whole warps leave together: the shuffles below see full warps
    const i64 i = b * 32 + lane;
    int qi;
    float dr;
    q8_quantize_lane(load_act(x, i, x_dt), qi, dr);
    q[i] = (i8)qi;
    if (lane == 0) d[b] = dr;
}
