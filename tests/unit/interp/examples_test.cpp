/** \file examples_test.cpp
 * Every shipped example spec (examples/NAME.rf) parses, binds its default sizes and runs through the
 * reference interpreter with finite outputs; a few are cross-checked against hand-built Programs.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "Programs.h"
#include "interp/Compare.h"
#include "interp/Inputs.h"
#include "interp/Reference.h"
#include "support/Error.h"

#if __has_include("spec/Frontend.h")
#include "spec/Frontend.h"
#define REDFUSE_HAVE_PARSER 1
#endif

using namespace rf;

namespace {

std::vector<std::filesystem::path> example_files() {
    std::vector<std::filesystem::path> files;
    for (const auto &e : std::filesystem::directory_iterator(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples"))
        if (e.path().extension() == ".rf") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    return files;
}

std::string read_file(const std::filesystem::path &p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

TEST(Examples, EveryWorkloadIsShippedWithAHeaderComment) {
    std::vector<std::string> want = {
        "softmax", "logsumexp", "log_softmax", "attention", "attention_causal", "attention_gqa", "decode_gqa",
        "mla_decode", "moe_routing", "quant_gemm_fp8", "quant_gemm_int8", "variance", "moment_of_inertia",
        "rmsnorm_gemm", "layernorm", "linear_cross_entropy", "attention_softcap", "attention_alibi",
        "attention_sliding_window", "attention_sinks", "nofuse_max_after_mean", "nofuse_exp_product"};
    auto files = example_files();
    for (const std::string &w : want) {
        auto it = std::find_if(files.begin(), files.end(), [&](const auto &p) { return p.stem() == w; });
        EXPECT_NE(it, files.end()) << "missing examples/" << w << ".rf";
    }
    int nofuse = 0;
    for (const auto &f : files) {
        std::string text = read_file(f);
        EXPECT_EQ(text.rfind("# " + f.filename().string() + " — ", 0), 0u) << f << " lacks its header comment";
        nofuse += f.stem().string().rfind("nofuse_", 0) == 0;
    }
    EXPECT_GE(nofuse, 3);
}

#ifdef REDFUSE_HAVE_PARSER

TEST(Examples, ParseBindAndRunWithFiniteOutputs) {
    for (const auto &f : example_files()) {
        SCOPED_TRACE(f.filename().string());
        ArenaScope scope;
        Program p;
        try {
            p = parse_program(read_file(f), f.string());
        } catch (const UserError &e) {
            ADD_FAILURE() << f.filename() << ":" << e.loc().line << ":" << e.loc().col << ": " << e.what();
            continue;
        }
        SizeBinding s = bind_sizes(p, {});
        ASSERT_FALSE(p.outputs.empty());
        for (uint64_t seed : {1, 2}) {
            auto res = run_reference(p, s, make_random_inputs(p, s, seed));
            auto outs = reference_outputs(p, res);
            for (const auto &[name, t] : outs) {
                ASSERT_GT(t.numel(), 0) << name;
                for (double v : t.data) ASSERT_TRUE(std::isfinite(v)) << name << " has a non-finite value";
            }
        }
    }
}

TEST(Examples, ParsedSpecsAgreeWithHandBuiltPrograms) {
    ArenaScope scope;
    auto src = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples";
    {
        Program parsed = parse_program(read_file(src / "softmax.rf"), "softmax.rf");
        SizeBinding s = bind_sizes(parsed, {{"R", 3}, {"C", 17}});
        auto in = make_random_inputs(parsed, s, 4);
        Tensor a = run_reference(parsed, s, in).at("Y"), b = run_reference(test::softmax_program(), s, in).at("Y");
        EXPECT_TRUE(compare(a, b, 1e-15).ok);
    }
    {
        Program parsed = parse_program(read_file(src / "attention_gqa.rf"), "attention_gqa.rf");
        SizeBinding s = bind_sizes(parsed, {});
        auto in = make_random_inputs(parsed, s, 5);
        Tensor a = run_reference(parsed, s, in).at("O"), b = run_reference(test::attention_program(), s, in).at("O");
        CompareResult r = compare(a, b, 1e-13);
        EXPECT_TRUE(r.ok) << to_string(r);
    }
    {
        Program parsed = parse_program(read_file(src / "moe_routing.rf"), "moe_routing.rf");
        SizeBinding s = bind_sizes(parsed, {});
        auto in = make_random_inputs(parsed, s, 6);
        auto a = run_reference(parsed, s, in), b = run_reference(test::moe_program(4), s, in);
        EXPECT_TRUE(compare(a.at("I"), b.at("I"), 0, true).ok);
        EXPECT_TRUE(compare(a.at("W"), b.at("W"), 1e-15).ok);
    }
}

TEST(Examples, LabelsOfCrossEntropyHitTheVocabulary) {
    ArenaScope scope;
    auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "linear_cross_entropy.rf";
    Program p = parse_program(read_file(path), path.string());
    SizeBinding s = bind_sizes(p, {});
    auto [lo, hi] = int_input_range(p, s, "y");
    EXPECT_EQ(lo, 0);
    EXPECT_EQ(hi, s.at("V") - 1);
    auto res = run_reference(p, s, make_random_inputs(p, s, 3));
    for (double z : res.at("z").data) EXPECT_NE(z, 0.0);  // the labelled logit was found
    for (double l : res.at("loss").data) EXPECT_GT(l, 0.0);
}

TEST(Examples, LargeMagnitudeInputsStayFiniteInSafeSoftmaxFamilies) {
    // Scale 100 overflows a naive exp; the max-subtracted specs must not care.
    for (const auto &f : example_files()) {
        std::string stem = f.stem().string();
        bool softmax_like = stem.rfind("attention", 0) == 0 || stem.rfind("softmax", 0) == 0 ||
                            stem == "logsumexp" || stem == "log_softmax" || stem == "moe_routing" ||
                            stem == "decode_gqa" || stem == "mla_decode";
        if (!softmax_like) continue;
        SCOPED_TRACE(stem);
        ArenaScope scope;
        Program p = parse_program(read_file(f), f.string());
        SizeBinding s = bind_sizes(p, {});
        auto outs = reference_outputs(p, run_reference(p, s, make_random_inputs(p, s, 7, InputDistribution::Normal, 100)));
        for (const auto &[name, t] : outs)
            for (double v : t.data) ASSERT_TRUE(std::isfinite(v)) << name;
    }
}

TEST(Examples, QuantizedGemmOfAZeroRowIsZeroNotNaN) {
    for (const char *name : {"quant_gemm_fp8.rf", "quant_gemm_int8.rf"}) {
        SCOPED_TRACE(name);
        ArenaScope scope;
        auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name;
        Program p = parse_program(read_file(path), path.string());
        SizeBinding s = bind_sizes(p, {});
        auto in = make_random_inputs(p, s, 2);
        Tensor &A = in.at("A");
        for (int64_t k = 0; k < A.shape[1]; k++) A.at({1, k}) = 0;
        Tensor C = run_reference(p, s, in).at("C");
        for (int64_t n = 0; n < C.shape[1]; n++) {
            EXPECT_EQ(C.at({1, n}), 0.0);
            EXPECT_TRUE(std::isfinite(C.at({0, n})));
            EXPECT_NE(C.at({0, n}), 0.0);
        }
    }
}

#endif
