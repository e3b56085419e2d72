/** \file run_check_test.cpp
 * `run --check` (src/driver/Run.cpp) compares every output with the literal spec's output as stored
 * in its dtype: a value beyond the dtype's range saturates and one below it flushes to zero on both
 * sides, so a right result is not reported wrong for what its storage cannot hold; a float32 target's
 * infinity agrees with a reference beyond float32's range.
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"

using namespace rf;

namespace {

// Products of 20 factors near 1000 (about 1e60) and near 0.001 (about 1e-60): beyond and below f32.
const char *kSpec = "size R = 3, C = 20\ninput X[R, C] : f32\n"
                    "big[r] = prod(c: 1000 + X[r,c] * 0.001)\nsmall[r] = prod(c: 0.001 + X[r,c] * 1e-7)\n"
                    "output big, small : f32\n";

}  // namespace

TEST(RunCheck, OutputsBeyondTheirDtypesRangeAreComparedAsStored) {
    // fuzz_specs.py seed 13 #151 and #276: the float64 plan interpreter's products of 7.8e135 and
    // 4e-129, right to the last digit, failed --check against the unstored reference once written as f32.
    RunOptions o;
    test::check_run("saturating_outputs.rf", kSpec, o, "interp", {1, 2});
    o.segments = 3;
    test::check_run("saturating_outputs.rf", kSpec, o, "interp", {3});
}


TEST(RunCheck, Float32TargetsHoldValuesBeyondFloat32AsInfinity) {
    // big's products (about 1e60) overflow float32 arithmetic: inf on every float32 target, where the
    // reference stores f32's 3.4e38 (fuzz_specs.py seed 77 #93, #170: Σ exp(x·μ) of 1e81, 3.6e41).
    RunOptions o;
    test::check_run("saturating_outputs.rf", kSpec, o, "interp-f32", {1});
    test::check_run("saturating_outputs.rf", kSpec, o, "cpu", {1, 2});
    o.segments = 3;
    test::check_run("saturating_outputs.rf", kSpec, o, "cpu", {3});
}
