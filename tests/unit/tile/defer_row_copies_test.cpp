/** \file defer_row_copies_test.cpp
 * The CPU tile pass defer-copies (src/tile/DeferRowCopies.cpp): f32 softmax's output copies from its
 * kept terms are deferred and the exp pass's tiles finish them before refilling the terms; not for a
 * bf16 output, the GPUs, blocks of several rows or with the pass off; and the outputs are bit for bit
 * those of the kernel without the pass (rows with -inf, +inf, NaN, huge and equal values; one row per
 * worker and many; plain and, past the last-level cache's share, streamed copies). The copier's
 * deferred copies themselves: SimdRowCopyChecks.h (check_deferred_row_stream).
 */
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "../SoftmaxRows.h"
#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::string softmax(const char *dtype) { return test::softmax_spec(dtype); }

std::vector<std::string> passes_without_defer() {
    std::vector<std::string> out;
    for (const tile::TilePassInfo &p : tile::tile_passes())
        if (p.id != tile::TilePass::DeferCopies) out.push_back(p.name);
    return out;
}

std::string tile_text(const std::string &src, TargetKind t, std::map<std::string, int64_t> sizes, bool pass = true, int64_t row_block = 0) {
    ArenaScope arena;
    Options o;
    o.sizes = std::move(sizes);
    o.row_block = row_block;
    if (!pass) o.tile_passes = passes_without_defer();
    auto c = analyze_source(src, "softmax.rf", make_target(t), o);
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(DeferRowCopies, SoftmaxDefersItsCopiesAndItsExpTilesFinishThem) {
    const std::string t = tile_text(softmax("f32"), TargetKind::Cpu, {{"R", 4096}, {"C", 8192}});
    // In the exp pass's tile loop, after its range, before anything touches the terms: the held
    // copies whose source lies below the tile's end.
    const size_t range = t.find("index $p1_te = "), finish = t.find("finish deferred copies from below $p1_rowterm[$p1_te]\n");
    ASSERT_NE(range, std::string::npos) << t;
    ASSERT_NE(finish, std::string::npos) << t;
    EXPECT_LT(range, finish) << t;
    EXPECT_EQ(t.find("$p1_rowterm[", range), t.find("$p1_rowterm[", finish)) << "nothing touches the terms before it\n" << t;
    EXPECT_NE(t.find("= $p1_rowterm[$p1_rr * C + $p1_e0_7]... * $r1 (deferred)\n"), std::string::npos) << t;
    // The other branch (1/s not normal) copies from its chunk buffer, which the next chunk refills: not deferred.
    EXPECT_NE(t.find("= $p1_ep7[0]...\n"), std::string::npos) << t;
    ArenaScope arena;
    Options o;
    o.sizes = {{"R", 4096}, {"C", 8192}};
    auto c = analyze_source(softmax("f32"), "softmax.rf", make_target(TargetKind::Cpu), o);
    const std::string cpp = generate(*c).source;
    EXPECT_NE(cpp.find("rs_.finish_below(&l_p1_rowterm["), std::string::npos) << cpp;
    EXPECT_NE(cpp.find("rs_.defer_f32(&"), std::string::npos) << cpp;
}

TEST(DeferRowCopies, NotForBf16OutputsGpusBlocksOfRowsOrWithThePassOff) {
    const std::map<std::string, int64_t> sizes{{"R", 4096}, {"C", 8192}};
    EXPECT_NE(tile_text(softmax("f32"), TargetKind::Cpu, sizes).find("(deferred)"), std::string::npos);
    EXPECT_EQ(tile_text(softmax("bf16"), TargetKind::Cpu, sizes).find("(deferred)"), std::string::npos);
    EXPECT_EQ(tile_text(softmax("f32"), TargetKind::OpenCL, sizes).find("deferred"), std::string::npos);
    EXPECT_EQ(tile_text(softmax("f32"), TargetKind::Cpu, sizes, true, 4).find("deferred"), std::string::npos);
    EXPECT_EQ(tile_text(softmax("f32"), TargetKind::Cpu, sizes, false).find("deferred"), std::string::npos);
}

TEST(DeferRowCopies, SoftmaxOutputsAreBitForBitThoseWithoutThePass) {
    ArenaScope arena;
    const std::string spec = softmax("f32");
    // Rows of one tile and of several (a short last tile); a few rows per worker and many; 401 rows of
    // 8192 (26 MB in and out) stream their copies on CPUs whose last-level cache is under 35 MB.
    for (auto [R, C] : {std::pair<int64_t, int64_t>{9, 300}, {9, 5000}, {40, 1030}, {401, 8192}}) {
        SCOPED_TRACE("R=" + std::to_string(R) + " C=" + std::to_string(C));
        Options on, off;
        on.sizes = off.sizes = {{"R", R}, {"C", C}};
        off.tile_passes = passes_without_defer();
        ASSERT_NE(tile_text(spec, TargetKind::Cpu, on.sizes).find("(deferred)"), std::string::npos);
        rf::Kernel k_on = rf::compile(spec, make_target(TargetKind::Cpu), on);
        rf::Kernel k_off = rf::compile(spec, make_target(TargetKind::Cpu), off);
        std::vector<float> xs = test::softmax_rows(R, C, 11);
        const size_t bytes = xs.size() * 4;
        std::vector<unsigned char> y_on(bytes, 0xAB), y_off(bytes, 0xCD);
        k_on({{xs.data(), DType::f32, {R, C}}}, {{y_on.data(), DType::f32, {R, C}}});
        k_off({{xs.data(), DType::f32, {R, C}}}, {{y_off.data(), DType::f32, {R, C}}});
        EXPECT_EQ(std::memcmp(y_on.data(), y_off.data(), bytes), 0);
        RunOptions ro;
        ro.sizes = on.sizes;
        test::check_run(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "softmax.rf", spec, ro, "cpu", {7});
    }
}
