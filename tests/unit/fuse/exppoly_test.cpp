/** \file exppoly_test.cpp
 * The exponential-polynomial form: the softmax entropy and the softmax-weighted moments fuse with a
 * certified state, update and merge; random bodies e^{λ·d}·polynomial(d) fuse and equal the
 * reference; what still does not fuse keeps a reason naming the forms tried and a counterexample; and
 * in float32 at long rows and large magnitudes the fused plan is as accurate as the two-pass plan.
 */
#include <iostream>
#include <random>

#include "FuseTestUtil.h"

using namespace rf;
using namespace rf::test;

namespace {

const char *kEntropy = R"(
size R = 4, C = 37
input X[R, C] : f32
m[r] = max(c: X[r,c])
s[r] = sum(c: exp(X[r,c] - m[r]))
t[r] = sum(c: (X[r,c] - m[r]) * exp(X[r,c] - m[r]))
H[r] = log(s[r]) - t[r] / s[r]
output H : f32
)";

const char *kWeightedVariance = R"(
size R = 4, C = 37
input X[R, C] : f32
input V[R, C] : f32
m[r]   = max(c: X[r,c])
s[r]   = sum(c: exp(X[r,c] - m[r]))
mu[r]  = sum(c: exp(X[r,c] - m[r]) * V[r,c]) / s[r]
var[r] = sum(c: exp(X[r,c] - m[r]) * (V[r,c] - mu[r]) * (V[r,c] - mu[r])) / s[r]
output mu, var : f32
)";

/** The same spec with the dependent member made piecewise in m (max(·, -1e30) never changes a value
 *  here): it no longer fuses, so the planner runs it in a second pass over the final m. */
std::string two_pass(std::string src, const std::string &from, const std::string &to) {
    size_t p = src.find(from);
    EXPECT_NE(p, std::string::npos);
    return src.replace(p, from.size(), to);
}

std::map<std::string, Tensor> run_f32(const Compilation &c, const SizeBinding &sizes,
                                      const std::map<std::string, Tensor> &inputs, uint64_t seed) {
    PlanOptions po;
    po.sizes = &sizes;
    Plan plan = make_plan(c.program, po);
    plan.program = &c.program;
    PlanInterpOptions o;
    o.f32 = true;
    o.seed = seed;
    return run_plan(plan, sizes, inputs, o);
}

}  // namespace

TEST(ExpPolynomial, EntropyFusesWithTheSoftmaxSumAsCompanion) {
    ArenaScope arena;
    auto c = compile(kEntropy);
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->relation, Relation::ExpPolynomial) << t->reason;
    EXPECT_GE(t->checked_points, 100);
    EXPECT_EQ(t->degree, 1);
    ASSERT_EQ(t->basis.size(), 2u);  // T_0 = Σ (X - m) e^{X - m}, T_1 = -Σ e^{X - m}
    EXPECT_TRUE(chain_of(*c, "t")->fused);
    MemberText text = describe_member(*t);
    ASSERT_EQ(text.matrix.size(), 2u);
    EXPECT_EQ(text.matrix[0], "S_0 ← exp(m_old[r] - m[r]) · (S_0 + (m[r] - m_old[r])·S_1)");
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(plan_vs_reference(*c, sizes, seed), 1e-12);
}

TEST(ExpPolynomial, SoftmaxWeightedMomentsFuseOverAMaxAndAMean) {
    ArenaScope arena;
    auto c = compile(kWeightedVariance);
    const MemberAnalysis *v = verdict(*c, "var.sum");
    ASSERT_TRUE(v);
    EXPECT_EQ(v->relation, Relation::ExpPolynomial) << v->reason;
    EXPECT_GE(v->checked_points, 100);
    EXPECT_EQ(v->degree, 2);
    EXPECT_EQ(v->deps.size(), 3u);  // m, s and mu.sum
    EXPECT_TRUE(chain_of(*c, "var.sum")->fused);
    for (auto sizes_of : {std::map<std::string, int64_t>{}, std::map<std::string, int64_t>{{"R", 1}, {"C", 1}},
                          std::map<std::string, int64_t>{{"R", 3}, {"C", 101}}}) {
        SizeBinding sizes = bind_sizes(c->program, sizes_of);
        for (uint64_t seed : {4, 5, 6}) EXPECT_LE(plan_vs_reference(*c, sizes, seed), 1e-12);
    }
}

TEST(ExpPolynomial, RandomExponentialPolynomialsInDFuse) {
    const char *exps[] = {"exp(X[r,c] - m[r])", "exp(2 * (X[r,c] - m[r]))", "exp(0.5 * X[r,c] - 0.5 * m[r] + 1)"};
    const char *polys[] = {"(X[r,c] - m[r])", "(Y[r,c] - q[r] / C) * (Y[r,c] - q[r] / C)",
                           "(X[r,c] - m[r]) * (Y[r,c] + q[r] / C)", "(pow(X[r,c] - m[r], 3) + m[r] * Y[r,c])"};
    std::mt19937_64 rng(9);
    for (int trial = 0; trial < 12; trial++) {
        std::string body = std::string(exps[rng() % std::size(exps)]) + " * " + polys[rng() % std::size(polys)];
        ArenaScope arena;
        auto c = compile("size R = 4, C = 23\ninput X[R, C] : f32\ninput Y[R, C] : f32\nm[r] = max(c: X[r,c])\n"
                         "q[r] = sum(c: Y[r,c])\nt[r] = sum(c: " + body + ")\noutput t\n");
        const MemberAnalysis *t = verdict(*c, "t");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->relation, Relation::ExpPolynomial) << body << ": " << t->reason;
        EXPECT_GE(t->checked_points, 100) << body;
        SizeBinding sizes = bind_sizes(c->program, {});
        EXPECT_LE(plan_vs_reference(*c, sizes, rng()), 1e-11) << body;
    }
}

TEST(ExpPolynomial, WhatStillDoesNotFuseSaysWhichFormsWereTried) {
    struct Case {
        const char *member, *reason_part;
    };
    const Case cases[] = {
        {"sum(c: max(X[r,c], m[r]))", "exponential-polynomial form: F has no exponential"},
        {"sum(c: exp(X[r,c] * m[r]))", "exponential-polynomial form: the exponent of"},
        {"prod(c: X[r,c] - m[r] + 1)", "apply to sums only"},
        // Two rates inside one term: the rate split (split_rates_test.cpp) cannot separate them.
        {"sum(c: sqrt(exp(X[r,c] - m[r]) + exp(2 * X[r,c] - 2 * m[r])))", "different rates"},
        {"sum(c: log(1 + exp(X[r,c] - m[r])))", "different exponential rates"},
    };
    for (const Case &k : cases) {
        ArenaScope arena;
        auto c = compile(std::string("size R = 4, C = 23\ninput X[R, C] : f32\nm[r] = max(c: X[r,c])\nt[r] = ") +
                         k.member + "\noutput t\n");
        const MemberAnalysis *t = verdict(*c, "t");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->relation, Relation::None) << k.member;
        EXPECT_NE(t->reason.find(k.reason_part), std::string::npos) << k.member << ": " << t->reason;
        EXPECT_NE(t->reason.find("multiplicative form: "), std::string::npos) << t->reason;
        EXPECT_FALSE(t->counterexample.empty()) << k.member;
    }
}

TEST(ExpPolynomial, Float32AtLongRowsAndLargeMagnitudesMatchesTheTwoPassPlan) {
    struct Spec {
        const char *src, *from, *to;
        std::vector<std::string> outputs;
    };
    const Spec specs[] = {
        {kEntropy, "t[r] = sum(c: (X[r,c] - m[r])", "t[r] = sum(c: max(X[r,c] - m[r], -1e30)", {"H"}},
        {kWeightedVariance, "var[r] = sum(c: exp(X[r,c] - m[r]) * (V[r,c] - mu[r])",
         "var[r] = sum(c: exp(max(X[r,c] - m[r], -1e30)) * (V[r,c] - mu[r])", {"mu", "var"}},
    };
    for (const Spec &sp : specs) {
        ArenaScope arena;
        auto fused = compile(sp.src);
        auto split = compile(two_pass(sp.src, sp.from, sp.to));
        EXPECT_TRUE(chain_of(*fused, sp.outputs.size() == 1 ? "t" : "var.sum")->fused);
        EXPECT_FALSE(chain_of(*split, sp.outputs.size() == 1 ? "t" : "var.sum")->fused);
        SizeBinding sizes = bind_sizes(fused->program, {{"R", 3}, {"C", 32768}});
        for (double scale : {1.0, 50.0}) {
            auto inputs = make_random_inputs(fused->program, sizes, 21, InputDistribution::Normal, scale);
            auto ref = run_reference(fused->program, sizes, inputs);
            auto a = run_f32(*fused, sizes, inputs, 3), b = run_f32(*split, sizes, inputs, 3);
            for (const std::string &o : sp.outputs) {
                double ef = rel_diff(a.at(o), ref.at(o)), et = rel_diff(b.at(o), ref.at(o));
                std::cout << "  " << o << " C=32768 scale " << scale << ": fused " << ef << ", two-pass " << et << "\n";
                EXPECT_LE(ef, 1e-4) << o << " scale " << scale;
                EXPECT_LE(ef, 10 * et + 2e-6) << o << " scale " << scale;
            }
        }
    }
}

TEST(ExpPolynomial, MaskedEntropyWithAFullyMaskedRowFuses) {
    // Row 0 is fully masked (m = -inf, s = t = 0): the plan recomputes it literally; the mask is
    // independent of d, so each branch of the select is scaled on its own and stays in range.
    ArenaScope arena;
    auto c = compile(R"(
size R = 5, C = 37
input X[R, C] : f32
m[r] = max(c: select(c < r * 8, X[r,c], -inf))
s[r] = sum(c: select(c < r * 8, exp(X[r,c] - m[r]), 0))
t[r] = sum(c: select(c < r * 8, (X[r,c] - m[r]) * exp(X[r,c] - m[r]), 0))
H[r] = log(s[r]) - t[r] / s[r]
output H : f32
)");
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->relation, Relation::ExpPolynomial) << t->reason;
    for (const Expr &B : t->basis) EXPECT_EQ(B->kind, Kind::Select) << to_string(B);
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2}) {
        EXPECT_LE(plan_vs_reference(*c, sizes, seed), 1e-12);
        EXPECT_LE(plan_vs_reference(*c, sizes, seed, /*f32=*/true), 1e-5);
    }
}
