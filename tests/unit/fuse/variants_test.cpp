/** \file variants_test.cpp
 * The same algebra written other ways than the examples: exp2 with a per-row temperature input,
 * exp(x) / exp(m), two sums in one definition, a bias inside the exponent, top-k of a sigmoid scaled
 * by a sum, a decreasing min, and a degree-4 moment. Verdicts and plan-vs-reference for each.
 */
#include "FuseTestUtil.h"

using namespace rf;
using namespace rf::test;

namespace {
struct Case {
    const char *name;
    const char *spec;
    std::vector<std::pair<std::string, Relation>> want;
};
}  // namespace

TEST(Variants, VerdictsAndPlansMatchTheReference) {
    const Case cases[] = {
        {"v1", R"(
size R = 4, C = 19
input X[R, C] : f32
input t[R] : f32
m[r] = max(c: X[r,c])
s[r] = sum(c: exp2((X[r,c] - m[r]) / t[r]))
l[r] = sum(c: exp(X[r,c]) / exp(m[r]))
lse[r] = m[r] + log(l[r])
output s, lse
)", {{"s", Relation::Multiplicative}, {"l", Relation::Multiplicative}}},
        {"v2", R"(
size B = 1, H = 2, M = 5, N = 13, D = 8
input Q[B, H, M, D] : f32
input K[B, H, N, D] : f32
input V[B, H, N, D] : f32
S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d])
m[b,h,i]   = max(j: S[b,h,i,j])
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / sum(j: exp(S[b,h,i,j] - m[b,h,i]))
output O
)", {{"m", Relation::Independent}, {"O.sum", Relation::Multiplicative}, {"O.sum2", Relation::Multiplicative}}},
        {"v3", R"(
size T = 4, E = 16
input X[T, E] : f32
input bias[E] : f32
m[t] = max(e: X[t,e] + bias[e])
s[t] = sum(e: exp(X[t,e] + bias[e] - m[t]))
p[t] = sum(e: exp(X[t,e] + bias[e] - m[t]) / s[t] * X[t,e])
W[t,r], I[t,r] = topk(e, 2: sigmoid(X[t,e]) * s[t])
mn[t] = min(e: -X[t,e] * s[t])
output p, W, I, mn
)", {{"s", Relation::Multiplicative}, {"p", Relation::Multiplicative}, {"W", Relation::Monotone}, {"mn", Relation::Monotone}}},
        {"v4", R"(
size R = 3, C = 17
input X[R, C] : f32
input g[C] : f32
mu[r] = sum(c: X[r,c]) / C
var[r] = sum(c: pow(X[r,c] - mu[r], 2)) / C
k4[r] = sum(c: pow(X[r,c] - mu[r], 4)) / C
Y[r,c] = (X[r,c] - mu[r]) * rsqrt(var[r] + 1e-5) * g[c]
output Y, k4
)", {{"var.sum", Relation::Polynomial}, {"k4.sum", Relation::Polynomial}}},
    };
    for (const Case &c : cases) {
        ArenaScope arena;
        auto comp = compile(c.spec);
        for (const auto &[member, rel] : c.want) {
            const MemberAnalysis *v = verdict(*comp, member);
            ASSERT_TRUE(v) << c.name << ": " << member;
            EXPECT_EQ(v->relation, rel) << c.name << ": " << member << " is " << relation_name(v->relation) << " "
                                        << v->reason;
        }
        SizeBinding sizes = bind_sizes(comp->program, {});
        for (uint64_t seed : {1, 2, 3}) EXPECT_LE(plan_vs_reference(*comp, sizes, seed), 1e-12) << c.name;
    }
}
