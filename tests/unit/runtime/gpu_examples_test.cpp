/** \file gpu_examples_test.cpp
 * Every example through the GPU backends without a GPU: the OpenCL C kernels run on PoCL (the CPU)
 * against the float64 reference at awkward sizes and with forced schedules (tails, segments merged
 * with the derived merge, row blocks, the unfused plan, two work-group sizes, states per thread and per warp),
 * at sizes where the planner itself chooses the incremental and the multi-segment strategies, on
 * selections with many ties and on the plan interpreter's stability inputs (tests/unit/MergeCases.h); the CUDA kernels are
 * compiled to cubins for sm_80 and sm_90a with NVRTC, must not spill, and their register and shared
 * memory report is kept as a golden summary (tests/golden/cuda/ptxas.txt; REDFUSE_UPDATE_GOLDEN=1
 * rewrites it).
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "../MergeCases.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "driver/Compiler.h"
#include "driver/Run.h"
#include "../GenerateFor.h"
#include "fuse/Plan.h"
#include "runtime/CudaRuntime.h"
#include "runtime/GpuBackend.h"
#include "runtime/OpenCLRuntime.h"
#include "support/Error.h"

using namespace rf;

namespace {

void run_case(const std::filesystem::path &path, const std::string &source, RunOptions o) { test::check_run(path, source, o, "opencl", {31}); }

/** The planner-chosen strategies' sizes stay below this many tensor elements (the reference run). */
constexpr double kGpuPlannedElements = 8e6;

}  // namespace

class OpenCLExamples : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(OpenCLExamples, AgainstTheReferenceOnPoCL) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    const auto &path = GetParam();
    std::string src = test::read_text(path);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    // Sizes that are not multiples of anything, and all ones.
    std::vector<std::map<std::string, int64_t>> sets{{},
                                                     test::size_variant(c->program, [](int64_t) { return 1; }),
                                                     test::size_variant(c->program, [](int64_t v) { return 2 * v + 1; })};
    for (const auto &s : sets) {
        RunOptions o;
        o.sizes = s;
        run_case(path, src, o);
    }
    // Forced schedules on the 2v+1 sizes: short tiles with tails and several segments (the derived
    // merge across work-groups), row blocks of 3 spread over threads, the unfused plan, and a
    // work-group of 32 (every tree level and stride path with another width).
    RunOptions o;
    o.sizes = sets[2];
    o.tile = 3;
    o.segments = 3;
    o.row_block = 3;
    run_case(path, src, o);
    o = RunOptions{};
    o.sizes = sets[2];
    o.unfused = true;
    o.gpu_threads = 32;
    run_case(path, src, o);
    // Fusion level "thread": a running state per thread over its segment of the axis, the segments
    // merged with the derived merge in the second launch.
    o = RunOptions{};
    o.sizes = sets[2];
    o.fusion_level = FusionLevel::Thread;
    o.segments = 4;
    o.tile = 5;
    run_case(path, src, o);
    // Fusion level "warp" (on PoCL a work-group of 32): two segments, short tiles.
    o = RunOptions{};
    o.sizes = sets[2];
    o.fusion_level = FusionLevel::Warp;
    o.segments = 2;
    o.tile = 7;
    run_case(path, src, o);
}

// Sizes where the planner itself (the cost model's GPU) chooses the strategy, asserted on the plan
// and the kernels (tests/unit/MergeCases.h).
TEST_P(OpenCLExamples, PlannerChosenIncremental) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    test::planned_strategy_case(GetParam(), TargetKind::OpenCL, Strategy::Incremental, kGpuPlannedElements, {33});
}

TEST_P(OpenCLExamples, PlannerChosenMultiSegment) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    test::planned_strategy_case(GetParam(), TargetKind::OpenCL, Strategy::MultiSegment, kGpuPlannedElements, {33});
}

INSTANTIATE_TEST_SUITE_P(All, OpenCLExamples, ::testing::ValuesIn(test::example_paths()),
                         [](const auto &info) { return info.param.stem().string(); });

TEST(OpenCLFuzzFindings, PerRowScalarsStoredInTurn) {
    // scripts/fuzz_specs.py seed 5 #7: the per-row mean and variance are stored by two loops of
    // one iteration, each spread over the work-group and followed by a barrier; PoCL 3.1 dropped the
    // second store (every v NaN at block, warp and thread level). Such loops are now one round
    // without a loop (GpuSpread.cpp). Single kernel (C ≤ 1024: on chip) and segments (C = 2048).
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    std::string src = "size R = 17, C = 1025\ninput X[R, C] : bf16\ninput W[C] : f32\nm[r] = min(c: X[r,c] * W[c])\n"
                      "mu[r] = sum(c: X[r,c]) / C\nv[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C\n"
                      "Y[r,c] = (X[r,c] - mu[r]) * rsqrt(v[r] + 1e-5) * W[c]\noutput m, mu, v, Y\n";
    for (int64_t C : {100, 1025, 2048})
        for (const char *level : {"block", "warp", "thread"}) {
            RunOptions o;
            o.sizes = {{"R", 17}, {"C", C}};
            o.fusion_level = parse_fusion_level(level);
            run_case("fuzz5_7.rf", src, o);
        }
}

TEST(OpenCLFuzzFindings, MaskedTopKRunsOneBodyPerTile) {
    // scripts/fuzz_specs.py seed 1205 #91: a top-k over a causal mask. With skip-masked's branch per
    // tile (unmasked / masked, work-group barriers inside both) PoCL inserted nothing into row 0's
    // list (TV[0] = 0, fused and unfused); OpenCL now runs the masked body on every tile.
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    std::string src = "size R = 5, C = 2, K\ninput X[R, C] : f32\n"
                      "TV[r,k], TI[r,k] = topk(c, K: select(c <= r, X[r,c], -inf))\n"
                      "output TI : i64\noutput TV\n";
    for (int64_t C : {2, 9})
        for (bool unfused : {false, true}) {
            RunOptions o;
            o.sizes = {{"R", 5}, {"C", C}, {"K", 1}};
            o.unfused = unfused;
            run_case("fuzz1205_91.rf", src, o);
        }
}

TEST(OpenCLFuzzFindings, AScalarSumBesideRowMembersIsInitialised) {
    // scripts/fuzz_specs.py seed 1218 #27: tw = Σ W² next to per-row members, rows spread over
    // groups of threads; PoCL 3.1 dropped the first thread's initialisation of tw's state at the
    // start of the grouped round (tw = 0, sc 500x off) at 64 threads and more. A barrier now opens
    // the round (GpuSpread.cpp, grouped_rows).
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    const std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "grouped_scalar_sum.rf";
    const std::string src = test::read_text(path);
    for (int threads : {64, 128})
        for (const char *level : {"block", "thread"}) {
            RunOptions o;
            o.gpu_threads = threads;
            o.fusion_level = parse_fusion_level(level);
            run_case(path, src, o);
        }
}

TEST(OpenCLFuzzFindings, ATopKBesideARowMaximumIsWritten) {
    // scripts/fuzz_specs.py seed 1255 #149: a row maximum and a top-k in one chain with a row block
    // of 2 or more; with the grouped rounds' barrier at each round's start PoCL 3.1 read the top-k
    // lists back empty (TV, TI all 0). The barrier now stands before the rounds (GpuSpread.cpp,
    // grouped_rows).
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    const std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "topk_beside_row_max.rf";
    const std::string src = test::read_text(path);
    for (int64_t rows : {2, 5, 8})
        for (int64_t row_block : {1, 2, 4}) {
            RunOptions o;
            o.sizes = {{"R", rows}, {"C", 4}, {"K", 3}};
            o.row_block = row_block;
            run_case(path, src, o);
        }
}

TEST(OpenCLBackend, PlannerChosenStrategiesCoverTheExamples) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    test::expect_planned_sizes_cover_the_examples(TargetKind::OpenCL, kGpuPlannedElements);
}

TEST(OpenCLBackend, SelectionTiesGoToTheLowestIndex) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    test::check_ties("opencl", {34});
}

TEST(OpenCLBackend, StabilityInputsOfThePlanInterpreter) {
    if (std::string why = ocl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    test::check_stability("opencl", {35});
}

/** Every example's CUDA kernels, at its default sizes, compiled to machine code for sm_80 and
 *  sm_90a; no spills; the per-kernel register / shared memory summary matches the golden file. */
TEST(CudaCubins, EveryExampleCompilesWithoutSpills) {
    if (std::string why = cuda::nvrtc_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    std::ostringstream summary;
    summary << "# kernel: registers, static shared bytes, stack bytes, spill stores/loads (ptxas -v via NVRTC)\n";
    std::string cache = (std::filesystem::temp_directory_path() / "redfuse-test-cubins").string();
    for (const auto &path : test::example_paths()) {
        ArenaScope arena;
        std::string text = test::read_text(path);
        // The default mapping for both architectures, and the other fusion levels (warp: one row
        // per warp, shuffles; thread: one row per thread) for sm_90a.
        for (auto [level, arch] : std::vector<std::pair<std::string, std::string>>{
                 {"auto", "sm_80"}, {"auto", "sm_90a"}, {"warp", "sm_90a"}, {"thread", "sm_90a"}}) {
            Options go;
            go.fusion_level = parse_fusion_level(level);
            GpuModule g = test::generate_gpu_for(text, path.string(), TargetKind::Cuda, go, arch);
            if (level != "auto") arch += "[" + level + "]";
            cuda::CompiledModule m;
            try {
                m = cuda::compile(g.source, arch.substr(0, arch.find('[')), cuda_compile_options(), cache);
            } catch (const std::exception &e) {
                ADD_FAILURE() << path.filename() << " " << arch << ": " << e.what();
                continue;
            }
            ASSERT_GT(m.cubin.size(), 4u);
            EXPECT_EQ(std::string(m.cubin.data() + 1, 3), "ELF");
            for (const GpuLaunch &l : g.launches) {
                auto it = m.kernels.find(l.kernel);
                if (it == m.kernels.end()) {
                    ADD_FAILURE() << path.filename() << " " << arch << ": no ptxas report for " << l.kernel;
                    continue;
                }
                const cuda::PtxasReport &r = it->second;
                EXPECT_EQ(r.spill_stores + r.spill_loads, 0) << path.filename() << " " << arch << " " << l.kernel << " spills";
                summary << path.stem().string() << " " << arch << " " << l.kernel << ": " << r.registers << " regs, " << r.shared_bytes
                        << " smem, " << r.stack_bytes << " stack, " << r.spill_stores << "/" << r.spill_loads << " spills\n";
            }
        }
    }
    std::filesystem::path golden = std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests/golden/cuda/ptxas.txt";
    if (std::getenv("REDFUSE_UPDATE_GOLDEN")) {
        std::filesystem::create_directories(golden.parent_path());
        std::ofstream(golden) << summary.str();
    }
    EXPECT_EQ(summary.str(), test::read_text(golden)) << "regenerate with REDFUSE_UPDATE_GOLDEN=1 after checking the change";
}
