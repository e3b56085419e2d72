/** \file cpu_examples_test.cpp
 * Every example through the CPU backend (generated C++, JIT-compiled) against the float64 reference:
 * four size sets (defaults, ones, primes, 2v+1), each float dtype the spec can be declared with,
 * and schedules that force tails (tile 3), several segments merged with the derived merge, and the
 * unfused plan; sizes where the planner itself chooses the incremental and the multi-segment
 * strategies, selections on inputs with many ties, and the plan interpreter's stability inputs
 * (tests/unit/MergeCases.h). Outputs are poisoned (NaN) before every run, so an element nobody
 * writes fails.
 */
#include <gtest/gtest.h>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "../MergeCases.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <sstream>

#include "driver/Compiler.h"
#include "driver/Run.h"
#include "runtime/HostCpu.h"
#include "support/Error.h"

using namespace rf;

namespace {

using test::read_text;
using test::next_prime;
std::vector<std::filesystem::path> examples() { return test::example_paths(); }
std::string read(const std::filesystem::path &p) { return read_text(p); }
std::map<std::string, int64_t> variant(const Program &p, const std::function<int64_t(int64_t)> &f) { return test::size_variant(p, f); }

/** The spec with every bf16/f16/f32 input and output declared as `to` (quantized types kept). */
std::string with_float_dtype(const std::string &src, const std::string &to) {
    std::regex decl(R"(^((input|output)\b[^\n#]*:\s*)(bf16|f16|f32)\b)", std::regex::multiline);
    return std::regex_replace(src, decl, "$1" + to);
}

struct Case {
    std::string name;
    std::string source;
    std::map<std::string, int64_t> sizes;
    RunOptions opts;
};

void run_case(const std::filesystem::path &path, const std::string &source, RunOptions o) { test::check_run(path, source, o, "cpu", {21, 22}); }

/** The planner-chosen strategies' sizes stay below this many tensor elements (the reference run). */
constexpr double kCpuPlannedElements = 3e6;

}  // namespace

class CpuExamples : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(CpuExamples, SizeSetsAgainstTheReference) {
    const auto &path = GetParam();
    std::string src = read(path);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    std::vector<std::map<std::string, int64_t>> sets{{},
                                                     variant(c->program, [](int64_t) { return 1; }),
                                                     variant(c->program, [](int64_t v) { return next_prime(v + 2); }),
                                                     variant(c->program, [](int64_t v) { return 2 * v + 1; })};
    for (const auto &s : sets) {
        RunOptions o;
        o.sizes = s;
        run_case(path, src, o);
    }
}

TEST_P(CpuExamples, EveryFloatDtype) {
    const auto &path = GetParam();
    std::string src = read(path);
    for (const char *dt : {"f32", "bf16"}) {
        std::string v = with_float_dtype(src, dt);
        if (v == src) continue;
        SCOPED_TRACE(dt);
        run_case(path, v, {});
    }
}

TEST_P(CpuExamples, TailsSegmentsAndTheUnfusedPlan) {
    const auto &path = GetParam();
    std::string src = read(path);
    ArenaScope arena;
    auto c = compile_source(src, path.string(), {});
    RunOptions tails;
    tails.tile = 3;
    tails.segments = 3;
    tails.row_block = 4;
    tails.sizes = variant(c->program, [](int64_t v) { return next_prime(v + 2); });
    run_case(path, src, tails);
    RunOptions single;
    single.tile = 1;
    single.row_block = 3;
    run_case(path, src, single);
    RunOptions unfused;
    unfused.unfused = true;
    run_case(path, src, unfused);
}

// The GEMM-shaped examples through the AMX tile GEMMs (redfuse_simd_amx.h) on the software model of
// the tile instructions (-DRFK_AMX_EMULATE through REDFUSE_JIT_FLAGS, read at compile time): the
// generated kernels' calls, scratch and threads with the AMX path, at sizes with tiles of 16+ rows
// and K tails. On an AMX CPU the JIT compiles the real instructions and every CPU test runs them.
TEST(CpuBackend, AmxEmulatedTileGemmsAgainstTheReference) {
    const CpuFeatures &cpu = host_cpu();
    if (!cpu.avx512f || !cpu.avx512bw || !cpu.avx512vl || !cpu.avx512_bf16 || !cpu.avx512_vnni)
        GTEST_SKIP() << "the AMX path sits on AVX512_BF16 and VNNI, which this CPU lacks";
    const char *old = std::getenv("REDFUSE_JIT_FLAGS");
    std::string saved = old ? old : "";
    ::setenv("REDFUSE_JIT_FLAGS", "-DRFK_AMX_EMULATE", 1);
    std::vector<std::pair<std::string, std::map<std::string, int64_t>>> cases{
        {"attention", {{"B", 1}, {"H", 2}, {"M", 67}, {"N", 133}, {"D", 40}}},
        {"attention_causal", {{"B", 1}, {"H", 2}, {"N", 100}, {"D", 64}}},
        {"rmsnorm_gemm", {{"M", 70}, {"N", 90}, {"K", 300}}},
        {"quant_gemm_int8", {{"M", 40}, {"N", 50}, {"K", 200}}},
        {"linear_cross_entropy", {{"T", 40}, {"D", 96}, {"V", 300}}}};
    for (const auto &[name, sizes] : cases) {
        std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (name + ".rf");
        RunOptions o;
        o.sizes = sizes;
        SCOPED_TRACE(name);
        run_case(path, read(path), o);
    }
    if (old) ::setenv("REDFUSE_JIT_FLAGS", saved.c_str(), 1);
    else ::unsetenv("REDFUSE_JIT_FLAGS");
}

TEST(CpuBackend, SharedRescaleFactorsAgainstTheReference) {
    // Multiplicative members sharing one rescale factor per row (tile IR plan_shared_rescales):
    // with l, without l (two members over E columns), and with a per-column δ (no sharing); on
    // the element-wise update path (tanh(V), V·V: no GEMM), with tails, segments and row blocks.
    const char *head = "size R = 5, C = 37, E = 3\ninput X[R, C] : f32\ninput V[C, E] : f32\nm[r] = max(c: X[r, c])\n";
    std::vector<std::pair<std::string, std::string>> specs{
        {"with_l", std::string(head) + "l[r] = sum(c: exp(X[r, c] - m[r]))\n"
                                        "O[r, e] = sum(c: exp(X[r, c] - m[r]) * tanh(V[c, e])) / l[r]\noutput O\n"},
        {"two_members", std::string(head) + "O[r, e] = sum(c: exp(X[r, c] - m[r]) * tanh(V[c, e]))\n"
                                             "P[r, e] = sum(c: exp(X[r, c] - m[r]) * V[c, e] * V[c, e])\noutput O\noutput P\n"},
        {"per_column_delta", "size R = 5, C = 37, E = 3\ninput X[R, C, E] : f32\nm[r, e] = max(c: X[r, c, e])\n"
                             "O[r, e] = sum(c: exp(X[r, c, e] - m[r, e]) * X[r, c, e])\noutput O\n"}};
    for (const auto &[name, src] : specs) {
        RunOptions tails;
        tails.tile = 16;
        tails.segments = 3;
        tails.row_block = 3;
        tails.sizes = {{"R", 7}, {"C", 300}, {"E", 5}};
        run_case(name + ".rf", src, tails);
        RunOptions single;
        single.tile = 1;
        run_case(name + ".rf", src, single);
    }
}

// Sizes where the planner itself (for a 2-worker CPU with 256 KiB of L2: tests/unit/MergeCases.h)
// chooses the strategy, asserted on the plan and the kernels: one online pass with running
// rescales over many tiles, and the axis split into segments merged with the derived merge.
TEST_P(CpuExamples, PlannerChosenIncremental) {
    test::planned_strategy_case(GetParam(), TargetKind::Cpu, Strategy::Incremental, kCpuPlannedElements, {23});
}

TEST_P(CpuExamples, PlannerChosenMultiSegment) {
    test::planned_strategy_case(GetParam(), TargetKind::Cpu, Strategy::MultiSegment, kCpuPlannedElements, {23});
}

INSTANTIATE_TEST_SUITE_P(Examples, CpuExamples, ::testing::ValuesIn(examples()),
                         [](const ::testing::TestParamInfo<std::filesystem::path> &i) { return i.param.stem().string(); });

TEST(CpuBackend, WithFloatDtypeRewritesOnlyFloatDeclarations) {
    std::string src = "input X[R, C] : bf16\ninput W[N] : f8e4m3\noutput Y : bf16  # f32\n";
    EXPECT_EQ(with_float_dtype(src, "f32"), "input X[R, C] : f32\ninput W[N] : f8e4m3\noutput Y : f32  # f32\n");
}

TEST(CpuBackend, PlannerChosenStrategiesCoverTheExamples) {
    test::expect_planned_sizes_cover_the_examples(TargetKind::Cpu, kCpuPlannedElements);
}

TEST(CpuBackend, SelectionTiesGoToTheLowestIndex) { test::check_ties("cpu", {24}); }

TEST(CpuBackend, StabilityInputsOfThePlanInterpreter) { test::check_stability("cpu", {25}); }
