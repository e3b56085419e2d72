/** \file inputs_test.cpp
 * Random inputs: determinism per seed, distributions, dtype rounding and integer label ranges.
 */
#include <gtest/gtest.h>

#include <cmath>

#include "Programs.h"
#include "interp/Inputs.h"

using namespace rf;
using namespace rf::test;

TEST(Inputs, DeterministicPerSeed) {
    ArenaScope scope;
    Program p = attention_program();
    SizeBinding s{{"B", 1}, {"Hq", 2}, {"Hkv", 2}, {"M", 3}, {"N", 5}, {"D", 4}};
    auto a = make_random_inputs(p, s, 42), b = make_random_inputs(p, s, 42), c = make_random_inputs(p, s, 43);
    for (const char *n : {"Q", "K", "V"}) {
        EXPECT_EQ(a.at(n).data, b.at(n).data) << n;
        EXPECT_NE(a.at(n).data, c.at(n).data) << n;
        EXPECT_EQ(a.at(n).shape, (std::vector<int64_t>{1, 2, n[0] == 'Q' ? 3 : 5, 4}));
        EXPECT_EQ(a.at(n).dtype, DType::f32);
    }
    EXPECT_NE(a.at("K").data, a.at("V").data);  // same shape, independent streams
}

TEST(Inputs, DistributionsHaveTheirRanges) {
    ArenaScope scope;
    Program p = softmax_program(DType::f64);
    SizeBinding s{{"R", 40}, {"C", 50}};
    auto u = make_random_inputs(p, s, 1, InputDistribution::Uniform).at("X");
    for (double v : u.data) EXPECT_TRUE(v >= -1 && v < 1);
    auto pos = make_random_inputs(p, s, 1, InputDistribution::Positive).at("X");
    for (double v : pos.data) EXPECT_TRUE(v >= 0.5 && v < 1.5);
    auto n = make_random_inputs(p, s, 1, InputDistribution::Normal).at("X");
    double mean = 0, sq = 0;
    for (double v : n.data) mean += v, sq += v * v;
    mean /= n.numel();
    sq /= n.numel();
    EXPECT_NEAR(mean, 0, 0.1);
    EXPECT_NEAR(sq - mean * mean, 1, 0.15);
    auto big = make_random_inputs(p, s, 1, InputDistribution::Normal, 100).at("X");
    for (size_t i = 0; i < big.data.size(); i++) EXPECT_DOUBLE_EQ(big.data[i], 100 * n.data[i]);
}

TEST(Inputs, ValuesAreRoundedToTheInputDtype) {
    ArenaScope scope;
    for (DType d : {DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2, DType::f32}) {
        Program p = softmax_program(d);
        SizeBinding s{{"R", 7}, {"C", 9}};
        auto x = make_random_inputs(p, s, 3, InputDistribution::Normal, 1000).at("X");
        EXPECT_EQ(x.dtype, d);
        bool any_nonzero = false;
        for (double v : x.data) {
            EXPECT_EQ(v, round_to_dtype(v, d)) << dtype_name(d);
            EXPECT_TRUE(std::isfinite(v));
            any_nonzero |= v != 0;
        }
        EXPECT_TRUE(any_nonzero);
    }
}

TEST(Inputs, NeverAllZero) {
    ArenaScope scope;
    Program p = softmax_program(DType::f8e4m3);
    SizeBinding s{{"R", 1}, {"C", 1}};
    // A scale this small rounds every fp8 draw to zero; the generator must still give a nonzero.
    for (uint64_t seed = 0; seed < 20; seed++) {
        auto x = make_random_inputs(p, s, seed, InputDistribution::Normal, 1e-6).at("X");
        EXPECT_NE(x.data[0], 0.0);
    }
}

namespace {
Program labels_program(bool compared) {
    Program p;
    add_sizes(p, {"T", "V"});
    Expr t = idx("t"), v = idx("v");
    add_input(p, "X", {sz("T"), sz("V")}, DType::bf16);
    add_input(p, "y", {sz("T")}, DType::i32);
    Expr y = make_load("y", {t}, DType::i32, SType::Int);
    Expr x = ld("X", {t, v}, DType::bf16);
    Expr body = compared ? make_select(make_cmp(CmpOp::EQ, v, y), x, make_const(0)) : make_mul(x, y);
    add_def(p, "z", {t}, {sz("T")}, red(ReduceOp::Sum, v, sz("V"), body));
    return p;
}
}  // namespace

TEST(Inputs, IntegerLabelsAreDrawnFromTheComparedIndexRange) {
    ArenaScope scope;
    Program p = labels_program(true);
    SizeBinding s{{"T", 200}, {"V", 7}};
    EXPECT_EQ(int_input_range(p, s, "y"), (std::pair<int64_t, int64_t>{0, 6}));
    auto y = make_random_inputs(p, s, 1).at("y");
    std::vector<int> seen(7, 0);
    for (double v : y.data) {
        ASSERT_EQ(v, std::floor(v));
        ASSERT_GE(v, 0);
        ASSERT_LT(v, 7);
        seen[static_cast<size_t>(v)]++;
    }
    for (int n : seen) EXPECT_GT(n, 0);  // every label occurs among 200 draws
}

TEST(Inputs, UncomparedIntegerInputsUseTheFallbackRange) {
    ArenaScope scope;
    Program p = labels_program(false);
    SizeBinding s{{"T", 300}, {"V", 7}};
    EXPECT_EQ(int_input_range(p, s, "y"), (std::pair<int64_t, int64_t>{-8, 8}));
    auto y = make_random_inputs(p, s, 1).at("y");
    double lo = 0, hi = 0;
    for (double v : y.data) lo = std::min(lo, v), hi = std::max(hi, v);
    EXPECT_EQ(lo, -8);
    EXPECT_EQ(hi, 8);
}

TEST(Inputs, RngIsPortable) {
    // mt19937_64's sequence is fixed by the standard, and so is everything derived from it here.
    Rng a(5489);
    EXPECT_EQ(a.next(), 14514284786278117030ull);
    Rng b(1);
    for (int i = 0; i < 1000; i++) {
        int64_t v = b.integer(-3, 3);
        ASSERT_TRUE(v >= -3 && v <= 3);
        double u = b.uniform();
        ASSERT_TRUE(u >= 0 && u < 1);
    }
}
