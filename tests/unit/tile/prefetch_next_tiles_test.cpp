/** \file prefetch_next_tiles_test.cpp
 * The CPU pass that asks for a tile GEMM's next tile of an input operand in kernels of few rows a
 * block (src/tile/PrefetchNextTiles.cpp): decode attention's K and V tiles, not attention's (many
 * rows a block), not a weight GEMM's (its tiles are columns of the weight, not one run), not on a GPU;
 * the whole tile on Intel, its first 8 KiB on AMD; not a per-row GEMM's operand (its row is bound inside
 * the tile loop); and decode kernels with it still match the reference when the last tile is short or
 * the only one.
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path example(const char *name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }

/** The host's target of kind `t`, with the CPU's vendor replaced when `vendor` is given. */
std::string tile_text(const char *name, TargetKind t, std::map<std::string, int64_t> sizes, const char *vendor = nullptr) {
    ArenaScope arena;
    Options o;
    o.sizes = std::move(sizes);
    Target target = make_target(t);
    if (vendor) target.cpu.vendor = vendor;
    auto c = analyze_source(test::read_text(example(name)), name, target, o);
    return tile::to_string(generate(*c).module);
}

const std::map<std::string, int64_t> kDecode = {{"B", 4}, {"Hq", 32}, {"Hkv", 8}, {"N", 8192}, {"D", 128}};

/** Both of decode's tile GEMM inputs, K and V, have `if $te < N: prefetch X[..., $te, 0][0, length]`. */
void expect_next_tile_prefetches(const std::string &t, const std::string &length) {
    for (const char *op : {"K", "V"}) {
        const std::string want = std::string(R"(if \$te < N:\n\s+prefetch )") + op + R"(\[\$r0, \$rbase / \(Hq / Hkv\), \$te, 0\]\[0, )" + length + R"(\))";
        EXPECT_TRUE(std::regex_search(t, std::regex(want))) << op << "\n" << t;
    }
}

const char *const kWholeTile = R"(\(min\(\$te \+ \d+, N\) - \$te\) \* \(1 \* D\))";

}  // namespace

TEST(PrefetchNextTiles, DecodeAsksForTheNextKeyAndValueTiles) {
    expect_next_tile_prefetches(tile_text("decode_gqa.rf", TargetKind::Cpu, kDecode, "GenuineIntel"), kWholeTile);
    EXPECT_EQ(tile_text("decode_gqa.rf", TargetKind::OpenCL, kDecode).find("prefetch"), std::string::npos);
}

// AMD: the first 8 KiB of each tile, 4096 bf16 elements.
TEST(PrefetchNextTiles, OnAmdOnlyTheTilesHead) {
    expect_next_tile_prefetches(tile_text("decode_gqa.rf", TargetKind::Cpu, kDecode, "AuthenticAMD"),
                                std::string("min\\(") + kWholeTile + ", 4096\\)");
}

TEST(PrefetchNextTiles, NotForManyRowsABlockOrWeightColumns) {
    EXPECT_EQ(tile_text("attention.rf", TargetKind::Cpu, {{"B", 1}, {"H", 8}, {"M", 2048}, {"N", 2048}, {"D", 128}}).find("prefetch"),
              std::string::npos);
    EXPECT_EQ(tile_text("rmsnorm_gemm.rf", TargetKind::Cpu, {{"M", 16}, {"N", 4096}, {"K", 4096}}).find("prefetch"), std::string::npos);
}

TEST(PrefetchNextTiles, DecodeWithItMatchesTheReference) {
    const std::string src = test::read_text(example("decode_gqa.rf"));
    for (int64_t N : {1, 255, 256, 1000}) {
        RunOptions o;
        o.sizes = {{"B", 2}, {"Hq", 8}, {"Hkv", 2}, {"N", N}, {"D", 64}};
        test::check_run(example("decode_gqa.rf"), src, o, "cpu", {5});
    }
}

TEST(PrefetchNextTiles, NotWhereTheOperandsRowIsBoundInsideTheTileLoop) {
    // Pooling each row's own channels P[s] with softmax weights: a GEMM per row of the block, inside
    // the loop over the block's rows. Its next tile's address needs that row, which the tile loop's
    // head does not have (the prefetch there read $rr out of scope: generated code that did not
    // compile).
    const std::string src =
        "size S = 3, N = 29, H = 4\ninput x[S, N] : f32\ninput P[S, N, H] : f32\nm[s] = max(n: x[s,n])\n"
        "l[s] = sum(n: exp(x[s,n] - m[s]))\no[s,h] = sum(n: exp(x[s,n] - m[s]) * P[s,n,h]) / l[s]\n"
        "mx[s,h] = max(n: P[s,n,h])\nam[s,h] = argmax(n: P[s,n,h])\noutput o, mx\noutput am : i64\n";
    {
        ArenaScope arena;
        Options o;
        o.sizes = {{"S", 7}, {"N", 5000}, {"H", 4}};
        auto c = analyze_source(src, "pooling.rf", make_target(TargetKind::Cpu), o);
        const std::string t = tile::to_string(generate(*c).module);
        EXPECT_EQ(t.find("prefetch P[$rbase + $rr"), std::string::npos) << t;
    }
    for (auto [S, N] : {std::pair<int64_t, int64_t>{7, 5000}, {1, 300}}) {
        RunOptions o;
        o.sizes = {{"S", S}, {"N", N}, {"H", 4}};
        test::check_run("pooling.rf", src, o, "cpu", {2});
    }
}
