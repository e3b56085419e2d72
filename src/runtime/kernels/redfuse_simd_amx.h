/** \file redfuse_simd_amx.h
 * Hot-loop primitives for generated CPU kernels, sixth of seven texts: the tile GEMMs on AMX
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
 * Which operand is packed: the one whose packing (plus, for A, transposing the result) costs fewer
 * 16 x 16 transposes (amx_nt). For a weight GEMM (N >> M, long K) the weight rows are the row operand
 * and A is packed: the tiles compute C^T, stored transposed. For attention tiles (Q·Kᵀ with K = D,
 * P·V) A's rows are the row operand and B is packed; whole 32 x 32 blocks with alpha = 1 load and
 * store C straight from and into the accumulator tiles. Long K runs in blocks that keep a slice of
 * the row operand in L1 (amx_sweep), with the panels prefetched a step ahead (amx_block).
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
// column j at step c, pair p is (V[32c + 2p][j], V[32c + 2p + 1][j]). Two rows of 32 columns at a time:
// one vpermt2w interleaves their first 16 columns into panel t's units, another the next 16 into panel
// t + 1's (the panel count is even: columns are padded to a multiple of 32).
static inline void amx_pack_row_pairs(const uint16_t *src, int64_t ld, int64_t cols, int64_t K, int64_t steps, uint32_t *out) {
    alignas(64) static const uint16_t kInterleave[2][32] = {
        {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
        {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
    const __m512i lo_units = _mm512_load_si512(kInterleave[0]), hi_units = _mm512_load_si512(kInterleave[1]);
    for (int64_t t = 0; 16 * t < cols; t += 2) {
        int64_t n = clamp64(cols - 16 * t, 0, 32);
        __mmask32 m = n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
        for (int64_t c = 0; c < steps; ++c)
            for (int p = 0; p < 16; ++p) {
                int64_t k = 32 * c + 2 * p;
                __m512i a = k < K ? _mm512_maskz_loadu_epi16(m, src + k * ld + 16 * t) : _mm512_setzero_si512();
                __m512i b = k + 1 < K ? _mm512_maskz_loadu_epi16(m, src + (k + 1) * ld + 16 * t) : _mm512_setzero_si512();
                _mm512_storeu_si512(out + (t * steps + c) * 256 + p * 16, _mm512_permutex2var_epi16(a, lo_units, b));
                _mm512_storeu_si512(out + ((t + 1) * steps + c) * 256 + p * 16, _mm512_permutex2var_epi16(a, hi_units, b));
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
    if constexpr (std::is_same<T, float>::value) {
        // Whole rows and steps (attention's P blocks): plain loads, no per-chunk masks or bounds. The
        // masked form's clamps and mask moves were a quarter of P·V's time (128 x 128 x 256, one core).
        if (rows == 32 && K == steps * E) {
            for (int64_t r = 0; r < 32; ++r)
                for (int64_t c = 0; c < steps; ++c) {
                    const float *p = src + r * ld + c * E;
                    _mm512_storeu_si512(copy + r * stride + c * 64, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p)));
                }
            return {copy, stride};
        }
    }
    for (int64_t r = 0; r < 32; ++r)
        for (int64_t c = 0; c < steps; ++c)
            _mm512_storeu_si512(copy + r * stride + c * 64, r < rows ? amx_row_chunk(src + r * ld + c * E, K - c * E) : _mm512_setzero_si512());
    return {copy, stride};
}

// acc tiles (slice s of the rows x panel q) += rows · panels over `steps` steps of 64 bytes along K.
// The next step's two panel tiles (2 KiB, contiguous) are prefetched into L1: tile loads that miss L1
// wait for each line in turn, and the hardware prefetchers do not run ahead of them (an AMX Xeon,
// one core, panels in L2: 600-700 GFLOP/s without, 1250-1460 with; tiles all in L1: 1780).
// `ahead` (when not null) is the row operand's next K block: each step also prefetches 8 of its 256
// lines (32 rows x 8 steps), starting at line `ahead_line`, so the weights a sweep reads from memory
// arrive while the current block computes — into L2 (prefetcht1): the block reads them a step later
// through the slice copy, and L1 prefetches of weight lines compete with the panel tiles' for L1's
// fill buffers (RMSNorm->GEMM bf16 M = 2048, N = K = 4096, AMX Xeon: 3-5% faster in two sittings).
template <bool kInt8>
static inline void amx_block(const AmxRows &rows, const uint32_t *panel0, const uint32_t *panel1, int64_t steps,
                             const AmxRows *ahead = nullptr, int64_t ahead_line = 0) {
    const uint8_t *r0 = rows.base, *r1 = rows.base + 16 * rows.stride;
    for (int64_t c = 0; c < steps; ++c) {
        const char *next0 = reinterpret_cast<const char *>(panel0 + (c + 1) * 256);
        const char *next1 = reinterpret_cast<const char *>(panel1 + (c + 1) * 256);
        for (int line = 0; line < 16; ++line) {
            _mm_prefetch(next0 + 64 * line, _MM_HINT_T0);
            _mm_prefetch(next1 + 64 * line, _MM_HINT_T0);
        }
        for (int64_t i = ahead_line + 8 * c; ahead && i < ahead_line + 8 * c + 8 && i < 256; ++i)
            _mm_prefetch(reinterpret_cast<const char *>(ahead->base + (i >> 3) * ahead->stride + (i & 7) * 64), _MM_HINT_T1);
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

// Where a 32 x 32 block of results goes. Direct: C is 32-bit, untransposed, alpha is 1 and the block
// is whole, so the accumulator tiles load C (accumulate) or start at zero, and store straight into C:
// no copy, no second pass. Otherwise the tiles go through `block` (transposed there when the tiles
// hold Cᵀ) and write(block, r0, rows, q0, cols) scales, adds and masks.
struct AmxTarget {
    uint8_t *c;      // &C[0][0] of the untransposed result when direct stores are allowed, else nullptr
    int64_t stride;  // bytes between C's rows
    bool accumulate;
};

static inline void amx_start_tiles(const AmxTarget &t, bool direct, int64_t r0, int64_t q0) {
    if (direct && t.accumulate) {
        uint8_t *c = t.c + r0 * t.stride + q0 * 4;
        RFK_TILE_LOAD(0, c, t.stride);
        RFK_TILE_LOAD(1, c + 64, t.stride);
        RFK_TILE_LOAD(2, c + 16 * t.stride, t.stride);
        RFK_TILE_LOAD(3, c + 16 * t.stride + 64, t.stride);
        return;
    }
    RFK_TILE_ZERO(0);
    RFK_TILE_ZERO(1);
    RFK_TILE_ZERO(2);
    RFK_TILE_ZERO(3);
}

// The 2 x 2 accumulator tiles saved to / restored from a 4 KiB slot between blocks of K.
static inline void amx_save_tiles(uint32_t *slot) {
    RFK_TILE_STORE(0, slot, 64);
    RFK_TILE_STORE(1, slot + 256, 64);
    RFK_TILE_STORE(2, slot + 512, 64);
    RFK_TILE_STORE(3, slot + 768, 64);
}
static inline void amx_restore_tiles(const uint32_t *slot) {
    RFK_TILE_LOAD(0, slot, 64);
    RFK_TILE_LOAD(1, slot + 256, 64);
    RFK_TILE_LOAD(2, slot + 512, 64);
    RFK_TILE_LOAD(3, slot + 768, 64);
}

// Blocking of the sweep. A tile product takes 16 cycles and a 2 x 2 step loads four 1 KiB tiles, 64 bytes
// per cycle: more than L2 delivers, so one operand must come from L1. Per 32-row block, K runs in blocks
// of kAmxStepsPerBlock steps (32 rows x 512 bytes = 16 KiB of the row operand, loaded once from L2 or
// memory and then read from L1 by every column block of the chunk), and the columns in chunks of
// kAmxChunkBlocks 32-column blocks, whose accumulators (4 KiB each) wait in L1 between K blocks. The
// panels stream from L2 at half the rate, 32 bytes per cycle. When K fits one block (attention tiles:
// D <= 256) nothing is saved or restored.
constexpr int64_t kAmxStepsPerBlock = 8;  // 16 and 4 steps, 2 and 8 blocks per chunk measured slower
constexpr int64_t kAmxChunkBlocks = 4;

// The row operand's slice for K steps k0 .. k0+kn. Rows a multiple of 1 KiB apart (weights with K a
// multiple of 512, A at K = 1024 ...) put a step's 32 lines into the same few of L1's 64 sets (12 ways):
// they evict each other and every tile load goes to L2 (one core: ~500 GFLOP/s at N = K = 4096). Such
// a slice is copied to 16 KiB of consecutive rows first; it is then read from L1 by every column block.
static inline AmxRows amx_slice(const AmxRows &src, int64_t k0, int64_t kn, uint8_t *copy) {
    const uint8_t *base = src.base + k0 * 64;
    if (src.stride % 1024 != 0) return {base, src.stride};
    for (int64_t r = 0; r < 32; ++r)
        for (int64_t c = 0; c < kn; ++c)
            _mm512_store_si512(copy + (r * kn + c) * 64, _mm512_loadu_si512(base + r * src.stride + c * 64));
    return {copy, kn * 64};
}

// The sweep shared by every AMX GEMM: per 32-row block of the row operand (row_block(r0, rows) gives
// it), per chunk of 32-column blocks of the packed panels, per block of K steps, into four
// accumulator tiles; each finished block goes to C directly or through write (AmxTarget).
template <bool kInt8, typename RowBlock, typename Write>
static inline void amx_sweep(int64_t rows_total, int64_t cols_total, int64_t steps, const uint32_t *panels, bool transposed,
                             const AmxTarget &target, RowBlock &&row_block, Write &&write) {
    alignas(64) uint32_t block[32 * 32];
    alignas(64) uint32_t saved[kAmxChunkBlocks][32 * 32];
    alignas(64) uint8_t slice_copy[32 * kAmxStepsPerBlock * 64];
    amx_configure();
    for (int64_t r0 = 0; r0 < rows_total; r0 += 32) {
        int64_t rows = min64(32, rows_total - r0);
        AmxRows src = row_block(r0, rows);
        for (int64_t c0 = 0; c0 < cols_total; c0 += 32 * kAmxChunkBlocks) {
            int64_t chunk_end = min64(cols_total, c0 + 32 * kAmxChunkBlocks);
            for (int64_t k0 = 0; k0 < steps; k0 += kAmxStepsPerBlock) {
                int64_t kn = min64(kAmxStepsPerBlock, steps - k0);
                AmxRows next{src.base + (k0 + kn) * 64, src.stride};
                const AmxRows *ahead = k0 + kn < steps ? &next : nullptr;
                // A slice that only one column block reads (a weight GEMM at M <= 32 with the
                // weight's rows as the row operand) is read once: copying it would triple its traffic.
                AmxRows slice = chunk_end - c0 > 32 ? amx_slice(src, k0, kn, slice_copy) : AmxRows{src.base + k0 * 64, src.stride};
                for (int64_t q0 = c0; q0 < chunk_end; q0 += 32) {
                    int64_t cols = min64(32, cols_total - q0);
                    bool direct = target.c && rows == 32 && cols == 32;
                    uint32_t *slot = saved[(q0 - c0) / 32];
                    if (k0 == 0)
                        amx_start_tiles(target, direct, r0, q0);
                    else
                        amx_restore_tiles(slot);
                    const uint32_t *p0 = panels + ((q0 / 16) * steps + k0) * 256;
                    amx_block<kInt8>(slice, p0, p0 + steps * 256, kn, ahead, (q0 - c0) / 32 * 8 * kn);
                    if (k0 + kn < steps) {
                        amx_save_tiles(slot);
                    } else if (direct) {
                        uint8_t *c = target.c + r0 * target.stride + q0 * 4;
                        RFK_TILE_STORE(0, c, target.stride);
                        RFK_TILE_STORE(1, c + 64, target.stride);
                        RFK_TILE_STORE(2, c + 16 * target.stride, target.stride);
                        RFK_TILE_STORE(3, c + 16 * target.stride + 64, target.stride);
                    } else {
                        amx_store_block(block, transposed);
                        write(block, r0, rows, q0, cols);
                    }
                }
            }
        }
    }
    amx_release();
}

// C (+)= alpha A Bᵀ (float or int32 C). Both operands are K-contiguous, so either orientation computes
// the same dot products: A's rows as the row operand and B packed (C comes out of the tiles as it is),
// or B's rows as the row operand and A packed (the tiles hold Cᵀ, transposed on the way out). Packing
// and transposing cost one 16 x 16 transpose of 32-bit units per tile of data: B's packing takes
// N/16 * steps of them, A's M/16 * steps plus M*N/256 for the result. The cheaper wins: weight GEMMs
// (N >> M, long K) pack A, attention's S = Q·Kᵀ (K = D: few steps) packs B and stores S directly.
template <bool kInt8, typename TA, typename TB, typename TC>
static inline void amx_nt(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const TB *B, int64_t ldb,
                          TC *C, int64_t ldc, bool accumulate, bool b_input) {
    constexpr int64_t E = amx_chunk<TB>();
    static_assert(amx_chunk<TA>() == E, "A and B take the same unit: bf16 pairs or int8 quads");
    const int64_t steps = round_up(K, E) / E;
    static_assert(sizeof(TC) == 4, "the tiles store 32-bit results");
    const int64_t mt = round_up(M, 16) / 16, nt = round_up(N, 16) / 16;
    const bool transposed = mt * steps + mt * nt < nt * steps;  // B's rows are the row operand: the tiles hold Cᵀ
    const int64_t cols_total = transposed ? M : N;
    const size_t panel_bytes = size_t(round_up(cols_total, 32) * steps * 64);
    uint8_t *copy = static_cast<uint8_t *>(scratch(5, size_t(32 * steps * 64)));
    if (transposed) {
        uint32_t *panels = static_cast<uint32_t *>(scratch(4, panel_bytes));
        amx_pack_panels(A, lda, M, K, steps, panels);
        amx_sweep<kInt8>(
            N, M, steps, panels, true, AmxTarget{nullptr, 0, accumulate}, [&](int64_t r0, int64_t rows) { return amx_row_block(B + r0 * ldb, ldb, rows, K, steps, copy); },
            [&](const uint32_t *block, int64_t r0, int64_t rows, int64_t q0, int64_t cols) {
                amx_write(block, cols, rows, alpha, accumulate, C + q0 * ldc + r0, ldc);
            });
    } else {
        bool packed = false;  // B's panels kept from an earlier call in this kernel entry
        uint32_t *panels = static_cast<uint32_t *>(b_input ? cached_panels(B, ldb, N, K, kInt8 ? PanelKind::AmxInt8 : PanelKind::AmxBf16, panel_bytes, packed)
                                                           : scratch(4, panel_bytes));
        if (!packed) amx_pack_panels(B, ldb, N, K, steps, panels);
        amx_sweep<kInt8>(
            M, N, steps, panels, false, AmxTarget{alpha == 1.0f ? reinterpret_cast<uint8_t *>(C) : nullptr, ldc * 4, accumulate},
            [&](int64_t r0, int64_t rows) { return amx_row_block(A + r0 * lda, lda, rows, K, steps, copy); },
            [&](const uint32_t *block, int64_t r0, int64_t rows, int64_t q0, int64_t cols) {
                amx_write(block, rows, cols, alpha, accumulate, C + r0 * ldc + q0, ldc);
            });
    }
}

// The entry points redfuse_simd_gemm.h declares: false (nothing done) when AMX does not pay for the
// shape or the process has no tile permission.
template <typename TA>
static inline bool amx_gemm_nt_bf16(int64_t M, int64_t N, int64_t K, float alpha, const TA *A, int64_t lda, const uint16_t *B,
                                    int64_t ldb, float *C, int64_t ldc, bool accumulate, bool b_input) {
    if (M < kAmxMinRows || N < kAmxMinRows || K < 32 || !amx_granted()) return false;
    amx_nt<false>(M, N, K, alpha, A, lda, B, ldb, C, ldc, accumulate, b_input);
    return true;
}

static inline bool amx_takes_s8(int64_t M, int64_t N, int64_t K) {
    return M >= kAmxMinRows && N >= kAmxMinRows && K >= 64 && amx_granted();
}
static inline bool amx_gemm_nt_s8(int64_t M, int64_t N, int64_t K, const int8_t *A, int64_t lda, const int8_t *B, int64_t ldb,
                                  int32_t *C, int64_t ldc, bool accumulate) {
    if (!amx_takes_s8(M, N, K)) return false;
    amx_nt<true>(M, N, K, 1.0f, A, lda, B, ldb, C, ldc, accumulate, false);
    return true;
}

// C += P V with float P rounded to bf16 (attention's P·V): P's rows are the row operand (rounded into
// the copy per 32-row block), V is packed into pair panels once per call, or once per kernel entry and
// thread when V is a kernel input (v_input).
static inline bool amx_gemm_nn_acc_f32_as_bf16(int64_t M, int64_t N, int64_t K, const float *P, int64_t ldp, const uint16_t *V,
                                               int64_t ldv, float *C, int64_t ldc, bool v_input) {
    if (M < kAmxMinRows || N < kAmxMinRows || K < 32 || !amx_granted()) return false;
    const int64_t steps = round_up(K, 32) / 32;
    const size_t panel_bytes = size_t(round_up(N, 32) * steps * 64);
    bool packed = false;
    uint32_t *panels = static_cast<uint32_t *>(v_input ? cached_panels(V, ldv, N, K, PanelKind::AmxPairedV, panel_bytes, packed) : scratch(4, panel_bytes));
    uint8_t *copy = static_cast<uint8_t *>(scratch(5, size_t(32 * steps * 64)));
    if (!packed) amx_pack_row_pairs(V, ldv, N, K, steps, panels);
    amx_sweep<false>(
        M, N, steps, panels, false, AmxTarget{reinterpret_cast<uint8_t *>(C), ldc * 4, true},
        [&](int64_t r0, int64_t rows) { return amx_row_block(P + r0 * ldp, ldp, rows, K, steps, copy); },
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
