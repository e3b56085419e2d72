/** \file fuzz_findings_test.cpp
 * Specs scripts/fuzz_specs.py found wrong on a GPU backend, run at the fusion level where they were
 * found, on OpenCL (PoCL) and on the CUDA host emulator.
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "CudaEmuDevice.h"
#include "runtime/OpenCLRuntime.h"

using namespace rf;

namespace {

// Seed 12 #54: a top-1 of the top-k values and a sum over the same k axis, in one chain over k.
const char *kTopkOfTopk = "size R = 17, C = 300, K = 4\ninput X[R, C] : f32\ntau = 2.5 / C\n"
                          "m[r] = max(c: X[r,c] * tau)\ns[r] = sum(c: exp(X[r,c] * tau - m[r]))\n"
                          "TV[r,k], TI[r,k] = topk(c, K: exp(X[r,c] * tau - m[r]) / s[r])\n"
                          "V2[r,j], I2[r,j] = topk(k, 1: -TV[r,k])\nsk[r] = sum(k: TV[r,k] * f32(bf16(TV[r,k])))\n"
                          "output V2, sk\n";

}  // namespace

TEST(GpuFuzzFindings, TopOfTopKBesideASumOverKOnTheCudaEmulator) {
    test::ScopedCudaEmulation emu;
    for (FusionLevel level : {FusionLevel::Block, FusionLevel::Warp, FusionLevel::Thread}) {
        RunOptions o;
        o.fusion_level = level;
        test::check_run("topk_of_topk.rf", kTopkOfTopk, o, "cuda", {54, 1});
    }
}

TEST(GpuFuzzFindings, TopOfTopKBesideASumOverKOnOpenCL) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    for (FusionLevel level : {FusionLevel::Block, FusionLevel::Warp, FusionLevel::Thread}) {
        RunOptions o;
        o.fusion_level = level;
        test::check_run("topk_of_topk.rf", kTopkOfTopk, o, "opencl", {54, 1});
    }
}
