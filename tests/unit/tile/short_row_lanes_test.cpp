/** \file short_row_lanes_test.cpp
 * Chains of short rows with the rows of a block as SIMD lanes (Schedule::row_lanes, src/tile/LowerPlan.cpp
 * lane_members, src/tile/LowerLanes.cpp): every member of rows under 16, only the top-k lists of rows up
 * to 256 (length x K <= 2048), the per-row loops beyond, never on the GPU targets and never for a member the lanes cannot
 * update; the lists' outputs written a slot at a time from the lanes; and the same values and indices as
 * the reference at every row length, block, tile and with ties and NaN terms (the lane insertion's
 * order is topk_insert's), top-k and bottom-k lists alike.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path spec(const char *name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / name; }

/** The spec with its size line replaced: the schedule is chosen for the sizes the plan sees. */
std::string at_sizes(const std::string &src, int64_t T, int64_t E) {
    std::string line = "size T = " + std::to_string(T) + ", E = " + std::to_string(E);
    size_t a = src.find("size T = ");
    return src.substr(0, a) + line + src.substr(src.find('\n', a));
}

std::string tile_text(const std::string &src, TargetKind target) {
    auto c = analyze_source(src, "t.rf", make_target(target), {});
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(ShortRowLanes, RowLengthDecidesWhichMembersTakeLanes) {
    ArenaScope arena;
    std::string src = test::read_text(spec("short_rows.rf"));
    std::string every = tile_text(at_sizes(src, 100, 8), TargetKind::Cpu);
    EXPECT_NE(every.find("row_block=16 segments=1 threads=0 level=row row_lanes\n"), std::string::npos) << every;
    EXPECT_NE(every.find("for $rr in [0, $nbv) lanes:"), std::string::npos) << every;  // the top-k insertion
    EXPECT_NE(every.find("for $rr in [0, $nbv) simd:"), std::string::npos) << every;   // max, sums
    EXPECT_NE(every.find("$need"), std::string::npos) << every;  // a one-row block skips what cannot enter
    for (int64_t E : {40, 256}) {  // top-4: E x K <= 2048
        std::string lists = tile_text(at_sizes(src, 100, E), TargetKind::Cpu);
        EXPECT_NE(lists.find("row_lanes=topk"), std::string::npos) << lists;
    }
    std::string longer = tile_text(at_sizes(src, 100, 257), TargetKind::Cpu);
    EXPECT_EQ(longer.find("row_lanes"), std::string::npos) << longer;
    std::string wide = tile_text("size T = 100, E = 200\ninput X[T, E] : f32\nW[t,r], I[t,r] = topk(e, 16: X[t,e])\noutput W, I\n",
                                 TargetKind::Cpu);
    EXPECT_EQ(wide.find("row_lanes"), std::string::npos) << wide;  // 200 x 16 compare-and-selects per row
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) {
        std::string t = tile_text(at_sizes(src, 100, 8), gpu);
        EXPECT_EQ(t.find("row_lanes"), std::string::npos) << t;
    }
}

TEST(ShortRowLanes, MembersWithoutALaneUpdateKeepTheRowLoops) {
    ArenaScope arena;
    // An argmax, a product, a top-k of 17 and a shift-form variance: none has a lane update.
    for (const char *src : {"size T = 100, E = 8\ninput X[T, E] : f32\nm[t] = max(e: X[t,e])\ni[t] = argmax(e: X[t,e])\noutput m, i\n",
                            "size T = 100, E = 8\ninput X[T, E] : f32\np[t] = prod(e: X[t,e])\noutput p\n",
                            "size T = 100, E = 40\ninput X[T, E] : f32\nW[t,r], I[t,r] = topk(e, 17: X[t,e])\noutput W, I\n",
                            "size T = 100, E = 8\ninput X[T, E] : f32\nmu[t] = sum(e: X[t,e]) / 8\nv[t] = sum(e: (X[t,e] - mu[t]) * (X[t,e] - mu[t]))\noutput mu, v\n"}) {
        std::string cpu = tile_text(src, TargetKind::Cpu);
        EXPECT_EQ(cpu.find("row_lanes"), std::string::npos) << cpu;
    }
}

TEST(ShortRowLanes, ListsAreWrittenASlotAtATimeFromTheirLanes) {
    ArenaScope arena;
    // After the rows' finalization, one vector loop over the rows per slot reads each list where the
    // insertion left it (slot q of row rr at q * 16 + rr): no copy back to row-major slots first.
    // (src/tile/LowerLanes.cpp lane_list_outputs, PassLowering::field_class.)
    std::string t = tile_text(at_sizes(test::read_text(spec("short_rows_bottomk.rf")), 100, 8), TargetKind::Cpu);
    EXPECT_NE(t.find("row_lanes"), std::string::npos) << t;
    EXPECT_EQ(t.find("$tkrows"), std::string::npos) << t;
    // The lists' values and counts in the compute type, their indices in float64; the max's running
    // value in the compute type too (every update computes it there), the multiplicative sum's in float64.
    for (const char *decl : {"lane_state $A2_tk_v[", "state $A2_tk_i[", "lane_state $A2_tk_n[", "lane_state $A3_tk_v[", "state $A3_tk_i[",
                             "lane_state $A0_acc[", "state $A1_acc["})
        EXPECT_NE(t.find(decl), std::string::npos) << decl << "\n" << t;
    for (const char *out : {"store B[$rbase + $rr, $sl", "store J[$rbase + $rr, $sl", "store W[$rbase + $rr, $sl",
                            "store I[$rbase + $rr, $sl"}) {
        size_t at = t.find(out);
        ASSERT_NE(at, std::string::npos) << out << "\n" << t;
        size_t loop = t.rfind("for $rr in [0, $nbv)", at);
        ASSERT_NE(loop, std::string::npos) << t;
        const std::string lanes = "for $rr in [0, $nbv) lanes:";
        EXPECT_EQ(t.compare(loop, lanes.size(), lanes), 0) << t.substr(loop, 40);
        EXPECT_NE(t.find("* 16 + $rr]", at), std::string::npos) << t;
    }
}

TEST(ShortRowLanes, MatchTheReference) {
    for (const char *name : {"short_rows.rf", "short_rows_nan.rf", "short_rows_bottomk.rf", "short_rows_masked.rf"}) {
        std::string src = test::read_text(spec(name));
        for (int64_t E : {5, 8, 15, 16, 17, 40, 64, 200}) {
            for (int64_t T : {1, 17, 70}) {
                for (InputDistribution dist : {InputDistribution::Normal, InputDistribution::Ties}) {
                    RunOptions o;
                    o.sizes = {{"T", T}, {"E", E}};
                    o.dist = dist;
                    test::check_run(spec(name), src, o, "cpu", {1});
                }
            }
        }
        // Several tiles per row (the multiplicative sum rescaled between them, the list carried on),
        // a partial last block, one thread.
        RunOptions o;
        o.sizes = {{"T", 37}, {"E", 13}};
        o.dist = InputDistribution::Ties;
        o.tile = 3;
        test::check_run(spec(name), src, o, "cpu", {2});
        o.row_block = 5;
        o.threads = 1;
        test::check_run(spec(name), src, o, "cpu", {3});
    }
}
