/** \file GemmSites.h
 * Internal to src/tile: the shape both GEMM-into-state passes (GemmIntoState.cpp on the GPU,
 * GemmSumTiles.cpp on the CPU) rewrite — a tile the GEMMs fill, added once into a state — and the
 * rewrite itself, the GEMMs accumulating into the state directly.
 */
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tile/TileIR.h"

namespace rf::tile {

/** A GEMM site in a list of statements (LowerGemm.cpp, member_gemm, writes a GEMM member's update so):
 *     list[i]    tile tmp[..]            (declared 0, or uninitialized when one GEMM overwrites it)
 *     list[i+1]  gemm tmp += F x W ...   (only GEMMs into tmp: one, or the GQA choice between a block
 *                                         GEMM and one GEMM per row)
 *     list[i+2]  ... acc[e] sum= tmp[e] ...  (exactly one such sum, same index, and no other mention
 *                                         of tmp)
 *  and nothing else in the list mentions tmp. */
struct GemmSite {
    std::string tmp;  ///< the tile the GEMMs fill
    std::string acc;  ///< the array the tile is added into
};

/** The GEMM site whose declaration is list[i], when list[i..i+2] has that shape. */
std::optional<GemmSite> gemm_site(const std::vector<StmtP> &list, size_t i);

/** list[i+2] of a site without its sum `acc[e] sum= tmp[e]` and without the loops that sum leaves
 *  empty; nothing when nothing is left. */
std::optional<StmtP> without_gemm_sum(const StmtP &s, const std::string &tmp);

/** True when list[i+2] of the site reads site.acc anywhere but in its sum: the GEMMs accumulating
 *  into acc would add their product before that read. */
bool reads_state_beside_sum(const std::vector<StmtP> &list, size_t i, const GemmSite &site);

/** Rewrites the site at list[i]: acc[e] ← acc[e] + (0 + Σ_k F·W) becomes acc[e] ← acc[e] + Σ_k F·W
 *  with the GEMMs accumulating into acc (the same sum, added in the GEMM's accumulators instead of
 *  after it). The declaration of tmp and the sum go. Precondition (the caller's): acc holds the
 *  GEMM's type, and nothing in list[i+2] but the sum reads acc (it would see the sum added early). */
void accumulate_site_into_state(std::vector<StmtP> &list, size_t i, const GemmSite &site);

}  // namespace rf::tile
