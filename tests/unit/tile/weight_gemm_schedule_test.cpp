/** \file weight_gemm_schedule_test.cpp
 * The default schedule of weight GEMMs (src/tile/LowerPlan.cpp wide_extra_points): a chain member
 * with 1024 or more output columns per row (RMSNorm->GEMM's Y[m, n], quantization->GEMM) takes one
 * tile of the whole axis (up to 4096) and 128-row blocks; a prologue GEMM with a deep contraction
 * (linear + cross-entropy's logits over D >= 512) 128-row blocks; attention-shaped chains 64 x 256
 * on the CPU (128 rows with AMX, or with bf16 operands and no mask); an on-chip multi-pass chain's row block fits half of L2 (moment of inertia).
 * The kernels so scheduled agree with the reference.
 */
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path example(const std::string &name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }

std::string tile_text(const std::string &name, const std::map<std::string, int64_t> &sizes, int threads = 0,
                      const Target &target = make_target(TargetKind::Cpu), bool as_f32 = false) {
    Options o;
    o.sizes = sizes;
    o.threads = threads;
    std::string text = test::read_text(example(name));
    if (as_f32) text = std::regex_replace(text, std::regex(": bf16"), ": f32");
    auto c = analyze_source(text, name, target, o);
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(WeightGemmSchedule, WideOutputRowsTakeTheWholeAxisAndBigRowBlocks) {
    ArenaScope arena;
    for (const char *name : {"rmsnorm_gemm.rf", "quant_gemm_int8.rf"}) {
        std::string t = tile_text(name, {{"M", 2048}, {"N", 4096}, {"K", 4096}});
        EXPECT_NE(t.find("tile=4096 row_block=128"), std::string::npos) << name << "\n" << t;
        t = tile_text(name, {{"M", 2048}, {"N", 4096}, {"K", 1000}});
        EXPECT_NE(t.find("tile=1000 row_block=128"), std::string::npos) << name << "\n" << t;
        t = tile_text(name, {{"M", 2048}, {"N", 64}, {"K", 4096}});
        EXPECT_NE(t.find("tile=256 row_block=32"), std::string::npos) << name << " (narrow output)\n" << t;
    }
    // Attention-shaped chains (QKᵀ and P·V) take 64-row blocks on the CPU, 128 where AMX tiles run the GEMMs
    // and, without AMX, where every operand is bf16 and no mask makes the blocks' work unequal.
    for (bool amx : {false, true}) {
        Target cpu = make_target(TargetKind::Cpu);
        cpu.cpu.amx_bf16 = amx;
        const std::map<std::string, int64_t> sizes = {{"B", 1}, {"H", 8}, {"M", 2048}, {"N", 2048}, {"D", 128}};
        std::string attention = tile_text("attention.rf", sizes, 0, cpu);
        EXPECT_NE(attention.find("tile=256 row_block=128"), std::string::npos) << attention;
        std::string f32 = tile_text("attention.rf", sizes, 0, cpu, true);
        EXPECT_NE(f32.find(amx ? "tile=256 row_block=128" : "tile=256 row_block=64"), std::string::npos) << f32;
        std::string causal = tile_text("attention_causal.rf", {{"B", 1}, {"H", 8}, {"N", 2048}, {"D", 128}}, 0, cpu);
        EXPECT_NE(causal.find(amx ? "tile=256 row_block=128" : "tile=256 row_block=64"), std::string::npos) << causal;
    }
}

TEST(WeightGemmSchedule, OnchipPassesKeepTheirRowBlockInHalfOfL2) {
    // Moment of inertia reads w[s, n] and P[s, n, 0..2]: 16 bytes per point. Its member c[s, a] has an
    // extra axis, which takes 32-row blocks; its on-chip passes re-read the block's rows, so the block
    // is capped at half of L2 over the bytes of a row: N = 65536 (1 MiB a row) one row per block,
    // N = 4096 (64 KiB) 8 rows with 1 MiB of L2, N = 512 the 32 rows.
    ArenaScope arena;
    Target t = make_target(TargetKind::Cpu);
    t.cpu.l2_bytes = 1 << 20;
    auto schedule_of = [&](int64_t N) {
        Options o;
        o.sizes = {{"S", 256}, {"N", N}};
        auto c = analyze_source(test::read_text(example("moment_of_inertia.rf")), "moment_of_inertia.rf", t, o);
        return tile::to_string(generate(*c).module);
    };
    std::string big = schedule_of(65536), mid = schedule_of(4096), small = schedule_of(512);
    EXPECT_NE(big.find("strategy=onchip_multipass tile=256 row_block=1 "), std::string::npos) << big;
    EXPECT_NE(mid.find("strategy=onchip_multipass tile=256 row_block=8 "), std::string::npos) << mid;
    EXPECT_NE(small.find("strategy=onchip_multipass tile=256 row_block=32 "), std::string::npos) << small;
}

TEST(WeightGemmSchedule, RowsThatFitOneBlockStayOneBlock) {
    // M = 16 decode rows: one block of 16 (its GEMMs split their columns over the threads) instead of
    // two blocks of 8 that each stream the whole weight; 5 rows round up to 16; with many threads and
    // 200 rows the blocks still halve until every thread has one.
    ArenaScope arena;
    for (const char *name : {"rmsnorm_gemm.rf", "quant_gemm_int8.rf"}) {
        std::string t = tile_text(name, {{"M", 16}, {"N", 4096}, {"K", 4096}});
        EXPECT_NE(t.find("tile=4096 row_block=16 "), std::string::npos) << name << "\n" << t;
        t = tile_text(name, {{"M", 5}, {"N", 4096}, {"K", 4096}});
        EXPECT_NE(t.find("tile=4096 row_block=16 "), std::string::npos) << name << "\n" << t;
        t = tile_text(name, {{"M", 200}, {"N", 4096}, {"K", 4096}}, 16);
        EXPECT_NE(t.find("tile=4096 row_block=8 "), std::string::npos) << name << " (16 threads: 25 blocks)\n" << t;
    }
}

TEST(WeightGemmSchedule, FewRowsSplitTheGemmsColumnsNotTheAxis) {
    // M = 1 or 4 rows: fewer than 4 per worker, so the planner splits K into segments; on the CPU the
    // one row block's GEMM splits its columns over the threads instead, and the chain is one online
    // pass (a GPU keeps the segments). Such kernels agree with the reference.
    ArenaScope arena;
    for (int64_t M : {1, 4}) {
        std::string t = tile_text("rmsnorm_gemm.rf", {{"M", M}, {"N", 4096}, {"K", 4096}});
        EXPECT_NE(t.find("strategy=incremental tile=4096 row_block=16 segments=1 "), std::string::npos) << "M = " << M << "\n" << t;
        std::string gpu = tile_text("rmsnorm_gemm.rf", {{"M", M}, {"N", 4096}, {"K", 4096}}, 0, make_target(TargetKind::Cuda));
        EXPECT_NE(gpu.find("strategy=multi_segment"), std::string::npos) << "M = " << M << " (CUDA)\n" << gpu;
    }
    RunOptions o;
    o.sizes = {{"M", 3}, {"N", 1030}, {"K", 2100}};  // the planner's segments need K >= 2048
    std::filesystem::path p = example("rmsnorm_gemm.rf");
    std::string t = tile_text("rmsnorm_gemm.rf", o.sizes);
    EXPECT_NE(t.find("strategy=incremental"), std::string::npos) << t;
    test::check_run(p, test::read_text(p), o, "cpu", {43});
}

TEST(WeightGemmSchedule, NarrowWeightGemmsSplitTheirColumnsTooAndAgreeWithTheReference) {
    // fp8 weights widened as they load: one row block's GEMM splits its columns over the threads like
    // the other nt GEMMs (at least 128 columns and M·N·K >= 2^22: 3 x 1030 x 2100).
    RunOptions o;
    o.sizes = {{"M", 3}, {"N", 1030}, {"K", 2100}};
    std::filesystem::path p = example("quant_gemm_fp8.rf");
    test::check_run(p, test::read_text(p), o, "cpu", {44});
}

TEST(WeightGemmSchedule, DeepPrologueGemmsTakeBigRowBlocks) {
    ArenaScope arena;
    std::string lce = tile_text("linear_cross_entropy.rf", {{"T", 1024}, {"D", 2048}, {"V", 32000}});
    EXPECT_NE(lce.find("tile=256 row_block=128"), std::string::npos) << lce;
    lce = tile_text("linear_cross_entropy.rf", {{"T", 1024}, {"D", 64}, {"V", 32000}});
    EXPECT_NE(lce.find("tile=256 row_block=32"), std::string::npos) << lce;
    RunOptions o;
    o.sizes = {{"T", 260}, {"D", 520}, {"V", 70}};  // 128-row blocks: 3 of them
    std::filesystem::path p = example("linear_cross_entropy.rf");
    test::check_run(p, test::read_text(p), o, "cpu", {42});
}

TEST(WeightGemmSchedule, KernelsAgreeWithTheReference) {
    RunOptions o;
    // A short last row block, a K tail of the micro-kernels; small K keeps the float64 reference (and
    // the sanitizer build) quick.
    o.sizes = {{"M", 131}, {"N", 1030}, {"K", 40}};
    for (const char *name : {"rmsnorm_gemm.rf", "quant_gemm_int8.rf"}) test::check_run(example(name), test::read_text(example(name)), o, "cpu", {41});
}

TEST(WeightGemmSchedule, Int8OperandRowsStartOnCacheLinesAndAvoidFourKiBStrides) {
    // The quantized rows of A (an int8 tile array, the dot kernel's A operand) were padded by 16 elements
    // like the float arrays: 16 bytes for int8, so every other row split cache lines (one AMD Zen 4 core,
    // M = 16, K = 4096: 305-362 GOP/s; rows a line apart, 4160 bytes: 425). Unpadded 4 KiB rows would meet
    // in L1's sets. The float tile arrays keep their 16-float (64-byte) pad.
    ArenaScope arena;
    const std::regex decl(R"(int8 (\$\w+)\[(\d+)\])"), row(R"((\$\w+)\[\$\w+_rr \* (\d+) \+)");
    for (int64_t K : {4096, 2048, 96}) {
        std::string t = tile_text("quant_gemm_int8.rf", {{"M", 16}, {"N", 4096}, {"K", K}});
        std::smatch d;
        ASSERT_TRUE(std::regex_search(t, d, decl)) << t;
        // The stride of the int8 array's row index (array[$..._rr * stride + ...]).
        int64_t stride = -1;
        for (auto it = std::sregex_iterator(t.begin(), t.end(), row); it != std::sregex_iterator(); ++it)
            if ((*it)[1] == d[1]) stride = std::stoll((*it)[2]);
        ASSERT_GE(stride, 0) << d[1] << " is not indexed by rows\n" << t;
        EXPECT_GE(stride, K) << t;
        EXPECT_EQ(stride % 64, 0) << "K = " << K << ": rows " << stride << " bytes apart";
        EXPECT_NE(stride % 4096, 0) << "K = " << K << ": rows " << stride << " bytes apart";
        EXPECT_EQ(std::stoll(d[2]), 16 * stride) << t;
    }
}
