/** \file grad_test.cpp
 * The derived backward (grad/Grad.h): for every example the rules cover, the backward spec run by
 * the float64 reference interpreter matches central finite differences of the forward's reference
 * at random points, at the default sizes, all sizes 1 and small primes; the verdicts of the
 * backward of softmax and attention; the refusals and their messages.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "driver/Pipeline.h"
#include "driver/Report.h"
#include "grad/Check.h"
#include "grad/Grad.h"
#include "interp/Inputs.h"
#include "interp/Reference.h"
#include "spec/Frontend.h"

using namespace rf;

namespace {

std::filesystem::path example(const std::string &name) {
    return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (name + ".rf");
}

Program parse_f64(const std::filesystem::path &path) {
    return widened_to_f64(parse_program(test::read_text(path), path.string()));
}

/** The backward at one size binding against central differences at up to 10 elements per input. */
void expect_matches_finite_differences(const Program &p, const GradResult &g, const SizeBinding &s, uint64_t seed) {
    GradCheckReport r = check_against_finite_differences(p, g, s, seed);
    for (const GradientCheck &c : r.gradients) {
        SCOPED_TRACE("gradient " + c.gradient);
        EXPECT_LE(c.max_abs_err, GradCheckReport::kTolerance * c.scale) << "element " << c.worst;
        EXPECT_TRUE(c.ok) << c.checked << " checked, " << c.skipped << " skipped";
        if (c.elements > 1) { EXPECT_GT(c.checked, 0) << "no differentiable point"; }
    }
}

class BackwardMatchesFiniteDifferences : public ::testing::TestWithParam<std::string> {};

TEST_P(BackwardMatchesFiniteDifferences, AtRandomPoints) {
    ArenaScope scope;
    Program p = parse_f64(example(GetParam()));
    GradResult g = derive_backward(p, {});
    ASSERT_FALSE(g.gradients.empty());
    std::vector<std::map<std::string, int64_t>> sizes = {
        test::size_variant(p, [](int64_t v) { return v; }), test::size_variant(p, [](int64_t) { return 1; }),
        test::size_variant(p, [](int64_t v) { return v > 3 ? int64_t(3) : v; })};
    uint64_t seed = 11;
    for (const auto &s : sizes) {
        SCOPED_TRACE(::testing::PrintToString(s));
        expect_matches_finite_differences(p, g, bind_sizes(p, s), seed++);
    }
}

INSTANTIATE_TEST_SUITE_P(Examples, BackwardMatchesFiniteDifferences,
                         ::testing::Values("softmax", "log_softmax", "logsumexp", "layernorm", "variance",
                                           "rmsnorm_gemm", "attention", "attention_causal", "attention_alibi",
                                           "attention_sliding_window", "attention_softcap", "attention_sinks",
                                           "attention_gqa", "decode_gqa", "linear_cross_entropy", "argmax_softmax",
                                           "moe_routing", "moe_topk_then_softmax", "prod_normalized", "nofuse_exp_product",
                                           "nofuse_log_shift", "nofuse_max_after_mean", "softmax_entropy",
                                           "softmax_weighted_variance", "symmetric_kl"));

TEST(Grad, EveryExampleDerivesOrIsRefusedWithAUserError) {
    // No example reaches an internal error: a backward is derived (and its spec parses: derive_backward
    // checks that) or the spec is refused with a located message.
    for (const auto &e : std::filesystem::directory_iterator(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples")) {
        if (e.path().extension() != ".rf") continue;
        SCOPED_TRACE(e.path().filename().string());
        ArenaScope scope;
        Program p = parse_program(test::read_text(e.path()), e.path().filename().string());
        try {
            GradResult g = derive_backward(p, {});
            EXPECT_FALSE(g.backward_spec.empty());
        } catch (const UserError &) {
        }
    }
}

TEST(Grad, AttentionSavesOnlyTheRowLogSumExp) {
    ArenaScope scope;
    Program p = parse_program(test::read_text(example("attention")), "attention.rf");
    GradResult g = derive_backward(p, {});
    std::vector<std::string> extra;
    for (const auto &in : g.backward.inputs)
        if (!p.find_input(in.name)) extra.push_back(in.name);
    EXPECT_EQ(extra, (std::vector<std::string>{"dO", "O", "L"}));
    const InputDecl *l = g.backward.find_input("L");
    ASSERT_TRUE(l);
    EXPECT_EQ(l->dims.size(), 3u);  // [B, H, M]: never the M×N probabilities
    EXPECT_NE(g.forward_spec.find("L[b:B, h:H, i:M] = m[b, h, i] + log(l[b, h, i])"), std::string::npos) << g.forward_spec;
    EXPECT_NE(g.backward_spec.find("stabilizer 'm' carries no gradient"), std::string::npos);
    EXPECT_NE(g.backward_spec.find("dV[b:B, h:H, j:N, e:D] = sum(i: "), std::string::npos) << g.backward_spec;
}

std::string verdicts(const std::string &backward_spec) {
    auto c = analyze_source(backward_spec, "backward.rf", analysis_target(), Options{});
    return analysis_text(*c);
}

TEST(Grad, SoftmaxBackwardFusesInOnePass) {
    ArenaScope scope;
    GradResult g = derive_backward(parse_program(test::read_text(example("softmax")), "softmax.rf"), {});
    std::string v = verdicts(g.backward_spec);
    EXPECT_NE(v.find("1 chain"), std::string::npos) << v;
    EXPECT_NE(v.find("fused, strategy single_pass"), std::string::npos) << v;
    EXPECT_EQ(v.find("not fused"), std::string::npos) << v;
}

TEST(Grad, AttentionBackwardFusesEachChain) {
    ArenaScope scope;
    GradResult g = derive_backward(parse_program(test::read_text(example("attention")), "attention.rf"), {});
    std::string v = verdicts(g.backward_spec);
    EXPECT_NE(v.find("3 chains"), std::string::npos) << v;
    EXPECT_NE(v.find("chain 1 over j < N: fused"), std::string::npos) << v;
    EXPECT_NE(v.find("prologue (per tile): S_sum"), std::string::npos) << v;
    EXPECT_NE(v.find("chain 2 over i < M: fused"), std::string::npos) << v;
    EXPECT_EQ(v.find("not fused"), std::string::npos) << v;
}

class AttentionVariantBackward : public ::testing::TestWithParam<const char *> {};

TEST_P(AttentionVariantBackward, HasTheFlashAttention2Form) {
    // Every variant's backward has the FlashAttention-2 form (its schedule is not yet FA2's: see
    // docs/grad.md, Limits): each chain fused, the probabilities recomputed from the row
    // log-sum-exp (the only residual besides O: O(M) extra memory, never M×N), D = Σ_e dO·O as a
    // row reduction, dQ along the keys.
    ArenaScope scope;
    std::string name = GetParam();
    Program p = parse_program(test::read_text(example(name)), name + ".rf");
    GradResult g = derive_backward(p, {});
    std::vector<std::string> extra;
    for (const auto &in : g.backward.inputs)
        if (!p.find_input(in.name)) extra.push_back(in.name);
    EXPECT_EQ(extra, (std::vector<std::string>{"dO", "O", "L"})) << g.backward_spec;
    ASSERT_TRUE(g.backward.find_input("L"));
    EXPECT_EQ(g.backward.find_input("L")->dims.size(), 3u);
    std::string v = verdicts(g.backward_spec);
    EXPECT_EQ(v.find("not fused"), std::string::npos) << v;
    EXPECT_NE(v.find("over e < D: fused"), std::string::npos) << v;  // D (here dl) as a row reduction
    EXPECT_NE(v.find("over j < N: fused"), std::string::npos) << v;  // dQ along the keys
    EXPECT_NE(v.find("prologue (per tile): S_sum"), std::string::npos) << v;  // S recomputed per tile
}

INSTANTIATE_TEST_SUITE_P(Grad, AttentionVariantBackward,
                         ::testing::Values("attention", "attention_causal", "attention_gqa", "attention_softcap",
                                           "attention_alibi", "attention_sliding_window"));

TEST(Grad, NormAndLossBackwardsFuse) {
    // LayerNorm, RMSNorm→GEMM and linear + cross-entropy: every chain of the backward fused; the
    // cross-entropy's backward never takes the T×V logits as an input.
    for (const char *name : {"layernorm", "rmsnorm_gemm", "linear_cross_entropy", "log_softmax"}) {
        SCOPED_TRACE(name);
        ArenaScope scope;
        Program p = parse_program(test::read_text(example(name)), std::string(name) + ".rf");
        GradResult g = derive_backward(p, {});
        std::string v = verdicts(g.backward_spec);
        EXPECT_EQ(v.find("not fused"), std::string::npos) << v;
        for (const auto &in : g.backward.inputs) EXPECT_LE(in.dims.size(), 2u) << in.name;
        if (std::string(name) != "linear_cross_entropy") continue;
        for (const auto &in : g.backward.inputs) {
            if (!p.find_input(in.name)) {
                EXPECT_LE(in.dims.size(), 1u) << in.name << " is bigger than a row statistic";
            }
        }
    }
}

void expect_refused(const std::string &file, const GradOptions &o, const std::string &message, int line) {
    ArenaScope scope;
    Program p = parse_program(test::read_text(file), file);
    try {
        derive_backward(p, o);
        ADD_FAILURE() << file << ": no error";
    } catch (const UserError &e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        EXPECT_EQ(e.loc().line, line) << e.what();
    }
}

TEST(Grad, RefusedCasesSayWhy) {
    expect_refused(example("quant_gemm_fp8").string(), {}, "cannot differentiate the rounding 'f32(f8e4m3(A[m, k] * 448 / a[m]))'", 10);
    expect_refused(example("quant_gemm_int8").string(), {}, "pass --straight-through", 11);
    expect_refused(example("moment_of_inertia").string(), {}, "inside a nested reduction", 10);
    expect_refused(example("mla_decode").string(), {}, "'KV[b, j, e]' in the definition of 'O_sum': 'e' covers Dv of the Dk", 13);
    expect_refused((std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests/grad/refuse_index_shift.rf").string(), {},
                   "the load 'X[(i + 1) % N]' in the definition of 'Z': its index '(i + 1) % N' at dimension 1", 5);
    expect_refused(example("linear_cross_entropy").string(), {{"y"}, false}, "'y' is an integer input", 7);
}

TEST(Grad, RecomputedRoundingsKeepTheForwardsArithmetic) {
    // tests/grad/rounding_tie.rf: dW recomputes f32(i8(round(v * 127 / a))). Simplified to
    // round(127 * a^-1 * v), it rounded ties (63.5) to the other integer than the forward at seeds 94-96.
    ArenaScope scope;
    std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests/grad/rounding_tie.rf";
    Program p = parse_f64(path);
    GradResult g = derive_backward(p, {});
    EXPECT_NE(g.backward_spec.find("round(f16(X[r, c] * 0.1) * 127 / a[r])"), std::string::npos) << g.backward_spec;
    SizeBinding s = bind_sizes(p, test::size_variant(p, [](int64_t v) { return v; }));
    for (uint64_t seed = 90; seed < 100; seed++) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        expect_matches_finite_differences(p, g, s, seed);
    }
}

TEST(Grad, StraightThroughDifferentiatesQuantization) {
    ArenaScope scope;
    Program p = parse_program(test::read_text(example("quant_gemm_int8")), "q.rf");
    GradResult g = derive_backward(p, {{"A"}, true});
    ASSERT_EQ(g.gradients.size(), 1u);
    // d/dA of f32(i8(round(A·127/a)))·Wq·a/127 through the straight-through round: Wq·sw, a cancels.
    EXPECT_NE(g.backward_spec.find("dA[m:M, k:K] = "), std::string::npos) << g.backward_spec;
}

std::filesystem::path grad_spec(const std::string &name) {
    return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "grad" / (name + ".rf");
}

/** The backward against central differences at the spec's default sizes, once per seed. */
void expect_matches_at_default_sizes(const Program &p, const GradResult &g, std::initializer_list<uint64_t> seeds) {
    for (uint64_t seed : seeds) {
        SCOPED_TRACE(seed);
        expect_matches_finite_differences(p, g, bind_sizes(p, test::size_variant(p, [](int64_t v) { return v; })), seed);
    }
}

TEST(Grad, AnUnusedScalarInputGetsAZeroGradientOutput) {
    // g feeds only s, which no output reads: dg is the constant 0, a 0-dimensional definition.
    ArenaScope scope;
    Program p = parse_f64(grad_spec("unused_scalar_input"));
    GradResult g = derive_backward(p, {});
    EXPECT_NE(g.backward_spec.find("dg[] = 0.0"), std::string::npos) << g.backward_spec;
    ASSERT_EQ(g.backward.outputs.size(), 3u) << g.backward_spec;  // dX, dg, dZ
    expect_matches_at_default_sizes(p, g, {5});
}

TEST(Grad, ComparisonsAreDecidedAsTheForwardWroteThem) {
    // At the row's top-1 score the comparison is a tie; the backward must round it as the forward.
    ArenaScope scope;
    Program p = parse_f64(grad_spec("threshold_at_top1"));
    GradResult g = derive_backward(p, {});
    EXPECT_NE(g.backward_spec.find("5 * tanh(X[r, c] / 5) > tm_sum[r] / K"), std::string::npos) << g.backward_spec;
    expect_matches_at_default_sizes(p, g, {1, 3, 7, 9, 10});  // each failed with the simplified comparison
}

TEST(Grad, FiniteDifferencesAllowForTheRoundingOfCancellingSums) {
    // k3's cubes cancel: the check's noise bound uses the magnitude reference, not |k3|.
    ArenaScope scope;
    Program p = parse_f64(grad_spec("cancelling_third_moment"));
    GradResult g = derive_backward(p, {});
    expect_matches_at_default_sizes(p, g, {3, 12});  // each failed with a noise bound of u·|value|
}

TEST(Grad, FiniteDifferencesTellCurvatureFromKinks) {
    // φ = Σ X · exp(150 Σ W): every element of dW curves so much that the one-sided differences at the
    // check's step disagree; a smaller step shows they converge, so the points are checked, not skipped.
    ArenaScope scope;
    Program p = parse_f64(grad_spec("steep_weight_exponential"));
    GradResult g = derive_backward(p, {});
    expect_matches_at_default_sizes(p, g, {2, 4, 5});  // each had every point of dW skipped as a kink
}

TEST(Grad, WrtSelectsTheInputs) {
    ArenaScope scope;
    Program p = parse_program(test::read_text(example("attention")), "attention.rf");
    GradResult g = derive_backward(p, {{"V"}, false});
    ASSERT_EQ(g.gradients.size(), 1u);
    EXPECT_EQ(g.gradients[0].second, "dV");
    EXPECT_EQ(g.backward.outputs.size(), 1u);
}

}  // namespace

TEST(Grad, TopKValuesRouteThroughTheirSavedIndices) {
    // scripts/fuzz_specs.py --commands grad (seed 101 #1), reduced: the backward of top-k values
    // routed dTV through select(c == TV[r,k], ...), the values where the indices belong, because a
    // top-k's index tensor took its values' residual. The indices are now saved beside them.
    ArenaScope scope;
    Program p = widened_to_f64(parse_program("size R = 2, C = 5, K = 2\ninput X[R, C] : f32\ninput B[C] : f32\n"
                                             "TV[r,k], TI[r,k] = topk(c, K: X[r,c] + B[c])\noutput TV\n", "topk.rf"));
    GradResult g = derive_backward(p, {});
    EXPECT_NE(g.backward_spec.find("c == TI[r, k]"), std::string::npos) << g.backward_spec;
    EXPECT_NE(g.forward_spec.find("output TI"), std::string::npos) << g.forward_spec;
    for (uint64_t seed : {1, 2, 3}) expect_matches_finite_differences(p, g, bind_sizes(p, {}), seed);
}

namespace {

std::filesystem::path test_spec(const std::string &name) {
    return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / (name + ".rf");
}

/** Every gradient of `spec` at random inputs and adjoints: finite everywhere, and 0 on the leading
 *  `masked_rows` rows of dinput (rows whose every element the forward masks). */
void expect_masked_rows_get_zero_gradients(const std::string &spec, const std::string &dinput, int64_t masked_rows) {
    SCOPED_TRACE(spec);
    Program p = parse_f64(test_spec(spec));
    GradResult g = derive_backward(p, {});
    SizeBinding s = bind_sizes(p, {});
    auto inputs = make_random_inputs(p, s, 5);
    std::map<std::string, Tensor> adj;
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal;
    for (const auto &[o, d] : g.adjoints) {
        Tensor t(def_shape(*p.find_def(o), s));
        for (double &v : t.data) v = normal(rng);
        adj[d] = t;
    }
    auto res = run_backward_reference(g, s, inputs, adj);
    for (const auto &[x, dx] : g.gradients)
        for (double v : res.at(dx).data) ASSERT_TRUE(std::isfinite(v)) << dx << " has " << v << "\n" << g.backward_spec;
    const Tensor &d = res.at(dinput);
    // dinput's leading dimensions up to the row: every dimension before the last two is outer.
    int64_t row_len = 1;
    for (size_t i = d.shape.size() - 1; i < d.shape.size(); i++) row_len *= d.shape[i];
    int64_t rows_per_outer = d.shape.size() >= 2 ? d.shape[d.shape.size() - 2] : 1;
    for (size_t i = 0; i < d.data.size(); i++) {
        int64_t row = static_cast<int64_t>(i) / row_len % rows_per_outer;
        if (row < masked_rows) { EXPECT_EQ(d.data[i], 0.0) << dinput << " at " << i; }
    }
}

}  // namespace

TEST(Grad, FullyMaskedRowsGetZeroGradientsNotNaN) {
    // A fully masked row has stabilizer m = -inf, normalizer s = 0 and output 0 (0/0 = 0), so it is
    // constant in the inputs. The backward's exp(S - L) keeps the masking convention of `-` (the
    // printer writes x + -1·L as x - L), and its s^-1 reads 0 at s = 0 (EmptyRows.cpp).
    ArenaScope scope;
    expect_masked_rows_get_zero_gradients("masked_attention", "dQ", 2);
    expect_masked_rows_get_zero_gradients("masked_routing", "dX", 2);
    expect_masked_rows_get_zero_gradients("masked_entropy", "dX", 1);
}

TEST(Grad, NegativePowersOfPossiblyZeroBasesAreGuarded) {
    ArenaScope scope;
    Program p = parse_program("size R = 3, C = 4\ninput X[R, C] : f32\ninput B[C] : f32\n"
                              "s[r] = sum(c: select(B[c] > 0, exp(X[r,c]), 0))\n"
                              "Y[r,c] = select(B[c] > 0, exp(X[r,c]), 0) / s[r]\n"
                              "V[r] = sum(c: X[r,c] * X[r,c]) / C\n"
                              "Z[r,c] = X[r,c] * rsqrt(V[r] + 1e-5)\n"
                              "output Y, Z\n", "masked_softmax.rf");
    GradResult g = derive_backward(p, {});
    // s can be 0 (every column masked): its reciprocal is guarded; V + 1e-5 is positive: not.
    EXPECT_NE(g.backward_spec.find("select(s[r] == 0"), std::string::npos) << g.backward_spec;
    EXPECT_EQ(g.backward_spec.find("1e-05 == 0"), std::string::npos) << g.backward_spec;
    for (uint64_t seed : {1, 2}) expect_matches_finite_differences(widened_to_f64(p), g, bind_sizes(p, {}), seed);
}
