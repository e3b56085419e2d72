/** \file redfuse_simd_bf16.h
 * Hot-loop primitives for generated CPU kernels, fifth of seven texts: float tiles on the bf16 unit
 * (FlashAttention's trade: P, X·g or dS rounded to bf16 and multiplied with vdpbf16ps). Pasted after
 * redfuse_simd_gemm.h, whose pair kernels it drives, redfuse_simd_gemm_nn.h and redfuse_simd_int8.h; it undefines their RFK_UNROLL and
 * RFK_KERNEL.
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

// C[0..MR)[0..ncols) += P V for a few rows of bf16 P (pairs along K, element K zero when K is odd) and V
// read where it lies, H halves of 32 columns per call: per pair of V rows, vpunpcklwd / vpunpckhwd
// interleave the two rows into the units vdpbf16ps pairs along K — no packed panel, whose copy a few rows
// cannot repay. The unpacks work within 128-bit lanes, so accumulator 2h + u of half h holds columns
// 32h + 8t + 4u + 0..3 in lane t; permutex2var puts them back in order at the store.
// With `ahead` set, each step also asks for the same columns of the two rows K rows on (see nn_acc_bf16_few_rows).
template <int MR, int H>
RFK_KERNEL static void bf16_pair_rows_kernel(int64_t K, const uint16_t *p, int64_t ldp, const uint16_t *v, int64_t ldv,
                                             float *c, int64_t ldc, int64_t ncols, bool ahead) {
    __m512 acc[MR][2 * H];
    RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int q = 0; q < 2 * H; ++q) acc[i][q] = _mm512_setzero_ps();
    __mmask32 mask[H];
    RFK_UNROLL for (int h = 0; h < H; ++h) mask[h] = first_n16(clamp64(ncols - 32 * h, 0, 32));
    auto step = [&](int64_t k, bool odd) {
        const uint16_t *r0 = v + k * ldv, *r1 = r0 + ldv;
        if (ahead)
            RFK_UNROLL for (int h = 0; h < H; ++h) {
                prefetch_l2_past(r0, (K * ldv + 32 * h) * int64_t(sizeof(uint16_t)));
                prefetch_l2_past(r1, (K * ldv + 32 * h) * int64_t(sizeof(uint16_t)));
            }
        __m512bh b[2 * H];
        RFK_UNROLL for (int h = 0; h < H; ++h) {
            __m512i x0 = _mm512_maskz_loadu_epi16(mask[h], r0 + 32 * h);
            __m512i x1 = odd ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(mask[h], r1 + 32 * h);
            b[2 * h] = (__m512bh)_mm512_unpacklo_epi16(x0, x1);
            b[2 * h + 1] = (__m512bh)_mm512_unpackhi_epi16(x0, x1);
        }
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            int32_t pair;
            std::memcpy(&pair, p + i * ldp + k, sizeof(pair));
            __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
            RFK_UNROLL for (int q = 0; q < 2 * H; ++q) acc[i][q] = _mm512_dpbf16_ps(acc[i][q], a, b[q]);
        }
    };
    int64_t k = 0;
    for (; k + 2 <= K; k += 2) step(k, false);
    if (k < K) step(k, true);
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    RFK_UNROLL for (int i = 0; i < MR; ++i) {
        vf row[2 * H];
        RFK_UNROLL for (int h = 0; h < H; ++h) {
            row[2 * h] = _mm512_permutex2var_ps(acc[i][2 * h], first, acc[i][2 * h + 1]);
            row[2 * h + 1] = _mm512_permutex2var_ps(acc[i][2 * h], second, acc[i][2 * h + 1]);
        }
        RFK_UNROLL for (int h = 0; h < H; ++h) store_block_row<2>(c + i * ldc + 32 * h, row + 2 * h, 1.0f, true, ncols - 32 * h);
    }
}

// C += P V for bf16 P with fewer rows than kBf16NnMinRows. Each strip sweeps the rows of V in order over
// blocks of up to 128 columns (the 256 bytes of a bf16 row of D = 128): a block of 64 columns read 128 of
// every 256 bytes, then the other 128 on the next block, and the hardware prefetchers, which follow whole
// rows, left the second block and the next tile to wait on memory (decode GQA, AMD Zen 4: as slow as the
// f32 products it replaced, where a sequential sweep of V was 1.4x faster). Strips are as tall as 16
// accumulators allow: 2 rows at 128 columns, 4 at 64, 8 at 32. Few rows stream V once from memory, and a
// tile loop's next call reads the rows that follow this call's (decode's next key tile), so the first
// strip asks for the rows K on as it reads each pair, one line per line: the stream runs on into the next
// tile without a burst of prefetches at its start (a prefetch past V's end is dropped, never faults).
// Decode GQA B = 4, Hq = 32, Hkv = 8, N = 8192, D = 128, emitted kernels, AMD Zen 4, 2 threads, medians of
// 10 alternated runs: 64-column blocks 6.85 ms (f32 products 6.99), 128-column sweeps 5.91, with the
// prefetch 5.78, and the dot form's prefetch into the next tile too (nt_gemm) 5.42.
// More than 2 rows take 32-column blocks in strips of 8 rows instead: a 128-column strip holds only 2 rows, so
// 8 rows re-read and re-interleave each pair of V rows 4 times (8 unpacks per 16 vdpbf16ps), 32 columns once
// (2 per 16); each block's first strip asks for its own columns of the next tile, so the stream still runs
// on. Decode GQA bf16 (B = 4, Hkv = 8, N = 8192, D = 128, emitted kernels, AMD Zen 4, 2 threads): Hq = 64
// 6.7 -> 6.2 ms, Hq = 128 10.4 -> 9.5 ms, Hq = 32 even (4.7-5.2 both).
template <int H>
static inline void nn_acc_bf16_few_rows_h(int64_t M, int64_t N, int64_t K, const uint16_t *P, int64_t ldp, const uint16_t *V,
                                          int64_t ldv, float *C, int64_t ldc) {
    constexpr int R = H >= 3 ? 2 : H == 2 ? 4 : 8;  // 16 accumulators
    for (int64_t j = 0; j < N; j += 32 * H)
        for_strips<R>(M, [&](auto rows, int64_t i) {
            bf16_pair_rows_kernel<decltype(rows)::value, H>(K, P + i * ldp, ldp, V + j, ldv, C + i * ldc + j, ldc,
                                                            min64(32 * H, N - j), i == 0);
        });
}
static inline void nn_acc_bf16_few_rows(int64_t M, int64_t N, int64_t K, const uint16_t *P, int64_t ldp, const uint16_t *V,
                                        int64_t ldv, float *C, int64_t ldc) {
    if (M > 2 || N <= 32)
        nn_acc_bf16_few_rows_h<1>(M, N, K, P, ldp, V, ldv, C, ldc);
    else if (N > 96)
        nn_acc_bf16_few_rows_h<4>(M, N, K, P, ldp, V, ldv, C, ldc);
    else if (N > 64)
        nn_acc_bf16_few_rows_h<3>(M, N, K, P, ldp, V, ldv, C, ldc);
    else
        nn_acc_bf16_few_rows_h<2>(M, N, K, P, ldp, V, ldv, C, ldc);
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
/** Rows from which gemm_nn_acc_f32_as_bf16 packs V into pair panels (below, few rows could not repay the
 *  copy: pairs of V rows are interleaved in registers instead, nn_acc_bf16_few_rows). Decode bf16 with 8 or
 *  16 query heads per KV head (B = 4, Hkv = 8, N = 8192, D = 128, AMD Zen 4, 2 threads, emitted kernel,
 *  medians of 4 alternated runs): Hq = 64 11.6 -> 8.9 ms with 8 rows in register pairs instead of packed,
 *  Hq = 128 14.1 -> 11.9 at 16 rows (with the dot form's QK^T too, kPackMinM: 7.0 and 10.9). */
constexpr int64_t kBf16NnMinRows = 17;

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

// C += P V with float P rounded to bf16 on a CPU with AVX512_BF16 (kBf16NnMinRows rows or more: V packed into
// pair panels per call; fewer: pairs of V rows interleaved in registers); otherwise exactly gemm_nn_acc_f32_bf16.
static inline void gemm_nn_acc_f32_as_bf16(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp,
                                           const uint16_t *V, int64_t ldv, float *C, int64_t ldc) {
#if defined(RFK_SIMD_AMX)
    if (simd_detail::amx_gemm_nn_acc_f32_as_bf16(M, N, K, P, ldp, V, ldv, C, ldc)) return;
#endif
#if defined(RFK_SIMD_BF16)
    if (M > 0 && N > 0 && K > 0) {
        int64_t ld = simd_detail::padded_ld(K);
        uint16_t *p16 = static_cast<uint16_t *>(simd_detail::scratch(3, size_t(M * ld) * sizeof(uint16_t)));
        simd_detail::round_to_bf16(M, K, P, ldp, p16, ld);
        if (M >= kBf16NnMinRows) {
            simd_detail::nn_acc_bf16(M, N, K, p16, ld, V, ldv, C, ldc);
        } else {
            if (K % 2 != 0)
                for (int64_t i = 0; i < M; ++i) p16[i * ld + K] = 0;  // the last pair's missing term: 0 x 0
            simd_detail::nn_acc_bf16_few_rows(M, N, K, p16, ld, V, ldv, C, ldc);
        }
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
#if defined(RFK_SIMD_VECTOR) && !defined(RFK_SIMD_BF16)
    // f32 products (no bf16 unit): gemm_nn_acc_f32_bf16's nn_acc with V's widened panels kept.
    if (simd_detail::nn_kept_panels(M, N, K, P, ldp, V, ldv, C, ldc)) return;
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

#undef RFK_UNROLL
#undef RFK_KERNEL
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // REDFUSE_SIMD_BF16_H
