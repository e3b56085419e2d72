/** \file partial_test.cpp
 * Partial states (shard/Partial.h, interp/PlanInterp.h merge_states/finalize_states): for every
 * example with one chain, the partial program run by the float64 interpreters on uneven shards of
 * the axis (one of length 1), merged in several orders and groupings and finalized, equals the
 * reference interpreter on the whole axis; the partial program is one fused pass; the refusals.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "../ExampleSizes.h"
#include "Narrow.h"
#include "driver/Compiler.h"
#include "driver/Pipeline.h"
#include "interp/Inputs.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"
#include "shard/Partial.h"

using namespace rf;

namespace {

std::string example(const std::string &name) {
    return (std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (name + ".rf")).string();
}


struct Split {
    const Compilation &c;
    SizeBinding sizes;
    std::map<std::string, Tensor> inputs;

    /** The state of [lo, lo + n) from the partial program run by the plan interpreter. */
    ChainState partial(int64_t lo, int64_t n, uint64_t seed) {
        PartialProgram pp = derive_partial(c, "", n);
        auto pc = analyze_source(pp.spec, "partial.rf", analysis_target(), Options{});
        EXPECT_EQ(pc->plan.chains.size(), 1u);
        EXPECT_EQ(pc->plan.chains[0].passes.size(), 1u) << pp.spec;
        std::map<std::string, Tensor> in;
        for (const InputDecl &d : c.program.inputs) in[d.name] = inputs.at(d.name);
        for (const auto &[name, dim] : pp.sharded_inputs) in[name] = test::narrow(inputs.at(name), dim, lo, n);
        if (!pp.offset_input.empty()) in[pp.offset_input] = Tensor::filled({}, static_cast<double>(lo), DType::i64);
        if (!pp.axis_size_input.empty())
            in[pp.axis_size_input] = Tensor::filled({}, static_cast<double>(sizes.at(pp.axis_size)), DType::i64);
        SizeBinding ps = sizes;
        ps[pp.shard_size] = n;
        PlanInterpOptions o;
        o.seed = seed;
        auto res = run_plan(pc->plan, bind_sizes(pc->program, ps), in, o);
        ChainState st;
        st.n = n;
        for (size_t i = 0; i < pp.fields.size(); i++) {
            Tensor t = res.at(pc->program.outputs[i].name);
            if (pp.fields[i].is_index)
                for (double &v : t.data) v += static_cast<double>(lo);
            st.fields[pp.fields[i].key] = t;
        }
        return st;
    }
};

void expect_close(const Tensor &got, const Tensor &want, const std::string &what) {
    ASSERT_EQ(got.shape, want.shape) << what;
    double scale = 1;
    for (double v : want.data) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < want.data.size(); i++) {
        ASSERT_FALSE(std::isnan(got.data[i])) << what << " element " << i;
        ASSERT_NEAR(got.data[i], want.data[i], 1e-9 * scale) << what << " element " << i;
    }
}

class PartialExamples : public ::testing::TestWithParam<std::string> {};

TEST_P(PartialExamples, ShardsMergedInAnyOrderEqualTheWholeAxis) {
    auto c = analyze_file(example(GetParam()), analysis_target(), Options{});
    PartialProgram pp = derive_partial(*c, "");
    Split sp{*c, c->sizes, make_random_inputs(c->program, c->sizes, 7)};
    auto want = run_reference(c->program, c->sizes, sp.inputs);
    int64_t n = c->sizes.at(pp.axis_size);
    std::vector<int64_t> cuts{0, 1, std::max<int64_t>(2, n / 3), n};
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<ChainState> states;
    for (size_t i = 0; i + 1 < cuts.size(); i++) states.push_back(sp.partial(cuts[i], cuts[i + 1] - cuts[i], 11 + i));
    std::map<std::string, Tensor> context;
    for (const std::string &name : pp.context_inputs) context[name] = sp.inputs.at(name);
    std::mt19937_64 rng(3);
    for (int trial = 0; trial < 3; trial++) {
        std::vector<const ChainState *> order;
        for (const ChainState &s : states) order.push_back(&s);
        std::shuffle(order.begin(), order.end(), rng);
        // A nested grouping: the first two merged first, then the rest.
        ChainState pair = merge_states(c->plan, pp.chain, c->sizes, context, pp.fields, {order[0], order[1]});
        std::vector<const ChainState *> rest{&pair};
        rest.insert(rest.end(), order.begin() + 2, order.end());
        ChainState all = merge_states(c->plan, pp.chain, c->sizes, context, pp.fields, rest);
        auto got = finalize_states(c->plan, pp.chain, c->sizes, context, pp.fields, all);
        for (const OutputDecl &o : c->program.outputs) expect_close(got.at(o.name), want.at(o.name), GetParam() + " " + o.name);
    }
}

INSTANTIATE_TEST_SUITE_P(Examples, PartialExamples,
                         ::testing::Values("attention", "attention_causal", "attention_alibi", "attention_sliding_window",
                                           "attention_softcap", "attention_sinks", "attention_gqa", "decode_gqa",
                                           "mla_decode", "logsumexp", "variance", "moment_of_inertia", "prod_normalized",
                                           "softmax_entropy", "softmax_weighted_variance", "moe_routing", "argmax_softmax",
                                           "linear_cross_entropy", "rmsnorm_gemm", "symmetric_kl"));

TEST(Partial, StatesOfRowBlocksMergeLikeWholeStates) {
    auto c = analyze_file(example("attention_causal"), analysis_target(), Options{});
    PartialProgram pp = derive_partial(*c, "");
    Split sp{*c, c->sizes, make_random_inputs(c->program, c->sizes, 5)};
    int64_t n = c->sizes.at(pp.axis_size);
    ChainState a = sp.partial(0, 4, 1), b = sp.partial(4, n - 4, 2);
    ChainState whole = merge_states(c->plan, pp.chain, c->sizes, {}, pp.fields, {&a, &b});
    // Rows [5, 9) of the flattened rows, as a ring step sees them.
    auto block = [&](const ChainState &s) {
        ChainState out{s.n, {}};
        for (const auto &[k, t] : s.fields) {
            size_t row_rank = pp.row_rank;
            int64_t rows = 1, rest = 1;
            for (size_t i = 0; i < t.shape.size(); i++) (i < row_rank ? rows : rest) *= t.shape[i];
            std::vector<int64_t> shape{4};
            shape.insert(shape.end(), t.shape.begin() + static_cast<long>(row_rank), t.shape.end());
            Tensor bt = Tensor::filled(shape, 0.0);
            std::copy(t.data.begin() + 5 * rest, t.data.begin() + 9 * rest, bt.data.begin());
            out.fields[k] = bt;
        }
        return out;
    };
    ChainState ba = block(a), bb = block(b);
    ChainState part = merge_states(c->plan, pp.chain, c->sizes, {}, pp.fields, {&ba, &bb}, 5, 9);
    ChainState expect = block(whole);
    for (const auto &[k, t] : expect.fields) expect_close(part.fields.at(k), t, k);
}

TEST(Partial, FullyMaskedShardsGiveZeroStateNotNaN) {
    auto c = analyze_file(example("attention_causal"), analysis_target(), Options{});
    Split sp{*c, c->sizes, make_random_inputs(c->program, c->sizes, 9)};
    int64_t n = c->sizes.at(derive_partial(*c, "").axis_size);
    ChainState late = sp.partial(n - 1, 1, 3);  // every query but the last sees none of it
    for (const auto &[k, t] : late.fields)
        for (double v : t.data) EXPECT_FALSE(std::isnan(v)) << k;
}

std::string refusal(const std::string &spec_text_or_example) {
    try {
        auto c = spec_text_or_example.find('\n') == std::string::npos
                     ? analyze_file(example(spec_text_or_example), analysis_target(), Options{})
                     : analyze_source(spec_text_or_example, "t.rf", analysis_target(), Options{});
        derive_partial(*c, "");
    } catch (const UserError &e) {
        return e.what();
    }
    return "";
}

TEST(Partial, RefusalsSayWhy) {
    EXPECT_NE(refusal("softmax").find("reads 'X' along the sharded axis 'c'"), std::string::npos);
    EXPECT_NE(refusal("quant_gemm_int8").find("passes"), std::string::npos);
    EXPECT_NE(refusal("size R = 3, C = 8\ninput X[R, C]\nm[r] = max(c: X[r, c])\ns[r] = sum(c: X[r, 7 - c] * exp(X[r, c] - m[r]))\noutput s\n")
                  .find("along the sharded axis 'c': a shard holds its own positions"),
              std::string::npos);
    EXPECT_NE(refusal("size R = 3, C = 8, D = 4\ninput X[R, C, D]\nm[r] = max(c, d: X[r, c, d])\noutput m\n").find("several axes"),
              std::string::npos);
    EXPECT_NE(refusal("size R = 3, C = 8\ninput X[R, C]\nm[r] = max(c: X[r, c])\nt[c] = sum(r: X[r, c])\noutput m, t\n")
                  .find("one chain"),
              std::string::npos);
}

}  // namespace
