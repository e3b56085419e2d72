/** \file redfuse_cpu.h
 * The semantics of the spec language for generated C++ kernels: the same definitions as
 * src/ir/Eval.cpp and src/ir/DType.cpp (masked-row subtraction, 0/0 = 0, NaN-propagating min/max,
 * floor division, round-to-nearest-even casts with saturation), as small inline functions that
 * generated code calls. Kept free of redfuse headers so a kernel compiles on its own.
 */
#ifndef REDFUSE_CPU_H
#define REDFUSE_CPU_H

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// The vector variants of exp/log in glibc's libmvec: declared here so that `omp simd` loops call
// them (GCC only declares them under -ffast-math, which would also break inf/NaN semantics).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float) noexcept;
__attribute__((simd("notinbranch"))) float logf(float) noexcept;
__attribute__((simd("notinbranch"))) double exp(double) noexcept;
__attribute__((simd("notinbranch"))) double log(double) noexcept;
}
// exp2 in float64 (top-k slots' exp(u - m) after FoldExp2, f64 kernels): libmvec has it since 2.35.
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
extern "C" {
__attribute__((simd("notinbranch"))) double exp2(double) noexcept;
}
#endif
#endif

// The element-wise helpers below are inlined into every loop that uses them, whatever GCC's inlining
// budget says: an out-of-line call in an `omp simd` loop is one scalar call per element (a causal
// attention kernel, whose masked-tile pass prints its body twice, spent 44% of its time in a called
// exp2_f and ran slower than the unmasked kernel).
#if defined(__GNUC__)
#define RFK_ALWAYS_INLINE __attribute__((always_inline))
#else
#define RFK_ALWAYS_INLINE
#endif

namespace rfk {

// A worker's array of n zeroed elements on 64-byte boundaries. A tile's rows are then whole cache
// lines (their stride is a multiple of 16 floats), so the tile GEMMs' row loads and stores and the
// rows' vector loops never split a line, and a loop that reads a row right after another wrote it
// takes the values from the store buffer (a split store is not forwarded). std::vector gave 16-byte
// alignment: bf16 attention L = 2048 on the AMX Xeon ran 14.7 ms, 13.4 with this (rows 264 apart).
template <typename T>
struct LocalArray {
    T *data = nullptr;
    explicit LocalArray(size_t n) {
        size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
        data = static_cast<T *>(std::aligned_alloc(64, bytes > 0 ? bytes : 64));
        if (!data) throw std::bad_alloc();
        std::memset(data, 0, bytes);
    }
    ~LocalArray() { std::free(data); }
    LocalArray(const LocalArray &) = delete;
    LocalArray &operator=(const LocalArray &) = delete;
};

// The partial sums a blocked vector sum keeps (the CPU printer's print_blocked_sums): four vectors'
// worth, four chains of adds that do not wait on each other.
#if defined(__AVX512F__)
constexpr int64_t kSumBlockBytes = 256;
#elif defined(__AVX__)
constexpr int64_t kSumBlockBytes = 128;
#else
constexpr int64_t kSumBlockBytes = 64;
#endif
// The sum of the n partial sums p[0..n) (n a power of two), pairwise: p[i] + p[i + n/2], halving.
template <typename T>
static inline T sum_pairwise(T *p, int64_t n) {
    for (int64_t h = n / 2; h >= 1; h /= 2)
        for (int64_t i = 0; i < h; i++) p[i] += p[i + h];
    return p[0];
}

// p * 2^k for integral k in [-151, 129], in two halves 2^(k/2) 2^(k - k/2), each a normal float, so
// results reach the subnormals and inf without an out-of-range exponent field (exp_f, exp2_f).
static inline RFK_ALWAYS_INLINE float scale_by_pow2(float p, float k) {
    int32_t ki = static_cast<int32_t>(k);
    int32_t k1 = ki >> 1, k2 = ki - k1;
    uint32_t b1 = static_cast<uint32_t>(k1 + 127) << 23, b2 = static_cast<uint32_t>(k2 + 127) << 23;
    float s1, s2;
    std::memcpy(&s1, &b1, 4);
    std::memcpy(&s2, &b2, 4);
    return p * s1 * s2;
}

// Written without branches so that `omp simd` loops vectorize them (selects, not jumps).
// (-inf) - (-inf) = -inf and (+inf) - (+inf) = +inf: a fully masked row stays masked.
template <typename T> static inline RFK_ALWAYS_INLINE T sub(T a, T b) {
    T d = a - b;
    return (a == b && std::fabs(a) == std::numeric_limits<T>::infinity()) ? a : d;
}
// 0 / 0 = 0: normalizing an empty row gives 0.
template <typename T> static inline RFK_ALWAYS_INLINE T div(T a, T b) {
    T q = a / b;
    return (a == T(0) && b == T(0)) ? T(0) : q;
}
// NaN-propagating: a NaN operand gives NaN (a + b is NaN then).
template <typename T> static inline RFK_ALWAYS_INLINE T max(T a, T b) {
    T r = a > b ? a : b;
    return (a != a || b != b) ? a + b : r;
}
template <typename T> static inline RFK_ALWAYS_INLINE T min(T a, T b) {
    T r = a < b ? a : b;
    return (a != a || b != b) ? a + b : r;
}
// exp in float written so that `omp simd` loops vectorize it inline (no call, no branch):
// exp(x) = 2^k e^r with k = rint(x log2 e), r = x - k ln2 in two fma steps (|r| <= ln2 / 2), e^r by
// its Taylor series to r^7 (truncation below 0.1 ulp), 2^k applied in two halves so results down to
// the smallest denormal round once. Max error about 1 ulp. The clamp needs no special cases: above
// 88.8 the scaling overflows to inf, below -104 it rounds to exactly 0 (exp(-104) is under half the
// smallest denormal), and a NaN passes the clamp (compares are false) and stays NaN.
static inline RFK_ALWAYS_INLINE float exp_f(float x) {
    const float hi = 88.8f, lo = -104.0f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    float k = __builtin_rintf(xc * 1.44269504088896340736f);
    float r = __builtin_fmaf(k, -0.693145751953125f, xc);
    r = __builtin_fmaf(k, -1.42860682030941723212e-6f, r);
    float p = 1.0f / 5040.0f;
    p = __builtin_fmaf(p, r, 1.0f / 720.0f);
    p = __builtin_fmaf(p, r, 1.0f / 120.0f);
    p = __builtin_fmaf(p, r, 1.0f / 24.0f);
    p = __builtin_fmaf(p, r, 1.0f / 6.0f);
    p = __builtin_fmaf(p, r, 0.5f);
    p = __builtin_fmaf(p, r * r, r);
    p = p + 1.0f;
    return scale_by_pow2(p, k);
}
static inline RFK_ALWAYS_INLINE double exp_f(double x) { return std::exp(x); }
// exp2 in float, vectorized the same way (the tile pass FoldExp2 turns exp(e) into exp2(e log2 e)):
// 2^x = 2^k 2^r with k = rint(x) and r = x - k, exact (|r| <= 1/2, no reduction constants); 2^r by its
// Taylor series in r to r^7 (coefficients ln2^n / n!, truncation below 0.1 ulp), Horner with fmas and
// a final fma so 1 + r q rounds once; 2^k applied in two halves as in exp_f. Max error about 1 ulp.
// Clamped like exp_f: from 128 up the scaling overflows to inf, below -151 it rounds to exactly 0
// (2^-151 is under half the smallest denormal), a NaN passes the clamp and stays NaN.
static inline RFK_ALWAYS_INLINE float exp2_f(float x) {
    const float hi = 129.0f, lo = -151.0f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    float k = __builtin_rintf(xc);
    float r = xc - k;
    float p = 1.5252733804059840e-5f;
    p = __builtin_fmaf(p, r, 1.5403530393381609e-4f);
    p = __builtin_fmaf(p, r, 1.3333558146428443e-3f);
    p = __builtin_fmaf(p, r, 9.6181291076284772e-3f);
    p = __builtin_fmaf(p, r, 5.5504108664821580e-2f);
    p = __builtin_fmaf(p, r, 2.4022650695910071e-1f);
    p = __builtin_fmaf(p, r, 6.9314718055994531e-1f);
    p = __builtin_fmaf(p, r, 1.0f);
    return scale_by_pow2(p, k);
}
static inline RFK_ALWAYS_INLINE double exp2_f(double x) { return std::exp2(x); }

template <typename T> static inline RFK_ALWAYS_INLINE T sq(T b) { return b * b; }  // b^2: one rounding, like pow(b, 2)
// tanh in float, vectorizable as exp_f is (std::tanh is a scalar libm call inside the vector loops:
// softcapped attention, 30·tanh(S/30) per score, ran at a tenth of plain attention's speed). |x| < 0.625:
// x + x·t·q(t) with t = x² and q a degree-4 least-squares fit of (tanh x − x)/x³ on Chebyshev nodes
// (0.8 ulp in float); above, 1 − 2/(e^{2|x|} + 1) with the sign of x, whose cancellation is at most
// 0.45/0.55 of the quotient's error there. Within 2 ulp (SimdKernels.TanhWithinTwoUlp); ±0 and NaN pass
// through, ±inf gives ±1.
static inline RFK_ALWAYS_INLINE float tanh_f(float x) {
    float ax = std::fabs(x), t = x * x;
    float q = -5.704042501747608e-3f;
    q = __builtin_fmaf(q, t, 2.0637862384319305e-2f);
    q = __builtin_fmaf(q, t, -5.373915657401085e-2f);
    q = __builtin_fmaf(q, t, 1.33314311504364e-1f);
    q = __builtin_fmaf(q, t, -3.333328068256378e-1f);
    float small = __builtin_fmaf(x * t, q, x);
    float big = 1.0f - 2.0f / (exp_f(2.0f * ax) + 1.0f);
    return std::copysign(ax < 0.625f ? small : big, x);  // -0 too: fma(-0·t, q, -0) is +0
}
static inline RFK_ALWAYS_INLINE double tanh_f(double x) { return std::tanh(x); }
template <typename T> static inline RFK_ALWAYS_INLINE T sigmoid(T x) { return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)); }
template <typename T> static inline RFK_ALWAYS_INLINE T rsqrt(T x) { return T(1) / std::sqrt(x); }
template <typename T> static inline RFK_ALWAYS_INLINE T round_even(T x) { return std::nearbyint(x); }

// Threads a tile GEMM may split its columns over when it is called outside an active parallel
// region (redfuse_simd_gemm.h, split_columns): the generated parallel loop sets it to its thread
// count when it has a single iteration (one row block: a weight GEMM at M = 16), else to 1. A
// process-wide atomic of this kernel object, not a thread_local: LeakSanitizer's exit-time scan of
// the threads' TLS crashed (signal 11 in its tracer) on the OpenMP workers' TLS blocks of a kernel
// object already unloaded. Concurrent calls on several threads can only make a split less or more
// likely (never happens inside an active region), not change a result.
#ifndef RFK_GEMM_SPLIT_THREADS  // declared by redfuse_simd_gemm.h too, which also stands alone
#define RFK_GEMM_SPLIT_THREADS
[[maybe_unused]] static std::atomic<int> gemm_split_threads{1};
// Bumped by every generated kernel function on entry: tile panels packed from a kernel input (kept per
// thread by the AMX GEMMs and the f32 attention GEMMs, redfuse_simd.h's cached_panels) are reused only
// within the entry that packed them, while the input cannot change.
[[maybe_unused]] static std::atomic<uint64_t> input_epoch{0};
#endif

static inline RFK_ALWAYS_INLINE int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}
static inline RFK_ALWAYS_INLINE int64_t mod(int64_t a, int64_t b) { return a - b * floordiv(a, b); }

// Round to a float format with `mantissa` explicit bits and smallest normal exponent `min_exp`,
// ties to even, saturating finite overflow to max_finite; infinities kept only if has_inf.
static inline RFK_ALWAYS_INLINE double round_float(double v, int mantissa, int min_exp, double max_finite, bool has_inf) {
    if (std::isnan(v)) return v;
    if (std::isinf(v)) return has_inf ? v : std::copysign(max_finite, v);
    if (v == 0) return v;
    double a = std::fabs(v);
    int e;
    std::frexp(a, &e);
    int lead = e - 1;
    if (lead < min_exp) lead = min_exp;
    double quantum = std::ldexp(1.0, lead - mantissa);
    double q = std::nearbyint(a / quantum) * quantum;
    if (q > max_finite) q = max_finite;
    return std::copysign(q, v);
}
static inline RFK_ALWAYS_INLINE double round_int(double v, double lo, double hi) {
    if (std::isnan(v)) return 0;
    double r = std::nearbyint(v);
    return r < lo ? lo : (r > hi ? hi : r);
}
static inline RFK_ALWAYS_INLINE double cast_f64(double v) { return v; }
static inline RFK_ALWAYS_INLINE double cast_f32(double v) {
    if (std::isnan(v) || std::isinf(v)) return v;
    double r = static_cast<double>(static_cast<float>(v));
    if (std::isinf(r)) return std::copysign(static_cast<double>(std::numeric_limits<float>::max()), v);
    return r;
}
static inline RFK_ALWAYS_INLINE double cast_f16(double v) { return round_float(v, 10, -14, 65504.0, true); }
static inline RFK_ALWAYS_INLINE double cast_bf16(double v) { return round_float(v, 7, -126, 3.38953138925153547590470800371487866880e38, true); }
static inline RFK_ALWAYS_INLINE double cast_f8e4m3(double v) { return round_float(v, 3, -6, 448.0, false); }
static inline RFK_ALWAYS_INLINE double cast_f8e5m2(double v) { return round_float(v, 2, -14, 57344.0, true); }
static inline RFK_ALWAYS_INLINE double cast_i8(double v) { return round_int(v, -128, 127); }
// i8(x) for an x already in float or double, as that type: the same integer as cast_i8 (rounding
// and clamping are exact in either type), without the float64 round trip, so loops vectorize.
// Clamping before rounding gives the same integer (the bounds are integers and rounding is
// monotonic); written so, with NaN -> 0 last, GCC vectorizes it with fewer mask operations
// (with the plain division of CodeGen_C.cpp's int8_argument: quant->GEMM's quantization of 16 x 4096
// values 25 -> 14 us on an AMD Zen 4).
template <typename T> static inline RFK_ALWAYS_INLINE T round_i8(T x) {
    T c = x > T(-128) ? x : T(-128);
    c = c < T(127) ? c : T(127);
    return std::nearbyint(x == x ? c : T(0));
}
static inline RFK_ALWAYS_INLINE double cast_i32(double v) { return round_int(v, -2147483648.0, 2147483647.0); }
static inline RFK_ALWAYS_INLINE double cast_i64(double v) { return round_int(v, -9223372036854775808.0, 9223372036854774784.0); }

// ---- Storage formats: loads widen to float, stores round like rf::round_to_dtype.
static inline RFK_ALWAYS_INLINE float bf16_to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// A float format with `mbits` mantissa bits, `ebits` exponent bits and bias; `fn` = no infinities,
// only the all-ones pattern is NaN (e4m3fn).
static inline RFK_ALWAYS_INLINE float decode_small_float(uint32_t bits, int mbits, int ebits, int bias, bool fn) {
    uint32_t sign = bits >> (mbits + ebits), e = (bits >> mbits) & ((1u << ebits) - 1), m = bits & ((1u << mbits) - 1);
    float v;
    if (e == (1u << ebits) - 1 && !fn) v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    else if (fn && e == (1u << ebits) - 1 && m == (1u << mbits) - 1) v = std::numeric_limits<float>::quiet_NaN();
    else if (e == 0) v = std::ldexp(static_cast<float>(m), 1 - bias - mbits);
    else v = std::ldexp(static_cast<float>(m | (1u << mbits)), static_cast<int>(e) - bias - mbits);
    return sign ? -v : v;
}
static inline RFK_ALWAYS_INLINE float f16_to_float(uint16_t b) { return decode_small_float(b, 10, 5, 15, false); }
static inline RFK_ALWAYS_INLINE float f8e4m3_to_float(uint8_t b) { return decode_small_float(b, 3, 4, 7, true); }
static inline RFK_ALWAYS_INLINE float f8e5m2_to_float(uint8_t b) { return decode_small_float(b, 2, 5, 15, false); }
// Encodes a value already representable in the format (after round_float).
static inline RFK_ALWAYS_INLINE uint32_t encode_small_float(double v, int mbits, int ebits, int bias, bool fn) {
    uint32_t sign = std::signbit(v) ? 1u << (mbits + ebits) : 0u;
    if (std::isnan(v)) return sign | (fn ? ((1u << (mbits + ebits)) - 1) : (((1u << ebits) - 1) << mbits) | 1u);
    if (std::isinf(v)) return sign | (((1u << ebits) - 1) << mbits);
    double a = std::fabs(v);
    if (a == 0) return sign;
    int e;
    std::frexp(a, &e);
    int exp = e - 1 + bias;
    if (exp <= 0) return sign | static_cast<uint32_t>(std::ldexp(a, bias - 1 + mbits));  // subnormal
    uint32_t m = static_cast<uint32_t>(std::ldexp(a, mbits - (e - 1))) & ((1u << mbits) - 1);
    return sign | (static_cast<uint32_t>(exp) << mbits) | m;
}
static inline RFK_ALWAYS_INLINE double store_f64(double v) { return v; }
static inline RFK_ALWAYS_INLINE float store_f32(double v) { return static_cast<float>(cast_f32(v)); }
// A float is already an f32: no rounding, and the store stays vectorizable.
static inline RFK_ALWAYS_INLINE float store_f32(float v) { return v; }
static inline RFK_ALWAYS_INLINE double store_f64(float v) { return v; }
// float -> bf16 on the bits, branch-free (vectorizable): round to nearest even, NaN -> quiet NaN,
// finite values that round past the largest bf16 saturate to it (rf::round_to_dtype), inf stays inf.
// A float has more exponent range than any value bf16 can't hold finitely, so one rounding is exact.
static inline RFK_ALWAYS_INLINE uint16_t store_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint32_t sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
    uint32_t rounded = (mag + 0x7FFFu + ((mag >> 16) & 1u)) >> 16;
    uint32_t out = mag > 0x7F800000u ? 0x7FC0u : (mag == 0x7F800000u ? 0x7F80u : (rounded >= 0x7F80u ? 0x7F7Fu : rounded));
    return static_cast<uint16_t>((sign >> 16) | out);
}
static inline RFK_ALWAYS_INLINE uint16_t store_bf16(double v) {
    float f = static_cast<float>(cast_bf16(v));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return 0x7FC0;
    return static_cast<uint16_t>(u >> 16);
}
static inline RFK_ALWAYS_INLINE uint16_t store_f16(double v) { return static_cast<uint16_t>(encode_small_float(cast_f16(v), 10, 5, 15, false)); }
static inline RFK_ALWAYS_INLINE uint8_t store_f8e4m3(double v) { return static_cast<uint8_t>(encode_small_float(cast_f8e4m3(v), 3, 4, 7, true)); }
static inline RFK_ALWAYS_INLINE uint8_t store_f8e5m2(double v) { return static_cast<uint8_t>(encode_small_float(cast_f8e5m2(v), 2, 5, 15, false)); }
static inline RFK_ALWAYS_INLINE int8_t store_i8(double v) { return static_cast<int8_t>(cast_i8(v)); }
static inline RFK_ALWAYS_INLINE int32_t store_i32(double v) { return static_cast<int32_t>(cast_i32(v)); }
static inline RFK_ALWAYS_INLINE int64_t store_i64(double v) { return static_cast<int64_t>(cast_i64(v)); }

// ---- Running-state helpers of the generated kernels (the plan interpreter's semantics).
// "a is a better selection than b": larger (want_max) or smaller; NaN ranks first; ties: lower index.
static inline bool better(bool want_max, double va, double ia, double vb, double ib) {
    bool na = va != va, nb = vb != vb;
    if (na != nb) return na;
    if (!na && va != vb) return want_max ? va > vb : va < vb;
    return ia < ib;
}
// Sorted insertion into a top-k list (values v, indices i, current length *n as a double).
// Strict compares decide most steps at once: val < w (neither NaN: the compare is false otherwise)
// means w stays ahead whatever the indices, val > w means val moves past it; only equal values and
// NaNs ask `better` for the tie and NaN ranks. So a full list turns away a value below its last
// entry with one compare, the common case once the list holds the row's first k elements.
static inline RFK_ALWAYS_INLINE bool topk_moves_past(double val, double idx, double w, double wi) {
    return val > w ? true : (val < w ? false : better(true, val, idx, w, wi));
}
static inline void topk_place(double *v, double *i, double *n, int64_t k, double val, double idx) {
    int64_t len = static_cast<int64_t>(*n);
    if (len == k && !topk_moves_past(val, idx, v[k - 1], i[k - 1])) return;
    int64_t pos = len < k ? len : k - 1;
    while (pos > 0 && topk_moves_past(val, idx, v[pos - 1], i[pos - 1])) {
        v[pos] = v[pos - 1];
        i[pos] = i[pos - 1];
        pos--;
    }
    v[pos] = val;
    i[pos] = idx;
    if (len < k) *n = static_cast<double>(len + 1);
}
static inline RFK_ALWAYS_INLINE void topk_insert(double *v, double *i, double *n, int64_t k, double val, double idx) {
    if (k > 0 && *n == static_cast<double>(k) && val < v[k - 1]) return;
    topk_place(v, i, n, k, val, idx);
}
// Shift-form polynomial state: S(c) -> S(c') exactly,
// S_b(c') = sum_{a >= b} prod_i C(a_i, b_i) (c'_i - c_i)^(a_i - b_i) S_a(c).
// Called once per tile and row: powers by multiplication (degree <= 4), binomials from a table, and
// nothing at all when the reference point did not move.
static inline void poly_shift(double *S, int na, int nd, const int *al, const double *from, const double *to) {
    bool same = true;
    for (int i = 0; i < nd; i++) same = same && from[i] == to[i];
    if (same) return;
    static const double binom[5][5] = {{1, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {1, 2, 1, 0, 0}, {1, 3, 3, 1, 0}, {1, 4, 6, 4, 1}};
    double pw[8][5];  // pw[i][e] = (to_i - from_i)^e
    for (int i = 0; i < nd && i < 8; i++) {
        double d = to[i] - from[i];
        pw[i][0] = 1;
        for (int e = 1; e < 5; e++) pw[i][e] = pw[i][e - 1] * d;
    }
    double out[256];  // at most C(6 + 4, 4) = 210 moments (degree <= 4, <= 6 atoms)
    for (int b = 0; b < na; b++) {
        double acc = 0;
        for (int a = 0; a < na; a++) {
            double coef = 1;
            for (int i = 0; i < nd; i++) {
                int hi = al[a * nd + i], lo = al[b * nd + i];
                if (hi < lo) { coef = 0; break; }
                coef *= binom[hi][lo] * pw[i][hi - lo];
            }
            acc += coef * S[a];
        }
        out[b] = acc;
    }
    for (int b = 0; b < na; b++) S[b] = out[b];
}

}  // namespace rfk

#endif  // REDFUSE_CPU_H
