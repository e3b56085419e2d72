/** \file finite_invariants_test.cpp
 * The CPU tile pass finite-invariants (src/tile/FiniteInvariants.cpp): a vector loop dividing by a
 * loop-invariant value multiplies by its reciprocal when that is a normal float, and keeps the
 * division otherwise (a zero, infinite, subnormal or huge divisor; the language's 0 / 0 = 0); one that
 * subtracts a loop-invariant value subtracts plainly when it is finite, and keeps the guarded
 * subtraction otherwise (a fully masked row: -inf - (-inf) = -inf); a division under a rounding cast
 * stays a division; never on the GPU targets.
 */
#include <gtest/gtest.h>

#include <regex>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path spec() { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "zero_divisor_rows.rf"; }

std::string tile_text(TargetKind target) {
    auto c = analyze_source(test::read_text(spec()), "zero_divisor_rows.rf", make_target(target), {});
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(FiniteInvariants, TheEpilogueMultipliesByTheReciprocalUnderItsGuard) {
    ArenaScope arena;
    std::string t = tile_text(TargetKind::Cpu);
    EXPECT_NE(t.find("tile $r0 = 1 / $blk0[$rr]"), std::string::npos) << t;
    EXPECT_NE(t.find("if abs($r0) >= 1.1754943508222875e-38 and abs($r0) < inf:"), std::string::npos) << t;
    EXPECT_NE(t.find(" * $r0\n"), std::string::npos) << t;
    EXPECT_NE(t.find(" / $blk0[$rr]\n"), std::string::npos) << t;  // the loop for the other divisors
    // s is read before the loop, under the loop's guard: the epilogue's chunk of the row (CPU).
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(if \$\w*e0_\d+ < \$\w*e1_\d+:\n\s+tile \$r0 = 1 / \$blk0)"))) << t;
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) EXPECT_EQ(tile_text(gpu).find("tile $r"), std::string::npos);
}

TEST(FiniteInvariants, ShiftedSumsSubtractTheirReferencePlainlyWhenItIsFinite) {
    // A mean's shift reference (the tile's first term, $h0) is invariant in the tile's loop. (The
    // softmax sum of zero_divisor_rows.rf has terms of one sign: not shifted, nothing to subtract.)
    ArenaScope arena;
    const char *mean = "size R = 6, C = 300\ninput X[R, C] : f32\nmu[r] = sum(c: X[r,c]) / C\nY[r,c] = X[r,c] - mu[r]\noutput Y\n";
    auto c = analyze_source(mean, "mean.rf", make_target(TargetKind::Cpu), {});
    std::string t = tile::to_string(generate(*c).module);
    EXPECT_NE(t.find("tile $f0 = $h0\n"), std::string::npos) << t;
    EXPECT_NE(t.find("if abs($f0) < inf:"), std::string::npos) << t;
    EXPECT_NE(t.find(" - $f0\n"), std::string::npos) << t;  // printed a - b, emitted a + (-b)
    EXPECT_NE(t.find(" - $h0\n"), std::string::npos) << t;  // the guarded copy
    EXPECT_EQ(tile_text(TargetKind::Cpu).find(" - $h0\n"), std::string::npos);
}

TEST(FiniteInvariants, FullyMaskedRowsKeepTheGuardedSubtraction) {
    // Rows 0..2 are fully masked: m = -inf, and exp(X - m) must stay exp(-inf - (-inf)) = exp(-inf) = 0
    // (a plain subtraction would give NaN); the spec normalizes by s = 0 there (0 / 0 = 0).
    const char *src = "size R = 6, C = 300\ninput X[R, C] : f32\n"
                      "m[r] = max(c: select(r < 3, -inf, X[r,c]))\n"
                      "s[r] = sum(c: exp(select(r < 3, -inf, X[r,c]) - m[r]))\n"
                      "Y[r,c] = exp(select(r < 3, -inf, X[r,c]) - m[r]) / s[r]\noutput Y\n";
    RunOptions o;
    test::check_run("masked_rows.rf", src, o, "cpu", {52});
}

TEST(FiniteInvariants, ZeroDivisorsKeepTheLanguagesDivision) {
    // Rows 0 and 1 are 0 / 0 = 0 (a reciprocal would give 0 * inf = NaN); the rest a softmax.
    for (int64_t C : {300, 1, 37}) {
        RunOptions o;
        o.sizes = {{"C", C}};
        test::check_run(spec(), test::read_text(spec()), o, "cpu", {51});
    }
}

TEST(FiniteInvariants, OperandsInsideNestedReductionsStayThere) {
    // The unfused plan's literal kernels hold sums inside vector loops; an operand that uses such a
    // sum's variable cannot leave it (it did: "unbound variable a", CpuExamples on moment_of_inertia).
    std::filesystem::path p = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "moment_of_inertia.rf";
    RunOptions o;
    o.unfused = true;
    test::check_run(p, test::read_text(p), o, "cpu", {21});
}

TEST(FiniteInvariants, QuotientsUnderARoundingCastStayDivisions) {
    // f8e4m3(x · 448 / a): the reciprocal's extra ulp moved a quotient across an f8 rounding boundary,
    // a whole f8 step (12.5%) in F8 (scripts/fuzz_specs.py seed 77 #56). The division by a[r] inside
    // the cast stays; the one outside it (· a / 448, continuous) may still use the reciprocal.
    ArenaScope arena;
    std::filesystem::path p = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "quotient_under_f8_cast.rf";
    auto c = analyze_source(test::read_text(p), p.filename().string(), make_target(TargetKind::Cpu), {});
    std::string t = tile::to_string(generate(*c).module);
    size_t cast = t.find("f8e4m3(");
    ASSERT_NE(cast, std::string::npos) << t;
    std::string line = t.substr(cast, t.find('\n', cast) - cast);
    EXPECT_NE(line.find("* 448 / $blk0["), std::string::npos) << line;
    EXPECT_EQ(line.find("* $r"), std::string::npos) << "a reciprocal inside the cast\n" << line;
    EXPECT_EQ(t.find("f8e4m3(", cast + 1), std::string::npos) << "one copy of the loop, unversioned\n" << t;
    RunOptions o;
    o.threads = 1;
    test::check_run(p, test::read_text(p), o, "cpu", {56});
}
