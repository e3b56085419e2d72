/** \file gemm_sum_tiles_test.cpp
 * The CPU tile passes around GEMM-fed sums: fold-flags (src/tile/FoldConstantFlags.cpp) drops the
 * branch on a literal-recompute flag nothing sets and keeps one that can be set; gemm-sums
 * (src/tile/GemmSumTiles.cpp) keeps RMSNorm→GEMM's and the int8 GEMM's sums in float tiles the GEMMs
 * accumulate into, without seen flags or reference points (rescaled GEMM sums:
 * gemm_rescaled_sums_test.cpp); forward-temps (src/tile/ForwardBlockTemps.cpp) lets the epilogue read that tile
 * instead of a float64 temporary of the whole output, and leaves one that a later statement stores again
 * (a top-k's literal fallback). The results agree with the reference over
 * several tiles of the axis, partial row blocks, and extents of 1; the GPU lowerings are unchanged.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path example(const std::string &name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }

tile::Module lowered(const std::string &name, TargetKind target, const Options &o = {}) {
    auto c = analyze_source(test::read_text(example(name)), name, make_target(target), o);
    return generate(*c).module;
}

bool has_buffer(const tile::Module &m, const std::string &name) { return m.find(name) != nullptr; }

bool contains(const std::string &text, const std::string &what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST(FoldConstantFlags, ABranchOnAFlagNothingSetsKeepsOnlyItsTakenSide) {
    ArenaScope arena;
    std::string t = tile::to_string(lowered("softmax.rf", TargetKind::Cpu));
    EXPECT_TRUE(contains(t, "index $p1_lit0 = select(false, 1, 0)")) << t;
    EXPECT_FALSE(contains(t, "if $p1_lit0 != 0:")) << t;
    EXPECT_FALSE(contains(t, "sum(c: exp2(")) << t;  // the literal recompute went with its branch
}

TEST(FoldConstantFlags, AFlagTheMergeCanSetKeepsItsBranch) {
    // Attention's l is recomputed literally when its row maximum is not finite: $lit1 is assigned.
    ArenaScope arena;
    std::string t = tile::to_string(lowered("attention.rf", TargetKind::Cpu));
    EXPECT_FALSE(contains(t, "if $lit0 != 0:")) << t;
    EXPECT_TRUE(contains(t, "$lit1 = 1")) << t;
    EXPECT_TRUE(contains(t, "if $lit1 != 0:")) << t;
}

TEST(GemmSumTiles, WeightGemmSumsLiveInFloatTilesTheGemmsAccumulateInto) {
    ArenaScope arena;
    for (const char *name : {"rmsnorm_gemm.rf", "quant_gemm_int8.rf"}) {
        tile::Module m = lowered(name, TargetKind::Cpu);
        std::string t = tile::to_string(m);
        std::string acc = std::string(name) == "rmsnorm_gemm.rf" ? "$A1_acc" : "$p1_A0_acc";
        std::string seen = std::string(name) == "rmsnorm_gemm.rf" ? "$A1_seen" : "$p1_A0_seen";
        EXPECT_TRUE(contains(t, "tile " + acc + "[N * ")) << name << "\n" << t;
        EXPECT_TRUE(contains(t, "gemm " + acc + "[0] += ")) << name << "\n" << t;
        EXPECT_FALSE(contains(t, seen)) << name << "\n" << t;
        EXPECT_FALSE(contains(t, "sum= $g")) << name << "\n" << t;  // no per-tile copy into a state
        // The row statistic beside it keeps its shifted-sum state (r) or max (a).
        EXPECT_TRUE(contains(t, std::string(name) == "rmsnorm_gemm.rf" ? "state $A0_tag" : "state $p0_A0_acc")) << name << "\n" << t;
    }
}

TEST(GemmSumTiles, GpuLoweringsKeepTheirOwnForm) {
    ArenaScope arena;
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) {
        tile::Module m = lowered("rmsnorm_gemm.rf", gpu);
        EXPECT_TRUE(has_buffer(m, "Y.sum")) << tile::to_string(m);
        EXPECT_TRUE(contains(tile::to_string(m), "state $A1_acc[")) << tile::to_string(m);
    }
}

TEST(ForwardBlockTemps, TheEpilogueReadsTheTileInsteadOfAFloat64Temporary) {
    ArenaScope arena;
    tile::Module r = lowered("rmsnorm_gemm.rf", TargetKind::Cpu), q = lowered("quant_gemm_int8.rf", TargetKind::Cpu);
    EXPECT_FALSE(has_buffer(r, "Y.sum")) << tile::to_string(r);
    // One value per row: kept by localize-temps in an array of the row block the epilogue reads.
    EXPECT_FALSE(has_buffer(r, "r")) << tile::to_string(r);
    EXPECT_TRUE(contains(tile::to_string(r), "state $blk0[")) << tile::to_string(r);
    EXPECT_TRUE(contains(tile::to_string(r), "= $A1_acc[$rr * N + $e")) << tile::to_string(r);
    EXPECT_FALSE(has_buffer(q, "C.sum")) << tile::to_string(q);
}

TEST(ForwardBlockTemps, TemporariesOtherKernelsReadStay) {
    // The unfused plan computes Y.sum in one kernel and the epilogue in another.
    ArenaScope arena;
    Options o;
    o.unfused = true;
    tile::Module m = lowered("rmsnorm_gemm.rf", TargetKind::Cpu, o);
    ASSERT_GT(m.kernels.size(), 1u);
    bool temp = false;
    for (const tile::Buffer &b : m.buffers) temp = temp || b.role == tile::Buffer::Role::Temp;
    EXPECT_TRUE(temp) << tile::to_string(m);
}

TEST(ForwardBlockTemps, ATemporaryStoredAgainLaterStays) {
    // TI (top-k indices, not an output) is stored by the finalize and again by the literal fallback
    // of rows whose softmax is not finite: no forwarding (localize-temps then keeps it in the row
    // block's array), and the tile IR stays valid.
    ArenaScope arena;
    const auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "topk_index_not_output.rf";
    const std::string src = test::read_text(path);
    auto c = analyze_source(src, path.string(), make_target(TargetKind::Cpu), {});
    tile::Module m = generate(*c).module;
    EXPECT_NO_THROW(tile::verify(m)) << tile::to_string(m);
    EXPECT_FALSE(contains(tile::to_string(m), "store $")) << tile::to_string(m);  // the forwarded second store was `store $A2_tk_i[...]`
    // Random rows, and rows with a NaN and a +inf (the literal fallback runs there).
    RunOptions o;
    test::check_run(path, src, o, "cpu", {1, 2});
    auto cc = compile_source(src, path.string(), {});
    auto in = make_random_inputs(cc->program, bind_sizes(cc->program, {{"R", 6}, {"C", 130}}), 3);
    in.at("X").at({1, 7}) = NAN;
    in.at("X").at({3, 11}) = INFINITY;
    test::check_run_on_inputs(path, src, in, o, "cpu");
}

TEST(GemmSumTiles, AgreeWithTheReferenceOverTilesPartialBlocksAndUnitExtents) {
    // K over several tiles (the sum over tiles is now float32), M past a row block, N and K of 1.
    for (const char *name : {"rmsnorm_gemm.rf", "quant_gemm_int8.rf"}) {
        std::string src = test::read_text(example(name));
        RunOptions o;
        o.sizes = {{"M", 131}, {"N", 37}, {"K", 4099}};
        test::check_run(example(name), src, o, "cpu", {3});
        o.sizes = {{"M", 1}, {"N", 1}, {"K", 1}};
        test::check_run(example(name), src, o, "cpu", {4});
        o.sizes = {{"M", 17}, {"N", 5}, {"K", 300}};
        o.tile = 64;  // 5 tiles of the axis
        test::check_run(example(name), src, o, "cpu", {5});
    }
}

TEST(TileGemmColumnSplit, OneRowBlockSplitsItsGemmsColumnsOverTheThreads) {
    // M = 16 rows fill one row block: the parallel loop has one iteration and tells its GEMMs to split
    // their columns over its threads (redfuse_simd_gemm.h, split_columns; 256 columns, M·N·K ≥ 2^22),
    // with N not a multiple of the 64-column parts.
    ArenaScope arena;
    auto c = analyze_source(test::read_text(example("rmsnorm_gemm.rf")), "rmsnorm_gemm.rf", make_target(TargetKind::Cpu), {});
    EXPECT_NE(generate(*c).source.find("rfk::gemm_split_threads.store(n_ == 1 ? nt_ : 1, std::memory_order_relaxed);"), std::string::npos);
    for (const char *name : {"rmsnorm_gemm.rf", "quant_gemm_int8.rf"}) {
        RunOptions o;
        o.threads = 2;
        o.sizes = {{"M", 16}, {"N", 300}, {"K", 1100}};
        test::check_run(example(name), test::read_text(example(name)), o, "cpu", {6});
    }
}
