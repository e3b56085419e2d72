/** \file hoist_invariants_test.cpp
 * The tile pass that hoists loop invariants out of vector loops (src/tile/HoistInvariants.cpp): a table
 * of kernels before and after — what moves and where (before the loop, before the independent loops
 * around it, once per parallel iteration), and what must not (loads of arrays the loop writes, a
 * reduction target, values of an inner loop variable, loads out of loops that may not run, integer
 * division by a size, trivial values) — and, on every example, that the GPU's flat loop pairs survive
 * (scalar declarations before the inner loop allowed).
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "driver/Compiler.h"
#include "tile/Lower.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"
#include "RowKernelModule.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr r() { return make_index("$r"); }
Expr X(Expr j) { return make_load("X", {r(), j}, DType::f32, SType::Real); }
Expr Y(Expr j) { return make_load("Y", {r(), j}, DType::f32, SType::Real); }
Expr M() { return make_load("m", {r()}, DType::f64, SType::Real); }
Expr var(const char *n) { return local_var(n); }
Expr call(Func f, Expr a) { return make_call(f, a); }
StmtP simd(const char *v, Expr b, Expr e, std::vector<StmtP> body) { return for_loop(make_index(v), b, e, std::move(body), LoopKind::Simd); }
StmtP indep(const char *v, int64_t n, std::vector<StmtP> body) {
    return for_loop(make_index(v), int_c(0), int_c(n), std::move(body), LoopKind::Independent);
}
StmtP out(Expr j, Expr v) { return store(Y(j), v); }

/** for $r in [0, R) parallel: body — over X[R, C] (input), Y[R, C] (output), m[R] (a temporary). */
Module kernel(std::vector<StmtP> body) {
    Expr R = make_size("R"), C = make_size("C");
    return row_kernel_module({{"X", Buffer::Role::Input, DType::f32, {R, C}},
                                       {"Y", Buffer::Role::Output, DType::f32, {R, C}},
                                       {"m", Buffer::Role::Temp, DType::f64, {R}}},
                                      std::move(body));
}

struct Case {
    const char *what;
    std::function<std::vector<StmtP>()> body;
    const char *after;
};

std::vector<Case> cases() {
    Expr C = make_size("C"), j = make_index("$j"), j2 = make_index("$j2"), j3 = make_index("$j3");
    auto s = [] { return decl("$s", LocalClass::State, {}, real_c(1)); };
    return {
        {"sizes only: once per parallel iteration; a scalar's function: before the loop",
         [=] { return std::vector<StmtP>{s(), simd("$j", int_c(0), C, {out(j, make_add(make_mul(X(j), call(Func::sqrt, C)), call(Func::exp2, var("$s"))))})}; },
         "for $r in [0, R) parallel:\n"
         "  tile $h0 = sqrt(C)\n"
         "  state $s = 1\n"
         "  tile $h1 = exp2($s)\n"
         "  for $j in [0, C) simd:\n"
         "    store Y[$r, $j] = X[$r, $j] * $h0 + $h1\n"},
        {"an array the loop writes is not invariant; one it does not write is (a load alone saves the reload)",
         [=] {
             Expr a0 = local_at("$a", int_c(0)), b1 = local_at("$b", int_c(1));
             return std::vector<StmtP>{decl("$a", LocalClass::Tile, {int_c(8)}, nullptr), decl("$b", LocalClass::Tile, {int_c(8)}, nullptr),
                                       simd("$j", int_c(0), int_c(8), {assign(local_at("$a", j), X(j)), out(j, make_add(make_mul(X(j), call(Func::sqrt, a0)), b1))})};
         },
         "for $r in [0, R) parallel:\n"
         "  tile $a[8]\n"
         "  tile $b[8]\n"
         "  tile $h0 = $b[1]\n"
         "  for $j in [0, 8) simd:\n"
         "    $a[$j] = X[$r, $j]\n"
         "    store Y[$r, $j] = X[$r, $j] * sqrt($a[0]) + $h0\n"},
        {"a reduction target is written by the loop",
         [=] {
             return std::vector<StmtP>{s(), decl("$t", LocalClass::Tile, {}, real_c(0)),
                                       simd("$j", int_c(0), int_c(8), {accum(ReduceOp::Sum, var("$t"), make_add(make_mul(X(j), call(Func::exp2, var("$t"))), call(Func::exp2, var("$s"))))})};
         },
         "for $r in [0, R) parallel:\n"
         "  state $s = 1\n"
         "  tile $t = 0\n"
         "  tile $h0 = exp2($s)\n"
         "  for $j in [0, 8) simd:\n"
         "    $t sum= X[$r, $j] * exp2($t) + $h0\n"},
        {"nested loops: each value as far out as it is invariant, also just before a loop pair's inner loop",
         [=] {
             Expr x = make_index("$x"), rr = make_index("$rr");
             StmtP inner = simd("$j", int_c(0), int_c(8),
                                {out(j, make_add({make_mul(X(j), call(Func::exp2, var("$d"))), call(Func::log, var("$s")), call(Func::exp2, x)}))});
             return std::vector<StmtP>{s(), indep("$rr", 4, {decl("$d", LocalClass::State, {}, X(rr)), indep("$x", 2, {inner})})};
         },
         "for $r in [0, R) parallel:\n"
         "  state $s = 1\n"
         "  tile $h1 = log($s)\n"
         "  for $rr in [0, 4) independent:\n"
         "    state $d = X[$r, $rr]\n"
         "    tile $h0 = exp2($d)\n"
         "    for $x in [0, 2) independent:\n"
         "      tile $h2 = exp2($x)\n"
         "      for $j in [0, 8) simd:\n"
         "        store Y[$r, $j] = X[$r, $j] * $h0 + $h1 + $h2\n"},
        {"a row's value before its columns (the GPU still spreads the pair as one range, or by row groups)",
         [=] {
             Expr rr = make_index("$rr");
             return std::vector<StmtP>{indep("$rr", 4, {comment("rows"), simd("$j", int_c(0), int_c(8), {out(j, make_mul(X(j), call(Func::exp2, rr)))})})};
         },
         "for $r in [0, R) parallel:\n"
         "  for $rr in [0, 4) independent:\n"
         "    # rows\n"
         "    tile $h0 = exp2($rr)\n"
         "    for $j in [0, 8) simd:\n"
         "      store Y[$r, $j] = X[$r, $j] * $h0\n"},
        {"loads leave only loops that run: not [0, C), a tile [tb, te) of the axis does",
         [=] {
             Expr t = make_index("$t"), tb = local_var("$tb", SType::Int), te = local_var("$te", SType::Int);
             Expr ntiles = make_idiv(make_add(make_sub(C, int_c(0)), int_c(3)), int_c(4));
             return std::vector<StmtP>{
                 simd("$j", int_c(0), C, {out(j, make_mul(X(j), call(Func::sqrt, M())))}),
                 for_loop(t, int_c(0), ntiles,
                          {decl("$tb", LocalClass::Index, {}, make_add(int_c(0), make_mul(t, int_c(4)))),
                           decl("$te", LocalClass::Index, {}, make_min(make_add(tb, int_c(4)), C)),
                           simd("$j2", tb, te, {out(j2, make_mul(X(j2), call(Func::sqrt, M())))})})};
         },
         "for $r in [0, R) parallel:\n"
         "  for $j in [0, C) simd:\n"
         "    store Y[$r, $j] = X[$r, $j] * sqrt(m[$r])\n"
         "  for $t in [0, (C - 0 + 3) / 4) serial:\n"
         "    index $tb = 0 + $t * 4\n"
         "    index $te = min($tb + 4, C)\n"
         "    tile $h0 = sqrt(m[$r])\n"
         "    for $j2 in [$tb, $te) simd:\n"
         "      store Y[$r, $j2] = X[$r, $j2] * $h0\n"},
        {"integer division by a size may trap: stays; by a constant: moves",
         [=] {
             return std::vector<StmtP>{simd("$j", int_c(0), int_c(8),
                                            {out(j, make_add(make_mul(X(j), call(Func::sqrt, make_idiv(r(), C))), call(Func::sqrt, make_idiv(r(), int_c(4)))))})};
         },
         "for $r in [0, R) parallel:\n"
         "  tile $h0 = sqrt($r / 4)\n"
         "  for $j in [0, 8) simd:\n"
         "    store Y[$r, $j] = X[$r, $j] * sqrt($r / C) + $h0\n"},
        {"one local for equal values while nothing writes what they read",
         [=] {
             Expr e = call(Func::exp2, var("$s"));
             return std::vector<StmtP>{s(), simd("$j", int_c(0), int_c(8), {out(j, make_mul(X(j), e))}),
                                       simd("$j2", int_c(0), int_c(8), {out(j2, make_mul(X(j2), e))}), assign(var("$s"), real_c(2)),
                                       simd("$j3", int_c(0), int_c(8), {out(j3, make_mul(X(j3), e))})};
         },
         "for $r in [0, R) parallel:\n"
         "  state $s = 1\n"
         "  tile $h0 = exp2($s)\n"
         "  for $j in [0, 8) simd:\n"
         "    store Y[$r, $j] = X[$r, $j] * $h0\n"
         "  for $j2 in [0, 8) simd:\n"
         "    store Y[$r, $j2] = X[$r, $j2] * $h0\n"
         "  $s = 2\n"
         "  tile $h1 = exp2($s)\n"
         "  for $j3 in [0, 8) simd:\n"
         "    store Y[$r, $j3] = X[$r, $j3] * $h1\n"},
        {"trivial values stay; a loop of one iteration is left alone",
         [=] {
             return std::vector<StmtP>{s(), simd("$j", int_c(0), int_c(8), {out(j, make_add({make_mul(X(j), var("$s")), M(), make_neg(M())}))}),
                                       simd("$j2", int_c(0), int_c(1), {out(j2, call(Func::exp2, var("$s")))})};
         },
         "for $r in [0, R) parallel:\n"
         "  state $s = 1\n"
         "  for $j in [0, 8) simd:\n"
         "    store Y[$r, $j] = X[$r, $j] * $s + m[$r] - m[$r]\n"
         "  for $j2 in [0, 1) simd:\n"
         "    store Y[$r, $j2] = exp2($s)\n"},
    };
}

/** Independent loops whose body is one loop (comments and leading scalar declarations aside): the
 *  pairs the GPU spreads as one range (the declarations evaluated per element) or by row groups. */
int flat_pairs(const StmtP &s) {
    int n = 0;
    if (s->kind == StmtKind::For && s->loop == LoopKind::Independent) {
        int loops = 0, others = 0;
        for (const StmtP &c : s->body) {
            if (c->kind == StmtKind::Comment || (c->kind == StmtKind::Decl && c->dims.empty() && loops == 0)) continue;
            (c->kind == StmtKind::For ? loops : others)++;
        }
        n += loops == 1 && others == 0;
    }
    for (const StmtP &c : s->body) n += flat_pairs(c);
    for (const StmtP &c : s->else_body) n += flat_pairs(c);
    return n;
}

}  // namespace

TEST(HoistInvariants, TableOfKernels) {
    for (const Case &c : cases()) {
        ArenaScope a;
        Module m = kernel(c.body());
        ASSERT_NO_THROW(verify(m)) << c.what;
        m = hoist_invariants(m);
        EXPECT_NO_THROW(verify(m)) << c.what;
        EXPECT_EQ(to_string(m.kernels[0].body), c.after) << c.what;
    }
}

TEST(HoistInvariants, EveryExampleKeepsItsLoopPairsAndHoistsAttentionsScale) {
    for (const auto &e : std::filesystem::directory_iterator(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples")) {
        if (e.path().extension() != ".rf") continue;
        ArenaScope a;
        auto c = compile_file(e.path().string(), {});
        for (int64_t seg : {0, 4}) {
            LowerOptions lo;
            lo.force_segments = seg;
            lo.passes = false;
            // skip-masked copies a masked tile's body for its unmasked tiles: compare like with like.
            Module plain = skip_masked_tiles(lower_plan(c->plan, lo));
            // The passes of every target (not the CPU's reciprocal, which splits a pair on purpose).
            Module opt = lower_plan(c->plan, lo);
            for (const TilePassInfo &p : tile_passes())
                if (!p.always && !p.float_states_only && !p.cpu_only) opt = p.run(opt);
            ASSERT_NO_THROW(verify(opt)) << e.path();
            ASSERT_EQ(plain.kernels.size(), opt.kernels.size());
            for (size_t k = 0; k < opt.kernels.size(); k++)
                EXPECT_EQ(flat_pairs(plain.kernels[k].body), flat_pairs(opt.kernels[k].body)) << e.path() << " " << opt.kernels[k].name;
            if (e.path().stem() == "attention") {
                std::string dump = to_string(opt);
                EXPECT_NE(dump.find("tile $h1 = 1 / sqrt(D) * 1.4426950408889634"), std::string::npos) << dump;
                EXPECT_NE(dump.find("exp2($pro0[$rr * 264 + $jh - $tb] * $h1 - "), std::string::npos) << dump;  // rows 256 + 8 apart
                EXPECT_EQ(dump.find("exp("), std::string::npos) << dump;
            }
        }
    }
}
