/** \file CpuGemmCall.h
 * Which redfuse_simd.h micro-kernel a CPU tile GEMM calls, by its form and operand types, and the
 * plain loops it prints when none has them (CpuGemmCall.cpp; CpuKernelPrinter.cpp prints the call).
 */
#pragma once

#include <string>

#include "ir/DType.h"
#include "tile/TileIR.h"

namespace rf {

/** A tile GEMM's operands as printed C++ expressions: extents, addresses, strides (elements), alpha
 *  as a float, and whether it adds to C ("true", "false" or a condition); the operand element types
 *  and whether A and B are read straight from inputs of the kernel (constant while it runs). */
struct CpuGemmOperands {
    std::string M, N, K, A, B, C, alpha, accumulate;
    std::string lda, ldc, a_sk, b_sj, b_sk;
    DType a_type = DType::f32, b_type = DType::f32;
    bool a_input = false, b_input = false;
};

/** The call of the micro-kernel that computes g with these operands, ending in ';', or empty when the
 *  operand types have none. round_tile_products: cpu_rounds_tile_products. */
std::string cpu_gemm_call(const tile::GemmInfo &g, const CpuGemmOperands &o, bool round_tile_products);

/** The same GEMM as plain loops over its strides (any operand types), at indentation level `ind`
 *  (4 spaces a level, as StmtPrinter::pad). */
std::string cpu_gemm_loops(const tile::GemmInfo &g, const CpuGemmOperands &o, int ind);

}  // namespace rf
