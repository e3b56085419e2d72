/** \file fuse_extra_points_test.cpp
 * The CPU pass that sweeps a member's few extra points in one vector loop when an input stores them
 * innermost (src/tile/FuseExtraPoints.cpp): where it applies (moment of inertia's centroid, a pooling
 * over 2 or 4 channels), where not (5 points, points not innermost, GPUs, the pass off), and that the
 * kernels it changes still match the reference, with partial tiles and non-finite shifts.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "interp/Inputs.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path example(const char *name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }

/** Attention-like pooling of `points` channels stored innermost (or, `transposed`, outermost). */
std::string pooling(int points, bool transposed = false) {
    const std::string p = std::to_string(points);
    return "size S = 3, N = 29\ninput x[S, N] : f32\ninput P[S, " + (transposed ? p + ", N" : "N, " + p) +
           "] : f32\nm[s] = max(n: x[s,n])\nc[s,a] = sum(n: exp(x[s,n] - m[s]) * P[" +
           (transposed ? "s,a,n" : "s,n,a") + "]) / sum(n: exp(x[s,n] - m[s]))\noutput c\n";
}

std::string tile_text(const std::string &src, TargetKind t, bool pass = true) {
    ArenaScope arena;
    Options o;
    o.sizes = {{"S", 256}, {"N", 65536}};
    if (!pass) o.tile_passes = std::vector<std::string>{"exp2", "hoist", "invariant-sums", "finite-invariants"};
    auto c = analyze_source(src, "spec.rf", make_target(t), o);
    return tile::to_string(generate(*c).module);
}

int count(const std::string &text, const std::regex &re) {
    return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

}  // namespace

TEST(FuseExtraPoints, MomentOfInertiasCentroidIsOneVectorLoop) {
    const std::string src = test::read_text(example("moment_of_inertia.rf"));
    const std::string t = tile_text(src, TargetKind::Cpu);
    // The centroid's three points: one loop (and its copy for finite shifts), a reduction per point,
    // each point's own shift.
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(for (\$jj\d+) in \[\$tb, \$te\) simd:\n\s+(\$t\d+)p0 sum= w\[\$rbase \+ \$rr, \1\] \* P\[\$rbase \+ \$rr, \1, 0\] - \$f\d+\n\s+\2p1 sum= [^\n]*P\[\$rbase \+ \$rr, \1, 1\][^\n]*\n\s+\2p2 sum= [^\n]*P\[\$rbase \+ \$rr, \1, 2\])")))
        << t;
    EXPECT_EQ(t.find("in [0, 3) independent"), std::string::npos) << t;
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(\$A1_acc\[2\] sum= \$t\d+p2)"))) << t;
    const std::string off = tile_text(src, TargetKind::Cpu, false);
    EXPECT_NE(off.find("in [0, 3) independent"), std::string::npos) << off;
    EXPECT_EQ(count(off, std::regex(R"(p0 sum=)")), 0) << off;
    EXPECT_EQ(count(tile_text(src, TargetKind::OpenCL), std::regex(R"(p0 sum=)")), 0);
}

TEST(FuseExtraPoints, PoolingOverTwoOrFourChannelsButNotFiveOrChannelsOutermost) {
    for (int points : {2, 4}) {
        const std::string t = tile_text(pooling(points), TargetKind::Cpu);
        // The same pooling weight in every point's reduction of one loop (twice: the finite copy).
        EXPECT_EQ(count(t, std::regex("p" + std::to_string(points - 1) + R"( sum= exp2\()")), 2) << t;
        EXPECT_EQ(count(t, std::regex("p" + std::to_string(points) + R"( sum=)")), 0) << t;
    }
    EXPECT_EQ(count(tile_text(pooling(5), TargetKind::Cpu), std::regex(R"(p0 sum=)")), 0);
    EXPECT_EQ(count(tile_text(pooling(4, true), TargetKind::Cpu), std::regex(R"(p0 sum=)")), 0);
}

TEST(FuseExtraPoints, KernelsWithItMatchTheReference) {
    // One tile and several, a partial last tile, one row and a few.
    for (auto [S, N] : {std::pair<int64_t, int64_t>{1, 3000}, {7, 5000}, {5, 700}}) {
        RunOptions o;
        o.sizes = {{"S", S}, {"N", N}};
        test::check_run(example("moment_of_inertia.rf"), test::read_text(example("moment_of_inertia.rf")), o, "cpu", {3, 4});
        for (int points : {2, 4}) test::check_run("pooling.rf", pooling(points), o, "cpu", {3, 4});
    }
}

TEST(FuseExtraPoints, NonFiniteShiftsTakeTheGuardedCopy) {
    // Rows whose scores are all -inf (m = -inf: every weight exp(-inf - (-inf)) is the language's
    // masked 0, c = 0 / 0), hold one +inf (m = +inf: NaN weights) or one NaN, next to finite rows: the
    // fused loop's guarded copy keeps the spec's values; a NaN channel value reaches only its point.
    const std::filesystem::path path = "pooling.rf";
    const std::string src = pooling(4);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    const std::map<std::string, int64_t> sizes{{"S", 6}, {"N", 1000}};
    auto in = make_random_inputs(c->program, bind_sizes(c->program, sizes), 3);
    for (int64_t n = 0; n < 1000; n++) in.at("x").at({0, n}) = -INFINITY;
    in.at("x").at({1, 517}) = INFINITY;
    in.at("x").at({2, 3}) = NAN;
    in.at("P").at({4, 999, 2}) = NAN;
    RunOptions o;
    o.sizes = sizes;
    test::check_run_on_inputs(path, src, in, o, "cpu");
}
