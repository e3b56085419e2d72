/** \file cpu_exp2_accuracy_test.cpp
 * The accuracy of the CPU's row exp2 primitives (src/codegen/CpuOutputPrecision.cpp cpu_half_accuracy_exp2):
 * the degree-4 polynomial (rfk::Exp2Accuracy::Half) only in modules whose outputs are all bf16, f16
 * or fp8 and with the option on (not under --exact-products, not beside an f32 or index output); the
 * kernels so built still pass the reference check, a cancelling weighted variance among them.
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "../GenerateFor.h"
#include "driver/Compiler.h"

using namespace rf;

namespace {

std::filesystem::path example(const std::string &name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }
std::filesystem::path test_spec(const std::string &name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / name; }

/** The spec with every `: f32` or `: bf16` (inputs and outputs) replaced by `: dtype`. */
std::string with_dtype(const std::filesystem::path &path, const std::string &dtype) {
    return std::regex_replace(test::read_text(path), std::regex(R"(: (f32|bf16)\b)"), ": " + dtype);
}

std::string cpp_for(const std::string &source, bool half_accuracy_exp2) {
    Options o;
    o.half_accuracy_exp2 = half_accuracy_exp2;
    return test::generate_cpu_for(source, "exp2_accuracy.rf", o);
}

/** Calls of the row exp2 primitives with the Half polynomial, and with the default one. */
int half_calls(const std::string &cpp) {
    const std::regex call(R"(rfk::exp2_(row|affine_row|row_sum)<rfk::Exp2Accuracy::Half>\()");
    return int(std::distance(std::sregex_iterator(cpp.begin(), cpp.end(), call), std::sregex_iterator()));
}
int float_calls(const std::string &cpp) {
    const std::regex call(R"(rfk::exp2_(row|affine_row|row_sum)\()");
    return int(std::distance(std::sregex_iterator(cpp.begin(), cpp.end(), call), std::sregex_iterator()));
}

}  // namespace

TEST(CpuExp2Accuracy, HalfPrecisionOutputsTakeTheDegreeFourPolynomial) {
    for (const char *dtype : {"bf16", "f16"}) {
        for (const char *name : {"softmax.rf", "attention.rf"}) {
            std::string cpp = cpp_for(with_dtype(example(name), dtype), true);
            EXPECT_GT(half_calls(cpp), 0) << name << " " << dtype;
            EXPECT_EQ(float_calls(cpp), 0) << name << " " << dtype;
        }
    }
}

TEST(CpuExp2Accuracy, WiderOrIndexOutputsAndTheOptionOffKeepOneUlp) {
    for (const char *name : {"softmax.rf", "attention.rf"}) {
        std::string f32 = cpp_for(with_dtype(example(name), "f32"), true);
        EXPECT_EQ(half_calls(f32), 0) << name;
        std::string off = cpp_for(with_dtype(example(name), "bf16"), false);
        EXPECT_GT(float_calls(off), 0) << name << " with the option off";
        EXPECT_EQ(half_calls(off), 0) << name << " with the option off";
    }
    // f32 attention's exp pass is a row primitive (softmax f32 keeps its exp in the vector loops).
    EXPECT_GT(float_calls(cpp_for(with_dtype(example("attention.rf"), "f32"), true)), 0);
    // Probabilities in bf16 beside the indices of their top-k: a near tie could flip an index, which
    // is compared exactly.
    std::string topk = cpp_for(with_dtype(test_spec("softmax_topk_probs.rf"), "bf16"), true);
    EXPECT_EQ(half_calls(topk), 0);
}

TEST(CpuExp2Accuracy, HalfPolynomialKernelsPassTheReferenceCheck) {
    RunOptions o;
    o.sizes = {{"R", 7}, {"C", 1000}};
    for (const char *name : {"softmax.rf", "softmax_weighted_variance.rf"})
        for (const char *dtype : {"bf16", "f16"}) {
            std::string source = with_dtype(example(name), dtype);
            ASSERT_GT(half_calls(cpp_for(source, true)), 0) << name << " " << dtype;
            test::check_run(example(name), source, o, "cpu", {5, 6});
        }
    RunOptions a;
    a.sizes = {{"B", 1}, {"H", 2}, {"M", 45}, {"N", 300}, {"D", 40}};
    test::check_run(example("attention.rf"), with_dtype(example("attention.rf"), "bf16"), a, "cpu", {31});
}
