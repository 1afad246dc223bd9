// common.cuh: helpers shared by the sparkops CuPy kernels.
//
// Every .cu file here compiles both under NVRTC (cupy.RawModule, at run time) and under nvcc (the CI
// resource check), so nothing below includes a host or toolkit header: the integer types, the fp16 /
// bf16 conversions and the PTX wrappers are spelled out.
#pragma once

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Activation dtypes, passed to kernels as a run-time flag (a uniform branch costs nothing next to a
// load, and it spares one kernel instantiation per dtype).
#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2

// Infinities and NaN by bit pattern (NVRTC has no <math.h> INFINITY).
#define NEG_INF __int_as_float(0xff800000)
#define QNAN __int_as_float(0x7fc00000)

// ---- float conversions -------------------------------------------------------------------------

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float(((u32)b) << 16); }

// float -> bf16, round to nearest even (what torch's .to(torch.bfloat16) does); NaN stays NaN.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// float -> fp16, round to nearest even (subnormals kept, overflow to inf: IEEE, like numpy's astype).
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float load_act(const void* p, i64 i, int dt) {
    if (dt == DT_F32) return ((const float*)p)[i];
    u16 b = ((const u16*)p)[i];
    return dt == DT_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

__device__ __forceinline__ void store_act(void* p, i64 i, int dt, float v) {
    if (dt == DT_F32) ((float*)p)[i] = v;
    else ((u16*)p)[i] = dt == DT_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
}

// ---- unaligned little loads (GGUF blocks of 34, 50 and 210 bytes are only 2-byte aligned) -----------

__device__ __forceinline__ u32 ld_u16(const u8* p) { return *(const u16*)p; }

__device__ __forceinline__ u32 ld_u32_a2(const u8* p) {
    const u16* h = (const u16*)p;
    return (u32)h[0] | ((u32)h[1] << 16);
}

__device__ __forceinline__ float ld_f16(const u8* p) { return f16_to_f32(*(const u16*)p); }

// ---- warp reductions (butterfly: every lane ends with the same value, in the same order) ---------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- GGUF Q8_0 quantization of one 32-value block held one value per lane --------------------------
//
// Exactly ggml's quantize_row_q8_0_ref in float32: d = amax / 127; q = roundf(x * (1/d)) with 1/d
// taken from the unrounded d (0 when d = 0); d is then stored through fp16. The _rn intrinsics keep
// the compiler from contracting anything into an FMA, so every kernel that quantizes gets the same
// bits (the fused rmsnorm+quantize kernel relies on it).
// q8_inverse / q8_code: that rule's scalar steps, for a kernel that holds a block's values otherwise (moe_rowwarp.cu's
// q8_stage, 16 a lane): the block's amax -> 1/d (0 when d = 0), d through fp16 in d_rounded; one value's code.
__device__ __forceinline__ float q8_inverse(float amax, float& d_rounded) {
    const float d = __fdiv_rn(amax, 127.0f);
    d_rounded = f16_to_f32(f32_to_f16(d));
    return d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
}

__device__ __forceinline__ int q8_code(float v, float id) { return (int)roundf(__fmul_rn(v, id)); }

__device__ __forceinline__ void q8_quantize_lane(float v, int& q, float& d_rounded) {
    const float id = q8_inverse(warp_max(fabsf(v)), d_rounded);
    q = q8_code(v, id);
}

// ---- shared-memory addresses and async copies (sm_80+) ---------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16-byte global -> shared copy; src_bytes = 0 writes zeros (rows past the end are never read).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// wait until at most N of this thread's committed groups are still in flight
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// ---- programmatic dependent launch (PDL, sm_90) ------------------------------------------------------
// In a kernel launched with the programmatic-serialization attribute (_pdl.py), pdl_launch_dependents lets the next
// such kernel of the stream be scheduled before this one ends, and pdl_wait blocks until the kernel before this one
// has completed and its memory is visible. A kernel so launched reads nothing another kernel writes, and writes no
// global memory, before its pdl_wait. Launched plainly, both are no-ops. Below sm_90 they compile to nothing.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
