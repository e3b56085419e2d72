/** \file magnitude_test.cpp
 * The magnitude reference (interp/Magnitude.h) and the check it scales: M equals |value| where no sum
 * cancels, Σ|terms| where one does, and the check built on it accepts the few-ulp error a cancelling
 * float sum really has while still rejecting a wrong result.
 */
#include <gtest/gtest.h>

#include <cmath>

#include "interp/Compare.h"
#include "interp/Inputs.h"
#include "interp/Magnitude.h"
#include "interp/Reference.h"
#include "spec/Frontend.h"

using namespace rf;

namespace {

struct Results {
    std::map<std::string, Tensor> ref, mag;
};

Results run_both(const Program &p, const SizeBinding &s, const std::map<std::string, Tensor> &in) {
    Results r;
    r.ref = run_reference(p, s, in);
    r.mag = run_magnitude(p, s, r.ref);
    return r;
}

Tensor values(std::vector<int64_t> shape, std::vector<double> v) {
    Tensor t(std::move(shape), DType::f32);
    t.data = std::move(v);
    return t;
}

/** The check of `run --check` for one f32 output computed in f32 with reductions of length n. */
CompareResult check(const Tensor &out, const Tensor &ref, const Tensor &mag, int64_t n) {
    return compare(out, round_output(ref, DType::f32), tolerance(DType::f32, true, n), false, &mag,
                   compute_tolerance(true, n));
}

}  // namespace

TEST(Magnitude, WithoutCancellationItIsTheValue) {
    // softmax subtracts the exact row max from exact inputs and sums positive terms; the norm sums
    // squares: no sum cancels, so M = |value| exactly and the tolerance is the normwise one.
    ArenaScope scope;
    Program p = parse_program("size R = 4, C = 29\ninput X[R, C] : f32\n"
                              "m[r] = max(c: X[r,c])\ns[r] = sum(c: exp(X[r,c] - m[r]))\n"
                              "Y[r,c] = exp(X[r,c] - m[r]) / s[r]\nn[r] = sum(c: X[r,c] * X[r,c])\n"
                              "output Y, n\n",
                              "nocancel.rf");
    SizeBinding s = bind_sizes(p, {});
    for (uint64_t seed : {1, 2, 3}) {
        Results r = run_both(p, s, make_random_inputs(p, s, seed));
        for (const char *name : {"m", "s", "Y", "n"})
            for (size_t i = 0; i < r.ref.at(name).data.size(); i++)
                EXPECT_EQ(r.mag.at(name).data[i], std::fabs(r.ref.at(name).data[i])) << name << "[" << i << "]";
    }
}

TEST(Magnitude, CancellingSumScalesBySumOfAbsoluteTerms) {
    ArenaScope scope;
    Program p = parse_program("size R = 1, C = 3\ninput X[R, C] : f32\ninput W[C] : f32\n"
                              "t[r] = sum(c: X[r,c] * W[c])\nd[r] = sum(c: X[r,c] - W[c])\noutput t, d\n",
                              "cancel.rf");
    SizeBinding s = bind_sizes(p, {});
    Results r = run_both(p, s, {{"X", values({1, 3}, {1, 1, 1})}, {"W", values({3}, {1, -1, 0.0009765625})}});
    EXPECT_EQ(r.ref.at("t").data[0], 0.0009765625);
    EXPECT_EQ(r.mag.at("t").data[0], 2.0009765625);  // products carry rounding: every term counts
    // X - W of exact operands rounds once (relative to itself): the sum's terms 0, 2, 0.999... add up
    // without cancellation.
    EXPECT_EQ(r.mag.at("d").data[0], std::fabs(r.ref.at("d").data[0]));
}

TEST(Magnitude, ExactTermsCountFromThreeOn) {
    // Two exact terms are added with one rounding (no excess); with three, the partial sums an
    // implementation rounds are bounded only by Σ|terms|.
    ArenaScope scope;
    Program p = parse_program("size R = 1, C = 3\ninput X[R, C] : f32\n"
                              "a[r] = X[r,0] + X[r,1]\nb[r] = sum(c: X[r,c])\noutput a, b\n",
                              "exact.rf");
    SizeBinding s = bind_sizes(p, {});
    Results r = run_both(p, s, {{"X", values({1, 3}, {1, -0.75, -0.125})}});
    EXPECT_EQ(r.mag.at("a").data[0], 0.25);
    EXPECT_EQ(r.mag.at("b").data[0], 1.875);
}

TEST(Magnitude, ExcessPropagatesThroughFunctionsAndQuotients) {
    ArenaScope scope;
    Program p = parse_program("size R = 1, C = 2\ninput X[R, C] : f32\ninput W[C] : f32\n"
                              "q[r] = sum(c: X[r,c] * W[c])\ne[r] = exp(q[r])\nz[r] = 1 / q[r]\noutput e, z\n",
                              "prop.rf");
    SizeBinding s = bind_sizes(p, {});
    Results r = run_both(p, s, {{"X", values({1, 2}, {1, 1})}, {"W", values({2}, {0.75, -0.5})}});
    const double q = 0.25, xq = 1.25 - 0.25;  // M(q) = 0.75 + 0.5
    EXPECT_DOUBLE_EQ(r.mag.at("e").data[0], std::exp(q) + std::exp(q) * xq);  // |f'| x
    EXPECT_DOUBLE_EQ(r.mag.at("z").data[0], 1 / q + xq / (q * q));            // |a| x(b) / b²
}

TEST(Magnitude, LogNearOneIsHeldToAnAbsoluteBound) {
    // scripts/fuzz_specs.py seed 1238 #9: lse = m + log(Σ exp(x - m)) over x = {0, -28, -40}: the sum is
    // 1 + 6.9e-13, which float rounds to 1, and its log to 0 — against 6.9e-13, every digit of which is
    // the rounding of the sum. log turns the sum's relative rounding into an absolute error, so M(log s)
    // = |log s| + M(s)/|s| and the check holds lse to the tolerance absolutely; a result off by 1e-3 is
    // still rejected.
    ArenaScope scope;
    Program p = parse_program("size R = 1, C = 3\ninput X[R, C] : f32\n"
                              "m[r] = max(c: X[r,c])\ns[r] = sum(c: exp(X[r,c] - m[r]))\nlse[r] = m[r] + log(s[r])\n"
                              "output lse\n",
                              "lse_near_zero.rf");
    SizeBinding s = bind_sizes(p, {});
    Results r = run_both(p, s, {{"X", values({1, 3}, {0, -28, -40})}});
    const double lse = r.ref.at("lse").data[0];
    ASSERT_GT(lse, 6e-13);
    ASSERT_LT(lse, 8e-13);
    EXPECT_GE(r.mag.at("lse").data[0], 1.0);  // |log s| + M(s)/|s|, s = 1 + 6.9e-13
    // As run --check compares (driver/Run.cpp): with float32's unit roundoff, since B = |lse| lies far
    // below one rounding of M.
    auto run_check = [&](double out) {
        return compare(values({1}, {out}), round_output(r.ref.at("lse"), DType::f32), tolerance(DType::f32, true, 3), false,
                       &r.mag.at("lse"), compute_tolerance(true, 3), 0x1p-24);
    };
    EXPECT_TRUE(run_check(0.0).ok) << "float's log(1) = 0";
    EXPECT_FALSE(run_check(1e-3).ok);
    EXPECT_FALSE(run_check(-1e-3).ok);
}

TEST(Magnitude, FuzzerCancellationIsAcceptedAndWrongResultsAreStillRejected) {
    // scripts/fuzz_specs.py seed 4 spec 8: t = Σ_c tanh(X - mu) W at C = 2, where the two terms
    // cancel. The CPU's float tanh is a few ulps off; relative to |t| that is far beyond the
    // tolerance, relative to Σ|terms| (what float arithmetic can promise) it is not.
    ArenaScope scope;
    Program p = parse_program("size R = 1, C = 2\ninput X[R, C] : f32\ninput W[C] : f32\n"
                              "mu[r] = sum(c: X[r,c]) / C\nt[r] = sum(c: tanh(X[r,c] - mu[r]) * W[c])\n"
                              "output t\n",
                              "fuzz4_8.rf");
    SizeBinding s = bind_sizes(p, {});
    Results r = run_both(p, s, {{"X", values({1, 2}, {0.375, -0.25})}, {"W", values({2}, {0.5, 0.4921875})}});
    const double t = r.ref.at("t").data[0], terms = std::fabs(std::tanh(0.3125)) * (0.5 + 0.4921875);
    EXPECT_NEAR(r.mag.at("t").data[0], terms, 1e-15);
    ASSERT_GT(terms / std::fabs(t), 100);  // the cancellation

    const double ulp = std::ldexp(1.0, -24);  // unit roundoff of f32
    Tensor few_ulps = values({1}, {t + 8 * ulp * terms});
    EXPECT_FALSE(compare(few_ulps, round_output(r.ref.at("t"), DType::f32), tolerance(DType::f32, true, 2)).ok)
        << "without the magnitude, the normwise tolerance rejects an accurate float result";
    EXPECT_TRUE(check(few_ulps, r.ref.at("t"), r.mag.at("t"), 2).ok);

    // Wrong results: a dropped term, a sign error, a result 1% off.
    const double term1 = std::tanh(0.375 - 0.0625) * 0.5;
    for (double wrong : {term1, -t, t * 1.01})
        EXPECT_FALSE(check(values({1}, {wrong}), r.ref.at("t"), r.mag.at("t"), 2).ok) << wrong;
}

TEST(Magnitude, ASumCancellingTo1e4OfItsTermsIsHeldToTheCap) {
    // The audit's case (issue 15): z = Σ X·W whose terms cancel to 1e-4 of Σ|terms|. Before the cap
    // the widened tolerance accepted z·1.1; now at most kMaxCancellationWidening of |z| beyond the
    // normwise tolerance is accepted, and the result says the cap was reached.
    ArenaScope scope;
    Program p = parse_program("size R = 1, C = 2\ninput X[R, C] : f32\ninput W[C] : f32\n"
                              "z[r] = sum(c: X[r,c] * W[c])\noutput z\n",
                              "cancel1e4.rf");
    SizeBinding s = bind_sizes(p, {});
    const double w1 = 0.4999, w2 = -0.5;  // 1·w1 + 1·w2 = -1e-4, Σ|terms| = 0.9999
    Results r = run_both(p, s, {{"X", values({1, 2}, {1, 1})}, {"W", values({2}, {w1, w2})}});
    const double z = r.ref.at("z").data[0];
    ASSERT_GT(r.mag.at("z").data[0] / std::fabs(z), 5e3);
    const int64_t n = 625;  // the compute tolerance of a long f32 reduction: 1e-4
    for (double wrong : {z * 1.1, z * 1.01, z * 1.002, -z}) {
        CompareResult c = check(values({1}, {wrong}), r.ref.at("z"), r.mag.at("z"), n);
        EXPECT_FALSE(c.ok) << wrong / z;
        EXPECT_TRUE(c.widening_capped);
    }
    EXPECT_TRUE(check(values({1}, {z * (1 + 5e-4)}), r.ref.at("z"), r.mag.at("z"), n).ok);
}
