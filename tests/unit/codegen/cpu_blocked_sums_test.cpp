/** \file cpu_blocked_sums_test.cpp
 * The CPU's blocked vector sums (src/codegen/CpuKernelPrinter.cpp print_blocked_sums): which loops sum
 * into blocks of partial sums (one to four float and double sums at the loop's top level, unit-stride
 * loads) and which keep the plain `omp simd reduction` (a max, gathered loads), and that the kernels match the reference at
 * lengths below, at and around the block (rfk::kSumBlockBytes: 16 to 64 floats).
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "driver/Compiler.h"

using namespace rf;

namespace {

// Two sums of one row (one pass: both blocked in one loop), a max (not blocked), and a mean of squares.
const char *kSpec = "size R = 6, C = 100\ninput X[R, C] : f32\n"
                    "s[r] = sum(c: X[r,c])\n"
                    "q[r] = sum(c: X[r,c] * X[r,c] + 1)\n"
                    "m[r] = max(c: X[r,c])\n"
                    "y[r] = s[r] / C + q[r] / C + m[r]\n"
                    "output y\n";

std::string cpu_source(const char *src, const char *name, Options o = {}) {
    ArenaScope arena;
    auto c = analyze_source(src, name, make_target(TargetKind::Cpu), o);
    return generate(*c).source;
}

}  // namespace

TEST(CpuBlockedSums, SumsAreBlockedAndMaxesAreNot) {
    const std::string cpp = cpu_source(kSpec, "sums.rf");
    EXPECT_NE(cpp.find("part0_[rfk::kSumBlockBytes / 4] = {};"), std::string::npos) << cpp;
    EXPECT_NE(cpp.find("rfk::sum_pairwise(part0_, rfk::kSumBlockBytes / 4)"), std::string::npos) << cpp;
    // The max keeps its NaN-flagged reduction (or rfk::row_max), never a partial-sum block.
    EXPECT_TRUE(cpp.find("reduction(max:") != std::string::npos || cpp.find("rfk::row_max(") != std::string::npos) << cpp;
}

TEST(CpuBlockedSums, NotForStridedLoadsAndHalfBlocksForFourSums) {
    // Every third float (a gathered load): the loop waits on its loads, not on its adds.
    const char *strided = "size R = 4, C = 100\ninput X[R, C, 3] : f32\ns[r] = sum(c: X[r,c,1])\noutput s\n";
    EXPECT_EQ(cpu_source(strided, "strided.rf").find("part0_"), std::string::npos);
    // Four sums in one loop (the shift form of a fourth central moment): blocks of half the bytes.
    const char *fourth = "size R = 4, C = 100\ninput X[R, C] : f32\nmu[r] = sum(c: X[r,c]) / C\n"
                         "k[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r]) * (X[r,c] - mu[r]) * (X[r,c] - mu[r]))\noutput k\n";
    const std::string cpp = cpu_source(fourth, "fourth.rf");
    EXPECT_NE(cpp.find("part3_[rfk::kSumBlockBytes / 8] = {};"), std::string::npos) << cpp;
    EXPECT_EQ(cpu_source(kSpec, "sums.rf").find("kSumBlockBytes / 8"), std::string::npos);  // one sum a loop: whole blocks
}

TEST(CpuBlockedSums, KernelsMatchTheReferenceAroundTheBlock) {
    for (int64_t C : {1, 17, 32, 33, 100, 1000}) {
        RunOptions o;
        o.sizes = {{"C", C}};
        test::check_run("sums.rf", kSpec, o, "cpu", {1, uint64_t(C)});
        test::check_run("fourth.rf", "size R = 4, C = 100\ninput X[R, C] : f32\nmu[r] = sum(c: X[r,c]) / C\n"
                        "k[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r]) * (X[r,c] - mu[r]) * (X[r,c] - mu[r]))\noutput k\n", o, "cpu", {3});
    }
}

TEST(CpuBlockedSums, LayerNormMatchesTheReference) {
    // LayerNorm's moments (the blocked sums of a shifted row) and its epilogue, at lengths around a block.
    const char *ln = "size R = 5, C = 37\ninput X[R, C] : f32\ninput g[C] : f32\ninput b[C] : f32\n"
                     "mu[r] = sum(c: X[r,c]) / C\n"
                     "var[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C\n"
                     "Y[r,c] = (X[r,c] - mu[r]) * rsqrt(var[r] + 1e-5) * g[c] + b[c]\noutput Y : f32\n";
    for (int64_t C : {33, 4100}) {
        RunOptions o;
        o.sizes = {{"C", C}};
        test::check_run("ln.rf", ln, o, "cpu", {2, uint64_t(C)});
    }
}
