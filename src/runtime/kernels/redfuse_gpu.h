/* redfuse_gpu.h — the language's semantics for generated GPU kernels, one text for OpenCL C 1.2
 * and CUDA C++ (the GPU printer pastes it first).
 *
 * Every helper works in float: GPU running states are fp32 (docs/design.md §4). The semantics are those of
 * src/runtime/kernels/redfuse_cpu.h and rf::Evaluator: (-inf) - (-inf) = -inf, 0 / 0 = 0, NaN-
 * propagating max/min, floor division, round-to-nearest-even casts with saturation. No pointers
 * cross a helper boundary (OpenCL 1.2 has no generic address space): list and shift-state updates are
 * printed inline by the code generator.
 */
#ifndef REDFUSE_GPU_H
#define REDFUSE_GPU_H

#ifdef __OPENCL_VERSION__
/* A product rounds once, the same wherever the kernel uses it: OpenCL C contracts a*b + c into one
 * FMA by default, which left x*g - m nonzero at the max m that took x*g rounded (as on the CPU, whose
 * JIT compiles with -ffp-contract=off; tests/specs/rounded_product_at_the_max.rf). */
#pragma OPENCL FP_CONTRACT OFF
#define RF_FN static inline
#define RF_KERNEL __kernel
#define RF_GLOBAL __global
/* volatile: PoCL 3.1 (LLVM 15) dropped stores into __local memory that were read back after a
 * barrier through another pointer into the same argument (a tile zeroed before a cooperative GEMM
 * kept the previous work-group's values). Volatile costs nothing that matters on a CPU device. */
#define RF_SHARED __local volatile
/* volatile: PoCL 3.1 read a running state's register copy (every work-item holds one, updated
 * between barriers) as NaN after the last barrier in one kernel shape (a monotone member's maximum
 * read by work-item 0 for a store; found by scripts/fuzz_specs.py; a dead printf of the value made
 * it right). Only running states: volatile on every register copy (tile values, indices too) made
 * PoCL's work-group compiler take 77 s instead of 1.3 s on a small kernel. */
#define RF_STATE volatile
typedef long int64_t;
typedef int int32_t;
typedef uint uint32_t;
typedef ushort uint16_t;
typedef uchar uint8_t;
typedef char int8_t;
#define RF_INF INFINITY
#define RF_NAN NAN
#define RF_LID ((int64_t)get_local_id(0))
#define RF_GID ((int64_t)get_group_id(0))
#define RF_BARRIER() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define RF_AS_FLOAT(u) as_float((uint)(u))
#define RF_AS_UINT(f) as_uint((float)(f))
#define RF_RINT(x) rint(x)
#define RF_FABS(x) fabs(x)
#define RF_EXP2(x) exp2(x)
#define RF_EXP(x) exp(x)
#define RF_SQRT(x) sqrt(x)
#else /* CUDA */
#define RF_FN static __device__ __forceinline__
#define RF_KERNEL extern "C" __global__
#define RF_GLOBAL
#define RF_SHARED
#define RF_STATE
#if defined(__CUDACC_RTC__) /* NVRTC has no <cstdint> without the toolkit's include path */
typedef long long int64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
typedef signed char int8_t;
#else
#include <cstdint>
#endif
#define RF_INF __int_as_float(0x7f800000)
#define RF_NAN __int_as_float(0x7fffffff)
#define RF_LID ((int64_t)threadIdx.x)
#define RF_GID ((int64_t)blockIdx.x)
#define RF_BARRIER() __syncthreads()
#define RF_AS_FLOAT(u) __uint_as_float((unsigned int)(u))
#define RF_AS_UINT(f) __float_as_uint((float)(f))
#define RF_RINT(x) rintf(x)
#define RF_FABS(x) fabsf(x)
#define RF_EXP2(x) exp2f(x)
#define RF_EXP(x) expf(x)
#define RF_SQRT(x) sqrtf(x)
#endif

RF_FN int64_t rf_imin(int64_t a, int64_t b) { return a < b ? a : b; }
RF_FN int64_t rf_imax(int64_t a, int64_t b) { return a > b ? a : b; }
RF_FN int64_t rf_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}
RF_FN int64_t rf_mod(int64_t a, int64_t b) { return a - b * rf_floordiv(a, b); }

RF_FN int rf_isnan(float x) { return x != x; }
RF_FN int rf_isinf(float x) { return RF_FABS(x) == RF_INF; }
/* (-inf) - (-inf) = -inf and (+inf) - (+inf) = +inf: a fully masked row stays masked. */
RF_FN float rf_sub(float a, float b) { return (a == b && rf_isinf(a)) ? a : a - b; }
/* 0 / 0 = 0: normalizing an empty row gives 0. */
RF_FN float rf_div(float a, float b) { return (a == 0.0f && b == 0.0f) ? 0.0f : a / b; }
RF_FN float rf_max(float a, float b) { return (rf_isnan(a) || rf_isnan(b)) ? a + b : (a > b ? a : b); }
RF_FN float rf_min(float a, float b) { return (rf_isnan(a) || rf_isnan(b)) ? a + b : (a < b ? a : b); }
RF_FN float rf_sq(float b) { return b * b; }
RF_FN float rf_rsqrt(float x) { return 1.0f / RF_SQRT(x); }
RF_FN float rf_round_even(float x) { return RF_RINT(x); }
/* exp(x) = 2^(x log2 e): one special-function instruction on NVIDIA GPUs. exp2 of a finite product
 * overflows to inf and underflows to 0 exactly where exp does, to within the last ulp. */
RF_FN float rf_exp(float x) { return RF_EXP2(x * 1.4426950408889634f); }
RF_FN float rf_sigmoid(float x) {
    return x >= 0.0f ? 1.0f / (1.0f + rf_exp(-x)) : rf_exp(x) / (1.0f + rf_exp(x));
}

/* ---- Rounding casts (rf::round_to_dtype), on the bits of a float. */
/* Rounds to a float format with `mbits` explicit mantissa bits and smallest normal exponent
 * `min_exp`, ties to even; finite overflow saturates to max_finite; inf kept only if has_inf. */
RF_FN float rf_round_small(float v, int mbits, int min_exp, float max_finite, int has_inf) {
    if (rf_isnan(v)) return v;
    float a = RF_FABS(v);
    if (rf_isinf(v)) return has_inf ? v : (v < 0.0f ? -max_finite : max_finite);
    if (a == 0.0f) return v;
    int e = (int)((RF_AS_UINT(a) >> 23) & 0xFF) - 127;           /* floor(log2 a) for normal floats */
    if (e < -126) e = -126;                                        /* float subnormals */
    int lead = e < min_exp ? min_exp : e;
    /* quantum = 2^(lead - mbits), built exactly from bits (lead - mbits >= -149 for these formats) */
    int qe = lead - mbits;
    float quantum = qe >= -126 ? RF_AS_FLOAT((uint32_t)(qe + 127) << 23) : RF_AS_FLOAT(1u << (qe + 149));
    float q = RF_RINT(a / quantum) * quantum;
    if (q > max_finite) q = max_finite;
    return v < 0.0f ? -q : q;
}
RF_FN float rf_cast_f32(float v) { return v; }
RF_FN float rf_cast_f64(float v) { return v; }
RF_FN float rf_cast_bf16(float v) {
    uint32_t u = RF_AS_UINT(v), sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return v;
    if (mag == 0x7F800000u) return v;
    uint32_t r = (mag + 0x7FFFu + ((mag >> 16) & 1u)) >> 16;
    if (r >= 0x7F80u) r = 0x7F7Fu;
    return RF_AS_FLOAT(sign | (r << 16));
}
RF_FN float rf_cast_f16(float v) { return rf_round_small(v, 10, -14, 65504.0f, 1); }
RF_FN float rf_cast_f8e4m3(float v) { return rf_round_small(v, 3, -6, 448.0f, 0); }
RF_FN float rf_cast_f8e5m2(float v) { return rf_round_small(v, 2, -14, 57344.0f, 1); }
RF_FN float rf_round_int(float v, float lo, float hi) {
    if (rf_isnan(v)) return 0.0f;
    float r = RF_RINT(v);
    return r < lo ? lo : (r > hi ? hi : r);
}
RF_FN float rf_cast_i8(float v) { return rf_round_int(v, -128.0f, 127.0f); }
RF_FN float rf_cast_i32(float v) { return rf_round_int(v, -2147483648.0f, 2147483520.0f); }
RF_FN float rf_cast_i64(float v) { return rf_round_int(v, -9223372036854775808.0f, 9223371487098961920.0f); }

/* ---- Storage formats: loads widen to float, stores round like rf::round_to_dtype. */
RF_FN float rf_bf16_to_float(uint16_t b) { return RF_AS_FLOAT((uint32_t)b << 16); }
/* mbits mantissa bits, ebits exponent bits, bias; fn: no infinities, only all-ones is NaN (e4m3fn). */
RF_FN float rf_decode_small(uint32_t bits, int mbits, int ebits, int bias, int fn) {
    uint32_t sign = bits >> (mbits + ebits), e = (bits >> mbits) & ((1u << ebits) - 1u), m = bits & ((1u << mbits) - 1u);
    float v;
    if (e == (1u << ebits) - 1u && !fn) v = m ? RF_NAN : RF_INF;
    else if (fn && e == (1u << ebits) - 1u && m == (1u << mbits) - 1u) v = RF_NAN;
    else if (e == 0u) v = (float)m * RF_AS_FLOAT((uint32_t)(127 + 1 - bias - mbits) << 23);
    else v = (float)(m | (1u << mbits)) * RF_AS_FLOAT((uint32_t)(127 + (int)e - bias - mbits) << 23);
    return sign ? -v : v;
}
RF_FN float rf_f16_to_float(uint16_t b) { return rf_decode_small(b, 10, 5, 15, 0); }
RF_FN float rf_f8e4m3_to_float(uint8_t b) { return rf_decode_small(b, 3, 4, 7, 1); }
RF_FN float rf_f8e5m2_to_float(uint8_t b) { return rf_decode_small(b, 2, 5, 15, 0); }
/* Encodes a value already representable in the format (after rf_round_small). */
RF_FN uint32_t rf_encode_small(float v, int mbits, int ebits, int bias, int fn) {
    uint32_t sign = (RF_AS_UINT(v) & 0x80000000u) ? 1u << (mbits + ebits) : 0u;
    if (rf_isnan(v)) return sign | (fn ? ((1u << (mbits + ebits)) - 1u) : (((1u << ebits) - 1u) << mbits) | 1u);
    if (rf_isinf(v)) return sign | (((1u << ebits) - 1u) << mbits);
    float a = RF_FABS(v);
    if (a == 0.0f) return sign;
    int e = (int)((RF_AS_UINT(a) >> 23) & 0xFF) - 127;
    int ex = e + bias;
    if (ex <= 0) return sign | (uint32_t)(a * RF_AS_FLOAT((uint32_t)(127 + bias - 1 + mbits) << 23)); /* subnormal */
    uint32_t m = (RF_AS_UINT(a) >> (23 - mbits)) & ((1u << mbits) - 1u);
    return sign | ((uint32_t)ex << mbits) | m;
}
RF_FN float rf_store_f32(float v) { return v; }
RF_FN float rf_store_f64(float v) { return v; }
RF_FN uint16_t rf_store_bf16(float v) {
    uint32_t u = RF_AS_UINT(v), sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
    uint32_t r = (mag + 0x7FFFu + ((mag >> 16) & 1u)) >> 16;
    uint32_t out = mag > 0x7F800000u ? 0x7FC0u : (mag == 0x7F800000u ? 0x7F80u : (r >= 0x7F80u ? 0x7F7Fu : r));
    return (uint16_t)((sign >> 16) | out);
}
RF_FN uint16_t rf_store_f16(float v) { return (uint16_t)rf_encode_small(rf_cast_f16(v), 10, 5, 15, 0); }
RF_FN uint8_t rf_store_f8e4m3(float v) { return (uint8_t)rf_encode_small(rf_cast_f8e4m3(v), 3, 4, 7, 1); }
RF_FN uint8_t rf_store_f8e5m2(float v) { return (uint8_t)rf_encode_small(rf_cast_f8e5m2(v), 2, 5, 15, 0); }
RF_FN int8_t rf_store_i8(float v) { return (int8_t)rf_cast_i8(v); }
RF_FN int32_t rf_store_i32(float v) { return (int32_t)rf_cast_i32(v); }
RF_FN int64_t rf_store_i64(float v) { return (int64_t)rf_cast_i64(v); }

/* "a is a better selection than b": larger (want_max) or smaller; NaN ranks first; ties: lower index. */
RF_FN int rf_better(int want_max, float va, float ia, float vb, float ib) {
    int na = rf_isnan(va), nb = rf_isnan(vb);
    if (na != nb) return na;
    if (!na && va != vb) return want_max ? va > vb : va < vb;
    return ia < ib;
}

#endif /* REDFUSE_GPU_H */
