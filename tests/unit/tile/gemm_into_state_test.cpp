/** \file gemm_into_state_test.cpp
 * The GPU-only tile pass that lets a member's tile GEMM accumulate into its running state
 * (src/tile/GemmIntoState.cpp): a table of kernels — rewritten when a zeroed array feeds only one
 * `acc[i] sum= $g[i]`, kept when the loop also reads the state, when the GEMM overwrites instead of
 * accumulating, or when the array is read elsewhere — and every GEMM member of the examples, lowered
 * for the GPU, loses its array (on the CPU, whose states are double, gemm-sums does the same with a
 * float tile: gemm_rescaled_sums_test.cpp).
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "driver/Compiler.h"
#include "tile/Lower.h"
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

/** acc[4 * 8] (a state), and per tile: $g = 0; gemm $g += F x W; for rr, x: body(x). */
Module kernel(bool accumulate, std::function<std::vector<StmtP>()> loop_body, std::vector<StmtP> after = {}) {
    Module m;
    m.sizes = {"K"};
    Expr K = make_size("K");
    m.buffers.push_back({"W", Buffer::Role::Input, DType::f32, {K, int_c(8)}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {int_c(32)}});
    GemmInfo g;
    g.M = int_c(4);
    g.N = int_c(8);
    g.K = K;
    g.a_base = local_at("$f", int_c(0));
    g.a_si = K;
    g.a_sk = int_c(1);
    g.b_base = make_load("W", {int_c(0), int_c(0)}, DType::f32, SType::Real);
    g.b_sj = int_c(1);
    g.b_sk = int_c(8);
    g.c_base = local_at("$g", int_c(0));
    g.c_si = int_c(8);
    g.alpha = real_c(1);
    g.trans_b = false;
    g.accumulate = accumulate;
    std::vector<StmtP> body{decl("$acc", LocalClass::State, {int_c(32)}, real_c(0)), decl("$tag", LocalClass::State, {int_c(4)}, real_c(0)),
                            decl("$f", LocalClass::Tile, {make_mul(int_c(4), K)}, real_c(1)), decl("$g", LocalClass::Tile, {int_c(32)}, real_c(0)),
                            gemm(g),
                            for_loop(rr(), int_c(0), int_c(4),
                                     {for_loop(xx(), int_c(0), int_c(8), loop_body(), LoopKind::Independent), assign(local_at("$tag", rr()), real_c(2))},
                                     LoopKind::Independent)};
    for (StmtP &s : after) body.push_back(s);
    body.push_back(for_loop(xx(), int_c(0), int_c(32), {store(make_load("Y", {xx()}, DType::f32, SType::Real), local_at("$acc", xx()))}));
    Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$row"), int_c(0), int_c(1), body, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

std::vector<StmtP> add() { return {accum(ReduceOp::Sum, local_at("$acc", at()), local_at("$g", at()))}; }

struct Case {
    const char *what;
    std::function<Module()> make;
    bool rewritten;
};

std::vector<Case> cases() {
    return {
        {"a zeroed array feeding one accumulation: the GEMM adds into the state", [] { return kernel(true, add); }, true},
        {"the loop reads the state too: kept", [] {
             return kernel(true, [] {
                 std::vector<StmtP> s = add();
                 s.push_back(assign(local_at("$tag", rr()), local_at("$acc", at())));
                 return s;
             });
         }, false},
        {"the one GEMM overwrites its zeroed array: the same sum, added into the state", [] { return kernel(false, add); }, true},
        {"two GEMMs overwrite the array: kept (the second would drop the first's product)", [] {
             Module m = kernel(false, add);
             m.kernels[0].body = rewrite_bottom_up(m.kernels[0].body, [](const StmtP &s) -> StmtP {
                 if (s->kind != StmtKind::For || s->var->name != "$row") return s;
                 std::vector<StmtP> b;
                 for (const StmtP &c : s->body) {
                     b.push_back(c);
                     if (c->kind == StmtKind::Gemm) b.back() = block({c, c});
                 }
                 return with_body(s, b);
             });
             return m;
         }, false},
        {"the array read after the loop: kept", [] {
             return kernel(true, add, {store(make_load("Y", {int_c(0)}, DType::f32, SType::Real), local_at("$g", int_c(0)))});
         }, false},
        {"another index: kept", [] {
             return kernel(true, [] { return std::vector<StmtP>{accum(ReduceOp::Sum, local_at("$acc", at()), local_at("$g", make_add(at(), int_c(1))))}; });
         }, false},
    };
}

bool has_array(const StmtP &s, const std::string &name) {
    if (s->kind == StmtKind::Decl && s->name == name) return true;
    for (const StmtP &c : s->body)
        if (has_array(c, name)) return true;
    for (const StmtP &c : s->else_body)
        if (has_array(c, name)) return true;
    return false;
}

}  // namespace

TEST(GemmIntoState, TableOfKernels) {
    for (const Case &c : cases()) {
        ArenaScope a;
        Module m = c.make();
        ASSERT_NO_THROW(verify(m)) << c.what;
        m = accumulate_gemms_into_states(m);
        EXPECT_NO_THROW(verify(m)) << c.what;
        std::string dump = to_string(m);
        EXPECT_EQ(!has_array(m.kernels[0].body, "$g"), c.rewritten) << c.what << "\n" << dump;
        if (c.rewritten) {
            EXPECT_NE(dump.find("gemm $acc[0] +="), std::string::npos) << dump;
        }
    }
}

TEST(GemmIntoState, GpuLoweringOfTheGemmMembers) {
    for (const char *name : {"attention", "decode_gqa", "mla_decode"}) {
        ArenaScope a;
        auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf", {});
        for (int64_t seg : {0, 4}) {
            LowerOptions lo;
            lo.force_segments = seg;
            std::string cpu = to_string(lower_plan(c->plan, lo));
            lo.float_states = true;
            Module gpu = lower_plan(c->plan, lo);
            ASSERT_NO_THROW(verify(gpu)) << name;
            std::string dump = to_string(gpu);
            // The CPU's states are double; in one segment its gemm-sums pass gives P·V a float tile
            // of its own (segments merge the state as a float64 partial: kept).
            EXPECT_EQ(cpu.find("gemm $g") == std::string::npos, seg == 0) << name << "\n" << cpu;
            EXPECT_EQ(cpu.find("tile $A2_acc[") != std::string::npos, seg == 0) << name << "\n" << cpu;
            EXPECT_EQ(dump.find("gemm $g"), std::string::npos) << name << "\n" << dump;
            EXPECT_NE(dump.find("_acc[0] += "), std::string::npos) << name << "\n" << dump;
        }
    }
}
