/** \file invariant_sums_test.cpp
 * The tile pass that takes sums out of vector loops (src/tile/InvariantSums.cpp): a table of kernels
 * before and after — a sum of an invariant term becomes the trip count times it, a repeated sum a copy
 * of the first, and what must stay (a term the loop writes, sums that start from different values or
 * are read in the loop, a product) — and, end to end on the CPU, variance, LayerNorm and moment of
 * inertia (whose counts and repeated sums it takes out) against the reference over several tiles,
 * partial tiles and extents of 1.
 */
#include <gtest/gtest.h>

#include <functional>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "RowKernelModule.h"
#include "driver/Compiler.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr r() { return make_index("$r"); }
Expr X(Expr j) { return make_load("X", {r(), j}, DType::f32, SType::Real); }
Expr var(const char *n) { return local_var(n); }
StmtP simd(Expr j, Expr b, Expr e, std::vector<StmtP> body) { return for_loop(j, b, e, std::move(body), LoopKind::Simd); }
StmtP tile_scalar(const char *n, double v) { return decl(n, LocalClass::Tile, {}, real_c(v)); }

/** for $r in [0, R) parallel: body, then Y[$r] = the sum of `results` — over X[R, C] (input), Y[R]. */
Module kernel(std::vector<StmtP> body, const std::vector<const char *> &results) {
    Expr R = make_size("R"), C = make_size("C");
    Expr sum = real_c(0);
    for (const char *n : results) sum = make_add(sum, var(n));
    body.push_back(store(make_load("Y", {r()}, DType::f32, SType::Real), sum));
    return row_kernel_module({{"X", Buffer::Role::Input, DType::f32, {R, C}}, {"Y", Buffer::Role::Output, DType::f32, {R}}},
                                      std::move(body));
}

struct Case {
    const char *what;
    std::function<Module()> module;
    const char *after;
};

std::vector<Case> cases() {
    Expr C = make_size("C"), j = make_index("$j");
    return {
        {"a count and an invariant term leave the loop as products; the loop goes when nothing is left",
         [=] {
             return kernel({tile_scalar("$n", 0), tile_scalar("$h", 2.5), tile_scalar("$s", 0),
                            simd(j, int_c(0), C, {accum(ReduceOp::Sum, var("$n"), real_c(1)), accum(ReduceOp::Sum, var("$s"), make_mul(var("$h"), real_c(3)))})},
                           {"$n", "$s"});
         },
         "for $r in [0, R) parallel:\n"
         "  tile $n = 0\n"
         "  tile $h = 2.5\n"
         "  tile $s = 0\n"
         "  $n sum= max(C - 0, 0) * 1\n"
         "  $s sum= max(C - 0, 0) * ($h * 3)\n"
         "  store Y[$r] = 0 + $n + $s\n"},
        {"a repeated term is summed once and copied; a term of the loop variable stays",
         [=] {
             return kernel({tile_scalar("$a", 0), tile_scalar("$b", 0), tile_scalar("$c", 0),
                            simd(j, int_c(0), C, {accum(ReduceOp::Sum, var("$a"), X(j)), accum(ReduceOp::Sum, var("$b"), X(j)),
                                                  accum(ReduceOp::Sum, var("$c"), make_mul(X(j), X(j)))})},
                           {"$a", "$b", "$c"});
         },
         "for $r in [0, R) parallel:\n"
         "  tile $a = 0\n"
         "  tile $b = 0\n"
         "  tile $c = 0\n"
         "  for $j in [0, C) simd:\n"
         "    $a sum= X[$r, $j]\n"
         "    $c sum= X[$r, $j] * X[$r, $j]\n"
         "  $b = $a\n"
         "  store Y[$r] = 0 + $a + $b + $c\n"},
        {"stays: sums that start apart, one read by the loop, a term the loop writes, a product",
         [=] {
             return kernel({tile_scalar("$a", 0), tile_scalar("$b", 1), tile_scalar("$p", 1), decl("$w", LocalClass::Tile, {int_c(8)}, nullptr),
                            tile_scalar("$v", 0),
                            simd(j, int_c(0), int_c(8),
                                 {accum(ReduceOp::Sum, var("$a"), X(j)), accum(ReduceOp::Sum, var("$b"), X(j)), accum(ReduceOp::Prod, var("$p"), real_c(2)),
                                  assign(local_at("$w", j), X(j)), accum(ReduceOp::Sum, var("$v"), local_at("$w", int_c(0)))})},
                           {"$a", "$b", "$p", "$v"});
         },
         "for $r in [0, R) parallel:\n"
         "  tile $a = 0\n"
         "  tile $b = 1\n"
         "  tile $p = 1\n"
         "  tile $w[8]\n"
         "  tile $v = 0\n"
         "  for $j in [0, 8) simd:\n"
         "    $a sum= X[$r, $j]\n"
         "    $b sum= X[$r, $j]\n"
         "    $p prod= 2\n"
         "    $w[$j] = X[$r, $j]\n"
         "    $v sum= $w[0]\n"
         "  store Y[$r] = 0 + $a + $b + $p + $v\n"},
    };
}

}  // namespace

TEST(InvariantSums, TableOfKernels) {
    for (const Case &c : cases()) {
        SCOPED_TRACE(c.what);
        ArenaScope arena;
        Module m = take_invariant_sums_out(c.module());
        verify(m);
        EXPECT_EQ(to_string(m.kernels[0].body), c.after);
    }
}

TEST(InvariantSums, PolynomialMembersAndRepeatedSumsMatchTheReference) {
    for (const char *name : {"variance.rf", "layernorm.rf", "moment_of_inertia.rf"}) {
        SCOPED_TRACE(name);
        std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name;
        std::string src = test::read_text(path);
        {
            // The pass ran: no count of 1s is left inside a vector loop.
            ArenaScope arena;
            auto c = analyze_source(src, name, make_target(TargetKind::Cpu), {});
            std::string t = to_string(generate(*c).module);
            EXPECT_EQ(t.find("sum= 1\n"), std::string::npos) << t;
        }
        const bool moi = std::string(name) == "moment_of_inertia.rf";
        for (int64_t n : {1, 37, 2049, 5000}) {
            RunOptions o;
            o.sizes = moi ? std::map<std::string, int64_t>{{"S", 3}, {"N", n}} : std::map<std::string, int64_t>{{"R", 3}, {"C", n}};
            test::check_run(path, src, o, "cpu", {7});
        }
    }
}
