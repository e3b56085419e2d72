/** \file Passes.h
 * The passes over a lowered tile IR module, each a function from module to module, and their table
 * in the order lower_plan runs them before any backend prints the module (so every backend, and
 * `redfuse analyze --emit tile`, sees their result).
 */
#pragma once

#include <vector>

#include "tile/TileIR.h"

namespace rf::tile {

/** The lowering's dot-product loops over a block of rows (attention's QKᵀ tile) as GEMM statements
 *  (RecognizeGemms.cpp). */
Module recognize_gemms(const Module &m);

/** exp(e) → exp2(e · log2 e), log2 e folded into constant and loop-invariant coefficients of e
 *  (FoldExp2.cpp). */
Module fold_exp2(const Module &m);

/** Loop-invariant subexpressions of simd loops into scalar tile locals declared before the loop, the
 *  independent loops around it, or the parallel loop's body (HoistInvariants.cpp). */
Module hoist_invariants(const Module &m);

/** A sum in a vector loop of a term the loop does not change becomes the trip count times the term
 *  after the loop, and one of the same term as an earlier sum of the loop a copy of that sum
 *  (InvariantSums.cpp). CPU only. */
Module take_invariant_sums_out(const Module &m);

/** A member's few extra points (c[s, a], a = 0..2), swept by a vector loop per point over an input
 *  stored point-innermost (P[s, n, a]), are swept by one vector loop with a reduction per point
 *  (FuseExtraPoints.cpp). CPU only. */
Module fuse_extra_points(const Module &m);

/** A tile array takes over the storage of one declared in the same list that is dead by then, or
 *  that the statement writing it rewrites element by element (attention's exp tile overwrites its
 *  score tile) (CoalesceTileArrays.cpp). */
Module coalesce_tile_arrays(const Module &m);

/** A branch on a flag that is the same constant on every row (a member's literal-recompute flag
 *  that nothing sets) becomes the branch it takes (FoldConstantFlags.cpp). CPU only. */
Module fold_constant_flags(const Module &m);

/** A plain sum fed only by tile GEMMs keeps no "seen" flag or unused reference point, and lives in
 *  a float tile the GEMMs accumulate into instead of a float64 state (GemmSumTiles.cpp). CPU only. */
Module keep_gemm_sums_in_tiles(const Module &m);

/** A float64 temporary that one row block stores from a local and only the same block's epilogue
 *  reads goes: the epilogue reads the local (ForwardBlockTemps.cpp). CPU only. */
Module forward_block_temps(const Module &m);

/** A float64 temporary that each row block writes and reads only at its own rows lives in an array
 *  of the block instead of a global buffer of every row (LocalizeBlockTemps.cpp). CPU only. */
Module localize_block_temps(const Module &m);

/** A member's tile GEMM accumulates straight into its running state instead of a zeroed tile array
 *  added to the state afterwards (GemmIntoState.cpp). Only where states have the GEMM's float type:
 *  the GPU lowering (LowerOptions::float_states); the CPU keeps states in double. */
Module accumulate_gemms_into_states(const Module &m);

/** Per tile of the axis, from the conditions of the selects that mask its elements: skipped when
 *  every element is masked and the masked value is neutral for what reduces it, the conditions
 *  dropped when none is (SkipMaskedTiles.cpp). */
Module skip_masked_tiles(const Module &m);

/** Vector loops with loop-invariant divisors or subtrahends get a copy for when those are finite (the
 *  reciprocal normal): multiplications by the reciprocal, plain subtractions (FiniteInvariants.cpp).
 *  CPU only: the GPU printers spread a row loop and its column loop as one range, which a branch
 *  between them would break. */
Module version_on_finite_invariants(const Module &m);

/** An independent loop assigning one float64 array element per iteration (a member's finalize)
 *  runs as a vector loop in float64, the calls it repeats with the same arguments computed once
 *  before it (ElementLanes.cpp). CPU only. */
Module run_element_loops_as_lanes(const Module &m);

/** A loop storing consecutive elements of a float tile array into a row of an f32 or bf16 output
 *  becomes one row copy (RowCopies.cpp). CPU only. */
Module copy_rows_out(const Module &m);

/** An epilogue chunk's loop multiplying a float tile array by one scalar, followed by the row copy
 *  of its products, becomes one scaled row copy from that array (ScaleRowCopies.cpp). CPU only. */
Module scale_row_copies(const Module &m);

/** Row copies from a tile array that one pass of the row refills wait, in the worker's copier, for the
 *  next row's pass to reach their source, tile by tile (DeferRowCopies.cpp): the row's stores overlap
 *  the next row's arithmetic. CPU only, one-row blocks. */
Module defer_row_copies(const Module &m);

/** The last pass over the rows of a multi-pass chain of one-row blocks asks for the next row's
 *  inputs (PrefetchNextRows.cpp). CPU only. */
Module prefetch_next_rows(const Module &m);

/** In kernels of at most 16 rows a block, a tile loop asks for its GEMMs' next tile of an input
 *  operand (PrefetchNextTiles.cpp). CPU only. */
Module prefetch_next_tiles(const Module &m);

/** A tile GEMM into a zeroed float tile, first to touch it in a serial loop, stores on the loop's
 *  first iteration instead of adding (FirstGemmStores.cpp). CPU only. */
Module store_first_gemm_tiles(const Module &m);

/** The passes, in the order they run. */
/** The terms of a literal recompute's sums that the element being recomputed does not change (with a
 *  nested reduction: attention's exp(S[j] − m), S[j] a sum over d) are evaluated once per row into an
 *  array before the loop over the elements (TabulateLiteralTerms.cpp). CPU only. */
Module tabulate_literal_terms(const Module &m);

enum class TilePass : uint8_t { Gemm, Exp2, Hoist, InvariantSums, ExtraPoints, FoldFlags, GemmSums, ForwardTemps, LocalizeTemps, Coalesce, GemmState, SkipMasked, FiniteInvariants, ElementLanes, RowCopies, ScaleCopies, DeferCopies, Prefetch, PrefetchTiles, FirstGemmStores, LiteralTerms };

struct TilePassInfo {
    TilePass id;
    const char *name;                  ///< its name in pass lists and dumps
    Module (*run)(const Module &);
    bool float_states_only;            ///< runs only when states are float (LowerOptions::float_states)
    bool cpu_only;                     ///< runs only when states are double (the CPU lowering)
    bool always;                       ///< completes the lowering: runs even when the optional passes are off
};

/** Every pass in the order they run: the GEMMs first (the other passes see them as the backends
 *  will; turning the optional passes off keeps them, as the lowering's choice of kernels); exp2 next, because it puts log2 e next to the invariant
 *  coefficients the hoisting then moves out; fold-flags, gemm-sums and forward-temps next (the CPU's
 *  GEMM-fed sums into tiles, their float64 temporaries gone), before coalescing, which may then share
 *  the freed tiles; the arrays are coalesced last but one, on the final
 *  statements; gemm-state next, on the GEMMs as they will be printed; skip-masked last, so the others
 *  see one copy of each tile's statements (it duplicates them for the unmasked tiles);
 *  finite-invariants after it, on every copy of the vector loops; first-gemm-stores last but one, on the
 *  statements as they will be printed; literal-terms last, on the literal recomputes as they will be
 *  printed (the passes before it match the lowering's own loops). */
const std::vector<TilePassInfo> &tile_passes();

}  // namespace rf::tile
