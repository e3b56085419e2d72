/** \file redfuse_simd_bf16.h
 * Hot-loop primitives for generated CPU kernels, fourth of six texts: float tiles on the bf16 unit
 * (FlashAttention's trade: P, X·g or dS rounded to bf16 and multiplied with vdpbf16ps). Pasted after
 * redfuse_simd_gemm.h, whose pair kernels it drives.
 */
#ifndef REDFUSE_SIMD_BF16_H
#define REDFUSE_SIMD_BF16_H

#ifndef REDFUSE_SIMD_GEMM_H
#error "redfuse_simd_bf16.h is pasted after redfuse_simd_gemm.h (its micro-kernels)"
#endif

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

#if defined(RFK_SIMD_BF16)
// ---------------------------------------------------------------------------------------------------
// Float tiles on the bf16 unit (FlashAttention's trade): the float operand (P, X*g, dS) is rounded to bf16
// once per call, then the products run through vdpbf16ps at twice the f32 FMA rate.
// ---------------------------------------------------------------------------------------------------
// A leading dimension of bf16 rows for k < K: whole cache lines plus one, so the rows a register block
// broadcasts from do not share an L1 set (a K of 4096 would put them all 8 KiB apart, in one set).
static inline int64_t padded_ld(int64_t K) { return (K + 31) / 32 * 32 + 32; }

// out[i*ldo + k] = bf16(A[i][k]) for k < K: round to nearest even (vcvtneps2bf16; NaN stays NaN, no
// saturation: a finite value past the largest bf16 becomes inf, as its f32 products would soon).
static inline void round_to_bf16(int64_t M, int64_t K, const float *A, int64_t lda, uint16_t *out, int64_t ldo) {
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; k += 16) {
            __mmask16 m = first_n(min64(16, K - k));
            __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, A + i * lda + k));
            _mm256_mask_storeu_epi16(out + i * ldo + k, m, h);
        }
}

// out[p*W + j] = pair (V[2p][j], V[2p+1][j]) for 2p < kc, j < cols: two rows of an N-contiguous matrix
// interleaved into the 32-bit units vdpbf16ps pairs along K; a missing odd row and columns >= cols are zero.
template <int NV>
static inline void pack_row_pairs(const uint16_t *src, int64_t ld, int64_t kc, int64_t cols, float *out) {
    constexpr int W = NV * 16;
    for (int64_t p = 0; 2 * p < kc; ++p) {
        const uint16_t *r0 = src + 2 * p * ld, *r1 = r0 + ld;
        bool odd = 2 * p + 1 >= kc;
        for (int h = 0; h < NV; ++h) {
            __mmask16 m = first_n(clamp64(cols - h * 16, 0, 16));  // masked loads do not touch masked-off memory
            __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0 + h * 16));
            __m512i hi = odd ? _mm512_setzero_si512()
                             : _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1 + h * 16)), 16);
            _mm512_storeu_si512(out + p * W + h * 16, _mm512_or_si512(lo, hi));
        }
    }
}

// C += P V with bf16 P (pairs along K contiguous in its rows) and bf16 V: per KC x W block of V one pair
// panel, which every row strip of P then passes over (the NT pair kernel, B = the panel).
static inline void nn_acc_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *P, int64_t ldp, const uint16_t *V,
                               int64_t ldv, float *C, int64_t ldc) {
    constexpr int W = kNV * 16;
    constexpr int64_t KC = 2 * kKC;
    float *panel = static_cast<float *>(scratch(0, size_t(KC / 2 * W) * sizeof(float)));
    for (int64_t pc = 0; pc < K; pc += KC) {
        int64_t kc = min64(KC, K - pc);
        for (int64_t j = 0; j < N; j += W) {
            int64_t ncols = min64(W, N - j);
            pack_row_pairs<kNV>(V + pc * ldv + j, ldv, kc, ncols, panel);
            for_strips<kMR>(M, [&](auto rows, int64_t i) {
                bf16_outer_kernel<decltype(rows)::value, kNV>(kc, P + i * ldp + pc, ldp, panel, C + i * ldc + j, ldc, 1.0f,
                                                              true, ncols);
            });
        }
    }
}

#endif  // RFK_SIMD_BF16

}  // namespace simd_detail

/** True when the *_as_bf16 GEMMs below round their float operand to bf16 (a CPU with AVX512_BF16);
 *  otherwise they are the exact f32 GEMMs. */
constexpr bool kTileProductsInBf16 =
#if defined(RFK_SIMD_BF16)
    true;
#else
    false;
#endif
/** Rows from which gemm_nn_acc_f32_as_bf16 takes the bf16 unit (below: V's pair packing costs more). */
constexpr int64_t kBf16NnMinRows = 8;

// C (+)= alpha A B^T with float A rounded to bf16 (FlashAttention's trade, see round_to_bf16); exactly
// gemm_nt_f32_bf16 without AVX512_BF16.
static inline void gemm_nt_f32_as_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                       const uint16_t *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_f32_as_bf16(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
#if defined(RFK_SIMD_AMX)
    if (simd_detail::amx_gemm_nt_bf16(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate)) return;  // rounds A as it packs
#endif
#if defined(RFK_SIMD_BF16)
    if (M > 0 && K > 0) {
        int64_t ld = simd_detail::padded_ld(K);
        uint16_t *a16 = static_cast<uint16_t *>(simd_detail::scratch(3, size_t(M * ld) * sizeof(uint16_t)));
        simd_detail::round_to_bf16(M, K, A, lda, a16, ld);
        gemm_nt_bf16(M, N, K, alpha, a16, ld, B, ldb, C, ldc, accumulate);
        return;
    }
#endif
    gemm_nt_f32_bf16(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
}

// C += P V with float P rounded to bf16 when the bf16 unit pays (AVX512_BF16, kBf16NnMinRows rows or more: V is
// packed into pair panels per call); otherwise exactly gemm_nn_acc_f32_bf16.
static inline void gemm_nn_acc_f32_as_bf16(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp,
                                           const uint16_t *V, int64_t ldv, float *C, int64_t ldc) {
#if defined(RFK_SIMD_AMX)
    if (simd_detail::amx_gemm_nn_acc_f32_as_bf16(M, N, K, P, ldp, V, ldv, C, ldc)) return;
#endif
#if defined(RFK_SIMD_BF16)
    if (M >= kBf16NnMinRows && N > 0 && K > 0) {
        int64_t ld = simd_detail::padded_ld(K);
        uint16_t *p16 = static_cast<uint16_t *>(simd_detail::scratch(3, size_t(M * ld) * sizeof(uint16_t)));
        simd_detail::round_to_bf16(M, K, P, ldp, p16, ld);
        simd_detail::nn_acc_bf16(M, N, K, p16, ld, V, ldv, C, ldc);
        return;
    }
#endif
    gemm_nn_acc_f32_bf16(M, N, K, P, ldp, V, ldv, C, ldc);
}

// gemm_nn_acc_f32_as_bf16 with V an input of the generated kernel (see gemm_nt_bf16_input_b).
static inline void gemm_nn_acc_f32_as_bf16_input_v(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp,
                                                   const uint16_t *V, int64_t ldv, float *C, int64_t ldc) {
#if defined(RFK_SIMD_AMX)
    if (simd_detail::amx_gemm_nn_acc_f32_as_bf16(M, N, K, P, ldp, V, ldv, C, ldc, true)) return;
#endif
    gemm_nn_acc_f32_as_bf16(M, N, K, P, ldp, V, ldv, C, ldc);
}

namespace simd_detail {
/** dst[c][r] = src[r][c] for r < rows, c < cols, in 16 × 16 blocks (each block's source rows and
 *  destination rows stay in L1 while it is copied). */
static inline void transpose_f32(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst, int64_t ldd) {
    constexpr int64_t B = 16;
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B) {
            int64_t r1 = min64(rows, r0 + B), c1 = min64(cols, c0 + B);
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}
/** Aᵀ for the C += Aᵀ·B GEMMs below: A is K × M (rows of A are the sum's terms), Aᵀ in scratch slot 6. */
static inline const float *transposed_operand(int64_t M, int64_t K, const float *A, int64_t lda, int64_t &ld) {
    ld = K;
    float *t = static_cast<float *>(scratch(6, size_t(M * K > 0 ? M * K : 1) * sizeof(float)));
    transpose_f32(K, M, A, lda, t, ld);
    return t;
}
}  // namespace simd_detail

// C += Aᵀ B with A stored K × M (a row-reduced member: the score tile's rows are the sum's terms, its
// columns C's rows). The transposed copy costs M·K moves against the GEMM's M·N·K multiply-adds.
static inline void gemm_tn_acc_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                                   float *C, int64_t ldc) {
    int64_t ld;
    const float *t = simd_detail::transposed_operand(M, K, A, lda, ld);
    gemm_nn_acc_f32(M, N, K, t, ld, B, ldb, C, ldc);
}
static inline void gemm_tn_acc_f32_bf16(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const uint16_t *B,
                                        int64_t ldb, float *C, int64_t ldc) {
    int64_t ld;
    const float *t = simd_detail::transposed_operand(M, K, A, lda, ld);
    gemm_nn_acc_f32_bf16(M, N, K, t, ld, B, ldb, C, ldc);
}
static inline void gemm_tn_acc_f32_as_bf16(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const uint16_t *B,
                                           int64_t ldb, float *C, int64_t ldc) {
    int64_t ld;
    const float *t = simd_detail::transposed_operand(M, K, A, lda, ld);
    gemm_nn_acc_f32_as_bf16(M, N, K, t, ld, B, ldb, C, ldc);
}

}  // namespace rfk

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // REDFUSE_SIMD_BF16_H
