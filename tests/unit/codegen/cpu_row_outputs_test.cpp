/** \file cpu_row_outputs_test.cpp
 * An epilogue's outputs written a row at a time from a float row (tile IR `copy`, src/tile/LowerPlan.cpp
 * mark_row_outputs): f32 outputs on every target (where no term is kept in them), bf16 outputs on the CPU
 * only (rfk::copy_row_bf16, one
 * vcvtneps2bf16 per 16 values; the GPU printers keep the element stores), other dtypes never; and the
 * kernels so built pass the reference check, rows shorter and longer than a vector, and with NaN, inf and
 * denormal results (rfk::copy_row_bf16's element-by-element vectors).
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "SoftmaxSpecs.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

using test::softmax_path;
using test::softmax_with;

std::string tile_text(const std::string &src, TargetKind target) {
    ArenaScope arena;
    auto c = analyze_source(src, "softmax.rf", make_target(target), {});
    return tile::to_string(generate(*c).module);
}

std::string cpp_for(const std::string &src) {
    ArenaScope arena;
    auto c = analyze_source(src, "softmax.rf", make_target(TargetKind::Cpu), {});
    return generate(*c).source;
}

bool copies_rows(const std::string &tile) { return tile.find("copy Y[") != std::string::npos; }

}  // namespace

TEST(CpuRowOutputs, Bf16OutputsAreRowsOnTheCpuOnly) {
    std::string bf16 = softmax_with("bf16", "bf16");
    EXPECT_TRUE(copies_rows(tile_text(bf16, TargetKind::Cpu)));
    EXPECT_NE(cpp_for(bf16).find("rs_.bf16(&"), std::string::npos);
    for (TargetKind gpu : {TargetKind::OpenCL, TargetKind::Cuda}) EXPECT_FALSE(copies_rows(tile_text(bf16, gpu)));
    for (const char *other : {"f16", "f64"}) EXPECT_FALSE(copies_rows(tile_text(softmax_with("f32", other), TargetKind::Cpu))) << other;
}

TEST(CpuRowOutputs, Bf16RowsMatchTheReference) {
    std::string src = softmax_with("f32", "bf16");
    for (int64_t C : {1, 15, 16, 17, 100}) {
        RunOptions o;
        o.sizes = {{"R", 9}, {"C", C}};
        test::check_run(softmax_path(), src, o, "cpu", {1});
    }
    // exp(X - m) / s over inputs scaled by 100: results down in the denormals and exact zeros.
    RunOptions wide;
    wide.sizes = {{"R", 9}, {"C", 70}};
    wide.scale = 100;
    test::check_run(softmax_path(), src, wide, "cpu", {2});
    // A quotient that is not a softmax: inf and NaN results (x / 0, 0 / 0) pass through the row copy.
    std::string quotient = "size R = 9, C = 40\ninput X[R, C] : f32\ns[r] = sum(c: X[r,c] * 0)\nY[r,c] = X[r,c] / s[r]\noutput Y : bf16\n";
    RunOptions q;
    test::check_run(softmax_path(), quotient, q, "cpu", {3});
}

TEST(CpuRowOutputs, RowsAreComputedAndCopiedInChunks) {
    // LowerMerge.cpp chunked_row_output: chunks of kEpilogueChunk (2048) values, one stack-or-heap
    // buffer of at most that many, the last chunk shorter; every worker flushes its copier.
    std::string src = softmax_with("bf16", "bf16");
    std::string tile = tile_text(src, TargetKind::Cpu);
    EXPECT_TRUE(std::regex_search(tile, std::regex(R"(ec\d+ in \[0, \(C \+ 2047\) / 2048\))"))) << tile;
    EXPECT_TRUE(std::regex_search(tile, std::regex(R"(tile \$\w*ep\d+\[2048\])"))) << tile;
    std::string cpp = cpp_for(src);
    EXPECT_NE(cpp.find("rfk::RowStream rs_;"), std::string::npos);
    EXPECT_NE(cpp.find("rs_.flush();"), std::string::npos);
    const std::filesystem::path layernorm = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "layernorm.rf";
    EXPECT_NE(cpp_for(test::read_text(layernorm)).find("rs_.f32(&"), std::string::npos);  // an f32 row output
    for (int64_t C : {2047, 2048, 2049, 4500}) {
        RunOptions o;
        o.sizes = {{"R", 5}, {"C", C}};
        test::check_run(softmax_path(), softmax_with("f32", "bf16"), o, "cpu", {4});
        test::check_run(layernorm, test::read_text(layernorm), o, "cpu", {5});
    }
}

// Row copies stream past the caches when the call's inputs and output together pass 3/4 of the
// target's last-level cache (24 MiB where its size is unknown): the generated test adds the input X's
// bytes to the output Y's and compares them with that.
TEST(CpuRowOutputs, RowsStreamPastThreeQuartersOfTheLastLevelCache) {
    for (int64_t l3 : {int64_t{0}, int64_t{32} << 20, int64_t{105} << 20}) {
        ArenaScope arena;
        Target t = make_target(TargetKind::Cpu);
        t.cpu.l3_bytes = l3;
        Options o;
        o.sizes = {{"R", 4096}, {"C", 1024}};
        auto c = analyze_source(softmax_with("f32", "f32"), "softmax.rf", t, o);
        const std::string cpp = generate(*c).source;
        ASSERT_NE(cpp.find("rs_.f32("), std::string::npos) << "no row copy at L3 " << l3;
        const int64_t want = l3 ? l3 / 4 * 3 : int64_t{24} << 20;
        const std::regex copy(R"(rs_\.f32\([^;]*, \(\(int64_t\)4 \* [^;]*\) \+ \(\(int64_t\)4 \* [^;]*\) > \(int64_t\))" +
                              std::to_string(want) + R"(\);)");
        EXPECT_TRUE(std::regex_search(cpp, copy)) << "L3 " << l3 << ": " << cpp.substr(cpp.find("rs_.f32("), 400);
    }
}

TEST(CpuRowOutputs, StreamedChunkedRowsMatchTheReference) {
    // Inputs and output together over 3/4 of the L3 are streamed (non-temporal whole lines,
    // rfk::RowStream; the output alone is over 24 MiB here): 2600 x 5000 bf16 is 26 MB, each row three chunks whose lines continue across the chunks' ends (5000 x 2 bytes is not
    // a multiple of 64: rows start at every 16-byte offset of a line) and across rows.
    RunOptions o;
    o.sizes = {{"R", 2600}, {"C", 5000}};
    test::check_run(softmax_path(), softmax_with("bf16", "bf16"), o, "cpu", {6});
    o.sizes = {{"R", 1400}, {"C", 4700}};  // LayerNorm's f32 rows: 26.3 MB, rows at every 16-byte offset
    const std::filesystem::path layernorm = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "layernorm.rf";
    test::check_run(layernorm, test::read_text(layernorm), o, "cpu", {7});
}

TEST(CpuRowOutputs, F32TermsGoToARowBufferUnlessTheRowIsShort) {
    // LowerPlan.cpp split_for_term_reuse: softmax's exp(X - m) is kept for Y's epilogue — on the CPU in
    // a float row buffer, then Y written once a chunk at a time; in Y itself where the planning sizes
    // make the row shorter than 128 values, and on a GPU.
    auto tile_at = [](TargetKind t, int64_t C) {
        ArenaScope arena;
        Options o;
        o.sizes = {{"R", 4096}, {"C", C}};
        auto c = analyze_source(softmax_with("f32", "f32"), "softmax.rf", make_target(t), o);
        return tile::to_string(generate(*c).module);
    };
    const std::string long_rows = tile_at(TargetKind::Cpu, 1024), short_rows = tile_at(TargetKind::Cpu, 64);
    EXPECT_NE(long_rows.find("rowterm"), std::string::npos) << long_rows;
    EXPECT_TRUE(copies_rows(long_rows)) << long_rows;
    EXPECT_EQ(short_rows.find("rowterm"), std::string::npos) << short_rows;
    EXPECT_NE(short_rows.find("store Y["), std::string::npos) << short_rows;
    EXPECT_EQ(tile_at(TargetKind::OpenCL, 1024).find("rowterm"), std::string::npos);
    for (int64_t C : {64, 127, 128, 3000}) {
        RunOptions o;
        o.sizes = {{"R", 7}, {"C", C}};
        test::check_run(softmax_path(), softmax_with("f32", "f32"), o, "cpu", {8});
    }
}
