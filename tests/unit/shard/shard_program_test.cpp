/** \file shard_program_test.cpp
 * A program on one shard of a split axis (shard/ShardProgram.h): the derived backward of attention
 * run by the reference interpreter on uneven key shards gives, summed over shards (dQ) and
 * concatenated (dK, dV), the whole backward's gradients; the outputs' kinds; the refusals.
 */
#include <gtest/gtest.h>

#include <cmath>

#include "../ExampleSizes.h"
#include "Narrow.h"
#include "grad/Grad.h"
#include "interp/Inputs.h"
#include "interp/Reference.h"
#include "shard/ShardProgram.h"
#include "spec/Frontend.h"

using namespace rf;

namespace {

Program parse_example(const std::string &name) {
    auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (name + ".rf");
    return parse_program(test::read_text(path), path.string());
}


class ShardedBackward : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardedBackward, ShardsAddUpToTheWholeBackward) {
    GradResult g = derive_backward(parse_example(GetParam()), {});
    const Program &b = g.backward;
    ShardedProgram sp = shard_program(b, {{"K", 2}, {"V", 2}});
    Program local = parse_program(sp.spec, "sharded.rf");
    SizeBinding sizes = bind_sizes(b, {});
    auto inputs = make_random_inputs(b, sizes, 3);
    for (auto &[name, t] : inputs)
        if (name == "L")  // a log-sum-exp consistent enough with the scores for exp(S - L) to stay finite
            for (double &v : t.data) v = 2.0;
    auto want = run_reference(b, sizes, inputs);
    int64_t n = sizes.at(sp.axis_size);
    std::vector<int64_t> cuts{0, 1, n / 2, n};
    std::map<std::string, Tensor> got;
    for (size_t s = 0; s + 1 < cuts.size(); s++) {
        int64_t lo = cuts[s], len = cuts[s + 1] - cuts[s];
        std::map<std::string, Tensor> in = inputs;
        in["K"] = test::narrow(inputs.at("K"), 2, lo, len);
        in["V"] = test::narrow(inputs.at("V"), 2, lo, len);
        if (!sp.offset_input.empty()) in[sp.offset_input] = Tensor::filled({}, static_cast<double>(lo), DType::i64);
        if (!sp.axis_size_input.empty()) in[sp.axis_size_input] = Tensor::filled({}, static_cast<double>(n), DType::i64);
        SizeBinding ls = sizes;
        ls[sp.shard_size] = len;
        auto res = run_reference(local, bind_sizes(local, ls), in);
        for (size_t i = 0; i < sp.outputs.size(); i++) {
            const ShardedProgram::Output &o = sp.outputs[i];
            const Tensor &r = res.at(local.outputs[i].name);
            Tensor &acc = got[o.name];
            if (acc.shape.empty()) acc = Tensor::filled(want.at(o.name).shape, 0.0);
            if (o.kind == ShardedOutput::Sharded) {
                Tensor part = test::narrow(acc, o.dim, lo, len);  // shape check only
                ASSERT_EQ(part.shape, r.shape) << o.name;
                int64_t inner = 1, outer = 1;
                for (size_t d = o.dim + 1; d < acc.shape.size(); d++) inner *= acc.shape[d];
                for (size_t d = 0; d < o.dim; d++) outer *= acc.shape[d];
                for (int64_t a = 0; a < outer; a++)
                    for (int64_t j = 0; j < len; j++)
                        for (int64_t c = 0; c < inner; c++)
                            acc.data[static_cast<size_t>((a * acc.shape[o.dim] + lo + j) * inner + c)] =
                                r.data[static_cast<size_t>((a * len + j) * inner + c)];
            } else {
                ASSERT_EQ(o.kind, ShardedOutput::PartialSum) << o.name;
                for (size_t e = 0; e < r.data.size(); e++) acc.data[e] += r.data[e];
            }
        }
    }
    for (const auto &[name, t] : got) {
        const Tensor &w = want.at(name);
        double scale = 1;
        for (double v : w.data) scale = std::max(scale, std::fabs(v));
        for (size_t e = 0; e < w.data.size(); e++) ASSERT_NEAR(t.data[e], w.data[e], 1e-9 * scale) << name << " " << e;
    }
}

INSTANTIATE_TEST_SUITE_P(Attention, ShardedBackward, ::testing::Values("attention", "attention_causal", "attention_alibi"));

TEST(ShardProgram, KindsOfTheAttentionBackwardsOutputs) {
    ShardedProgram sp = shard_program(derive_backward(parse_example("attention_causal"), {}).backward, {{"K", 2}, {"V", 2}});
    std::map<std::string, ShardedOutput> kinds;
    for (const auto &o : sp.outputs) kinds[o.name] = o.kind;
    EXPECT_EQ(kinds.at("dQ"), ShardedOutput::PartialSum);
    EXPECT_EQ(kinds.at("dK"), ShardedOutput::Sharded);
    EXPECT_EQ(kinds.at("dV"), ShardedOutput::Sharded);
    EXPECT_FALSE(sp.offset_input.empty());  // the causal mask reads the global key position
}

TEST(ShardProgram, RefusesWhatNeedsEveryShard) {
    auto refusal = [](const std::string &text, std::vector<std::pair<std::string, size_t>> sharded) -> std::string {
        try {
            shard_program(parse_program(text, "t.rf"), sharded);
        } catch (const UserError &e) {
            return e.what();
        }
        return "";
    };
    // A max over the split axis, a sum over it read by a later definition, a position used elsewhere.
    EXPECT_NE(refusal("size R = 2, C = 5\ninput X[R, C]\nm[r] = max(c: X[r, c])\noutput m\n", {{"X", 1}}).find("max"),
              std::string::npos);
    EXPECT_NE(refusal("size R = 2, C = 5\ninput X[R, C]\ns[r] = sum(c: X[r, c])\nt[r] = sum(c: X[r, c] * s[r])\noutput t\n", {{"X", 1}})
                  .find("sum over the split axis"),
              std::string::npos);
    EXPECT_NE(refusal("size C = 5\ninput X[C]\ninput Y[C]\nZ[c] = X[c] * Y[4 - c]\noutput Z\n", {{"X", 0}}).find("not split"),
              std::string::npos);
}

}  // namespace
