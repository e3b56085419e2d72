/** \file split_rates_test.cpp
 * The rate split (fuse/SplitRates.cpp, docs/design.md §3): a sum whose additive terms carry
 * exponentials of earlier results at several constant rates becomes one sum per rate, each fused
 * by the exponential-polynomial form in the same pass; what it cannot separate (a non-constant
 * rate) stays whole and refused with the reason of the form tried; a single-rate sum is left alone.
 * The numbers are checked against the reference run on the program as checked (before the split),
 * in float64 at small sizes and in float32 at long rows and large magnitudes (plan interpreter and
 * CPU kernels).
 */
#include <iostream>
#include <random>

#include "../ExampleSizes.h"
#include "FuseTestUtil.h"
#include "driver/Report.h"
#include "driver/Run.h"
#include "fuse/SplitRates.h"

using namespace rf;
using namespace rf::test;

namespace {

const char *kTwoRates = R"(
size R = 4, C = 37
input X[R, C] : f32
m[r] = max(c: X[r,c])
t[r] = sum(c: exp(X[r,c] - m[r]) + (X[r,c] - m[r]) * exp(2 * (X[r,c] - m[r])))
output t : f32
)";

const char *kTwoMaxes = R"(
size R = 4, C = 37
input X[R, C] : f32
input Y[R, C] : f32
m[r] = max(c: X[r,c])
n[r] = max(c: Y[r,c])
t[r] = sum(c: exp(X[r,c] - m[r]) * Y[r,c] + exp(Y[r,c] - n[r]) * X[r,c])
output t : f32
)";

std::string example(const std::string &name) {
    return read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (name + ".rf"));
}

/** The spec with one member body replaced (`t[r] = BODY`). */
std::string with_member(const std::string &body) {
    return "size R = 4, C = 23\ninput X[R, C] : f32\ninput Y[R, C] : f32\nm[r] = max(c: X[r,c])\n"
           "n[r] = max(c: Y[r,c])\nq[r] = sum(c: Y[r,c])\nt[r] = " + body + "\noutput t : f32\n";
}

const TensorDef *def_named(const Program &p, const std::string &name) { return p.find_def(name); }

void expect_split_fused_in_one_pass(const Compilation &c, const std::string &name, size_t parts) {
    ASSERT_EQ(c.rate_splits.size(), 1u);
    const RateSplit &s = c.rate_splits[0];
    EXPECT_EQ(s.name, name);
    ASSERT_EQ(s.parts.size(), parts);
    for (size_t k = 0; k < parts; k++) {
        EXPECT_EQ(s.parts[k], name + ".rate" + std::to_string(k));
        const MemberAnalysis *v = verdict(c, s.parts[k]);
        ASSERT_TRUE(v) << s.parts[k];
        EXPECT_NE(v->relation, Relation::None) << s.parts[k] << ": " << v->reason;
        EXPECT_GE(v->checked_points, 100) << s.parts[k];
    }
    const ChainPlan *ch = chain_of(c, s.parts[0]);
    ASSERT_TRUE(ch);
    EXPECT_TRUE(ch->fused);
    EXPECT_EQ(ch->passes.size(), 1u);
    for (const std::string &part : s.parts) EXPECT_EQ(chain_of(c, part), ch) << part;
    // The output stays, as the element-wise sum of its parts; the checked program keeps the sum.
    const TensorDef *out = def_named(c.program, name);
    ASSERT_TRUE(out);
    EXPECT_FALSE(out->is_reduction());
    std::string sum;
    for (size_t k = 0; k < parts; k++) sum += (k ? " + " : "") + name + ".rate" + std::to_string(k) + "[r]";
    EXPECT_EQ(to_string(out->body), sum);
    ASSERT_TRUE(def_named(c.checked, name));
    EXPECT_TRUE(def_named(c.checked, name)->is_reduction());
    std::string text = analysis_text(c);
    EXPECT_NE(text.find("split by exponential rate: " + to_string(s)), std::string::npos) << text;
}

}  // namespace

TEST(SplitRates, TwoRatesOfOneMaxFuseInOnePass) {
    ArenaScope arena;
    auto c = compile(kTwoRates);
    expect_split_fused_in_one_pass(*c, "t", 2);
    EXPECT_EQ(c->rate_splits[0].rates, (std::vector<std::string>{"-1 on m[r]", "-2 on m[r]"}));
    EXPECT_EQ(verdict(*c, "t.rate0")->relation, Relation::Multiplicative);
    EXPECT_EQ(verdict(*c, "t.rate1")->relation, Relation::ExpPolynomial);
    EXPECT_LE(plan_vs_reference(*c, bind_sizes(c->program, {}), 5), 1e-11);
}

TEST(SplitRates, ExponentialsOfTwoMaxesFuseInOnePass) {
    ArenaScope arena;
    auto c = compile(kTwoMaxes);
    expect_split_fused_in_one_pass(*c, "t", 2);
    EXPECT_EQ(c->rate_splits[0].rates, (std::vector<std::string>{"-1 on m[r]", "-1 on n[r]"}));
    EXPECT_LE(plan_vs_reference(*c, bind_sizes(c->program, {}), 6), 1e-11);
}

TEST(SplitRates, SymmetricKlFusesWithBothSoftmaxesInOnePass) {
    ArenaScope arena;
    auto c = compile(example("symmetric_kl"));
    expect_split_fused_in_one_pass(*c, "J", 2);
    const ChainPlan *ch = chain_of(*c, "J.rate0");
    EXPECT_EQ(ch->members, (std::vector<std::string>{"mx", "sx", "my", "sy", "J.rate0", "J.rate1"}));
    EXPECT_EQ(verdict(*c, "J.rate0")->relation, Relation::ExpPolynomial);
    EXPECT_EQ(verdict(*c, "J.rate1")->relation, Relation::ExpPolynomial);
    EXPECT_LE(plan_vs_reference(*c, bind_sizes(c->program, {}), 7), 1e-11);
}

TEST(SplitRates, ANonConstantRateLeavesTheSumWholeAndRefused) {
    ArenaScope arena;
    auto c = compile(with_member("sum(c: exp(X[r,c] - m[r]) + exp(X[r,c] * m[r]))"));
    EXPECT_TRUE(c->rate_splits.empty());
    EXPECT_EQ(c->program.defs.size(), c->checked.defs.size());
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->relation, Relation::None);
    EXPECT_NE(t->reason.find("exponential-polynomial form: the exponent of"), std::string::npos) << t->reason;
    EXPECT_FALSE(t->counterexample.empty());
}

TEST(SplitRates, RatesMixedInsideOneTermAreNotSeparated) {
    ArenaScope arena;
    auto c = compile(with_member("sum(c: sqrt(exp(X[r,c] - m[r]) + exp(2 * X[r,c] - 2 * m[r])))"));
    EXPECT_TRUE(c->rate_splits.empty());
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->relation, Relation::None);
    EXPECT_NE(t->reason.find("different rates"), std::string::npos) << t->reason;
}

TEST(SplitRates, SingleRateSumsAreLeftAlone) {
    for (const char *body : {"sum(c: (X[r,c] - m[r]) * exp(X[r,c] - m[r]))", "sum(c: exp(X[r,c] - m[r]) * Y[r,c])",
                             "sum(c: X[r,c] * Y[r,c] - q[r])", "sum(c: exp(X[r,c] - m[r]) + exp(X[r,c] - m[r] + 1))"}) {
        ArenaScope arena;
        auto c = compile(with_member(body));
        EXPECT_TRUE(c->rate_splits.empty()) << body;
        EXPECT_EQ(to_string(c->program), to_string(c->checked)) << body;
    }
    for (const char *ex : {"softmax_entropy", "softmax_weighted_variance", "attention", "layernorm"}) {
        ArenaScope arena;
        auto c = compile(example(ex));
        EXPECT_TRUE(c->rate_splits.empty()) << ex;
    }
}

TEST(SplitRates, MaskedTermsKeepTheirMaskInEachPart) {
    // Row 0 is fully masked (m = -inf); the select is distributed over the terms, each keeping it.
    ArenaScope arena;
    auto c = compile(R"(
size R = 5, C = 37
input X[R, C] : f32
m[r] = max(c: select(c < r * 8, X[r,c], -inf))
t[r] = sum(c: select(c < r * 8, exp(X[r,c] - m[r]) + (X[r,c] - m[r]) * exp(2 * (X[r,c] - m[r])), 0))
output t : f32
)");
    expect_split_fused_in_one_pass(*c, "t", 2);
    for (const char *part : {"t.rate0", "t.rate1"}) {
        std::string body = to_string(def_named(c->program, part)->body);
        EXPECT_NE(body.find("select(c < r * 8"), std::string::npos) << part << ": " << body;
    }
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(plan_vs_reference(*c, sizes, seed), 1e-11) << seed;
}

TEST(SplitRates, LoadsOfASplitSumReadTheSumOfItsParts) {
    // t is not an output: it disappears, and H and u read t.rate0 + t.rate1.
    ArenaScope arena;
    auto c = compile(R"(
size R = 4, C = 29
input X[R, C] : f32
m[r] = max(c: X[r,c])
t[r] = sum(c: exp(X[r,c] - m[r]) + exp(2 * X[r,c] - 2 * m[r]))
u[r] = sum(c: X[r,c] * t[r])
H[r] = log(t[r]) + u[r]
output H : f32
)");
    ASSERT_EQ(c->rate_splits.size(), 1u);
    EXPECT_FALSE(def_named(c->program, "t"));
    EXPECT_NE(to_string(def_named(c->program, "u")->body).find("t.rate0[r] + t.rate1[r]"), std::string::npos);
    EXPECT_NE(to_string(def_named(c->program, "H")->body).find("log(t.rate0[r] + t.rate1[r])"), std::string::npos)
        << to_string(def_named(c->program, "H")->body);
    EXPECT_LE(plan_vs_reference(*c, bind_sizes(c->program, {}), 4), 1e-11);
}

TEST(SplitRates, RandomBodiesOfSeveralRatesFuseAndEqualTheReference) {
    const char *terms[] = {"exp(X[r,c] - m[r]) * Y[r,c]", "exp(2 * (X[r,c] - m[r])) * (X[r,c] - m[r])",
                           "exp(Y[r,c] - n[r]) * (Y[r,c] - q[r] / C)", "X[r,c] * Y[r,c]",
                           "exp(0.5 * X[r,c] - 0.5 * m[r]) * (X[r,c] - m[r]) * (X[r,c] - m[r])",
                           "(exp(X[r,c] - m[r]) - exp(Y[r,c] - n[r])) * (X[r,c] - Y[r,c])"};
    std::mt19937_64 rng(15);
    int split = 0;
    for (int trial = 0; trial < 12; trial++) {
        std::string body = terms[rng() % std::size(terms)];
        body += " + " + std::string(terms[rng() % std::size(terms)]);
        ArenaScope arena;
        auto c = compile(with_member("sum(c: " + body + ")"));
        for (const std::string &part : c->rate_splits.empty() ? std::vector<std::string>{"t"} : c->rate_splits[0].parts) {
            const MemberAnalysis *v = verdict(*c, part);
            ASSERT_TRUE(v) << part;
            EXPECT_NE(v->relation, Relation::None) << body << ": " << part << ": " << v->reason;
        }
        split += !c->rate_splits.empty();
        EXPECT_LE(plan_vs_reference(*c, bind_sizes(c->program, {}), rng()), 1e-11) << body;
    }
    EXPECT_GE(split, 6);
}

TEST(SplitRates, Float32AtLongRowsAndLargeMagnitudesOnThePlanInterpreterAndCpu) {
    for (const std::string &src : {std::string(kTwoRates), std::string(kTwoMaxes), example("symmetric_kl")}) {
        ArenaScope arena;
        auto c = compile(src);
        ASSERT_EQ(c->rate_splits.size(), 1u);
        SizeBinding sizes = bind_sizes(c->program, {{"R", 3}, {"C", 32768}});
        for (double scale : {1.0, 50.0}) {
            // The plan interpreter in float32 (random tiles, segments and merge trees).
            auto inputs = make_random_inputs(c->program, sizes, 21, InputDistribution::Normal, scale);
            auto ref = run_reference(c->checked, sizes, inputs);
            PlanOptions po;
            po.sizes = &sizes;
            Plan plan = make_plan(c->program, po);
            plan.program = &c->program;
            PlanInterpOptions pio;
            pio.f32 = true;
            pio.seed = 3;
            auto got = run_plan(plan, sizes, inputs, pio);
            for (const OutputDecl &o : c->program.outputs) {
                double e = rel_diff(got.at(o.name), ref.at(o.name));
                std::cout << "  " << c->rate_splits[0].name << " C=32768 scale " << scale << " interp f32: " << e << "\n";
                EXPECT_LE(e, 1e-4) << o.name << " scale " << scale;
            }
            // The CPU kernels, checked against the reference of the checked program.
            RunOptions ro;
            ro.target = TargetKind::Cpu;
            ro.check = true;
            ro.sizes = {{"R", 3}, {"C", 32768}};
            ro.scale = scale;
            RunReport r = run_compiled(*c, ro);
            EXPECT_TRUE(r.ok) << "scale " << scale << "\n" << r.text;
        }
    }
}
