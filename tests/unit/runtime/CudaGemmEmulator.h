/** \file CudaGemmEmulator.h
 * The GEMM header under the host emulator, for cuda_gemm_test.cpp (included by that one translation
 * unit only): redfuse_cuda_gemm.h's three parts, in the order CMake pastes them, compiled inside
 * namespace gemm_emu in two configurations over the emulated CUDA of CudaEmu.h (fibers for threads,
 * the PTX primitives from the PTX ISA, shared-memory race, alignment and bank checks).
 */
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "CudaEmu.h"

namespace rf {
extern const char *const kEmbeddedCudaGemmHeader;
}

namespace gemm_emu {
using namespace cuda_emu;

#define RF_GEMM_EMULATE 1
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#include "runtime/kernels/redfuse_cuda_gemm.h"
#include "runtime/kernels/redfuse_cuda_gemm_tc.h"
#include "runtime/kernels/redfuse_cuda_gemm_simt.h"

/** The same header in its configuration for blocks of up to 512 threads (32x32 warp tiles, 4x4
 *  SIMT micro-tiles) and with a 3-stage pipeline, with its own element types. */
namespace wide {
#undef REDFUSE_CUDA_GEMM_H
#undef REDFUSE_CUDA_GEMM_TC_H
#undef REDFUSE_CUDA_GEMM_SIMT_H
#undef RF_CUDA_SCALAR_TYPES_DEFINED
#undef RF_GEMM_MAX_THREADS
#undef RF_GEMM_WARP_M
#undef RF_GEMM_WARP_N
#undef RF_GEMM_SIMT_TILE
#undef RF_GEMM_STAGES
#define RF_GEMM_MAX_THREADS 512
#define RF_GEMM_STAGES 3
#include "runtime/kernels/redfuse_cuda_gemm.h"
#include "runtime/kernels/redfuse_cuda_gemm_tc.h"
#include "runtime/kernels/redfuse_cuda_gemm_simt.h"
}  // namespace wide
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__

/** Runs `body` as one block of `threads` emulated CUDA threads over a fresh scratch of `scratch_bytes`
 *  (exactly what the configuration under test declares); returns the errors. */
inline std::vector<std::string> run_block(int threads, size_t scratch_bytes,
                                          const std::vector<std::pair<const void *, const void *>> &shared_ranges,
                                          const std::function<void(unsigned char *scratch)> &body) {
    std::vector<unsigned char> scratch(scratch_bytes, 0xcd);  // garbage: the GEMM must not read unwritten scratch
    g_errors.list.clear();
    auto call = [&] { body(scratch.data()); };
    run_fibers(threads, Dim{}, scratch.data(), scratch.size(), shared_ranges, [](void *c) { (*static_cast<decltype(call) *>(c))(); },
               &call, 1);
    return g_errors.list;
}

}  // namespace gemm_emu
