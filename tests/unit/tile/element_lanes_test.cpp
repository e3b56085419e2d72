/** \file element_lanes_test.cpp
 * The CPU tile pass element-lanes (src/tile/ElementLanes.cpp): an independent loop assigning one
 * float64 array element per iteration becomes a lanes loop with its repeated calls computed once
 * before it (under `if begin < end` when they read memory and the loop may not run) — kept as it
 * is with a nested reduction, a read of another element of its target, or more than one statement;
 * attention's finalize of O takes it, and the results agree with the reference.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr x() { return make_index("$x"); }
Expr acc(Expr i) { return local_at("$acc", i); }
Expr out(Expr i) { return local_at("$out", i); }
Expr tag() { return local_at("$tag", int_c(0)); }

/** $out[x] = value over x in [0, end), in a kernel that declares the arrays. */
Module kernel(Expr end, std::vector<StmtP> loop_body) {
    Module m;
    m.sizes = {"D"};
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {make_size("D")}});
    std::vector<StmtP> body{decl("$acc", LocalClass::Tile, {int_c(64)}, real_c(1)), decl("$tag", LocalClass::State, {int_c(1)}, real_c(2)),
                            decl("$out", LocalClass::State, {int_c(64)}, nullptr),
                            for_loop(x(), int_c(0), end, std::move(loop_body), LoopKind::Independent),
                            for_loop(x(), int_c(0), make_size("D"), {store(make_load("Y", {x()}, DType::f32, SType::Real), out(x()))})};
    tile::Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$row"), int_c(0), int_c(1), body, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

/** acc[x] · exp2(tag − 1): the call repeats with the same argument on every iteration. */
Expr rescaled(Expr i) { return make_mul(acc(i), make_call(Func::exp2, make_sub(tag(), real_c(1)))); }

}  // namespace

TEST(ElementLanes, TableOfLoops) {
    struct Case {
        const char *what;
        std::function<Module()> make;
        bool lanes, guarded;
    };
    std::vector<Case> cases = {
        {"one element per iteration, a repeated call: hoisted, lanes, guarded (D may be 0)",
         [] { return kernel(make_size("D"), {assign(out(x()), rescaled(x()))}); }, true, true},
        {"a constant extent runs at least once: no guard", [] { return kernel(int_c(16), {assign(out(x()), rescaled(x()))}); }, true, false},
        {"a nested reduction (the literal recompute): kept",
         [] {
             Expr j = make_index("j");
             return kernel(int_c(16), {assign(out(x()), make_reduce(ReduceOp::Sum, {j}, {int_c(4)}, make_mul(j, acc(x()))))});
         }, false, false},
        {"reads another element of its target: kept",
         [] { return kernel(int_c(16), {assign(out(x()), make_add(out(make_add(x(), int_c(1))), real_c(1)))}); }, false, false},
        {"two statements: kept",
         [] { return kernel(int_c(16), {assign(out(x()), rescaled(x())), assign(out(x()), acc(x()))}); }, false, false},
        {"the target's index does not follow the loop: kept", [] { return kernel(int_c(16), {assign(out(int_c(0)), rescaled(x()))}); }, false, false},
    };
    for (const Case &c : cases) {
        ArenaScope a;
        Module m = c.make();
        ASSERT_NO_THROW(verify(m)) << c.what;
        Module r = run_element_loops_as_lanes(m);
        EXPECT_NO_THROW(verify(r)) << c.what;
        std::string t = to_string(r);
        EXPECT_EQ(t.find(" lanes:") != std::string::npos, c.lanes) << c.what << "\n" << t;
        EXPECT_EQ(t.find("state $el0 = exp2($tag[0] - 1)") != std::string::npos, c.lanes) << c.what << "\n" << t;
        EXPECT_EQ(t.find("if 0 < D:") != std::string::npos, c.guarded) << c.what << "\n" << t;
        if (c.lanes) {
            EXPECT_NE(t.find("$out[$x] = $acc[$x] * $el0"), std::string::npos) << c.what << "\n" << t;
        }
    }
}

TEST(ElementLanes, AttentionFinalizesOAsLanes) {
    ArenaScope arena;
    std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    auto c = analyze_source(test::read_text(spec), "attention.rf", make_target(TargetKind::Cpu), {});
    std::string t = to_string(generate(*c).module);
    EXPECT_NE(t.find(") lanes:"), std::string::npos) << t;
    EXPECT_NE(t.find("state $el1 = exp2("), std::string::npos) << t;
    // The literal recompute keeps its scalar loop (its sums over j and d are nested reductions).
    EXPECT_NE(t.find("= sum(j: "), std::string::npos) << t;
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) {
        auto g = analyze_source(test::read_text(spec), "attention.rf", make_target(gpu), {});
        EXPECT_EQ(to_string(generate(*g).module).find(" lanes:"), std::string::npos);
    }
}

TEST(ElementLanes, AgreeWithTheReferenceWhenTheReferencePointMoves) {
    // Scores large enough that the row maximum moves between key tiles (rescale factors far from 1).
    std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    RunOptions o;
    o.sizes = {{"M", 70}, {"N", 900}, {"D", 32}};
    o.scale = 4;
    test::check_run(spec, test::read_text(spec), o, "cpu", {5, 6});
}
