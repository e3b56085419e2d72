/** \file CodeGen_CPU.h
 * Prints a tile IR module as one C++ translation unit for the CPU: OpenMP over parallel loops,
 * `omp simd` vector loops whose exp/log go to the compiler's vector math (glibc libmvec), the
 * language's semantics through redfuse_cpu.h, and a C entry point (the documented ABI of `emit`).
 */
#pragma once

#include <string>

#include "tile/TileIR.h"

namespace rf {

struct CpuCodegenOptions {
    /** Paste the runtime headers into the source (JIT: one self-contained file whose hash covers
     *  them) instead of #include-ing them (emit: the headers are written next to the source). */
    bool inline_headers = true;
    /** The prefix of the exported C symbols (a C identifier; `emit --name`). */
    std::string symbol_prefix = "redfuse";
    /** FlashAttention's trade: in a module whose outputs are all bf16 or fp8, a float tile meeting
     *  a bf16 operand in a tile GEMM (P in P·V, X·g in RMSNorm→GEMM, dS in a backward) is rounded to
     *  bf16 and multiplied on the bf16 unit (rfk::gemm_*_as_bf16; exact f32 on CPUs without AVX512_BF16).
     *  False (`--exact-products`): every such product stays f32. */
    bool bf16_tile_products = true;
    /** In a module whose outputs are all bf16, f16 or fp8, the row exp2 primitives (rfk::exp2_row,
     *  exp2_affine_row, exp2_row_sum: softmax's and attention's exp passes) use a degree-4
     *  polynomial, 2.9e-6 relative error instead of <= 1 ulp (rfk::Exp2Accuracy::Half). False
     *  (`--exact-products`): <= 1 ulp everywhere. */
    bool half_accuracy_exp2 = true;
};

/** Whether the tile GEMMs of `m` round float tiles met by bf16 operands to bf16 (see CpuCodegenOptions). */
bool cpu_rounds_tile_products(const tile::Module &m, const CpuCodegenOptions &o);

/** Whether the row exp2 primitives of `m` use the Half polynomial (see CpuCodegenOptions). */
bool cpu_half_accuracy_exp2(const tile::Module &m, const CpuCodegenOptions &o);

/** The C++ source of a module. Exported (extern "C"):
 *    int PREFIX_run(const int64_t *sizes, void *const *buffers, int threads);
 *    int PREFIX_num_sizes(void); const char *PREFIX_size_name(int i);
 *    int PREFIX_num_buffers(void); const char *PREFIX_buffer_name(int i); int PREFIX_buffer_dtype(int i);
 *    int PREFIX_buffer_is_output(int i);
 *  `sizes` in the spec's size order; `buffers` = inputs then outputs in spec order, dense row-major,
 *  in their declared dtype (bf16/f16 as uint16_t bits, fp8 as uint8_t); threads <= 0: all.
 *  Returns 0, or 1 when a temporary could not be allocated. */
std::string generate_cpu(const tile::Module &m, const CpuCodegenOptions &o = {});

/** Text of the runtime headers the generated code uses (for the JIT cache key and for emit). */
const std::string &cpu_runtime_header();
/** Text of redfuse_simd.h as generated code includes it: the concatenation of redfuse_simd.h (vector
 *  vocabulary, row primitives), redfuse_simd_gemm.h and redfuse_simd_gemm_nn.h (tile GEMMs), redfuse_simd_int8.h,
 *  redfuse_simd_bf16.h, redfuse_simd_amx.h and redfuse_simd_fp8.h. */
const std::string &cpu_simd_header();

/** dtype codes of the ABI (PREFIX_buffer_dtype): the order of rf::DType. */
int abi_dtype_code(DType t);

}  // namespace rf
