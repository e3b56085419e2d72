/** \file reciprocal_divisors_test.cpp
 * The CPU tile pass reciprocal_divisors (src/tile/ReciprocalDivisors.cpp): a vector loop dividing by a
 * loop-invariant value multiplies by its reciprocal when that is a normal float, and keeps the
 * division otherwise (a zero, infinite, subnormal or huge divisor; the language's 0 / 0 = 0); never on
 * the GPU targets.
 */
#include <gtest/gtest.h>

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

TEST(ReciprocalDivisors, TheEpilogueMultipliesByTheReciprocalUnderItsGuard) {
    ArenaScope arena;
    std::string t = tile_text(TargetKind::Cpu);
    EXPECT_NE(t.find("tile $r0 = 1 / s[$rbase + $rr]"), std::string::npos) << t;
    EXPECT_NE(t.find("if abs($r0) >= 1.1754943508222875e-38 and abs($r0) < inf:"), std::string::npos) << t;
    EXPECT_NE(t.find(" * $r0\n"), std::string::npos) << t;
    EXPECT_NE(t.find(" / s[$rbase + $rr]\n"), std::string::npos) << t;  // the loop for the other divisors
    EXPECT_NE(t.find("if 0 < C:"), std::string::npos) << t;               // s is read before the loop
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) EXPECT_EQ(tile_text(gpu).find("tile $r0 = 1 /"), std::string::npos);
}

TEST(ReciprocalDivisors, ZeroDivisorsKeepTheLanguagesDivision) {
    // Rows 0 and 1 are 0 / 0 = 0 (a reciprocal would give 0 * inf = NaN); the rest a softmax.
    for (int64_t C : {300, 1, 37}) {
        RunOptions o;
        o.sizes = {{"C", C}};
        test::check_run(spec(), test::read_text(spec()), o, "cpu", {51});
    }
}
