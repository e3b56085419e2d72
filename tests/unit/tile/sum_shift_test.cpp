/** \file sum_shift_test.cpp
 * The shifted sum of the tile lowering (src/tile/LowerPass.cpp, Form::SumShift): Σ v = Σ (v - ref) +
 * n·ref with ref the first term keeps a mean of 1e4 ± 1 exact in float tiles, but a body with a select
 * has terms that are exactly 0 beside values, and n·ref cancelled all but a few digits of it; a first
 * term beyond 2^64 (inf as a float, or near float32's overflow) is no reference point either; nor is
 * the first of terms of one sign (softmax's exp(x - m)), whose plain sum is as accurate as they are: with
 * each row's max first, softmax f32 kept every output within 3e-6 of its float64 value only without it.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "runtime/OpenCLRuntime.h"
#include "tile/LowerPass.h"

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

// First terms beyond float32 (e^100: 2.7e43 in float64, inf as a float) and within it but huge
// (e^88 = 1.7e38), each followed by small terms. As the reference point, the first gave NaN on the CPU
// (inf - inf = inf and e^5 - inf = -inf in the float tile; scripts/fuzz_specs.py seed 77 #93), the
// second -inf (four terms of about -1.7e38 overflow the float tile sum) where the plain sum is 1.7e38.
const char *kHuge = "size R = 2, C = 5\ninput X[R, C] : f32\n"
                    "big[r] = sum(c: exp(X[r,c] * 0.001 + 100 - 95 * c))\n"
                    "near[r] = sum(c: exp(X[r,c] * 0.001 + 88 - 87 * c))\noutput big, near\n";

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

TEST(SumShift, HugeFirstTermsAreNotTheReference) {
    // big is inf (float32 overflows; the check accepts that where the reference is beyond float32),
    // near is 1.7e38: the reference point falls back to 0 beyond 2^64, for any tiling and on OpenCL.
    RunOptions o;
    test::check_run("huge_first_terms.rf", kHuge, o, "cpu", {1, 2});
    o.tile = 1;
    test::check_run("huge_first_terms.rf", kHuge, o, "cpu", {3});
    o.tile = 2;
    o.segments = 2;
    test::check_run("huge_first_terms.rf", kHuge, o, "cpu", {4});
    if (!ocl::unavailable_reason().empty()) return;
    RunOptions g;
    test::check_run("huge_first_terms.rf", kHuge, g, "opencl", {1});
}

TEST(SumShift, TermsOfOneSignAreSummedAsTheyAre) {
    ArenaScope arena;
    const std::string spec = test::read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "softmax.rf");
    const int64_t R = 16, C = 4096;
    Options o;
    o.sizes = {{"R", R}, {"C", C}};
    // The denominator's terms are summed as they are: no reference point subtracted in its loop.
    auto c = analyze_source(spec, "softmax.rf", make_target(TargetKind::Cpu), o);
    std::string text = tile::to_string(generate(*c).module);
    EXPECT_EQ(test::count_of(text, "sum= exp2("), 2u) << text;
    EXPECT_EQ(test::count_of(text, ") - $"), 0u) << text;
    // Each row's max first (a dominant first token): every output against its float64 value.
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(R * C)), y(x.size());
    for (float &v : x) v = nd(rng);
    for (int64_t r = 0; r < R; r++) x[static_cast<size_t>(r * C)] = 6.0f + 0.25f * static_cast<float>(r);
    rf::Kernel k = rf::compile(spec, make_target(TargetKind::Cpu), o);
    k({{x.data(), DType::f32, {R, C}}}, {{y.data(), DType::f32, {R, C}}});
    double worst = 0;
    for (int64_t r = 0; r < R; r++) {
        const float *xr = &x[static_cast<size_t>(r * C)];
        double m = xr[0], s = 0;
        for (int64_t j = 0; j < C; j++) s += std::exp(static_cast<double>(xr[j]) - m);
        for (int64_t j = 0; j < C; j++) {
            double want = std::exp(static_cast<double>(xr[j]) - m) / s;
            worst = std::max(worst, std::fabs(y[static_cast<size_t>(r * C + j)] - want) / want);
        }
    }
    // The exponentials alone are within about 1.5e-6 here (exp2 of a rounded (x - m)·log2 e); shifted
    // by the first term, the sums lost 3 digits: 9.3e-5.
    EXPECT_LT(worst, 3e-6);
}
