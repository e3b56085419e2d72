/** \file redfuse_cpu_rows.h
 * Whole-row primitives that generated CPU kernels call in place of element loops: 2^x of a row,
 * exp2 and sum in one sweep, the max, min or sum of a row, the next row's prefetch (the row copies
 * follow in redfuse_cpu_row_copies.h). Pasted after redfuse_cpu.h, whose semantics (exp2_f,
 * bf16_to_float) they vectorize bit for bit.
 */
#ifndef REDFUSE_CPU_ROWS_H
#define REDFUSE_CPU_ROWS_H

#ifndef REDFUSE_CPU_H
#error "redfuse_cpu_rows.h is pasted after redfuse_cpu.h (the semantics it vectorizes)"
#endif

namespace rfk {

// 2^x for a row in place: what the code generator calls for the exp2 of a float vector loop (staged
// through a small array, CpuKernelPrinter.cpp), because inside an `omp simd` loop GCC 12 builds exp2_f's
// clamp as compare-and-blend chains and its two-half scaling as nine integer and float operations
// (~22 instructions per 16 values), while AVX-512 has the whole range reduction and scaling in three.
// k = rint(x) (vrndscaleps) and r = x - k (vreduceps, exact, |r| <= 1/2); 2^r = 1 + r q(r) with q of
// degree 5: a minimax fit of (2^r - 1) / r on [-1/2, 1/2] (Remez on the relative error of 2^r with
// the constant term held at 1, so 2^k comes out exact): fit error 3.9e-9 relative (0.07 ulp), the
// rest is the Horner rounding and the final one: max 0.94 ulp over all 2^32 floats (AVX-512, checked
// once; exp2_row_test.cpp holds every path to 1 ulp on a dense sweep and a stride through all floats).
// 2^r * 2^k by vscalefps, which rounds once into the subnormals and overflows to inf. No clamp: for
// x = +-inf, vreduceps gives r = 0 and k = +-inf, so the result is 2^inf = inf and 2^-inf = 0; a NaN
// stays NaN. AVX2 has no vreduceps or vscalefps: it clamps to [-151, 129] (vmaxps/vminps pass a NaN
// that is their second operand), and scales by 2^k in two halves, as exp2_f does.
// exp2_affine_row(dst, src, n, a, b): dst[i] = 2^(src[i] * a + b), the argument a fused multiply-add
// (one rounding); dst may be src. The code generator calls it for a float vector loop whose only
// statement is `T[j] = exp2(X[j] * a + b)` into a contiguous float row (attention's score tile, a
// softmax row buffer): one pass in place of three (the argument into a staged array, exp2_row on it,
// a copy into T), attention bf16 B = 1, H = 8, L = 512, D = 64: 0.80 -> 0.70 ms (docs/tile-ir.md).
// The coefficients of q, r^6 .. r^1 (1.54697322e-4, 1.34100008e-3, 9.61803086e-3, 5.55029735e-2,
// 2.40226507e-1, 6.93147242e-1), and 2^v a vector at a time by the method above.
static constexpr float kExp2Poly[6] = {0x1.446c7ep-13f, 0x1.5f88fep-10f, 0x1.3b29e4p-7f, 0x1.c6ae2cp-5f, 0x1.ebfbe0p-3f, 0x1.62e432p-1f};
// How accurate the row primitives' 2^x is (the code generator's choice, CpuOutputPrecision.cpp
// cpu_half_accuracy_exp2): Float, the degree-6 form above (<= 1 ulp); Half, for a module whose outputs
// are all bf16, f16 or fp8: q of degree 3, r^4 .. r^1 (9.5886e-3, 5.5661e-2, 2.4025e-1, 6.9312e-1; the
// same Remez fit with the constant term held at 1, so 2^0 = 1 and 2^k stay exact), max relative error
// 2.9e-6 (~24 ulp of float) on a dense sweep of [-1/2, 1/2] evaluated in float: 170x below an f16
// output's rounding (2^-11), 670x below bf16's (2^-9), and below the float32 compute tolerance the
// check allows per element (4e-6, interp/Compare.h) relative to the terms' magnitude. Two FMAs fewer
// per 16 values: the exp pass of softmax bf16 [4096, 8192] 10-16% shorter on AMD Zen 4
// (bench/results/2026-12-06d-amd-experiments).
enum class Exp2Accuracy { Float, Half };
static constexpr float kExp2PolyHalf[4] = {0x1.3a01e4p-7f, 0x1.c9fbaep-5f, 0x1.ec0378p-3f, 0x1.62e12ep-1f};
template <Exp2Accuracy A>
struct Exp2Coefficients {
    static constexpr int kTerms = 6;
    static constexpr const float *c = kExp2Poly;
};
template <>
struct Exp2Coefficients<Exp2Accuracy::Half> {
    static constexpr int kTerms = 4;
    static constexpr const float *c = kExp2PolyHalf;
};
#if defined(__AVX512F__) && defined(__AVX512DQ__)
template <Exp2Accuracy A = Exp2Accuracy::Float>
struct Exp2x16 {
    using C = Exp2Coefficients<A>;
    static_assert(C::kTerms == 4 || C::kTerms == 6, "the Horner steps below are written out");
    __m512 c[C::kTerms];  // named by constant indices only: kept in registers
    const __m512 one = _mm512_set1_ps(1.0f);
    Exp2x16() {
        for (int t = 0; t < C::kTerms; ++t) c[t] = _mm512_set1_ps(C::c[t]);
    }
    RFK_ALWAYS_INLINE __m512 operator()(__m512 v) const {
        // The zero-masking forms under an all-ones mask: the plain intrinsics pass _mm512_undefined_ps,
        // which GCC 12 at -O3 -Wall reports as maybe uninitialized; the instructions are the same.
        const __mmask16 all = 0xFFFF;
        __m512 k = _mm512_maskz_roundscale_ps(all, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_maskz_reduce_ps(all, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 p = _mm512_fmadd_ps(c[0], r, c[1]);
        p = _mm512_fmadd_ps(p, r, c[2]);
        p = _mm512_fmadd_ps(p, r, c[3]);
        if constexpr (C::kTerms == 6) {
            p = _mm512_fmadd_ps(p, r, c[4]);
            p = _mm512_fmadd_ps(p, r, c[5]);
        }
        p = _mm512_fmadd_ps(p, r, one);
        return _mm512_maskz_scalef_ps(all, p, k);
    }
};
#elif defined(__AVX2__) && defined(__FMA__)
// AVX2: `operator()` is one vector by the clamped method above; `lockstep<U>` is U vectors at once,
// each step applied to all U before the next (breadth-first), with a shorter fast path.
// Why lockstep: one vector's 2^v is a chain of ~20 dependent operations (~50 cycles), and GCC emits
// an unrolled loop's vectors one whole chain after another; the out-of-order window then holds the
// chains of about four vectors, so the loop ran at the chain's latency over four — 10.7 cycles per
// vector of 8 where the FMA units need 4.5 (AMD Zen 3, a 64 x 256 attention score tile in L1).
// Interleaved, the window holds U chains side by side.
// The fast path, taken when every lane has |v - 1| < 126.5 (so k = rint(v) is in [-125, 127] and no
// lane is NaN): k by the magic-number rounding t = v + 1.5·2^23 (round to nearest even, as vroundps;
// k - t + 1.5·2^23 exact), and p·2^k by adding k to p's exponent field (t's bits shifted left 23 are
// k << 23 modulo 2^32: 1.5·2^23's low nine bits are zero). p = 2^r is in [2^-1/2, 2^1/2], so p·2^k is
// normal and the exact product the two-halves scaling computes: the same bits (checked on every
// float of a dense sweep, exp2_row_test.cpp). Lanes outside (results subnormal, overflowing, inf,
// NaN) send the U vectors through the clamped method. U = 3, the same tile: 5.7 cycles per vector.
template <Exp2Accuracy A = Exp2Accuracy::Float>
struct Exp2x8 {
    using C = Exp2Coefficients<A>;
    static_assert(C::kTerms == 4 || C::kTerms == 6, "the Horner steps below are written out");
    __m256 c[C::kTerms];  // named by constant indices only: kept in registers
    const __m256 one = _mm256_set1_ps(1.0f), lo = _mm256_set1_ps(-151.0f), hi = _mm256_set1_ps(129.0f);
    const __m256i bias = _mm256_set1_epi32(127);
    Exp2x8() {
        for (int t = 0; t < C::kTerms; ++t) c[t] = _mm256_set1_ps(C::c[t]);
    }
    // q(r) r + 1 by Horner, the U vectors in lockstep.
    template <int U>
    RFK_ALWAYS_INLINE void poly(const __m256 *r, __m256 *p) const {
        for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(c[0], r[u], c[1]);
        for (int t = 2; t < C::kTerms; ++t) for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(p[u], r[u], c[t]);
        for (int u = 0; u < U; ++u) p[u] = _mm256_fmadd_ps(p[u], r[u], one);
    }
    // The clamped method, in place.
    template <int U>
    RFK_ALWAYS_INLINE void clamped(__m256 *v) const {
        __m256 k[U], p[U];
        for (int u = 0; u < U; ++u) v[u] = _mm256_min_ps(hi, _mm256_max_ps(lo, v[u]));
        for (int u = 0; u < U; ++u) k[u] = _mm256_round_ps(v[u], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        for (int u = 0; u < U; ++u) v[u] = _mm256_sub_ps(v[u], k[u]);
        poly<U>(v, p);
        // k in [-151, 129]: both halves are normal scale factors, and p * 2^k1 is exact.
        for (int u = 0; u < U; ++u) {
            __m256i ki = _mm256_cvtps_epi32(k[u]), k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
            __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
            __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
            v[u] = _mm256_mul_ps(_mm256_mul_ps(p[u], s1), s2);
        }
    }
    // 2^v for U vectors, in place.
    template <int U>
    RFK_ALWAYS_INLINE void lockstep(__m256 *v) const {
        const __m256 magic = _mm256_set1_ps(0x1.8p23f), center = one, half_width = _mm256_set1_ps(126.5f);
        const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        __m256 outside = _mm256_setzero_ps();
        for (int u = 0; u < U; ++u)
            outside = _mm256_or_ps(outside, _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(v[u], center), magnitude), half_width, _CMP_NLT_UQ));
        if (__builtin_expect(_mm256_movemask_ps(outside) != 0, 0)) return clamped<U>(v);
        __m256 t[U], r[U], p[U];
        for (int u = 0; u < U; ++u) t[u] = _mm256_add_ps(v[u], magic);
        for (int u = 0; u < U; ++u) r[u] = _mm256_sub_ps(v[u], _mm256_sub_ps(t[u], magic));
        poly<U>(r, p);
        for (int u = 0; u < U; ++u)
            v[u] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p[u]), _mm256_slli_epi32(_mm256_castps_si256(t[u]), 23)));
    }
    RFK_ALWAYS_INLINE __m256 operator()(__m256 v) const {
        clamped<1>(&v);
        return v;
    }
};
// Vectors per lockstep group (above).
constexpr int kExp2Lockstep = 3;
#endif
template <bool kAffine, Exp2Accuracy A>
static inline void exp2_row_impl(float *dst, const float *src, int64_t n, float a, float b) {
    int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    const Exp2x16<A> e;
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    auto vexp2 = [&](__m512 v) RFK_ALWAYS_INLINE { return e(kAffine ? _mm512_fmadd_ps(v, va, vb) : v); };  // inlined: called, it is one exp2 at a time
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = vexp2(_mm512_loadu_ps(src + i)), x1 = vexp2(_mm512_loadu_ps(src + i + 16));
        _mm512_storeu_ps(dst + i, x0);
        _mm512_storeu_ps(dst + i + 16, x1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(dst + i, m, vexp2(_mm512_maskz_loadu_ps(m, src + i)));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const Exp2x8<A> e;
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    auto group = [&](auto vectors) RFK_ALWAYS_INLINE {
        constexpr int U = decltype(vectors)::value;
        __m256 v[U];
        for (int u = 0; u < U; ++u) {
            v[u] = _mm256_loadu_ps(src + i + 8 * u);
            if (kAffine) v[u] = _mm256_fmadd_ps(v[u], va, vb);
        }
        e.template lockstep<U>(v);
        for (int u = 0; u < U; ++u) _mm256_storeu_ps(dst + i + 8 * u, v[u]);
    };
    for (; i + 8 * kExp2Lockstep <= n; i += 8 * kExp2Lockstep) group(std::integral_constant<int, kExp2Lockstep>{});
    for (; i + 8 <= n; i += 8) group(std::integral_constant<int, 1>{});
#endif
    (void)a;
    (void)b;
    for (; i < n; ++i) dst[i] = exp2_f(kAffine ? std::fma(src[i], a, b) : src[i]);
}
template <Exp2Accuracy A = Exp2Accuracy::Float>
static inline void exp2_row(float *x, int64_t n) { exp2_row_impl<false, A>(x, x, n, 1.0f, 0.0f); }
template <Exp2Accuracy A = Exp2Accuracy::Float>
static inline void exp2_affine_row(float *dst, const float *src, int64_t n, float a, float b) {
    exp2_row_impl<true, A>(dst, src, n, a, b);
}

// Asks for [p, p + bytes) in L2, one prefetch per line (locality 2: prefetcht1 on x86-64): the next
// row's input, requested while the current row is swept again from the caches (PrefetchNextRows.cpp).
static inline void prefetch_l2(const void *p, int64_t bytes) {
    const char *c = static_cast<const char *>(p);
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 2);
}

// A range of input held to be asked for into L2 later, a few lines at a time (RowStream between its
// streamed stores, SweepPrefetch between the blocks of a sweep): the next line and the bytes left.
struct PrefetchRange {
    const char *at = nullptr;
    int64_t left = 0;
    int64_t lines() const { return (left + 63) / 64; }
    // The next `n` lines (fewer when less is left).
    void ask(int64_t n) {
        for (int64_t l = 0; l < n && left > 0; l++, at += 64, left -= 64) __builtin_prefetch(at, 0, 2);
    }
    // All that is left.
    void rest() {
        if (left > 0) prefetch_l2(at, left);
        left = 0;
    }
};

// A range held for the blocked-sum vector loop that follows (a tile's last sweep; PrefetchNextRows.cpp
// rule 2, the next tile): the loop spreads its lines over its blocks, a few per block (spread, then
// next() per block, then rest() for any left), where a burst of one prefetch per line before the loop
// filled the core's miss queue while the loop computed from L1 (variance [4096, 8192], AMD Zen 4: 10-15%
// slower). A loop of another form asks for the held range all at once before it (rest()); a range
// still held when the next is held is asked for then. Hints only: no value depends on them.
class SweepPrefetch {
  public:
    void hold(const void *p, int64_t bytes) {
        range_.rest();
        range_ = {static_cast<const char *>(p), bytes};
    }
    // The loop that follows has `blocks` blocks: as many lines per block as cover the range.
    void spread(int64_t blocks) { per_ = blocks > 0 ? (range_.lines() + blocks - 1) / blocks : 0; }
    void next() { range_.ask(per_); }
    void rest() { range_.rest(); }

  private:
    PrefetchRange range_;
    int64_t per_ = 0;
};

// Σ_i (2^((x_i + c) · a) + d) for the n elements x_i of a float or bf16 row, each 2^((x_i + c) · a)
// also stored to dst[i] when dst is not null (dst may be src when src is float): the exp2 loop of a
// softmax — its sum, and the terms kept for its epilogue — in one pass over the row, where the staged
// form (CpuKernelPrinter.cpp print_staged_exp2) makes three: the argument into an array, exp2_row on it, a
// loop summing and copying it (softmax bf16 [4096, 4096] on an AMX Xeon: see docs/tile-ir.md). The
// argument is rounded as the inline form rounds it (the sum, then the product); 2^v as exp2_row; the
// sum in two vector accumulators (an order of its own, as a vector reduction's is).
static inline RFK_ALWAYS_INLINE float row_value(const float *p, int64_t i) { return p[i]; }
static inline RFK_ALWAYS_INLINE float row_value(const uint16_t *p, int64_t i) { return bf16_to_float(p[i]); }
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
static inline RFK_ALWAYS_INLINE __m512 row_vector(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline RFK_ALWAYS_INLINE __m512 row_vector(const uint16_t *p, __mmask16 m) {
    // The zero-masking forms of the widening and the shift, for GCC 12's -Wmaybe-uninitialized.
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline RFK_ALWAYS_INLINE __m256 row_vector(const float *p) { return _mm256_loadu_ps(p); }
static inline RFK_ALWAYS_INLINE __m256 row_vector(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16));
}
#endif
template <bool kOffset, Exp2Accuracy A, typename T>
static inline float exp2_row_sum_impl(float *dst, const T *src, int64_t n, float c, float a, float d) {
    int64_t i = 0;
    float sum = 0.0f;
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    const Exp2x16<A> e;
    const __m512 vc = _mm512_set1_ps(c), va = _mm512_set1_ps(a), vd = _mm512_set1_ps(d);
    const __mmask16 all = 0xFFFF;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        __m512 e0 = e(_mm512_mul_ps(_mm512_add_ps(row_vector(src + i, all), vc), va));
        __m512 e1 = e(_mm512_mul_ps(_mm512_add_ps(row_vector(src + i + 16, all), vc), va));
        if (dst) {
            _mm512_storeu_ps(dst + i, e0);
            _mm512_storeu_ps(dst + i + 16, e1);
        }
        s0 = _mm512_add_ps(s0, kOffset ? _mm512_add_ps(e0, vd) : e0);
        s1 = _mm512_add_ps(s1, kOffset ? _mm512_add_ps(e1, vd) : e1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? all : __mmask16((1u << (n - i)) - 1u);
        __m512 e0 = e(_mm512_mul_ps(_mm512_add_ps(row_vector(src + i, m), vc), va));
        if (dst) _mm512_mask_storeu_ps(dst + i, m, e0);
        s0 = _mm512_mask_add_ps(s0, m, s0, kOffset ? _mm512_add_ps(e0, vd) : e0);
    }
    // The halves added down to one lane (the zero-masking extracts: _mm512_reduce_add_ps and the casts
    // pass undefined vectors, which GCC 12 reports as maybe uninitialized).
    const __m512 s = _mm512_add_ps(s0, s1);
    __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, s, 0), _mm512_maskz_extractf32x8_ps(0xFF, s, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    sum = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
#elif defined(__AVX2__) && defined(__FMA__)
    const Exp2x8<A> e;
    const __m256 vc = _mm256_set1_ps(c), va = _mm256_set1_ps(a), vd = _mm256_set1_ps(d);
    __m256 s0 = _mm256_setzero_ps();
    // The vectors of a lockstep group are added to s0 in row order: the sum of one vector at a time.
    auto group = [&](auto vectors) RFK_ALWAYS_INLINE {
        constexpr int U = decltype(vectors)::value;
        __m256 v[U];
        for (int u = 0; u < U; ++u) v[u] = _mm256_mul_ps(_mm256_add_ps(row_vector(src + i + 8 * u), vc), va);
        e.template lockstep<U>(v);
        for (int u = 0; u < U; ++u) {
            if (dst) _mm256_storeu_ps(dst + i + 8 * u, v[u]);
            s0 = _mm256_add_ps(s0, kOffset ? _mm256_add_ps(v[u], vd) : v[u]);
        }
    };
    for (; i + 8 * kExp2Lockstep <= n; i += 8 * kExp2Lockstep) group(std::integral_constant<int, kExp2Lockstep>{});
    for (; i + 8 <= n; i += 8) group(std::integral_constant<int, 1>{});
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s0);
    for (float l : lanes) sum += l;
#endif
    for (int64_t k = i; k < n; ++k) {
        float v = exp2_f((row_value(src, k) + c) * a);
        if (dst) dst[k] = v;
        sum += kOffset ? v + d : v;
    }
    return sum;
}
// Without the offset when it is 0 (a sum of terms of one sign, LowerPass.cpp sum_shifts_terms: softmax's
// denominator): v + 0 = v for every v but -0, which exp2 never returns, so the sum is the same.
template <Exp2Accuracy A = Exp2Accuracy::Float, typename T>
static inline float exp2_row_sum(float *dst, const T *src, int64_t n, float c, float a, float d) {
    return d == 0.0f ? exp2_row_sum_impl<false, A>(dst, src, n, c, a, d) : exp2_row_sum_impl<true, A>(dst, src, n, c, a, d);
}

// max(init, x_0 c, .., x_{n-1} c) (row_max) or the min, NaN when init or any product is NaN (rfk::max's
// rule), for a float or bf16 row x: what the code generator calls for `t = max(t, S[k(j)] * c)` (c = 1
// when absent; CpuKernelPrinter.cpp print_row_extreme) in place of an `omp simd` reduction with a NaN flag
// per element (a compare and two blends per 16 values). For a finite c > 0, max_i(x_i c) = (max_i x_i) c
// exactly (rounding is monotonic) and x_i c is NaN iff x_i is; for a finite c < 0 it is the min times
// c; other c (0, inf, NaN) go element by element. bf16 rows are reduced on their 16-bit patterns, 32 per
// instruction, unwidened: key(u) = u ^ ((u >>s 15) & 0x7FFF) orders them as signed integers as their
// values are ordered (-NaN < -inf < .. < -0 < +0 < .. < +inf < +NaN) and is its own inverse; the row
// has a NaN iff its largest key is above key(+inf) = 0x7F80 or its smallest below key(-inf) = -0x7F81,
// so one vpmaxsw and one vpminsw per 32 values give both. Float rows: vmaxps/vminps and an unordered
// compare. -0 orders below +0 in bf16 rows (max(-0, +0) = +0).
static inline RFK_ALWAYS_INLINE int bf16_order_key(uint16_t u) { return static_cast<int16_t>(u ^ ((u & 0x8000u) ? 0x7FFFu : 0u)); }
template <bool kMax>
static inline float row_extreme(const uint16_t *p, int64_t n) {
    int hi = -32768, lo = 32767;
    int64_t i = 0;
#if defined(__AVX512BW__)
    const __m512i magnitude = _mm512_set1_epi16(0x7FFF);
    __m512i vhi = _mm512_set1_epi16(-32768), vlo = _mm512_set1_epi16(32767);
    for (; i + 32 <= n; i += 32) {
        const __m512i u = _mm512_loadu_si512(p + i);
        const __m512i key = _mm512_xor_si512(u, _mm512_and_si512(_mm512_srai_epi16(u, 15), magnitude));
        vhi = _mm512_max_epi16(vhi, key);
        vlo = _mm512_min_epi16(vlo, key);
    }
    // Down to 8 lanes, then phminposuw: as unsigned, s ^ 0x8000 keeps the order of s, s ^ 0x7FFF reverses it.
    const __m256i h8 = _mm256_max_epi16(_mm512_maskz_extracti64x4_epi64(0xF, vhi, 0), _mm512_maskz_extracti64x4_epi64(0xF, vhi, 1));
    const __m256i l8 = _mm256_min_epi16(_mm512_maskz_extracti64x4_epi64(0xF, vlo, 0), _mm512_maskz_extracti64x4_epi64(0xF, vlo, 1));
    const __m128i h4 = _mm_max_epi16(_mm256_castsi256_si128(h8), _mm256_extracti128_si256(h8, 1));
    const __m128i l4 = _mm_min_epi16(_mm256_castsi256_si128(l8), _mm256_extracti128_si256(l8, 1));
    hi = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(h4, _mm_set1_epi16(0x7FFF)))) ^ 0x7FFF);
    lo = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(l4, _mm_set1_epi16(-32768)))) ^ 0x8000);
#elif defined(__AVX2__)
    // The same on 16 lanes. Without it GCC widens every key to 32 bits (vpmovsxwd, two halves): the
    // bf16 row max was 15% of softmax bf16 [4096, 1024] on an AMD Zen 3.
    const __m256i magnitude = _mm256_set1_epi16(0x7FFF);
    __m256i vhi = _mm256_set1_epi16(-32768), vlo = _mm256_set1_epi16(32767);
    for (; i + 16 <= n; i += 16) {
        const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + i));
        const __m256i key = _mm256_xor_si256(u, _mm256_and_si256(_mm256_srai_epi16(u, 15), magnitude));
        vhi = _mm256_max_epi16(vhi, key);
        vlo = _mm256_min_epi16(vlo, key);
    }
    const __m128i h4 = _mm_max_epi16(_mm256_castsi256_si128(vhi), _mm256_extracti128_si256(vhi, 1));
    const __m128i l4 = _mm_min_epi16(_mm256_castsi256_si128(vlo), _mm256_extracti128_si256(vlo, 1));
    hi = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(h4, _mm_set1_epi16(0x7FFF)))) ^ 0x7FFF);
    lo = static_cast<int16_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(l4, _mm_set1_epi16(-32768)))) ^ 0x8000);
#endif
    for (; i < n; ++i) hi = std::max(hi, bf16_order_key(p[i])), lo = std::min(lo, bf16_order_key(p[i]));
    if (n <= 0) return kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    if (hi > 0x7F80 || lo < -0x7F81) return std::numeric_limits<float>::quiet_NaN();
    return bf16_to_float(static_cast<uint16_t>(bf16_order_key(static_cast<uint16_t>(kMax ? hi : lo))));
}
template <bool kMax>
static inline float row_extreme(const float *p, int64_t n) {
    float r = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    bool nan = false;
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512 a0 = _mm512_set1_ps(r), a1 = a0;
    __mmask16 unordered = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 x0 = _mm512_loadu_ps(p + i), x1 = _mm512_loadu_ps(p + i + 16);
        a0 = kMax ? _mm512_maskz_max_ps(0xFFFF, a0, x0) : _mm512_maskz_min_ps(0xFFFF, a0, x0);
        a1 = kMax ? _mm512_maskz_max_ps(0xFFFF, a1, x1) : _mm512_maskz_min_ps(0xFFFF, a1, x1);
        unordered = _kor_mask16(unordered, _mm512_cmp_ps_mask(x0, x1, _CMP_UNORD_Q));
    }
    // Down to one lane. The zero-masking forms: GCC 12's plain ones pass undefined vectors (see exp2_row_sum).
    const __m512 a = kMax ? _mm512_maskz_max_ps(0xFFFF, a0, a1) : _mm512_maskz_min_ps(0xFFFF, a0, a1);
    const __m256 a8 = _mm512_maskz_extractf32x8_ps(0xFF, a, 0), b8 = _mm512_maskz_extractf32x8_ps(0xFF, a, 1);
    __m128 q = _mm256_castps256_ps128(kMax ? _mm256_max_ps(a8, b8) : _mm256_min_ps(a8, b8));
    const __m128 q1 = _mm256_extractf128_ps(kMax ? _mm256_max_ps(a8, b8) : _mm256_min_ps(a8, b8), 1);
    q = kMax ? _mm_max_ps(q, q1) : _mm_min_ps(q, q1);
    q = kMax ? _mm_max_ps(q, _mm_movehl_ps(q, q)) : _mm_min_ps(q, _mm_movehl_ps(q, q));
    r = _mm_cvtss_f32(kMax ? _mm_max_ss(q, _mm_movehdup_ps(q)) : _mm_min_ss(q, _mm_movehdup_ps(q)));
    nan = unordered != 0;
#elif defined(__AVX2__)
    // The same on 8 lanes. Without it GCC keeps the scalar loop below (the NaN flag's short circuit): on
    // an AMD Zen 3 (AVX2 only) that loop was 42% of f32 attention's row work (the score tile's row max).
    __m256 a0 = _mm256_set1_ps(r), a1 = a0, unordered = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        const __m256 x0 = _mm256_loadu_ps(p + i), x1 = _mm256_loadu_ps(p + i + 8);
        a0 = kMax ? _mm256_max_ps(a0, x0) : _mm256_min_ps(a0, x0);
        a1 = kMax ? _mm256_max_ps(a1, x1) : _mm256_min_ps(a1, x1);
        unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x0, x1, _CMP_UNORD_Q));
    }
    const __m256 a = kMax ? _mm256_max_ps(a0, a1) : _mm256_min_ps(a0, a1);
    __m128 q = _mm256_castps256_ps128(a);
    const __m128 q1 = _mm256_extractf128_ps(a, 1);
    q = kMax ? _mm_max_ps(q, q1) : _mm_min_ps(q, q1);
    q = kMax ? _mm_max_ps(q, _mm_movehl_ps(q, q)) : _mm_min_ps(q, _mm_movehl_ps(q, q));
    r = _mm_cvtss_f32(kMax ? _mm_max_ss(q, _mm_movehdup_ps(q)) : _mm_min_ss(q, _mm_movehdup_ps(q)));
    nan = _mm256_movemask_ps(unordered) != 0;
#endif
    for (; i < n; ++i) nan = nan || p[i] != p[i], r = kMax ? (p[i] > r ? p[i] : r) : (p[i] < r ? p[i] : r);
    return nan ? std::numeric_limits<float>::quiet_NaN() : r;
}
template <bool kMax, typename T>
static inline float row_extreme_scaled(const T *p, int64_t n, float c, float init) {
    float r = init;
    bool nan = init != init;
    if (c != 0.0f && std::fabs(c) < std::numeric_limits<float>::infinity()) {
        const float v = (kMax == (c > 0.0f) ? row_extreme<true>(p, n) : row_extreme<false>(p, n)) * c;
        return nan || v != v ? std::numeric_limits<float>::quiet_NaN() : kMax ? (v > r ? v : r) : (v < r ? v : r);
    }
    for (int64_t i = 0; i < n; ++i) {
        const float v = row_value(p, i) * c;
        nan = nan || v != v, r = kMax ? (v > r ? v : r) : (v < r ? v : r);
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : r;
}
template <typename T> static inline float row_max(const T *p, int64_t n, float c, float init) { return row_extreme_scaled<true>(p, n, c, init); }
template <typename T> static inline float row_min(const T *p, int64_t n, float c, float init) { return row_extreme_scaled<false>(p, n, c, init); }

// x_0 + .. + x_{n-1} for a float or bf16 row, summed in float: what the code generator calls for an
// `omp simd` loop `t += S[k(j)]` (CpuKernelPrinter.cpp print_row_sum). Four vector partial sums, combined
// in a tree; GCC's own ending of that reduction added its 16 lanes one after another from the stack
// (16 dependent scalar adds per row of a 256-wide tile in attention's row sums). Any order is a valid
// order for the reduction; this one is fixed, so results repeat run to run.
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
static inline RFK_ALWAYS_INLINE __m512 row_load16(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline RFK_ALWAYS_INLINE __m512 row_load16(const uint16_t *p, __mmask16 m) {
    // The zero-masking forms: GCC 12's plain ones pass undefined vectors (see exp2_row_sum).
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(m, p)), 16));
}
#elif defined(__AVX2__)
static inline RFK_ALWAYS_INLINE __m256 row_load8(const float *p) { return _mm256_loadu_ps(p); }
static inline RFK_ALWAYS_INLINE __m256 row_load8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16));
}
#endif
template <typename T>
static inline float row_sum(const T *p, int64_t n) {
    int64_t i = 0;
    float r = 0.0f;
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, row_load16(p + i, 0xFFFF));
        a1 = _mm512_add_ps(a1, row_load16(p + i + 16, 0xFFFF));
        a2 = _mm512_add_ps(a2, row_load16(p + i + 32, 0xFFFF));
        a3 = _mm512_add_ps(a3, row_load16(p + i + 48, 0xFFFF));
    }
    for (; i < n; i += 16) {
        const int64_t left = n - i;
        a0 = _mm512_add_ps(a0, row_load16(p + i, left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u)));
    }
    const __m512 a = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    const __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, a, 0), _mm512_maskz_extractf32x8_ps(0xFF, a, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    r = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
#elif defined(__AVX2__)
    // The same on 8 lanes, then the rest element by element. GCC's `omp simd` reduction kept one
    // vector sum (each add waiting on the one before: 32 dependent adds for a 256-wide tile's row) and
    // ended with its 8 lanes added one after another.
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, row_load8(p + i));
        a1 = _mm256_add_ps(a1, row_load8(p + i + 8));
        a2 = _mm256_add_ps(a2, row_load8(p + i + 16));
        a3 = _mm256_add_ps(a3, row_load8(p + i + 24));
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, row_load8(p + i));
    const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    r = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
    for (; i < n; ++i) r += row_value(p, i);
#else
#if defined(_OPENMP)
#pragma omp simd reduction(+ : r)
#endif
    for (int64_t j = 0; j < n; ++j) r += row_value(p, j);
    i = n;
#endif
    (void)i;
    return r;
}

}  // namespace rfk

#endif  // REDFUSE_CPU_ROWS_H
