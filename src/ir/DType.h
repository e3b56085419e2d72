/** \file DType.h
 * Storage types of tensors and casts, and exact rounding of a double to each of them
 * (round-to-nearest-even with saturation, docs/language.md §4, "Casts").
 */
#pragma once

#include <optional>
#include <string>

namespace rf {

enum class DType { f64, f32, f16, bf16, f8e4m3, f8e5m2, i8, i32, i64 };

const char *dtype_name(DType t);
std::optional<DType> dtype_from_name(const std::string &name);
bool is_float(DType t);
bool is_int(DType t);
/** Size of one element in bytes. */
int dtype_bytes(DType t);
/** Unit roundoff (half an ulp at 1) of a float type; 0.5 for integer types. */
double dtype_epsilon(DType t);

/** Rounds v to the nearest value representable in t, ties to even, finite values beyond the range
 *  saturate to the largest finite value. Infinities stay infinite where the format has them (f16,
 *  bf16, f32, f64, e5m2) and saturate where it has none (e4m3, integers). NaN stays NaN for floats
 *  and becomes 0 for integers. */
double round_to_dtype(double v, DType t);

}  // namespace rf
