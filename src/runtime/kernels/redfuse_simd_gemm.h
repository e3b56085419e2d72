/** \file redfuse_simd_gemm.h
 * Hot-loop primitives for generated CPU kernels, second of seven texts: the f32 and bf16 tile GEMM
 * micro-kernels and the NT GEMMs, written once over the vector vocabulary of redfuse_simd.h and pasted after it (see the
 * order of the seven texts there); the NN GEMMs (P·V) are the next text, redfuse_simd_gemm_nn.h, the int8
 * ones the one after, redfuse_simd_int8.h.
 *
 * Leading dimensions are in elements. Scratch memory (redfuse_simd.h's `scratch`; slot 0: B panels; 1: widened or
 * shifted A; 2: int32 sums; 3: A rounded to bf16; 4, 5: AMX panels and row copies) is per thread and translation unit (a process-wide map, not thread_local) and only grows: up to 512 KiB per thread for large GEMMs (plus
 * up to 128 KiB for bf16 A without AVX512_BF16), 64 KiB or less for attention-sized tiles.
 */
#ifndef REDFUSE_SIMD_GEMM_H
#define REDFUSE_SIMD_GEMM_H

#ifndef REDFUSE_SIMD_H
#error "redfuse_simd_gemm.h is pasted after redfuse_simd.h (its vector vocabulary)"
#endif

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <unordered_map>
#if defined(_OPENMP)
#include <omp.h>
#endif

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (as in redfuse_simd.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__GNUC__)
#define RFK_UNROLL _Pragma("GCC unroll 16")
// Register-blocked kernels stay out of line: inlined into their drivers, GCC 12 has been seen to keep a
// B vector on the stack and reload it for every FMA (40% slower).
#define RFK_KERNEL __attribute__((noinline))
#define RFK_DOT_INLINE __attribute__((always_inline))
#else
#define RFK_DOT_INLINE
#define RFK_UNROLL
#define RFK_KERNEL
#endif

namespace rfk {
namespace simd_detail {

// Column split: a GEMM called outside an active parallel region with gemm_split_threads > 1 (the
// weight GEMM of a chain whose rows fill one row block, RMSNorm→GEMM or a quantized GEMM at M = 16)
// runs column ranges on that many threads: C[:, j0:j1] = A·B[j0:j1, :]ᵀ reads only B's rows j0..j1,
// so the parts are independent, and each thread packs into its own scratch. Ranges are multiples of
// 64 columns; small GEMMs (M·N·K < 2^22) stay on the calling thread.
static inline bool splits_columns(int64_t M, int64_t N, int64_t K) {
#if defined(_OPENMP)
    int threads = gemm_split_threads.load(std::memory_order_relaxed);
    return threads >= 2 && !omp_in_parallel() && N >= 128 && double(M) * double(N) * double(K) >= double(1 << 22);
#else
    (void)M, (void)N, (void)K;
    return false;
#endif
}
template <typename F>
static inline bool split_columns(int64_t M, int64_t N, int64_t K, F &&part) {
#if defined(_OPENMP)
    if (!splits_columns(M, N, K)) return false;
    int64_t parts = std::min<int64_t>(gemm_split_threads.load(std::memory_order_relaxed), N / 64);
    int64_t width = (N + parts - 1) / parts;
    width = (width + 63) / 64 * 64;
#pragma omp parallel for num_threads(static_cast<int>(parts)) schedule(static, 1)
    for (int64_t t = 0; t < parts; t++) {
        int64_t j0 = t * width, n = std::min<int64_t>(N - j0, width);
        if (n > 0) part(j0, n);
    }
    return true;
#else
    (void)M, (void)N, (void)K, (void)part;
    return false;
#endif
}

#if defined(RFK_SIMD_AMX)
// The AMX tile GEMMs (redfuse_simd_amx.h, pasted later), which the public GEMMs try first: each returns
// false, having done nothing, when the shape is too small for tiles or Linux denies the tile state.
template <typename TA>
static inline bool amx_gemm_nt_bf16(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const uint16_t *B,
                                    int64_t ldb, float *C, int64_t ldc, bool accumulate, bool b_input = false);
static inline bool amx_gemm_nt_s8(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B, int64_t ldb,
                                  int32_t *C, int64_t ldc, bool accumulate);
static inline bool amx_takes_s8(int64_t M, int64_t N, int64_t K);  // whether amx_gemm_nt_s8 runs this shape
static inline bool amx_gemm_nn_acc_f32_as_bf16(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const uint16_t *V,
                                               int64_t ldv, float *C, int64_t ldc, bool v_input = false);
#endif

#if defined(RFK_SIMD_VECTOR)

// ---------------------------------------------------------------------------------------------------
// Outer-product GEMM core: an MR x (NV*VW) block of C in registers; per k one broadcast of A[i][k] per row
// times NV vectors of a row of B laid out with the N dimension contiguous (packed B^T panel, or V rows).
// ---------------------------------------------------------------------------------------------------
template <int NV>
static inline void store_block_row(float *c, const vf *acc, float alpha, bool add, int64_t ncols) {
    RFK_UNROLL for (int v = 0; v < NV; ++v) {
        int64_t n = clamp64(ncols - v * VW, 0, VW);
        if (n == 0) break;
        vf val = vmul(vset1(alpha), acc[v]);
        if (n == VW)
            vstore(c + v * VW, add ? vadd(val, vload(c + v * VW)) : val);
        else
            vstore_n(c + v * VW, add ? vadd(val, vload_n(c + v * VW, n)) : val, n);
    }
}

// C[0..MR)[0..ncols) (+)= alpha * A[0..MR)[0..kc) * B, B row k at b + k*ldb, NV*VW elements (zero-padded
// past ncols when packed); bf16 B is widened as it is loaded.
template <int MR, int NV, typename TB>
RFK_KERNEL static void outer_kernel(int64_t kc, const float *a, int64_t lda, const TB *b, int64_t ldb, float *c,
                                    int64_t ldc, float alpha, bool add, int64_t ncols) {
    static_assert(NV >= 1 && NV <= 4, "B rows are named registers, not an array: GCC may leave an array in memory");
    vf acc[MR][NV];
    RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = vzero();
    for (int64_t k = 0; k < kc; ++k) {
        const TB *bk = b + k * ldb;
        vf b0 = vload(bk), b1 = NV > 1 ? vload(bk + VW) : b0, b2 = NV > 2 ? vload(bk + 2 * VW) : b0,
           b3 = NV > 3 ? vload(bk + 3 * VW) : b0;
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            vf av = vset1(a[i * lda + k]);
            acc[i][0] = vfma(av, b0, acc[i][0]);
            if constexpr (NV > 1) acc[i][1] = vfma(av, b1, acc[i][1]);
            if constexpr (NV > 2) acc[i][2] = vfma(av, b2, acc[i][2]);
            if constexpr (NV > 3) acc[i][3] = vfma(av, b3, acc[i][3]);
        }
    }
    RFK_UNROLL for (int i = 0; i < MR; ++i) store_block_row<NV>(c + i * ldc, acc[i], alpha, add, ncols);
}

// Packs rows [0, rows) of a K-contiguous matrix (columns [0, kc)) transposed: out[k*W + j], W = NV*VW,
// j >= rows zero. B^T panels for the NT GEMMs; bf16 input is widened on the way.
template <int NV, typename T>
static inline void pack_transposed(const T *src, int64_t ld, int64_t rows, int64_t kc, float *out) {
    constexpr int W = NV * VW;
    for (int h = 0; h < NV; ++h) {
        int64_t valid = clamp64(rows - h * VW, 0, VW);
        for (int64_t k0 = 0; k0 < kc; k0 += VW) {
            int64_t kk = min64(VW, kc - k0);
            vf r[VW];
            for (int t = 0; t < VW; ++t) {
                const T *p = src + (h * VW + t) * ld + k0;
                r[t] = t >= valid ? vzero() : (kk == VW ? vload(p) : vload_n(p, kk));
            }
            vtranspose(r);
            for (int64_t t = 0; t < kk; ++t) vstore(out + (k0 + t) * W + h * VW, r[t]);
        }
    }
}

// Copies columns [0, cols) of kc rows (N-contiguous) into out[k*W + j], zero-padded (V's last panel).
template <int NV, typename T>
static inline void pack_rows(const T *src, int64_t ld, int64_t kc, int64_t cols, float *out) {
    constexpr int W = NV * VW;
    for (int64_t k = 0; k < kc; ++k)
        RFK_UNROLL for (int v = 0; v < NV; ++v) {
            int64_t n = clamp64(cols - v * VW, 0, VW);
            vstore(out + k * W + v * VW, n == VW ? vload(src + k * ld + v * VW) : (n == 0 ? vzero() : vload_n(src + k * ld + v * VW, n)));
        }
}

static inline void widen_row(const uint16_t *src, int64_t n, float *out) {
    int64_t k = 0;
    for (; k + VW <= n; k += VW) vstore(out + k, vload(src + k));
    if (k < n) vstore_n(out + k, vload_n(src + k, n - k), n - k);
}

// K = 0 leaves nothing to accumulate: C = alpha * 0, or unchanged when accumulating.
static inline void clear_rows(int64_t M, int64_t N, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, size_t(N) * sizeof(float));
}

// Blocking of the outer-product GEMMs: a B panel (KC x W floats) stays in L1 while MR-row strips of A pass
// over it; the packed B block (KC x NC) and an A block (MC x KC) share L2.
#if defined(RFK_SIMD_AVX512)
constexpr int kMR = 8, kNV = 2, kSmallMR = 4, kSmallNV = 4;
#else
constexpr int kMR = 6, kNV = 2, kSmallMR = 3, kSmallNV = 4;
#endif
constexpr int64_t kKC = 256, kNC = 512, kMC = 128;
// Rows of A per dot tile (against 4 rows of B): (rows + 1) * 4 + 1 vector registers of the 32 or 16.
constexpr int kDotMR = VW == 16 ? 4 : 2;
// Packing B pays off once enough rows of A reuse each panel; up to 16 rows the dot form wins. Along a long K
// (a weight GEMM's rows): M = 8, N = K = 4096 bf16, one core: 4.40 ms packed, 2.78 ms dot (M = 16: 5.93,
// 5.54). Along a short one, B streamed once per call (decode's QK^T with 8 or 16 query heads per KV head,
// K = D = 128 over 256-key tiles), the packing is the call's cost: decode bf16 B = 4, Hkv = 8, N = 8192,
// emitted kernel, AMD Zen 4, 2 threads, medians of 4 alternated runs: Hq = 64 11.6 -> 9.2 ms, Hq = 128
// 14.1 -> 12.8 ms (with V's few-row forms below as well: 7.0 and 10.9).
constexpr int64_t kPackMinM = 17, kPackMinN = 16;

// Runs the register blocks over nc columns of B (panels of W, panel_stride elements apart), rows [0, M).
template <int MR, int NV, typename TB>
static inline void outer_block(int64_t M, int64_t nc, int64_t kc, const float *a, int64_t lda, const TB *b,
                               int64_t ldb_k, int64_t panel_stride, float *c, int64_t ldc, float alpha, bool add) {
    constexpr int W = NV * VW;
    for (int64_t j = 0; j < nc; j += W)
        for_even_strips<MR>(M, [&](auto rows, int64_t i) {
            outer_kernel<decltype(rows)::value, NV, TB>(kc, a + i * lda, lda, b + (j / W) * panel_stride, ldb_k,
                                                        c + i * ldc + j, ldc, alpha, add, min64(W, nc - j));
        });
}

#if defined(RFK_SIMD_AVX512)
// out[u*W + j] = 32-bit unit u (bytes 4u .. 4u+3) of row j, for units holding a byte of the first `bytes`
// of each row; bytes past them and rows >= `rows` are zero. The pair panels of the bf16 kernels and the
// quad panels of the int8 ones: the f32 transpose applied to 32-bit units.
template <int NV>
static inline void pack_units(const uint8_t *src, int64_t ld_bytes, int64_t rows, int64_t bytes, float *out) {
    constexpr int W = NV * 16;
    int64_t units = (bytes + 3) / 4;
    for (int h = 0; h < NV; ++h) {
        int64_t valid = clamp64(rows - h * 16, 0, 16);
        for (int64_t u0 = 0; u0 < units; u0 += 16) {
            int64_t n = min64(64, bytes - 4 * u0);
            __mmask64 m = n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1;
            vf r[16];
            for (int t = 0; t < 16; ++t)
                r[t] = t >= valid ? vzero() : _mm512_castsi512_ps(_mm512_maskz_loadu_epi8(m, src + (h * 16 + t) * ld_bytes + 4 * u0));
            vtranspose(r);
            for (int64_t t = 0; t < min64(16, units - u0); ++t) vstore(out + (u0 + t) * W + h * 16, r[t]);
        }
    }
}

// The B-in-place forms (bf16 and int8, below): panels of A of H halves of 16 rows (R = 16H rows, one
// vector of lanes per half), groups of 8 B rows read where they lie. Not 16 rows with H = 1, although that
// would keep 16 accumulators busy too: 16 concurrent row streams and their 16 pointers (spilled to
// vector registers) ran 1.7-2.5x slower than 8 at M = 16 (AMD Zen 4).
constexpr int kBInPlaceCols = 8;
constexpr int64_t kBInPlaceMinK = 512, kBInPlaceMC = 128;
// 0 when B stays packed, else the halves H of A's panels: B in place pays when B is the long side (N >= 2M)
// and K is long enough for the transposed store to vanish; the panel height is the larger one whose lanes
// A's rows fill to within 1/8 (32-row panels at M = 29..32, 16-row ones at M = 15, 16, 48; M = 8 would waste
// half of every FMA and keeps the dot or packed forms).
static inline int b_in_place_halves(int64_t M, int64_t N, int64_t K) {
    if (N < 2 * M || K < kBInPlaceMinK) return 0;
    auto fills = [M](int64_t R) { return 8 * ((M + R - 1) / R * R) <= 9 * M; };
    return fills(32) ? 2 : fills(16) ? 1 : 0;
}

// Transposes a register block C^T (lane t of acc[j][h] is C[16h + t][j]) and hands each of its first `rows`
// rows, whose first NR lanes are valid, to store(row, i).
template <int NR, int H, typename Store>
static inline void store_transposed(const vf (&acc)[NR][H], int64_t rows, Store &&store) {
    for (int h = 0; h < H && h * 16 < rows; ++h) {
        vf r[16];
        RFK_UNROLL for (int t = 0; t < 16; ++t) r[t] = t < NR ? acc[t < NR ? t : 0][h] : vzero();
        vtranspose(r);
        for (int64_t t = 0; t < min64(16, rows - h * 16); ++t) store(r[t], h * 16 + t);
    }
}

#endif

#if defined(RFK_SIMD_BF16)
// ---------------------------------------------------------------------------------------------------
// bf16 x bf16 with vdpbf16ps: each 32-bit lane holds a pair of consecutive k. B^T panels of pairs are the
// f32 transpose applied to 32-bit pair units.
// ---------------------------------------------------------------------------------------------------
static inline __m512bh as_bh(vf v) { return (__m512bh)_mm512_castps_si512(v); }
static inline __mmask32 first_n16(int64_t n) { return __mmask32(n >= 32 ? 0xffffffffu : ((1u << n) - 1u)); }

// out[p*W + j] = pair (B[j][2p], B[j][2p+1]); a missing odd element and rows >= `rows` are zero.
template <int NV>
static inline void pack_pairs(const uint16_t *src, int64_t ld, int64_t rows, int64_t kc, float *out) {
    pack_units<NV>(reinterpret_cast<const uint8_t *>(src), 2 * ld, rows, 2 * kc, out);
}

template <int MR, int NV>
RFK_KERNEL static void bf16_outer_kernel(int64_t kc, const uint16_t *a, int64_t lda, const float *b, float *c,
                                         int64_t ldc, float alpha, bool add, int64_t ncols) {
    static_assert(NV == 2, "one pair of named B registers");
    constexpr int W = NV * 16;
    vf acc[MR][NV];
    RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = vzero();
    // The block of C an accumulating call adds to is requested now, so that its lines arrive during the K loop:
    // accumulated C blocks that left L2 (a row-reduced member's partial sums, 1 MiB per tile of linear +
    // cross-entropy's backward) stalled the store phase (~20% of this kernel's samples there).
    if (add)
        RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int v = 0; v < NV; ++v)
            _mm_prefetch(reinterpret_cast<const char *>(c + i * ldc + 16 * v), _MM_HINT_T0);
    // pair_of(i, p): A[i][2p], A[i][2p+1] as one 32-bit lane; the last k of an odd kc pairs with zero, as
    // its partner in the B panel is zero too.
    auto step = [&](int64_t p, auto pair_of) {
        vf b0 = in_register(vload(b + p * W)), b1 = in_register(vload(b + p * W + 16));
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            __m512bh av = (__m512bh)_mm512_set1_epi32(pair_of(i, p));
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, as_bh(b0));
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, as_bh(b1));
        }
    };
    int64_t full = kc / 2;
    for (int64_t p = 0; p < full; ++p)
        step(p, [&](int i, int64_t q) {
            int32_t pair;
            std::memcpy(&pair, a + i * lda + 2 * q, 4);
            return pair;
        });
    if (kc & 1) step(full, [&](int i, int64_t) { return int32_t(a[i * lda + kc - 1]); });
    RFK_UNROLL for (int i = 0; i < MR; ++i) store_block_row<NV>(c + i * ldc, acc[i], alpha, add, ncols);
}

// ---------------------------------------------------------------------------------------------------
// B in place: a weight GEMM (N and K long, B the weight) reuses a packed B panel only over one row block
// of A, so packing B's pair panels costs a fixed share of the work (13% of M = 128, N = K = 4096 on AMD
// Zen 4, the 16 x 16 transposes of every B panel). Packing A's 32-row panels instead (once per call, and
// A is the short side) lets B's rows be read where they lie: each step loads two vectors of 16 rows'
// pairs from the A panel and broadcasts one pair of each of NR B rows. The block C^T lives in registers
// (lane t of acc[j][h] is C[16h + t][j]) and is transposed once at the store.
// ---------------------------------------------------------------------------------------------------
template <int H, int NR>
RFK_KERNEL static void bf16_b_in_place_kernel(int64_t kc, const float *apanel, const uint16_t *b, int64_t ldb, float *c,
                                              int64_t ldc, float alpha, bool add, int64_t rows) {
    constexpr int R = 16 * H;
    vf acc[NR][H];
    RFK_UNROLL for (int j = 0; j < NR; ++j) RFK_UNROLL for (int h = 0; h < H; ++h) acc[j][h] = vzero();
    // pair_of(j, p): B[j][2p], B[j][2p+1] as one 32-bit lane; an odd kc's last k pairs with zero, as A's
    // panel holds zero there.
    auto step = [&](int64_t p, auto pair_of) {
        vf a[H];
        RFK_UNROLL for (int h = 0; h < H; ++h) a[h] = in_register(vload(apanel + p * R + 16 * h));
        RFK_UNROLL for (int j = 0; j < NR; ++j) {
            __m512bh bv = (__m512bh)_mm512_set1_epi32(pair_of(j, p));
            RFK_UNROLL for (int h = 0; h < H; ++h) acc[j][h] = _mm512_dpbf16_ps(acc[j][h], bv, as_bh(a[h]));
        }
    };
    int64_t full = kc / 2;
    for (int64_t p = 0; p < full; ++p)
        step(p, [&](int j, int64_t q) {
            int32_t pair;
            std::memcpy(&pair, b + j * ldb + 2 * q, 4);
            return pair;
        });
    if (kc & 1) step(full, [&](int j, int64_t) { return int32_t(b[j * ldb + kc - 1]); });
    const __mmask16 cols = __mmask16((1u << NR) - 1u);
    const vf va = vset1(alpha);
    store_transposed<NR, H>(acc, rows, [&](vf row, int64_t i) {
        vf v = vmul(va, row);
        if (add) v = vadd(v, _mm512_maskz_loadu_ps(cols, c + i * ldc));
        _mm512_mask_storeu_ps(c + i * ldc, cols, v);
    });
}

// C (+)= alpha A B^T, bf16 A and B, A in panels of H halves: row blocks of kBInPlaceMC, K blocks whose A
// panels (pairs, f32 units) fill at most 1 MiB (L2); per K block every group of kBInPlaceCols B rows runs
// over all A panels, so the group's rows are read from memory once and from cache by the other panels. Long
// K blocks pay: each K block reads and writes the C block once more (M = 128, N = K = 4096, two AMD Zen 4
// cores: 412-419 GFLOP/s with 512 KiB of A panels, 423-431 with 1 MiB, 413-427 with 2 MiB; B packed: 375-398).
// With A an input of the kernel (`a_input`: constant while it runs) and one K block, A's panels are kept
// for the thread's next call on the same rows (cached_panels): linear + cross-entropy multiplies one
// 128-row block of H by each 256-row tile of W, 125 calls that packed the same 512 KiB of A each time (4%
// of the kernel's time, T = 1024, D = 2048, V = 32000, AMD Zen 4).
template <int H>
static inline void nt_b_in_place(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A, int64_t lda,
                                 const uint16_t *B, int64_t ldb, float *C, int64_t ldc, bool accumulate, bool a_input = false) {
    constexpr int R = 16 * H, NR = kBInPlaceCols;
    for (int64_t ic = 0; ic < M; ic += kBInPlaceMC) {
        int64_t mc = min64(kBInPlaceMC, M - ic), panels = (mc + R - 1) / R;
        int64_t KC = min64(K, std::max<int64_t>(256, (int64_t(1) << 20) / (4 * panels * R) * 2));
        const size_t apack_bytes = size_t(panels * ((KC + 1) / 2) * R) * sizeof(float);
        bool kept = false;
        float *apack = static_cast<float *>(a_input && KC == K ? cached_panels(A + ic * lda, lda, mc, K, H == 2 ? PanelKind::Bf16PairsA2 : PanelKind::Bf16PairsA1, apack_bytes, kept)
                                                               : scratch(0, apack_bytes));
        for (int64_t pc = 0; pc < K; pc += KC) {
            int64_t kc = min64(KC, K - pc), np = (kc + 1) / 2;
            bool add = accumulate || pc > 0;
            for (int64_t q = 0; q < panels && !kept; ++q)
                pack_pairs<H>(A + (ic + q * R) * lda + pc, lda, min64(R, mc - q * R), kc, apack + q * np * R);
            for (int64_t j = 0; j < N; j += NR)
                with_rows<NR>(int(min64(NR, N - j)), [&](auto nr) {
                    for (int64_t q = 0; q < panels; ++q)
                        bf16_b_in_place_kernel<H, decltype(nr)::value>(kc, apack + q * np * R, B + j * ldb + pc, ldb,
                                                                       C + (ic + q * R) * ldc + j, ldc, alpha, add,
                                                                       min64(R, mc - q * R));
                });
        }
    }
}
#endif  // RFK_SIMD_BF16

// A block of `rows` x `cols` of A as floats: A itself (ld = lda), or bf16 rows widened into scratch slot 1
// (ld = cols).
template <typename TA>
static inline const float *f32_block(const TA *A, int64_t lda, int64_t rows, int64_t cols, int64_t &ld) {
    ld = lda;
    if constexpr (std::is_same_v<TA, float>) {
        return A;
    } else {
        float *conv = static_cast<float *>(scratch(1, size_t(rows * cols) * sizeof(float)));
        for (int64_t i = 0; i < rows; ++i) widen_row(A + i * lda, cols, conv + i * cols);
        ld = cols;
        return conv;
    }
}

// NT via packing: C (+)= alpha * A B^T. kPairs: bf16 A and B through vdpbf16ps on pair panels; otherwise f32
// FMAs, bf16 operands widened (A per block into scratch, B while packing). With a single M block each B
// panel is packed right before its strips run (still in L1, or L2 for long pair blocks); with several,
// the whole NC block is packed once and reused by all of them.
template <bool kPairs, typename TA, typename TB>
static inline void nt_packed(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const TB *B,
                             int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    constexpr int W = kNV * VW;
    auto panel_rows = [](int64_t kc) { return kPairs ? (kc + 1) / 2 : kc; };
    bool panel_at_a_time = M <= kMC;
    // Pairs: even, so only the last block can hold an odd k. With a panel at a time, pairs take K in
    // blocks of 2048: the panel (1024 pairs x W, 128 KiB) and the A block (kMC x 2048 bf16, 512 KiB) still
    // share L2, and the strips' 4 KiB streams along each row of A measured faster than 1 KiB ones: a weight
    // GEMM M = 128, N = K = 4096 on one AMD Zen 4 core 156 -> 184 GFLOP/s (KC 512 -> 2048; 1024: 176;
    // 4096: 173, where the A block outgrows L2; prefetching C's rows instead: 153).
    const int64_t KC = kPairs ? (panel_at_a_time ? 8 * kKC : 2 * kKC) : kKC;
    int64_t packed_cols = panel_at_a_time ? W : (min64(N, kNC) + W - 1) / W * W;
    float *bpack = static_cast<float *>(scratch(0, size_t(panel_rows(min64(K, KC)) * packed_cols) * sizeof(float)));
    for (int64_t pc = 0; pc < K; pc += KC) {
        int64_t kc = min64(KC, K - pc), panel = panel_rows(kc) * W;
        bool add = accumulate || pc > 0;
        auto pack = [&](int64_t j, float *out) {
#if defined(RFK_SIMD_BF16)
            if constexpr (kPairs) pack_pairs<kNV>(B + j * ldb + pc, ldb, min64(W, N - j), kc, out); else
#endif
            pack_transposed<kNV>(B + j * ldb + pc, ldb, min64(W, N - j), kc, out);
        };
        for (int64_t jc = 0; jc < N; jc += kNC) {
            int64_t nc = min64(kNC, N - jc);
            if (!panel_at_a_time)
                for (int64_t j = 0; j < nc; j += W) pack(jc + j, bpack + (j / W) * panel);
            for (int64_t ic = 0; ic < M; ic += kMC) {
                int64_t mc = min64(kMC, M - ic);
                const float *ablock = nullptr;
                int64_t ablock_ld = lda;
                if constexpr (!kPairs) ablock = f32_block(A + ic * lda + pc, lda, mc, kc, ablock_ld);
                for (int64_t j = 0; j < nc; j += W) {
                    float *bp = panel_at_a_time ? bpack : bpack + (j / W) * panel;
                    if (panel_at_a_time) pack(jc + j, bp);
                    int64_t ncols = min64(W, nc - j);
                    float *cb = C + ic * ldc + jc + j;
#if defined(RFK_SIMD_BF16)
                    if constexpr (kPairs)
                        for_strips<kMR>(mc, [&](auto rows, int64_t i) {
                            bf16_outer_kernel<decltype(rows)::value, kNV>(kc, A + (ic + i) * lda + pc, lda, bp, cb + i * ldc,
                                                                          ldc, alpha, add, ncols);
                        });
                    else
#endif
                    outer_block<kMR, kNV, float>(mc, ncols, kc, ablock, ablock_ld, bp, W, 0, cb, ldc, alpha, add);
                }
            }
        }
    }
}

// nt_packed for B an input of the kernel with K within one KC block (attention's K tiles): B's
// transposed panels, all of them, kept for the thread's next call on the same B in this kernel entry
// (cached_panels; every row block of a head multiplies by the same tiles). False: not such a shape.
// A bf16 B (with f32 products: a CPU without AVX512_BF16) is kept widened, and a bf16 A widened per
// block as nt_packed<false> does, which this computes bit for bit: nt_packed repacked and rewidened the
// tiles for each of a head's row blocks (bf16 attention [1, 8, 2048, 2048, 128] on an AVX2 AMD Zen 3:
// pack_transposed from bf16 3.0% of the call against 0.7% for f32 inputs, whose panels were kept).
template <typename TA, typename TB>
static inline bool nt_kept_panels(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda,
                                  const TB *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (K == 0 || K > kKC || M < kPackMinM || N < kPackMinN) return false;
    constexpr int W = kNV * VW;
    constexpr PanelKind kind = std::is_same_v<TB, float> ? PanelKind::F32TransposedK : PanelKind::WidenedTransposedK;
    const int64_t npanels = (N + W - 1) / W, panel = K * W;
    bool hit = false;
    float *panels = static_cast<float *>(cached_panels(B, ldb, N, K, kind, size_t(npanels * panel) * sizeof(float), hit));
    if (!hit)
        for (int64_t p = 0; p < npanels; ++p) pack_transposed<kNV>(B + p * W * ldb, ldb, min64(W, N - p * W), K, panels + p * panel);
    for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = min64(kMC, M - ic);
        int64_t ablock_ld = lda;
        const float *ablock = f32_block(A + ic * lda, lda, mc, K, ablock_ld);
        for (int64_t p = 0; p < npanels; ++p)
            outer_block<kMR, kNV, float>(mc, min64(W, N - p * W), K, ablock, ablock_ld, panels + p * panel, W, 0,
                                         C + ic * ldc + p * W, ldc, alpha, accumulate);
    }
    return true;
}

// ---------------------------------------------------------------------------------------------------
// Dot-product GEMM core for small M (or N): MR rows of A against 4 rows of B with vectors along K, reduced
// at the end. No packing, so decode-sized problems stream B once at memory speed.
// ---------------------------------------------------------------------------------------------------
static inline __m128i first_of_4(int64_t n) {
    alignas(16) static const int32_t lanes[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
    return _mm_loadu_si128(reinterpret_cast<const __m128i *>(lanes + 4 - n));
}
// The first min(n, 4) of 4 floats or int32s at p (the dot tiles' rows). AVX-512 masks them with a k register:
// vmaskmovps stores, the AVX2 form, took a seventh of the bf16 dot kernel's samples on AMD Zen 4 (decode QK^T,
// Hq = 64, Hkv = 8, N = 1024 in cache: 0.52 -> 0.47 ms).
#if defined(RFK_SIMD_AVX512)
static inline __mmask8 first_of_4_k(int64_t n) { return __mmask8((1u << (n < 4 ? n : 4)) - 1u); }
static inline __m128 load4_n(const float *p, int64_t n) { return _mm_maskz_loadu_ps(first_of_4_k(n), p); }
static inline void store4_n(float *p, __m128 v, int64_t n) { _mm_mask_storeu_ps(p, first_of_4_k(n), v); }
static inline __m128i load4_n(const int32_t *p, int64_t n) { return _mm_maskz_loadu_epi32(first_of_4_k(n), p); }
static inline void store4_n(int32_t *p, __m128i v, int64_t n) { _mm_mask_storeu_epi32(p, first_of_4_k(n), v); }
#else
static inline __m128 load4_n(const float *p, int64_t n) { return _mm_maskload_ps(p, first_of_4(n < 4 ? n : 4)); }
static inline void store4_n(float *p, __m128 v, int64_t n) { _mm_maskstore_ps(p, first_of_4(n < 4 ? n : 4), v); }
static inline __m128i load4_n(const int32_t *p, int64_t n) { return _mm_maskload_epi32(p, first_of_4(n < 4 ? n : 4)); }
static inline void store4_n(int32_t *p, __m128i v, int64_t n) { _mm_maskstore_epi32(p, first_of_4(n < 4 ? n : 4), v); }
#endif

// f32 FMAs along K; bf16 operands are widened as they are loaded.
struct DotFma {
    static constexpr int kStep = VW;
    template <typename T>
    static vf load(const T *p, int64_t n) { return n == VW ? vload(p) : vload_n(p, n); }
    static vf madd(vf acc, vf a, vf b) { return vfma(a, b, acc); }
};
#if defined(RFK_SIMD_BF16)
// bf16 pairs along K through vdpbf16ps: 32 k per instruction.
struct DotBf16 {
    static constexpr int kStep = 32;
    static vf load(const uint16_t *p, int64_t n) { return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(first_n16(n), p)); }
    static vf madd(vf acc, vf a, vf b) { return _mm512_dpbf16_ps(acc, as_bh(a), as_bh(b)); }
};
#endif

// C[0..MR)[0..ncols) (+)= alpha A B^T for MR rows of A against the 4 rows b[0..3], with vectors along K;
// prefetch(k) runs once per step of the K loop. Inlined into the two kernels below.
template <int MR, typename Ops, typename TA, typename TB, typename Prefetch>
static inline RFK_DOT_INLINE void dot_block(int64_t K, const TA *a, int64_t lda, const TB *const *b, float *c, int64_t ldc,
                                            float alpha, bool add, int64_t ncols, Prefetch &&prefetch) {
    vf acc[MR][4];
    RFK_UNROLL for (int i = 0; i < MR; ++i) RFK_UNROLL for (int j = 0; j < 4; ++j) acc[i][j] = vzero();
    const TB *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3];
    auto step = [&](int64_t k, int64_t n) {
        vf v0 = in_register(Ops::load(b0 + k, n)), v1 = in_register(Ops::load(b1 + k, n));
        vf v2 = in_register(Ops::load(b2 + k, n)), v3 = in_register(Ops::load(b3 + k, n));
        prefetch(k);
        RFK_UNROLL for (int i = 0; i < MR; ++i) {
            vf av = in_register(Ops::load(a + i * lda + k, n));
            acc[i][0] = Ops::madd(acc[i][0], av, v0);
            acc[i][1] = Ops::madd(acc[i][1], av, v1);
            acc[i][2] = Ops::madd(acc[i][2], av, v2);
            acc[i][3] = Ops::madd(acc[i][3], av, v3);
        }
    };
    int64_t k = 0;
    if constexpr (std::is_same_v<Ops, DotFma> && std::is_same_v<TA, uint16_t> && std::is_same_v<TB, uint16_t>) {
        // bf16 x bf16 on the FMA units: 2·VW elements a step, each row's 2·VW bf16 loaded as they lie and
        // split into its even and odd elements as floats (x << 16 and x & 0xFFFF0000 on the 32-bit lanes:
        // two ALU operations), each sum taking the even products and then the odd ones. Widened one
        // vector at a time (vpmovzxwd and a shift per VW elements, both on the 2 pipes that take
        // shuffles and shifts), the 6 loads of a step cost 12 such operations per 8 FMAs on AVX2, which
        // outweighed the FMAs (decode GQA's QKᵀ). A's halves first, then one B row at a time: on AVX2's
        // 16 registers, 8 accumulators + 4 A halves + 2 B halves + the mask.
        const vi high = vset1_i32(int32_t(0xFFFF0000u));
        for (; k + 2 * VW <= K; k += 2 * VW) {
            prefetch(k);
            prefetch(k + VW);
            vf ae[MR], ao[MR];
            RFK_UNROLL for (int i = 0; i < MR; ++i) split_bf16_pairs(vload_raw(a + i * lda + k), high, ae[i], ao[i]);
            RFK_UNROLL for (int j = 0; j < 4; ++j) {
                vf be, bo;
                split_bf16_pairs(vload_raw(b[j] + k), high, be, bo);
                RFK_UNROLL for (int i = 0; i < MR; ++i) acc[i][j] = vfma(ao[i], bo, vfma(ae[i], be, acc[i][j]));
            }
        }
    }
    for (; k + Ops::kStep <= K; k += Ops::kStep) step(k, Ops::kStep);
    if (k < K) step(k, K - k);
#if defined(RFK_SIMD_AVX512)
    if constexpr (MR == 4) {  // all 16 sums in one vector (vsum4x4): at D = 128 the sums cost as much as the products
        vf s4 = _mm512_mul_ps(vsum4x4(acc), vset1(alpha));
        __m128 row[4] = {_mm512_castps512_ps128(s4), _mm512_extractf32x4_ps(s4, 1), _mm512_extractf32x4_ps(s4, 2),
                         _mm512_extractf32x4_ps(s4, 3)};
        RFK_UNROLL for (int i = 0; i < 4; ++i) store4_n(c + i * ldc, add ? _mm_add_ps(row[i], load4_n(c + i * ldc, ncols)) : row[i], ncols);
        return;
    }
#endif
    RFK_UNROLL for (int i = 0; i < MR; ++i) {
        __m128 s = _mm_mul_ps(vsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]), _mm_set1_ps(alpha));
        if (add) s = _mm_add_ps(s, load4_n(c + i * ldc, ncols));
        store4_n(c + i * ldc, s, ncols);
    }
}

// One MR x 4 block; pf[0..npf): element offsets from b[0] to prefetch (one line per step each).
template <int MR, typename Ops, typename TA, typename TB>
RFK_KERNEL static void dot_kernel(int64_t K, const TA *a, int64_t lda, const TB *const *b, float *c, int64_t ldc,
                                  float alpha, bool add, int64_t ncols, const int64_t *pf = nullptr, int npf = 0) {
    dot_block<MR, Ops>(K, a, lda, b, c, ldc, alpha, add, ncols, [&](int64_t k) {
        for (int r = 0; r < npf; ++r) prefetch_l2_past(b[0], (pf[r] + k) * int64_t(sizeof(TB)));
    });
}

// `groups` blocks of MR x 4 in one call, over the rows B[4g .. 4g + 4) (all present), columns 4g of C; with
// kPrefetch each step also asks for the same line of the 4 rows `ahead_rows` on. A call per block paid its
// set-up (pointers, prefetch offsets, the call) once per 4 B rows: at decode's K = D = 128 (4 steps of the K
// loop per block) that is not small against the block's 64 products and its sums. Decode GQA bf16 B = 4,
// Hkv = 8, D = 128, emitted kernels, AMD Zen 4, 2 threads, medians of 6-8 alternated runs: N = 8192, Hq = 32
// 5.49 -> 5.02 ms, Hq = 64 5.41 -> 5.11, Hq = 128 9.57 -> 8.46; Hq = 64 at N = 1024 (in cache) 0.55 -> 0.49.
template <int MR, typename Ops, bool kPrefetch, typename TA, typename TB>
RFK_KERNEL static void dot_kernel_groups(int64_t K, const TA *a, int64_t lda, const TB *b, int64_t ldb, int64_t groups,
                                         float *c, int64_t ldc, float alpha, bool add, int64_t ahead_rows) {
    const int64_t pf_bytes = ahead_rows * ldb * int64_t(sizeof(TB)), row_bytes = ldb * int64_t(sizeof(TB));
    for (int64_t g = 0; g < groups; ++g) {
        const TB *rows[4] = {b + 4 * g * ldb, b + (4 * g + 1) * ldb, b + (4 * g + 2) * ldb, b + (4 * g + 3) * ldb};
        dot_block<MR, Ops>(K, a, lda, rows, c + 4 * g, ldc, alpha, add, 4, [&](int64_t k) {
            if constexpr (kPrefetch) {
                const int64_t at = pf_bytes + k * int64_t(sizeof(TB));
                RFK_UNROLL for (int t = 0; t < 4; ++t) prefetch_l2_past(rows[0], at + t * row_bytes);
            }
        });
    }
}

// How many groups of 4 B rows (row_bytes each) ahead the dot form prefetches: at least 4 KiB. With few
// rows of A the dot form streams B once from memory, and its interleaved reads of 4 rows (a line of each
// in turn, the rows 256 bytes apart at attention's D = 128 bf16) did not start the hardware prefetchers
// ahead: decode attention's QK^T (M = 4) read K at half the rate its P.V read V.
static inline int64_t dot_ahead(int64_t row_bytes) { return row_bytes >= 1024 ? 1 : 1024 / (row_bytes > 0 ? row_bytes : 1); }

// Tiles C into MR x 4 blocks, B rows outermost so each group of 4 B rows is read from memory once. Missing B
// rows in the last group alias row 0 of the group (valid memory); their sums are not stored.
template <int MR, typename T, typename Kernel>
static inline void dot_tiles(int64_t M, int64_t N, const T *B, int64_t ldb, Kernel &&kernel) {
    for (int64_t j = 0; j < N; j += 4) {
        int64_t ncols = min64(4, N - j);
        const T *rows[4];
        for (int t = 0; t < 4; ++t) rows[t] = B + (j + (t < ncols ? t : 0)) * ldb;
        for_strips<MR>(M, [&](auto mr, int64_t i) { kernel(mr, i, j, rows, ncols); });
    }
}

template <typename Ops, typename TA, typename TB>
static inline void nt_gemm(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const TB *B,
                           int64_t ldb, float *C, int64_t ldc, bool accumulate, bool a_input = false) {
#if defined(RFK_SIMD_BF16)
    if constexpr (std::is_same_v<Ops, DotBf16> && std::is_same_v<TA, uint16_t> && std::is_same_v<TB, uint16_t>) {
        int halves = b_in_place_halves(M, N, K);
        if (halves == 2) return nt_b_in_place<2>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, a_input);
        if (halves == 1) return nt_b_in_place<1>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, a_input);
    }
#endif
    (void)a_input;
    if (K == 0) {
        if (!accumulate) clear_rows(M, N, C, ldc);
    } else if (M >= kPackMinM && N >= kPackMinN) {
        nt_packed<!std::is_same_v<Ops, DotFma>>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
    } else {
        // The first strip of each group of 4 B rows asks for the rows `ahead` groups on, at least 4 KiB
        // ahead, one line per row and step of the kernel (see dot_ahead). Past the last row too: a tile
        // loop's next call reads the rows that follow (decode's next key tile), and a prefetch past B's
        // end is dropped, never faults.
        const int64_t ahead = dot_ahead(K * int64_t(sizeof(TB)));
        if (K * int64_t(sizeof(TB)) <= 1024) {
            // Short rows of B (a key tile): runs of whole groups per call, 32 B rows at a time (8 KiB at
            // D = 128 bf16) so the strips after the first read them from L1; the last N mod 4 rows below.
            constexpr int64_t kGroups = 8;
            const int64_t whole = N / 4 * 4;
            for (int64_t j0 = 0; j0 < whole; j0 += 4 * kGroups) {
                const int64_t groups = min64(kGroups, (whole - j0) / 4);
                for_strips<kDotMR>(M, [&](auto mr, int64_t i) {
                    constexpr int R = decltype(mr)::value;
                    const TA *a = A + i * lda;
                    float *c = C + i * ldc + j0;
                    if (i == 0) dot_kernel_groups<R, Ops, true>(K, a, lda, B + j0 * ldb, ldb, groups, c, ldc, alpha, accumulate, 4 * ahead);
                    else dot_kernel_groups<R, Ops, false>(K, a, lda, B + j0 * ldb, ldb, groups, c, ldc, alpha, accumulate, 0);
                });
            }
            if (whole == N) return;
            B += whole * ldb;
            C += whole;
            N -= whole;
        }
        dot_tiles<kDotMR>(M, N, B, ldb, [&](auto mr, int64_t i, int64_t j, const TB *const *rows, int64_t ncols) {
            int64_t pf[4];  // element offsets from the group's first row
            int npf = 0;
            for (int64_t r = j + 4 * ahead; i == 0 && npf < 4; ++r) pf[npf++] = (r - j) * ldb;
            dot_kernel<decltype(mr)::value, Ops>(K, A + i * lda, lda, rows, C + i * ldc + j, ldc, alpha, accumulate, ncols, pf, npf);
        });
    }
}

#endif  // RFK_SIMD_VECTOR

}  // namespace simd_detail

// =====================================================================================================
// Public API (the tile GEMMs). Without AVX2+FMA every function is the plain loop below its SIMD call.
// =====================================================================================================

static inline void gemm_nt_f32(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                               const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_f32(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
#if defined(RFK_SIMD_VECTOR)
    simd_detail::nt_gemm<simd_detail::DotFma>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
#else
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += A[i * lda + k] * B[j * ldb + k];
            C[i * ldc + j] = alpha * s + (accumulate ? C[i * ldc + j] : 0.0f);
        }
#endif
}

// gemm_nt_f32 with B an input of the generated kernel, constant while the kernel runs: its packed panels
// are kept for the thread's later calls on the same B within this kernel entry (nt_kept_panels).
static inline void gemm_nt_f32_input_b(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                       const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
#if defined(RFK_SIMD_VECTOR)
    if (!simd_detail::splits_columns(M, N, K) && simd_detail::nt_kept_panels(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate))
        return;
#endif
    gemm_nt_f32(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
}

// A stays f32 (exact products, f32 FMA speed): a caller that wants bf16 activations (twice the FMA rate
// with AVX512_BF16, A rounded to bf16) converts A with f32_to_bf16 and calls gemm_nt_bf16.
static inline void gemm_nt_f32_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                    const uint16_t *B, int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_f32_bf16(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate);
        }))
        return;
#if defined(RFK_SIMD_VECTOR)
    simd_detail::nt_gemm<simd_detail::DotFma>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
#else
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += A[i * lda + k] * bf16_to_f32(B[j * ldb + k]);
            C[i * ldc + j] = alpha * s + (accumulate ? C[i * ldc + j] : 0.0f);
        }
#endif
}

// With AVX512_BF16 the products go through vdpbf16ps, which treats bf16 subnormal inputs as zero.
// `a_input`: A is an input of the generated kernel, constant while it runs (its packed panels may be kept
// for the thread's next call on the same rows; nt_b_in_place).
static inline void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A, int64_t lda,
                                const uint16_t *B, int64_t ldb, float *C, int64_t ldc, bool accumulate, bool a_input = false) {
    if (simd_detail::split_columns(M, N, K, [&](int64_t j0, int64_t n) {
            gemm_nt_bf16(M, n, K, alpha, A, lda, B + j0 * ldb, ldb, C + j0, ldc, accumulate, a_input);
        }))
        return;
#if defined(RFK_SIMD_AMX)
    if (simd_detail::amx_gemm_nt_bf16(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate)) return;
#endif
    (void)a_input;
#if defined(RFK_SIMD_BF16)
    simd_detail::nt_gemm<simd_detail::DotBf16>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, a_input);
#elif defined(RFK_SIMD_VECTOR)
    simd_detail::nt_gemm<simd_detail::DotFma>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
#else
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += bf16_to_f32(A[i * lda + k]) * bf16_to_f32(B[j * ldb + k]);
            C[i * ldc + j] = alpha * s + (accumulate ? C[i * ldc + j] : 0.0f);
        }
#endif
}

// gemm_nt_bf16 with B an input of the generated kernel, constant while the kernel runs: the AMX path
// keeps B's packed panels for the thread's later calls on the same B within this kernel entry.
static inline void gemm_nt_bf16_input_b(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A, int64_t lda,
                                        const uint16_t *B, int64_t ldb, float *C, int64_t ldc, bool accumulate, bool a_input = false) {
#if defined(RFK_SIMD_AMX)
    if (!simd_detail::splits_columns(M, N, K) && simd_detail::amx_gemm_nt_bf16(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, true))
        return;
#endif
#if defined(RFK_SIMD_VECTOR) && !defined(RFK_SIMD_BF16)
    // f32 products (no bf16 unit): gemm_nt_bf16's packed path with B's widened panels kept.
    if (!simd_detail::splits_columns(M, N, K) && simd_detail::nt_kept_panels(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate))
        return;
#endif
    gemm_nt_bf16(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, a_input);
}

}  // namespace rfk

#undef RFK_DOT_INLINE
// RFK_UNROLL and RFK_KERNEL stay defined for redfuse_simd_gemm_nn.h, redfuse_simd_int8.h and
// redfuse_simd_bf16.h, pasted next; the last undefines them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // REDFUSE_SIMD_GEMM_H
