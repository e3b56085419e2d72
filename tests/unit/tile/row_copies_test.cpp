/** \file row_copies_test.cpp
 * The CPU tile pass row-copies (src/tile/RowCopies.cpp): loops storing a float tile array (or a
 * one-dimensional float temporary) into a row of an f32 or bf16 output become row copies; other
 * outputs and tensors with a temporary of the same name keep their stores; results are unchanged.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "grad/Grad.h"
#include "spec/Frontend.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

// C's row is m (mx, in its chain, reads only A[m, k]), n an extra point: C sums a tile GEMM.
const std::string kGemmSums = "size M = 70, N = 33, K = 20\n"
                              "input A[M, K] : f32\ninput B[K, N] : f32\n"
                              "mx[m] = max(k: A[m, k])\n"
                              "C[m, n] = sum(k: exp(A[m, k]) * B[k, n])\n"
                              "output mx : f32\n";

std::string module_text(const std::string &spec) {
    auto c = analyze_source(spec, "copies.rf", make_target(TargetKind::Cpu), {});
    return tile::to_string(generate(*c).module);
}

}  // namespace

TEST(RowCopies, GemmSumsOfFloatOutputsAreCopiedByRows) {
    ArenaScope arena;
    for (const char *dtype : {"f32", "bf16"}) {
        SCOPED_TRACE(dtype);
        std::string spec = kGemmSums + "output C : " + dtype + "\n";
        std::string text = module_text(spec);
        EXPECT_EQ(test::count_of(text, "copy C["), 1u) << text;
        EXPECT_EQ(test::count_of(text, "store C["), 0u) << text;
        RunOptions o;
        test::check_run("copies.rf", spec, o, "cpu", {1});
    }
}

TEST(RowCopies, OtherOutputsAndReadTensorsKeepTheirStores) {
    ArenaScope arena;
    // f16: no row copy of that type. C read by D: C has a float64 temporary beside the output, which
    // a copy would not write.
    EXPECT_EQ(test::count_of(module_text(kGemmSums + "output C : f16\n"), "copy C["), 0u);
    std::string read = kGemmSums + "Dd[m] = sum(n: C[m, n])\noutput C : f32\noutput Dd : f32\n";
    std::string text = module_text(read);
    EXPECT_EQ(test::count_of(text, "copy C["), 0u) << text;
    RunOptions o;
    test::check_run("read.rf", read, o, "cpu", {1});
}

TEST(RowCopies, TheAttentionBackwardCopiesItsGradientsOut) {
    ArenaScope arena;
    std::filesystem::path path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    std::string spec = derive_backward(parse_program(test::read_text(path), path.string()), {}).backward_spec;
    std::string text = module_text(spec);
    for (const char *g : {"copy dK[", "copy dV[", "copy dQ["}) EXPECT_EQ(test::count_of(text, g), 1u) << g << "\n" << text;
}
