/** \file redfuse_cpu.h
 * The semantics of the spec language for generated C++ kernels: the same definitions as
 * src/ir/Eval.cpp and src/ir/DType.cpp (masked-row subtraction, 0/0 = 0, NaN-propagating min/max,
 * floor division, round-to-nearest-even casts with saturation), as small inline functions that
 * generated code calls. Kept free of redfuse headers so a kernel compiles on its own.
 */
#ifndef REDFUSE_CPU_H
#define REDFUSE_CPU_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace rfk {

// (-inf) - (-inf) = -inf and (+inf) - (+inf) = +inf: a fully masked row stays masked.
template <typename T> static inline T sub(T a, T b) {
    if (std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0)) return a;
    return a - b;
}
// 0 / 0 = 0: normalizing an empty row gives 0.
template <typename T> static inline T div(T a, T b) { return (a == 0 && b == 0) ? T(0) : a / b; }
template <typename T> static inline T max(T a, T b) { return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : (a > b ? a : b); }
template <typename T> static inline T min(T a, T b) { return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : (a < b ? a : b); }
template <typename T> static inline T sigmoid(T x) { return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)); }
template <typename T> static inline T rsqrt(T x) { return T(1) / std::sqrt(x); }
template <typename T> static inline T round_even(T x) { return std::nearbyint(x); }

static inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}
static inline int64_t mod(int64_t a, int64_t b) { return a - b * floordiv(a, b); }

// Round to a float format with `mantissa` explicit bits and smallest normal exponent `min_exp`,
// ties to even, saturating finite overflow to max_finite; infinities kept only if has_inf.
static inline double round_float(double v, int mantissa, int min_exp, double max_finite, bool has_inf) {
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
static inline double round_int(double v, double lo, double hi) {
    if (std::isnan(v)) return 0;
    double r = std::nearbyint(v);
    return r < lo ? lo : (r > hi ? hi : r);
}
static inline double cast_f64(double v) { return v; }
static inline double cast_f32(double v) {
    if (std::isnan(v) || std::isinf(v)) return v;
    double r = static_cast<double>(static_cast<float>(v));
    if (std::isinf(r)) return std::copysign(static_cast<double>(std::numeric_limits<float>::max()), v);
    return r;
}
static inline double cast_f16(double v) { return round_float(v, 10, -14, 65504.0, true); }
static inline double cast_bf16(double v) { return round_float(v, 7, -126, 3.38953138925153547590470800371487866880e38, true); }
static inline double cast_f8e4m3(double v) { return round_float(v, 3, -6, 448.0, false); }
static inline double cast_f8e5m2(double v) { return round_float(v, 2, -14, 57344.0, true); }
static inline double cast_i8(double v) { return round_int(v, -128, 127); }
static inline double cast_i32(double v) { return round_int(v, -2147483648.0, 2147483647.0); }
static inline double cast_i64(double v) { return round_int(v, -9223372036854775808.0, 9223372036854774784.0); }

}  // namespace rfk

#endif  // REDFUSE_CPU_H
