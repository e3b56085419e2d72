/** \file redfuse_simd_amx.h
 * Hot-loop primitives for generated CPU kernels, fifth of six texts: the tile GEMMs on AMX
 * (tdpbf16ps for bf16 x bf16 -> f32, tdpbssd for int8 x int8 -> int32), which the public GEMMs of
 * redfuse_simd_gemm.h and redfuse_simd_bf16.h call first when the kernel was compiled for AMX and
 * Linux grants the process the tile data state. Pasted after redfuse_simd_bf16.h.
 *
 * The tile products: a 2 x 2 block of 16 x 16 accumulator tiles (tmm0-3) per step, fed by two 16-row
 * slices of the row operand (tmm4-5: rows of K-contiguous data, 64 bytes per step) and two 16-column
 * panels of the packed operand (tmm6-7: the VNNI layout, one 32-bit unit per column holding 2 bf16 or
 * 4 int8 consecutive along K). One tile configuration (all eight tiles 16 rows x 64 bytes) serves every
 * call; operands are zero-padded to whole tiles, so tails cost padding, never a branch in the loop.
 *
 * Which operand is packed: the smaller one. For a weight GEMM (N >> M) the weight rows are the row
 * operand, read in place, and A is packed: the tiles compute C^T, stored transposed. For attention
 * tiles (Q·Kᵀ, P·V) A's rows are the row operand and B is packed.
 *
 * RFK_AMX_EMULATE replaces the six tile instructions by a software model of their documented
 * semantics (Intel SDM: TILELOADD, TILESTORED, TILEZERO, TDPBF16PS with bf16 inputs flushed to zero
 * when subnormal, TDPBSSD), so every line of this file but the instructions themselves runs on CPUs
 * without AMX (tests/unit/runtime/simd_kernels_test.cpp).
 */
#ifndef REDFUSE_SIMD_AMX_H
#define REDFUSE_SIMD_AMX_H

#ifndef REDFUSE_SIMD_BF16_H
#error "redfuse_simd_amx.h is pasted after redfuse_simd_bf16.h"
#endif

#if defined(RFK_SIMD_AMX)
#include <cstdint>
#include <cstring>
#include <type_traits>
#if !defined(RFK_AMX_EMULATE)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace rfk {
namespace simd_detail {

// The tile configuration block of LDTILECFG (palette 1): bytes per row and rows of each tile.
struct alignas(64) AmxTileConfig {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

#if defined(RFK_AMX_EMULATE)
// ---------------------------------------------------------------------------------------------------
// The software model: eight 16 x 64-byte tiles per thread (as the hardware's per-thread tile state).
// ---------------------------------------------------------------------------------------------------
struct AmxEmulatedTiles {
    alignas(64) uint8_t data[8][16][64];
    bool configured;
};
static inline AmxEmulatedTiles &amx_emulated_tiles() {
    static thread_local AmxEmulatedTiles tiles;  // trivially destructible: nothing registered at exit
    return tiles;
}
static inline float amx_emu_bf16(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if ((h & 0x7F80) == 0) h &= 0x8000;  // TDPBF16PS treats subnormal inputs as zero
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline void amx_emu_check(int t) {
    if (t < 0 || t > 7 || !amx_emulated_tiles().configured) __builtin_trap();  // #UD on the hardware
}
static inline void amx_load_config(const AmxTileConfig *c) { amx_emulated_tiles().configured = c->palette == 1; }
static inline void amx_release() { amx_emulated_tiles().configured = false; }
static inline void amx_emu_load(int t, const void *base, int64_t stride) {
    amx_emu_check(t);
    for (int r = 0; r < 16; ++r) std::memcpy(amx_emulated_tiles().data[t][r], static_cast<const uint8_t *>(base) + r * stride, 64);
}
static inline void amx_emu_store(int t, void *base, int64_t stride) {
    amx_emu_check(t);
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<uint8_t *>(base) + r * stride, amx_emulated_tiles().data[t][r], 64);
}
static inline void amx_emu_zero(int t) {
    amx_emu_check(t);
    std::memset(amx_emulated_tiles().data[t], 0, sizeof(amx_emulated_tiles().data[t]));
}
// C.f32[m][n] += A.bf16[m][2k] * B.bf16[k][2n] + A.bf16[m][2k+1] * B.bf16[k][2n+1], k < 16.
static inline void amx_emu_dpbf16ps(int c, int a, int b) {
    amx_emu_check(c), amx_emu_check(a), amx_emu_check(b);
    AmxEmulatedTiles &t = amx_emulated_tiles();
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
            float acc;
            std::memcpy(&acc, &t.data[c][m][4 * n], 4);
            for (int k = 0; k < 16; ++k) {
                acc += amx_emu_bf16(&t.data[a][m][4 * k]) * amx_emu_bf16(&t.data[b][k][4 * n]);
                acc += amx_emu_bf16(&t.data[a][m][4 * k + 2]) * amx_emu_bf16(&t.data[b][k][4 * n + 2]);
            }
            std::memcpy(&t.data[c][m][4 * n], &acc, 4);
        }
}
// C.s32[m][n] += sum_i A.s8[m][4k+i] * B.s8[k][4n+i], k < 16 (wrap-around int32).
static inline void amx_emu_dpbssd(int c, int a, int b) {
    amx_emu_check(c), amx_emu_check(a), amx_emu_check(b);
    AmxEmulatedTiles &t = amx_emulated_tiles();
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
            uint32_t acc;
            std::memcpy(&acc, &t.data[c][m][4 * n], 4);
            for (int k = 0; k < 16; ++k)
                for (int i = 0; i < 4; ++i)
                    acc += uint32_t(int32_t(int8_t(t.data[a][m][4 * k + i])) * int32_t(int8_t(t.data[b][k][4 * n + i])));
            std::memcpy(&t.data[c][m][4 * n], &acc, 4);
        }
}
#define RFK_TILE_LOAD(t, base, stride) ::rfk::simd_detail::amx_emu_load(t, base, stride)
#define RFK_TILE_STORE(t, base, stride) ::rfk::simd_detail::amx_emu_store(t, base, stride)
#define RFK_TILE_ZERO(t) ::rfk::simd_detail::amx_emu_zero(t)
#define RFK_TILE_DPBF16PS(c, a, b) ::rfk::simd_detail::amx_emu_dpbf16ps(c, a, b)
#define RFK_TILE_DPBSSD(c, a, b) ::rfk::simd_detail::amx_emu_dpbssd(c, a, b)
static inline bool amx_granted() { return true; }
#else
// ---------------------------------------------------------------------------------------------------
// The hardware. Linux keeps the 8 KiB tile data state off until a process asks for it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Linux >= 5.16); without the grant the first
// tile instruction faults, so the GEMMs fall back to the AVX-512 kernels.
// ---------------------------------------------------------------------------------------------------
static inline bool amx_granted() {
    static const bool granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
    return granted;
}
// GCC 12's tile intrinsics are asm statements that declare no memory they read or write (ldtilecfg
// names only the first 8 bytes of its 64): a compiler barrier before every read of memory and after
// every write keeps the packing stores before the tile loads, and the reads of stored tiles after them.
#define RFK_COMPILER_BARRIER() __asm__ volatile("" ::: "memory")
static inline void amx_load_config(const AmxTileConfig *c) {
    RFK_COMPILER_BARRIER();
    _tile_loadconfig(c);
}
static inline void amx_release() { _tile_release(); }
#define RFK_TILE_LOAD(t, base, stride) \
    do {                               \
        RFK_COMPILER_BARRIER();        \
        _tile_loadd(t, base, stride);  \
    } while (0)
#define RFK_TILE_STORE(t, base, stride) \
    do {                                \
        _tile_stored(t, base, stride);  \
        RFK_COMPILER_BARRIER();         \
    } while (0)
#define RFK_TILE_ZERO(t) _tile_zero(t)
#define RFK_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define RFK_TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#endif

// Below 16 rows or columns most of a tile would be padding; the AVX-512 kernels are as fast there.
constexpr int64_t kAmxMinRows = 16;

static inline void amx_configure() {
    AmxTileConfig c;
    std::memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; ++t) {
        c.colsb[t] = 64;
        c.rows[t] = 16;
    }
    amx_load_config(&c);
}

static inline int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// 64 bytes of a row as tile data: bf16 or int8 copied (masked: bytes past `n` elements are zero and
// never read), float rounded to bf16 (round to nearest even, as round_to_bf16).
template <typename T>
static inline __m512i amx_row_chunk(const T *p, int64_t n) {
    if constexpr (std::is_same<T, float>::value) {
        __m512 lo = _mm512_maskz_loadu_ps(first_n(clamp64(n, 0, 16)), p);
        __m512 hi = _mm512_maskz_loadu_ps(first_n(clamp64(n - 16, 0, 16)), p + 16);
        return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    } else if constexpr (std::is_same<T, uint16_t>::value) {
        return _mm512_maskz_loadu_epi16(n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1, p);
    } else {
        return _mm512_maskz_loadu_epi8(n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1, p);
    }
}

// Elements of T per 64-byte tile row.
template <typename T>
constexpr int64_t amx_chunk() {
    return std::is_same<T, int8_t>::value ? 64 : 32;
}

// Packs `cols` rows of a K-contiguous matrix (they become the columns of the product) into VNNI panels:
// panel t (columns 16t .. 16t+15) holds, per step c of 64 bytes along K, the 16 x 16 transposed units
// at out + (t * steps + c) * 256. Columns up to a multiple of 32 and K up to whole steps are zero.
template <typename T>
static inline void amx_pack_panels(const T *src, int64_t ld, int64_t cols, int64_t K, int64_t steps, uint32_t *out) {
    constexpr int64_t E = amx_chunk<T>();
    int64_t panels = round_up(cols, 32) / 16;
    for (int64_t t = 0; t < panels; ++t)
        for (int64_t c = 0; c < steps; ++c) {
            vf r[16];  // 16 rows of 16 32-bit units, transposed into the panel's 16 units x 16 columns
            for (int j = 0; j < 16; ++j) {
                int64_t col = 16 * t + j;
                r[j] = _mm512_castsi512_ps(col < cols ? amx_row_chunk(src + col * ld + c * E, K - c * E) : _mm512_setzero_si512());
            }
            vtranspose(r);
            for (int p = 0; p < 16; ++p) _mm512_storeu_ps(out + (t * steps + c) * 256 + p * 16, r[p]);
        }
}

// Packs an N-contiguous bf16 matrix (K rows, `cols` columns; P·V's V) into the same panels: the unit of
// column j at step c, pair p is (V[32c + 2p][j], V[32c + 2p + 1][j]).
static inline void amx_pack_row_pairs(const uint16_t *src, int64_t ld, int64_t cols, int64_t K, int64_t steps, uint32_t *out) {
    int64_t panels = round_up(cols, 32) / 16;
    for (int64_t t = 0; t < panels; ++t) {
        __mmask16 m = first_n(clamp64(cols - 16 * t, 0, 16));
        for (int64_t c = 0; c < steps; ++c)
            for (int p = 0; p < 16; ++p) {
                int64_t k = 32 * c + 2 * p;
                __m512i lo = k < K ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + k * ld + 16 * t)) : _mm512_setzero_si512();
                __m512i hi = k + 1 < K ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + (k + 1) * ld + 16 * t)), 16)
                                       : _mm512_setzero_si512();
                _mm512_storeu_si512(out + (t * steps + c) * 256 + p * 16, _mm512_or_si512(lo, hi));
            }
    }
}

// The row operand of one 32-row block: read in place when it is bf16 or int8, has 32 rows and whole
// steps along K; otherwise copied (rounded to bf16 when float) into `copy`, zero-padded.
struct AmxRows {
    const uint8_t *base;
    int64_t stride;  // bytes
};
template <typename T>
static inline AmxRows amx_row_block(const T *src, int64_t ld, int64_t rows, int64_t K, int64_t steps, uint8_t *copy) {
    constexpr int64_t E = amx_chunk<T>();
    if (!std::is_same<T, float>::value && rows >= 32 && K % E == 0)
        return {reinterpret_cast<const uint8_t *>(src), ld * int64_t(sizeof(T))};
    int64_t stride = steps * 64;
    for (int64_t r = 0; r < 32; ++r)
        for (int64_t c = 0; c < steps; ++c)
            _mm512_storeu_si512(copy + r * stride + c * 64, r < rows ? amx_row_chunk(src + r * ld + c * E, K - c * E) : _mm512_setzero_si512());
    return {copy, stride};
}

// acc tiles (slice s of the rows x panel q) += rows · panels over `steps` steps of 64 bytes along K.
template <bool kInt8>
static inline void amx_block(const AmxRows &rows, const uint32_t *panel0, const uint32_t *panel1, int64_t steps) {
    const uint8_t *r0 = rows.base, *r1 = rows.base + 16 * rows.stride;
    for (int64_t c = 0; c < steps; ++c) {
        RFK_TILE_LOAD(4, r0 + c * 64, rows.stride);
        RFK_TILE_LOAD(5, r1 + c * 64, rows.stride);
        RFK_TILE_LOAD(6, panel0 + c * 256, 64);
        RFK_TILE_LOAD(7, panel1 + c * 256, 64);
        if constexpr (kInt8) {
            RFK_TILE_DPBSSD(0, 4, 6);
            RFK_TILE_DPBSSD(1, 4, 7);
            RFK_TILE_DPBSSD(2, 5, 6);
            RFK_TILE_DPBSSD(3, 5, 7);
        } else {
            RFK_TILE_DPBF16PS(0, 4, 6);
            RFK_TILE_DPBF16PS(1, 4, 7);
            RFK_TILE_DPBF16PS(2, 5, 6);
            RFK_TILE_DPBF16PS(3, 5, 7);
        }
    }
}

// The 32 x 32 block of 32-bit results (row r of the row operand, column q of the packed one) as
// out[r * 32 + q], or transposed (out[q * 32 + r]) when `transpose`.
static inline void amx_store_block(uint32_t *out, bool transpose) {
    RFK_TILE_STORE(0, out, 128);
    RFK_TILE_STORE(1, out + 16, 128);
    RFK_TILE_STORE(2, out + 16 * 32, 128);
    RFK_TILE_STORE(3, out + 16 * 32 + 16, 128);
    if (!transpose) return;
    vf q[4][16];  // out = [[X, Y], [Z, W]] (16 x 16 quarters of 32-bit units) becomes [[Xt, Zt], [Yt, Wt]]
    for (int h = 0; h < 4; ++h)
        for (int i = 0; i < 16; ++i) q[h][i] = _mm512_loadu_ps(out + (16 * (h >> 1) + i) * 32 + 16 * (h & 1));
    for (int h = 0; h < 4; ++h) {
        vtranspose(q[h]);
        for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + (16 * (h & 1) + i) * 32 + 16 * (h >> 1), q[h][i]);
    }
}

// C[i][j] (+)= alpha * block[i][j] for i < rows, j < cols (float), or C += block (int32, wrap-around).
static inline void amx_write(const uint32_t *block, int64_t rows, int64_t cols, float alpha, bool add, float *C, int64_t ldc) {
    for (int64_t i = 0; i < rows; ++i)
        for (int h = 0; h < 2; ++h) {
            __mmask16 m = first_n(clamp64(cols - 16 * h, 0, 16));
            if (!m) break;
            __m512 v = _mm512_mul_ps(_mm512_set1_ps(alpha), _mm512_castsi512_ps(_mm512_loadu_si512(block + i * 32 + 16 * h)));
            if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, C + i * ldc + 16 * h));
            _mm512_mask_storeu_ps(C + i * ldc + 16 * h, m, v);
        }
}
static inline void amx_write(const uint32_t *block, int64_t rows, int64_t cols, float, bool add, int32_t *C, int64_t ldc) {
    for (int64_t i = 0; i < rows; ++i)
        for (int h = 0; h < 2; ++h) {
            __mmask16 m = first_n(clamp64(cols - 16 * h, 0, 16));
            if (!m) break;
            __m512i v = _mm512_loadu_si512(block + i * 32 + 16 * h);
            if (add) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, C + i * ldc + 16 * h));
            _mm512_mask_storeu_epi32(C + i * ldc + 16 * h, m, v);
        }
}

// The sweep shared by every AMX GEMM: per 32-row block of the row operand (row_block(r0, rows) gives
// it), per 32-column block of the packed panels, the K steps into four accumulator tiles, then
// write(block, r0, rows, q0, cols) with the block laid out as amx_store_block leaves it.
template <bool kInt8, typename RowBlock, typename Write>
static inline void amx_sweep(int64_t rows_total, int64_t cols_total, int64_t steps, const uint32_t *panels, bool transposed,
                             RowBlock &&row_block, Write &&write) {
    alignas(64) uint32_t block[32 * 32];
    amx_configure();
    for (int64_t r0 = 0; r0 < rows_total; r0 += 32) {
        int64_t rows = min64(32, rows_total - r0);
        AmxRows src = row_block(r0, rows);
        for (int64_t q0 = 0; q0 < cols_total; q0 += 32) {
            RFK_TILE_ZERO(0);
            RFK_TILE_ZERO(1);
            RFK_TILE_ZERO(2);
            RFK_TILE_ZERO(3);
            const uint32_t *p0 = panels + (q0 / 16) * steps * 256;
            amx_block<kInt8>(src, p0, p0 + steps * 256, steps);
            amx_store_block(block, transposed);
            write(block, r0, rows, q0, min64(32, cols_total - q0));
        }
    }
    amx_release();
}

// C (+)= alpha A Bᵀ (float or int32 C). The larger of A (M rows) and B (N rows) is the row operand, the
// other is packed once per call; both are K-contiguous, so either orientation computes the same dot
// products, as C or as Cᵀ.
template <bool kInt8, typename TA, typename TB, typename TC>
static inline void amx_nt(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const TB *B, int64_t ldb,
                          TC *C, int64_t ldc, bool accumulate) {
    constexpr int64_t E = amx_chunk<TB>();
    static_assert(amx_chunk<TA>() == E, "A and B take the same unit: bf16 pairs or int8 quads");
    const int64_t steps = round_up(K, E) / E;
    const bool transposed = N > M;  // B's rows are the row operand: the tiles hold Cᵀ
    const int64_t cols_total = transposed ? M : N;
    uint32_t *panels = static_cast<uint32_t *>(scratch(4, size_t(round_up(cols_total, 32) * steps * 64)));
    uint8_t *copy = static_cast<uint8_t *>(scratch(5, size_t(32 * steps * 64)));
    if (transposed) {
        amx_pack_panels(A, lda, M, K, steps, panels);
        amx_sweep<kInt8>(
            N, M, steps, panels, true, [&](int64_t r0, int64_t rows) { return amx_row_block(B + r0 * ldb, ldb, rows, K, steps, copy); },
            [&](const uint32_t *block, int64_t r0, int64_t rows, int64_t q0, int64_t cols) {
                amx_write(block, cols, rows, alpha, accumulate, C + q0 * ldc + r0, ldc);
            });
    } else {
        amx_pack_panels(B, ldb, N, K, steps, panels);
        amx_sweep<kInt8>(
            M, N, steps, panels, false, [&](int64_t r0, int64_t rows) { return amx_row_block(A + r0 * lda, lda, rows, K, steps, copy); },
            [&](const uint32_t *block, int64_t r0, int64_t rows, int64_t q0, int64_t cols) {
                amx_write(block, rows, cols, alpha, accumulate, C + r0 * ldc + q0, ldc);
            });
    }
}

// The entry points redfuse_simd_gemm.h declares: false (nothing done) when AMX does not pay for the
// shape or the process has no tile permission.
template <typename TA>
static inline bool amx_gemm_nt_bf16(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const uint16_t *B,
                                    int64_t ldb, float *C, int64_t ldc, bool accumulate) {
    if (M < kAmxMinRows || N < kAmxMinRows || K < 32 || !amx_granted()) return false;
    amx_nt<false>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate);
    return true;
}

static inline bool amx_gemm_nt_s8(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B, int64_t ldb,
                                  int32_t *C, int64_t ldc, bool accumulate) {
    if (M < kAmxMinRows || N < kAmxMinRows || K < 64 || !amx_granted()) return false;
    amx_nt<true>(M, N, K, 1.0f, A, lda, B, ldb, C, ldc, accumulate);
    return true;
}

// C += P V with float P rounded to bf16 (attention's P·V): P's rows are the row operand (rounded into
// the copy per 32-row block), V is packed into pair panels once per call.
static inline bool amx_gemm_nn_acc_f32_as_bf16(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const uint16_t *V,
                                               int64_t ldv, float *C, int64_t ldc) {
    if (M < kAmxMinRows || N < kAmxMinRows || K < 32 || !amx_granted()) return false;
    const int64_t steps = round_up(K, 32) / 32;
    uint32_t *panels = static_cast<uint32_t *>(scratch(4, size_t(round_up(N, 32) * steps * 64)));
    uint8_t *copy = static_cast<uint8_t *>(scratch(5, size_t(32 * steps * 64)));
    amx_pack_row_pairs(V, ldv, N, K, steps, panels);
    amx_sweep<false>(
        M, N, steps, panels, false, [&](int64_t r0, int64_t rows) { return amx_row_block(P + r0 * ldp, ldp, rows, K, steps, copy); },
        [&](const uint32_t *block, int64_t r0, int64_t rows, int64_t q0, int64_t cols) {
            amx_write(block, rows, cols, 1.0f, true, C + r0 * ldc + q0, ldc);
        });
    return true;
}

}  // namespace simd_detail
}  // namespace rfk

#undef RFK_TILE_LOAD
#undef RFK_TILE_STORE
#undef RFK_TILE_ZERO
#undef RFK_TILE_DPBF16PS
#undef RFK_TILE_DPBSSD
#undef RFK_COMPILER_BARRIER
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // RFK_SIMD_AMX
#endif  // REDFUSE_SIMD_AMX_H
