/** \file numerics_test.cpp
 * Numerics of the derived plans: the shift form keeps variance accurate in float32 where the naive
 * Σx² − nμ² form fails; fully masked attention rows give 0 and no NaN; a quantization row whose
 * first tile is zero gives no NaN; inputs large enough to overflow a naive exp stay finite. The
 * same inputs run on every backend through tests/unit/MergeCases.h (the masked specs are shared:
 * tests/specs/).
 */
#include "../ExampleSizes.h"
#include "FuseTestUtil.h"
#include "driver/Run.h"
#include "runtime/OpenCLRuntime.h"

using namespace rf;
using namespace rf::test;

namespace {

std::filesystem::path spec_path(const std::string &name) {
    return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / name;
}

std::map<std::string, Tensor> run_with(const Compilation &c, const SizeBinding &sizes,
                                       const std::map<std::string, Tensor> &inputs, bool f32, uint64_t seed,
                                       bool randomize = true) {
    PlanOptions po;
    po.sizes = &sizes;
    Plan plan = make_plan(c.program, po);
    plan.program = &c.program;
    PlanInterpOptions o;
    o.f32 = f32;
    o.seed = seed;
    o.randomize = randomize;
    o.tile = 64;
    return run_plan(plan, sizes, inputs, o);
}

double max_rel(const Tensor &a, const Tensor &b) {
    double worst = 0;
    for (size_t i = 0; i < a.data.size(); i++)
        worst = std::max(worst, std::fabs(a.data[i] - b.data[i]) / std::fabs(b.data[i]));
    return worst;
}

}  // namespace

TEST(Numerics, VarianceShiftFormIsAccurateInFloat32WhereTheNaiveFormIsNot) {
    ArenaScope arena;
    auto welford = compile(R"(
size R = 8, C = 4096
input X[R, C] : f32
mu[r]  = sum(c: X[r,c]) / C
var[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C
output var
)");
    auto naive = compile(R"(
size R = 8, C = 4096
input X[R, C] : f32
mu[r]  = sum(c: X[r,c]) / C
q[r]   = sum(c: X[r,c] * X[r,c])
var[r] = q[r] / C - mu[r] * mu[r]
output var
)");
    SizeBinding sizes = bind_sizes(welford->program, {});
    auto inputs = make_random_inputs(welford->program, sizes, 7);
    for (double &v : inputs["X"].data) v = round_to_dtype(1e4 + v, DType::f32);  // mean 1e4, spread 1
    auto ref = run_reference(welford->program, sizes, inputs);
    for (uint64_t seed : {1, 2, 3}) {
        auto got = run_with(*welford, sizes, inputs, /*f32=*/true, seed, /*randomize=*/false);
        EXPECT_LE(max_rel(got.at("var"), ref.at("var")), 1e-4) << "seed " << seed;
        auto got_random = run_with(*welford, sizes, inputs, true, seed);
        EXPECT_LE(max_rel(got_random.at("var"), ref.at("var")), 1e-4) << "random tiling, seed " << seed;
    }
    auto bad = run_with(*naive, sizes, inputs, /*f32=*/true, 1, false);
    EXPECT_GT(max_rel(bad.at("var"), ref.at("var")), 1e-2) << "the naive form should fail in float32";
}

TEST(Numerics, FullyMaskedAttentionRowsGiveZeroAndNoNaN) {
    ArenaScope arena;
    auto c = compile(read_text(spec_path("masked_attention.rf")));  // also run by every backend suite
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed = 1; seed <= 8; seed++) {
        auto inputs = make_random_inputs(c->program, sizes, seed);
        for (bool f32 : {false, true}) {
            auto got = run_with(*c, sizes, inputs, f32, seed);
            const Tensor &O = got.at("O"), &lse = got.at("lse");
            for (int64_t h = 0; h < 2; h++)
                for (int64_t i = 0; i < 6; i++) {
                    EXPECT_TRUE(std::isinf(lse.at({0, h, i})) == (i < 2));
                    for (int64_t e = 0; e < 4; e++) {
                        double v = O.at({0, h, i, e});
                        EXPECT_FALSE(std::isnan(v));
                        if (i < 2) { EXPECT_EQ(v, 0.0); }
                    }
                }
        }
        EXPECT_LE(plan_vs_reference(*c, sizes, seed), 1e-12);
    }
}

TEST(Numerics, QuantizationRowWithAZeroFirstTileGivesNoNaN) {
    ArenaScope arena;
    const char *src = R"(
size M = 3, N = 4, K = 40
input A[M, K]  : bf16
input Wq[N, K] : f8e4m3
input sw[N]    : f32
a[m]   = max(k: abs(A[m,k]))
C[m,n] = sum(k: f32(f8e4m3(A[m,k] * 448 / a[m])) * f32(Wq[n,k])) * a[m] / 448 * sw[n]
output C : bf16
)";
    for (bool approx : {false, true}) {
        auto c = compile(src, approx);
        SizeBinding sizes = bind_sizes(c->program, {});
        auto inputs = make_random_inputs(c->program, sizes, 3);
        for (int64_t k = 0; k < 20; k++) inputs["A"].at({1, k}) = 0;  // row 1: first half zero
        for (int64_t k = 0; k < 40; k++) inputs["A"].at({2, k}) = 0;  // row 2: all zero
        PlanOptions po;
        po.sizes = &sizes;
        po.approx = approx;
        Plan plan = make_plan(c->program, po);
        plan.program = &c->program;
        PlanInterpOptions o;
        o.randomize = false;
        o.tile = 8;
        auto got = run_plan(plan, sizes, inputs, o);
        auto ref = run_reference(c->program, sizes, inputs);
        for (size_t i = 0; i < got.at("C").data.size(); i++) EXPECT_FALSE(std::isnan(got.at("C").data[i]));
        for (int64_t n = 0; n < 4; n++) EXPECT_EQ(got.at("C").at({2, n}), 0.0);
        double err = rel_diff(got.at("C"), ref.at("C"));
        if (!approx) EXPECT_LE(err, 1e-12);  // the exact plan quantizes with the final scale
        else EXPECT_LE(err, 0.2);            // the running scale rounds differently: reported, bounded
    }
}

TEST(Numerics, ApproximateQuantizationOfAFullyMaskedRowIsTheSpecsNaN) {
    // tests/specs/approx_quant_masked_rows.rf (fuzz seed 1218 #26): with L = C every value is masked,
    // a = inf and the spec's q = 0 · inf / 127 is NaN. The --approx plan's update read a sanitized
    // (as 0) and its δ = 1/a = 0 is finite, so the finalization took the state (q = ±inf) until the
    // members read by δ were checked too. L = 2 masks part of each row: |−inf| = inf is still the
    // row's a, and q NaN.
    const std::string path = spec_path("approx_quant_masked_rows.rf").string();
    for (const char *target : {"interp", "cpu", "opencl"}) {
        if (std::string(target) == "opencl" && !ocl::unavailable_reason().empty()) continue;
        for (int64_t L : {3, 2}) {
            RunOptions o;
            o.target = parse_target_kind(target);
            o.approx = true;
            o.check = true;
            o.seed = 3;
            o.sizes = {{"R", 5}, {"C", 3}, {"L", L}};
            RunReport r = run_spec(path, o);
            EXPECT_TRUE(r.ok) << target << " L = " << L << "\n" << r.text;
        }
    }
}

TEST(Numerics, LargeLogitsDoNotOverflowTheOnlineSoftmax) {
    ArenaScope arena;
    auto c = compile(R"(
size R = 4, C = 50
input X[R, C] : f32
m[r]   = max(c: X[r,c])
s[r]   = sum(c: exp(X[r,c] - m[r]))
Y[r,c] = exp(X[r,c] - m[r]) / s[r]
output Y : f32
)");
    SizeBinding sizes = bind_sizes(c->program, {});
    auto inputs = make_random_inputs(c->program, sizes, 5, InputDistribution::Normal, 500.0);
    for (bool f32 : {false, true}) {
        auto got = run_with(*c, sizes, inputs, f32, 5);
        auto ref = run_reference(c->program, sizes, inputs);
        EXPECT_LE(rel_diff(got.at("Y"), ref.at("Y")), f32 ? 1e-5 : 1e-12);
    }
}

TEST(Numerics, TopKAndArgmaxTiesGoToTheLowerIndexAcrossMerges) {
    ArenaScope arena;
    auto c = compile(R"(
size T = 9, E = 53
input X[T, E] : f32
m[t]           = max(e: X[t,e])
s[t]           = sum(e: exp(X[t,e] - m[t]))
W[t,r], I[t,r] = topk(e, 6: exp(X[t,e] - m[t]) / s[t])
a[t]           = argmax(e: X[t,e])
b[t]           = argmin(e: -exp(X[t,e]))
output W, I, a, b
)");
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed = 1; seed <= 20; seed++) {
        auto inputs = make_random_inputs(c->program, sizes, seed);
        for (double &v : inputs["X"].data) v = std::round(v * 1.5);  // a handful of values: many ties
        PlanOptions po;
        po.sizes = &sizes;
        Plan plan = make_plan(c->program, po);
        plan.program = &c->program;
        PlanInterpOptions o;
        o.seed = seed;
        auto got = run_plan(plan, sizes, inputs, o);
        auto ref = run_reference(c->program, sizes, inputs);
        EXPECT_EQ(got.at("I").data, ref.at("I").data) << "seed " << seed;
        EXPECT_EQ(got.at("a").data, ref.at("a").data) << "seed " << seed;
        EXPECT_EQ(got.at("b").data, ref.at("b").data) << "seed " << seed;
        EXPECT_LE(rel_diff(got.at("W"), ref.at("W")), 1e-12);
    }
}

TEST(Numerics, FullyMaskedRoutingRowsGiveZeroWeightsAndNoNaN) {
    ArenaScope arena;
    auto c = compile(read_text(spec_path("masked_routing.rf")));  // also run by every backend suite
    SizeBinding sizes = bind_sizes(c->program, {});
    for (uint64_t seed = 1; seed <= 5; seed++) {
        auto inputs = make_random_inputs(c->program, sizes, seed);
        for (bool f32 : {false, true}) {
            auto got = run_with(*c, sizes, inputs, f32, seed);
            for (double v : got.at("W").data) EXPECT_FALSE(std::isnan(v));
            for (int64_t r = 0; r < 3; r++) {
                EXPECT_EQ(got.at("W").at({0, r}), 0.0);
                EXPECT_EQ(got.at("I").at({0, r}), r);  // all tied at -inf: the lowest indices
            }
            EXPECT_EQ(got.at("p").at({1}), 0.0);
        }
        EXPECT_LE(plan_vs_reference(*c, sizes, seed), 1e-12);
    }
}
