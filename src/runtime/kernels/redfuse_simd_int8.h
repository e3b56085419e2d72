/** \file redfuse_simd_int8.h
 * Hot-loop primitives for generated CPU kernels, fourth of seven texts: the int8 x int8 -> int32 tile GEMM
 * (vpdpbusd with AVX512_VNNI: the dot, outer-product and B-in-place forms; vpmaddwd on AVX2). Pasted after
 * redfuse_simd_gemm.h and redfuse_simd_gemm_nn.h: it shares the former's blocking, scratch, packing and
 * B-in-place choice, and uses its RFK_UNROLL and RFK_KERNEL (redfuse_simd_bf16.h, next, undefines them).
 */
#ifndef REDFUSE_SIMD_INT8_H
#define REDFUSE_SIMD_INT8_H

#ifndef REDFUSE_SIMD_GEMM_H
#error "redfuse_simd_int8.h is pasted after redfuse_simd_gemm.h (its blocking and scratch)"
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

#if defined(RFK_SIMD_VECTOR)
// ---------------------------------------------------------------------------------------------------
// int8 dot tiles.
// ---------------------------------------------------------------------------------------------------
#if defined(RFK_SIMD_VNNI)
// acc += u8 x s8 in groups of four. GCC 12 spills accumulators around the intrinsic (its tied operand); the
// asm states the tie directly and keeps all of them in registers.
static inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, u8, s8);
#endif
}

// vpdpbusd multiplies u8 x s8: B + 128 (a sign-bit flip of each vector of B as it is loaded) is unsigned and
// A stays signed, so sum_k (B[j][k] + 128) A[i][k] = C[i][j] + 128 sum_k A[i][k]; the second term, `shift[i]`
// per row of A (a_shifts, computed once per call), is subtracted at the store. Shifting B rather than A
// costs a vector xor per load of B but needs no sum over the rows of B: with A shifted, 128 sum_k B[j][k] took
// 4 more vpdpbusd per step on the first strip over each group of B rows (1.25x its work; 24% of the samples
// against 20% for each other strip at M = 16, N = K = 4096, AMD Zen 4). Wrap-around int32 arithmetic makes
// the result exact whenever the true result fits in int32. Each strip also prefetches into L2 the `npf` rows
// `pf` of B that the next group of columns reads (dot_prefetch).
template <int MR>
RFK_KERNEL static void s8_dot_kernel(int64_t K, const int8_t *a, int64_t lda, const int8_t *const *b, int32_t *c,
                                     int64_t ldc, bool add, int64_t ncols, const int32_t *shift, const int8_t *const *pf,
                                     int npf) {
    __m512i acc[MR][4];
    const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
    RFK_UNROLL for (int j = 0; j < 4; ++j) RFK_UNROLL for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_setzero_si512();
    const int8_t *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3];
    // A masked-off byte of B becomes 0x80 and meets A's zero.
    auto step = [&](int64_t k, __mmask64 m) {
        __m512i v0 = in_register(_mm512_xor_si512(_mm512_maskz_loadu_epi8(m, b0 + k), flip));
        __m512i v1 = in_register(_mm512_xor_si512(_mm512_maskz_loadu_epi8(m, b1 + k), flip));
        __m512i v2 = in_register(_mm512_xor_si512(_mm512_maskz_loadu_epi8(m, b2 + k), flip));
        __m512i v3 = in_register(_mm512_xor_si512(_mm512_maskz_loadu_epi8(m, b3 + k), flip));
        for (int r = 0; r < npf; ++r) _mm_prefetch(reinterpret_cast<const char *>(pf[r] + k), _MM_HINT_T1);
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            __m512i av = _mm512_maskz_loadu_epi8(m, a + i * lda + k);
            acc[i][0] = dpbusd(acc[i][0], v0, av);
            acc[i][1] = dpbusd(acc[i][1], v1, av);
            acc[i][2] = dpbusd(acc[i][2], v2, av);
            acc[i][3] = dpbusd(acc[i][3], v3, av);
        }
    };
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) step(k, ~__mmask64(0));
    if (k < K) step(k, (__mmask64(1) << (K - k)) - 1);
    RFK_UNROLL for (int i = 0; i < MR; ++i) {
        __m128i v = _mm_sub_epi32(vsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), _mm_set1_epi32(shift[i]));
        if (add) v = _mm_add_epi32(v, load4_n(c + i * ldc, ncols));
        store4_n(c + i * ldc, v, ncols);
    }
}

// shift[i] = 128 * sum_k A[i][k] (vpdpbusd of 0x80 bytes), for the M rows of A, in scratch slot 1 (slot 2 may
// hold the caller's C).
static inline int32_t *a_shifts(int64_t M, int64_t K, const int8_t *A, int64_t lda) {
    int32_t *shift = static_cast<int32_t *>(scratch(1, size_t(M > 0 ? M : 1) * sizeof(int32_t)));
    const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
    for (int64_t i = 0; i < M; ++i) {
        __m512i s = _mm512_setzero_si512();
        for (int64_t k = 0; k < K; k += 64) {
            __mmask64 m = K - k >= 64 ? ~__mmask64(0) : (__mmask64(1) << (K - k)) - 1;
            s = dpbusd(s, flip, _mm512_maskz_loadu_epi8(m, A + i * lda + k));
        }
        shift[i] = _mm512_reduce_add_epi32(s);
    }
    return shift;
}

// Outer-product form for many rows (the weight GEMM of quant->GEMM): B^T panels of quads (4 consecutive k
// of one column in a 32-bit lane), each row of A broadcast one quad at a time from a copy shifted to
// unsigned (A ^ 0x80 = A + 128), and 128 * sum_k B[j][k] per column (vpdpbusd of 0x80 bytes over the
// panel) subtracted at the store. Against the dot form it reads A from L1-sized strips once per panel
// instead of once per 4 columns of B, and needs no horizontal sums.
// C[0..MR)[0..ncols) (+)= the dot products of MR rows of shifted A (quads at a + i*lda) with a panel of
// nq quads, minus the panel's shift correction `bias`.
template <int MR>
RFK_KERNEL static void s8_outer_kernel(int64_t nq, const uint8_t *a, int64_t lda, const int32_t *b, const int32_t *bias,
                                       int32_t *c, int64_t ldc, bool add, int64_t ncols) {
    __m512i acc[MR][2];
    RFK_UNROLL for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    for (int64_t q = 0; q < nq; ++q) {
        __m512i b0 = in_register(_mm512_loadu_si512(b + q * 32)), b1 = in_register(_mm512_loadu_si512(b + q * 32 + 16));
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            int32_t quad;
            std::memcpy(&quad, a + i * lda + 4 * q, 4);
            __m512i av = _mm512_set1_epi32(quad);
            acc[i][0] = dpbusd(acc[i][0], av, b0);
            acc[i][1] = dpbusd(acc[i][1], av, b1);
        }
    }
    RFK_UNROLL for (int i = 0; i < MR; ++i)
        for (int h = 0; h < 2; ++h) {
            __mmask16 m = first_n(clamp64(ncols - 16 * h, 0, 16));
            if (!m) break;
            __m512i v = _mm512_sub_epi32(acc[i][h], _mm512_loadu_si512(bias + 16 * h));
            if (add) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, c + i * ldc + 16 * h));
            _mm512_mask_storeu_epi32(c + i * ldc + 16 * h, m, v);
        }
}

// A ^ 0x80 (A + 128 as unsigned bytes), M rows of K, in scratch slot 1 (slot 2 may hold the caller's C), rows
// ald bytes apart: K rounded up to 64 plus 64, as rows of a whole number of pages would put the same k of
// every row of a strip into one L1 set. The bytes from K to the next multiple of 64 are 0x80 (zero shifted):
// the outer kernel's last quad reads them, against B's zero padding.
static inline uint8_t *shifted_rows(int64_t M, int64_t K, const int8_t *A, int64_t lda, int64_t &ald) {
    ald = (K + 63) / 64 * 64 + 64;
    uint8_t *a8 = static_cast<uint8_t *>(scratch(1, size_t(M * ald)));
    const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; k += 64) {
            __mmask64 m = K - k >= 64 ? ~__mmask64(0) : (__mmask64(1) << (K - k)) - 1;
            _mm512_storeu_si512(a8 + i * ald + k, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, A + i * lda + k), flip));
        }
    return a8;
}

// C (+)= A B^T through s8_outer_kernel: K in blocks of 4096 bytes (the panel, 1024 quads x 32 columns, and a
// 128-row block of A share L2, as the bf16 pair blocks), per block A shifted into a copy padded to whole
// quads, then per 32 columns of B a panel, its correction, and the strips of A over it.
static inline void s8_nt_packed(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B, int64_t ldb,
                                int32_t *C, int64_t ldc, bool accumulate) {
    constexpr int64_t KC = 4096, W = 32;
    const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
    int32_t *panel = static_cast<int32_t *>(scratch(0, size_t(min64(K, KC) / 4 + 1) * W * sizeof(int32_t)));
    alignas(64) int32_t bias[W];
    for (int64_t pc = 0; pc < K; pc += KC) {
        int64_t kc = min64(KC, K - pc), nq = (kc + 3) / 4, ald = 0;
        bool add = accumulate || pc > 0;
        for (int64_t ic = 0; ic < M; ic += kMC) {
            int64_t mc = min64(kMC, M - ic);
            const uint8_t *a8 = shifted_rows(mc, kc, A + ic * lda + pc, lda, ald);
            for (int64_t j = 0; j < N; j += W) {
                int64_t ncols = min64(W, N - j);
                pack_units<2>(reinterpret_cast<const uint8_t *>(B + j * ldb + pc), ldb, ncols, kc, reinterpret_cast<float *>(panel));
                __m512i c0 = _mm512_setzero_si512(), c1 = _mm512_setzero_si512();
                for (int64_t q = 0; q < nq; ++q) {
                    c0 = dpbusd(c0, flip, _mm512_loadu_si512(panel + q * W));
                    c1 = dpbusd(c1, flip, _mm512_loadu_si512(panel + q * W + 16));
                }
                _mm512_store_si512(bias, c0);
                _mm512_store_si512(bias + 16, c1);
                for_strips<kMR>(mc, [&](auto rows, int64_t i) {
                    s8_outer_kernel<decltype(rows)::value>(nq, a8 + i * ald, ald, panel, bias, C + (ic + i) * ldc + j, ldc, add, ncols);
                });
            }
        }
    }
}

// Where the B-in-place form puts a row of exact int32 results (its first NR lanes, `cols`): into int32 C,
// added to it or not (Int32Rows), or, when the call's K is one block so that the lanes are whole sums,
// stored into float C as gemm_nt_s8_to_f32's conversion would, c = alpha * float(v) (FloatRows: float(v)
// rounds to nearest like the scalar conversion). Storing float C from the kernel spares a chain's row
// block the int32 block's round trip (2 MiB at 128 x 4096); adding to float C there was slower than that
// round trip (its loads of C, 2 MiB from L3, stall the kernel's stores), so FloatRows only stores.
struct Int32Rows {
    int32_t *c;
    int64_t ldc;
    bool add;
    Int32Rows at(int64_t i, int64_t j, bool added) const { return {c + i * ldc + j, ldc, added}; }
    void put(int64_t i, __mmask16 cols, __m512i v) const {
        if (add) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(cols, c + i * ldc));
        _mm512_mask_storeu_epi32(c + i * ldc, cols, v);
    }
};
struct FloatRows {
    float *c;
    int64_t ldc;
    float alpha;
    FloatRows at(int64_t i, int64_t j, bool) const { return {c + i * ldc + j, ldc, alpha}; }
    void put(int64_t i, __mmask16 cols, __m512i v) const {
        _mm512_mask_storeu_ps(c + i * ldc, cols, _mm512_mul_ps(_mm512_set1_ps(alpha), _mm512_cvtepi32_ps(v)));
    }
};

// B in place for int8 (as nt_b_in_place for bf16): A's panels hold quads of A as they are (signed), each
// step broadcasts one quad of each of NR B rows shifted to unsigned (B ^ 0x80 = B + 128, a vector xor after
// the broadcast from memory: the scalar xor and a broadcast from a general register cost 1.5x at M = 16), and
// 128 * sum_k A[i][k] (`shift`, per row of the panel) is subtracted at the store. Shifting B rather than A
// puts the correction on the panel, computed once as it is packed, instead of on every group of B rows,
// whose first reads from memory would then stall outside the kernel (12% of M = N = K = 4096, AMD Zen 4).
// A short last quad of B is read through a mask; its missing bytes become 0x80 and meet A's zero padding.
template <int H, int NR, typename Rows>
RFK_KERNEL static void s8_b_in_place_kernel(int64_t kc, const int32_t *apanel, const int8_t *b, int64_t ldb,
                                            const int32_t *shift, Rows out, int64_t rows) {
    constexpr int R = 16 * H;
    const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
    __m512i acc[NR][H];
    RFK_UNROLL for (int j = 0; j < NR; ++j) RFK_UNROLL for (int h = 0; h < H; ++h) acc[j][h] = _mm512_setzero_si512();
    auto step = [&](int64_t q, auto quad_of) {
        __m512i a[H];
        RFK_UNROLL for (int h = 0; h < H; ++h) a[h] = in_register(_mm512_loadu_si512(apanel + q * R + 16 * h));
        RFK_UNROLL for (int j = 0; j < NR; ++j) {
            __m512i bv = _mm512_xor_si512(_mm512_set1_epi32(quad_of(j, q)), flip);
            RFK_UNROLL for (int h = 0; h < H; ++h) acc[j][h] = dpbusd(acc[j][h], bv, a[h]);
        }
    };
    int64_t full = kc / 4;
    for (int64_t q = 0; q < full; ++q)
        step(q, [&](int j, int64_t u) {
            int32_t quad;
            std::memcpy(&quad, b + j * ldb + 4 * u, 4);
            return quad;
        });
    if (kc & 3)
        step(full, [&](int j, int64_t u) {
            return _mm_cvtsi128_si32(_mm_maskz_loadu_epi8(__mmask16((1u << (kc & 3)) - 1u), b + j * ldb + 4 * u));
        });
    vf fl[NR][H];
    RFK_UNROLL for (int j = 0; j < NR; ++j) RFK_UNROLL for (int h = 0; h < H; ++h) fl[j][h] = _mm512_castsi512_ps(acc[j][h]);
    const __mmask16 cols = __mmask16((1u << NR) - 1u);
    store_transposed<NR, H>(fl, rows, [&](vf row, int64_t i) {
        out.put(i, cols, _mm512_sub_epi32(_mm512_castps_si512(row), _mm512_set1_epi32(shift[i])));
    });
}

// The K block of the int8 B-in-place form for a row block of mc rows in panels of R rows: the A panels fill
// at most 1 MiB (L2), and a block is at least 1024 deep.
static inline int64_t s8_b_in_place_kc(int64_t mc, int64_t R) {
    return std::max<int64_t>(1024, (int64_t(1) << 20) / ((mc + R - 1) / R * R) / 4 * 4);
}

// C (+)= A B^T for int8, B in place, A in panels of H halves: row blocks of kBInPlaceMC, K blocks whose A
// panels fill at most 1 MiB; per panel, shift[t] = 128 * sum_k A[t][k] (vpdpbusd of 0x80 bytes over the
// panel's quads). `out` is where the results go (Int32Rows; FloatRows only when K is one block and C is not
// added to).
template <int H, typename Rows>
static inline void s8_nt_b_in_place(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B,
                                    int64_t ldb, Rows out, bool accumulate) {
    constexpr int R = 16 * H, NR = kBInPlaceCols;
    const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
    for (int64_t ic = 0; ic < M; ic += kBInPlaceMC) {
        int64_t mc = min64(kBInPlaceMC, M - ic), panels = (mc + R - 1) / R;
        int64_t KC = min64(K, s8_b_in_place_kc(mc, R));
        int32_t *apack = static_cast<int32_t *>(scratch(0, size_t(panels * ((KC + 3) / 4) * R) * sizeof(int32_t)));
        alignas(64) int32_t shift[kBInPlaceMC];
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = min64(KC, K - pc), nq = (kc + 3) / 4;
            bool add = accumulate || pc > 0;
            for (int64_t q = 0; q < panels; ++q) {
                int32_t *panel = apack + q * nq * R;
                pack_units<H>(reinterpret_cast<const uint8_t *>(A + (ic + q * R) * lda + pc), lda, min64(R, mc - q * R), kc,
                              reinterpret_cast<float *>(panel));
                __m512i s[H];
                RFK_UNROLL for (int h = 0; h < H; ++h) s[h] = _mm512_setzero_si512();
                for (int64_t u = 0; u < nq; ++u)
                    RFK_UNROLL for (int h = 0; h < H; ++h) s[h] = dpbusd(s[h], flip, _mm512_loadu_si512(panel + u * R + 16 * h));
                RFK_UNROLL for (int h = 0; h < H; ++h) _mm512_store_si512(shift + q * R + 16 * h, s[h]);
            }
            for (int64_t j = 0; j < N; j += NR)
                with_rows<NR>(int(min64(NR, N - j)), [&](auto nr) {
                    for (int64_t q = 0; q < panels; ++q)
                        s8_b_in_place_kernel<H, decltype(nr)::value>(kc, apack + q * nq * R, B + j * ldb + pc, ldb,
                                                                     shift + q * R, out.at(ic + q * R, j, add),
                                                                     min64(R, mc - q * R));
                });
        }
    }
}

// Whether gemm_nt_s8s8_s32 would take the B-in-place form with 32-row panels and K in one block, on this
// thread (no column split, no AMX): then every result leaves the kernel as a whole sum.
static inline bool s8_whole_k_in_place(int64_t M, int64_t N, int64_t K) {
    if (splits_columns(M, N, K) || b_in_place_halves(M, N, K) != 2 || K > s8_b_in_place_kc(min64(M, kBInPlaceMC), 32))
        return false;
#if defined(RFK_SIMD_AMX)
    if (amx_takes_s8(M, N, K)) return false;
#endif
    return true;
}

// The int8 dot form's strips of A: one strip of up to 6 rows (24 accumulators) when M <= 6, else strips of
// kDotMR = 4. A strip sweeps K for 4 rows of B, and the next strip reads those rows again from L1: at
// K = 4096 the 4 rows fill 4 of L1's 8 ways and 4 rows of A the other 4, while 6 rows of A would evict B
// before its reuse. Measured on an AMD Zen 4, the whole quant->GEMM chain, N = K = 4096, 2 threads: M = 16
// as 6 + 6 + 4 was 1-3% slower than 4 x 4 (M = 12 as 6 + 6: 3% faster, within noise), while M = 6 in one
// strip instead of 4 + 2 was 6% faster (0.283 -> 0.266 ms median), M = 5 instead of 4 + 1 13% (0.260 -> 0.227):
// a second strip means a second pass over the 4 rows of B.
constexpr int kS8DotMR = 6;

// Calls f(rows, i0, s, strips) for each strip s of the M rows, rows a std::integral_constant.
template <typename F>
static inline void s8_dot_strips(int64_t M, F &&f) {
    if (M <= kS8DotMR) {
        with_rows<kS8DotMR>(int(M), [&](auto r) { f(r, 0, 0, 1); });
        return;
    }
    int64_t strips = (M + kDotMR - 1) / kDotMR;
    for_strips<kDotMR>(M, [&](auto r, int64_t i) { f(r, i, i / kDotMR, strips); });
}

// The rows of B that strip s (of `strips`) prefetches while the group of 4 rows from j runs: the next
// group's 4 rows, spread over the first strips (strip s takes rows s, s + S, ... of S = min(strips, 4)),
// so that the group's 16 KiB (K = 4096) arrive from memory while the current one is in use. Without it the
// first strip of each group waited for memory: M = 16, N = 16384, K = 4096 (64 MiB of B), 2 threads of an
// AMD Zen 4, 4.4 ms without, 3.0 ms with (3.8 ms for the 16-row panels it replaced).
static inline int dot_prefetch(int64_t N, const int8_t *B, int64_t ldb, int64_t s, int64_t strips, int64_t j,
                               const int8_t *(&pf)[4]) {
    int64_t S = min64(strips, 4);
    int n = 0;
    for (int64_t r = s; r < 4 && s < S && j + 4 + r < N; r += S) pf[n++] = B + (j + 4 + r) * ldb;
    return n;
}

#else
// Without VNNI: widen to int16 and vpmaddwd, exact (|a*b| <= 2^14, so a pair sum fits in int32).
template <int MR>
RFK_KERNEL static void s8_dot_kernel_avx2(int64_t K, const int8_t *a, int64_t lda, const int8_t *const *b, int32_t *c,
                                          int64_t ldc, bool add, int64_t ncols) {
    __m256i acc[MR][4];
    RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_si256();
    auto load16 = [](const int8_t *p, int64_t n) {
        alignas(16) int8_t tmp[16] = {};
        if (n < 16) p = static_cast<const int8_t *>(std::memcpy(tmp, p, size_t(n)));
        return in_register(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
    };
    for (int64_t k = 0; k < K; k += 16) {
        int64_t n = min64(16, K - k);
        __m256i v0 = load16(b[0] + k, n), v1 = load16(b[1] + k, n), v2 = load16(b[2] + k, n), v3 = load16(b[3] + k, n);
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            __m256i av = load16(a + i * lda + k, n);
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(av, v0));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(av, v1));
            acc[i][2] = _mm256_add_epi32(acc[i][2], _mm256_madd_epi16(av, v2));
            acc[i][3] = _mm256_add_epi32(acc[i][3], _mm256_madd_epi16(av, v3));
        }
    }
    RFK_UNROLL for (int i = 0; i < MR; ++i) {
        __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[i][0], acc[i][1]), _mm256_hadd_epi32(acc[i][2], acc[i][3]));
        __m128i v = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        if (add) v = _mm_add_epi32(v, load4_n(c + i * ldc, ncols));
        store4_n(c + i * ldc, v, ncols);
    }
}

// B in place without VNNI: the rows of A are the lanes. A's panels hold R = 8H rows as int16 pairs
// (A[r][2p], A[r][2p+1]) in one 32-bit lane; each step broadcasts one pair of each of NR B rows, widened to
// int16 once per K block into an L1-sized buffer, and vpmaddwd adds a[2p]·b[2p] + a[2p+1]·b[2p+1] to each
// lane, exactly (|a·b| <= 2^14). Against the dot form (both operands widened at every load, horizontal sums)
// this issues 2 vector operations per 16 products instead of ~3.5 and reads A from L2 once per NR columns
// (AMD Zen 3, 2 threads, int8 quant->GEMM: bench/results/2026-12-06h-zen3-avx2-full/NOTE.md). Registers:
// NR·H accumulators + H rows of A + a broadcast, of the 16: 6 columns with 16-row panels, 12 with 8-row ones.
template <int H>
constexpr int s16_cols() { return H == 2 ? 6 : 12; }
constexpr int64_t kS16MC = 128;  // rows of A per block

// out[p·R + r] = A[r][2p] | A[r][2p+1] << 16 (int16 halves) for rows [0, rows) of R, pairs [0, (kc+1)/2);
// rows past `rows` and the half past an odd kc are zero.
template <int R>
static inline void s16_pack_pairs(const int8_t *A, int64_t lda, int64_t rows, int64_t kc, int32_t *out) {
    const int64_t np = (kc + 1) / 2;
    std::memset(out, 0, size_t(np * R) * sizeof(int32_t));
    alignas(32) int32_t units[8];
    for (int64_t r = 0; r < rows; ++r) {
        const int8_t *a = A + r * lda;
        int64_t k = 0;
        for (; k + 16 <= kc; k += 16) {
            _mm256_store_si256(reinterpret_cast<__m256i *>(units),
                               _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(a + k))));
            RFK_UNROLL for (int u = 0; u < 8; ++u) out[(k / 2 + u) * R + r] = units[u];
        }
        for (; k < kc; k += 2) {
            uint32_t lo = uint16_t(int16_t(a[k])), hi = k + 1 < kc ? uint16_t(int16_t(a[k + 1])) : 0u;
            out[(k / 2) * R + r] = int32_t(lo | (hi << 16));
        }
    }
}

// Rows [0, nr) of B, columns [0, kc), sign-extended into int16 rows ld16 apart; columns kc..ld16 are zero.
static inline void s16_widen_rows(const int8_t *B, int64_t ldb, int nr, int64_t kc, int16_t *out, int64_t ld16) {
    for (int j = 0; j < nr; ++j) {
        const int8_t *b = B + j * ldb;
        int16_t *o = out + j * ld16;
        int64_t k = 0;
        for (; k + 16 <= kc; k += 16)
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(o + k),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + k))));
        for (; k < kc; ++k) o[k] = b[k];
        for (; k < ld16; ++k) o[k] = 0;
    }
}

// tile[j·R + r] = sum over the np pairs of A's panel row r times B row j (int32, exact products).
// `next` (when not null) holds the npf int8 rows, ldb apart, that the next group widens: each 32 steps,
// which read 64 bytes of each widened row, prefetch one line of each, so the whole next group (kc bytes a
// row) arrives while this panel computes instead of stalling the widening loads.
template <int H, int NR>
RFK_KERNEL static void s16_b_in_place_kernel(int64_t np, const int32_t *apanel, const int16_t *b16, int64_t ld16,
                                             int32_t *tile, const int8_t *next, int64_t ldb, int npf) {
    constexpr int R = 8 * H;
    __m256i acc[NR][H];
    RFK_UNROLL for (int j = 0; j < NR; ++j) RFK_UNROLL for (int h = 0; h < H; ++h) acc[j][h] = _mm256_setzero_si256();
    for (int64_t p0 = 0; p0 < np; p0 += 32) {
        if (next)
            for (int j = 0; j < npf; ++j) _mm_prefetch(reinterpret_cast<const char *>(next + j * ldb + 2 * p0), _MM_HINT_T0);
        const int64_t pe = min64(np, p0 + 32);
        for (int64_t p = p0; p < pe; ++p) {
            __m256i a[H];
            RFK_UNROLL for (int h = 0; h < H; ++h)
                a[h] = in_register(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(apanel + p * R + 8 * h)));
            RFK_UNROLL for (int j = 0; j < NR; ++j) {
                int32_t pair;
                std::memcpy(&pair, b16 + j * ld16 + 2 * p, 4);
                const __m256i bv = _mm256_set1_epi32(pair);
                RFK_UNROLL for (int h = 0; h < H; ++h)
                    acc[j][h] = _mm256_add_epi32(acc[j][h], _mm256_madd_epi16(bv, a[h]));
            }
        }
    }
    RFK_UNROLL for (int j = 0; j < NR; ++j) RFK_UNROLL for (int h = 0; h < H; ++h)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(tile + j * R + 8 * h), acc[j][h]);
}

// C (+)= A B^T for int8 without VNNI, B in place: row blocks of kS16MC, K blocks whose A panels fill at
// most 256 KiB (half of a Zen 3 L2; the widened B rows, NR·kc·2 bytes, stay in L1 or L2 beside them); per K
// block and group of NR B rows, the rows are widened once and every panel runs over them. Scratch slots 0
// (A's panels) and 1 (B's rows); slot 2 may hold the caller's C.
template <int H>
static inline void s16_nt_b_in_place(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B,
                                     int64_t ldb, int32_t *C, int64_t ldc, bool accumulate) {
    constexpr int R = 8 * H, NR = s16_cols<H>();
    for (int64_t ic = 0; ic < M; ic += kS16MC) {
        const int64_t mc = min64(kS16MC, M - ic), panels = (mc + R - 1) / R;
        const int64_t KC = min64(K, std::max<int64_t>(512, (int64_t(256) << 10) / (panels * R * 2) / 16 * 16));
        const int64_t npmax = (KC + 1) / 2, ld16 = 2 * npmax + 16;
        int32_t *apack = static_cast<int32_t *>(scratch(0, size_t(panels * npmax * R) * sizeof(int32_t)));
        int16_t *b16 = static_cast<int16_t *>(scratch(1, size_t(NR * ld16) * sizeof(int16_t)));
        for (int64_t pc = 0; pc < K; pc += KC) {
            const int64_t kc = min64(KC, K - pc), np = (kc + 1) / 2;
            const bool add = accumulate || pc > 0;
            for (int64_t q = 0; q < panels; ++q)
                s16_pack_pairs<R>(A + (ic + q * R) * lda + pc, lda, min64(R, mc - q * R), kc, apack + q * np * R);
            for (int64_t j = 0; j < N; j += NR)
                with_rows<NR>(int(min64(NR, N - j)), [&](auto nr) {
                    constexpr int n = decltype(nr)::value;
                    s16_widen_rows(B + j * ldb + pc, ldb, n, kc, b16, ld16);
                    alignas(32) int32_t tile[n * R];
                    // The last panel prefetches the next group's rows (the earlier ones would lose them
                    // to the A panels streaming through L1).
                    const int npf = int(min64(NR, N - j - NR));
                    const int8_t *next = npf > 0 ? B + (j + NR) * ldb + pc : nullptr;
                    for (int64_t q = 0; q < panels; ++q) {
                        s16_b_in_place_kernel<H, n>(np, apack + q * np * R, b16, ld16, tile,
                                                    q + 1 == panels ? next : nullptr, ldb, npf);
                        const int64_t rows = min64(R, mc - q * R);
                        for (int64_t r = 0; r < rows; ++r) {
                            int32_t *c = C + (ic + q * R + r) * ldc + j;
                            RFK_UNROLL for (int t = 0; t < n; ++t) c[t] = add ? int32_t(uint32_t(c[t]) + uint32_t(tile[t * R + r])) : tile[t * R + r];
                        }
                    }
                });
        }
    }
}
#endif
#endif  // RFK_SIMD_VECTOR

}  // namespace simd_detail

static inline void gemm_nt_s8s8_s32(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B,
                                    int64_t ldb, int32_t *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_s8s8_s32(M, n, K, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
#if defined(RFK_SIMD_AMX)
    if (simd_detail::amx_gemm_nt_s8(M, N, K, A, lda, B, ldb, C, ldc, accumulate)) return;
#endif
#if defined(RFK_SIMD_VECTOR)
    using namespace simd_detail;
#if defined(RFK_SIMD_VNNI)
    // 16-row panels (H = 1) broadcast one quad of B per vpdpbusd and shift it there: 74% of the int8 dot
    // peak on one core of an AMD Zen 4 at M = 16, N = 2048, K = 4096 (B from L3), against 88% for the dot
    // form when it read a shifted copy of A (M = 48: 74 / 84%, M = 80: 77 / 94%; it now shifts B, 3-6% faster
    // end to end at M = 16, N = K = 4096); 32-row panels (H = 2) share each broadcast between two vpdpbusd
    // and stay ahead (M = 64: 95 / 82%).
    int halves = b_in_place_halves(M, N, K);
    if (halves == 2) return s8_nt_b_in_place<2>(M, N, K, A, lda, B, ldb, Int32Rows{C, ldc, false}, accumulate);
    if (halves == 0 && K > 0 && M >= kPackMinM && N >= kPackMinN) {
        s8_nt_packed(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
        return;
    }
    const int32_t *shift = a_shifts(M, K, A, lda);
    for (int64_t j = 0; j < N; j += 4) {
        int64_t ncols = min64(4, N - j);
        const int8_t *rows[4];
        for (int t = 0; t < 4; ++t) rows[t] = B + (j + (t < ncols ? t : 0)) * ldb;
        s8_dot_strips(M, [&](auto mr, int64_t i, int64_t s, int64_t strips) {
            const int8_t *pf[4];
            int npf = dot_prefetch(N, B, ldb, s, strips, j, pf);
            s8_dot_kernel<decltype(mr)::value>(K, A + i * lda, lda, rows, C + i * ldc + j, ldc, accumulate, ncols,
                                               shift + i, pf, npf);
        });
    }
#else
    // 16-row panels from M = 12 (at most a quarter of the lanes idle), 8-row ones from M = 6; fewer rows keep
    // the dot form, which wastes no lanes (and K = 0, which it stores as zeros).
    if (M >= 12 && K > 0) return s16_nt_b_in_place<2>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    if (M >= 6 && K > 0) return s16_nt_b_in_place<1>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    dot_tiles<kDotMR>(M, N, B, ldb, [&](auto mr, int64_t i, int64_t j, const int8_t *const *rows, int64_t ncols) {
        s8_dot_kernel_avx2<decltype(mr)::value>(K, A + i * lda, lda, rows, C + i * ldc + j, ldc, accumulate, ncols);
    });
#endif
#else
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            uint32_t s = 0;  // unsigned: wrap-around instead of undefined overflow, like the SIMD paths
            for (int64_t k = 0; k < K; ++k) s += uint32_t(int32_t(A[i * lda + k]) * int32_t(B[j * ldb + k]));
            C[i * ldc + j] = int32_t(s + (accumulate ? uint32_t(C[i * ldc + j]) : 0u));
        }
#endif
}

// C (+)= alpha * A B^T in float from the exact int32 products (a chain's running state): the products go to a
// scratch block, then are converted by the calling thread. (Converting each column range on the thread that
// computed it, under the column split, was 5-8% slower end to end at M = 16, N = K = 4096 on an AMD Zen 4,
// alternated runs; why was not established.)
static inline void gemm_nt_s8_to_f32(int64_t M, int64_t N, int64_t K, float alpha, const int8_t *A, int64_t lda,
                                     const int8_t *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
#if defined(RFK_SIMD_VNNI)
    // Storing (a chain's first tile, FirstGemmStores.cpp) through the B-in-place form with K in one block:
    // the kernel's store converts (FloatRows). Int8 quant->GEMM M = N = K = 4096 with the pass, AMD Zen 4,
    // alternated: 165.9 -> 163.6 ms (docs/tile-ir.md, "First GEMM tiles stored").
    if (!accumulate && simd_detail::s8_whole_k_in_place(M, N, K)) {
        simd_detail::s8_nt_b_in_place<2>(M, N, K, A, lda, B, ldb, simd_detail::FloatRows{C, ldc, alpha}, false);
        return;
    }
#endif
    int32_t *acc = static_cast<int32_t *>(simd_detail::scratch(2, size_t(M * N) * sizeof(int32_t)));
    gemm_nt_s8s8_s32(M, N, K, A, lda, B, ldb, acc, N, false);
    for (int64_t i = 0; i < M; i++) {
        float *c = C + i * ldc;
        const int32_t *p = acc + i * N;
        if (accumulate)
            for (int64_t j = 0; j < N; j++) c[j] += alpha * float(p[j]);
        else
            for (int64_t j = 0; j < N; j++) c[j] = alpha * float(p[j]);
    }
}

}  // namespace rfk

// RFK_UNROLL and RFK_KERNEL stay defined for redfuse_simd_bf16.h, pasted next, which undefines them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // REDFUSE_SIMD_INT8_H
