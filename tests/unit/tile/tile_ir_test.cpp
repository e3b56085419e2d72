/** \file tile_ir_test.cpp
 * The tile IR: the verifier rejects malformed kernels (each rule can fail), the lowering of every
 * example verifies, renaming keeps a kernel well-formed, and the softmax and attention dumps are stable
 * (golden).
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "driver/Compiler.h"
#include "support/Error.h"
#include "tile/Lower.h"
#include "tile/LowerPass.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Module module_with(StmtP body) {
    Module m;
    m.sizes = {"N"};
    m.buffers.push_back({"X", Buffer::Role::Input, DType::f32, {make_size("N")}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {make_size("N")}});
    Kernel k;
    k.name = "k0";
    k.body = body;
    m.kernels.push_back(k);
    return m;
}

Expr X(Expr i) { return make_load("X", {i}, DType::f32, SType::Real); }
Expr Y(Expr i) { return make_load("Y", {i}, DType::f32, SType::Real); }

/** Calls f on every expression of s and below. */
void each_expr(const StmtP &s, const std::function<void(Expr)> &f) {
    map_own_exprs(s, [&](Expr e) {
        f(e);
        return e;
    });
    for (const StmtP &c : s->body) each_expr(c, f);
    for (const StmtP &c : s->else_body) each_expr(c, f);
}

/** exp/exp2 calls inside the tile loops of s whose argument reads a member's tag: the rescales. */
int rescale_exps_per_tile(const StmtP &s) {
    if (s->kind == StmtKind::For && s->var && s->var->name == "$tile") {
        std::set<Expr> calls;
        each_expr(s, [&](Expr e) {
            visit(e, [&](Expr n) {
                if (n->kind != Kind::Call || (n->func != Func::exp && n->func != Func::exp2)) return;
                bool tag = false;
                visit(n, [&](Expr q) { tag |= q->kind == Kind::Load && q->name.find("_tag") != std::string::npos; });
                if (tag) calls.insert(n);
            });
        });
        return static_cast<int>(calls.size());
    }
    int n = 0;
    for (const StmtP &c : s->body) n += rescale_exps_per_tile(c);
    for (const StmtP &c : s->else_body) n += rescale_exps_per_tile(c);
    return n;
}

}  // namespace

TEST(TileVerifier, AcceptsAWellFormedKernel) {
    ArenaScope a;
    Expr i = make_index("$i"), n = make_size("N");
    StmtP body = for_loop(i, int_c(0), n, {store(Y(i), X(i))}, LoopKind::Parallel);
    EXPECT_NO_THROW(verify(module_with(body)));
}

TEST(TileVerifier, RejectsEachBrokenRule) {
    ArenaScope a;
    Expr i = make_index("$i"), j = make_index("$j"), n = make_size("N");
    std::vector<std::pair<const char *, StmtP>> bad = {
        {"undeclared", for_loop(i, int_c(0), n, {store(Y(j), X(i))})},
        {"unknown buffer", for_loop(i, int_c(0), n, {store(make_load("Z", {i}, DType::f32, SType::Real), X(i))})},
        {"store to input", for_loop(i, int_c(0), n, {store(X(i), X(i))})},
        {"wrong rank", for_loop(i, int_c(0), n, {store(make_load("Y", {i, i}, DType::f32, SType::Real), X(i))})},
        {"unknown size", for_loop(i, int_c(0), make_size("Q"), {store(Y(i), X(i))})},
        {"nested parallel", for_loop(i, int_c(0), n, {for_loop(j, int_c(0), n, {store(Y(j), X(i))}, LoopKind::Parallel)}, LoopKind::Parallel)},
        {"shadowing", for_loop(i, int_c(0), n, {for_loop(i, int_c(0), n, {store(Y(i), X(i))})})},
        {"decl twice", block({decl("$t", LocalClass::Tile, {}, real_c(0)), decl("$t", LocalClass::Tile, {}, real_c(0))})},
        {"array extent on a loop variable", for_loop(i, int_c(0), n, {decl("$a", LocalClass::Tile, {i}, nullptr)})},
        {"simd reduction into a state", block({decl("$s", LocalClass::State, {}, real_c(0)),
                                               for_loop(i, int_c(0), n, {accum(ReduceOp::Sum, local_var("$s"), X(i))}, LoopKind::Simd)})},
        {"branch in simd", for_loop(i, int_c(0), n, {if_then(make_bool(true), {store(Y(i), X(i))})}, LoopKind::Simd)},
        {"prefetch at an undeclared local", for_loop(i, int_c(0), n, {prefetch(X(j), int_c(16))})},
        {"prefetch of an output", for_loop(i, int_c(0), n, {prefetch(Y(i), int_c(16))})},
    };
    for (auto &[why, body] : bad) EXPECT_THROW(verify(module_with(body)), InternalError) << why;
}

TEST(TileLowering, EveryExampleVerifiesFusedAndUnfused) {
    for (const auto &e : std::filesystem::directory_iterator(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples")) {
        if (e.path().extension() != ".rf") continue;
        ArenaScope a;
        auto c = compile_file(e.path().string(), {});
        for (bool unfused : {false, true})
            for (int64_t seg : {0, 4}) {
                LowerOptions lo;
                lo.unfused = unfused;
                lo.force_segments = seg;
                Module m = lower_plan(c->plan, lo);
                EXPECT_NO_THROW(verify(m)) << e.path();
                EXPECT_FALSE(m.kernels.empty());
                // Renaming every local apart keeps the kernel well-formed.
                for (Kernel &k : m.kernels)
                    k.body = rename_locals(k.body, [](const std::string &n) { return n == "$row" ? n : "$z_" + n.substr(1); });
                EXPECT_NO_THROW(verify(m)) << e.path();
            }
    }
}

TEST(TileLowering, SoftmaxIsOneKernelWithItsEpilogue) {
    ArenaScope a;
    auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/softmax.rf", {});
    Module m = lower_plan(c->plan, {});
    ASSERT_EQ(m.kernels.size(), 1u);
    EXPECT_NE(m.kernels[0].what.find("epilogue Y"), std::string::npos);
    Module u = lower_plan(c->plan, [] { LowerOptions o; o.unfused = true; return o; }());
    EXPECT_EQ(u.kernels.size(), 3u);  // m, s, Y
}

TEST(TileLowering, MembersWithOneDeltaAndAlphaShareOneRescalePerTile) {
    // Attention's l and O (and the decodes' l and O) both rescale by exp(τ - δ) with δ = m: one
    // factor per row and tile serves both (PassLowering::plan_shared_rescales); before, 2.
    for (auto [name, want] : std::vector<std::pair<const char *, int>>{
             // attention_causal: 2 copies of the tile's statements (skip-masked: one for unmasked
             // tiles, one for partial ones), one of which runs per tile.
             {"attention", 1}, {"attention_causal", 2}, {"attention_gqa", 1}, {"decode_gqa", 1}, {"mla_decode", 1}}) {
        ArenaScope a;
        auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf", {});
        for (int64_t seg : {0, 4}) {
            LowerOptions lo;
            lo.force_segments = seg;
            Module m = lower_plan(c->plan, lo);
            int n = 0;
            for (const Kernel &k : m.kernels) n += rescale_exps_per_tile(k.body);
            EXPECT_EQ(n, want) << name << " segments " << seg << "\n" << to_string(m);
        }
    }
    // The element-wise update path (no GEMM: tanh(V)) with E output columns: one factor per row
    // for l and every column of O (was one for l and one per column of O).
    ArenaScope a;
    auto c = compile_source("size R = 5, C = 37, E = 3\ninput X[R, C] : f32\ninput V[C, E] : f32\n"
                            "m[r] = max(c: X[r, c])\nl[r] = sum(c: exp(X[r, c] - m[r]))\n"
                            "O[r, e] = sum(c: exp(X[r, c] - m[r]) * tanh(V[c, e])) / l[r]\noutput O\n",
                            "mult.rf", {});
    Module m = lower_plan(c->plan, {});
    std::string dump = to_string(m);
    EXPECT_EQ(rescale_exps_per_tile(m.kernels.at(0).body), 1) << dump;
    EXPECT_NE(dump.find("$A2_acc[$rr * E + $x2_10] * $rf0[$rr]"), std::string::npos) << dump;
}

TEST(TileLowering, GoldenDumps) {
    // Softmax (on-chip passes, term reuse) and attention (tile GEMMs; the tile passes: exp2 with
    // log2 e in the hoisted scale).
    for (const char *name : {"softmax", "attention"}) {
        ArenaScope a;
        auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf", {});
        // Attention's row block shrinks on hosts with more cores than row blocks: plan for 2 threads.
        LowerOptions lo;
        if (std::string(name) == "attention") lo.threads = 2;
        std::string got = to_string(lower_plan(c->plan, lo));
        std::filesystem::path golden = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests/golden/tile" / (std::string(name) + ".txt");
        if (std::getenv("REDFUSE_UPDATE_GOLDEN")) {
            std::filesystem::create_directories(golden.parent_path());
            std::ofstream(golden) << got;
        }
        std::ifstream f(golden);
        std::stringstream want;
        want << f.rdbuf();
        EXPECT_EQ(got, want.str()) << name << ": regenerate with REDFUSE_UPDATE_GOLDEN=1 ./build/tests/test_tile";
    }
}
