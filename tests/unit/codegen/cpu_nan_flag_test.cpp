/** \file cpu_nan_flag_test.cpp
 * The NaN flag of the CPU's vector max/min loops (src/codegen/CpuKernelPrinter.cpp print_accum): a vector
 * max ignores NaN, so a flag per loop remembers one. It is a select under `reduction(max:)`: GCC 12.2
 * at -O3 with AVX-512 and -fno-trapping-math left garbage in an OR-reduced `flag |= (v != v)` of a
 * nested select, and every row came out NaN (scripts/fuzz_specs.py seed 12 #89).
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "driver/Compiler.h"

using namespace rf;

namespace {

const char *kSpec = "size R = 8, C = 64\ninput X[R, C] : f32\ninput W[C] : f32\n"
                    "ia[r] = argmax(c: X[r,c])\n"
                    "ga[r] = max(c: select(c <= ia[r], select(W[c] > 0, X[r,c], -inf), -inf))\noutput ga\n";

}  // namespace

TEST(CpuNanFlag, IsASelectUnderAMaxReduction) {
    ArenaScope arena;
    auto c = analyze_source(kSpec, "nan_flag.rf", make_target(TargetKind::Cpu), {});
    std::string cpp = generate(*c).source;
    EXPECT_EQ(cpp.find("reduction(|:"), std::string::npos);
    EXPECT_NE(cpp.find("_nan = (v_ != v_) ? 1 : "), std::string::npos);
}

TEST(CpuNanFlag, MaskedMaxUpToAnArgmaxRunsRight) {
    for (int64_t C : {64, 300}) {
        RunOptions o;
        o.sizes = {{"C", C}};
        test::check_run("nan_flag.rf", kSpec, o, "cpu", {1, 89});
        o.segments = 2;
        test::check_run("nan_flag.rf", kSpec, o, "cpu", {2});
    }
}

TEST(CpuNanFlag, ANaNStillPropagates) {
    // The flag's job: a NaN among the maximum's operands gives NaN, as the reference does (0 / 0 is 0
    // and inf - inf is inf in the language: the NaN is inf * 0).
    const char *src = "size R = 3, C = 40\ninput X[R, C] : f32\n"
                      "m[r] = max(c: select(c == 7, X[r,c] / 0 * 0, X[r,c]))\noutput m\n";
    RunOptions o;
    test::check_run("nan_max.rf", src, o, "cpu", {1});
}
