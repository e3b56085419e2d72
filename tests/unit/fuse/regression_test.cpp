/** \file regression_test.cpp
 * Inputs the analysis fuzzer (fuzz/fuzz_analyze.cpp) found, kept so they stay fixed.
 */
#include "FuseTestUtil.h"

using namespace rf;

TEST(FuzzRegression, ZeroExtentInnerAxisIsAUserErrorNotACrash) {
    // A nested reduction over an axis of extent 0 reading an earlier member crashed the unrolling.
    ArenaScope arena;
    const char *src = R"(
size S = 3, N = 29
input w[S, N] : f32
input P[S, N, 0] : f32
W[s]   = sum(n: w[s,n])
c[s,a] = sum(n: w[s,n] * P[s,n,a]) / W[s]
I[s]   = sum(n: w[s,n] * sum(a: (P[s,n,a] - c[s,a]) * (P[s,n,a] - c[s,a])))
output I
)";
    EXPECT_THROW(test::compile(src), UserError);
}
