/** \file sign_test.cpp
 * Sign and interval analysis: a table of facts the fusion analysis must be able to prove (and
 * must not claim), and a property test that every computed interval contains sampled values.
 */
#include <gtest/gtest.h>

#include <functional>

#include "sym/Derivative.h"
#include "sym/Sign.h"
#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

enum : unsigned { POS = 1, NEG = 2, NONNEG = 4, NONPOS = 8, NONZERO = 16, NAN_ = 32 };

struct SignRow {
    const char *name;
    std::function<Expr()> build;
    unsigned expected;  // exactly the flags among POS NEG NONNEG NONPOS NONZERO NAN_ that hold
};

Expr x() { return sym("x"); }
Expr y() { return sym("y"); }
Expr j() { return make_index("j"); }
Expr N() { return make_size("N"); }
Expr X() { return make_load("X", {j()}, DType::f32, SType::Real); }
Expr s_load() { return make_load("s", {make_index("t")}, DType::f32, SType::Real); }
Expr p_sym() { return sym("p"); }  // positive by fact
Expr ex(Expr a) { return call(Func::exp, a); }

Facts facts() {
    Facts f;
    f.atoms[p_sym()] = Interval::positive();
    f.lookup = [](Expr n, Interval &out) {
        if (n->kind == Kind::Load && n->name == "s") {
            out = Interval::positive();
            return true;
        }
        return false;
    };
    return f;
}

unsigned flags_of(const Interval &iv) {
    unsigned f = 0;
    if (iv.is_positive()) f |= POS;
    if (iv.is_negative()) f |= NEG;
    if (iv.is_nonnegative()) f |= NONNEG;
    if (iv.is_nonpositive()) f |= NONPOS;
    if (iv.is_nonzero()) f |= NONZERO;
    if (iv.may_be_nan) f |= NAN_;
    return f;
}

const unsigned P = POS | NONNEG | NONZERO, NN = NONNEG, NG = NEG | NONPOS | NONZERO;

const std::vector<SignRow> &sign_rows() {
    static const std::vector<SignRow> r = {
        {"symbol_unknown", [] { return x(); }, 0},
        {"const_pos", [] { return C(2); }, P},
        {"const_zero", [] { return C(0); }, NONNEG | NONPOS},
        {"const_neg_inf", [] { return C(-INFINITY); }, NG},
        {"const_nan", [] { return C(NAN); }, NAN_},
        {"size_var", [] { return N(); }, P},
        {"index_var", [] { return j(); }, NN},
        {"exp", [] { return ex(x()); }, P},
        {"neg_exp", [] { return make_neg(ex(x())); }, NG},
        {"exp_of_masked", [] { return ex(make_select(make_cmp(CmpOp::LE, j(), make_index("i")), x(), C(-INFINITY))); },
         NN},
        {"abs", [] { return call(Func::abs, x()); }, NN},
        {"square", [] { return make_pow(x(), C(2)); }, NN},
        {"square_mul", [] { return make_mul(x(), x()); }, NN},  // a repeated factor is a power
        {"int_square", [] { return make_mul(make_load("I", {j()}, DType::i32, SType::Int), make_load("I", {j()}, DType::i32, SType::Int)); }, NN},
        {"square_simplified", [] { return simplify(make_mul(x(), x())); }, NN},
        {"cube", [] { return make_pow(x(), C(3)); }, 0},
        {"sqrt_unknown", [] { return call(Func::sqrt, x()); }, NAN_},  // NaN for x < 0
        {"sqrt_of_square_plus_one", [] { return call(Func::sqrt, make_add(make_pow(x(), C(2)), C(1))); }, P},
        {"sigmoid", [] { return call(Func::sigmoid, x()); }, P},
        {"tanh", [] { return call(Func::tanh, x()); }, 0},
        {"tanh_of_positive", [] { return call(Func::tanh, ex(x())); }, P},
        {"log_unknown", [] { return call(Func::log, x()); }, NAN_},
        {"log_one_plus_exp", [] { return call(Func::log, make_add(ex(x()), C(1))); }, P},
        {"product_of_positives", [] { return make_mul({ex(x()), N(), C(0.5)}); }, P},
        {"quotient_of_positives", [] { return make_div(ex(x()), make_add(ex(y()), C(1))); }, P},
        {"quotient_by_fact", [] { return make_div(ex(x()), s_load()); }, P},
        {"quotient_by_unknown", [] { return make_div(ex(x()), X()); }, 0},
        {"reciprocal_of_positive_fact", [] { return make_pow(p_sym(), C(-1)); }, P},
        {"sum_of_exps", [] { return make_reduce(ReduceOp::Sum, {j()}, {N()}, ex(X())); }, P},
        {"sum_of_squares", [] { return make_reduce(ReduceOp::Sum, {j()}, {N()}, make_pow(X(), C(2))); }, NN},
        {"sum_unknown", [] { return make_reduce(ReduceOp::Sum, {j()}, {N()}, X()); }, 0},
        {"sum_maybe_empty", [] { return make_reduce(ReduceOp::Sum, {j()}, {make_index("k")}, ex(X())); }, NN},
        {"max_of_exps", [] { return make_reduce(ReduceOp::Max, {j()}, {N()}, ex(X())); }, P},
        {"prod_of_exps", [] { return make_reduce(ReduceOp::Prod, {j()}, {N()}, ex(X())); }, P},
        {"argmax", [] { return make_reduce(ReduceOp::ArgMax, {j()}, {N()}, X()); }, NN},
        {"rms_scale", [] {
             Expr ms = make_div(make_reduce(ReduceOp::Sum, {j()}, {N()}, make_pow(X(), C(2))), N());
             return call(Func::rsqrt, make_add(ms, C(1e-6)));
         }, P},
        {"max_with_positive", [] { return make_max(x(), C(1)); }, P},
        {"min_with_negative", [] { return make_min(x(), C(-1)); }, NG},
        {"select_join", [] { return make_select(make_cmp(CmpOp::LT, x(), y()), ex(x()), C(3)); }, P},
        {"select_mixed", [] { return make_select(make_cmp(CmpOp::LT, x(), y()), ex(x()), C(-3)); }, 0},
        {"cmp_is_01", [] { return make_cmp(CmpOp::LT, x(), y()); }, NN},
        {"cast_of_positive", [] { return make_cast(DType::bf16, ex(x())); }, NN},
        {"cast_keeps_bound", [] { return make_cast(DType::f16, make_add(ex(x()), C(1))); }, P},
        {"cast_int_nonneg", [] { return make_cast(DType::i8, call(Func::abs, x())); }, NN},
        {"difference_unknown", [] { return make_sub(ex(x()), ex(y())); }, 0},
        {"mod_const", [] { return make_mod(j(), I(4)); }, NN},
        {"idiv_index", [] { return make_idiv(j(), I(4)); }, NN},
        {"pow_symbolic_positive_base", [] { return make_pow(ex(x()), y()); }, P},
        {"pow_symbolic_unknown_base", [] { return make_pow(x(), y()); }, NAN_},
        {"zero_times_masked", [] { return make_mul(C(0), C(-INFINITY)); }, NAN_},
        {"masked_sum", [] { return make_add(x(), C(-INFINITY)); }, NG},
    };
    return r;
}

class SignTable : public ::testing::TestWithParam<size_t> {};

TEST_P(SignTable, Row) {
    ArenaScope scope;
    const SignRow &row = sign_rows()[GetParam()];
    Expr e = row.build();
    Interval iv = interval_of(e, facts());
    EXPECT_EQ(flags_of(iv), row.expected)
        << row.name << ": " << to_string(e) << " in " << (iv.lo_open ? "(" : "[") << iv.lo << ", " << iv.hi
        << (iv.hi_open ? ")" : "]") << (iv.may_be_nan ? " or NaN" : "");
}

INSTANTIATE_TEST_SUITE_P(Facts, SignTable, ::testing::Range<size_t>(0, sign_rows().size()),
                         [](const ::testing::TestParamInfo<size_t> &info) { return std::string(sign_rows()[info.param].name); });

TEST(Sign, IntervalsOfKnownShapes) {
    ArenaScope scope;
    Interval s = interval_of(call(Func::sigmoid, sym("x")));
    EXPECT_EQ(s.lo, 0);
    EXPECT_TRUE(s.lo_open);
    EXPECT_EQ(s.hi, 1);
    EXPECT_TRUE(s.hi_open);
    Interval t = interval_of(call(Func::tanh, sym("x")));
    EXPECT_EQ(t.lo, -1);
    EXPECT_TRUE(t.lo_open);
    EXPECT_EQ(t.hi, 1);
    EXPECT_TRUE(t.hi_open);
    Interval n = interval_of(make_size("N"));
    EXPECT_EQ(n.lo, 1);
    EXPECT_FALSE(n.lo_open);
    // A fact for a Var is intersected with its role.
    Facts f;
    f.atoms[make_size("N")] = Interval{0, 8};
    Interval n8 = interval_of(make_size("N"), f);
    EXPECT_EQ(n8.lo, 1);
    EXPECT_EQ(n8.hi, 8);
    EXPECT_TRUE(is_positive(make_size("N"), f));
    EXPECT_TRUE(is_nonzero(make_neg(make_size("N"))));
    EXPECT_TRUE(is_negative(make_neg(make_size("N"))));
    EXPECT_TRUE(is_nonnegative(make_call(Func::abs, sym("x"))));
}

TEST(Sign, MonotoneSelectionMap) {
    ArenaScope scope;
    // phi(u) = exp(u) * exp(-m) / s is strictly increasing given s > 0.
    Expr u = sym("u");
    Expr m = make_load("m", {make_index("t")}, DType::f32, SType::Real);
    Expr phi = make_div(make_mul(ex(u), ex(make_neg(m))), s_load());
    Expr d = derivative(phi, u);
    EXPECT_TRUE(is_positive(d, facts())) << to_string(d);
}

/** Random expressions over x (a positive fact), y (in [-1, 2] by fact) and z (unknown): every
 *  sampled finite value lies in the computed interval, and NaN appears only where may_be_nan. */
TEST(Sign, IntervalContainsSampledValues) {
    ArenaScope scope;
    Expr xs = sym("x"), ys = sym("y"), zs = sym("z");
    Facts f;
    f.atoms[xs] = Interval::positive();
    f.atoms[ys] = Interval{-1, 2, false, false, false};
    RandomExpr gen(getenv("RF_SEED") ? atoi(getenv("RF_SEED")) : 2024, {xs, ys, zs});
    int checked = 0;
    for (int n = 0; n < 2500; n++) {
        Expr e = gen.gen(1 + static_cast<int>(gen.pick(5)));
        Interval iv = interval_of(e, f);
        Interval iv_simplified = interval_of(simplify(e), f);
        for (int p = 0; p < 6; p++) {
            std::map<Expr, double> val;
            double r = gen.uniform(0, 1);
            val[xs] = r < 0.1 ? 1e-3 * r : gen.uniform(0, 4);
            val[ys] = r > 0.9 ? (r > 0.95 ? -1.0 : 2.0) : gen.uniform(-1, 2);
            val[zs] = gen.uniform(-4, 4);
            double v = eval_at(e, val);
            bool overflow = false;
            visit(e, [&](Expr k) {
                if (k->kind != Kind::Reduce && std::isinf(eval_at(k, val))) overflow = true;
            });
            if (overflow) continue;
            // simplify() is an identity where every sub-expression is defined; elsewhere (a NaN
            // inside a condition, say) only the original's interval has to hold.
            double mag;
            bool defined = defined_at(e, val, mag);
            for (const Interval *i : {&iv, &iv_simplified}) {
                if (i == &iv_simplified && !defined) continue;
                std::string where = to_string(e) + " = " + std::to_string(v) + " at x=" + std::to_string(val[xs]) +
                                    " y=" + std::to_string(val[ys]) + " z=" + std::to_string(val[zs]) + " not in " +
                                    (i->lo_open ? "(" : "[") + std::to_string(i->lo) + ", " + std::to_string(i->hi) +
                                    (i->hi_open ? ")" : "]") + (i->may_be_nan ? " or NaN" : "");
                if (std::isnan(v)) {
                    ASSERT_TRUE(i == &iv_simplified || i->may_be_nan) << where;
                    continue;
                }
                double tol = 1e-9 * (1 + std::fabs(v));
                ASSERT_GE(v, i->lo - tol) << where;
                ASSERT_LE(v, i->hi + tol) << where;
                // In double, exp / sigmoid / tanh saturate (to 0 or +-1) where the real value is
                // strictly inside their range; the simplified form's interval describes the real
                // value, which the original's rounding may miss by an ulp.
                bool saturated = any_of(e, [&](Expr k) {
                    if (k->kind != Kind::Call && k->kind != Kind::Pow) return false;
                    double w = eval_at(k, val);
                    if (k->kind == Kind::Pow) return w == 0;  // x^y underflow
                    return ((k->func == Func::exp || k->func == Func::exp2) && w == 0) ||
                           (k->func == Func::sigmoid && (w == 0 || w == 1)) || (k->func == Func::tanh && std::fabs(w) == 1);
                });
                if (saturated) continue;
                double stol = i == &iv ? 0 : 1e-12 * std::max(1.0, std::fabs(v));
                if (i->is_positive()) {
                    ASSERT_GT(v, -stol) << where;
                }
                if (i->is_negative()) {
                    ASSERT_LT(v, stol) << where;
                }
                if (i->is_nonnegative()) {
                    ASSERT_GE(v, -stol) << where;
                }
                if (i->is_nonpositive()) {
                    ASSERT_LE(v, stol) << where;
                }
            }
            checked++;
        }
    }
    EXPECT_GT(checked, 5000);
}

}  // namespace
