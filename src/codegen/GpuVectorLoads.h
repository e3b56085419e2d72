/** \file GpuVectorLoads.h
 * Vector loads for the GPU printer's spread vector loops: each thread takes V consecutive
 * iterations and reads every contiguous operand V elements at a time (16 bytes of f32, 8 or 16 bytes
 * of 16-bit types) instead of one element per iteration.
 */
#pragma once

#include <map>
#include <string>
#include <vector>

#include "codegen/CodeGen_C.h"
#include "tile/TileIR.h"

namespace rf::gpu_mapping {

/** A load whose element index is the loop variable plus something the loop does not change. */
struct VectorLoad {
    Expr load;                  ///< the Load node (hash-consed: every use in the body is this node)
    const tile::Buffer *buffer;
    int bytes;                  ///< element size in GPU memory (temporaries: float)
};

struct VectorPlan {
    int width = 0;  ///< iterations per thread and chunk (0: no vector loads)
    std::vector<VectorLoad> loads;
};

/** The vector loads of a simd loop that is spread over threads: loads of global buffers with unit
 *  stride in the loop variable, whose other indices the loop does not change, and that the loop
 *  does not store to (except the element itself: Y[j] = f(Y[j])). Width 4 when an operand is 4
 *  bytes wide, 8 for 16-bit operands only; no plan for 1- or 8-byte operands. `bufs`: the
 *  printer's buffer of each name. */
VectorPlan plan_vector_loads(const tile::StmtP &loop, const std::map<std::string, const tile::Buffer *> &bufs);

/** Statements reading `width` consecutive elements at `address` (an lvalue of the first element,
 *  in `storage` type) into `float dest[width]`, widened with gpu_widen. */
std::string vector_load_text(Dialect d, const VectorLoad &l, int width, const std::string &address, const std::string &dest);

/** True when address (of l's element type) can be read as one chunk of width elements: CUDA needs
 *  the chunk's alignment; OpenCL's vloadN needs only the element's. */
std::string chunk_aligned_text(Dialect d, const VectorLoad &l, int width, const std::string &address);

}  // namespace rf::gpu_mapping
