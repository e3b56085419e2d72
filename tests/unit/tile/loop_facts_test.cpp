/** \file loop_facts_test.cpp
 * The loop facts of the tile passes (src/tile/LoopFacts.cpp): the rows of a block, [0, $nbv) with
 * $nbv = min(B, E - $rbase), run at least once, so a load invariant in the lanes loop over them is
 * hoisted (RMSNorm's dw: the per-m factor rsqrt(r[m] / C + eps) once per m instead of once per
 * column), and the kernel still agrees with the reference, also with a single column.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

std::filesystem::path spec() { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / "rms_norm_dw.rf"; }

}  // namespace

TEST(LoopFacts, LoadsLeaveTheLoopOverABlocksRows) {
    ArenaScope arena;
    auto c = analyze_source(test::read_text(spec()), "rms_norm_dw.rf", make_target(TargetKind::Cpu), {});
    std::string t = tile::to_string(generate(*c).module);
    size_t h = t.find("= rsqrt(r[$jj0]"), loop = t.find("for $rr in [0, $nbv) simd:");
    ASSERT_NE(h, std::string::npos) << t;
    ASSERT_NE(loop, std::string::npos) << t;
    EXPECT_LT(h, loop) << t;
    for (int64_t C : {200, 1, 65}) {
        RunOptions o;
        o.sizes = {{"C", C}};
        test::check_run(spec(), test::read_text(spec()), o, "cpu", {8});
    }
}
