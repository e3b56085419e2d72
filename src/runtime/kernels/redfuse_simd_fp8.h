/* redfuse_simd_fp8.h — narrow GEMM weights for the CPU micro-kernels of redfuse_simd.h: an f32 tile
 * times e4m3, e5m2 or f16 weights (the quantized GEMM of workloads #6), the weights widened to f32
 * exactly as they are loaded (every such value is an f32). Embedded after redfuse_simd.h and
 * redfuse_simd_gemm.h, redfuse_simd_gemm_nn.h, redfuse_simd_int8.h, redfuse_simd_bf16.h and redfuse_simd_amx.h (one text).
 */
#ifndef REDFUSE_SIMD_FP8_H
#define REDFUSE_SIMD_FP8_H

#include <cmath>
#include <cstdint>
#include <cstring>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (as in redfuse_simd.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace rfk {
namespace simd_detail {

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN.
// Normal (e > 0): 2^(e-7) * (1 + m/8) = f32 bits with exponent e + 120 and mantissa m << 20.
// Subnormal (e = 0): m * 2^-9.
static inline float e4m3_to_f32(uint8_t b) {
    uint32_t mag = b & 0x7Fu, e = mag >> 3, m = mag & 7u;
    float v;
    if (mag == 0x7Fu) v = NAN;
    else if (e == 0) v = static_cast<float>(m) * 0x1p-9f;
    else {
        uint32_t bits = (mag << 20) + (120u << 23);
        std::memcpy(&v, &bits, 4);
    }
    return (b & 0x80u) ? -v : v;
}

// f16 (binary16): e5m2 is its upper byte (same sign, exponent and bias, 2 of the 10 mantissa bits).
static inline float f16_to_f32(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    float v;
    if (e == 0) v = static_cast<float>(m) * 0x1p-24f;
    else if (e == 31) v = m ? NAN : INFINITY;
    else {
        uint32_t bits = ((e + 112u) << 23) | (m << 13);
        std::memcpy(&v, &bits, 4);
    }
    return (h & 0x8000u) ? -v : v;
}

// The weights' element types: classes, so the micro-kernels' vload(p) finds the overloads below by
// argument-dependent lookup when they are instantiated with them.
struct e4m3 {
    uint8_t bits;
};
struct e5m2 {
    uint8_t bits;
};
struct f16 {
    uint16_t bits;
};

#if defined(RFK_SIMD_AVX512)
static inline vf widen_e4m3(__m128i b) {
    const __m512i x = _mm512_cvtepu8_epi32(b), mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7F));
    const __m512i e = _mm512_srli_epi32(mag, 3), m = _mm512_and_si512(mag, _mm512_set1_epi32(7));
    vf normal = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    vf sub = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f));
    vf v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), normal, sub);
    v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)), v, _mm512_set1_ps(NAN));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}
static inline vf vload(const e4m3 *p) { return widen_e4m3(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
static inline vf vload_n(const e4m3 *p, int64_t n) { return widen_e4m3(_mm_maskz_loadu_epi8(static_cast<__mmask16>(first_n(n)), p)); }
#if defined(__F16C__)
static inline vf widen_e5m2(__m128i b) { return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8)); }
static inline vf vload(const e5m2 *p) { return widen_e5m2(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
static inline vf vload_n(const e5m2 *p, int64_t n) { return widen_e5m2(_mm_maskz_loadu_epi8(static_cast<__mmask16>(first_n(n)), p)); }
static inline vf vload(const f16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
static inline vf vload_n(const f16 *p, int64_t n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_n(n), p)); }
#define RFK_SIMD_NARROW 1
#endif
#elif defined(RFK_SIMD_AVX2)
static inline vf widen_e4m3(__m128i b) {
    const __m256i x = _mm256_cvtepu8_epi32(b), mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7F));
    const __m256i e = _mm256_srli_epi32(mag, 3), m = _mm256_and_si256(mag, _mm256_set1_epi32(7));
    vf normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
    vf sub = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f));
    vf v = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
    v = _mm256_blendv_ps(v, _mm256_set1_ps(NAN), _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F))));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign));
}
static inline vf vload(const e4m3 *p) { return widen_e4m3(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))); }
static inline vf vload_n(const e4m3 *p, int64_t n) {
    alignas(16) uint8_t tmp[16] = {};
    std::memcpy(tmp, p, static_cast<size_t>(n));
    return widen_e4m3(_mm_load_si128(reinterpret_cast<const __m128i *>(tmp)));
}
#if defined(__F16C__)
static inline vf widen_e5m2(__m128i b) { return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 8)); }
static inline vf vload(const e5m2 *p) { return widen_e5m2(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))); }
static inline vf vload_n(const e5m2 *p, int64_t n) {
    alignas(16) uint8_t tmp[16] = {};
    std::memcpy(tmp, p, static_cast<size_t>(n));
    return widen_e5m2(_mm_load_si128(reinterpret_cast<const __m128i *>(tmp)));
}
static inline vf vload(const f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
static inline vf vload_n(const f16 *p, int64_t n) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, p, static_cast<size_t>(n) * 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(tmp)));
}
#define RFK_SIMD_NARROW 1
#endif
#endif

// C (+)= alpha · A · Bᵀ with B of a narrow type W (N rows of K elements, stored as `Bits`), widened by
// `scalar` on the plain path.
template <typename W, bool kVector, typename Bits, typename Scalar>
static inline void nt_gemm_narrow(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const Bits *B, int64_t ldb,
                                  float *C, int64_t ldc, bool accumulate, Scalar scalar) {
#if defined(RFK_SIMD_VECTOR)
    if constexpr (kVector) {
        nt_gemm<DotFma>(M, N, K, alpha, A, lda, reinterpret_cast<const W *>(B), ldb, C, ldc, accumulate);
        return;
    }
#endif
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += A[i * lda + k] * scalar(B[j * ldb + k]);
            C[i * ldc + j] = alpha * s + (accumulate ? C[i * ldc + j] : 0.0f);
        }
}

}  // namespace simd_detail

// C (+)= alpha · A · Bᵀ with B narrow (N rows of K elements): the f32 micro-kernels, B widened on
// load (f16 and e5m2 through F16C's exact conversion; without F16C the plain loops).
#if defined(RFK_SIMD_NARROW)
constexpr bool kNarrowVector = true;
#else
constexpr bool kNarrowVector = false;
#endif
// Like the other public nt GEMMs, one row block's call splits its columns over the threads (split_columns).
static inline void gemm_nt_f32_f8e4m3(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const uint8_t *B,
                                      int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_f32_f8e4m3(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
    simd_detail::nt_gemm_narrow<simd_detail::e4m3, true>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, simd_detail::e4m3_to_f32);
}
static inline void gemm_nt_f32_f8e5m2(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const uint8_t *B,
                                      int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_f32_f8e5m2(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
    simd_detail::nt_gemm_narrow<simd_detail::e5m2, kNarrowVector>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate,
                                                                  [](uint8_t b) { return simd_detail::f16_to_f32(uint16_t(b << 8)); });
}
static inline void gemm_nt_f32_f16(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const uint16_t *B,
                                   int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_f32_f16(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
    simd_detail::nt_gemm_narrow<simd_detail::f16, kNarrowVector>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate,
                                                                 simd_detail::f16_to_f32);
}

}  // namespace rfk

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // REDFUSE_SIMD_FP8_H
