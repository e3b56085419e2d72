/** \file bench_floor_test.cpp
 * The compute floor of `redfuse bench` (src/driver/Bench.cpp gemm_unit): the fastest unit the kernel's
 * tile GEMMs run on — int8 for i8 × i8, bf16 for bf16 × bf16 or a float tile rounded to bf16 (the CPU's
 * bf16 tile products), else fp32 — and the peak the floor takes for it (floor_peak): the machine's
 * fastest unit for that dtype, AMX tiles over AVX-512 dot products, never below the FP32 FMA peak.
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

TEST(BenchFloor, ThePeakOfTheFastestUnitTheMachineHas) {
    // A Xeon with AMX (synthetic figures): a floor at the dot-product peak let PyTorch's AMX GEMMs
    // show 897% of "peak" (issue 13), so the tiles must win.
    MachineLimits m;
    m.fp32_gflops = 3000;
    m.bf16_gflops = 6000;
    m.int8_gops = 12000;
    m.amx_bf16_gflops = 60000;
    m.amx_int8_gops = 120000;
    FloorPeak bf16 = floor_peak(m, GemmUnit::Bf16), int8 = floor_peak(m, GemmUnit::Int8);
    EXPECT_EQ(bf16.unit, "amx_bf16");
    EXPECT_DOUBLE_EQ(bf16.gflops, 60000);
    EXPECT_EQ(int8.unit, "amx_int8");
    EXPECT_DOUBLE_EQ(int8.gflops, 120000);
    EXPECT_EQ(floor_peak(m, GemmUnit::Fp32).unit, "fp32");  // no GEMM in a narrow dtype: the FMAs
    EXPECT_DOUBLE_EQ(floor_peak(m, GemmUnit::Fp32).gflops, 3000);

    // No AMX (or Linux refused the tiles: the probe reports 0): the AVX-512 dot products.
    m.amx_bf16_gflops = m.amx_int8_gops = 0;
    EXPECT_EQ(floor_peak(m, GemmUnit::Bf16).unit, "bf16");
    EXPECT_DOUBLE_EQ(floor_peak(m, GemmUnit::Bf16).gflops, 6000);
    EXPECT_EQ(floor_peak(m, GemmUnit::Int8).unit, "int8");

    // No narrow unit, or one slower than the FMAs: never below the FP32 peak.
    m.bf16_gflops = 0;
    m.int8_gops = 1000;
    EXPECT_EQ(floor_peak(m, GemmUnit::Bf16).unit, "fp32");
    EXPECT_EQ(floor_peak(m, GemmUnit::Int8).unit, "fp32");
    EXPECT_DOUBLE_EQ(floor_peak(m, GemmUnit::Int8).gflops, 3000);
}
