/** \file redfuse_cpu_rows.h
 * Whole-row primitives that generated CPU kernels call in place of element loops: 2^x of a row,
 * exp2 and sum in one sweep, the max or min of a row, row copies into f32/bf16 outputs (streamed or
 * not) and the worker's RowStream of chunked copies. Pasted after redfuse_cpu.h, whose semantics
 * (exp2_f, bf16_to_float, store_bf16) they vectorize bit for bit.
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

// What a row copy stores of each float: the value (Unscaled), or the value times one float, rounded
// to float as the product of a vector loop is (Scaled: a row output y = t · r whose terms t were
// kept, multiplied while they are stored instead of in a pass of their own; ScaleRowCopies.cpp).
struct Unscaled {
    float operator()(float x) const { return x; }
#if defined(__AVX512F__)
    __m512 operator()(__m512 x) const { return x; }
#endif
#if defined(__AVX__)
    __m256 operator()(__m256 x) const { return x; }
#endif
};
struct Scaled {
    float by;
    float operator()(float x) const { return x * by; }
#if defined(__AVX512F__)
    __m512 operator()(__m512 x) const { return _mm512_mul_ps(x, _mm512_set1_ps(by)); }
#endif
#if defined(__AVX__)
    __m256 operator()(__m256 x) const { return _mm256_mul_ps(x, _mm256_set1_ps(by)); }
#endif
};

// A row of float results into an f32 output. `stream`: non-temporal stores (no read-for-ownership,
// no cache pollution) for outputs larger than the caches; plain copies otherwise.
template <typename Scale = Unscaled>
static inline void copy_row_f32(float *dst, const float *src, int64_t n, bool stream, Scale scale = Scale{}) {
#if defined(__AVX512F__) || defined(__AVX__)
    if (stream && n >= 64) {
#if defined(__AVX512F__)
        const int64_t w = 16;
#else
        const int64_t w = 8;
#endif
        int64_t i = 0;
        while (i < n && (reinterpret_cast<uintptr_t>(dst + i) % (4 * w)) != 0) {
            dst[i] = scale(src[i]);
            i++;
        }
        for (; i + w <= n; i += w) {
#if defined(__AVX512F__)
            _mm512_stream_ps(dst + i, scale(_mm512_loadu_ps(src + i)));
#else
            _mm256_stream_ps(dst + i, scale(_mm256_loadu_ps(src + i)));
#endif
        }
        for (; i < n; i++) dst[i] = scale(src[i]);
        _mm_sfence();
        return;
    }
#endif
    (void)stream;
    if constexpr (std::is_same_v<Scale, Unscaled>) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    } else {
#if defined(_OPENMP)
#pragma omp simd
#endif
        for (int64_t i = 0; i < n; i++) dst[i] = scale(src[i]);
    }
}

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

// A row of float results into a bf16 output, each rounded as store_bf16(float) rounds it, bit for bit.
// With AVX512_BF16: one vcvtneps2bf16 per 16 values (round to nearest even on the bits, like
// store_bf16), except that the instruction flushes denormals to zero, gives inf where a finite value
// rounds past the largest bf16 (store_bf16 saturates) and keeps a NaN's payload (store_bf16 gives
// the canonical quiet NaN): a vector holding any of those is converted element by element. `stream`:
// non-temporal stores for outputs larger than the caches, as copy_row_f32.
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
// The lanes of x that vcvtneps2bf16 would not round as store_bf16 does: denormals (0 < |x| < 2^-126),
// and values rounding up to inf or past (finite overflow, inf, NaN). With AVX512DQ the denormals and
// NaN are one vfpclassps (classes 0xA1: QNaN, denormal, SNaN) and the rest one float compare of |x|
// with the smallest magnitude that rounds past the largest bf16 (bits 0x7F7F8000; inf is above it):
// three vector operations per 16 values instead of four and a mask merge — softmax bf16 spends as
// much in this check as in its exp2 (AMX Xeon, [4096, 4096]).
static inline __mmask16 bf16_rare_lanes(__m512 x) {
#if defined(__AVX512DQ__)
    const __m512 past = _mm512_castsi512_ps(_mm512_set1_epi32(0x7F7F8000));
    return _mm512_fpclass_ps_mask(x, 0xA1) | _mm512_cmp_ps_mask(_mm512_abs_ps(x), past, _CMP_GE_OQ);
#else
    const __m512i mag = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
    return _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(mag, mag), mag, _mm512_set1_epi32(0x00800000)) |
           _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(0x7F7F8000));
#endif
}
// Whether either of two vectors (a 64-byte line of bf16 results) has a rare lane: with AVX512DQ the
// magnitude test runs once, on the larger of the two magnitudes (vmaxps passes its second operand
// for a NaN, which vfpclassps reports anyway).
static inline bool bf16_rare_pair(__m512 lo, __m512 hi) {
#if defined(__AVX512DQ__)
    const __m512 past = _mm512_castsi512_ps(_mm512_set1_epi32(0x7F7F8000));
    const __mmask16 cls = _mm512_fpclass_ps_mask(lo, 0xA1) | _mm512_fpclass_ps_mask(hi, 0xA1);
    const __m512 larger = _mm512_maskz_max_ps(0xFFFF, _mm512_abs_ps(lo), _mm512_abs_ps(hi));  // zero-masking: GCC 12 -Wmaybe-uninitialized
    return (cls | _mm512_cmp_ps_mask(larger, past, _CMP_GE_OQ)) != 0;
#else
    return (bf16_rare_lanes(lo) | bf16_rare_lanes(hi)) != 0;
#endif
}
#endif

#if defined(__AVX2__)
// Eight floats rounded to bf16 exactly as store_bf16 rounds each (round to nearest even on the bits,
// NaN -> the quiet NaN 0x7FC0, inf kept, finite values rounding past the largest bf16 saturate to it),
// widened to 32 bits: the branch-free formula of store_bf16, lane by lane. mag <= 0x7FFFFFFF, so the
// signed compares order magnitudes as unsigned ones would.
static inline RFK_ALWAYS_INLINE __m256i bf16_bits_avx2(__m256 x) {
    const __m256i u = _mm256_castps_si256(x), mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(mag, 16), _mm256_set1_epi32(1));
    __m256i out = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x7FFF)), odd), 16);
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(0x7F7F), _mm256_cmpgt_epi32(out, _mm256_set1_epi32(0x7F7F)));
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(0x7F80), _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F800000)));
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(0x7FC0), _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F800000)));
    return _mm256_or_si256(out, _mm256_srli_epi32(_mm256_andnot_si256(mag, u), 16));  // the sign bit, at bit 15
}
// The same for a lane whose magnitude is below 0x7F7F8000 (no NaN, no inf, no rounding past the
// largest bf16), sign and all in one add: (u + 0x7FFF + bit 16 of u) >> 16. The carry of the rounding
// stays below bit 31 there (mag + 0x8000 < 0x7F800000), so the sign bit lands at bit 15 untouched and
// denormals round as store_bf16 rounds them (it does not flush them). Five operations a vector
// against the full formula's fifteen.
static inline RFK_ALWAYS_INLINE __m256i bf16_bits_plain_avx2(__m256i u) {
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd), 16);
}
// Sixteen floats as sixteen bf16 values in order (vpackusdw packs within 128-bit halves: reordered).
// When no lane of either vector has a magnitude at or past 0x7F7F8000 (one test of the larger of the
// two magnitudes), the short form above; otherwise the full formula. Softmax bf16 [4096, 1024] on an
// AMD Zen 3 spent about 40% of its samples in the full formula (docs/tile-ir.md).
static inline RFK_ALWAYS_INLINE __m256i bf16_pack_avx2(__m256 lo, __m256 hi) {
    const __m256i ul = _mm256_castps_si256(lo), uh = _mm256_castps_si256(hi), magnitude = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i larger = _mm256_max_epi32(_mm256_and_si256(ul, magnitude), _mm256_and_si256(uh, magnitude));
    const __m256i rare = _mm256_cmpgt_epi32(larger, _mm256_set1_epi32(0x7F7F7FFF));
    const __m256i packed = _mm256_testz_si256(rare, rare) ? _mm256_packus_epi32(bf16_bits_plain_avx2(ul), bf16_bits_plain_avx2(uh))
                                                          : _mm256_packus_epi32(bf16_bits_avx2(lo), bf16_bits_avx2(hi));
    return _mm256_permute4x64_epi64(packed, 0xD8);
}
#endif

template <typename Scale = Unscaled>
static inline void copy_row_bf16(uint16_t *dst, const float *src, int64_t n, bool stream, Scale scale = Scale{}) {
    int64_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
    if (stream)
        while (i < n && (reinterpret_cast<uintptr_t>(dst + i) % 32) != 0) {
            dst[i] = store_bf16(scale(src[i]));
            i++;
        }
    for (; i + 16 <= n; i += 16) {
        __m512 x = scale(_mm512_loadu_ps(src + i));
        __mmask16 odd = bf16_rare_lanes(x);
        __m256i b;
        if (odd == 0) {
            b = (__m256i)_mm512_cvtneps_pbh(x);
        } else {
            alignas(32) uint16_t tmp[16];
            for (int q = 0; q < 16; q++) tmp[q] = store_bf16(scale(src[i + q]));
            b = _mm256_load_si256(reinterpret_cast<const __m256i *>(tmp));
        }
        if (stream) _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i), b);
        else _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), b);
    }
    if (stream) _mm_sfence();
#elif defined(__AVX2__)
    if (stream)
        while (i < n && (reinterpret_cast<uintptr_t>(dst + i) % 32) != 0) {
            dst[i] = store_bf16(scale(src[i]));
            i++;
        }
    for (; i + 16 <= n; i += 16) {
        const __m256i b = bf16_pack_avx2(scale(_mm256_loadu_ps(src + i)), scale(_mm256_loadu_ps(src + i + 8)));
        if (stream) _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + i), b);
        else _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), b);
    }
    if (stream) _mm_sfence();
#endif
    (void)stream;
    for (int64_t q = i; q < n; q++) dst[q] = store_bf16(scale(src[q]));
}

// Row copies of a worker, chunk after chunk (the CPU epilogue computes a row output a chunk at a time
// and copies each out as it is done; LowerMerge.cpp chunked_row_output). Unstreamed copies are the
// copy_row_* above. Streamed ones store whole 64-byte lines of dst non-temporally and hold a chunk's
// partial last line until the next copy continues it (a chunked row: the line is completed and
// streamed) or until another copy or flush() (plain stores). Storing the partial lines plainly
// instead — a chunk's first and last line, shared with its neighbours — made bf16 softmax C = 8192
// with 16-byte-aligned rows 12.9 ms against 8.2 for whole-row copies (AMX Xeon): the plain store
// that misses (its line's read for ownership from memory) holds up the in-order commit of every
// streamed store behind it, once per chunk. flush() ends with the fence that orders the streamed
// stores; the kernels call it when a worker's rows are done. A streamed output is not read back by
// the kernel that writes it (row outputs are those nobody reads; RowCopies.cpp's have no float64
// temporary, which is what readers load).
//
// prefetch_next() holds a range of the next row's input until the next copy, which asks for it line
// by line between its streamed stores (all of it before a plain copy): the next row's reads and this
// row's writes then share the memory evenly, where a burst of prefetches before the chunk's work
// filled the miss queue and left the streamed stores waiting behind it (PrefetchNextRows.cpp).
class RowStream {
  public:
    void f32(float *dst, const float *src, int64_t n, bool stream) { copy(dst, src, n, stream, Unscaled{}); }
    void bf16(uint16_t *dst, const float *src, int64_t n, bool stream) { copy(dst, src, n, stream, Unscaled{}); }
    // dst[i] = src[i] · scale, rounded to the output's type (a scaled row copy).
    void f32(float *dst, const float *src, int64_t n, bool stream, float scale) { copy(dst, src, n, stream, Scaled{scale}); }
    void bf16(uint16_t *dst, const float *src, int64_t n, bool stream, float scale) { copy(dst, src, n, stream, Scaled{scale}); }
    // [p, p + bytes) into L2 during the next copy (at once when kMaxPending ranges are already held).
    void prefetch_next(const void *p, int64_t bytes) {
        if (bytes <= 0) return;
        if (pending_ == kMaxPending) {
            prefetch_l2(p, bytes);
            return;
        }
        pf_at_[pending_] = static_cast<const char *>(p);
        pf_left_[pending_] = bytes;
        pending_++;
    }
    void flush() {
        put_held();
        prefetch_all();
#if defined(__AVX512F__) || defined(__AVX2__)
        _mm_sfence();
#endif
    }

  private:
    static constexpr int kMaxPending = 4;
    unsigned char *held_at_ = nullptr;  // the held line's address in dst (64-byte aligned), or none
    int64_t held_bytes_ = 0;            // bytes of it held, from its start
    alignas(64) unsigned char line_[64];
    const char *pf_at_[kMaxPending] = {};  // the held prefetch ranges: next line, bytes left
    int64_t pf_left_[kMaxPending] = {};
    int pending_ = 0;

    void prefetch_all() {
        for (int r = 0; r < pending_; r++) prefetch_l2(pf_at_[r], pf_left_[r]);
        pending_ = 0;
    }
    // The next `lines` lines of every held range.
    void prefetch_some(int64_t lines) {
        for (int r = 0; r < pending_; r++)
            for (int64_t l = 0; l < lines && pf_left_[r] > 0; l++, pf_at_[r] += 64, pf_left_[r] -= 64) __builtin_prefetch(pf_at_[r], 0, 2);
    }
    // Lines of each held range to ask for per streamed line, for `lines` streamed lines to cover them.
    int64_t prefetch_rate(int64_t lines) const {
        int64_t most = 0;
        for (int r = 0; r < pending_; r++) most = std::max(most, (pf_left_[r] + 63) / 64);
        return lines > 0 ? (most + lines - 1) / lines : most;
    }

    template <typename Scale>
    static void plain(float *dst, const float *src, int64_t n, Scale scale) { copy_row_f32(dst, src, n, false, scale); }
    template <typename Scale>
    static void plain(uint16_t *dst, const float *src, int64_t n, Scale scale) { copy_row_bf16(dst, src, n, false, scale); }
    template <typename Scale>
    static void convert(float *out, const float *src, int64_t n, Scale scale) {
        for (int64_t i = 0; i < n; i++) out[i] = scale(src[i]);
    }
    template <typename Scale>
    static void convert(uint16_t *out, const float *src, int64_t n, Scale scale) {
        for (int64_t i = 0; i < n; i++) out[i] = store_bf16(scale(src[i]));
    }
    void put_held() {
        if (held_at_) std::memcpy(held_at_, line_, static_cast<size_t>(held_bytes_));
        held_at_ = nullptr;
    }
#if defined(__AVX512F__)
    template <typename Scale>
    static void stream_line(float *dst, const float *src, Scale scale) { _mm512_stream_ps(dst, scale(_mm512_loadu_ps(src))); }
    template <typename Scale>
    static void stream_line(uint16_t *dst, const float *src, Scale scale) {
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
        const __m512 lo = scale(_mm512_loadu_ps(src)), hi = scale(_mm512_loadu_ps(src + 16));
        if (!bf16_rare_pair(lo, hi)) {
            // vcvtne2ps2bf16: the 32 values of both vectors in one (the second operand's go first).
            _mm512_stream_si512(reinterpret_cast<__m512i *>(dst), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            return;
        }
        alignas(64) uint16_t t[32];
        convert(t, src, 32, scale);
        _mm512_stream_si512(reinterpret_cast<__m512i *>(dst), _mm512_load_si512(t));
#else
        const __m256i a = bf16_pack_avx2(scale(_mm256_loadu_ps(src)), scale(_mm256_loadu_ps(src + 8)));
        const __m256i b = bf16_pack_avx2(scale(_mm256_loadu_ps(src + 16)), scale(_mm256_loadu_ps(src + 24)));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst), a);
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + 16), b);
#endif
    }
#elif defined(__AVX2__)
    template <typename Scale>
    static void stream_line(float *dst, const float *src, Scale scale) {
        _mm256_stream_ps(dst, scale(_mm256_loadu_ps(src)));
        _mm256_stream_ps(dst + 8, scale(_mm256_loadu_ps(src + 8)));
    }
    template <typename Scale>
    static void stream_line(uint16_t *dst, const float *src, Scale scale) {
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst), bf16_pack_avx2(scale(_mm256_loadu_ps(src)), scale(_mm256_loadu_ps(src + 8))));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(dst + 16),
                            bf16_pack_avx2(scale(_mm256_loadu_ps(src + 16)), scale(_mm256_loadu_ps(src + 24))));
    }
#endif

    template <typename T, typename Scale>
    void copy(T *dst, const float *src, int64_t n, bool stream, Scale scale) {
#if defined(__AVX512F__) || defined(__AVX2__)
        constexpr int64_t E = 64 / static_cast<int64_t>(sizeof(T));  // elements per line
        if (!stream || n <= 0) {
            prefetch_all();
            plain(dst, src, n, scale);
            return;
        }
        int64_t i = 0;
        if (held_at_ && reinterpret_cast<unsigned char *>(dst) == held_at_ + held_bytes_) {
            // The held line continues here: complete it, then stream it.
            i = std::min<int64_t>(n, (64 - held_bytes_) / static_cast<int64_t>(sizeof(T)));
            convert(reinterpret_cast<T *>(line_ + held_bytes_), src, i, scale);
            held_bytes_ += i * static_cast<int64_t>(sizeof(T));
            if (held_bytes_ < 64) return;
            stream_held_line(held_at_, line_);
            held_at_ = nullptr;
        } else {
            // A new row: its partial first line is stored plainly.
            put_held();
            const uintptr_t to_line = (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64;
            i = std::min<int64_t>(n, static_cast<int64_t>(to_line / sizeof(T)));
            plain(dst, src, i, scale);
        }
        if (pending_ == 0) {
            for (; i + E <= n; i += E) stream_line(dst + i, src + i, scale);
        } else {
            const int64_t rate = prefetch_rate((n - i) / E);
            for (; i + E <= n; i += E) {
                prefetch_some(rate);
                stream_line(dst + i, src + i, scale);
            }
            prefetch_all();
        }
        if (i < n) {
            held_at_ = reinterpret_cast<unsigned char *>(dst + i);
            held_bytes_ = (n - i) * static_cast<int64_t>(sizeof(T));
            convert(reinterpret_cast<T *>(line_), src + i, n - i, scale);
        }
#else
        prefetch_all();
        if constexpr (std::is_same_v<T, float>) copy_row_f32(dst, src, n, stream, scale);
        else copy_row_bf16(dst, src, n, stream, scale);
#endif
    }
#if defined(__AVX512F__) || defined(__AVX2__)
    // A completed 64-byte line (aligned, in line_) streamed to its place in dst.
    static void stream_held_line(unsigned char *to, const unsigned char *line) {
#if defined(__AVX512F__)
        _mm512_stream_si512(reinterpret_cast<__m512i *>(to), _mm512_load_si512(line));
#else
        _mm256_stream_si256(reinterpret_cast<__m256i *>(to), _mm256_load_si256(reinterpret_cast<const __m256i *>(line)));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(to + 32), _mm256_load_si256(reinterpret_cast<const __m256i *>(line + 32)));
#endif
    }
#endif
};

}  // namespace rfk

#endif  // REDFUSE_CPU_ROWS_H
