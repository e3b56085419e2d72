/** \file fold_exp2_test.cpp
 * The tile pass exp → exp2 (src/tile/FoldExp2.cpp): a table of exponents before and after, inside a
 * vector loop and outside, and the rewrite keeps every value (the evaluator, at random and special
 * values: ±inf, NaN, 0) up to rounding.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/Eval.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr X(Expr r, Expr j) { return make_load("X", {r, j}, DType::f32, SType::Real); }
Expr Y(Expr r, Expr j) { return make_load("Y", {r, j}, DType::f32, SType::Real); }
Expr L(double v) { return real_c(v); }
Expr var(const char *n) { return local_var(n); }

/** A kernel: for $r parallel { state $m, $d, $tag, $c; tile $t; for $j in [0, C) simd { body(j) }; after }. */
Module kernel(const std::function<std::vector<StmtP>(Expr)> &simd_body, std::vector<StmtP> after = {}) {
    Module m;
    m.sizes = {"R", "C"};
    m.buffers.push_back({"X", Buffer::Role::Input, DType::f32, {make_size("R"), make_size("C")}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {make_size("R"), make_size("C")}});
    Expr r = make_index("$r"), j = make_index("$j");
    std::vector<StmtP> body;
    for (const char *n : {"$m", "$d", "$tag", "$c"}) body.push_back(decl(n, LocalClass::State, {}, real_c(0.5)));
    body.push_back(decl("$t", LocalClass::Tile, {}, real_c(0)));
    body.push_back(for_loop(j, int_c(0), make_size("C"), simd_body(j), LoopKind::Simd));
    for (StmtP &s : after) body.push_back(s);
    Kernel k;
    k.name = "k0";
    k.body = for_loop(r, int_c(0), make_size("R"), body, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

/** The value of the first statement of the simd loop (or of the first statement after it). */
Expr value_in(const Module &m, bool in_loop) {
    const auto &body = m.kernels[0].body->body;
    for (size_t i = 0; i < body.size(); i++)
        if (body[i]->kind == StmtKind::For) return in_loop ? body[i]->body[0]->value : body[i + 1]->value;
    return nullptr;
}

struct Row {
    const char *what;
    bool in_loop;  // the exp in the vector loop (invariants absorb log2 e) or after it (constants only)
    std::function<Expr(Expr j)> before;
    const char *after;
};

std::vector<Row> rows() {
    Expr r = make_index("$r");
    Expr inv_sqrt_c = make_div(real_c(1), make_call(Func::sqrt, make_size("C")));
    return {
        {"constants absorb log2 e", true, [=](Expr j) { return make_call(Func::exp, make_sub(make_mul(X(r, j), L(0.5)), L(3))); },
         "exp2(X[$r, $j] * 0.7213475204444817 - 4.32808512266689)"},
        {"attention: scale and max absorb it (then hoisted)", true,
         [=](Expr j) { return make_call(Func::exp, make_sub(make_mul(X(r, j), inv_sqrt_c), var("$m"))); },
         "exp2(X[$r, $j] * (1 / sqrt(C) * 1.4426950408889634) - $m * 1.4426950408889634)"},
        {"a bare element: one multiply on the whole exponent", true,
         [=](Expr j) { return make_call(Func::exp, make_sub(X(r, j), var("$m"))); },
         "exp2((X[$r, $j] - $m) * 1.4426950408889634)"},
        {"masked scores: into both branches of the select", true,
         [=](Expr j) {
             return make_call(Func::exp, make_sub(make_select(make_cmp(CmpOp::LE, j, r), make_mul(X(r, j), L(0.5)), L(-INFINITY)), var("$m")));
         },
         "exp2(select($j <= $r, X[$r, $j] * 0.7213475204444817, -inf) - $m * 1.4426950408889634)"},
        {"softcap: into the numerator's constant", true,
         [=](Expr j) {
             return make_call(Func::exp, make_sub(make_div(make_mul(L(30), make_call(Func::tanh, X(r, j))), L(30)), var("$m")));
         },
         "exp2(43.2808512266689 * tanh(X[$r, $j]) / 30 - $m * 1.4426950408889634)"},
        {"an invariant factor of a product", true, [=](Expr j) { return make_call(Func::exp, make_mul(X(r, j), var("$c"))); },
         "exp2(X[$r, $j] * ($c * 1.4426950408889634))"},
        {"no invariant factor", true, [=](Expr j) { return make_call(Func::exp, make_mul(X(r, j), Y(r, j))); },
         "exp2(X[$r, $j] * Y[$r, $j] * 1.4426950408889634)"},
        {"a local written in the loop is no coefficient", true,
         [=](Expr j) { return make_call(Func::exp, make_mul(X(r, j), var("$t"))); }, "exp2(X[$r, $j] * $t * 1.4426950408889634)"},
        {"a whole invariant exponent", true, [=](Expr) { return make_call(Func::exp, make_neg(var("$m"))); },
         "exp2(-$m * 1.4426950408889634)"},
        {"per-row rescale: outside the loop only constants absorb", false,
         [=](Expr) { return make_call(Func::exp, make_add(make_mul(L(-1), var("$d")), var("$tag"))); },
         "exp2((-$d + $tag) * 1.4426950408889634)"},
        {"outside the loop, a constant coefficient", false, [=](Expr) { return make_call(Func::exp, make_mul(L(2), var("$d"))); },
         "exp2(2.8853900817779268 * $d)"},
        {"nested reduction: constants only, exp inside exp", true,
         [=](Expr) {
             Expr c = make_index("c");
             Expr red = make_reduce(ReduceOp::Sum, {c}, {make_size("C")}, make_call(Func::exp, make_sub(X(r, c), var("$m"))));
             return make_call(Func::exp, make_mul(L(2), make_call(Func::log, red)));
         },
         "exp2(2.8853900817779268 * log(sum(c: exp2((X[$r, c] - $m) * 1.4426950408889634))))"},
    };
}

Module with(const Row &row) {
    std::vector<StmtP> in, after;
    Expr j = make_index("$j"), r = make_index("$r");
    if (row.in_loop) in.push_back(store(Y(r, j), row.before(j)));
    else after.push_back(assign(var("$c"), row.before(nullptr)));
    in.push_back(accum(ReduceOp::Sum, var("$t"), X(r, j)));
    return kernel([&](Expr) { return in; }, after);
}

}  // namespace

TEST(FoldExp2, TableOfExponents) {
    for (const Row &row : rows()) {
        ArenaScope a;
        Module m = with(row);
        m = fold_exp2(m);
        EXPECT_NO_THROW(verify(m)) << row.what;
        EXPECT_EQ(to_string(value_in(m, row.in_loop)), row.after) << row.what;
    }
}

TEST(FoldExp2, KeepsEveryValueIncludingInfAndNaN) {
    std::mt19937_64 rng(3);
    std::normal_distribution<double> normal(0, 4);
    const double specials[] = {INFINITY, -INFINITY, NAN, 0.0, -0.0, 1e30, -1e30};
    for (const Row &row : rows()) {
        ArenaScope a;
        Module m = with(row);
        Expr before = value_in(m, row.in_loop);
        m = fold_exp2(m);
        Expr after = value_in(m, row.in_loop);
        for (int trial = 0; trial < 400; trial++) {
            std::map<std::string, double> vars{{"$r", 1}, {"$j", double(trial % 3)}, {"R", 3}, {"C", 4}};
            bool pick_special = trial % 4 == 0;
            auto value = [&](uint64_t salt) {
                return pick_special && (rng() + salt) % 3 == 0 ? specials[rng() % 7] : normal(rng);
            };
            for (const char *n : {"$m", "$d", "$tag", "$c", "$t"}) vars[n] = value(1);
            std::map<std::vector<int64_t>, double> xs, ys;
            EvalEnv env;
            env.var_value = [&](Expr v) { return vars.at(v->name); };
            env.load_value = [&](Expr l, const int64_t *idx) {
                auto &table = l->name == "X" ? xs : ys;
                std::vector<int64_t> key(idx, idx + l->args.size());
                auto it = table.find(key);
                return it != table.end() ? it->second : (table[key] = value(2));
            };
            double want = Evaluator(env).eval(before), got = Evaluator(env).eval(after);
            if (std::isnan(want) || std::isinf(want) || want == 0) {
                EXPECT_TRUE((std::isnan(want) && std::isnan(got)) || got == want) << row.what << ": " << want << " vs " << got;
            } else {
                EXPECT_NEAR(got, want, 1e-12 * std::fabs(want) + 1e-300) << row.what;
            }
        }
    }
}
