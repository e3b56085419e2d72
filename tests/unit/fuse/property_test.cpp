/** \file property_test.cpp
 * Property tests of the algebra: random bodies built as G(x)·H(d), G(x)+H(d), φ_d(G(x)) and
 * polynomials in d must be found fusible in that form, with parts that reproduce F (the analysis
 * re-checks them numerically) and a plan that equals the reference; random mixed bodies must be
 * rejected with a counterexample.
 */
#include <random>

#include "FuseTestUtil.h"

using namespace rf;
using namespace rf::test;

namespace {

// x-only pieces (over the axis c) and d-only pieces (over the earlier results m = max, q = sum).
const char *kG[] = {"X[r,c]", "exp(X[r,c])", "X[r,c] * X[r,c] + 1", "abs(X[r,c])", "tanh(X[r,c]) * Y[r,c]",
                    "Y[r,c] * X[r,c] - 2", "sigmoid(Y[r,c])", "select(c <= r, X[r,c], 0)"};
const char *kHpos[] = {"exp(-m[r])", "m[r] * m[r] + 1", "1 / (abs(m[r]) + 1)", "sqrt(abs(q[r]) + 2)",
                       "exp(2 * m[r] - q[r])", "(q[r] * q[r] + 3) * exp(-m[r])"};
const char *kD[] = {"m[r]", "q[r] / C", "m[r] * 2 + q[r]"};

std::string spec(const std::string &member) {
    return "size R = 4, C = 23\n"
           "input X[R, C] : f32\n"
           "input Y[R, C] : f32\n"
           "m[r] = max(c: X[r,c])\n"
           "q[r] = sum(c: Y[r,c])\n"
           "t[r] = " + member + "\n"
           "output t\n";
}

void expect_relation(const std::string &member, Relation want, std::mt19937_64 &rng) {
    ArenaScope arena;
    auto c = compile(spec(member));
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t) << member;
    EXPECT_EQ(t->relation, want) << member << "\n  got " << relation_name(t->relation) << ": " << t->reason;
    if (want != Relation::None) {
        EXPECT_GE(t->checked_points, 100) << member;
        SizeBinding sizes = bind_sizes(c->program, {});
        double err = plan_vs_reference(*c, sizes, rng());
        EXPECT_LE(err, 1e-11) << member;
    } else {
        EXPECT_FALSE(t->reason.empty()) << member;
    }
}

}  // namespace

TEST(Property, ProductsGTimesHAreMultiplicative) {
    std::mt19937_64 rng(1);
    for (int trial = 0; trial < 24; trial++) {
        std::string g = kG[rng() % std::size(kG)], h = kHpos[rng() % std::size(kHpos)];
        expect_relation("sum(c: (" + g + ") * (" + h + "))", Relation::Multiplicative, rng);
    }
}

TEST(Property, SumsGPlusHUnderMaxAreAdditive) {
    std::mt19937_64 rng(2);
    for (int trial = 0; trial < 12; trial++) {
        std::string g = kG[rng() % std::size(kG)], d = kD[rng() % std::size(kD)];
        const char *op = (trial % 2) ? "max" : "min";
        expect_relation(std::string(op) + "(c: " + g + " + " + d + ")", Relation::Additive, rng);
    }
}

TEST(Property, StrictlyMonotoneMapsOfGAreMonotone) {
    std::mt19937_64 rng(3);
    const char *phis[] = {"exp(G - m[r]) / (abs(q[r]) + 1)", "G * exp(m[r])", "-(G) * (m[r] * m[r] + 1)",
                          "tanh(G) + q[r]", "exp(2 * (G)) * exp(-q[r])"};
    const char *ops[] = {"max", "min", "argmax", "argmin"};
    for (int trial = 0; trial < 16; trial++) {
        std::string g = kG[rng() % 3];  // X-only cores that take every sign
        std::string phi = phis[rng() % std::size(phis)];
        phi.replace(phi.find("G"), 1, "(" + g + ")");
        std::string op = ops[rng() % std::size(ops)];
        ArenaScope arena;
        auto c = compile(spec(op + "(c: " + phi + ")"));
        const MemberAnalysis *t = verdict(*c, "t");
        ASSERT_TRUE(t);
        EXPECT_TRUE(t->relation == Relation::Monotone || t->relation == Relation::Additive)
            << op << "(c: " << phi << "): " << t->reason;
        SizeBinding sizes = bind_sizes(c->program, {});
        EXPECT_LE(plan_vs_reference(*c, sizes, rng()), 1e-11) << phi;
    }
}

TEST(Property, PolynomialsInDAreShiftForms) {
    std::mt19937_64 rng(4);
    for (int trial = 0; trial < 16; trial++) {
        std::string g = kG[rng() % std::size(kG)], d = kD[rng() % std::size(kD)];
        std::string bodies[] = {"(" + g + " - " + d + ") * (" + g + " - " + d + ")",
                                "(" + g + " - " + d + ") * (" + g + " - " + d + ") * (" + g + " - " + d + ")",
                                "Y[r,c] * (X[r,c] - " + d + ") + " + d + " * " + d,
                                "pow(" + g + " + " + d + ", 4)"};
        expect_relation("sum(c: " + bodies[rng() % std::size(bodies)] + ")", Relation::Polynomial, rng);
    }
}

TEST(Property, RandomMixedBodiesAreRejected) {
    // Mixers that tie x and d together in ways no form separates.
    std::mt19937_64 rng(6);
    const char *sum_mixers[] = {"exp((A) * (B))", "max(A, B)", "log((A) * (A) + (B) * (B) + 1)", "tanh(A + B)",
                                "sigmoid((A) * (B))", "1 / ((A) * (A) + (B) * (B) + 1)"};
    const char *sel_mixers[] = {"(A) * (B)", "exp(A) * (B)", "max(A, B) + (A) * (B)"};
    for (int trial = 0; trial < 20; trial++) {
        std::string g = kG[rng() % 3], d = kD[rng() % std::size(kD)];
        bool sum = trial % 2 == 0;
        std::string mixer = sum ? sum_mixers[rng() % std::size(sum_mixers)] : sel_mixers[rng() % std::size(sel_mixers)];
        for (size_t p; (p = mixer.find('A')) != std::string::npos;) mixer.replace(p, 1, g);
        for (size_t p; (p = mixer.find('B')) != std::string::npos;) mixer.replace(p, 1, d);
        std::string body = std::string(sum ? "sum" : "max") + "(c: " + mixer + ")";
        ArenaScope arena;
        auto c = compile(spec(body));
        const MemberAnalysis *t = verdict(*c, "t");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->relation, Relation::None) << body;
        EXPECT_FALSE(t->reason.empty()) << body;
        SizeBinding sizes = bind_sizes(c->program, {});
        EXPECT_LE(plan_vs_reference(*c, sizes, rng()), 1e-12) << body;
    }
}

TEST(Property, MixedBodiesAreRejectedWithACounterexample) {
    std::mt19937_64 rng(5);
    const char *mixed[] = {"sum(c: exp(X[r,c] * m[r]))", "sum(c: max(X[r,c], m[r]))", "sum(c: log(X[r,c] * X[r,c] + m[r] * m[r] + 1))",
                           "max(c: X[r,c] * m[r])", "argmax(c: X[r,c] * q[r])", "sum(c: sin_free_tanh(X[r,c] + m[r]))"};
    for (const char *body : mixed) {
        std::string b = body;
        if (b.find("sin_free_tanh") != std::string::npos) b.replace(b.find("sin_free_tanh"), 13, "tanh");
        ArenaScope arena;
        auto c = compile(spec(b));
        const MemberAnalysis *t = verdict(*c, "t");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->relation, Relation::None) << b;
        EXPECT_FALSE(t->reason.empty()) << b;
        EXPECT_FALSE(t->counterexample.empty()) << b << ": " << t->reason;
        // The unfused fallback still computes the right thing.
        SizeBinding sizes = bind_sizes(c->program, {});
        EXPECT_LE(plan_vs_reference(*c, sizes, rng()), 1e-12) << b;
    }
}
