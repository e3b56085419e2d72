/** \file reference_test.cpp
 * The float64 reference interpreter against hand-written loops and the masked-row, tie and cast
 * conventions of ir/Eval.h.
 */
#include <gtest/gtest.h>

#include <cmath>

#include "Programs.h"
#include "interp/Inputs.h"
#include "interp/Reference.h"
#include "support/Error.h"

using namespace rf;
using namespace rf::test;

namespace {

Tensor from_values(std::vector<int64_t> shape, std::vector<double> v, DType d = DType::f32) {
    Tensor t(std::move(shape), d);
    EXPECT_EQ(t.data.size(), v.size());
    t.data = std::move(v);
    return t;
}

/** Single-input, single-output reduction program `Y[r] = op(c: body(X[r,c]))`. */
Program row_program(ReduceOp op, Expr (*body)(Expr), DType in = DType::f32) {
    Program p;
    add_sizes(p, {"R", "C"});
    Expr r = idx("r"), c = idx("c");
    add_input(p, "X", {sz("R"), sz("C")}, in);
    Expr x = ld("X", {r, c}, in);
    add_def(p, "Y", {r}, {sz("R")}, red(op, c, sz("C"), body ? body(x) : x),
            op == ReduceOp::ArgMax || op == ReduceOp::ArgMin ? SType::Int : SType::Real);
    add_output(p, "Y", DType::f32);
    return p;
}

}  // namespace

TEST(Reference, SoftmaxRowsSumToOne) {
    ArenaScope scope;
    Program p = softmax_program();
    SizeBinding s{{"R", 5}, {"C", 37}};
    auto in = make_random_inputs(p, s, 1, InputDistribution::Normal, 10.0);
    auto res = run_reference(p, s, in);
    ASSERT_TRUE(res.count("m") && res.count("s") && res.count("Y") && res.count("X"));
    const Tensor &Y = res.at("Y");
    ASSERT_EQ(Y.shape, (std::vector<int64_t>{5, 37}));
    for (int64_t r = 0; r < 5; r++) {
        double sum = 0, mx = -INFINITY;
        for (int64_t c = 0; c < 37; c++) {
            sum += Y.at({r, c});
            mx = std::max(mx, in.at("X").at({r, c}));
            EXPECT_GT(Y.at({r, c}), 0);
        }
        EXPECT_NEAR(sum, 1.0, 1e-14);
        EXPECT_EQ(res.at("m").at({r}), mx);
    }
}

TEST(Reference, LargeMagnitudeSoftmaxDoesNotOverflow) {
    ArenaScope scope;
    Program p = softmax_program();
    SizeBinding s{{"R", 3}, {"C", 11}};
    auto res = run_reference(p, s, make_random_inputs(p, s, 2, InputDistribution::Normal, 1000.0));
    for (double v : res.at("Y").data) EXPECT_TRUE(std::isfinite(v));
}

TEST(Reference, AttentionMatchesHandWrittenLoop) {
    ArenaScope scope;
    Program p = attention_program();
    SizeBinding s{{"B", 2}, {"Hq", 3}, {"Hkv", 3}, {"M", 5}, {"N", 7}, {"D", 3}};
    auto in = make_random_inputs(p, s, 7);
    auto res = run_reference(p, s, in);
    const Tensor &Q = in.at("Q"), &K = in.at("K"), &V = in.at("V"), &O = res.at("O");
    double max_err = 0;
    for (int64_t b = 0; b < 2; b++)
        for (int64_t h = 0; h < 3; h++)
            for (int64_t i = 0; i < 5; i++) {
                std::vector<double> sc(7);
                double m = -INFINITY;
                for (int64_t j = 0; j < 7; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < 3; d++) acc += Q.at({b, h, i, d}) * K.at({b, h, j, d});
                    sc[j] = acc / std::sqrt(3.0);
                    m = std::max(m, sc[j]);
                }
                double l = 0;
                for (double v : sc) l += std::exp(v - m);
                for (int64_t e = 0; e < 3; e++) {
                    double o = 0;
                    for (int64_t j = 0; j < 7; j++) o += std::exp(sc[j] - m) * V.at({b, h, j, e});
                    max_err = std::max(max_err, std::fabs(o / l - O.at({b, h, i, e})));
                }
                EXPECT_NEAR(res.at("lse").at({b, h, i}), m + std::log(l), 1e-12);
            }
    EXPECT_LT(max_err, 1e-13);
}

TEST(Reference, GqaReadsKvHeadHOverG) {
    ArenaScope scope;
    Program p = attention_program();
    SizeBinding s{{"B", 1}, {"Hq", 6}, {"Hkv", 2}, {"M", 1}, {"N", 5}, {"D", 2}};
    auto in = make_random_inputs(p, s, 11);
    auto res = run_reference(p, s, in);
    // Query head h must attend with K/V head h / (Hq / Hkv) = h / 3.
    const Tensor &Q = in.at("Q"), &K = in.at("K"), &V = in.at("V"), &O = res.at("O");
    for (int64_t h = 0; h < 6; h++) {
        int64_t kh = h / 3;
        std::vector<double> sc(5);
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j < 5; j++) {
            sc[j] = (Q.at({0, h, 0, 0}) * K.at({0, kh, j, 0}) + Q.at({0, h, 0, 1}) * K.at({0, kh, j, 1})) / std::sqrt(2.0);
            m = std::max(m, sc[j]);
        }
        for (double v : sc) l += std::exp(v - m);
        for (int64_t e = 0; e < 2; e++) {
            double o = 0;
            for (int64_t j = 0; j < 5; j++) o += std::exp(sc[j] - m) * V.at({0, kh, j, e});
            EXPECT_NEAR(O.at({0, h, 0, e}), o / l, 1e-13) << "head " << h;
        }
    }
}

TEST(Reference, FullyMaskedRowGivesZeroAndMinusInfLse) {
    ArenaScope scope;
    // Strictly causal (j < i): query row 0 sees no key at all.
    Program p = attention_program([](Expr i, Expr j) { return make_cmp(CmpOp::LT, j, i); });
    SizeBinding s{{"B", 1}, {"Hq", 2}, {"Hkv", 2}, {"M", 4}, {"N", 4}, {"D", 3}};
    auto res = run_reference(p, s, make_random_inputs(p, s, 3));
    const Tensor &O = res.at("O"), &lse = res.at("lse");
    for (double v : O.data) EXPECT_FALSE(std::isnan(v));
    for (int64_t h = 0; h < 2; h++) {
        EXPECT_EQ(res.at("m").at({0, h, 0}), -INFINITY);
        EXPECT_EQ(res.at("l").at({0, h, 0}), 0.0);
        for (int64_t e = 0; e < 3; e++) EXPECT_EQ(O.at({0, h, 0, e}), 0.0);
        EXPECT_EQ(lse.at({0, h, 0}), -INFINITY);
        EXPECT_TRUE(std::isfinite(lse.at({0, h, 1})));
        EXPECT_NE(O.at({0, h, 1, 0}), 0.0);
    }
}

TEST(Reference, ArgmaxAndArgminTiesGoToLowestIndex) {
    ArenaScope scope;
    SizeBinding s{{"R", 2}, {"C", 5}};
    Tensor X = from_values({2, 5}, {1, 3, 3, 0, 3, -2, 0, -2, -2, 5});
    auto amax = run_reference(row_program(ReduceOp::ArgMax, nullptr), s, {{"X", X}});
    EXPECT_EQ(amax.at("Y").data, (std::vector<double>{1, 9 - 5}));
    auto amin = run_reference(row_program(ReduceOp::ArgMin, nullptr), s, {{"X", X}});
    EXPECT_EQ(amin.at("Y").data, (std::vector<double>{3, 0}));
}

TEST(Reference, TopKDescendingWithTiesByLowerIndex) {
    ArenaScope scope;
    Program p = moe_program(4);
    SizeBinding s{{"T", 2}, {"E", 6}};
    Tensor X = from_values({2, 6}, {0.5, 2, -1, 2, 0.5, 2,  //
                                    -3, -3, -3, -3, -3, -3});
    auto res = run_reference(p, s, {{"X", X}});
    EXPECT_EQ(res.at("I").data, (std::vector<double>{1, 3, 5, 0, 0, 1, 2, 3}));
    const Tensor &W = res.at("W");
    ASSERT_EQ(W.shape, (std::vector<int64_t>{2, 4}));
    double s0 = 0;
    for (int64_t e = 0; e < 6; e++) s0 += std::exp(X.at({0, e}) - 2);
    EXPECT_NEAR(W.at({0, 0}), 1 / s0, 1e-15);
    EXPECT_EQ(W.at({0, 0}), W.at({0, 2}));
    EXPECT_NEAR(W.at({0, 3}), std::exp(-1.5) / s0, 1e-15);
    for (int64_t r = 0; r < 4; r++) EXPECT_NEAR(W.at({1, r}), 1.0 / 6, 1e-15);
}

TEST(Reference, TopKRanksNaNFirst) {
    ArenaScope scope;
    Program p;
    add_sizes(p, {"T", "E"});
    Expr t = idx("t"), e = idx("e"), r = idx("r");
    add_input(p, "X", {sz("T"), sz("E")}, DType::f32);
    TensorDef d;
    d.name = "W";
    d.index_name = "I";
    d.vars = {t, r};
    d.extents = {sz("T"), make_int(3)};
    d.body = red(ReduceOp::TopK, e, sz("E"), ld("X", {t, e}, DType::f32), 3);
    p.defs.push_back(d);
    Tensor X = from_values({1, 5}, {1, NAN, INFINITY, NAN, 2});
    auto res = run_reference(p, {{"T", 1}, {"E", 5}}, {{"X", X}});
    EXPECT_EQ(res.at("I").data, (std::vector<double>{1, 3, 2}));
    EXPECT_TRUE(std::isnan(res.at("W").data[0]));
    EXPECT_EQ(res.at("W").data[2], INFINITY);
}

TEST(Reference, TopKLargerThanAxisIsUserError) {
    ArenaScope scope;
    Program p = moe_program(8);
    SizeBinding s{{"T", 2}, {"E", 5}};
    EXPECT_THROW(run_reference(p, s, make_random_inputs(p, s, 1)), UserError);
}

TEST(Reference, CastsInsideBodiesSaturateAndRound) {
    ArenaScope scope;
    SizeBinding s{{"R", 1}, {"C", 4}};
    Tensor X = from_values({1, 4}, {1000, -1000, 0.3, 2.5});
    // sum(c: f32(f8e4m3(X * 2))) and sum(c: i8(round(X * 0.5)))
    auto fp8 = [](Expr x) { return make_cast(DType::f32, make_cast(DType::f8e4m3, make_mul(x, make_const(2)))); };
    auto res = run_reference(row_program(ReduceOp::Sum, fp8), s, {{"X", X}});
    EXPECT_EQ(res.at("Y").data[0], 448 - 448 + round_to_dtype(0.6, DType::f8e4m3) + 5);
    auto i8 = [](Expr x) { return make_cast(DType::i8, make_call(Func::round, make_mul(x, make_const(0.5)))); };
    res = run_reference(row_program(ReduceOp::Sum, i8), s, {{"X", X}});
    EXPECT_EQ(res.at("Y").data[0], 127 - 128 + 0 + 1);  // round(1.25) = 1, saturation at both ends
}

TEST(Reference, InputsAreRoundedToTheirDtype) {
    ArenaScope scope;
    Program p = row_program(ReduceOp::Sum, nullptr, DType::bf16);
    Tensor X = from_values({1, 2}, {1.0 + 1.0 / 512, 3.14159});
    auto res = run_reference(p, {{"R", 1}, {"C", 2}}, {{"X", X}});
    EXPECT_EQ(res.at("X").data[0], 1.0);
    EXPECT_EQ(res.at("X").data[1], round_to_dtype(3.14159, DType::bf16));
    EXPECT_EQ(res.at("Y").data[0], 1.0 + round_to_dtype(3.14159, DType::bf16));
}

TEST(Reference, BadInputsAreUserErrors) {
    ArenaScope scope;
    Program p = softmax_program();
    SizeBinding s{{"R", 2}, {"C", 3}};
    EXPECT_THROW(run_reference(p, s, {}), UserError);
    EXPECT_THROW(run_reference(p, s, {{"X", Tensor({3, 2})}}), UserError);
    EXPECT_THROW(run_reference(p, s, {{"X", Tensor({6})}}), UserError);
    Tensor broken({2, 3});
    broken.data.resize(2);
    EXPECT_THROW(run_reference(p, s, {{"X", broken}}), UserError);
    EXPECT_THROW(run_reference(p, {{"R", 2}}, {{"X", Tensor({2, 3})}}), UserError);  // C unbound
    EXPECT_THROW(run_reference(p, {{"R", 0}, {"C", 3}}, {{"X", Tensor({0, 3})}}), UserError);
}

TEST(Reference, OutOfBoundsLoadIsUserError) {
    ArenaScope scope;
    Program p;
    add_sizes(p, {"R", "C"});
    Expr r = idx("r"), c = idx("c");
    add_input(p, "X", {sz("R"), sz("C")}, DType::f32);
    add_def(p, "Y", {r}, {sz("R")}, red(ReduceOp::Sum, c, sz("C"), ld("X", {r, make_add(c, make_int(1))}, DType::f32)));
    SizeBinding s{{"R", 2}, {"C", 3}};
    EXPECT_THROW(run_reference(p, s, make_random_inputs(p, s, 1)), UserError);
}

TEST(Reference, LabelComparisonPicksTheLabelledLogit) {
    ArenaScope scope;
    // z[t] = sum(v: select(v == y[t], X[t,v], 0)) with integer labels y.
    Program p;
    add_sizes(p, {"T", "V"});
    Expr t = idx("t"), v = idx("v");
    add_input(p, "X", {sz("T"), sz("V")}, DType::f32);
    add_input(p, "y", {sz("T")}, DType::i32);
    Expr y = make_load("y", {t}, DType::i32, SType::Int);
    add_def(p, "z", {t}, {sz("T")},
            red(ReduceOp::Sum, v, sz("V"), make_select(make_cmp(CmpOp::EQ, v, y), ld("X", {t, v}, DType::f32), make_const(0))));
    add_output(p, "z", DType::f32);
    SizeBinding s{{"T", 9}, {"V", 13}};
    auto in = make_random_inputs(p, s, 5);
    auto res = run_reference(p, s, in);
    for (int64_t i = 0; i < 9; i++) {
        int64_t label = static_cast<int64_t>(in.at("y").at({i}));
        ASSERT_GE(label, 0);
        ASSERT_LT(label, 13);
        EXPECT_EQ(res.at("z").at({i}), in.at("X").at({i, label}));
    }
}

TEST(Reference, ReferenceOutputsAreRoundedToDeclaredDtypes) {
    ArenaScope scope;
    Program p = moe_program(2);
    SizeBinding s{{"T", 3}, {"E", 7}};
    auto res = run_reference(p, s, make_random_inputs(p, s, 9));
    auto outs = reference_outputs(p, res);
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs.at("W").dtype, DType::f32);
    EXPECT_EQ(outs.at("I").dtype, DType::i32);
    for (double w : outs.at("W").data) EXPECT_EQ(w, round_to_dtype(w, DType::f32));
}

TEST(Reference, RoundOutputRoundsEveryElement) {
    Tensor t = from_values({3}, {1.0 + 1e-9, 1e6, -INFINITY}, DType::f64);
    Tensor r = round_output(t, DType::f16);
    EXPECT_EQ(r.dtype, DType::f16);
    EXPECT_EQ(r.data, (std::vector<double>{1.0, 65504.0, -INFINITY}));
}
