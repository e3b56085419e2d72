/** \file simplify_table_test.cpp
 * Table-driven tests of the canonical simplifier: one row per rule, including rows where a rule
 * must not fire because its precondition cannot be proven.
 */
#include <gtest/gtest.h>

#include <functional>

#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

struct Row {
    const char *name;
    std::function<Expr()> build;
    const char *expected;
};

Expr x() { return sym("x"); }
Expr y() { return sym("y"); }
Expr z() { return sym("z"); }
Expr i() { return make_index("i"); }
Expr j() { return make_index("j"); }
Expr Cs() { return make_size("C"); }
Expr flag() { return make_var("c", VarRole::Symbol, SType::Bool); }
Expr cond() { return make_cmp(CmpOp::LT, x(), y()); }
Expr S() {
    return make_load("S", {make_index("b"), make_index("h"), make_index("i"), make_index("j")}, DType::f32, SType::Real);
}
Expr m() { return make_load("m", {make_index("b"), make_index("h"), make_index("i")}, DType::f32, SType::Real); }
Expr V() { return make_load("V", {make_index("j"), make_index("e")}, DType::f32, SType::Real); }
Expr inf() { return C(INFINITY); }

const std::vector<Row> &rows() {
    static const std::vector<Row> r = {
        // ---- Add
        {"add_zero", [] { return make_add(x(), C(0)); }, "x"},
        {"add_like_terms", [] { return make_add(x(), x()); }, "2 * x"},
        {"add_like_terms_coeff", [] { return make_add(make_mul(C(2), x()), make_mul(C(3), x())); }, "5 * x"},
        {"add_cancel", [] { return make_sub(x(), x()); }, "0"},
        {"add_sorted", [] { return make_add(y(), x()); }, "x + y"},
        {"add_const_fold_last", [] { return make_add({C(1), x(), C(2)}); }, "x + 3"},
        {"add_flatten", [] { return make_add(make_add(x(), y()), make_add(z(), x())); }, "2 * x + y + z"},
        {"sub_to_add", [] { return make_sub(x(), y()); }, "x - y"},
        {"neg_of_sub", [] { return make_neg(make_sub(x(), y())); }, "-x + y"},
        {"add_commuted_cancel", [] { return make_sub(make_add(x(), C(1)), make_add(C(1), x())); }, "0"},
        {"add_products_cancel", [] { return make_sub(make_mul(x(), y()), make_mul(y(), x())); }, "0"},
        {"add_const_rounding", [] { return make_add(C(0.1), C(0.2)); }, "0.30000000000000004"},
        {"add_inf_minus_inf_kept", [] { return make_add(inf(), C(-INFINITY)); }, "-inf + inf"},
        {"sub_masked_fold", [] { return make_sub(C(-INFINITY), C(-INFINITY)); }, "-inf"},
        {"attention_exp_arg", [] { return call(Func::exp, make_sub(make_mul(S(), C(0.125)), m())); },
         "exp(0.125 * S[b, h, i, j] - m[b, h, i])"},
        // ---- Mul
        {"mul_one", [] { return make_mul(x(), C(1)); }, "x"},
        {"mul_zero", [] { return make_mul(x(), C(0)); }, "0"},
        {"mul_neg_zero", [] { return make_mul(x(), C(-0.0)); }, "0"},
        {"mul_const_first", [] { return make_mul(x(), C(3)); }, "3 * x"},
        {"mul_const_fold", [] { return make_mul({C(2), x(), C(3)}); }, "6 * x"},
        {"mul_same_base", [] { return make_mul({x(), y(), x()}); }, "y * pow(x, 2)"},
        {"mul_add_exponents", [] { return make_mul(make_pow(x(), C(2)), make_pow(x(), C(3))); }, "pow(x, 5)"},
        {"mul_add_neg_exponents", [] { return make_mul(make_pow(x(), C(-1)), make_pow(x(), C(-2))); },
         "pow(x, -3)"},
        {"mul_mixed_signs_kept", [] { return make_mul(make_pow(x(), C(2)), make_pow(x(), C(-1))); },
         "pow(x, 2) / x"},
        {"mul_x_over_x_kept", [] { return make_div(x(), x()); }, "x / x"},
        {"mul_size_over_size", [] { return make_div(Cs(), Cs()); }, "1"},
        {"mul_size_cancel", [] { return make_mul({Cs(), x(), make_div(C(1), Cs())}); }, "x"},
        {"mul_exp_positive_cancel", [] { return make_div(call(Func::exp, x()), call(Func::exp, x())); }, "1"},
        {"mul_sqrt_sqrt", [] { return make_mul(call(Func::sqrt, x()), call(Func::sqrt, x())); }, "x"},
        {"mul_sqrt_over_sqrt_kept", [] { return make_div(call(Func::sqrt, x()), call(Func::sqrt, x())); },
         "rsqrt(x) * sqrt(x)"},
        {"mul_sqrt_size", [] { return make_mul(call(Func::sqrt, Cs()), call(Func::sqrt, Cs())); }, "C"},
        {"div_to_pow", [] { return make_div(x(), y()); }, "x / y"},
        {"div_by_const", [] { return make_div(x(), C(4)); }, "0.25 * x"},
        {"div_const_fold", [] { return make_div(C(1), C(4)); }, "0.25"},
        {"div_zero_by_zero", [] { return make_div(C(0), C(0)); }, "0"},
        {"div_by_zero_inf", [] { return make_div(C(1), C(0)); }, "inf"},
        {"mul_zero_inf_kept", [] { return make_mul(C(0), inf()); }, "0 * inf"},
        {"mul_exp_merge", [] { return make_mul({call(Func::exp, x()), call(Func::exp, y()), V()}); },
         "V[j, e] * exp(x + y)"},
        {"mul_exp_cancel", [] { return make_mul({call(Func::exp, x()), y(), call(Func::exp, make_neg(x()))}); },
         "y"},
        {"div_exp", [] { return make_div(call(Func::exp, x()), call(Func::exp, y())); }, "exp(x - y)"},
        {"mul_distribute_coeff", [] { return make_mul(C(2), make_add(x(), y())); }, "2 * x + 2 * y"},
        {"mul_coeff_into_sum_factor", [] { return make_mul({C(2), make_add(x(), y()), z()}); },
         "2 * z * (x + y)"},
        {"mul_sum_content", [] { return make_mul(z(), make_add(make_mul(C(2), x()), make_mul(C(2), y()))); },
         "2 * z * (x + y)"},
        {"mul_sum_sign", [] { return make_mul(z(), make_sub(C(1), x())); }, "-(z * (x - 1))"},
        {"mul_sum_inexact_content_kept", [] { return make_mul(z(), make_add(make_mul(C(3), x()), y())); },
         "z * (3 * x + y)"},
        {"pow_sum_content", [] { return make_pow(make_add(make_mul(C(2), x()), make_mul(C(2), y())), C(-1)); },
         "0.5 / (x + y)"},
        {"mul_coeff_into_sum_confluent", [] {
             return make_sub(make_mul({C(-2), make_add(x(), y()), z()}), make_mul(make_mul(C(-2), make_add(x(), y())), z()));
         }, "0"},
        {"neg_to_mul", [] { return make_neg(x()); }, "-x"},
        {"neg_neg", [] { return make_neg(make_neg(x())); }, "x"},
        {"sub_from_zero", [] { return make_sub(C(0), x()); }, "-x"},
        {"mu_over_C", [] { return make_div(sym("mu"), Cs()); }, "mu / C"},
        {"recip_of_product", [] { return make_div(C(1), make_mul(C(2), x())); }, "0.5 / x"},
        // ---- Pow
        {"pow_zero", [] { return make_pow(x(), C(0)); }, "1"},
        {"pow_one", [] { return make_pow(x(), C(1)); }, "x"},
        {"pow_fold", [] { return make_pow(C(2), C(3)); }, "8"},
        {"pow_fold_nan_kept", [] { return make_pow(C(-2), C(0.5)); }, "sqrt(-2)"},
        {"sqrt_fold", [] { return call(Func::sqrt, C(4)); }, "2"},
        {"pow_of_product", [] { return make_pow(make_mul(x(), y()), C(2)); }, "pow(x, 2) * pow(y, 2)"},
        {"pow_of_product_frac_kept", [] { return make_pow(make_mul(x(), y()), C(0.5)); }, "sqrt(x * y)"},
        {"pow_of_product_frac_positive", [] { return make_pow(make_mul(Cs(), x()), C(0.5)); }, "sqrt(x) * sqrt(C)"},
        {"pow_of_coeff_product", [] { return make_pow(make_mul(C(3), x()), C(2)); }, "9 * pow(x, 2)"},
        {"pow_pow_int", [] { return make_pow(make_pow(x(), C(3)), C(2)); }, "pow(x, 6)"},
        {"pow_pow_inverse", [] { return make_pow(make_pow(x(), C(-1)), C(-1)); }, "x"},
        {"pow_pow_sq_inverse", [] { return make_pow(make_pow(x(), C(2)), C(-1)); }, "pow(x, -2)"},
        {"sqrt_of_square", [] { return call(Func::sqrt, make_pow(x(), C(2))); }, "abs(x)"},
        {"pow_half_of_square", [] { return make_pow(make_pow(x(), C(2)), C(0.5)); }, "abs(x)"},
        {"pow_1p5_of_square", [] { return make_pow(make_pow(x(), C(2)), C(1.5)); }, "pow(abs(x), 3)"},
        {"square_of_sqrt", [] { return make_pow(call(Func::sqrt, x()), C(2)); }, "x"},
        {"sqrt_sqrt_kept", [] { return call(Func::sqrt, call(Func::sqrt, x())); }, "sqrt(sqrt(x))"},
        {"sqrt_sqrt_size", [] { return call(Func::sqrt, call(Func::sqrt, Cs())); }, "pow(C, 0.25)"},
        {"pow_of_exp", [] { return make_pow(call(Func::exp, x()), C(2)); }, "exp(2 * x)"},
        {"pow_const_base", [] { return make_pow(C(2), x()); }, "exp(0.6931471805599453 * x)"},
        {"pow_abs_even", [] { return make_pow(call(Func::abs, x()), C(2)); }, "pow(x, 2)"},
        {"rsqrt_is_pow", [] { return call(Func::rsqrt, x()); }, "rsqrt(x)"},
        {"sqrt_is_pow", [] { return make_pow(x(), C(0.5)); }, "sqrt(x)"},
        // ---- Funcs
        {"exp_zero", [] { return call(Func::exp, C(0)); }, "1"},
        {"log_one", [] { return call(Func::log, C(1)); }, "0"},
        {"log_neg_kept", [] { return call(Func::log, C(-1)); }, "log(-1)"},
        {"exp_log_kept", [] { return call(Func::exp, call(Func::log, x())); }, "exp(log(x))"},
        {"exp_log_size", [] { return call(Func::exp, call(Func::log, Cs())); }, "C"},
        {"log_exp", [] { return call(Func::log, call(Func::exp, x())); }, "x"},
        {"log_product_kept", [] { return call(Func::log, make_mul(x(), y())); }, "log(x * y)"},
        {"log_product_positive", [] { return call(Func::log, make_mul(Cs(), call(Func::exp, x()))); },
         "x + log(C)"},
        {"log_product_partial", [] { return call(Func::log, make_mul(Cs(), x())); }, "log(x) + log(C)"},
        {"log_coeff", [] { return call(Func::log, make_mul(C(2), call(Func::exp, x()))); }, "x + 0.6931471805599453"},
        {"log_neg_coeff_kept", [] { return call(Func::log, make_mul(C(-2), x())); }, "log(-2 * x)"},
        {"log_square", [] { return call(Func::log, make_pow(x(), C(2))); }, "2 * log(abs(x))"},
        {"log_pow_positive", [] { return call(Func::log, make_pow(Cs(), C(0.5))); }, "0.5 * log(C)"},
        {"log_pow_unknown_kept", [] { return call(Func::log, make_pow(x(), C(0.5))); }, "log(sqrt(x))"},
        {"exp2_to_exp", [] { return call(Func::exp2, x()); }, "exp(0.6931471805599453 * x)"},
        {"exp2_fold_exact", [] { return call(Func::exp2, C(3)); }, "8"},
        {"log2_to_log", [] { return call(Func::log2, x()); }, "1.4426950408889634 * log(x)"},
        {"abs_fold", [] { return call(Func::abs, C(-3)); }, "3"},
        {"abs_nonneg", [] { return call(Func::abs, call(Func::exp, x())); }, "exp(x)"},
        {"abs_nonpos", [] { return call(Func::abs, make_neg(call(Func::exp, x()))); }, "exp(x)"},
        {"abs_coeff", [] { return call(Func::abs, make_mul(C(-2), x())); }, "2 * abs(x)"},
        {"abs_abs", [] { return call(Func::abs, call(Func::abs, x())); }, "abs(x)"},
        {"abs_unknown_kept", [] { return call(Func::abs, make_sub(x(), y())); }, "abs(x - y)"},
        {"tanh_odd", [] { return call(Func::tanh, make_neg(x())); }, "-tanh(x)"},
        {"tanh_fold", [] { return call(Func::tanh, C(0)); }, "0"},
        {"sigmoid_fold", [] { return call(Func::sigmoid, C(0)); }, "0.5"},
        {"floor_of_int", [] { return call(Func::floor, i()); }, "i"},
        {"floor_real_kept", [] { return call(Func::floor, x()); }, "floor(x)"},
        // ---- Casts
        {"cast_fold_saturate", [] { return make_cast(DType::i8, C(300)); }, "127"},
        {"cast_fold_round", [] { return make_cast(DType::f8e4m3, C(1000)); }, "448"},
        {"cast_twice", [] { return make_cast(DType::f32, make_cast(DType::f32, x())); }, "f32(x)"},
        {"cast_f64_kept", [] { return make_cast(DType::f64, x()); }, "f64(x)"},
        {"cast_arg_simplified", [] { return make_cast(DType::bf16, make_add(x(), C(0))); }, "bf16(x)"},
        // ---- Min / Max / Select / Cmp / logic
        {"max_same", [] { return make_max(x(), x()); }, "x"},
        {"max_fold", [] { return make_max(C(2), C(3)); }, "3"},
        {"max_neg_inf", [] { return make_max(C(-INFINITY), x()); }, "x"},
        {"max_exp_zero", [] { return make_max(call(Func::exp, x()), C(0)); }, "exp(x)"},
        {"min_exp_zero", [] { return make_min(call(Func::exp, x()), C(0)); }, "0"},
        {"min_sorted", [] { return make_min(y(), x()); }, "min(x, y)"},
        {"max_unknown_kept", [] { return make_max(x(), C(0)); }, "max(0, x)"},
        {"select_true", [] { return make_select(make_bool(true), x(), y()); }, "x"},
        {"select_false", [] { return make_select(make_bool(false), x(), y()); }, "y"},
        {"select_same", [] { return make_select(cond(), x(), x()); }, "x"},
        {"select_not", [] { return make_select(make_not(flag()), x(), y()); }, "select(c, y, x)"},
        {"select_not_cmp", [] { return make_select(make_not(cond()), x(), y()); }, "select(y <= x, x, y)"},
        {"select_mask_kept", [] { return make_select(make_cmp(CmpOp::LE, j(), i()), x(), C(-INFINITY)); },
         "select(j <= i, x, -inf)"},
        {"select_cond_folded", [] { return make_select(make_cmp(CmpOp::LT, make_add(i(), I(1)), i()), x(), y()); },
         "y"},
        {"cmp_ge_to_le", [] { return make_cmp(CmpOp::GE, i(), j()); }, "j <= i"},
        {"cmp_gt_to_lt", [] { return make_cmp(CmpOp::GT, x(), y()); }, "y < x"},
        {"cmp_fold", [] { return make_cmp(CmpOp::LT, C(1), C(2)); }, "true"},
        {"cmp_same", [] { return make_cmp(CmpOp::LE, x(), x()); }, "true"},
        {"cmp_same_strict", [] { return make_cmp(CmpOp::LT, x(), x()); }, "false"},
        {"cmp_offset", [] { return make_cmp(CmpOp::GT, make_add(i(), I(1)), i()); }, "true"},
        {"cmp_index_nonneg", [] { return make_cmp(CmpOp::GE, i(), I(0)); }, "true"},
        {"cmp_size_ge_one", [] { return make_cmp(CmpOp::LT, Cs(), I(1)); }, "false"},
        {"cmp_eq_sorted", [] { return make_cmp(CmpOp::EQ, y(), x()); }, "x == y"},
        {"cmp_exp_positive", [] { return make_cmp(CmpOp::GT, call(Func::exp, x()), C(0)); }, "true"},
        // A value may be ±inf (a max or top-k of a masked row): comparisons at the infinite ends stay.
        {"cmp_neg_inf_ge_kept", [] { return make_cmp(CmpOp::GE, C(-INFINITY), x()); }, "x <= -inf"},
        {"cmp_below_inf_kept", [] { return make_cmp(CmpOp::LT, x(), C(INFINITY)); }, "x < inf"},
        {"cmp_neg_inf_le_true", [] { return make_cmp(CmpOp::LE, C(-INFINITY), x()); }, "true"},
        {"cmp_above_neg_inf_kept", [] { return make_cmp(CmpOp::GT, call(Func::exp, x()), C(-INFINITY)); }, "true"},
        {"not_cmp", [] { return make_not(cond()); }, "y <= x"},
        {"not_not", [] { return make_not(make_not(cond())); }, "x < y"},
        {"and_true", [] { return make_and(make_bool(true), cond()); }, "x < y"},
        {"and_false", [] { return make_and(cond(), make_bool(false)); }, "false"},
        {"and_same", [] { return make_and(cond(), cond()); }, "x < y"},
        {"or_false", [] { return make_or(make_bool(false), cond()); }, "x < y"},
        {"or_true", [] { return make_or(cond(), make_bool(true)); }, "true"},
        // ---- Int index arithmetic
        {"int_add_sub", [] { return make_sub(make_add(i(), I(1)), I(1)); }, "i"},
        {"int_cancel", [] { return make_sub(i(), i()); }, "0"},
        {"int_neg", [] { return make_neg(i()); }, "-i"},
        {"int_square_no_pow", [] { return make_mul(i(), i()); }, "i * i"},
        {"int_pow_repeated", [] { return make_pow(i(), C(2)); }, "i * i"},
        {"int_real_const_joins", [] { return make_add(i(), C(1.0)); }, "i + 1"},
        {"idiv_one", [] { return make_idiv(i(), I(1)); }, "i"},
        {"idiv_fold", [] { return make_idiv(I(7), I(2)); }, "3"},
        {"idiv_fold_floor", [] { return make_idiv(I(-7), I(2)); }, "-4"},
        {"idiv_by_zero_kept", [] { return make_idiv(I(7), I(0)); }, "7 / 0"},
        {"idiv_multiple", [] { return make_idiv(make_add(make_mul(I(2), i()), I(4)), I(2)); }, "i + 2"},
        {"idiv_split", [] { return make_idiv(make_add(make_mul(I(4), i()), I(3)), I(2)); }, "2 * i + 1"},
        {"idiv_split_var", [] { return make_idiv(make_add(make_mul(I(4), i()), j()), I(4)); }, "i + j / 4"},
        {"idiv_nested", [] { return make_idiv(make_idiv(i(), I(2)), I(3)); }, "i / 6"},
        {"idiv_gqa_kept", [] { return make_idiv(make_index("h"), make_size("G")); }, "h / G"},
        {"mod_one", [] { return make_mod(i(), I(1)); }, "0"},
        {"mod_fold", [] { return make_mod(I(-7), I(2)); }, "1"},
        {"mod_multiple_drops", [] { return make_mod(make_add(make_mul(I(4), i()), j()), I(2)); }, "j % 2"},
        {"mod_all_multiples", [] { return make_mod(make_mul(I(6), i()), I(3)); }, "0"},
        {"mod_mod", [] { return make_mod(make_mod(i(), I(4)), I(4)); }, "i % 4"},
        {"int_distribute", [] { return make_mul(I(2), make_add(i(), I(1))); }, "2 * i + 2"},
        // ---- Reduce
        {"reduce_body", [] {
             Expr X = make_load("X", {j()}, DType::f32, SType::Real);
             return make_reduce(ReduceOp::Sum, {j()}, {make_size("N")}, make_mul(X, C(1)));
         }, "sum(j: X[j])"},
    };
    return r;
}

class SimplifyTable : public ::testing::TestWithParam<size_t> {};

TEST_P(SimplifyTable, Row) {
    ArenaScope scope;
    const Row &row = rows()[GetParam()];
    Expr in = row.build();
    Expr out = simplify(in);
    EXPECT_EQ(to_string(out), row.expected) << row.name << ": input " << to_string(in);
    // Canonical forms are fixed points, also when re-derived without the memo.
    clear_simplify_cache();
    EXPECT_EQ(simplify(out), out) << row.name;
}

INSTANTIATE_TEST_SUITE_P(Rules, SimplifyTable, ::testing::Range<size_t>(0, rows().size()),
                         [](const ::testing::TestParamInfo<size_t> &info) { return std::string(rows()[info.param].name); });

}  // namespace
