/** \file row_lanes_test.cpp
 * Column reductions with the rows of a block as SIMD lanes (Schedule::row_lanes,
 * src/tile/LowerPlan.cpp column_chain, src/tile/LowerPass.cpp lanes_update): chosen on the CPU for
 * chains of independent sums whose strided reads are contiguous in the row, never on the GPU
 * targets; the same values as the reference at every block, tile and segment shape.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path column_spec() { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "column_sums.rf"; }

std::string tile_text(const std::string &src, TargetKind target) {
    auto c = analyze_source(src, "t.rf", make_target(target), {});
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(RowLanes, ColumnSumsTakeTheRowsAsLanesOnTheCpuOnly) {
    ArenaScope arena;
    std::string src = test::read_text(column_spec());
    std::string cpu = tile_text(src, TargetKind::Cpu);
    EXPECT_NE(cpu.find("row_block=64 segments=1 threads=0 level=row row_lanes"), std::string::npos) << cpu;
    EXPECT_NE(cpu.find("for $rr in [0, $nbv) simd:"), std::string::npos) << cpu;
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) {
        std::string t = tile_text(src, gpu);
        EXPECT_EQ(t.find("row_lanes"), std::string::npos) << t;
    }
}

TEST(RowLanes, RowsReadAlongTheAxisOrReadTransposedKeepTheirLoop) {
    ArenaScope arena;
    // A row sum (contiguous along the axis) and a column sum of a transposed read: no lanes.
    for (const char *src : {"size R = 40, C = 70\ninput X[R, C] : f32\ns[m] = sum(c: X[m,c])\noutput s\n",
                            "size R = 40, C = 70\ninput X[C, R] : f32\ns[c] = sum(m: X[c,m] * X[c,m])\noutput s\n"}) {
        std::string cpu = tile_text(src, TargetKind::Cpu);
        EXPECT_EQ(cpu.find("row_lanes"), std::string::npos) << cpu;
    }
}

TEST(RowLanes, ColumnSumsMatchTheReference) {
    std::string src = test::read_text(column_spec());
    for (int64_t C : {1, 63, 64, 65, 130}) {
        for (int64_t R : {1, 300}) {
            RunOptions o;
            o.sizes = {{"C", C}, {"R", R}};
            test::check_run(column_spec(), src, o, "cpu", {1});
        }
    }
    RunOptions o;
    o.sizes = {{"C", 130}, {"R", 777}};
    o.tile = 7;
    o.row_block = 5;
    test::check_run(column_spec(), src, o, "cpu", {2});
    o.segments = 3;  // the axis split, segment states merged
    test::check_run(column_spec(), src, o, "cpu", {3});
    RunOptions ties;
    ties.dist = InputDistribution::Ties;  // exact zeros beside values, many equal terms
    ties.sizes = {{"C", 100}, {"R", 2000}};
    test::check_run(column_spec(), src, ties, "cpu", {4});
}
