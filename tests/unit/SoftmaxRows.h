/** \file SoftmaxRows.h
 * The softmax example in another dtype, and rows of special values for it, as the tests of the CPU's
 * row-copy passes use them (tests/unit/tile/scale_row_copies_test.cpp, defer_row_copies_test.cpp).
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ExampleSizes.h"

namespace rf::test {

/** examples/softmax.rf with its f32 declarations in `dtype`. */
inline std::string softmax_spec(const char *dtype) {
    std::string s = read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "softmax.rf");
    if (std::string(dtype) != "f32")
        for (size_t at = s.find(": f32"); at != std::string::npos; at = s.find(": f32", at)) s.replace(at, 5, std::string(": ") + dtype);
    return s;
}

/** R rows of C values of X (R >= 6): normal values, with rows that hold -inf, +inf, NaN, huge values
 *  (exp overflows nothing: x - m <= 0) and one row of equal values. */
inline std::vector<float> softmax_rows(int64_t R, int64_t C, unsigned seed = 5) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 3.f);
    std::vector<float> x(static_cast<size_t>(R * C));
    for (float &v : x) v = nd(rng);
    const float inf = std::numeric_limits<float>::infinity();
    x[static_cast<size_t>(1 * C + 7)] = -inf;
    x[static_cast<size_t>(2 * C + 3)] = inf;
    x[static_cast<size_t>(3 * C + 1)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t j = 0; j < C; j++) x[static_cast<size_t>(4 * C + j)] = j % 2 ? -3e38f : 3e38f;
    for (int64_t j = 0; j < C; j++) x[static_cast<size_t>(5 * C + j)] = 0.25f;
    return x;
}

}  // namespace rf::test
