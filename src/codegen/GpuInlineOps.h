/** \file GpuInlineOps.h
 * GPU text of the tile IR's two list operations, printed inline (OpenCL 1.2 cannot pass a pointer of
 * unknown address space to a helper function): sorted top-k insertion and the shift of a
 * polynomial state to a new reference point.
 */
#pragma once

#include <string>
#include <vector>

namespace rf::gpu_mapping {

/** The C text of a TopKInsert's operands: the list's value, index and count arrays, the list's
 *  first slot, the count's index, the capacity, and the inserted value and index. */
struct TopKText {
    std::string values, indices, counts, offset, count_index, k, value, index;
};
/** Inserts (value, index) into the sorted list (rfk::topk_insert's order: rf_better, NaN first,
 *  lower index on ties); `ind` levels of indentation. */
std::string gpu_topk_insert(const TopKText &t, int ind);

/** Moves the shift-form state base[at + a] (one slot per multi-index alphas[a]) from reference
 *  points `from` to `to` (C expressions, one per variable), unrolled at generation time:
 *  S_b(c') = Σ_{a ≥ b} Π_i C(a_i, b_i) (c'_i − c_i)^(a_i − b_i) S_a(c) (docs/design.md §4, polynomial). */
std::string gpu_poly_shift(const std::vector<std::vector<int>> &alphas, const std::string &base, const std::string &at,
                           const std::vector<std::string> &from, const std::vector<std::string> &to, int ind);

}  // namespace rf::gpu_mapping
