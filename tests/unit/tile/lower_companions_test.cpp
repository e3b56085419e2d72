/** \file lower_companions_test.cpp
 * Companion sums in the tile update (src/tile/LowerCompanions.cpp): the softmax sum s of the entropy
 * gets its tile sum from the entropy's loop (one exponential per element), keeps its rescale, tags and
 * merge, and every backend still computes H at the schedules that rescale, merge and block rows;
 * where a member in between reads s, s keeps its own loop.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "runtime/OpenCLRuntime.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::string entropy_source() {
    return test::read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "softmax_entropy.rf");
}

/** The tile IR of the first kernel's tile loop, as text. */
std::string tile_text(const std::string &src, TargetKind target) {
    auto c = analyze_source(src, "t.rf", make_target(target), {});
    return tile::to_string(generate(*c).module);
}

std::string masked_source() {
    return test::read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "masked_entropy.rf");
}

}  // namespace

TEST(LowerCompanions, TheSoftmaxSumIsSummedInTheEntropysLoop) {
    ArenaScope arena;
    for (TargetKind target : {TargetKind::Cpu, TargetKind::OpenCL, TargetKind::Cuda}) {
        // The masked spec's tiles come in two versions (all valid, or masked: SkipMaskedTiles), except
        // on OpenCL, which does not run that pass (docs/gpu.md, PoCL notes).
        const size_t masked_loops = target == TargetKind::OpenCL ? 3 : 5;
        for (auto [src, loops] : {std::pair<std::string, size_t>{entropy_source(), 3}, {masked_source(), masked_loops}}) {
        std::string tile = tile_text(src, target);
        // Before: three loops over the tile (max, s, t), with two exponentials per element; and the
        // epilogue's loop (on the CPU twice: dividing by s's reciprocal, or by s when it is 0, inf or
        // subnormal: FiniteInvariants.cpp).
        EXPECT_EQ(test::count_of(tile, ") simd:"), loops + (target == TargetKind::Cpu ? 1 : 0)) << tile;
        EXPECT_EQ(test::count_of(tile, "$A1_acc[0] sum= -$t"), 0u) << tile;
        EXPECT_GE(test::count_of(tile, "$A1_acc[$x2_"), 1u) << tile;  // s += -(Σ_tile S_1's terms), in t's block
        }
    }
}

TEST(LowerCompanions, AMemberReadingTheCompanionInBetweenKeepsItsOwnLoop) {
    ArenaScope arena;
    std::string src = entropy_source();
    src.insert(src.find("t[r]"), "u[r] = sum(c: X[r,c] / s[r])\n");
    src += "output u : f32\n";
    std::string tile = tile_text(src, TargetKind::Cpu);
    // m, s, u, t and the epilogue; on the CPU u's, t's and the epilogue's twice (FiniteInvariants.cpp)
    EXPECT_EQ(test::count_of(tile, ") simd:"), 8u) << tile;
}

TEST(LowerCompanions, EveryBackendAtSchedulesThatRescaleMergeAndBlockRows) {
    for (const char *target : {"cpu", "opencl"}) {
        bool opencl = std::string(target) == "opencl";
        if (opencl && !ocl::unavailable_reason().empty()) continue;
        for (auto [tile, segments, row_block] : {std::tuple<int64_t, int64_t, int64_t>{0, 0, 0}, {64, 1, 1}, {64, 4, 1}, {128, 3, 4}}) {
            // Under PoCL a masked shift-form member with forced row blocks sums each row once per
            // thread of its group, with or without companions (the CUDA emulator runs the same
            // kernel right): docs/gpu.md, known problems.
            if (opencl && row_block > 1) continue;
            RunOptions o;
            o.tile = tile;
            o.segments = segments;
            o.row_block = row_block;
            test::check_run("masked_entropy.rf", masked_source(), o, target, {1, 2});
            o.scale = 20;
            test::check_run("masked_entropy.rf", masked_source(), o, target, {3});
            o.sizes = {{"R", 3}, {"C", 40000}};
            o.scale = 50;
            test::check_run("softmax_entropy.rf", entropy_source(), o, target, {3});
        }
    }
}
