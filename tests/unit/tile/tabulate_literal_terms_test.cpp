/** \file tabulate_literal_terms_test.cpp
 * The tile pass that evaluates a literal recompute's element-invariant terms once per row
 * (src/tile/TabulateLiteralTerms.cpp): a table of kernels before and after — attention's literal
 * output loop takes exp(S[j] − m) from an array filled before it, a term of the loop's variable keeps
 * only its nested sum out, and what must stay (a nested sum of the loop's variable, one that binds the
 * outer axis again, a term without a nested reduction, a one-element loop, an extent that is not a kernel constant) — and, end to end on the CPU, attention whose keys hold +inf, −inf and NaN (rows
 * that recompute literally) against the reference.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "../ExampleRuns.h"
#include "../MergeCases.h"
#include "RowKernelModule.h"
#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "interp/Npy.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr r() { return make_index("$r"); }
Expr X(Expr d) { return make_load("X", {r(), d}, DType::f32, SType::Real); }
Expr W(Expr j, Expr d) { return make_load("W", {j, d}, DType::f32, SType::Real); }
Expr V(Expr j, Expr x) { return make_load("V", {j, x}, DType::f32, SType::Real); }

/** Σ_d X[$r, d] · W[j, d] over d in [0, C). */
Expr dot(Expr j) {
    Expr d = make_index("d");
    return make_reduce(ReduceOp::Sum, {d}, {make_size("C")}, make_mul(X(d), W(j, d)));
}

/** for $r in [0, R) parallel: state $m = 0.5; state $t[C]; body — over X[R, C], W[C, C], V[C, C]
 *  (inputs) and Y[R, C], which each row stores from $t. */
Module kernel(std::vector<StmtP> body) {
    Expr R = make_size("R"), C = make_size("C"), x = make_index("$y");
    std::vector<StmtP> all{decl("$m", LocalClass::State, {}, real_c(0.5)), decl("$t", LocalClass::State, {C}, nullptr)};
    for (StmtP &s : body) all.push_back(s);
    all.push_back(for_loop(x, int_c(0), C, {store(make_load("Y", {r(), x}, DType::f32, SType::Real), local_at("$t", x))}));
    return row_kernel_module({{"X", Buffer::Role::Input, DType::f32, {R, C}},
                              {"W", Buffer::Role::Input, DType::f32, {C, C}},
                              {"V", Buffer::Role::Input, DType::f32, {C, C}},
                              {"Y", Buffer::Role::Output, DType::f32, {R, C}}},
                             std::move(all));
}

/** for $x in [b, e) independent: $t[$x] = Σ_j term(j, $x) over j in [0, extent). */
StmtP literal_loop(Expr b, Expr e, Expr extent, const std::function<Expr(Expr, Expr)> &term) {
    Expr x = make_index("$x"), j = make_index("j");
    Expr sum = make_reduce(ReduceOp::Sum, {j}, {extent}, term(j, x));
    return for_loop(x, b, e, {assign(local_at("$t", x), sum)}, LoopKind::Independent);
}

Expr softmax_term(Expr j) { return make_call(Func::exp, make_sub(dot(j), local_var("$m"))); }

struct Case {
    const char *what;
    std::function<Module()> module;
    const char *after;
};

const char *kHead =
    "for $r in [0, R) parallel:\n"
    "  state $m = 0.5\n"
    "  state $t[C]\n";
const char *kTail =
    "  for $y in [0, C) serial:\n"
    "    store Y[$r, $y] = $t[$y]\n";

std::vector<Case> cases() {
    Expr C = make_size("C");
    return {
        {"attention's literal output: exp(S[j] - m) once per j, then the loop over the columns reads it",
         [=] { return kernel({literal_loop(int_c(0), C, C, [](Expr j, Expr x) { return make_mul(softmax_term(j), V(j, x)); })}); },
         "  if 0 < C:\n"
         "    state $tab0[C]\n"
         "    for $tj1 in [0, C) serial:\n"
         "      $tab0[$tj1] = exp(sum(d: X[$r, d] * W[$tj1, d]) - $m)\n"
         "    for $x in [0, C) independent:\n"
         "      $t[$x] = sum(j: $tab0[j] * V[j, $x])\n"},
        {"a term that reads the loop's variable stays in the loop; its nested sum, which does not, is tabulated",
         [=] { return kernel({literal_loop(int_c(0), C, C, [](Expr j, Expr x) { return make_mul(make_call(Func::exp, make_sub(dot(j), x)), V(j, x)); })}); },
         "  if 0 < C:\n"
         "    state $tab0[C]\n"
         "    for $tj1 in [0, C) serial:\n"
         "      $tab0[$tj1] = sum(d: X[$r, d] * W[$tj1, d])\n"
         "    for $x in [0, C) independent:\n"
         "      $t[$x] = sum(j: exp($tab0[j] - $x) * V[j, $x])\n"},
        {"stays: the nested sum reads the loop's variable",
         [=] {
             return kernel({literal_loop(int_c(0), C, C, [](Expr j, Expr x) {
                 Expr d = make_index("d");
                 return make_reduce(ReduceOp::Sum, {d}, {make_size("C")}, make_mul(W(j, d), V(d, x)));
             })});
         },
         "  for $x in [0, C) independent:\n"
         "    $t[$x] = sum(j: sum(d: W[j, d] * V[d, $x]))\n"},
        {"stays: a nested sum that binds the outer axis again (its j is not the outer one)",
         [=] {
             return kernel({literal_loop(int_c(0), C, C, [](Expr j, Expr x) {
                 return make_mul(make_reduce(ReduceOp::Sum, {j}, {make_size("C")}, W(j, j)), V(j, x));
             })});
         },
         "  for $x in [0, C) independent:\n"
         "    $t[$x] = sum(j: sum(j: W[j, j]) * V[j, $x])\n"},
        {"stays: no nested reduction, a one-element loop, an extent that is not a kernel constant",
         [=] {
             return kernel({literal_loop(int_c(0), C, C, [](Expr j, Expr x) { return make_mul(W(j, int_c(0)), V(j, x)); }),
                            literal_loop(int_c(0), int_c(1), C, [](Expr j, Expr x) { return make_mul(softmax_term(j), V(j, x)); }),
                            literal_loop(int_c(0), C, make_add(r(), int_c(1)), [](Expr j, Expr x) { return make_mul(softmax_term(j), V(j, x)); })});
         },
         "  for $x in [0, C) independent:\n"
         "    $t[$x] = sum(j: W[j, 0] * V[j, $x])\n"
         "  for $x in [0, 1) independent:\n"
         "    $t[$x] = sum(j: exp(sum(d: X[$r, d] * W[j, d]) - $m) * V[j, $x])\n"
         "  for $x in [0, C) independent:\n"
         "    $t[$x] = sum(j: exp(sum(d: X[$r, d] * W[j, d]) - $m) * V[j, $x])\n"},
    };
}

}  // namespace

TEST(TabulateLiteralTerms, TableOfKernels) {
    for (const Case &c : cases()) {
        SCOPED_TRACE(c.what);
        ArenaScope arena;
        Module m = tabulate_literal_terms(c.module());
        verify(m);
        EXPECT_EQ(to_string(m.kernels[0].body), std::string(kHead) + c.after + kTail);
    }
}

TEST(TabulateLiteralTerms, AttentionWithNonFiniteKeysMatchesTheReference) {
    // Head 0: +inf at one element of key 5 (rows whose query is positive there have m = +inf: NaN
    // rows) and -inf at key 9 (a score of -inf where the query is positive); head 1: NaN in key 7
    // (every row NaN). N = 300 spans two tiles; the rows recompute literally on the CPU.
    std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    std::string src = test::read_text(path);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    std::map<std::string, int64_t> sizes{{"B", 1}, {"H", 2}, {"M", 70}, {"N", 300}, {"D", 24}};
    SizeBinding b = bind_sizes(c->program, sizes);
    auto in = make_random_inputs(c->program, b, 5);
    Tensor &K = in.at("K");
    K.at({0, 0, 5, 3}) = INFINITY;
    K.at({0, 0, 9, 4}) = -INFINITY;
    K.at({0, 1, 7, 0}) = NAN;
    RunOptions o;
    o.sizes = sizes;
    test::check_run_on_inputs(path, src, in, o, "cpu");
    o.row_block = 8;  // row blocks of 8: every block of head 1 recomputes
    test::check_run_on_inputs(path, src, in, o, "cpu");
}
