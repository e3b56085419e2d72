/** \file workloads_test.cpp
 * Every workload of docs/workloads.md (and the variants it names) parses and binds; golden dumps show
 * lifting and inlining; the IR carries the documented types (division rule, Int results, dtypes).
 */
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "spec/Frontend.h"

using namespace rf;

namespace {

struct Workload {
    std::string name;
    std::string spec;
    std::map<std::string, int64_t> sizes;
};

const char *kSoftmax = R"(size R, C
input X[R, C] : f32
m[r]   = max(c: X[r,c])
s[r]   = sum(c: exp(X[r,c] - m[r]))
Y[r,c] = exp(X[r,c] - m[r]) / s[r]
output Y : f32
)";

const char *kAttention = R"(# attention.rf — scaled dot-product attention
size B, H, M, N, D                 # symbolic sizes; `size D = 64` gives a default
input Q[B, H, M, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
scale = 1 / sqrt(D)                # scalar definition

S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d]) * scale
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O : bf16
)";

const char *kDecodeGqa = R"(size B, Hq, Hkv, N, D
input Q[B, Hq, D] : bf16
input K[B, Hkv, N, D] : bf16
input V[B, Hkv, N, D] : bf16
G = Hq / Hkv
scale = 1 / sqrt(D)
S[b,h,j] = sum(d: Q[b,h,d] * K[b,h / G,j,d]) * scale
m[b,h]   = max(j: S[b,h,j])
l[b,h]   = sum(j: exp(S[b,h,j] - m[b,h]))
O[b,h,e] = sum(j: exp(S[b,h,j] - m[b,h]) * V[b,h / G,j,e]) / l[b,h]
output O : bf16
)";

const char *kMoe = R"(size T, E
input X[T, E] : f32
m[t]          = max(e: X[t,e])
s[t]          = sum(e: exp(X[t,e] - m[t]))
W[t,r], I[t,r] = topk(e, 8: exp(X[t,e] - m[t]) / s[t])
output W, I
)";

std::vector<Workload> workloads() {
    return {
        {"softmax", kSoftmax, {{"R", 3}, {"C", 5}}},
        {"logsumexp", R"(size R, C
input X[R, C] : f32
m[r]   = max(c: X[r,c])
lse[r] = log(sum(c: exp(X[r,c] - m[r]))) + m[r]
output lse
)", {{"R", 3}, {"C", 5}}},
        {"log_softmax", R"(size R, C
input X[R, C] : bf16
m[r]   = max(c: X[r,c])
s[r]   = sum(c: exp(X[r,c] - m[r]))
Y[r,c] = X[r,c] - m[r] - log(s[r])
output Y : bf16
)", {{"R", 3}, {"C", 5}}},
        {"attention", kAttention, {{"B", 1}, {"H", 2}, {"M", 3}, {"N", 4}, {"D", 5}}},
        {"attention_causal", R"(size B, H, N, D
input Q[B, H, N, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
scale = 1 / sqrt(D)
S[b,h,i,j] = select(j <= i, sum(d: Q[b,h,i,d] * K[b,h,j,d]) * scale, -inf)
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O : bf16
)", {{"B", 1}, {"H", 2}, {"N", 4}, {"D", 5}}},
        {"decode_gqa", kDecodeGqa, {{"B", 2}, {"Hq", 8}, {"Hkv", 2}, {"N", 7}, {"D", 4}}},
        {"mla", R"(size B, H, N, Dk, Dv
input Q[B, H, Dk] : bf16          # Dk = 576 (512 latent + 64 rope)
input KV[B, N, Dk] : bf16         # one latent cache shared by all heads
scale = 1 / sqrt(Dk)
S[b,h,j]      = sum(d: Q[b,h,d] * KV[b,j,d]) * scale
m[b,h]        = max(j: S[b,h,j])
l[b,h]        = sum(j: exp(S[b,h,j] - m[b,h]))
O[b,h,e:Dv]   = sum(j: exp(S[b,h,j] - m[b,h]) * KV[b,j,e]) / l[b,h]
output O : bf16
)", {{"B", 1}, {"H", 4}, {"N", 3}, {"Dk", 576}, {"Dv", 512}}},
        {"moe_topk", kMoe, {{"T", 3}, {"E", 16}}},
        {"quant_fp8_gemm", R"(size M, N, K
input A[M, K]  : bf16
input Wq[N, K] : f8e4m3           # weights already quantized per output channel
input sw[N]    : f32
a[m]   = max(k: abs(A[m,k]))
C[m,n] = sum(k: f32(f8e4m3(A[m,k] * 448 / a[m])) * f32(Wq[n,k])) * a[m] / 448 * sw[n]
output C : bf16
)", {{"M", 2}, {"N", 3}, {"K", 4}}},
        {"quant_int8_gemm", R"(size M, N, K
input A[M, K]  : f32
input Wq[N, K] : i8
input sw[N]    : f32
a[m]   = max(k: abs(A[m,k]))
C[m,n] = sum(k: i32(i8(round(A[m,k] * 127 / a[m]))) * i32(Wq[n,k])) * a[m] / 127 * sw[n]
output C : f32
)", {{"M", 2}, {"N", 3}, {"K", 4}}},
        {"variance", R"(size R, C
input X[R, C] : f32
mu[r]  = sum(c: X[r,c]) / C
var[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C
output mu, var
)", {{"R", 3}, {"C", 5}}},
        {"moment_of_inertia", R"(size S, N
input w[S, N] : f32
input P[S, N, 3] : f32
W[s]   = sum(n: w[s,n])
c[s,a] = sum(n: w[s,n] * P[s,n,a]) / W[s]
I[s]   = sum(n: w[s,n] * sum(a: (P[s,n,a] - c[s,a]) * (P[s,n,a] - c[s,a])))
output I
)", {{"S", 2}, {"N", 5}}},
        {"rmsnorm_gemm", R"(size M, N, K
input X[M, K] : bf16
input g[K] : bf16
input Wt[N, K] : bf16
eps = 1e-6
r[m]   = sum(k: X[m,k] * X[m,k])
Y[m,n] = sum(k: X[m,k] * g[k] * Wt[n,k]) * rsqrt(r[m] / K + eps)
output Y : bf16
)", {{"M", 2}, {"N", 3}, {"K", 4}}},
        {"layernorm", R"(size R, C
input X[R, C] : bf16
input gamma[C] : bf16
input beta[C] : bf16
eps = 1e-5
mu[r]  = sum(c: X[r,c]) / C
var[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C
Y[r,c] = (X[r,c] - mu[r]) * rsqrt(var[r] + eps) * gamma[c] + beta[c]
output Y : bf16
)", {{"R", 3}, {"C", 5}}},
        {"linear_cross_entropy", R"(size T, D, V
input Hd[T, D] : bf16
input Wv[V, D] : bf16
input y[T] : i32
L[t,v]  = sum(d: Hd[t,d] * Wv[v,d])
m[t]    = max(v: L[t,v])
s[t]    = sum(v: exp(L[t,v] - m[t]))
z[t]    = sum(v: select(v == y[t], L[t,v], 0))
loss[t] = log(s[t]) + m[t] - z[t]
output loss : f32
)", {{"T", 2}, {"D", 3}, {"V", 7}}},
        {"softcap_alibi_window_sinks", R"(size B, H, N, D, Wn = 4
input Q[B, H, N, D] : bf16
input K[B, H, N, D] : bf16
input V[B, H, N, D] : bf16
input slope[H] : f32
input sink[H] : f32
scale = 1 / sqrt(D)
s[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d]) * scale
S[b,h,i,j] = select(j <= i and i - j < Wn, 30 * tanh(s[b,h,i,j] / 30) + slope[h] * (j - i), -inf)
m0[b,h,i]  = max(j: S[b,h,i,j])
m[b,h,i]   = max(m0[b,h,i], sink[h])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i])) + exp(sink[h] - m[b,h,i])
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O : bf16
)", {{"B", 1}, {"H", 2}, {"N", 6}, {"D", 3}}},
        {"mqa", R"(size B, H, N, D
input Q[B, H, D]
input K[B, N, D]
input V[B, N, D]
S[b,h,j] = sum(d: Q[b,h,d] * K[b,j,d]) / sqrt(D)
m[b,h]   = max(j: S[b,h,j])
l[b,h]   = sum(j: exp(S[b,h,j] - m[b,h]))
O[b,h,e] = sum(j: exp(S[b,h,j] - m[b,h]) * V[b,j,e]) / l[b,h]
output O
)", {{"B", 1}, {"H", 3}, {"N", 4}, {"D", 2}}},
    };
}

class WorkloadSpec : public ::testing::TestWithParam<Workload> {};

TEST_P(WorkloadSpec, ParsesAndBinds) {
    const Workload &w = GetParam();
    ArenaScope scope;
    Program p;
    try {
        p = parse_program(w.spec, w.name + ".rf");
    } catch (const UserError &e) {
        FAIL() << format_user_error(e, w.name + ".rf", w.spec);
    }
    EXPECT_FALSE(p.outputs.empty());
    // Every non-output definition is a reduction (element-wise ones are inlined).
    for (const TensorDef &d : p.defs) {
        bool is_output = false;
        for (const OutputDecl &o : p.outputs) is_output |= o.name == d.name || o.name == d.index_name;
        if (!is_output) { EXPECT_TRUE(d.is_reduction()) << d.name; }
    }
    try {
        bind_sizes(p, w.sizes);
    } catch (const UserError &e) {
        FAIL() << format_user_error(e, w.name + ".rf", w.spec);
    }
    // The dump is stable: parsing twice gives the same text.
    EXPECT_EQ(to_string(p), to_string(parse_program(w.spec, w.name + ".rf")));
}

INSTANTIATE_TEST_SUITE_P(All, WorkloadSpec, ::testing::ValuesIn(workloads()),
                         [](const ::testing::TestParamInfo<Workload> &i) { return i.param.name; });

TEST(Golden, Softmax) {
    ArenaScope scope;
    EXPECT_EQ(to_string(parse_program(kSoftmax, "softmax.rf")),
              "size R\n"
              "size C\n"
              "input X[R, C] : f32\n"
              "m[r:R] = max(c: X[r, c])\n"
              "s[r:R] = sum(c: exp(X[r, c] - m[r]))\n"
              "Y[r:R, c:C] = exp(X[r, c] - m[r]) / s[r]\n"
              "output Y : f32\n");
}

TEST(Golden, AttentionLiftsAndInlines) {
    ArenaScope scope;
    // S is lifted (S.sum) and inlined; O keeps its element-wise epilogue over the lifted O.sum.
    EXPECT_EQ(to_string(parse_program(kAttention, "attention.rf")),
              "size B\n"
              "size H\n"
              "size M\n"
              "size N\n"
              "size D\n"
              "input Q[B, H, M, D] : bf16\n"
              "input K[B, H, N, D] : bf16\n"
              "input V[B, H, N, D] : bf16\n"
              "S.sum[b:B, h:H, i:M, j:N] = sum(d: Q[b, h, i, d] * K[b, h, j, d])\n"
              "m[b:B, h:H, i:M] = max(j: S.sum[b, h, i, j] * (1 / sqrt(D)))\n"
              "l[b:B, h:H, i:M] = sum(j: exp(S.sum[b, h, i, j] * (1 / sqrt(D)) - m[b, h, i]))\n"
              "O.sum[b:B, h:H, i:M, e:D] = sum(j: exp(S.sum[b, h, i, j] * (1 / sqrt(D)) - m[b, h, i]) * V[b, h, j, e])\n"
              "O[b:B, h:H, i:M, e:D] = O.sum[b, h, i, e] / l[b, h, i]\n"
              "output O : bf16\n");
}

TEST(Golden, TopK) {
    ArenaScope scope;
    EXPECT_EQ(to_string(parse_program(kMoe, "moe.rf")),
              "size T\n"
              "size E\n"
              "input X[T, E] : f32\n"
              "m[t:T] = max(e: X[t, e])\n"
              "s[t:T] = sum(e: exp(X[t, e] - m[t]))\n"
              "W[t:T, r:8], I[t:T, r:8] = topk(e, 8: exp(X[t, e] - m[t]) / s[t])\n"
              "output W : f32\n"
              "output I : i32\n");
}

// ---- IR details

const TensorDef &def(const Program &p, const std::string &n) {
    const TensorDef *d = p.find_def(n);
    if (!d) throw std::runtime_error("no definition " + n);
    return *d;
}

Expr find_load(Expr e, const std::string &tensor) {
    Expr found = nullptr;
    visit(e, [&](Expr n) {
        if (!found && n->kind == Kind::Load && n->name == tensor) found = n;
    });
    return found;
}

TEST(Ir, DivisionRuleAndScalarInliningByContext) {
    ArenaScope scope;
    Program p = parse_program(kDecodeGqa, "gqa.rf");
    Expr k = find_load(def(p, "S.sum").body, "K");
    ASSERT_TRUE(k);
    // G = Hq / Hkv inlined in an index: floor division of floor division.
    EXPECT_EQ(k->args[1], make_idiv(make_index("h"), make_idiv(make_size("Hq"), make_size("Hkv"))));
    EXPECT_EQ(k->dtype, DType::bf16);
    // scale = 1 / sqrt(D) in a value: real division of an Int literal.
    Expr scale = make_div(make_int(1), make_call(Func::sqrt, make_size("D")));
    EXPECT_TRUE(any_of(def(p, "m").body, [&](Expr n) { return n == scale; }));
    // The same scalar used as a value is real division.
    Program q = parse_program("size A, B\ninput X[A]\nG = A / B\nY[i] = X[i] * G + X[i % B]\noutput Y\n", "q.rf");
    Expr body = def(q, "Y").body;
    EXPECT_TRUE(any_of(body, [&](Expr n) { return n == make_div(make_size("A"), make_size("B")); }));
    EXPECT_TRUE(any_of(body, [&](Expr n) { return n == make_mod(make_index("i"), make_size("B")); }));
}

TEST(Ir, LiftingNamesAndSharing) {
    ArenaScope scope;
    Program p = parse_program(R"(size R, C
input X[R, C]
Y[r] = sum(c: X[r,c]) / sum(c: X[r,c] * X[r,c]) + max(c: X[r,c]) - sum(c: X[r,c])
Z[r,c] = X[r,c] / sum(k: X[r,k])
T = X[0, 0] / sum(a, b: X[a,b])
output Y, Z, T
)", "lift.rf");
    std::vector<std::string> names;
    for (const TensorDef &d : p.defs) names.push_back(d.name);
    // The repeated sum(c: X[r,c]) is lifted once; lifted defs keep only the free variables.
    EXPECT_EQ(names, (std::vector<std::string>{"Y.sum", "Y.sum2", "Y.max", "Y", "Z.sum", "Z", "T.sum", "T"}));
    EXPECT_EQ(to_string(def(p, "Y").body), "Y.sum[r] / Y.sum2[r] + Y.max[r] - Y.sum[r]");
    EXPECT_EQ(def(p, "Z.sum").vars, (std::vector<Expr>{make_index("r")}));
    EXPECT_TRUE(def(p, "T.sum").vars.empty());
    EXPECT_EQ(to_string(def(p, "T").body), "X[0, 0] / T.sum[]");
}

TEST(Ir, NestedReductionsStayInsideTheLiftedBody) {
    ArenaScope scope;
    Program p = parse_program(R"(size S, N
input w[S, N]
input P[S, N, 3]
Y[s] = 1 + sum(n: w[s,n] * sum(a: P[s,n,a]))
output Y
)", "nested.rf");
    ASSERT_EQ(p.defs.size(), 2u);
    EXPECT_EQ(to_string(p.defs[0].body), "sum(n: w[s, n] * sum(a: P[s, n, a]))");
    EXPECT_EQ(p.defs[0].extents, (std::vector<Expr>{make_size("S")}));
}

TEST(Ir, ElementwiseDefsInlinedAndKeptOnlyAsOutputs) {
    ArenaScope scope;
    Program p = parse_program(R"(size N
input X[N]
A[i] = X[i] * 2
B[i] = A[i] + 1
C[i] = B[i] * B[i]
output A, C
)", "ew.rf");
    ASSERT_EQ(p.defs.size(), 2u);
    EXPECT_EQ(p.defs[0].name, "A");
    EXPECT_EQ(p.defs[1].name, "C");
    EXPECT_EQ(to_string(p.defs[1].body), "(X[i] * 2 + 1) * (X[i] * 2 + 1)");
    // Inlining substitutes index expressions for the callee's variables.
    Program q = parse_program("size N\ninput X[N]\nA[i, j] = X[i] - X[j]\nB[i] = sum(k: A[k, i])\noutput B\n", "sub.rf");
    EXPECT_EQ(to_string(q.defs[0].body), "sum(k: X[k] - X[i])");
}

TEST(Ir, TypesOfResultsAndOutputs) {
    ArenaScope scope;
    Program p = parse_program(R"(size T, V
input L[T, V]
input y[T] : i32
a[t] = argmax(v: L[t,v])
hit[t] = select(a[t] == y[t], 1, 0)
n = sum(t: hit[t])
output a, hit, n : f64
)", "types.rf");
    EXPECT_EQ(def(p, "a").stype, SType::Int);
    EXPECT_EQ(p.outputs[0].dtype, DType::f64);  // explicit dtype applies to every name listed
    Expr ya = find_load(def(p, "hit").body, "y");
    ASSERT_TRUE(ya);
    EXPECT_EQ(ya->stype, SType::Real);  // integer inputs are data
    EXPECT_EQ(ya->dtype, DType::i32);
    Expr aa = find_load(def(p, "hit").body, "a");
    ASSERT_TRUE(aa);
    EXPECT_EQ(aa->stype, SType::Int);
    EXPECT_EQ(aa->dtype, DType::f64);
    Program q = parse_program("size T, V\ninput L[T, V]\na[t] = argmax(v: L[t,v])\noutput a\n", "am.rf");
    EXPECT_EQ(q.outputs[0].dtype, DType::i32);
}

TEST(Ir, TopKWithSymbolicK) {
    ArenaScope scope;
    Program p = parse_program("size T, E, K\ninput X[T, E]\nW[t,r], I[t,r] = topk(e, K: X[t,e])\noutput I, W\n", "k.rf");
    const TensorDef &d = def(p, "I");
    EXPECT_EQ(d.name, "W");
    EXPECT_EQ(d.index_name, "I");
    EXPECT_EQ(d.extents.back(), make_size("K"));
    EXPECT_EQ(d.body->k, 0);  // symbolic: the k axis extent is authoritative
    EXPECT_EQ(p.outputs[0].dtype, DType::i32);
    EXPECT_EQ(p.outputs[1].dtype, DType::f32);
    EXPECT_NO_THROW(bind_sizes(p, {{"T", 2}, {"E", 5}, {"K", 5}}));
    EXPECT_THROW(bind_sizes(p, {{"T", 2}, {"E", 5}, {"K", 6}}), UserError);
    Program q = parse_program(kMoe, "moe.rf");
    EXPECT_EQ(def(q, "W").body->k, 8);
}

TEST(Ir, LexicalDetails) {
    ArenaScope scope;
    // CRLF, tabs, comments, blank lines, continuation inside brackets, .5 / 1e-6 / inf literals.
    std::string spec =
        "# header\r\n\r\nsize N = 4,\tM\r\ninput X[N,\n        M] : f16   # comment\r\n"
        "Y[i, j] = select(X[i, j] > -inf,\n   X[i, j] * .5 + 1e-6,\n   0)\n\n\noutput Y\n";
    Program p = parse_program(spec, "lex.rf");
    EXPECT_EQ(p.sizes[0].default_value, 4);
    EXPECT_FALSE(p.sizes[1].default_value.has_value());
    EXPECT_EQ(p.inputs[0].dtype, DType::f16);
    EXPECT_EQ(to_string(p.defs[0].body), "select(X[i, j] > -inf, X[i, j] * 0.5 + 1e-06, 0)");
    EXPECT_EQ(p.defs[0].loc.line, 6);
    EXPECT_EQ(p.outputs[0].loc.line, 11);
    // Casts, unary minus, boolean operators.
    Program q = parse_program(
        "size N\ninput X[N]\nY[i] = f8e4m3(-X[i]) + select(not (X[i] < 0) or X[i] != 1, 1, 2)\noutput Y\n", "q.rf");
    Expr b = q.defs[0].body;
    EXPECT_TRUE(any_of(b, [](Expr n) { return n->kind == Kind::Cast && n->dtype == DType::f8e4m3; }));
    EXPECT_TRUE(any_of(b, [](Expr n) { return n->kind == Kind::Not; }));
}

TEST(Ir, ExplicitExtentsAndBroadcast) {
    ArenaScope scope;
    Program p = parse_program("size N, M\ninput X[N]\nY[i, j:M] = X[i] * j\noutput Y\n", "b.rf");
    EXPECT_EQ(to_string(p), "size N\nsize M\ninput X[N] : f32\nY[i:N, j:M] = X[i] * j\noutput Y : f32\n");
}

TEST(BindSizes, DefaultsOverridesAndBounds) {
    ArenaScope scope;
    Program p = parse_program(R"(size N = 8, W = 2
input X[N]
Y[i:N - 1] = X[i + 1] - X[i]
Z[i:N / W] = X[i * W + W - 1] + X[(i + 3) % N] + X[N - 1 - i]
output Y, Z
)", "b.rf");
    SizeBinding b = bind_sizes(p, {});
    EXPECT_EQ(b.at("N"), 8);
    EXPECT_EQ(b.at("W"), 2);
    EXPECT_EQ(bind_sizes(p, {{"N", 3}}).at("N"), 3);
    EXPECT_THROW(bind_sizes(p, {{"Q", 3}}), UserError);  // unknown size
    // N = 7, W = 2: Z has extent 3, i * 2 + 1 <= 5 < 7: in bounds.
    EXPECT_NO_THROW(bind_sizes(p, {{"N", 7}}));
    Program q = parse_program("size N\ninput X[N]\nY[i:N + 1] = X[i / 2 + 1]\noutput Y\n", "q.rf");
    EXPECT_THROW(bind_sizes(q, {{"N", 1}}), UserError);  // i in [0, 1]: i / 2 + 1 = 1 is out of bounds
    EXPECT_NO_THROW(bind_sizes(q, {{"N", 3}}));          // i in [0, 3]: i / 2 + 1 <= 2
}

TEST(BindSizes, EvalIntIsFloorBased) {
    ArenaScope scope;
    SizeBinding s{{"N", 7}};
    EXPECT_EQ(eval_int(make_idiv(make_neg(make_size("N")), make_int(2)), s), -4);
    EXPECT_EQ(eval_int(make_mod(make_neg(make_size("N")), make_int(2)), s), 1);
    EXPECT_EQ(eval_int(make_mod(make_size("N"), make_int(-2)), s), -1);
    EXPECT_THROW(eval_int(make_idiv(make_size("N"), make_int(0)), s), UserError);
    EXPECT_THROW(eval_int(make_mul(make_int(int64_t(1) << 40), make_int(int64_t(1) << 40)), s), UserError);
    EXPECT_THROW(eval_int(make_size("M"), s), UserError);
}

}  // namespace
