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

}  // namespace rf::tile
