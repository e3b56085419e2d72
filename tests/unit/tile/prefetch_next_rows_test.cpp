/** \file prefetch_next_rows_test.cpp
 * The CPU pass that asks for the next row's inputs during the last sweep over a row that reads them
 * (src/tile/PrefetchNextRows.cpp): where it goes (softmax's second pass, LayerNorm's epilogue chunks,
 * the next tile before variance's second sweep of a tile), where it does not (GPUs, blocks of several
 * rows, one sweep of each tile), and that kernels with it still match the reference at row counts
 * where the next row does not exist.
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path example(const char *name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }

std::string with_bf16(std::string src) {
    src = std::regex_replace(src, std::regex(R"(input X\[R, C\] : f32)"), "input X[R, C] : bf16");
    return std::regex_replace(src, std::regex(R"(output Y : f32)"), "output Y : bf16");
}

std::string cpu_source(const char *name) {
    ArenaScope arena;
    Options o;
    o.sizes = {{"R", 4096}, {"C", 8192}};
    auto c = analyze_source(test::read_text(example(name)), name, make_target(TargetKind::Cpu), o);
    return generate(*c).source;
}

std::string tile_text(const std::string &src, TargetKind t, std::map<std::string, int64_t> sizes, bool pass = true) {
    ArenaScope arena;
    Options o;
    o.sizes = std::move(sizes);
    if (!pass) o.tile_passes = std::vector<std::string>{"exp2", "hoist", "finite-invariants", "row-copies"};
    auto c = analyze_source(src, "spec.rf", make_target(t), o);
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(PrefetchNextRows, SoftmaxAsksForTheNextRowDuringItsSecondPass) {
    const std::string src = with_bf16(test::read_text(example("softmax.rf")));
    const std::string t = tile_text(src, TargetKind::Cpu, {{"R", 4096}, {"C", 8192}});
    // The max pass (p0) reads the row from memory; the exp pass (p1) from the caches, and asks.
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(index \$p1_te = [^\n]*\n\s+if \$rbase \+ 1 < R:\n\s+prefetch X\[\$rbase \+ 1, \$p1_tb\]\[0, \$p1_te - \$p1_tb\))")))
        << t;
    EXPECT_EQ(t.find("prefetch X[$rbase + 1, $p0_tb]"), std::string::npos) << t;
    EXPECT_EQ(t.find("during the row copy"), std::string::npos) << t;  // the exp pass copies no row out
    EXPECT_EQ(tile_text(src, TargetKind::Cpu, {{"R", 4096}, {"C", 8192}}, false).find("prefetch"), std::string::npos);
    EXPECT_EQ(tile_text(src, TargetKind::OpenCL, {{"R", 4096}, {"C", 8192}}).find("prefetch"), std::string::npos);
}

TEST(PrefetchNextRows, LayerNormAsksDuringItsEpilogue) {
    const std::string t = tile_text(test::read_text(example("layernorm.rf")), TargetKind::Cpu, {{"R", 4096}, {"C", 8192}});
    // Spread over the chunk's streamed row copy (rfk::RowStream::prefetch_next), not a burst before it.
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(prefetch X\[\$rbase \+ 1, \$e0_\d+\]\[0, \$e1_\d+ - \$e0_\d+\) during the row copy)"))) << t;
    const std::string cpp = cpu_source("layernorm.rf");
    EXPECT_NE(cpp.find("rs_.prefetch_next(&"), std::string::npos) << cpp;
    EXPECT_EQ(cpp.find("rfk::prefetch_l2(&"), std::string::npos) << cpp;
}

TEST(PrefetchNextRows, VarianceAsksForTheNextTileBeforeItsTilesSecondSweep) {
    // Variance sweeps each row once, each tile twice (Σ (x − ref), then the shifted moments): the
    // second member loop is preceded by the next tile's prefetch, or at the row's last tile the next
    // row's first; the first member loop is not.
    const std::string src = test::read_text(example("variance.rf"));
    const std::string t = tile_text(src, TargetKind::Cpu, {{"R", 4096}, {"C", 8192}});
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(# member 1[^\n]*\n\s+if \$te \+ \$te - \$tb <= C:\n\s+prefetch X\[\$rbase, \$te\]\[0, \$te - \$tb\))")))
        << t;
    EXPECT_TRUE(std::regex_search(t, std::regex(R"(if \$te == C and \$rbase \+ 1 < R:\n\s+prefetch X\[\$rbase \+ 1, 0\]\[0, \$te - \$tb\) during the sweep)"))) << t;
    EXPECT_EQ(t.find("prefetch X[$rbase + 1, $tb]"), std::string::npos) << t;  // not the next row's tile: rule 1 is for rows swept twice
    EXPECT_EQ(tile_text(src, TargetKind::Cpu, {{"R", 4096}, {"C", 8192}}, false).find("prefetch"), std::string::npos);
    EXPECT_EQ(tile_text(src, TargetKind::OpenCL, {{"R", 4096}, {"C", 8192}}).find("prefetch"), std::string::npos);
}

TEST(PrefetchNextRows, VarianceSpreadsTheNextTileOverItsSecondSweep) {
    // The second member loop is printed as blocked sums: the held range's lines are asked for a few
    // per block (rfk::SweepPrefetch), none in a burst before the loop.
    const std::string cpp = cpu_source("variance.rf");
    EXPECT_TRUE(std::regex_search(cpp, std::regex(R"(pf_\.spread\(\(e_ - b_\) / \([^\n]*\n\s*for \(; b_ \+[^\n]*\{\n\s*pf_\.next\(\);)"))) << cpp;
    EXPECT_NE(cpp.find("pf_.hold(&"), std::string::npos) << cpp;
    EXPECT_EQ(cpp.find("rfk::prefetch_l2(&"), std::string::npos) << cpp;
    EXPECT_EQ(cpp.find("pf_.rest();\n"), cpp.find("pf_.rest();\n", cpp.find("pf_.next();"))) << "no rest() before the spread" << cpp;
}

TEST(PrefetchNextRows, AnotherFormOfTheSweepAsksForTheHeldRangeBeforeIt) {
    // Logsumexp's second member loop is an exp2 row sum (one rfk::exp2_row_sum call): the held range is
    // asked for all at once before it, as the plain prefetch was.
    const std::string cpp = cpu_source("logsumexp.rf");
    EXPECT_TRUE(std::regex_search(cpp, std::regex(R"(pf_\.rest\(\);\n\s*[^\n]*rfk::exp2_row_sum)"))) << cpp;
    EXPECT_EQ(cpp.find("pf_.spread("), std::string::npos) << cpp;
}

TEST(PrefetchNextRows, MomentOfInertiaAsksForTheNextTileOfItsPoints) {
    // P[S, N, 3]: an element of the row is a point of 3 values, so the next tile is (te - tb) * 3 values
    // from P[$rbase, $te, 0] (and w's next tile as before).
    const std::string t = tile_text(test::read_text(example("moment_of_inertia.rf")), TargetKind::Cpu, {{"S", 256}, {"N", 65536}});
    EXPECT_NE(t.find("prefetch P[$rbase, $te, 0][0, ($te - $tb) * 3) during the sweep"), std::string::npos) << t;
    EXPECT_NE(t.find("prefetch P[$rbase + 1, 0, 0][0, ($te - $tb) * 3) during the sweep"), std::string::npos) << t;
    EXPECT_NE(t.find("prefetch w[$rbase, $te][0, $te - $tb) during the sweep"), std::string::npos) << t;
}

TEST(PrefetchNextRows, NotForOneMemberLoopOrSeveralRowsABlock) {
    // The sum of a row sweeps each tile once; attention's blocks hold many query rows.
    const std::string sum = "size R = 5, C = 37\ninput X[R, C] : f32\nt[r] = sum(c: X[r,c] * X[r,c])\noutput t\n";
    EXPECT_EQ(tile_text(sum, TargetKind::Cpu, {{"R", 4096}, {"C", 8192}}).find("prefetch"), std::string::npos);
    EXPECT_EQ(tile_text(test::read_text(example("attention.rf")), TargetKind::Cpu, {}).find("prefetch"), std::string::npos);
}

TEST(PrefetchNextRows, AHeldPrefetchNoSweepTakesIsAskedAtTheEndOfItsBody) {
    // The variance-like members hold the next tile for a second sweep; the top-k after them sweeps
    // nothing. The held range is asked for at the end of the tile loop's body, in its own region: the
    // generated C++ compiles (it did not at --segments 2) and matches the reference.
    const std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "sweep_prefetch_before_topk.rf";
    const std::string src = test::read_text(spec);
    for (int64_t segments : {0, 2}) {
        RunOptions o;
        o.segments = segments;
        test::check_run(spec, src, o, "cpu", {63, 1});
    }
    ArenaScope arena;
    Options opts;
    opts.segments = 2;
    auto c = analyze_source(src, "spec.rf", make_target(TargetKind::Cpu), opts);
    const std::string cpp = generate(*c).source;
    ASSERT_NE(cpp.find("pf_.hold(&"), std::string::npos) << cpp;
    // Each region that holds asks for the held range before its row loop's iteration ends, and no
    // rest() comes before the region's first hold.
    for (size_t at = cpp.find("rfk::SweepPrefetch pf_;"); at != std::string::npos; at = cpp.find("rfk::SweepPrefetch pf_;", at + 1)) {
        const size_t hold = cpp.find("pf_.hold(&", at), rest = cpp.find("pf_.rest();", at);
        EXPECT_LT(hold, rest) << cpp.substr(at, 200);
    }
}

TEST(PrefetchNextRows, KernelsWithItMatchTheReference) {
    // The last row has no next row (the guard); one row; rows of one tile and of several.
    for (const char *name : {"softmax.rf", "log_softmax.rf", "layernorm.rf", "variance.rf", "logsumexp.rf"}) {
        const std::string src = test::read_text(example(name));
        for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 3000}, {7, 5000}, {33, 1030}}) {
            RunOptions o;
            o.sizes = {{"R", R}, {"C", C}};
            test::check_run(example(name), src, o, "cpu", {3});
            if (std::string(name) == "softmax.rf") test::check_run(example(name), with_bf16(src), o, "cpu", {4});
        }
    }
    // Points of 3 values (rows of one-row blocks at these sizes; a last tile shorter than the others).
    const std::string moi = test::read_text(example("moment_of_inertia.rf"));
    for (auto [S, N] : {std::pair<int64_t, int64_t>{9, 30000}, {10, 30001}}) {
        RunOptions o;
        o.sizes = {{"S", S}, {"N", N}};
        ASSERT_NE(tile_text(moi, TargetKind::Cpu, o.sizes).find("prefetch P["), std::string::npos);
        test::check_run(example("moment_of_inertia.rf"), moi, o, "cpu", {3});
    }
}
