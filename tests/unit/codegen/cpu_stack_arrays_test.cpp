/** \file cpu_stack_arrays_test.cpp
 * Where the CPU printer (src/codegen/CpuKernelPrinter.cpp alloc) puts a worker's arrays: small arrays of
 * a constant size on the stack, arrays of a run-time size or larger than 4 KiB on the heap
 * (rfk::LocalArray), 16 KiB of stack at most per kernel, all zeroed and on 64-byte boundaries, with
 * the rows of a block's tiles whole cache lines (272 floats apart for 256-element tiles); kernels
 * with stack arrays still agree with the reference.
 */
#include <gtest/gtest.h>

#include <regex>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "runtime/kernels/redfuse_cpu.h"

using namespace rf;

namespace {

std::string cpu_source(const std::string &example) {
    std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (example + ".rf");
    auto c = analyze_source(test::read_text(spec), spec.filename().string(), make_target(TargetKind::Cpu), {});
    return generate(*c).source;
}

/** Bytes of the stack arrays `alignas(64) T name_arr[N] = {};` in a source. */
int64_t stack_bytes(const std::string &source, int64_t &largest) {
    std::regex re("alignas\\(64\\) (double|float|int64_t|int8_t) [A-Za-z0-9_]+_arr\\[([0-9]+)\\] = \\{\\};");
    int64_t total = 0;
    largest = 0;
    for (auto it = std::sregex_iterator(source.begin(), source.end(), re); it != std::sregex_iterator(); ++it) {
        int64_t bytes = std::stoll((*it)[2]) * 8;
        total += bytes;
        largest = std::max(largest, bytes);
    }
    return total;
}

}  // namespace

TEST(CpuStackArrays, SmallConstantArraysOnTheStackOthersOnTheHeap) {
    ArenaScope arena;
    for (const char *example : {"moe_routing", "attention", "softmax", "layernorm"}) {
        std::string src = cpu_source(example);
        int64_t largest = 0, total = stack_bytes(src, largest);
        EXPECT_LE(largest, 4096) << example;
        EXPECT_LE(total, 16384) << example;
        if (std::string(example) == "moe_routing") {
            EXPECT_GT(total, 0) << "the states of a top-k chain are small constants\n" << src;
        }
    }
    // Attention's score tile (rows of 272 floats) and its O accumulator (128 x D) stay on the heap.
    std::string att = cpu_source("attention");
    EXPECT_NE(att.find("rfk::LocalArray<float> l_pro0_store"), std::string::npos) << att;
    EXPECT_TRUE(std::regex_search(att, std::regex("rfk::LocalArray<[a-z0-9_]+> [A-Za-z0-9_]+_store\\(\\(size_t\\)\\([^;]*v_D")))
        << "an array whose size depends on D is on the heap\n" << att;
}

TEST(CpuStackArrays, AgreeWithTheReference) {
    for (const char *example : {"moe_routing", "moe_topk_then_softmax", "attention"}) {
        std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / (std::string(example) + ".rf");
        RunOptions o;
        test::check_run(spec, test::read_text(spec), o, "cpu", {1, 2});
    }
}

TEST(CpuStackArrays, HeapArraysAreZeroedOnCacheLines) {
    for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(4096), size_t(33792)}) {
        rfk::LocalArray<float> a(n);
        rfk::LocalArray<double> b(n);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 64, 0u) << n;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u) << n;
        for (size_t i = 0; i < n; i++) ASSERT_TRUE(a.data[i] == 0.f && b.data[i] == 0.0) << n << " " << i;
    }
}

TEST(CpuStackArrays, AnEpilogueRowIsOneRowOnTheCpu) {
    // RMSNorm -> GEMM at 128-row blocks: the bf16 output row is computed into a float row and copied
    // out before the next row, so the CPU keeps one row — in chunks of at most 2048 values (L1;
    // LowerMerge.cpp chunked_row_output) — not the block's 128 (a 2 MiB stream written and read again
    // per block at N = 4096); a GPU, whose rows run at once, one per row.
    ArenaScope arena;
    std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "rmsnorm_gemm.rf";
    Options opts;
    opts.sizes = {{"M", 2048}, {"N", 4096}, {"K", 4096}};
    opts.row_block = 128;
    std::regex one_row("rfk::LocalArray<float> l_ep[0-9]+_store\\(\\(size_t\\)\\(1 \\* \\(int64_t\\)\\(\\(int64_t\\)2048\\)\\)\\)");
    auto cpu = analyze_source(test::read_text(spec), "rmsnorm_gemm.rf", make_target(TargetKind::Cpu), opts);
    std::string src = generate(*cpu).source;
    EXPECT_TRUE(std::regex_search(src, one_row)) << src;
    EXPECT_EQ(src.find("(int64_t)128 * ((int64_t)v_N)"), std::string::npos) << src;
    RunOptions o;
    o.sizes = {{"M", 130}, {"N", 40}, {"K", 72}};  // two blocks, the second of 2 rows
    o.row_block = 128;
    test::check_run(spec, test::read_text(spec), o, "cpu", {1, 2});
}

TEST(CpuStackArrays, TileRowsAreWholeCacheLinesOnTheCpu) {
    // 256-element key tiles: rows 272 floats (1088 bytes, 17 lines) apart on the CPU, 264 on a GPU.
    ArenaScope arena;
    std::filesystem::path spec = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    Options opts;
    opts.tile = 256;
    auto cpu = analyze_source(test::read_text(spec), "attention.rf", make_target(TargetKind::Cpu), opts);
    EXPECT_NE(generate(*cpu).source.find("(int64_t)272"), std::string::npos);
    auto gpu = analyze_source(test::read_text(spec), "attention.rf", make_target(TargetKind::Cuda), opts);
    EXPECT_EQ(generate(*gpu).source.find("272"), std::string::npos);
}
