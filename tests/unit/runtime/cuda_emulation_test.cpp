/** \file cuda_emulation_test.cpp
 * Every example's generated CUDA run on the host emulator (CudaEmuDevice.h: the kernels compiled by
 * the host compiler, CUDA threads as fibers, warp shuffles, the tensor-core GEMM's PTX from the PTX
 * ISA) against the float64 reference, at awkward sizes, at the block, warp and thread fusion levels,
 * at sizes where the planner itself chooses the incremental and the multi-segment strategies, on
 * selections with many ties and on the plan interpreter's stability inputs (tests/unit/MergeCases.h);
 * and mistakes injected into generated sources that the emulator must catch.
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "../MergeCases.h"
#include "../NonFiniteRouting.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "CudaEmuDevice.h"
#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "driver/Run.h"
#include "grad/Grad.h"
#include "spec/Frontend.h"
#include "support/Error.h"

using namespace rf;

namespace {

/** One run on the emulated CUDA device, checked against the float64 reference (as the OpenCL suite
 *  does); an emulator error (deadlock, divergent barrier, race) fails it too. */
void run_case(const std::filesystem::path &path, const std::string &source, RunOptions o) { test::check_run(path, source, o, "cuda", {31}); }

/** The planner-chosen strategies' sizes stay below this many tensor elements (emulated threads). */
constexpr double kCudaPlannedElements = 1e6;

}  // namespace

class CudaEmulatedExamples : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(CudaEmulatedExamples, AgainstTheReference) {
    const auto &path = GetParam();
    std::string src = test::read_text(path);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    auto odd = test::size_variant(c->program, [](int64_t v) { return 2 * v + 1; });
    test::ScopedCudaEmulation emu;
    RunOptions o;
    o.sizes = odd;
    o.fusion_level = FusionLevel::Block;
    run_case(path, src, o);
    // Forced schedule: short tiles with tails, segments merged across blocks, row blocks of 3.
    o.tile = 3;
    o.segments = 3;
    o.row_block = 3;
    run_case(path, src, o);
    // Warp level: one row per warp, shuffle butterflies, __syncwarp, warps past the last row return.
    o = RunOptions{};
    o.sizes = odd;
    o.fusion_level = FusionLevel::Warp;
    o.segments = 2;
    o.tile = 7;
    run_case(path, src, o);
    // The tile GEMMs without tensor cores (the printer's SIMT GEMM) on the example that has most.
    if (path.stem() == "attention") {
        o = RunOptions{};
        o.sizes = odd;
        o.fusion_level = FusionLevel::Block;
        o.no_tensor_cores = true;
        run_case(path, src, o);
    }
    // Thread level: a state per thread, segments merged in the second launch.
    o = RunOptions{};
    o.sizes = odd;
    o.fusion_level = FusionLevel::Thread;
    o.segments = 4;
    o.tile = 5;
    run_case(path, src, o);
}

// Sizes where the planner itself (the cost model's GPU) chooses the strategy, asserted on the plan
// and the kernels (tests/unit/MergeCases.h); the emulator runs threads as fibers, so only sizes up
// to kCudaPlannedElements.
TEST_P(CudaEmulatedExamples, PlannerChosenIncremental) {
    test::ScopedCudaEmulation emu;
    test::planned_strategy_case(GetParam(), TargetKind::Cuda, Strategy::Incremental, kCudaPlannedElements, {36});
}

TEST_P(CudaEmulatedExamples, PlannerChosenMultiSegment) {
    test::ScopedCudaEmulation emu;
    test::planned_strategy_case(GetParam(), TargetKind::Cuda, Strategy::MultiSegment, kCudaPlannedElements, {36});
}

TEST(CudaEmulator, PlannerChosenStrategiesCoverTheExamples) {
    test::expect_planned_sizes_cover_the_examples(TargetKind::Cuda, kCudaPlannedElements);
}

TEST(CudaEmulator, SelectionTiesGoToTheLowestIndex) {
    test::ScopedCudaEmulation emu;
    test::check_ties("cuda", {37});
}

TEST(CudaEmulator, CompanionSumsAtRowBlocksAndSegments) {
    // The softmax sum s gets its tile sums from the entropy's loop (src/tile/LowerCompanions.cpp):
    // block level with rows per group and merged segments, and warp level.
    auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "masked_entropy.rf";
    test::ScopedCudaEmulation emu;
    RunOptions o;
    o.fusion_level = FusionLevel::Block;
    o.tile = 128;
    o.segments = 3;
    o.row_block = 4;
    test::check_run(path, test::read_text(path), o, "cuda", {1, 2});
    o = RunOptions{};
    o.fusion_level = FusionLevel::Warp;
    o.tile = 64;
    o.segments = 2;
    test::check_run(path, test::read_text(path), o, "cuda", {3});
}

TEST(CudaEmulator, TransposedProloguesOfTheAttentionBackward) {
    // S = QKᵀ and dP = dO·Vᵀ computed per tile in the dQ chain and, transposed, in the dK/dV chain
    // (src/tile/LowerPlan.cpp, prologue_slots), at block and warp level, with row blocks and tails.
    for (const char *name : {"attention", "attention_causal"}) {
        auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (std::string(name) + ".rf");
        ArenaScope arena;
        std::string bwd = derive_backward(parse_program(test::read_text(path), path.string()), {}).backward_spec;
        test::ScopedCudaEmulation emu;
        RunOptions o;
        o.fusion_level = FusionLevel::Block;
        test::check_run(std::string(name) + "_backward.rf", bwd, o, "cuda", {1});
        o.tile = 4;
        o.row_block = 3;
        test::check_run(std::string(name) + "_backward.rf", bwd, o, "cuda", {2});
        o = RunOptions{};
        o.fusion_level = FusionLevel::Warp;
        test::check_run(std::string(name) + "_backward.rf", bwd, o, "cuda", {3});
    }
}

TEST(CudaEmulator, StabilityInputsOfThePlanInterpreter) {
    test::ScopedCudaEmulation emu;
    test::check_stability("cuda", {38});
}

INSTANTIATE_TEST_SUITE_P(All, CudaEmulatedExamples, ::testing::ValuesIn(test::example_paths()),
                         [](const auto &info) { return info.param.stem().string(); });

namespace {

/** A deliberate mistake in the generated source that the emulator must catch. */
struct Mistake {
    const char *what;
    const char *example;
    std::map<std::string, int64_t> sizes;
    const char *level;
    std::function<int(std::string &)> apply;  ///< returns how many places it changed (> 0)
    const char *expect;                       ///< in the emulator's error; empty: a failed check
};

int replace_all(std::string &s, const std::string &from, const std::string &to) {
    int n = 0;
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size(), n++) s.replace(at, from.size(), to);
    return n;
}

int regex_replace_all(std::string &s, const std::string &re, const std::string &to) {
    std::regex r(re);
    int n = static_cast<int>(std::distance(std::sregex_iterator(s.begin(), s.end(), r), std::sregex_iterator()));
    s = std::regex_replace(s, r, to);
    return n;
}

}  // namespace

/** Mistakes of the kinds the emulator exists for, injected into the generated source: each must make
 *  the run fail, by a wrong result against the reference or by an emulator error. */
// MoE routing with NaN and infinite logits: the rows whose δ is not finite rank the spec's values
// (LowerMerge.cpp literal_topk), at every fusion level.
TEST(CudaEmulator, TopKRanksTheSpecsValuesWhereDeltaIsNotFinite) {
    test::ScopedCudaEmulation emu;
    for (FusionLevel level : {FusionLevel::Block, FusionLevel::Warp, FusionLevel::Thread})
        test::check_moe_routing_with_non_finite_logits(37, "cuda", {0}, level);
}

TEST(CudaEmulator, CatchesInjectedMistakes) {
    std::vector<Mistake> mistakes{
        {"warp shuffle butterfly without offset 1", "softmax", {{"R", 3}, {"C", 1000}}, "block",
         [](std::string &s) { return replace_all(s, "o_ > 0; o_ >>= 1", "o_ > 1; o_ >>= 1"); }, ""},
        {"barrier between the warps' partials and their sum dropped", "softmax", {{"R", 3}, {"C", 1000}}, "block",
         [](std::string &s) { return regex_replace_all(s, R"((rf_red\[RF_LID >> 5\] = [^;]*;\s*)RF_BARRIER\(\);)", "$1"); }, ""},
        {"__syncwarp dropped (warp level)", "softmax", {{"R", 5}, {"C", 1000}}, "warp",
         [](std::string &s) { return replace_all(s, "__syncwarp();", ";"); }, ""},
        {"barrier in divergent code", "softmax", {{"R", 3}, {"C", 100}}, "block",
         [](std::string &s) { return replace_all(s, "RF_BARRIER();\n", "if (RF_LID != 37) RF_BARRIER();\n"); }, "__syncthreads"},
        {"a lane leaves before a shuffle (warp level)", "softmax", {{"R", 5}, {"C", 100}}, "warp",
         [](std::string &s) { return regex_replace_all(s, R"(if \(w_ >= ([^;]*)\) return;)", "if (w_ >= $1 || rf_lane == 31) return;"); },
         "deadlock"},
        {"vector loads without the alignment test", "softmax", {{"R", 3}, {"C", 101}}, "block",
         [](std::string &s) { return replace_all(s, "& 15) == 0)", "& 15) >= 0)"); }, "misaligned"},
        {"tensor-core GEMM: the barrier before a chunk's use dropped", "attention", {}, "block",
         [](std::string &s) {
             return replace_all(s, "rf_gemm_ptx::cp_async_wait<kStages - 2>();\n                    __syncthreads();",
                                "rf_gemm_ptx::cp_async_wait<kStages - 2>();");
         },
         "race"},
    };
    for (const Mistake &m : mistakes) {
        SCOPED_TRACE(m.what);
        std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (std::string(m.example) + ".rf");
        std::string src = test::read_text(path);
        ArenaScope arena;
        auto c = compile_source(src, path.string(), {});
        int applied = 0;
        test::CudaEmuOptions eo;
        eo.mutate_source = [&](std::string &s) { applied += m.apply(s); };
        test::ScopedCudaEmulation emu(eo);
        RunOptions o;
        o.target = TargetKind::Cuda;
        o.check = true;
        o.seed = 31;
        o.sizes = m.sizes;
        o.fusion_level = parse_fusion_level(m.level);
        std::string error;
        bool ok = true;
        try {
            ok = run_compiled(*c, o).ok;
        } catch (const std::exception &e) {
            error = e.what();
            ok = false;
        }
        EXPECT_GT(applied, 0) << "the mistake matched nothing in the generated source";
        EXPECT_FALSE(ok) << "not caught";
        if (*m.expect) EXPECT_NE(error.find(m.expect), std::string::npos) << error;
        else EXPECT_EQ(error, "") << "a wrong result was expected, not an emulator error";
    }
}

namespace rf {
namespace {

/** The Kernel's device-memory path on the emulated device: dense views of "device" memory (host
 *  memory standing in for it) used in place, the launches queued on the caller's stream; host
 *  buffers on the same kernel go through copies; a stream with host buffers is refused. */
TEST(CudaEmulatedKernel, DeviceViewsRunInPlaceOnTheCallersStream) {
    std::vector<void *> streams;
    test::CudaEmuOptions eo;
    eo.on_set_stream = [&](void *s) { streams.push_back(s); };
    test::ScopedCudaEmulation emu(eo);
    ArenaScope arena;
    Kernel k = compile(std::string(REDFUSE_SOURCE_DIR) + "/examples/softmax.rf", make_target(TargetKind::Cuda));
    EXPECT_TRUE(k.target().gpu.from_device);
    const int64_t R = 5, C = 300;
    std::vector<float> x(R * C), y_dev(R * C, NAN), y_host(R * C, NAN);
    for (size_t i = 0; i < x.size(); i++) x[i] = std::sin(0.37 * double(i)) * 4;
    int fake_stream = 0;
    k({{x.data(), DType::f32, {R, C}, {}, MemorySpace::Cuda}}, {{y_dev.data(), DType::f32, {R, C}, {}, MemorySpace::Cuda}}, &fake_stream);
    ASSERT_FALSE(streams.empty());
    EXPECT_EQ(streams.front(), &fake_stream);
    k({{x.data(), DType::f32, {R, C}}}, {{y_host.data(), DType::f32, {R, C}}});
    for (int64_t r = 0; r < R; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++) m = std::max(m, double(x[r * C + c]));
        for (int64_t c = 0; c < C; c++) s += std::exp(double(x[r * C + c]) - m);
        for (int64_t c = 0; c < C; c++) {
            EXPECT_NEAR(y_dev[r * C + c], std::exp(double(x[r * C + c]) - m) / s, 1e-5);
            EXPECT_EQ(y_dev[r * C + c], y_host[r * C + c]);
        }
    }
    EXPECT_THROW(k({{x.data(), DType::f32, {R, C}}}, {{y_host.data(), DType::f32, {R, C}}}, &fake_stream), ArgumentError);
    EXPECT_THROW(k({{x.data(), DType::f32, {R, C}, {}, MemorySpace::Cuda}}, {{y_host.data(), DType::f32, {R, C}}}), ArgumentError);
    EXPECT_THROW(k({{x.data(), DType::f32, {C, R}, {1, C}, MemorySpace::Cuda}}, {{y_dev.data(), DType::f32, {C, R}, {}, MemorySpace::Cuda}}),
                 ArgumentError);
}

}  // namespace
}  // namespace rf
