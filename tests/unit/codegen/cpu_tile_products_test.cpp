/** \file cpu_tile_products_test.cpp
 * The CPU's bf16 tile products (src/codegen/CpuOutputPrecision.cpp cpu_rounds_tile_products): a float tile
 * met by a bf16 operand in a tile GEMM goes to rfk::gemm_*_as_bf16 only when every output is bf16 or
 * fp8 and the option is on; the kernel so built still passes the reference check.
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

std::filesystem::path spec_path() { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "attention_bf16.rf"; }

std::string with_output_dtype(const std::string &dtype) {
    return std::regex_replace(test::read_text(spec_path()), std::regex(R"(output O : bf16)"), "output O : " + dtype);
}

std::string cpp_for(const std::string &source, bool bf16_tile_products) {
    Options o;
    o.bf16_tile_products = bf16_tile_products;
    return test::generate_cpu_for(source, "attention_bf16.rf", o);
}

// A call of fn, or of its variant for an operand that is a kernel input (fn_input_b / fn_input_v).
bool calls(const std::string &cpp, const std::string &fn) { return std::regex_search(cpp, std::regex("rfk::" + fn + "(_input_[bv])?\\(")); }

}  // namespace

TEST(CpuTileProducts, BfloatOutputsRoundPToBf16) {
    std::string cpp = cpp_for(with_output_dtype("bf16"), true);
    EXPECT_TRUE(calls(cpp, "gemm_nn_acc_f32_as_bf16")) << "P·V should take the bf16 unit";
    EXPECT_FALSE(calls(cpp, "gemm_nn_acc_f32_bf16"));
    EXPECT_TRUE(calls(cpp, "gemm_nt_bf16")) << "Q·Kᵀ reads two bf16 inputs";
    // K and V are inputs of the kernel: their GEMMs may keep packed panels within one kernel entry.
    EXPECT_NE(cpp.find("rfk::gemm_nt_bf16_input_b("), std::string::npos);
    // Q, the A operand of Q·Kᵀ, is an input too: the call says so (its trailing a_input argument).
    EXPECT_TRUE(std::regex_search(cpp, std::regex(R"(rfk::gemm_nt_bf16_input_b\([^;]*, (true|false), true\);)"))) << cpp;
    EXPECT_NE(cpp.find("rfk::gemm_nn_acc_f32_as_bf16_input_v("), std::string::npos);
    EXPECT_NE(cpp.find("rfk::input_epoch.fetch_add(1"), std::string::npos) << "each kernel entry expires kept panels";
}

TEST(CpuTileProducts, WiderOutputsOrTheOptionOffKeepExactProducts) {
    for (const char *dtype : {"f32", "f16"}) {
        std::string cpp = cpp_for(with_output_dtype(dtype), true);
        EXPECT_TRUE(calls(cpp, "gemm_nn_acc_f32_bf16")) << dtype;
        EXPECT_FALSE(calls(cpp, "gemm_nn_acc_f32_as_bf16")) << dtype;
    }
    std::string exact = cpp_for(with_output_dtype("bf16"), false);
    EXPECT_TRUE(calls(exact, "gemm_nn_acc_f32_bf16"));
    EXPECT_FALSE(calls(exact, "gemm_nn_acc_f32_as_bf16"));
}

TEST(CpuTileProducts, RoundedProductsPassTheReferenceCheck) {
    // Enough rows per block (8+) for the bf16 P·V, two key tiles, a tail; the seed is the test's.
    RunOptions o;
    o.sizes = {{"B", 1}, {"H", 2}, {"M", 45}, {"N", 300}, {"D", 40}};
    test::check_run(spec_path(), test::read_text(spec_path()), o, "cpu", {31});
}
