/** \file GpuGemm.h
 * Printing of tile GEMMs for the GPU printer: a cooperative SIMT loop (OpenCL, CUDA fallback) or a
 * call of the tensor-core block GEMM of redfuse_cuda_gemm.h (CUDA, 16/8-bit operands).
 */
#pragma once

#include <functional>
#include <string>

#include "codegen/CodeGen_GPU.h"

namespace rf {

struct GemmOperand {
    DType dtype = DType::f32;   ///< element type in memory (local tiles: f32 or i8)
    std::string space;          ///< RF_GLOBAL, RF_SHARED or "" (private)
    std::string type;           ///< the C element type (uint16_t for bf16/f16 bits, ...)
    std::string address;        ///< C expression of the element at the origin
    bool is_const = false;
};

/** Shared-memory scratch (bytes) the CUDA tensor-core GEMM needs (rf_block_gemm_scratch_bytes()). */
constexpr int kCudaGemmScratchBytes = 32768;

/** True when the CUDA printer calls the tensor-core block GEMM for these operand types. */
bool cuda_gemm_on_tensor_cores(DType a, DType b, const GpuCodegenOptions &o);

/** C text of a tile GEMM (tile::GemmInfo semantics) run by o.threads cooperating threads (1: one
 *  thread alone), followed by a barrier when cooperative. `ints` prints an index expression. */
std::string gpu_gemm(const tile::GemmInfo &g, const GemmOperand &a, const GemmOperand &b, const GemmOperand &c,
                     const std::function<std::string(Expr)> &ints, const std::string &alpha, const GpuCodegenOptions &o, int indent);

/** Text of the block GEMM pasted into CUDA sources: redfuse_cuda_gemm.h, redfuse_cuda_gemm_tc.h and
 *  redfuse_cuda_gemm_simt.h, concatenated in that order. */
std::string cuda_gemm_header();

}  // namespace rf
