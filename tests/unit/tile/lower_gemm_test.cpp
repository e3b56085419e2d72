/** \file lower_gemm_test.cpp
 * The per-tile factor a GEMM member shares with the other members of its pass
 * (src/tile/LowerGemm.cpp): a member that reads the shared factor instead of its own terms still
 * does everything its own update would, here the store of each term for an epilogue that reuses it.
 */
#include <gtest/gtest.h>

#include <regex>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "runtime/OpenCLRuntime.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

/** Softmax P beside an attention-like output O over another axis: s's term exp(X - m) is the GEMM's
 *  factor for O, and P = exp(X - m) / s reuses the stored terms (one exponential per element). */
std::string spec(const std::string &p_dtype) {
    return "size R = 5, C = 37, D = 3\n"
           "input X[R, C] : f32\n"
           "input V[C, D] : f32\n"
           "m[r] = max(c: X[r,c])\n"
           "s[r] = sum(c: exp(X[r,c] - m[r]))\n"
           "P[r,c] = exp(X[r,c] - m[r]) / s[r]\n"
           "O[r,d] = sum(c: exp(X[r,c] - m[r]) * V[c,d]) / s[r]\n"
           "output O\n"
           "output P : " + p_dtype + "\n";
}

}  // namespace

TEST(LowerGemm, ATermSharedWithAGemmIsStoredForTheEpilogue) {
    // Found by scripts/fuzz_specs.py (seed 11, spec 36): the pass stored no term into P, and the
    // epilogue's `P = P / s` divided whatever the buffer held (NaN or stale values, CPU and OpenCL).
    ArenaScope arena;
    // A GPU keeps an f32 P's terms in P: the term in the pass, the division in the epilogue.
    auto g = analyze_source(spec("f32"), "t.rf", make_target(TargetKind::OpenCL), {});
    std::string gpu = tile::to_string(generate(*g).module);
    EXPECT_EQ(test::count_of(gpu, "store P["), 2u) << gpu;
    // The CPU keeps them in a per-row float buffer (LowerPlan.cpp split_for_term_reuse), which the
    // epilogue divides (by 1 / s, or by s) into the chunks it copies to P.
    Options rows;
    rows.sizes = {{"C", 300}};  // rows under 128 values keep the terms in P (short rows)
    auto c = analyze_source(spec("f32"), "t.rf", make_target(TargetKind::Cpu), rows);
    std::string tile = tile::to_string(generate(*c).module);
    EXPECT_TRUE(std::regex_search(tile, std::regex(R"(\$\w*rowterm\[[^\]]*\] = \$\w*f0\[)"))) << tile;
    EXPECT_EQ(test::count_of(tile, "= $p1_rowterm["), 2u) << tile;
    EXPECT_NE(tile.find("copy P["), std::string::npos) << tile;
    EXPECT_NE(tile.find("gemm "), std::string::npos) << tile;
}

TEST(LowerGemm, ATermSharedWithAGemmRunsRightOnEveryBackend) {
    // f32 P holds the terms in place; a narrower P gets a per-row float buffer (both paths).
    for (const char *dtype : {"f32", "bf16"}) {
        for (int64_t C : {1, 37, 300}) {
            RunOptions o;
            o.sizes = {{"C", C}};
            test::check_run("term_shared_with_gemm.rf", spec(dtype), o, "cpu", {1, 2});
            o.segments = 2;
            o.tile = 16;
            test::check_run("term_shared_with_gemm.rf", spec(dtype), o, "cpu", {3});
        }
    }
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    RunOptions o;
    o.sizes = {{"C", 300}};
    test::check_run("term_shared_with_gemm.rf", spec("f32"), o, "opencl", {1});
}
