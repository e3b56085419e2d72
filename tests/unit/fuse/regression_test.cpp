/** \file regression_test.cpp
 * Inputs the analysis fuzzer (fuzz/fuzz_analyze.cpp) found, kept so they stay fixed.
 */
#include "FuseTestUtil.h"

using namespace rf;

TEST(FuzzRegression, ZeroExtentInnerAxisIsAUserErrorNotACrash) {
    // A nested reduction over an axis of extent 0 reading an earlier member crashed the unrolling.
    ArenaScope arena;
    const char *src = R"(
size S = 3, N = 29
input w[S, N] : f32
input P[S, N, 0] : f32
W[s]   = sum(n: w[s,n])
c[s,a] = sum(n: w[s,n] * P[s,n,a]) / W[s]
I[s]   = sum(n: w[s,n] * sum(a: (P[s,n,a] - c[s,a]) * (P[s,n,a] - c[s,a])))
output I
)";
    EXPECT_THROW(test::compile(src), UserError);
}

TEST(FuzzRegression, AMemberReadOutsideItsRowRunsInALaterPass) {
    // l reads m[b,h,j] — m of other rows, along l's own axis — so it cannot share m's pass.
    ArenaScope arena;
    auto c = test::compile(R"(
size B = 2, H = 3, N = 11, D = 5
input Q[B, H, N, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
S[b,h,i,j] = select(j <= i, sum(d: Q[b,h,i,d] * K[b,h,j,d]), -inf)
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,j]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O : bf16
)");
    const ChainPlan *ch = test::chain_of(*c, "l");
    ASSERT_TRUE(ch);
    EXPECT_EQ(ch->strategy, Strategy::MultiPass);
    EXPECT_EQ(ch->pass_of[1], 1);
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(test::plan_vs_reference(*c, sizes, seed), 1e-12);
}

TEST(FuzzRegression, ANonFiniteFinalDIsRecomputedLiterally) {
    // m = prod over a masked row is ±inf or 0·inf: H = exp(-m) cannot finalize l from its state.
    ArenaScope arena;
    auto c = test::compile(R"(
size B = 9, H = 3, N = 11, D = 5
input Q[B, H, N, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
S[b,h,i,j] = select(j <= i, sum(d: Q[b,h,i,d] * K[b,h,j,d]) / sqrt(D), -inf)
m[b,h,i]   = prod(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) + V[b,h,j,e]) / l[b,h,i]
output O : bf16
)");
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(test::plan_vs_reference(*c, sizes, seed), 1e-12);
}

TEST(FuzzRegression, PhiReadsInputsAtTheRow) {
    // φ of an additive top-k reads a nested max over another axis at the row: the row must be bound
    // when φ is applied (also when φ has no literal form).
    ArenaScope arena;
    auto c = test::compile(R"(
size T = 3, E = 12, K = 4
input X[T, E] : bf16
input b[E]
n[t] = sum(e: X[t, e] * X[t, e])
W[t:T, r], I[t:T, r] = topk(e, K: X[t, e] + sqrt(n[t]) + b[e] - max(c: X[t, c]))
V[t, q], J[t, q] = topk(e, 1: -X[t, e])
g[t, r] = W[t, r] * select(I[t, r] < 3, 1, 0) + argmin(e: X[t, e])
output W, I, g, J : i64
)");
    EXPECT_EQ(test::verdict(*c, "W")->relation, Relation::Additive);
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(test::plan_vs_reference(*c, sizes, seed), 1e-12);
}

TEST(FuzzRegression, UpdateTermsKeepTheSpecsZeroOverZero) {
    // slope * (j / -i) at i = j = 0 is 0/0 = 0 in the spec; the canonical j * slope * i^-1 is 0 * inf.
    // The update evaluates the body as written, so the plan keeps the spec's convention.
    ArenaScope arena;
    auto c = test::compile(R"(
size B = 2, H = 3, N = 11, D = 5
input Q[B, H, N, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
input slope[H] : f32
S[b,h,i,j] = select(j <= i, sum(d: Q[b,h,i,d] * K[b,h,j,d]) / sqrt(D) + slope[h] * (j / -i), -inf)
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,0,j,e]) / l[b,h,i]
output O : bf16
)");
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(test::plan_vs_reference(*c, sizes, seed), 1e-12);
}

TEST(FuzzRegression, ReductionsWithAnotherBetweenThemDoNotShareAChain) {
    // l reads Q along the same axis as QKᵀ (so they look input-connected), but l also reads m, which
    // needs QKᵀ: grouping l with QKᵀ would make the two chains wait on each other.
    ArenaScope arena;
    auto c = test::compile(R"(
size B = 1, H = 3, N = 11, D = 5
input Q[B, H, N, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
S[b,h,i,j] = select(j <= i, sum(d: Q[b,h,i,d] * K[b,h,j,d]) / sqrt(D), -inf)
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(Q[b,h,i,j] / -m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O : bf16
)");
    EXPECT_EQ(test::chain_of(*c, "S.sum"), nullptr);  // still the prologue of m's chain
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(test::plan_vs_reference(*c, sizes, seed), 1e-12);
}

TEST(FuzzRegression, NoChainHoldsTwoMembersWithAnotherChainBetweenThem) {
    // fuzz_analyze (a seed from scripts/fuzz_specs.py): m and TV read X alike, so do m and ct; the
    // pairwise rule kept TV and ct apart (TV -> tm -> ct, tm over k), but the union through m put
    // them in one chain, which then needed tm before and after itself: an internal error ("the
    // plan's chains depend on each other in a cycle") in the plan interpreter and the tile lowering.
    ArenaScope arena;
    auto c = test::compile(R"(
size R = 3, C = 64
input X[R, C] : f32
m[r] = max(c: X[r,c])
TV[r,k], TI[r,k] = topk(c, 4: X[r,c])
tm[r] = sum(k: TV[r,k])
ct[r] = sum(c: select(X[r,c] > tm[r], X[r,c], 0))
output ct, m
)");
    const ChainPlan *with_topk = test::chain_of(*c, "TV"), *with_ct = test::chain_of(*c, "ct"), *with_tm = test::chain_of(*c, "tm");
    ASSERT_TRUE(with_topk && with_ct && with_tm);
    EXPECT_NE(with_topk, with_ct);
    EXPECT_NE(with_tm, with_ct);
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed : {1, 2, 3}) EXPECT_LE(test::plan_vs_reference(*c, sizes, seed), 1e-12);
}
