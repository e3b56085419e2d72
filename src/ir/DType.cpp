/** \file DType.cpp
 * Names of the storage types and exact rounding of doubles to narrow floating-point and integer
 * formats by manipulating the binary exponent and significand directly.
 */
#include "ir/DType.h"

#include <cmath>
#include <limits>

namespace rf {

namespace {
struct FloatFormat {
    int mantissa_bits;  // explicit fraction bits
    int min_exp;        // exponent of the smallest normal number (2^min_exp)
    double max_finite;
    bool has_inf;
};

FloatFormat format_of(DType t) {
    switch (t) {
    case DType::f16: return {10, -14, 65504.0, true};
    case DType::bf16: return {7, -126, 3.38953138925153547590470800371487866880e38, true};
    case DType::f8e4m3: return {3, -6, 448.0, false};
    case DType::f8e5m2: return {2, -14, 57344.0, true};
    default: return {52, -1022, std::numeric_limits<double>::max(), true};
    }
}

double round_float(double v, const FloatFormat &f) {
    if (std::isnan(v)) return v;
    if (std::isinf(v)) return f.has_inf ? v : std::copysign(f.max_finite, v);
    if (v == 0) return v;
    double a = std::fabs(v);
    int e;
    std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1): leading bit has weight 2^(e-1)
    int lead = e - 1;
    if (lead < f.min_exp) lead = f.min_exp;  // subnormal range: fixed quantum
    double quantum = std::ldexp(1.0, lead - f.mantissa_bits);
    double q = std::nearbyint(a / quantum) * quantum;  // default rounding mode: ties to even
    if (q > f.max_finite) q = f.max_finite;           // saturate
    return std::copysign(q, v);
}

double round_int(double v, double lo, double hi) {
    if (std::isnan(v)) return 0;
    double r = std::nearbyint(v);
    if (r < lo) r = lo;
    if (r > hi) r = hi;
    return r;
}
}  // namespace

const char *dtype_name(DType t) {
    switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    }
    return "?";
}

std::optional<DType> dtype_from_name(const std::string &n) {
    for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2,
                    DType::i8, DType::i32, DType::i64})
        if (n == dtype_name(t)) return t;
    return std::nullopt;
}

bool is_int(DType t) { return t == DType::i8 || t == DType::i32 || t == DType::i64; }
bool is_float(DType t) { return !is_int(t); }

int dtype_bytes(DType t) {
    switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    default: return 1;
    }
}

double dtype_epsilon(DType t) {
    switch (t) {
    case DType::f64: return std::ldexp(1.0, -53);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f8e4m3: return std::ldexp(1.0, -4);
    case DType::f8e5m2: return std::ldexp(1.0, -3);
    default: return 0.5;
    }
}

double round_to_dtype(double v, DType t) {
    switch (t) {
    case DType::f64: return v;
    case DType::f32:
        if (std::isnan(v) || std::isinf(v)) return v;
        if (std::fabs(v) > std::numeric_limits<float>::max()) {
            // Values that would round to infinity saturate (docs/language.md §4: casts saturate).
            double r = static_cast<double>(static_cast<float>(v));
            if (std::isinf(r)) return std::copysign(std::numeric_limits<float>::max(), v);
            return r;
        }
        return static_cast<double>(static_cast<float>(v));
    case DType::i8: return round_int(v, -128, 127);
    case DType::i32: return round_int(v, -2147483648.0, 2147483647.0);
    case DType::i64: return round_int(v, -9223372036854775808.0, 9223372036854774784.0);
    default: return round_float(v, format_of(t));
    }
}

}  // namespace rf
