/** \file redfuse_simd.h
 * Hot-loop primitives for generated CPU kernels, first of seven texts: the vector vocabulary and the
 * element-wise row kernels (exp, max, sum, scale), with the code path chosen at compile time from the
 * -m flags: AVX-512 (F+BW+VL; vdpbf16ps with AVX512_BF16, vpdpbusd with AVX512_VNNI), else AVX2+FMA,
 * else portable scalar loops.
 *
 * Seven texts, pasted in this order (CMake embeds their concatenation as kEmbeddedSimdHeader, which
 * the JIT pastes and `emit` writes out as one redfuse_simd.h): this one (ISA selection, bf16
 * conversions, the per-ISA vector vocabulary, the vectorized exp and the row primitives, the GEMMs' row strips),
 * redfuse_simd_gemm.h (the f32/bf16 GEMM micro-kernels; their per-thread scratch is at the end of this one),
 * redfuse_simd_gemm_nn.h (the NN GEMMs, P·V), redfuse_simd_int8.h (the
 * int8 GEMM micro-kernels), redfuse_simd_bf16.h (float tiles
 * on the bf16 unit), redfuse_simd_amx.h (AMX tile GEMMs) and redfuse_simd_fp8.h (narrow GEMM weights). A program that includes them directly includes them in that order.
 *
 * Self-contained (no redfuse headers) and C++17, because JIT-compiled kernels include it. Every function
 * is `static inline`, so translation units built with different -m flags never share a definition.
 * No pointer needs any alignment. No function uses OpenMP; all are safe to call from several threads
 * at once.
 */
#ifndef REDFUSE_SIMD_H
#define REDFUSE_SIMD_H

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <unordered_map>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define RFK_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define RFK_SIMD_AVX2 1
#endif
#if defined(RFK_SIMD_AVX512) && defined(__AVX512BF16__)
#define RFK_SIMD_BF16 1
#endif
#if defined(RFK_SIMD_AVX512) && defined(__AVX512VNNI__)
#define RFK_SIMD_VNNI 1
#endif
// AMX tiles (redfuse_simd_amx.h) with -mamx-tile -mamx-bf16 -mamx-int8 on top of AVX512_BF16 and VNNI
// (every AMX CPU has both); RFK_AMX_EMULATE runs the same code on a software model of the tiles;
// RFK_NO_AMX keeps the vector kernels (REDFUSE_JIT_FLAGS=-DRFK_NO_AMX: an A/B comparison on one CPU).
#if defined(RFK_SIMD_BF16) && defined(RFK_SIMD_VNNI) && !defined(RFK_NO_AMX) && \
    (defined(RFK_AMX_EMULATE) || (defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__)))
#define RFK_SIMD_AMX 1
#endif
#if defined(RFK_SIMD_AVX512) || defined(RFK_SIMD_AVX2)
#define RFK_SIMD_VECTOR 1
#include <immintrin.h>
#endif

// GCC 12 reports the self-initialized _mm512_undefined_* inside AVX-512 intrinsics as uninitialized
// (a false positive, fixed in later GCC); silenced for this header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__GNUC__)
#define RFK_UNROLL _Pragma("GCC unroll 16")
#else
#define RFK_UNROLL
#endif

namespace rfk {

/** Which code path this translation unit compiled: "avx512", "avx2" or "scalar" (tests check it). */
static inline const char *simd_level() {
#if defined(RFK_SIMD_AVX512)
    return "avx512";
#elif defined(RFK_SIMD_AVX2)
    return "avx2";
#else
    return "scalar";
#endif
}

/** Which tile unit the GEMMs may use: "amx", "amx-emulated" (RFK_AMX_EMULATE) or "none". With AMX the
 *  GEMMs still take the vector path when Linux does not grant the tile state or a shape is small. */
static inline const char *tile_unit() {
#if defined(RFK_SIMD_AMX) && defined(RFK_AMX_EMULATE)
    return "amx-emulated";
#elif defined(RFK_SIMD_AMX)
    return "amx";
#else
    return "none";
#endif
}

static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/** Round to nearest even. A finite value that would round past the largest bf16 saturates to it, as
 *  rfk::cast_bf16 in redfuse_cpu.h does (the spec's cast semantics); infinities stay, NaN stays NaN. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
    uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    bool was_finite = (u & 0x7f800000u) != 0x7f800000u;
    if (was_finite && (rounded & 0x7f800000u) == 0x7f800000u) return uint16_t(((u >> 16) & 0x8000u) | 0x7f7fu);
    return uint16_t(rounded >> 16);
}

namespace simd_detail {

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Exp constants. exp(x) = 2^n * e^r, n = round(x / ln2), r = x - n ln2 (ln2 in two parts so r is exact to
// a few bits beyond float), e^r = 1 + r + r^2 q(r) with q a degree-4 Chebyshev fit of (e^r - 1 - r) / r^2
// on |r| <= 1.02 ln2/2: fit error 1.1e-8 relative, the rest is the final rounding (tests: max 1 ulp).
constexpr float kLog2e = 1.44269502162933349609375f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.428606765330187045e-06f;
constexpr float kExpC2 = 0.5f, kExpC3 = 0.1666657030582428f, kExpC4 = 0.04166654497385025f;
constexpr float kExpC5 = 0.008364380337297916f, kExpC6 = 0.0013927684631198645f;
// Below -110 every result is 0 and above 90 every result is +inf, and clamping there keeps n in range.
constexpr float kExpLo = -110.0f, kExpHi = 90.0f;

// Asks for the line `bytes` past p into L2. The address may lie past the end of p's array (a hint never
// faults), so it is formed as an integer: pointer arithmetic past an array's end is undefined.
static inline void prefetch_l2_past(const void *p, int64_t bytes) {
    __builtin_prefetch(reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes)), 0, 2);
}

#if defined(RFK_SIMD_VECTOR)
// ---------------------------------------------------------------------------------------------------
// One vector vocabulary per ISA, so the kernels below and those of redfuse_simd_gemm.h are written once.
// ---------------------------------------------------------------------------------------------------
#if defined(RFK_SIMD_AVX512)
constexpr int VW = 16;
using vf = __m512;
using vmask = __mmask16;
static inline vmask first_n(int64_t n) { return vmask((1u << n) - 1u); }
static inline vf vzero() { return _mm512_setzero_ps(); }
static inline vf vset1(float a) { return _mm512_set1_ps(a); }
static inline vf vload(const float *p) { return _mm512_loadu_ps(p); }
static inline vf vload_n(const float *p, int64_t n) { return _mm512_maskz_loadu_ps(first_n(n), p); }
static inline void vstore(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline void vstore_n(float *p, vf v, int64_t n) { _mm512_mask_storeu_ps(p, first_n(n), v); }
static inline vf widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
static inline vf vload(const uint16_t *p) { return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
static inline vf vload_n(const uint16_t *p, int64_t n) { return widen_bf16(_mm256_maskz_loadu_epi16(first_n(n), p)); }
// 2·VW bf16 as they lie, split into their even and odd elements as floats (the low and high halves of
// each 32-bit lane; `high` = 0xFFFF0000 in every lane): two ALU operations, no shuffle.
using vi = __m512i;
static inline vi vset1_i32(int32_t x) { return _mm512_set1_epi32(x); }
static inline vi vload_raw(const uint16_t *p) { return _mm512_loadu_si512(p); }
static inline void split_bf16_pairs(vi x, vi high, vf &even, vf &odd) {
    even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(x, high));
}
static inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
// max/min return the second operand when either is NaN: pass the data second to keep its NaN.
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vmask vis_nan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vmask veq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline vmask mnone() { return 0; }
static inline vmask mor(vmask a, vmask b) { return vmask(a | b); }
static inline bool many(vmask m) { return m != 0; }
static inline vf vselect(vmask m, vf if_false, vf if_true) { return _mm512_mask_blend_ps(m, if_false, if_true); }
static inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vhmax(vf v) { return _mm512_reduce_max_ps(v); }
static inline vf vround(vf v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n, rounding once into the subnormal range and overflowing to inf.
static inline vf vldexp(vf p, vf n) { return _mm512_scalef_ps(p, n); }
// [sum a, sum b, sum c, sum d] with shuffles instead of four full horizontal reductions.
static inline __m128 vsum4(vf a, vf b, vf c, vf d) {
    vf ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    vf cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    vf lanes = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    // 128-bit group g of `lanes` holds four partial sums of operand g; two horizontal adds finish them.
    __m256 h = _mm256_hadd_ps(_mm512_castps512_ps256(lanes), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1)));
    h = _mm256_hadd_ps(h, h);  // [a c a c | b d b d]
    return _mm_unpacklo_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
// Sums of 16 vectors, acc[i][j] (MR = 4 rows times 4 columns of a dot tile): 128-bit group i of the result is
// [sum acc[i][0], ..., sum acc[i][3]], row i of the tile. The first two levels are vsum4's; the last two, 4
// lanes to 1, run once on all 16 sums (two unpack levels) instead of per row through 256-bit horizontal adds:
// 45 instructions instead of about 70.
static inline vf vsum4x4(const vf (&acc)[4][4]) {
    vf col[4];  // col[j]: group i holds four partial sums of acc[i][j]
    RFK_UNROLL for (int j = 0; j < 4; ++j) {
        vf ab = _mm512_add_ps(_mm512_shuffle_f32x4(acc[0][j], acc[1][j], 0x44), _mm512_shuffle_f32x4(acc[0][j], acc[1][j], 0xEE));
        vf cd = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2][j], acc[3][j], 0x44), _mm512_shuffle_f32x4(acc[2][j], acc[3][j], 0xEE));
        col[j] = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    }
    // Within each group, lanes t: [c0 t0+t2, c1 t0+t2, c0 t1+t3, c1 t1+t3], then 64-bit pairs to [c0, c1, c2, c3].
    vf c01 = _mm512_add_ps(_mm512_unpacklo_ps(col[0], col[1]), _mm512_unpackhi_ps(col[0], col[1]));
    vf c23 = _mm512_add_ps(_mm512_unpacklo_ps(col[2], col[3]), _mm512_unpackhi_ps(col[2], col[3]));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c01), _mm512_castps_pd(c23))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c01), _mm512_castps_pd(c23))));
}
static inline __m128i vsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
    __m512i ab = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xEE));
    __m512i cd = _mm512_add_epi32(_mm512_shuffle_i32x4(c, d, 0x44), _mm512_shuffle_i32x4(c, d, 0xEE));
    __m512i lanes = _mm512_add_epi32(_mm512_shuffle_i32x4(ab, cd, 0x88), _mm512_shuffle_i32x4(ab, cd, 0xDD));
    __m256i h = _mm256_hadd_epi32(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
    h = _mm256_hadd_epi32(h, h);
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
// In-register transpose of a 16x16 block of 32-bit elements (rows in r[0..15]).
static inline void vtranspose(vf r[16]) {
    vf t[16];
    RFK_UNROLL for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    RFK_UNROLL for (int g = 0; g < 16; g += 4) {
        r[g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
        r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
    }
    // r[4g + e] now holds, in 128-bit lane L, element 4L + e of rows 4g..4g+3.
    RFK_UNROLL for (int e = 0; e < 4; ++e) {
        vf ab_lo = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x44), ab_hi = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xEE);
        vf cd_lo = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x44), cd_hi = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xEE);
        t[0 + e] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);
        t[4 + e] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xDD);
        t[8 + e] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);
        t[12 + e] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xDD);
    }
    RFK_UNROLL for (int i = 0; i < 16; ++i) r[i] = t[i];
}
#else  // AVX2 + FMA
constexpr int VW = 8;
using vf = __m256;
using vmask = __m256;
alignas(32) static const int32_t kLaneMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static inline __m256i first_n(int64_t n) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(kLaneMaskTable + 8 - n)); }
static inline vf vzero() { return _mm256_setzero_ps(); }
static inline vf vset1(float a) { return _mm256_set1_ps(a); }
static inline vf vload(const float *p) { return _mm256_loadu_ps(p); }
static inline vf vload_n(const float *p, int64_t n) { return _mm256_maskload_ps(p, first_n(n)); }
static inline void vstore(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline void vstore_n(float *p, vf v, int64_t n) { _mm256_maskstore_ps(p, first_n(n), v); }
static inline vf widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
static inline vf vload(const uint16_t *p) { return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
static inline vf vload_n(const uint16_t *p, int64_t n) {
    alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tmp, p, size_t(n) * 2);
    return widen_bf16(_mm_load_si128(reinterpret_cast<const __m128i *>(tmp)));
}
using vi = __m256i;  // split_bf16_pairs as above
static inline vi vset1_i32(int32_t x) { return _mm256_set1_epi32(x); }
static inline vi vload_raw(const uint16_t *p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }
static inline void split_bf16_pairs(vi x, vi high, vf &even, vf &odd) {
    even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(x, high));
}
static inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vmask vis_nan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline vmask veq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline vmask mnone() { return _mm256_setzero_ps(); }
static inline vmask mor(vmask a, vmask b) { return _mm256_or_ps(a, b); }
static inline bool many(vmask m) { return _mm256_movemask_ps(m) != 0; }
static inline vf vselect(vmask m, vf if_false, vf if_true) { return _mm256_blendv_ps(if_false, if_true, m); }
static inline float vsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vhmax(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline vf vround(vf v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n as p * 2^(n/2) * 2^(n - n/2): both factors are normal for |n| <= 252, so the product rounds once.
static inline vf vldexp(vf p, vf n) {
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1), rest = _mm256_sub_epi32(ni, half);
    __m256i bias = _mm256_set1_epi32(127);
    vf s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    vf s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
static inline __m128 vsum4(vf a, vf b, vf c, vf d) {
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}
static inline void vtranspose(vf r[8]) {
    vf t[8], s[8];
    RFK_UNROLL for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    RFK_UNROLL for (int g = 0; g < 8; g += 4) {
        s[g + 0] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
        s[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
        s[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        s[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    RFK_UNROLL for (int e = 0; e < 4; ++e) {
        r[e] = _mm256_permute2f128_ps(s[e], s[4 + e], 0x20);
        r[4 + e] = _mm256_permute2f128_ps(s[e], s[4 + e], 0x31);
    }
}
#endif

// Loads once into a register: left alone, GCC folds a load into every FMA that uses it (4x the loads).
template <typename V>
static inline V in_register(V v) {
#if defined(__GNUC__)
    __asm__("" : "+v"(v));
#endif
    return v;
}

// The vectorized exp: clamp (NaN passes, as the data is the second operand), reduce, polynomial, scale.
static inline vf vexp(vf x) {
    x = vmin(vset1(kExpHi), vmax(vset1(kExpLo), x));
    vf n = vround(vmul(x, vset1(kLog2e)));
    vf r = vfma(n, vset1(-kLn2Hi), x);
    r = vfma(n, vset1(-kLn2Lo), r);
    vf q = vfma(vset1(kExpC6), r, vset1(kExpC5));
    q = vfma(q, r, vset1(kExpC4));
    q = vfma(q, r, vset1(kExpC3));
    q = vfma(q, r, vset1(kExpC2));
    vf p = vadd(vfma(q, vmul(r, r), r), vset1(1.0f));
    return vldexp(p, n);
}

// x*scale - m with the spec's subtraction: equal infinities give that infinity (a masked row stays -inf).
static inline vf shifted(vf x, vf scale, vf m, bool m_is_inf) {
    vf xs = in_register(vmul(x, scale));  // rounded, as the spec's mul is: never contracted into an fma
    vf t = vsub(xs, m);
    return m_is_inf ? vselect(veq(xs, m), t, xs) : t;
}
#endif  // RFK_SIMD_VECTOR

}  // namespace simd_detail

// =====================================================================================================
// Public API (row primitives; the GEMMs are in redfuse_simd_gemm.h). Without AVX2+FMA every function is
// the plain loop below its SIMD call.
// =====================================================================================================

static inline float max_f32(const float *x, int64_t n, float init) {
    float best = init;
    bool nan = init != init;
    int64_t i = 0;
#if defined(RFK_SIMD_VECTOR)
    using namespace simd_detail;
    if (n >= VW) {
        vf m0 = vset1(init), m1 = m0;
        vmask bad = mnone();
        for (; i + 2 * VW <= n; i += 2 * VW) {
            vf a = vload(x + i), b = vload(x + i + VW);
            bad = mor(bad, mor(vis_nan(a), vis_nan(b)));
            m0 = vmax(m0, a);
            m1 = vmax(m1, b);
        }
        if (i + VW <= n) {
            vf a = vload(x + i);
            bad = mor(bad, vis_nan(a));
            m0 = vmax(m0, a);
            i += VW;
        }
        nan = nan || many(bad);
        float v = vhmax(vmax(m0, m1));
        best = v > best ? v : best;
    }
#endif
    for (; i < n; ++i) {
        nan = nan || x[i] != x[i];
        best = x[i] > best ? x[i] : best;
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : best;
}

static inline float sum_f32(const float *x, int64_t n) {
#if defined(RFK_SIMD_VECTOR)
    using namespace simd_detail;
    vf s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
    int64_t i = 0;
    for (; i + 4 * VW <= n; i += 4 * VW) {
        s0 = vadd(s0, vload(x + i));
        s1 = vadd(s1, vload(x + i + VW));
        s2 = vadd(s2, vload(x + i + 2 * VW));
        s3 = vadd(s3, vload(x + i + 3 * VW));
    }
    for (; i + VW <= n; i += VW) s0 = vadd(s0, vload(x + i));
    if (i < n) s1 = vadd(s1, vload_n(x + i, n - i));
    return vsum(vadd(vadd(s0, s1), vadd(s2, s3)));
#else
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
#endif
}

static inline float exp_shift_sum_f32(const float *x, int64_t n, float scale, float m, float *y) {
    bool m_is_inf = std::isinf(m);
#if defined(RFK_SIMD_VECTOR)
    using namespace simd_detail;
    vf vs = vset1(scale), vm = vset1(m), s0 = vzero(), s1 = vzero();
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        vf e0 = vexp(shifted(vload(x + i), vs, vm, m_is_inf));
        vf e1 = vexp(shifted(vload(x + i + VW), vs, vm, m_is_inf));
        vstore(y + i, e0);
        vstore(y + i + VW, e1);
        s0 = vadd(s0, e0);
        s1 = vadd(s1, e1);
    }
    for (; i < n; i += VW) {
        int64_t k = min64(VW, n - i);
        vf e = vexp(shifted(vload_n(x + i, k), vs, vm, m_is_inf));
        vstore_n(y + i, e, k);
        s0 = vadd(s0, vload_n(y + i, k));  // reloaded: lanes past the end are zero, not exp(-m)
    }
    return vsum(vadd(s0, s1));
#else
    float s = 0;
    for (int64_t i = 0; i < n; ++i) {
        float xs = x[i] * scale;
        float t = (m_is_inf && xs == m) ? xs : xs - m;
        y[i] = std::exp(t);
        s += y[i];
    }
    return s;
#endif
}

static inline void exp_f32(const float *x, int64_t n, float *y) {
#if defined(RFK_SIMD_VECTOR)
    using namespace simd_detail;
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstore(y + i, vexp(vload(x + i)));
    if (i < n) vstore_n(y + i, vexp(vload_n(x + i, n - i)), n - i);
#else
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
#endif
}

static inline void scale_f32(float *x, int64_t n, float a) {
#if defined(RFK_SIMD_VECTOR)
    using namespace simd_detail;
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstore(x + i, vmul(vload(x + i), vset1(a)));
    if (i < n) vstore_n(x + i, vmul(vload_n(x + i, n - i), vset1(a)), n - i);
#else
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
#endif
}

}  // namespace rfk

#undef RFK_UNROLL
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// =====================================================================================================
// State the tile GEMMs (redfuse_simd_gemm.h and the texts after it) keep between calls: the column split's
// thread count, the kernel entry's input epoch, per-thread scratch and the panels kept from kernel inputs.
// =====================================================================================================
namespace rfk {
#ifndef RFK_GEMM_SPLIT_THREADS  // declared by redfuse_cpu.h too (the generated parallel loop sets it)
#define RFK_GEMM_SPLIT_THREADS
[[maybe_unused]] static std::atomic<int> gemm_split_threads{1};
// Bumped by every generated kernel function on entry: tile panels packed from a kernel input (kept per
// thread by the AMX GEMMs and the f32 attention GEMMs, cached_panels below) are reused only within the
// entry that packed them, while the input cannot change.
[[maybe_unused]] static std::atomic<uint64_t> input_epoch{0};
#endif
namespace simd_detail {

// ---------------------------------------------------------------------------------------------------
// Scratch: one growing 64-byte-aligned buffer per slot and thread.
// ---------------------------------------------------------------------------------------------------
struct ScratchBuffer {
    void *data = nullptr;
    size_t bytes = 0;
    ~ScratchBuffer() { std::free(data); }
};
// Per thread, but not thread_local: generated kernels live in dlopen'd objects, and thread-local
// objects with destructors registered from such an object (by OpenMP worker threads that outlive it)
// crash LeakSanitizer's exit-time scan. A process-wide map from thread id to buffers, freed when the
// object is unloaded, costs one uncontended lock per call (calls are per tile, not per element).
// Tile panels packed from a kernel input, kept for the thread's next GEMM on the same operand (attention:
// every row block of a head multiplies by the same K and V tiles). An entry is valid only for the
// input_epoch it was packed in; entries are replaced round-robin.
// What a kept packing holds: the same operand packed for different kernels must not be mistaken.
enum class PanelKind : uint8_t { None, AmxBf16, AmxInt8, AmxPairedV, F32TransposedK, F32RowsV, Bf16PairsA1, Bf16PairsA2,
                                 WidenedTransposedK, WidenedRowsV };  // Widened*: f32 panels of a bf16 operand
struct PanelCacheEntry {
    const void *src = nullptr;
    int64_t ld = 0, cols = 0, K = 0;
    PanelKind kind = PanelKind::None;
    uint64_t epoch = 0;
    ScratchBuffer panels;
};
struct PanelCache {
    std::array<PanelCacheEntry, 32> entries;
    size_t next = 0;
};
struct ScratchPool {
    std::mutex lock;
    std::unordered_map<std::thread::id, std::array<ScratchBuffer, 7>> per_thread;  // node addresses are stable
    std::unordered_map<std::thread::id, PanelCache> panel_caches;
};
static inline ScratchPool &scratch_pool() {
    static ScratchPool pool;
    return pool;
}
// The buffer's memory, reallocated (contents dropped) when smaller than `bytes`.
static inline void *grow(ScratchBuffer &b, size_t bytes) {
    if (b.bytes < bytes) {
        size_t rounded = (bytes + 63) / 64 * 64;
        void *p = std::aligned_alloc(64, rounded);
        if (!p) throw std::bad_alloc();
        std::free(b.data);
        b.data = p;
        b.bytes = rounded;
    }
    return b.data;
}
static inline void *scratch(int slot, size_t bytes) {
    ScratchPool &pool = scratch_pool();
    ScratchBuffer *buffers;
    {
        std::lock_guard<std::mutex> guard(pool.lock);
        buffers = pool.per_thread[std::this_thread::get_id()].data();
    }
    return grow(buffers[slot], bytes);
}

// The panels of operand (src, ld, cols, K, kind) packed in this entry of the kernel, if this thread kept
// them (hit = true), else an entry's buffer of `bytes` to pack them into (hit = false), then kept.
static inline void *cached_panels(const void *src, int64_t ld, int64_t cols, int64_t K, PanelKind kind, size_t bytes, bool &hit) {
    ScratchPool &pool = scratch_pool();
    PanelCache *cache;
    {
        std::lock_guard<std::mutex> guard(pool.lock);
        cache = &pool.panel_caches[std::this_thread::get_id()];
    }
    const uint64_t epoch = input_epoch.load(std::memory_order_relaxed);
    for (PanelCacheEntry &e : cache->entries)
        if (e.src == src && e.ld == ld && e.cols == cols && e.K == K && e.kind == kind && e.epoch == epoch && e.panels.bytes >= bytes) {
            hit = true;
            return e.panels.data;
        }
    PanelCacheEntry &e = cache->entries[cache->next++ % cache->entries.size()];
    e.src = nullptr;  // no key while the memory changes hands
    void *panels = grow(e.panels, bytes);
    e.src = src, e.ld = ld, e.cols = cols, e.K = K, e.kind = kind, e.epoch = epoch;
    hit = false;
    return panels;
}

// ---------------------------------------------------------------------------------------------------
// Row strips: how the GEMM texts after this one run a register block of R rows over a block of M rows.
// ---------------------------------------------------------------------------------------------------
// Calls f(std::integral_constant<int, r>) for a run-time r in [1, R]: row tails reuse the register-blocked
// kernels at a compile-time height.
template <int R, typename F>
static inline void with_rows(int r, F &&f) {
    if constexpr (R >= 1) {
        if (r == R) {
            f(std::integral_constant<int, R>{});
            return;
        }
        with_rows<R - 1>(r, f);
    }
}

// Calls f(std::integral_constant<int, rows>, i) for strips of R rows covering [0, M); the last one is shorter.
template <int R, typename F>
static inline void for_strips(int64_t M, F &&f) {
    int64_t i = 0;
    for (; i + R <= M; i += R) f(std::integral_constant<int, R>{}, i);
    if (i < M) with_rows<R - 1>(int(M - i), [&](auto rows) { f(rows, i); });
}

// for_strips with strips of R - 1 rows in place of a short last one: M = R·a + (R - 1)·b with
// b = (R - M mod R) mod R strips of R - 1 (then R·a = M - (R - 1)·b, since M + b ≡ 0 mod R), where
// M allows it. A register block of R - 1 rows keeps its FMA units nearly as busy as one of R (5 x 16
// on AVX2: 10 accumulators for the 4-cycle latency of 2 FMA pipes; one core, operands in L1, AMD
// Zen 3: 6 rows ~100 GFLOP/s, 5 rows 92-98, 4 rows 53-66), so attention's 64-row blocks on AVX2 run
// as 9 x 6 + 2 x 5 instead of 10 x 6 + 4.
template <int R, typename F>
static inline void for_even_strips(int64_t M, F &&f) {
    const int64_t short_strips = (R - M % R) % R;
    if (R < 3 || short_strips * (R - 1) > M) return for_strips<R>(M, f);
    const int64_t tall_end = M - short_strips * (R - 1);
    int64_t i = 0;
    for (; i < tall_end; i += R) f(std::integral_constant<int, R>{}, i);
    for (; i < M; i += R - 1) f(std::integral_constant<int, R - 1>{}, i);
}

}  // namespace simd_detail
}  // namespace rfk

#endif  // REDFUSE_SIMD_H
