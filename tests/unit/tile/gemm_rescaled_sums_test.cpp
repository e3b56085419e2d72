/** \file gemm_rescaled_sums_test.cpp
 * Rewrite (3) of the CPU tile pass gemm-sums (src/tile/GemmSumTiles.cpp): a state rescaled per tile
 * and fed by a GEMM site becomes a float tile the GEMM accumulates into — a table of kernels, kept
 * a float64 state when another statement writes it, when the factor reads it, when the site's loop
 * reads it besides its sum, or when it is not declared 0 — and attention's, decode's and MLA's
 * rescaled P·V sums take it on the CPU (not on the GPU lowerings).
 */
#include <gtest/gtest.h>

#include <functional>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr rr() { return make_index("$rr"); }
Expr xx() { return make_index("$x"); }
Expr at() { return make_add(make_mul(rr(), int_c(8)), xx()); }
Expr acc_at() { return local_at("$acc", at()); }

struct Variant {
    Expr init = real_c(0);                  ///< the state's initial value
    Expr factor = local_at("$r", rr());     ///< the rescale's factor
    std::vector<StmtP> extra_in_sum_loop;   ///< more statements beside the sum
    std::vector<StmtP> extra_in_tile;       ///< more statements of the tile
};

/** Over tiles of K: for rr, x: if acc ≠ 0: acc = acc · r[rr];  $g = 0; gemm $g += F x W;
 *  for rr, x: acc sum= $g — then Y = acc. */
Module kernel(const Variant &v) {
    Module m;
    m.sizes = {"K"};
    Expr K = make_size("K");
    m.buffers.push_back({"W", Buffer::Role::Input, DType::f32, {K, int_c(8)}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {int_c(32)}});
    GemmInfo g;
    g.M = int_c(4);
    g.N = int_c(8);
    g.K = int_c(16);
    g.a_base = local_at("$f", int_c(0));
    g.a_si = int_c(16);
    g.a_sk = int_c(1);
    g.b_base = make_load("W", {make_index("$tb"), int_c(0)}, DType::f32, SType::Real);
    g.b_sj = int_c(1);
    g.b_sk = int_c(8);
    g.c_base = local_at("$g", int_c(0));
    g.c_si = int_c(8);
    g.alpha = real_c(1);
    g.trans_b = false;
    g.accumulate = true;
    auto rows = [](std::vector<StmtP> inner) {
        return for_loop(rr(), int_c(0), int_c(4), {for_loop(xx(), int_c(0), int_c(8), std::move(inner), LoopKind::Independent)},
                        LoopKind::Independent);
    };
    std::vector<StmtP> sum{accum(ReduceOp::Sum, acc_at(), local_at("$g", at()))};
    for (const StmtP &s : v.extra_in_sum_loop) sum.push_back(s);
    std::vector<StmtP> tile{decl("$tb", LocalClass::Index, {}, make_mul(make_index("$tile"), int_c(16))),
                            rows({if_then(make_cmp(CmpOp::NE, acc_at(), real_c(0)), {assign(acc_at(), make_mul(acc_at(), v.factor))})}),
                            decl("$g", LocalClass::Tile, {int_c(32)}, real_c(0)), gemm(g), rows(sum)};
    for (const StmtP &s : v.extra_in_tile) tile.push_back(s);
    std::vector<StmtP> body{decl("$acc", LocalClass::State, {int_c(32)}, v.init), decl("$r", LocalClass::State, {int_c(4)}, real_c(0.5)),
                            decl("$f", LocalClass::Tile, {int_c(64)}, real_c(1)),
                            for_loop(make_index("$tile"), int_c(0), make_idiv(K, int_c(16)), tile),
                            for_loop(xx(), int_c(0), int_c(32), {store(make_load("Y", {xx()}, DType::f32, SType::Real), local_at("$acc", xx()))})};
    tile::Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$row"), int_c(0), int_c(1), body, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

bool declared_as(const StmtP &s, const std::string &name, LocalClass cls) {
    return any_stmt(s, [&](const StmtP &c) { return c->kind == StmtKind::Decl && c->name == name && c->cls == cls; });
}

}  // namespace

TEST(GemmRescaledSums, TableOfKernels) {
    struct Case {
        const char *what;
        Variant v;
        bool rewritten;
    };
    std::vector<Case> cases = {
        {"rescaled, then the GEMM's tile added: a float tile the GEMM accumulates into", {}, true},
        {"not declared 0: kept", {real_c(1), local_at("$r", rr()), {}, {}}, false},
        {"the factor reads the state: kept", {real_c(0), local_at("$acc", int_c(0)), {}, {}}, false},
        {"the sum's loop reads the state besides its sum: kept",
         {real_c(0), local_at("$r", rr()), {assign(local_at("$r", rr()), acc_at())}, {}}, false},
        {"another write of the state: kept",
         {real_c(0), local_at("$r", rr()), {}, {assign(local_at("$acc", int_c(3)), real_c(7))}}, false},
    };
    for (const Case &c : cases) {
        ArenaScope a;
        Module m = kernel(c.v);
        ASSERT_NO_THROW(verify(m)) << c.what;
        Module r = keep_gemm_sums_in_tiles(m);
        EXPECT_NO_THROW(verify(r)) << c.what;
        std::string dump = to_string(r);
        EXPECT_EQ(declared_as(r.kernels[0].body, "$acc", LocalClass::Tile), c.rewritten) << c.what << "\n" << dump;
        EXPECT_EQ(dump.find("gemm $acc[0] += ") != std::string::npos, c.rewritten) << c.what << "\n" << dump;
        EXPECT_EQ(declared_as(r.kernels[0].body, "$g", LocalClass::Tile), !c.rewritten) << c.what << "\n" << dump;
        EXPECT_NE(dump.find("$acc[$rr * 8 + $x] = $acc[$rr * 8 + $x] * "), std::string::npos) << c.what << "\n" << dump;
    }
}

TEST(GemmRescaledSums, AttentionAndDecodeAccumulatePVInFloatTilesOnTheCpu) {
    for (const char *name : {"attention.rf", "attention_gqa.rf", "decode_gqa.rf", "mla_decode.rf"}) {
        ArenaScope arena;
        std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name;
        auto cpu = analyze_source(test::read_text(spec), name, make_target(TargetKind::Cpu), {});
        std::string t = to_string(generate(*cpu).module);
        EXPECT_NE(t.find("tile $A2_acc["), std::string::npos) << name << "\n" << t;
        EXPECT_NE(t.find("gemm $A2_acc[0] += "), std::string::npos) << name << "\n" << t;
        EXPECT_NE(t.find("$A2_seen"), std::string::npos) << name << "\n" << t;  // its flag and reference stay
        EXPECT_EQ(t.find("gemm $g"), std::string::npos) << name << "\n" << t;
        for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) {
            auto g = analyze_source(test::read_text(spec), name, make_target(gpu), {});
            EXPECT_EQ(to_string(generate(*g).module).find("tile $A2_acc["), std::string::npos) << name;
        }
    }
}

TEST(GemmRescaledSums, AgreeWithTheReferenceOverManyTilesAndPartialBlocks) {
    // Many key tiles (the running maximum moves: rescales by factors < 1), a partial row block, D of 1.
    std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    RunOptions o;
    o.sizes = {{"M", 131}, {"N", 1500}, {"D", 64}};
    test::check_run(spec, test::read_text(spec), o, "cpu", {1, 2});
    o.sizes = {{"M", 5}, {"N", 600}, {"D", 1}};
    o.tile = 64;
    test::check_run(spec, test::read_text(spec), o, "cpu", {3});
}
