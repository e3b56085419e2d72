/** \file CodeGen_GPU.h
 * Prints a tile IR module as GPU kernels, OpenCL C 1.2 or CUDA C++, from one mapping of the tile IR
 * onto work-groups (see docs/gpu.md):
 *  - every top-level parallel loop of a kernel becomes one launch, one work-group per iteration
 *    (rows, row blocks, (row, segment) pairs);
 *  - inside a work-group (or a warp, at warp level) the tile IR runs "uniformly": scalar and small
 *    states declared at that level live in registers, one copy per thread, updated by every thread;
 *    other locals live in shared (__local) memory, and statements that write them or store run on
 *    thread 0, each followed by a barrier (GpuPlacement.h decides);
 *  - vector (simd) loops are spread over the threads, their reductions (sum, prod, max, min) combined
 *    by a tree in shared memory; independent loops (rows of a block, free indices of a state) are
 *    spread over the threads with thread-private bodies; tile GEMMs are cooperative (every thread a
 *    part of C; CUDA: tensor cores where the operand types allow).
 * The same derived updates, merges and epilogues run; only where states meet changes.
 */
#pragma once

#include <string>
#include <vector>

#include "codegen/CodeGen_C.h"
#include "ir/Program.h"
#include "tile/TileIR.h"

namespace rf {

/** Where a GPU kernel's running states live and meet (see GpuCodegenOptions::fusion_level). */
enum class FusionLevel : uint8_t { Auto, Block, Warp, Thread };
const char *to_string(FusionLevel level);
/** "auto", "block", "warp", "thread"; UserError listing them otherwise. */
FusionLevel parse_fusion_level(const std::string &name);

struct GpuCodegenOptions {
    Dialect dialect = Dialect::OpenCL;
    int threads = 128;          ///< work-group size: a power of two, 32..1024
    SizeBinding sizes;          ///< sizes the mapping is chosen for (kernels accept any sizes)
    bool tensor_cores = true;   ///< CUDA: tile GEMMs on mma.sync where the operand types allow
    /** Where running states live and meet: Block (one work-group per row / row block, vector
     *  loops spread over its threads), Warp (one row per warp of 32 threads: warp barriers and
     *  shuffle reductions; OpenCL: a work-group of 32; launches with a cooperative GEMM stay at
     *  block level) or Thread (one row or (row, segment) pair per thread, states private,
     *  segments merged by the derived merge in a second launch; kernels whose arrays have
     *  run-time sizes stay at block level). */
    FusionLevel fusion_level = FusionLevel::Block;
    /** Auto picks Thread for a launch when its arrays allow it, it has at least 4 x threads
     *  iterations at the bound sizes, and no cascade axis is longer than 256 (many short rows: MoE
     *  routing, per-token statistics); on CUDA Warp for at least 1024 rows whose cascade axes
     *  are at most 8192 long; else Block. The longest cascade axis at the bound sizes: */
    double longest_axis = 0;
};

/** One kernel launch: `groups` work-groups of `threads` work-items, `shared_bytes` of dynamic shared
 *  memory; both expressions over the module's sizes (evaluated at run time). Arguments: every buffer
 *  of the module in order (temporaries as float), then every size as a 64-bit integer (OpenCL: then
 *  the __local scratch pointer of shared_bytes). */
struct GpuLaunch {
    std::string kernel;
    Expr groups;
    int threads = 128;
    Expr shared_bytes;
};

struct GpuModule {
    tile::Module module;
    Dialect dialect = Dialect::OpenCL;
    std::string source;
    std::vector<GpuLaunch> launches;  ///< in execution order
};

/** The GPU source of a module. InternalError for tile IR the mapping does not support (named). */
GpuModule generate_gpu(const tile::Module &m, const GpuCodegenOptions &o);

/** Text of redfuse_gpu.h (semantics helpers; pasted first into every GPU source). */
const std::string &gpu_runtime_header();

}  // namespace rf
