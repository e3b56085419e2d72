/** \file tune_agreement_test.cpp
 * GPU tuning keeps only variants whose outputs agree with the first variant's (outputs_disagree):
 * a variant off by more than the output dtype's tolerance, or an index output off by one, is named
 * and refused; rounding-level differences are not.
 */
#include <gtest/gtest.h>

#include "driver/Bench.h"
#include "driver/Compiler.h"
#include "support/Error.h"

using namespace rf;

TEST(TuneAgreement, WrongVariantsAreNamedAndCloseOnesKept) {
    ArenaScope arena;
    auto c = compile_source("size R = 4, C = 8\ninput X[R, C] : f32\n"
                            "m[r] = max(c: X[r,c])\ni[r] = argmax(c: X[r,c])\noutput m : bf16\noutput i\n",
                            "agree.rf", {});
    std::map<std::string, Tensor> ref;
    ref["m"] = Tensor::filled({4}, 1.5, DType::bf16);
    ref["i"] = Tensor::filled({4}, 3, DType::i64);
    EXPECT_EQ(outputs_disagree(c->program, ref, ref), "");
    auto near = ref;
    near["m"].data[2] = 1.5 * (1 + 1e-3);  // within bf16 rounding (2^-8)
    EXPECT_EQ(outputs_disagree(c->program, near, ref), "");
    auto wrong = ref;
    wrong["m"].data[0] = 2.5;
    EXPECT_EQ(outputs_disagree(c->program, wrong, ref), " m");
    auto index = ref;
    index["i"].data[3] = 4;  // an index is compared exactly
    EXPECT_EQ(outputs_disagree(c->program, index, ref), " i");
    wrong["i"] = index["i"];
    EXPECT_EQ(outputs_disagree(c->program, wrong, ref), " m i");
}
