// float_dot.cuh: GGUF block rows dotted with float activations (no Q8_0 quantization of the activations).
//
// The integer-dot kernels (quant_dot.cuh) quantize the activations to Q8_0 first, as llama.cpp does; the model
// gate refused that arithmetic on the 48B in session 6 (bench/gpu-runs/2026-11-29-session6). These dots keep
// the activations as they came (bf16 or float32 values, staged as float32 in shared memory, with the float sum of
// every 32 of them for the terms that multiply a constant: Q4_K's mins, IQ1_S's delta) and multiply in float32,
// as the reference does. Each type reuses its integer twin's chunk and load (the same bytes per lane); only the
// arithmetic differs.
//
// Codes become floats by the exponent trick: byte u of a word moved into the low byte of 0x4B000000 (one prmt)
// is the float 2^23 + u, and subtracting 2^23 + bias gives u - bias exactly (u < 256). That is two full-rate
// instructions per value where an int-to-float conversion runs at a quarter rate on Hopper.
#pragma once
#include "quant_dot.cuh"

// 2^23 + bias as float (exact for the small biases used here)
#define MAGIC_BIAS(b) (8388608.0f + (float)(b))

// Byte I (0..3) of w as float, minus the bias folded into `bias_plus` (MAGIC_BIAS(bias)).
template <int I>
__device__ __forceinline__ float byte_value(u32 w, float bias_plus) {
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7540u + I)) - bias_plus;
}

// sum over the four bytes of w (each minus the bias) times four consecutive activations
__device__ __forceinline__ float dot4(u32 w, float4 x, float bias_plus) {
    float s = byte_value<0>(w, bias_plus) * x.x;
    s = __fmaf_rn(byte_value<1>(w, bias_plus), x.y, s);
    s = __fmaf_rn(byte_value<2>(w, bias_plus), x.z, s);
    return __fmaf_rn(byte_value<3>(w, bias_plus), x.w, s);
}

// ---- Q8_0: value = d * q, q int8 ---------------------------------------------------------------------
struct DotQ8_0F : DotQ8_0 {
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
        const float d = f16_to_f32((u16)ch.d);
        const u32 w0 = ch.w0 ^ 0x80808080u, w1 = ch.w1 ^ 0x80808080u;  // int8 q -> q + 128 in 0..255
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float* xf = a.f + t * a.K + c * 8;
            const float s = dot4(w0, *(const float4*)xf, MAGIC_BIAS(128)) + dot4(w1, *(const float4*)(xf + 4), MAGIC_BIAS(128));
            acc[t] = __fmaf_rn(d, s, acc[t]);
        }
    }
};

// ---- Q4_K: value = d*sc*q - dmin*mn, q 0..15, per sub-block of 32 -------------------------------------
struct DotQ4_KF : DotQ4_K {
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
        const int b = c >> 2, j = c & 3;
        float d0, d1, m0, m1;
        scales(ch, j, d0, d1, m0, m1);  // DotQ4_K's
        const u32 lo = 0x0f0f0f0fu;
        const u32 q[8] = {ch.q0.x, ch.q0.y, ch.q0.z, ch.q0.w, ch.q1.x, ch.q1.y, ch.q1.z, ch.q1.w};
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            // sub-block 2j: the low nibbles of the 32 code bytes, values 0..31; 2j+1: the high ones, 32..63
            const float4* xf = (const float4*)(a.f + t * a.K + b * 256 + 64 * j);
            float sa[2] = {0.0f, 0.0f}, sb[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 8; ++i) {  // two partial sums each: short dependent chains, few live registers
                sa[i & 1] += dot4(q[i] & lo, xf[i], MAGIC_BIAS(0));
                sb[i & 1] += dot4((q[i] >> 4) & lo, xf[8 + i], MAGIC_BIAS(0));
            }
            const int s32 = t * (a.K >> 5) + b * 8 + 2 * j;
            acc[t] += d0 * (sa[0] + sa[1]) + d1 * (sb[0] + sb[1]) - (m0 * a.s[s32] + m1 * a.s[s32 + 1]);
        }
    }
};

// ---- Q6_K: value = d*sc*(q - 32), q 0..63, per sub-block of 16 ----------------------------------------
struct DotQ6_KF : DotQ6_K {
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2*, float (&acc)[NT]) {
        const int b = c >> 4, hh = (c >> 3) & 1, l0 = (c & 7) * 4;
        u32 u[4];  // 6-bit codes of rows r = 0..3 (value 128hh + 32r + l0 + i in byte i), DotQ6_K's decode
        float sr[4];
        decode(ch, u, sr);
        const u32 u0 = u[0], u1 = u[1], u2 = u[2], u3 = u[3];
        const float s0 = sr[0], s1 = sr[1], s2 = sr[2], s3 = sr[3];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float* xf = a.f + t * a.K + b * 256 + 128 * hh + l0;
            acc[t] += (s0 * dot4(u0, *(const float4*)xf, MAGIC_BIAS(32))
                       + s1 * dot4(u1, *(const float4*)(xf + 32), MAGIC_BIAS(32)))
                      + (s2 * dot4(u2, *(const float4*)(xf + 64), MAGIC_BIAS(32))
                         + s3 * dot4(u3, *(const float4*)(xf + 96), MAGIC_BIAS(32)));
        }
    }
};

// ---- IQ1_S: value = dl * (grid + delta), grid values -1, 0, 1 ------------------------------------------
struct DotIQ1_SF : DotIQ1_S {
    template <int NT>
    static __device__ __forceinline__ void dot(const Chunk& ch, int c, const ActQ8& a, const uint2* __restrict__ grid,
                                               float (&acc)[NT]) {
        float dl, delta;
        uint2 g0, g1, g2, g3;
        decode(ch, grid, dl, delta, g0, g1, g2, g3);  // DotIQ1_S's
        const u32 m = 0x80808080u;  // int8 -1, 0, 1 -> 127, 128, 129
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float4* xf = (const float4*)(a.f + t * a.K + c * 32);
            const float s = ((dot4(g0.x ^ m, xf[0], MAGIC_BIAS(128)) + dot4(g0.y ^ m, xf[1], MAGIC_BIAS(128)))
                             + (dot4(g1.x ^ m, xf[2], MAGIC_BIAS(128)) + dot4(g1.y ^ m, xf[3], MAGIC_BIAS(128))))
                            + ((dot4(g2.x ^ m, xf[4], MAGIC_BIAS(128)) + dot4(g2.y ^ m, xf[5], MAGIC_BIAS(128)))
                               + (dot4(g3.x ^ m, xf[6], MAGIC_BIAS(128)) + dot4(g3.y ^ m, xf[7], MAGIC_BIAS(128))));
            acc[t] += dl * (s + delta * a.s[t * (a.K >> 5) + c]);
        }
    }
};
