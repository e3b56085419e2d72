/** \file simplify_property_test.cpp
 * Property tests of simplify() and expand() on random expression trees: the rewritten expression
 * takes the same value as the original wherever the original is defined, and canonical forms are
 * fixed points.
 */
#include <gtest/gtest.h>

#include "sym/Expand.h"
#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

constexpr int kExpressions = 2500;  // RF_SEED=n in the environment reruns with another seed
constexpr int kPoints = 6;

/** |got - want| within 1e-9 relative, plus an absolute floor that scales with the largest
 *  intermediate magnitude (cancellation loses that much) and with the sensitivity of the original
 *  at this point (`spread`: how much it moves when the inputs move by 1e-10 relative), so that an
 *  ill-conditioned point ((x + y)^3 near x = -y, expanded) does not count as a wrong rewrite. */
bool close(double want, double got, double max_mag, double spread) {
    double tol = 1e-9 * std::fabs(want) + 1e-12 * std::max(1.0, max_mag) + 1e3 * spread;
    return std::fabs(got - want) <= tol;
}

struct Stats {
    int compared = 0;
};

bool has_infinite_subterm(Expr e, const std::map<Expr, double> &val) {
    return any_of(e, [&](Expr k) { return k->kind != Kind::Reduce && std::isinf(eval_at(k, val)); });
}

void check_equivalent(const char *what, Expr original, Expr rewritten, RandomExpr &gen,
                      const std::vector<Expr> &atoms, Stats &stats) {
    for (int p = 0; p < kPoints; p++) {
        std::map<Expr, double> val;
        for (Expr a : atoms) val[a] = gen.uniform(-3, 3);
        double mag, mag2;
        if (!defined_at(original, val, mag) || mag > 1e8) continue;
        // A rewrite may split a finite product into an overflowing and an underflowing factor
        // ((z / |z|)^e = z^e * |z|^-e): an artifact of floating point, not of the algebra.
        if (has_infinite_subterm(rewritten, val)) continue;
        defined_at(rewritten, val, mag2);  // the rewritten form may cancel larger terms (expand)
        mag = std::max(mag, mag2);
        double want = eval_at(original, val), got = eval_at(rewritten, val);
        double spread = 0;
        for (Expr a : atoms)
            for (double f : {1 - 1e-10, 1 + 1e-10}) {
                std::map<Expr, double> moved = val;
                moved[a] *= f;
                double w = eval_at(original, moved);
                if (std::isfinite(w)) spread = std::max(spread, std::fabs(w - want));
            }
        stats.compared++;
        ASSERT_TRUE(close(want, got, mag, spread))
            << what << " changed the value at x=" << val[atoms[0]] << " y=" << val[atoms[1]] << " z=" << val[atoms[2]]
            << ":\n  " << to_string(original) << " = " << want << "\n  " << to_string(rewritten) << " = " << got;
    }
}

TEST(SimplifyProperty, PreservesValueAndIsIdempotent) {
    ArenaScope scope;
    std::vector<Expr> atoms{sym("x"), sym("y"), sym("z")};
    RandomExpr gen(getenv("RF_SEED") ? atoi(getenv("RF_SEED")) : 12345, atoms);
    Stats stats;
    for (int n = 0; n < kExpressions; n++) {
        Expr e = gen.gen(1 + static_cast<int>(gen.pick(5)));
        Expr s = simplify(e);
        check_equivalent("simplify", e, s, gen, atoms, stats);
        if (HasFatalFailure()) return;
        clear_simplify_cache();
        ASSERT_EQ(simplify(s), s) << "not idempotent: " << to_string(e) << " -> " << to_string(s) << " -> "
                                  << to_string(simplify(s));
    }
    EXPECT_GT(stats.compared, kExpressions);  // most trees are defined at most points
}

TEST(ExpandProperty, PreservesValueAndIsCanonical) {
    ArenaScope scope;
    std::vector<Expr> atoms{sym("x"), sym("y"), sym("z")};
    RandomExpr gen(getenv("RF_SEED") ? atoi(getenv("RF_SEED")) : 777, atoms);
    Stats stats;
    for (int n = 0; n < kExpressions; n++) {
        Expr e = gen.gen(1 + static_cast<int>(gen.pick(4)));
        Expr x = expand(e);
        check_equivalent("expand", e, x, gen, atoms, stats);
        if (HasFatalFailure()) return;
        clear_simplify_cache();
        ASSERT_EQ(simplify(x), x) << "expand result not canonical: " << to_string(e) << " -> " << to_string(x);
        ASSERT_EQ(expand(x), x) << "expand not idempotent: " << to_string(e) << " -> " << to_string(x);
    }
    EXPECT_GT(stats.compared, kExpressions);
}

/** Polynomials built from sums and products: expand() makes equal polynomials pointer-equal. */
TEST(ExpandProperty, EqualPolynomialsBecomeEqualNodes) {
    ArenaScope scope;
    Expr x = sym("x"), y = sym("y");
    Expr lhs = make_pow(make_add(x, y), C(3));
    Expr rhs = make_add({make_pow(x, C(3)), make_mul({C(3), make_pow(x, C(2)), y}), make_mul({C(3), x, make_pow(y, C(2))}),
                         make_pow(y, C(3))});
    EXPECT_EQ(expand(lhs), expand(rhs));
    EXPECT_TRUE(provably_equal(lhs, rhs));
    EXPECT_FALSE(provably_equal(lhs, make_pow(x, C(3))));
}

}  // namespace
