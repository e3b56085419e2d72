/** \file plan_interp_test.cpp
 * The plan interpreter (`run --target interp`, src/interp/PlanInterp.cpp) as a backend like the
 * others (tests/unit/MergeCases.h): every example at sizes where the planner itself chooses the
 * incremental and the multi-segment strategies (asserted), selections on inputs with many ties
 * against the reference's lowest-index-wins order, and the stability inputs of
 * tests/unit/fuse/numerics_test.cpp through `run --check`, in float64 and float32.
 */
#include <gtest/gtest.h>

#include <iostream>

#include "../MergeCases.h"
#include "../NonFiniteRouting.h"

using namespace rf;

namespace {

/** The planner-chosen strategies' sizes stay below this many tensor elements: the plan
 *  interpreter and the reference both interpret every element (~0.5 s per million). Incremental
 *  plans of chains without a prologue need 528 rows of 12289 (the cost model's GPU: 4 rows per
 *  worker, a row beyond 48 KiB) and are left to the OpenCL suite; the interpreter's random
 *  tilings and merge trees rescale at every size anyway. */
constexpr double kInterpPlannedElements = 3e6;

}  // namespace

class PlanInterpExamples : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(PlanInterpExamples, PlannerChosenIncremental) {
    test::planned_strategy_case(GetParam(), TargetKind::Interp, Strategy::Incremental, kInterpPlannedElements, {41});
}

TEST_P(PlanInterpExamples, PlannerChosenMultiSegment) {
    test::planned_strategy_case(GetParam(), TargetKind::Interp, Strategy::MultiSegment, kInterpPlannedElements, {41});
}

INSTANTIATE_TEST_SUITE_P(All, PlanInterpExamples, ::testing::ValuesIn(test::example_paths()),
                         [](const auto &info) { return info.param.stem().string(); });

TEST(PlanInterp, PlannerChosenStrategiesCoverTheExamples) {
    test::expect_planned_sizes_cover_the_examples(TargetKind::Interp, kInterpPlannedElements);
}

TEST(PlanInterp, SelectionTiesGoToTheLowestIndex) { test::check_ties("interp", {42, 43}); }

// MoE routing with NaN and infinite logits: the rows whose δ is not finite rank the spec's values
// (write_outputs' literal top-k), in float64 and in float32.
TEST(PlanInterp, TopKRanksTheSpecsValuesWhereDeltaIsNotFinite) {
    for (const char *target : {"interp", "interp-f32"}) test::check_moe_routing_with_non_finite_logits(37, target, {0});
}

TEST(PlanInterp, StabilityInputs) {
    test::check_stability("interp", {44});
    test::check_stability("interp-f32", {45});
}

TEST(PlanInterp, AnIndicatorSumIsNotShiftedInFloat32) {
    // Σ select(c == ia, x, 0) is one term: exact in float32 unless shifted by its first term
    // (fuzz_specs.py seed 1255 #82: 1e-3 off relative over 300 columns). The float32 run must
    // match the float64 reference to its tolerance (6.9e-5 relative here).
    const std::filesystem::path path = test::spec_path("indicator_sum_at_argmax.rf");
    RunOptions o;
    o.sizes = {{"R", 17}, {"C", 300}};
    test::check_run(path, test::read_text(path), o, "interp-f32", {82, 83});
}

TEST(PlanInterp, ReferenceBreaksTiesByTheLowestIndex) {
    // The oracle of the tie checks: on `--dist ties` inputs the reference's argmax, argmin and top-k
    // indices are the first positions of the selected values, computed here by hand.
    ArenaScope arena;
    auto c = compile_file(test::spec_path("selection_ties.rf").string(), {});
    SizeBinding s = bind_sizes(c->program, {{"T", 4}, {"E", 301}});
    auto in = make_random_inputs(c->program, s, 7, InputDistribution::Ties);
    auto ref = run_reference(c->program, s, in);
    const Tensor &X = in.at("X");
    for (int64_t t = 0; t < 4; t++) {
        std::vector<std::pair<double, int64_t>> row;
        for (int64_t e = 0; e < 301; e++) row.push_back({X.at({t, e}), e});
        // Stable sorts: equal values keep increasing indices.
        auto desc = row, asc = row;
        std::stable_sort(desc.begin(), desc.end(), [](auto &x, auto &y) { return x.first > y.first; });
        std::stable_sort(asc.begin(), asc.end(), [](auto &x, auto &y) { return x.first < y.first; });
        EXPECT_EQ(ref.at("a").at({t}), desc[0].second);
        EXPECT_EQ(ref.at("j").at({t}), desc[0].second);
        EXPECT_EQ(ref.at("b").at({t}), desc[0].second);  // argmin of -exp(X): the first maximum
        EXPECT_EQ(ref.at("n").at({t}), asc[0].second);
        for (int64_t r = 0; r < 6; r++) EXPECT_EQ(ref.at("I").at({t, r}), desc[r].second) << t << " " << r;
        for (int64_t r = 0; r < 3; r++) EXPECT_EQ(ref.at("J").at({t, r}), asc[r].second) << t << " " << r;
        EXPECT_GT(std::count_if(row.begin(), row.end(), [&](auto &v) { return v.first == desc[0].first; }), 6)
            << "the inputs should tie";
    }
}
