/** \file Passes.cpp
 * The table of the tile passes (Passes.h), in the order they run.
 */
#include "tile/Passes.h"

namespace rf::tile {

const std::vector<TilePassInfo> &tile_passes() {
    static const std::vector<TilePassInfo> passes = {
        {TilePass::Gemm, "gemm", recognize_gemms, false, false, true},
        {TilePass::Exp2, "exp2", fold_exp2, false, false, false},
        {TilePass::Hoist, "hoist", hoist_invariants, false, false, false},
        {TilePass::InvariantSums, "invariant-sums", take_invariant_sums_out, false, true, false},
        {TilePass::ExtraPoints, "extra-points", fuse_extra_points, false, true, false},
        {TilePass::FoldFlags, "fold-flags", fold_constant_flags, false, true, false},
        {TilePass::GemmSums, "gemm-sums", keep_gemm_sums_in_tiles, false, true, false},
        {TilePass::ForwardTemps, "forward-temps", forward_block_temps, false, true, false},
        {TilePass::LocalizeTemps, "localize-temps", localize_block_temps, false, true, false},
        {TilePass::Coalesce, "coalesce", coalesce_tile_arrays, false, false, false},
        {TilePass::GemmState, "gemm-state", accumulate_gemms_into_states, true, false, false},
        {TilePass::SkipMasked, "skip-masked", skip_masked_tiles, false, false, false},
        {TilePass::FiniteInvariants, "finite-invariants", version_on_finite_invariants, false, true, false},
        {TilePass::ElementLanes, "element-lanes", run_element_loops_as_lanes, false, true, false},
        {TilePass::RowCopies, "row-copies", copy_rows_out, false, true, false},
        {TilePass::ScaleCopies, "scale-copies", scale_row_copies, false, true, false},
        {TilePass::DeferCopies, "defer-copies", defer_row_copies, false, true, false},
        {TilePass::Prefetch, "prefetch", prefetch_next_rows, false, true, false},
        {TilePass::PrefetchTiles, "prefetch-tiles", prefetch_next_tiles, false, true, false},
        {TilePass::FirstGemmStores, "first-gemm-stores", store_first_gemm_tiles, false, true, false},
        {TilePass::LiteralTerms, "literal-terms", tabulate_literal_terms, false, true, false},
    };
    return passes;
}

}  // namespace rf::tile
