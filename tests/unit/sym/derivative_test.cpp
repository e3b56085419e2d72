/** \file derivative_test.cpp
 * Symbolic derivatives: exact results the fusion analysis relies on (polynomial degree, mixed
 * partials, exp rescaling) and agreement with central finite differences on random expressions.
 */
#include <gtest/gtest.h>

#include "support/Error.h"
#include "sym/Derivative.h"
#include "sym/Sign.h"
#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

Expr load(const std::string &name, std::vector<Expr> idx) { return make_load(name, std::move(idx), DType::f32, SType::Real); }

TEST(Derivative, VarianceIsQuadraticInTheMean) {
    ArenaScope scope;
    Expr X = load("X", {make_index("r"), make_index("c")});
    Expr mu = make_symbol("mu");
    Expr Cn = make_size("C");
    Expr F = make_pow(make_sub(X, make_div(mu, Cn)), C(2));
    Expr d1 = derivative(F, mu);
    // -2 (X - mu/C) / C
    Expr want1 = simplify(make_div(make_mul(C(-2), make_sub(X, make_div(mu, Cn))), Cn));
    EXPECT_EQ(d1, want1) << to_string(d1) << " vs " << to_string(want1);
    Expr d2 = derivative(d1, mu);
    EXPECT_EQ(d2, simplify(make_div(C(2), make_pow(Cn, C(2))))) << to_string(d2);
    EXPECT_EQ(to_string(d2), "2 * pow(C, -2)");
    Expr d3 = derivative(d2, mu);
    EXPECT_TRUE(d3->is_const(0)) << to_string(d3);
    EXPECT_EQ(d3, make_const(0));
}

TEST(Derivative, MomentOfInertiaHasZeroMixedPartials) {
    ArenaScope scope;
    Expr j = make_index("j");
    Expr w = load("w", {j});
    Expr q[3] = {make_symbol("q0"), make_symbol("q1"), make_symbol("q2")};
    std::vector<Expr> sq;
    for (int k = 0; k < 3; k++) sq.push_back(make_pow(make_sub(load("P" + std::to_string(k), {j}), q[k]), C(2)));
    Expr F = make_mul(w, make_add(sq));
    for (int a = 0; a < 3; a++) {
        Expr da = derivative(F, q[a]);
        EXPECT_FALSE(da->is_const()) << to_string(da);
        Expr daa = derivative(da, q[a]);
        EXPECT_EQ(daa, simplify(make_mul(C(2), w))) << to_string(daa);
        EXPECT_TRUE(derivative(daa, q[a])->is_const(0));
        for (int b = 0; b < 3; b++) {
            if (b == a) continue;
            Expr dab = derivative(da, q[b]);
            EXPECT_TRUE(dab->is_const(0)) << "d2F/dq" << a << "dq" << b << " = " << to_string(dab);
        }
    }
}

TEST(Derivative, ExpRescalingFactor) {
    ArenaScope scope;
    Expr S = load("S", {make_index("i"), make_index("j")});
    Expr m = load("m", {make_index("i")});
    Expr V = load("V", {make_index("j"), make_index("e")});
    Expr F = make_mul(make_call(Func::exp, make_sub(S, m)), V);
    Expr d = derivative(F, m);
    EXPECT_EQ(d, simplify(make_neg(F))) << to_string(d);
    // The derivative with respect to a different element of the same tensor is 0.
    Expr m2 = load("m", {make_index("k")});
    EXPECT_TRUE(derivative(F, m2)->is_const(0));
}

TEST(Derivative, RmsNormIsNotPolynomialInTheSumOfSquares) {
    ArenaScope scope;
    Expr x = make_symbol("x"), r = make_symbol("r");
    Expr F = make_mul(x, make_call(Func::rsqrt, make_add(make_div(r, make_size("K")), C(1e-6))));
    Expr d = F;
    for (int order = 1; order <= 8; order++) {
        d = derivative(d, r);
        EXPECT_FALSE(d->is_const()) << "order " << order << ": " << to_string(d);
        ASSERT_TRUE(any_of(d, [&](Expr n) { return n == r; })) << "order " << order << ": " << to_string(d);
    }
}

TEST(Derivative, MonotoneMapOfTopKIsIncreasing) {
    ArenaScope scope;
    Expr u = make_symbol("u");
    Expr m = load("m", {make_index("t")});
    Expr s = load("s", {make_index("t")});
    Expr phi = make_div(make_mul(make_call(Func::exp, u), make_call(Func::exp, make_neg(m))), s);
    Expr d = derivative(phi, u);
    Facts facts;
    facts.atoms[s] = Interval::positive();
    EXPECT_TRUE(is_positive(d, facts)) << to_string(d);
    EXPECT_FALSE(is_positive(d)) << "s of unknown sign";
    EXPECT_EQ(d, simplify(phi));  // d/du exp(u) * c = exp(u) * c
}

TEST(Derivative, Rules) {
    ArenaScope scope;
    Expr x = make_symbol("x"), y = make_symbol("y");
    EXPECT_EQ(derivative(make_call(Func::log, x), x), simplify(make_div(C(1), x)));
    EXPECT_EQ(derivative(make_call(Func::sqrt, x), x), simplify(make_mul(C(0.5), make_call(Func::rsqrt, x))));
    EXPECT_EQ(derivative(make_pow(x, C(3)), x), simplify(make_mul(C(3), make_pow(x, C(2)))));
    EXPECT_EQ(derivative(make_mul(x, y), x), y);
    EXPECT_EQ(derivative(make_div(C(1), x), x), simplify(make_neg(make_pow(x, C(-2)))));
    EXPECT_EQ(to_string(derivative(make_call(Func::abs, x), x)), "select(0 <= x, 1, -1)");
    EXPECT_EQ(to_string(derivative(make_max(x, y), x)), "select(y <= x, 1, 0)");
    EXPECT_EQ(to_string(derivative(make_min(x, y), x)), "select(x <= y, 1, 0)");
    EXPECT_EQ(derivative(make_cast(DType::bf16, make_mul(C(3), x)), x), make_const(3));
    EXPECT_TRUE(derivative(make_call(Func::floor, x), x)->is_const(0));
    EXPECT_TRUE(derivative(y, x)->is_const(0));
    EXPECT_EQ(to_string(derivative(make_pow(x, y), x)), "y * pow(x, y - 1)");
    // Reductions: a sum of the derivative; others must not depend on the atom.
    Expr j = make_index("j");
    Expr X = load("X", {j});
    Expr sum = make_reduce(ReduceOp::Sum, {j}, {make_size("N")}, make_mul(X, x));
    EXPECT_EQ(to_string(derivative(sum, x)), "sum(j: X[j])");
    Expr mx = make_reduce(ReduceOp::Max, {j}, {make_size("N")}, make_mul(X, x));
    EXPECT_THROW(derivative(mx, x), InternalError);
    EXPECT_TRUE(derivative(make_reduce(ReduceOp::Max, {j}, {make_size("N")}, X), x)->is_const(0));
    EXPECT_THROW(derivative(x, make_add(x, y)), InternalError);
}

/** Central differences with a Richardson step; nan when the two step sizes disagree (a kink,
 *  a branch switch, or too much curvature for the step). */
double finite_difference(Expr e, std::map<Expr, double> val, Expr x) {
    double x0 = val[x];
    double h = 1e-4 * std::max(1.0, std::fabs(x0));
    auto f = [&](double v) -> double {
        val[x] = v;
        double mag;
        if (!defined_at(e, val, mag)) return NAN;
        return eval_at(e, val);
    };
    double d1 = (f(x0 + h) - f(x0 - h)) / (2 * h);
    double d2 = (f(x0 + h / 2) - f(x0 - h / 2)) / h;
    if (!std::isfinite(d1) || !std::isfinite(d2)) return NAN;
    if (std::fabs(d1 - d2) > 1e-3 * (1 + std::fabs(d2))) return NAN;
    return (4 * d2 - d1) / 3;
}

TEST(Derivative, MatchesFiniteDifferences) {
    ArenaScope scope;
    std::vector<Expr> atoms{sym("x"), sym("y"), sym("z")};
    RandomExpr gen(getenv("RF_SEED") ? atoi(getenv("RF_SEED")) : 4242, atoms);
    gen.casts = false;
    int compared = 0, expressions = 0;
    for (int n = 0; n < 1200; n++) {
        Expr e = gen.gen(1 + static_cast<int>(gen.pick(4)));
        Expr d = derivative(e, atoms[0]);
        bool any = false;
        for (int p = 0; p < 4; p++) {
            std::map<Expr, double> val;
            for (Expr a : atoms) val[a] = gen.uniform(-2.5, 2.5);
            double mag;
            if (!defined_at(e, val, mag) || mag > 1e6) continue;
            double fd = finite_difference(e, val, atoms[0]);
            if (!std::isfinite(fd)) continue;
            double got = eval_at(d, val);
            ASSERT_NEAR(got, fd, 1e-5 * (1 + std::fabs(fd)))
                << "d/dx " << to_string(e) << "\n  = " << to_string(d) << "\n  at x=" << val[atoms[0]]
                << " y=" << val[atoms[1]] << " z=" << val[atoms[2]];
            compared++;
            any = true;
        }
        expressions += any;
    }
    EXPECT_GE(expressions, 500);
    EXPECT_GE(compared, 1500);
}

TEST(Derivative, ResultIsCanonical) {
    ArenaScope scope;
    std::vector<Expr> atoms{sym("x"), sym("y"), sym("z")};
    RandomExpr gen(99, atoms);
    for (int n = 0; n < 600; n++) {
        Expr e = gen.gen(1 + static_cast<int>(gen.pick(4)));
        Expr d = derivative(e, atoms[1]);
        clear_simplify_cache();
        ASSERT_EQ(simplify(d), d) << to_string(e) << " -> " << to_string(d);
    }
}

}  // namespace
