/** \file Lower.h
 * Lowering of a fusion plan to the tile IR: one kernel per chain pass (or per chain on chip),
 * single-definition kernels for the rest, tile GEMMs recognized on the way.
 */
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fuse/Plan.h"
#include "ir/Program.h"
#include "tile/TileIR.h"

namespace rf::tile {

struct LowerOptions {
    /** Sizes the schedule is chosen for (tile, segments); the kernels accept any sizes at run time. */
    SizeBinding sizes;
    /** Schedule overrides by chain index (from `tune` or the command line). */
    std::map<int, Schedule> schedules;
    /** Force every chain to run unfused (one literal kernel per definition): the in-house baseline. */
    bool unfused = false;
    /** Worker threads the schedule records and the kernels run with (0: every usable CPU). */
    int threads = 0;
    /** Workers the schedule fills when `threads` is 0: the target's usable CPUs, or the work-groups
     *  that fill a GPU (Target::workers(); the driver sets it, the lowering never asks the host). */
    int workers = 1;
    DType compute = DType::f32;
    /** Knobs applied to every chain when non-zero (after overrides): tile length, axis segments. */
    int64_t force_tile = 0, force_segments = 0, force_row_block = 0;
    /** A strategy forced on every chain: none (the plan's), multi_pass (one kernel per pass),
     *  onchip_multipass (all passes per row), multi_segment (segments = 2 x threads unless forced). */
    std::optional<Strategy> force_strategy;
    /** Run the tile passes after lowering (tile/Passes.h: exp → exp2 folding, loop-invariant
     *  hoisting). Off only to look at or test the lowering's own output. */
    bool passes = true;
    /** States are kept in the compute type (float: the GPU printers), so tile GEMMs may accumulate
     *  into them (the pass accumulate_gemms_into_states runs too). */
    bool float_states = false;
    /** Column reductions may take the rows of a block as SIMD lanes (Schedule::row_lanes): the CPU. */
    bool row_lanes = false;
    /** A chain of sums over one axis may run inside another chain that computes the same per-tile
     *  prologue with the roles of row and axis swapped, as a row-reduced member (LowerRowReduced.cpp:
     *  the attention backward's dQ inside its dK/dV chain). Float partial sums per worker: the CPU. */
    bool row_reduced_members = false;
    /** Rows per block of an attention-shaped chain (a per-tile prologue GEMM, QKᵀ, and a member with
     *  an extra axis, P·V): 32 keep a GPU's score tile in shared memory; the CPU takes 64. */
    int64_t attention_row_block = 32;
    /** Rows per block of an attention-shaped chain that reads only bf16 inputs and has no mask (no
     *  `select`): each row block does the same work, so a taller one halves the packing without
     *  unbalancing the threads. 0: attention_row_block. */
    int64_t attention_row_block_dense_bf16 = 0;
    /** An epilogue's bf16 outputs are written a row at a time from a float row, like f32 ones (the
     *  CPU: one vector conversion per 16 values, rfk::copy_row_bf16); elsewhere element by element. */
    bool bf16_row_outputs = false;
    /** The float row an epilogue writes a row output from holds one row, reused by every row of the
     *  block (the CPU: a worker's rows run one after another, and the row stays in L1 for its copy);
     *  elsewhere one row per row of the block (a GPU's rows run at once). */
    bool epilogue_row_buffer = false;
    /** One row block's tile GEMMs split their output columns over the threads (the CPU: rfk's
     *  split_columns), so a weight GEMM of few rows has its parallelism without segments of the axis. */
    bool gemm_column_split = false;
    /** Elements added to a block's tile rows whose length is a multiple of 32 (PassContext): 8 on a
     *  GPU (rows 8 banks apart), 16 on the CPU (rows 64-byte aligned, see PassLowering::row_stride). */
    int64_t tile_row_pad = 8;
    /** Fast memory per worker that the rows of an on-chip multi-pass block should fit (the CPU: half
     *  of L2, as the planner's PlanOptions::fast_memory_bytes); 0: no limit. */
    int64_t fast_memory_bytes = 0;
    /** Schedule::prefetch_bytes: the most bytes of a next tile the CPU asks for ahead; 0: all. */
    int64_t tile_prefetch_bytes = 0;
    /** Schedule::stream_bytes: row copies stream past the caches when a call's inputs and output
     *  together exceed this many bytes. */
    int64_t stream_bytes = int64_t{24} << 20;
};

/** The default schedule of a chain at the sizes and for the machine of `o` (its plan's strategy and
 *  segments, a tile that keeps the tile's working set in L1, a row block per chain shape). */
Schedule default_schedule(const ChainPlan &c, const Program &p, const LowerOptions &o);

/** Plan → tile IR. InternalError if the plan is inconsistent; UserError for constructs the tile IR
 *  cannot express yet (named, with the definition's location). */
Module lower_plan(const Plan &plan, const LowerOptions &opts);
/** The lowering alone, before any pass: the pipeline runs the passes one by one, with a dump after
 *  each (driver/Pipeline.cpp). Not printable before recognize_gemms has run. */
Module lower_without_passes(const Plan &plan, const LowerOptions &opts);

// GEMM recognition and the sharing of per-tile factors (exp(S - m) for l and O) happen during
// lowering, where the loop structure is known: see LowerPass.cpp ("Tile GEMMs") and docs/tile-ir.md.

}  // namespace rf::tile
