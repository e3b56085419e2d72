/** \file cpu_selected_values_test.cpp
 * The value a CPU selection keeps (arg-max/min, top-k; CpuKernelPrinter.cpp selected_value, LowerLanes.cpp
 * lanes_topk) is the element computed in the compute type, as every vectorized pass computes it: kept
 * in float64, a top-k value rounded to its f32 output one ulp away from the same element recomputed
 * in float, and `f(X) >= TV[r,0]` failed on the row's own maximum (scripts/fuzz_specs.py seed 1204
 * #53; tests/specs/selected_value_recomputed.rf).
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"

using namespace rf;

namespace {

std::filesystem::path spec() {
    return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "selected_value_recomputed.rf";
}

}  // namespace

TEST(CpuSelectedValues, ARecomputedElementReachesTheKeptValue) {
    const std::string src = test::read_text(spec());
    // One-row blocks (the lanes insertion), short and long rows, one thread, tiles of one, segments.
    for (auto [R, C] : {std::pair<int64_t, int64_t>{64, 5}, {17, 2}, {1, 9}, {33, 700}, {3, 5000}}) {
        RunOptions o;
        o.sizes = {{"R", R}, {"C", C}};
        test::check_run(spec(), src, o, "cpu", {7, 53});
        o.threads = 1;
        o.tile = 1;
        test::check_run(spec(), src, o, "cpu", {8});
        o.tile = 0;
        o.segments = 3;
        test::check_run(spec(), src, o, "cpu", {9});
    }
}

TEST(CpuSelectedValues, TheUnfusedPlanToo) {
    RunOptions o;
    o.unfused = true;
    o.sizes = {{"R", 40}, {"C", 300}};
    test::check_run(spec(), test::read_text(spec()), o, "cpu", {3, 4});
}
