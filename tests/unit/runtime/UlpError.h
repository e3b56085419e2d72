/** \file UlpError.h
 * The error of a float result in units in the last place of the exact value: the accuracy measure of
 * the exp tests (simd_kernels_test.cpp, exp2_row_test.cpp), in their gtest and child-driver builds.
 */
#pragma once

#include <cmath>
#include <limits>

/** |got - exact| in units of the float spacing at `exact` (2^-149 below the normal range); a result
 *  that must overflow has to be +inf. */
inline double ulp_error(float got, double exact) {
    if (std::isnan(exact)) return std::isnan(got) ? 0 : 1e30;
    if (std::isnan(got)) return 1e30;
    if (exact >= 0x1p128) return got == std::numeric_limits<float>::infinity() ? 0 : 1e30;
    double g = std::isinf(got) ? std::copysign(0x1p128, double(got)) : double(got);
    int e;
    std::frexp(std::fabs(exact), &e);
    double ulp = std::fabs(exact) < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, e - 24);
    return std::fabs(g - exact) / ulp;
}
