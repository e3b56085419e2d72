/** \file exppoly_backends_test.cpp
 * The exponential-polynomial examples (softmax entropy, softmax-weighted variance, the symmetric KL
 * divergence through the rate split) on the CPU and
 * OpenCL (PoCL) kernels at long rows (C = 32768, so the running state is rescaled tile after tile and
 * segments are merged) and large magnitudes (scale 50): the fused plan passes the check and its error
 * is reported next to the unfused (two-pass) plan's.
 */
#include <gtest/gtest.h>

#include <iostream>

#include "driver/Compiler.h"
#include "driver/Run.h"
#include "runtime/OpenCLRuntime.h"

using namespace rf;

namespace {

double worst_error(const RunReport &r) {
    double worst = 0;
    for (const auto &[name, out] : r.json.at("outputs").items()) worst = std::max(worst, out.at("max_rel_err").get<double>());
    return worst;
}

void fused_vs_two_pass(const std::string &target, int64_t segments) {
    for (const char *ex : {"softmax_entropy", "softmax_weighted_variance", "symmetric_kl"}) {
        ArenaScope arena;
        auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + ex + ".rf", {});
        for (double scale : {1.0, 50.0}) {
            RunOptions o;
            o.target = parse_target_kind(target);
            o.check = true;
            o.sizes = {{"R", 3}, {"C", 32768}};
            o.scale = scale;
            o.segments = segments;
            RunReport fused = run_compiled(*c, o);
            o.unfused = true;
            o.segments = 0;
            RunReport split = run_compiled(*c, o);
            EXPECT_TRUE(fused.ok) << ex << " " << target << " scale " << scale << "\n" << fused.text;
            EXPECT_TRUE(split.ok) << ex << " " << target << " unfused, scale " << scale << "\n" << split.text;
            std::cout << "  " << ex << " " << target << " C=32768 scale " << scale << " segments " << segments
                      << ": fused " << worst_error(fused) << ", two-pass " << worst_error(split) << " (max_rel_err of the check)\n";
        }
    }
}

}  // namespace

TEST(ExpPolynomialBackends, CpuLongRowsAndLargeMagnitudes) {
    fused_vs_two_pass("cpu", 0);
    fused_vs_two_pass("cpu", 5);
}

TEST(ExpPolynomialBackends, OpenCLLongRowsAndLargeMagnitudes) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    fused_vs_two_pass("opencl", 0);
}
