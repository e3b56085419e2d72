/** \file expand_test.cpp
 * Polynomial expansion: distribution, integer powers of sums, what is left factored, and the
 * polynomial identities it decides through provably_equal().
 */
#include <gtest/gtest.h>

#include <functional>

#include "sym/Expand.h"
#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

Expr x() { return sym("x"); }
Expr y() { return sym("y"); }
Expr z() { return sym("z"); }

struct Row {
    const char *name;
    std::function<Expr()> build;
    const char *expected;
};

const std::vector<Row> &rows() {
    static const std::vector<Row> r = {
        {"atom", [] { return x(); }, "x"},
        {"distribute", [] { return make_mul(x(), make_add(y(), z())); }, "x * y + x * z"},
        {"product_of_sums", [] { return make_mul(make_add(x(), C(1)), make_add(y(), C(1))); }, "x + y + x * y + 1"},
        {"square", [] { return make_pow(make_add(x(), y()), C(2)); }, "2 * x * y + pow(x, 2) + pow(y, 2)"},
        {"square_of_difference", [] { return make_pow(make_sub(x(), C(1)), C(2)); }, "-2 * x + pow(x, 2) + 1"},
        {"cube_cancels", [] { return make_sub(make_pow(make_add(x(), C(1)), C(3)), make_pow(x(), C(3))); },
         "3 * x + 3 * pow(x, 2) + 1"},
        {"variance_shift", [] {
             Expr mu = sym("mu");
             return make_pow(make_sub(x(), mu), C(2));
         }, "-2 * mu * x + pow(mu, 2) + pow(x, 2)"},
        {"negative_power_kept", [] { return make_pow(make_add(x(), y()), C(-1)); }, "1 / (x + y)"},
        {"fractional_power_kept", [] { return make_pow(make_add(x(), y()), C(0.5)); }, "sqrt(x + y)"},
        {"inside_function", [] { return call(Func::exp, make_mul(C(2), make_mul(x(), make_add(y(), C(1))))); },
         "exp(2 * x + 2 * x * y)"},
        {"reciprocal_power_kept", [] { return make_div(C(1), make_pow(make_add(x(), C(1)), C(2))); },
         "pow(x + 1, -2)"},
        {"base_of_reciprocal_expanded",
         [] { return make_div(C(1), make_add(make_mul(x(), make_add(y(), C(1))), z())); }, "1 / (x + z + x * y)"},
        {"sum_times_reciprocal", [] { return make_mul(make_add(x(), y()), make_pow(z(), C(-1))); }, "x / z + y / z"},
    };
    return r;
}

class ExpandTable : public ::testing::TestWithParam<size_t> {};

TEST_P(ExpandTable, Row) {
    ArenaScope scope;
    const Row &row = rows()[GetParam()];
    Expr e = row.build();
    Expr out = expand(e);
    EXPECT_EQ(to_string(out), row.expected) << row.name << ": " << to_string(e);
    clear_simplify_cache();
    EXPECT_EQ(simplify(out), out);
    EXPECT_EQ(expand(out), out);
}

INSTANTIATE_TEST_SUITE_P(Expand, ExpandTable, ::testing::Range<size_t>(0, rows().size()),
                         [](const ::testing::TestParamInfo<size_t> &info) { return std::string(rows()[info.param].name); });

TEST(Expand, ProvablyEqualDecidesPolynomialIdentities) {
    ArenaScope scope;
    Expr a = make_pow(make_add(x(), y()), C(2));
    Expr b = make_add({make_pow(x(), C(2)), make_mul({C(2), x(), y()}), make_pow(y(), C(2))});
    EXPECT_TRUE(provably_equal(a, b));
    EXPECT_TRUE(provably_equal(make_mul(C(2), make_add(x(), y())), make_add(make_add(x(), y()), make_add(y(), x()))));
    EXPECT_FALSE(provably_equal(a, make_add(make_pow(x(), C(2)), make_pow(y(), C(2)))));
    EXPECT_FALSE(provably_equal(make_div(x(), x()), C(1)));  // x may be 0
    EXPECT_TRUE(provably_equal(make_div(make_size("N"), make_size("N")), C(1)));
}

TEST(Expand, LargeProductsStayFactored) {
    ArenaScope scope;
    std::vector<Expr> atoms;
    for (int k = 0; k < 8; k++) atoms.push_back(sym("a" + std::to_string(k)));
    Expr s = make_add(atoms);
    Expr e = make_pow(s, C(6));  // 8^6 terms before collection: too many
    Expr r = expand(e);
    EXPECT_EQ(r, simplify(e));
    Expr small = expand(make_pow(make_add(x(), y()), C(8)));
    EXPECT_EQ(small->kind, Kind::Add);
    EXPECT_EQ(small->args.size(), 9u);  // binomial: 9 monomials
}

}  // namespace
