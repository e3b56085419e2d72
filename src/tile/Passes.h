/** \file Passes.h
 * The passes over a lowered tile IR module, run by lower_plan in this order before any backend
 * prints the module (so every backend, and `redfuse analyze --emit tile`, sees their result).
 */
#pragma once

#include "tile/TileIR.h"

namespace rf::tile {

/** exp(e) → exp2(e · log2 e), log2 e folded into constant and loop-invariant coefficients of e
 *  (FoldExp2.cpp). */
void fold_exp2(Module &m);

/** Loop-invariant subexpressions of simd loops into scalar tile locals declared before the loop, the
 *  independent loops around it, or the parallel loop's body (HoistInvariants.cpp). */
void hoist_invariants(Module &m);

/** A tile array takes over the storage of one declared in the same list that is dead by then, or
 *  that the statement writing it rewrites element by element (attention's exp tile overwrites its
 *  score tile) (CoalesceTileArrays.cpp). */
void coalesce_tile_arrays(Module &m);

/** A member's tile GEMM accumulates straight into its running state instead of a zeroed tile array
 *  added to the state afterwards (GemmIntoState.cpp). Only where states have the GEMM's float type:
 *  the GPU lowering (LowerOptions::float_states); the CPU keeps states in double. */
void accumulate_gemms_into_states(Module &m);

}  // namespace rf::tile
