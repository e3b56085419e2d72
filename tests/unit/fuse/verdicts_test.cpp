/** \file verdicts_test.cpp
 * The verdicts the foundation issue requires, on the workloads' own specs: which members fuse, in
 * which form, with which parts, and which do not (with a reason and a counterexample).
 */
#include "FuseTestUtil.h"

using namespace rf;
using namespace rf::test;

namespace {

const char *kSoftmax = R"(
size R = 3, C = 37
input X[R, C] : f32
m[r]   = max(c: X[r,c])
s[r]   = sum(c: exp(X[r,c] - m[r]))
Y[r,c] = exp(X[r,c] - m[r]) / s[r]
output Y : f32
)";

const char *kAttention = R"(
size B = 1, H = 2, M = 5, N = 13, D = 8
input Q[B, H, M, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
scale = 1 / sqrt(D)
S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d]) * scale
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O : bf16
)";

const char *kMoe = R"(
size T = 4, E = 19
input X[T, E] : f32
m[t]          = max(e: X[t,e])
s[t]          = sum(e: exp(X[t,e] - m[t]))
W[t,r], I[t,r] = topk(e, 4: exp(X[t,e] - m[t]) / s[t])
output W, I
)";

const char *kQuant = R"(
size M = 3, N = 5, K = 23
input A[M, K]  : bf16
input Wq[N, K] : f8e4m3
input sw[N]    : f32
a[m]   = max(k: abs(A[m,k]))
C[m,n] = sum(k: f32(f8e4m3(A[m,k] * 448 / a[m])) * f32(Wq[n,k])) * a[m] / 448 * sw[n]
output C : bf16
)";

const char *kVariance = R"(
size R = 3, C = 29
input X[R, C] : f32
mu[r]  = sum(c: X[r,c]) / C
var[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C
output mu, var
)";

const char *kInertia = R"(
size S = 2, N = 17
input w[S, N] : f32
input P[S, N, 3] : f32
W[s]   = sum(n: w[s,n])
c[s,a] = sum(n: w[s,n] * P[s,n,a]) / W[s]
I[s]   = sum(n: w[s,n] * sum(a: (P[s,n,a] - c[s,a]) * (P[s,n,a] - c[s,a])))
output I
)";

const char *kRmsGemm = R"(
size M = 3, N = 5, K = 31
input X[M, K] : bf16
input g[K] : bf16
input Wt[N, K] : bf16
eps = 1e-6
r[m]   = sum(k: X[m,k] * X[m,k])
Y[m,n] = sum(k: X[m,k] * g[k] * Wt[n,k]) * rsqrt(r[m] / K + eps)
output Y : bf16
)";

const char *kCrossEntropy = R"(
size T = 3, D = 8, V = 23
input Hd[T, D] : bf16
input Wv[V, D] : bf16
input y[T] : i32
L[t,v]  = sum(d: Hd[t,d] * Wv[v,d])
m[t]    = max(v: L[t,v])
s[t]    = sum(v: exp(L[t,v] - m[t]))
z[t]    = sum(v: select(v == y[t], L[t,v], 0))
loss[t] = log(s[t]) + m[t] - z[t]
output loss : f32
)";

const char *kMaxAfterMean = R"(
size R = 3, C = 11
input X[R, C] : f32
mu[r] = sum(c: X[r,c]) / C
t[r]  = sum(c: max(X[r,c], mu[r]))
output t
)";

const char *kExpOfMean = R"(
size R = 3, C = 11
input X[R, C] : f32
m[r]  = max(c: X[r,c])
mu[r] = sum(c: X[r,c]) / C
t[r]  = sum(c: exp(X[r,c] - mu[r]))
u[r]  = sum(c: exp(X[r,c] - m[r] + mu[r]))
v[r]  = sum(c: exp(X[r,c] + m[r]))
output t, u, v
)";

const char *kExpProduct = R"(
size R = 3, C = 11
input X[R, C] : f32
m[r] = max(c: X[r,c])
t[r] = sum(c: exp(X[r,c] * m[r]))
output t
)";

}  // namespace

TEST(Verdicts, SoftmaxSumIsMultiplicativeOnTheMax) {
    ArenaScope arena;
    auto c = compile(kSoftmax);
    const ChainPlan *ch = chain_of(*c, "s");
    ASSERT_TRUE(ch);
    EXPECT_TRUE(ch->fused);
    EXPECT_EQ(ch->members, (std::vector<std::string>{"m", "s"}));
    EXPECT_EQ(verdict(*c, "m")->relation, Relation::Independent);
    const MemberAnalysis *s = verdict(*c, "s");
    EXPECT_EQ(s->relation, Relation::Multiplicative);
    EXPECT_EQ(to_string(restore_deltas(*s, s->H)), "exp(-m[r])");
    EXPECT_GE(s->checked_points, 100);
    EXPECT_EQ(ch->epilogue, (std::vector<std::string>{"Y"}));
}

TEST(Verdicts, AttentionDefersTheNormalizationAndUsesAPrologue) {
    ArenaScope arena;
    auto c = compile(kAttention);
    const ChainPlan *ch = chain_of(*c, "l");
    ASSERT_TRUE(ch);
    EXPECT_TRUE(ch->fused);
    EXPECT_EQ(ch->members, (std::vector<std::string>{"m", "l", "O.sum"}));
    EXPECT_EQ(ch->prologue, (std::vector<std::string>{"S.sum"}));
    EXPECT_EQ(ch->axes, (std::vector<std::string>{"j"}));
    EXPECT_EQ(verdict(*c, "m")->relation, Relation::Independent);
    for (const char *name : {"l", "O.sum"}) {
        const MemberAnalysis *v = verdict(*c, name);
        EXPECT_EQ(v->relation, Relation::Multiplicative) << name;
        EXPECT_EQ(to_string(restore_deltas(*v, v->H_run)), "exp(-m[b, h, i])") << name;
    }
    // The 1/l of the output is pushed into the report as the deferred part of H.
    const MemberAnalysis *o = verdict(*c, "O.sum");
    EXPECT_EQ(to_string(restore_deltas(*o, o->H_def)), "1 / l[b, h, i]");
    EXPECT_TRUE(verdict(*c, "l")->H_def->is_const(1));
    EXPECT_EQ(ch->epilogue, (std::vector<std::string>{"O"}));
    EXPECT_EQ(chain_of(*c, "S.sum"), nullptr);  // a prologue, not a chain of its own
}

TEST(Verdicts, MoeTopKIsMonotoneOverTheRawLogits) {
    ArenaScope arena;
    auto c = compile(kMoe);
    const ChainPlan *ch = chain_of(*c, "W");
    ASSERT_TRUE(ch);
    EXPECT_TRUE(ch->fused);
    EXPECT_EQ(ch->passes.size(), 1u);
    const MemberAnalysis *w = verdict(*c, "W");
    EXPECT_EQ(w->relation, Relation::Monotone);
    EXPECT_TRUE(w->increasing);
    EXPECT_EQ(to_string(w->Gsel), "X[t, e]");
    EXPECT_EQ(verdict(*c, "s")->relation, Relation::Multiplicative);
}

TEST(Verdicts, QuantizationIsMultiplicativeButInexactSoTheExactPlanIsDefault) {
    ArenaScope arena;
    auto c = compile(kQuant);
    const MemberAnalysis *v = verdict(*c, "C.sum");
    ASSERT_TRUE(v);
    EXPECT_EQ(v->relation, Relation::Multiplicative);
    EXPECT_FALSE(v->exact);
    const ChainPlan *ch = chain_of(*c, "C.sum");
    EXPECT_EQ(ch->strategy, Strategy::ExactPrepass);
    EXPECT_EQ(ch->passes.size(), 2u);
    auto approx = compile(kQuant, /*approx=*/true);
    EXPECT_EQ(chain_of(*approx, "C.sum")->passes.size(), 1u);
}

TEST(Verdicts, VarianceAndInertiaArePolynomial) {
    ArenaScope arena;
    auto v = compile(kVariance);
    const MemberAnalysis *var = verdict(*v, "var.sum");
    ASSERT_TRUE(var);
    EXPECT_EQ(var->relation, Relation::Polynomial);
    EXPECT_EQ(var->degree, 2);
    auto in = compile(kInertia);
    const MemberAnalysis *I = verdict(*in, "I");
    ASSERT_TRUE(I);
    EXPECT_EQ(I->relation, Relation::Polynomial);
    EXPECT_EQ(I->degree, 2);
    EXPECT_EQ(chain_of(*in, "I")->members.size(), 3u);
}

TEST(Verdicts, RmsNormGemmDefersAllOfH) {
    ArenaScope arena;
    auto c = compile(kRmsGemm);
    const MemberAnalysis *y = verdict(*c, "Y.sum");
    ASSERT_TRUE(y);
    EXPECT_EQ(y->relation, Relation::Multiplicative);
    EXPECT_TRUE(y->H_run->is_const(1));  // no rescale in the update
    EXPECT_FALSE(y->H_def->is_const(1));
}

TEST(Verdicts, CrossEntropyMembers) {
    ArenaScope arena;
    auto c = compile(kCrossEntropy);
    EXPECT_EQ(verdict(*c, "m")->relation, Relation::Independent);
    EXPECT_EQ(verdict(*c, "z")->relation, Relation::Independent);
    EXPECT_EQ(verdict(*c, "s")->relation, Relation::Multiplicative);
    const ChainPlan *ch = chain_of(*c, "s");
    EXPECT_TRUE(ch->fused);
    EXPECT_EQ(ch->prologue, (std::vector<std::string>{"L"}));
}

TEST(Verdicts, UnfusibleBodiesCarryAReasonAndACounterexample) {
    ArenaScope arena;
    for (const char *src : {kMaxAfterMean, kExpProduct}) {
        auto c = compile(src);
        const MemberAnalysis *t = verdict(*c, "t");
        ASSERT_TRUE(t);
        EXPECT_EQ(t->relation, Relation::None);
        EXPECT_FALSE(t->reason.empty());
        EXPECT_FALSE(t->counterexample.empty()) << t->reason;
        ASSERT_EQ(c->plan.not_fused.size(), 1u);
        EXPECT_EQ(c->plan.not_fused[0].name, "t");
        EXPECT_FALSE(chain_of(*c, "t")->fused);
        EXPECT_EQ(chain_of(*c, "t")->strategy, Strategy::MultiPass);
    }
}

TEST(Verdicts, AnExponentOnARunningMeanAloneDoesNotFuse) {
    // exp(X - mu) with mu a running mean: the running terms exp(X - mu_run) could overflow where the
    // spec's do not, so t runs in a later pass. Beside a running max (u) the mean's factor is deferred
    // and u fuses; a running max with the other sign (v) only makes the running terms smaller.
    ArenaScope arena;
    auto c = compile(kExpOfMean);
    const MemberAnalysis *t = verdict(*c, "t");
    ASSERT_TRUE(t);
    EXPECT_EQ(t->relation, Relation::None);
    EXPECT_NE(t->reason.find("could overflow where the spec"), std::string::npos) << t->reason;
    for (const char *name : {"u", "v"}) {
        const MemberAnalysis *f = verdict(*c, name);
        ASSERT_TRUE(f) << name;
        EXPECT_EQ(f->relation, Relation::Multiplicative) << name << ": " << f->reason;
    }
    EXPECT_TRUE(verdict(*c, "u")->defers_exp);
    EXPECT_FALSE(verdict(*c, "v")->defers_exp);
    ASSERT_EQ(c->plan.not_fused.size(), 1u);
    EXPECT_EQ(c->plan.not_fused[0].name, "t");
}

TEST(Verdicts, ChainsAreNotGroupedByEqualExtents) {
    // head_dim == kv_len: the QKᵀ reduction over d must not join the softmax chain over j.
    ArenaScope arena;
    auto c = compile(R"(
size B = 1, H = 2, M = 5
input Q[B, H, M, 8] : f32
input K[B, H, 8, 8] : f32
input V[B, H, 8, 8] : f32
S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d])
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O
)");
    EXPECT_EQ(chain_of(*c, "l")->members, (std::vector<std::string>{"m", "l", "O.sum"}));
    EXPECT_EQ(chain_of(*c, "S.sum"), nullptr);
}

TEST(PlanVsReference, WorkloadsAcrossRandomTilingsAndMergeTrees) {
    ArenaScope arena;
    for (const char *src : {kSoftmax, kAttention, kMoe, kQuant, kVariance, kInertia, kRmsGemm, kCrossEntropy,
                            kMaxAfterMean, kExpProduct}) {
        auto c = compile(src);
        SizeBinding sizes = bind_sizes(c->program, {});
        for (uint64_t seed = 1; seed <= 6; seed++) {
            InputDistribution dist = std::string(src) == kInertia ? InputDistribution::Positive : InputDistribution::Normal;
            double err = plan_vs_reference(*c, sizes, seed, false, dist);
            EXPECT_LE(err, 1e-12) << src << " seed " << seed;
        }
    }
}

TEST(Verdicts, TopKWithASymbolicK) {
    ArenaScope arena;
    auto c = compile(R"(
size T = 3, E = 19, K = 5
input X[T, E] : f32
m[t] = max(e: X[t,e])
s[t] = sum(e: exp(X[t,e] - m[t]))
W[t,r], I[t,r] = topk(e, K: exp(X[t,e] - m[t]) / s[t])
output W, I
)");
    EXPECT_EQ(verdict(*c, "W")->relation, Relation::Monotone);
    for (int64_t k : {1, 7, 19}) {
        SizeBinding sizes = bind_sizes(c->program, {{"K", k}});
        EXPECT_LE(plan_vs_reference(*c, sizes, 3), 1e-12) << "K = " << k;
    }
}
