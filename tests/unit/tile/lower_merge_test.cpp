/** \file lower_merge_test.cpp
 * The finalization of LowerMerge.cpp: a top-k member selected over G (F = φ_δ(G)) ranks F itself on
 * the rows whose δ is not finite, so MoE routing with NaN and infinite logits lists the indices the
 * spec gives, on the CPU (row blocks as lanes and one row at a time) and on OpenCL (the CUDA
 * emulator's case is in runtime/cuda_emulation_test.cpp).
 */
#include <gtest/gtest.h>

#include <string>

#include "../NonFiniteRouting.h"
#include "runtime/OpenCLRuntime.h"

using namespace rf;

TEST(LowerMerge, TopKRanksTheSpecsValuesWhereDeltaIsNotFiniteOnTheCpu) {
    test::check_moe_routing_with_non_finite_logits(37, "cpu", {0, 1, 8});
    test::check_moe_routing_with_non_finite_logits(8, "cpu", {0, 1});
}

TEST(LowerMerge, TopKRanksTheSpecsValuesWhereDeltaIsNotFiniteOnOpenCL) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    test::check_moe_routing_with_non_finite_logits(37, "opencl", {0});
}
