/** \file bench_floor_test.cpp
 * The compute floor of `redfuse bench` (src/driver/Bench.cpp gemm_unit): the fastest unit the kernel's
 * tile GEMMs run on — int8 for i8 × i8, bf16 for bf16 × bf16 or a float tile rounded to bf16 (the CPU's
 * bf16 tile products), else fp32.
 */
#include <gtest/gtest.h>

#include <filesystem>

#include "../ExampleSizes.h"
#include "driver/Bench.h"
#include "driver/Compiler.h"

using namespace rf;

namespace {

GemmUnit unit_of(const std::string &example, bool bf16_tile_products) {
    ArenaScope arena;
    std::filesystem::path p = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / example;
    Options o;
    o.bf16_tile_products = bf16_tile_products;
    auto c = analyze_source(test::read_text(p), p.string(), make_target(TargetKind::Cpu), o);
    const tile::Module &m = generate(*c, o).module;
    return gemm_unit(m, cpu_rounds_tile_products(m, cpu_codegen_options(o)));
}

}  // namespace

TEST(BenchFloor, TheFastestUnitTheGemmsUse) {
    EXPECT_EQ(unit_of("quant_gemm_int8.rf", true), GemmUnit::Int8);
    EXPECT_EQ(unit_of("rmsnorm_gemm.rf", true), GemmUnit::Bf16);   // X·g rounded to bf16
    EXPECT_EQ(unit_of("rmsnorm_gemm.rf", false), GemmUnit::Fp32);  // exact products: f32 FMAs
    EXPECT_EQ(unit_of("attention.rf", false), GemmUnit::Bf16);      // Q·Kᵀ of two bf16 inputs
    EXPECT_EQ(unit_of("softmax.rf", true), GemmUnit::Fp32);         // no GEMM
}
