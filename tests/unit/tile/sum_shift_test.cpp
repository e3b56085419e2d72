/** \file sum_shift_test.cpp
 * The shifted sum of the tile lowering (src/tile/LowerPass.cpp, Form::SumShift): Σ v = Σ (v - ref) +
 * n·ref with ref the first term keeps a mean of 1e4 ± 1 exact in float tiles, but a body with a select
 * has terms that are exactly 0 beside values, and n·ref cancelled all but a few digits of it.
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "runtime/OpenCLRuntime.h"

using namespace rf;

namespace {

// scripts/fuzz_specs.py seed 14 #14, reduced: a causal mask, and an indicator of c before the argmax.
const char *kMasked = "size R = 33, C = 1025\ninput X[R, C] : f32\n"
                      "m[r] = max(c: select(c <= r - 1, X[r,c], -inf))\n"
                      "ia[r] = argmax(c: select(c <= r - 1, X[r,c], -inf))\n"
                      "ga[r] = sum(c: exp(select(c <= r - 1, X[r,c], -inf) - m[r]) * select(c < ia[r], 1, 0))\n"
                      "z[r] = sum(c: select(c < r, X[r,c] + 3, 0))\n"
                      "output ga, z\n";
// What the shift is for: a mean far from zero with a small spread (tests of the plan interpreter's
// numerics: mean 1e4, spread 1).
const char *kOffset = "size R = 4, C = 4099\ninput X[R, C] : f32\nmu[r] = sum(c: X[r,c] + 10000) / C\n"
                      "v[r] = sum(c: (X[r,c] + 10000 - mu[r]) * (X[r,c] + 10000 - mu[r])) / C\noutput mu, v\n";

}  // namespace

TEST(SumShift, MaskedSumsKeepTheirDigits) {
    RunOptions o;
    test::check_run("masked_sum.rf", kMasked, o, "cpu", {14, 1});
    o.segments = 3;
    o.tile = 64;
    test::check_run("masked_sum.rf", kMasked, o, "cpu", {2});
    if (!ocl::unavailable_reason().empty()) return;
    RunOptions g;
    test::check_run("masked_sum.rf", kMasked, g, "opencl", {14});
}

TEST(SumShift, AnOffsetMeanStaysExact) {
    RunOptions o;
    test::check_run("offset_mean.rf", kOffset, o, "cpu", {1, 2});
}
