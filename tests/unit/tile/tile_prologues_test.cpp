/** \file tile_prologues_test.cpp
 * Per-tile prologues (src/tile/LowerPlan.cpp, src/fuse/Planner.cpp): a reduction read along other
 * chains' axes is computed tile by tile inside every chain that reads it, also transposed (the
 * derived attention backward's S = QKᵀ and dP = dO·Vᵀ in its dQ chain and again in its dK/dV chain),
 * and never stored whole; the kernels agree with the reference on every backend.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "driver/Report.h"
#include "grad/Grad.h"
#include "runtime/OpenCLRuntime.h"
#include "spec/Frontend.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::string backward_of(const std::string &example) {
    std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (example + ".rf");
    return derive_backward(parse_program(test::read_text(path), path.string()), {}).backward_spec;
}

const char *const kAttentionVariants[] = {"attention", "attention_causal", "attention_gqa", "attention_softcap",
                                          "attention_alibi", "attention_sliding_window", "decode_gqa"};

}  // namespace

TEST(TilePrologues, AttentionBackwardStoresNoScoreTensor) {
    // The FlashAttention-2 backward's memory: the row statistics (D = Σ O·dO) and nothing of size
    // M×N. Before, S and dP were stored B·H·M·N each, in f64.
    for (const char *name : kAttentionVariants) {
        SCOPED_TRACE(name);
        ArenaScope arena;
        std::string spec = backward_of(name);
        for (TargetKind target : {TargetKind::Cpu, TargetKind::OpenCL, TargetKind::Cuda}) {
            auto c = analyze_source(spec, "backward.rf", make_target(target), {});
            tile::Module m = generate(*c).module;
            for (const tile::Buffer &b : m.buffers)
                if (b.role == tile::Buffer::Role::Temp) { EXPECT_LE(b.dims.size(), 3u) << b.name << " is stored whole"; }
            std::string text = tile::to_string(m);
            // S and dP as GEMMs over the row block in the dQ chain and, transposed, the dK/dV chain.
            // The grouped form's dK/dV chain sums over (h, i) flattened: its tiles are not
            // recognized as GEMMs yet (docs/grad.md, Limits), only the dQ chain's three are.
            size_t gemms = std::string(name) == "attention_gqa" ? 3 : 4;
            EXPECT_GE(test::count_of(text, "gemm "), gemms) << text;
        }
    }
}

TEST(TilePrologues, EveryChainThatReadsAPrologueComputesItsOwnTile) {
    ArenaScope arena;
    auto c = analyze_source(backward_of("attention_causal"), "backward.rf", make_target(TargetKind::Cpu), {});
    int with_both = 0;
    for (const ChainPlan &ch : c->plan.chains) {
        bool s = std::find(ch.prologue.begin(), ch.prologue.end(), "S_sum") != ch.prologue.end();
        bool dp = std::find(ch.prologue.begin(), ch.prologue.end(), "dS_sum.sum") != ch.prologue.end();
        with_both += s && dp;
    }
    // dQ over the keys, dK and dV over the queries: M = N here, and still two chains (one would
    // need the tile once as S and once as Sᵀ).
    EXPECT_EQ(with_both, 2);
    EXPECT_EQ(c->plan.chains.size(), 3u);
}

TEST(TilePrologues, TransposedProloguesRunRightOnEveryBackend) {
    // Each run builds its kernels (slow under the sanitizers): the default schedule of the plain
    // and grouped forms, and one forced schedule (partial row blocks of the transposed tile, short
    // tiles, merged segments) of the plain and causal forms.
    for (const char *name : {"attention", "attention_gqa"}) {
        RunOptions o;
        test::check_run(std::string(name) + "_backward.rf", backward_of(name), o, "cpu", {1, 2});
    }
    for (const char *name : {"attention", "attention_causal"}) {
        RunOptions o;
        o.row_block = 3;
        o.tile = 4;
        o.segments = 2;
        test::check_run(std::string(name) + "_backward.rf", backward_of(name), o, "cpu", {3});
    }
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    RunOptions o;
    test::check_run("attention_causal_backward.rf", backward_of("attention_causal"), o, "opencl", {1});
}

TEST(TilePrologues, GradientsOfOneRowShareAChainAcrossTheirExtraPoints) {
    // dK[b,h,j,d] (d < D) and dV[b,h,j,e] (e < Dv) read S and dP only at (b,h,i,j): their row is
    // (b,h,j) and d, e are extra points, so they share one chain (and one S tile) even when D and
    // Dv are different sizes; before, dV was a chain of its own and recomputed S a third time.
    ArenaScope arena;
    std::string forward = "size B = 1, H = 2, M = 9, N = 13, D = 4, Dv = 3\n"
                          "input Q[B, H, M, D] : f32\ninput K[B, H, N, D] : f32\ninput V[B, H, N, Dv] : f32\n"
                          "S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d]) / sqrt(D)\n"
                          "m[b,h,i] = max(j: S[b,h,i,j])\n"
                          "l[b,h,i] = sum(j: exp(S[b,h,i,j] - m[b,h,i]))\n"
                          "O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]\n"
                          "output O\n";
    std::string spec = derive_backward(parse_program(forward, "attention_dv.rf"), {}).backward_spec;
    auto c = analyze_source(spec, "backward.rf", make_target(TargetKind::Cpu), {});
    ASSERT_EQ(c->plan.chains.size(), 3u) << analysis_text(*c);
    const ChainPlan &last = c->plan.chains.back();
    EXPECT_EQ(last.members, (std::vector<std::string>{"dK", "dV"})) << analysis_text(*c);
    EXPECT_EQ(last.n_row, 3u);
    RunOptions o;
    test::check_run("attention_dv_backward.rf", spec, o, "cpu", {1, 2});
}

TEST(TilePrologues, AGroupKeepsOneRowAcrossItsMembers) {
    // A and Bv share the row (b,h,j) (their reads of computed tensors stop there), Bv and Cc share
    // (b,h,j,e) (Cc reads T at e); the three together would make d < D and e < Dv both the fourth
    // row variable. The union is refused (Planner.cpp, rows_agree): A runs in a chain of its own.
    ArenaScope arena;
    std::string spec = "size B = 1, H = 2, M = 5, N = 7, D = 4, Dv = 3\n"
                       "input Q[B, H, M, D] : f32\ninput K[B, H, N, D] : f32\ninput V[B, H, N, Dv] : f32\n"
                       "input dO[B, H, M, Dv] : f32\n"
                       "S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d])\n"
                       "A[b,h,j,d] = sum(i: exp(S[b,h,i,j]) * Q[b,h,i,d])\n"
                       "Bv[b,h,j,e] = sum(i: exp(S[b,h,i,j]) * dO[b,h,i,e])\n"
                       "T[b,h,j,e] = sum(d: K[b,h,j,d] * V[b,h,j,e])\n"
                       "Cc[b,h,j,e] = sum(i: exp(S[b,h,i,j]) * T[b,h,j,e] * dO[b,h,i,e])\n"
                       "output A, Bv, Cc\n";
    auto c = analyze_source(spec, "rows.rf", make_target(TargetKind::Cpu), {});
    for (const ChainPlan &ch : c->plan.chains) {
        bool a = std::find(ch.members.begin(), ch.members.end(), "A") != ch.members.end();
        bool cc = std::find(ch.members.begin(), ch.members.end(), "Cc") != ch.members.end();
        EXPECT_FALSE(a && cc) << analysis_text(*c);
    }
    RunOptions o;  // the plan interpreter runs the plan itself (a kernel build is slow under the sanitizers)
    test::check_run("rows.rf", spec, o, "interp", {1});
}

TEST(TilePrologues, AVectorAlongTheAxisAloneIsStoredNotRecomputedPerRow) {
    // cmx[c] = max over rows, read by the row reduction rx[r] = max over c: as a per-tile prologue
    // it would be recomputed for every row r (R times its work); it is stored once instead. A tile
    // over rows and axis (the grouped dK chain's S, lacking only the K/V head) is computed per tile.
    ArenaScope arena;
    std::string spec = "size R = 6, C = 50\ninput X[R, C] : f32\n"
                       "cmx[c] = max(r: X[r,c])\nrx[r] = max(c: X[r,c] - cmx[c])\noutput rx\n";
    auto c = analyze_source(spec, "colmax.rf", make_target(TargetKind::Cpu), {});
    tile::Module m = generate(*c).module;
    bool stored = false;
    for (const tile::Buffer &b : m.buffers) stored = stored || (b.name == "cmx" && b.role == tile::Buffer::Role::Temp);
    EXPECT_TRUE(stored) << tile::to_string(m);
    RunOptions o;
    test::check_run("colmax.rf", spec, o, "cpu", {1});
}
