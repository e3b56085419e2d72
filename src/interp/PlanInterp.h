/** \file PlanInterp.h
 * The plan interpreter (docs/design.md §4 and §6): executes the derived init / update / merge /
 * epilogue of every cascade, with random tile sizes, random segment counts and random merge trees,
 * in float64 or float32. It tests the algebra independently of any backend: it must equal the
 * reference interpreter to ~1e-12 relative in float64.
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "fuse/Plan.h"
#include "interp/Tensor.h"
#include "shard/State.h"

namespace rf {

struct PlanInterpOptions {
    bool f32 = false;        ///< round every operation and accumulation to float32
    uint64_t seed = 1;       ///< drives tile sizes, segment boundaries and merge order
    bool randomize = true;   ///< random tiles, segments and merge trees; otherwise fixed below
    int64_t tile = 16;       ///< tile length when not randomized
    int segments = 1;        ///< segments per row when not randomized
};

/** Runs the plan on the inputs; returns every tensor by name (like run_reference). */
std::map<std::string, Tensor> run_plan(const Plan &plan, const SizeBinding &sizes,
                                       const std::map<std::string, Tensor> &inputs, const PlanInterpOptions &opts);

/** The derived merge of exported partial states (shard/State.h) of the plan's chain `chain` (one
 *  pass), in the order given; `sizes` are the whole program's (the axis at its full length);
 *  `context` holds the row inputs the merge reads. UserError for a state whose fields are missing
 *  or shaped wrongly. With row_end >= 0 the states hold only the rows [row_begin, row_end) of the
 *  chain's flattened rows (each field shaped [row_end - row_begin, ...the rest]): a ring merges
 *  one block of rows per rank. */
ChainState merge_states(const Plan &plan, size_t chain, const SizeBinding &sizes, const std::map<std::string, Tensor> &context,
                        const std::vector<StateField> &fields, const std::vector<const ChainState *> &states,
                        int64_t row_begin = 0, int64_t row_end = -1);

/** The derived epilogue of a state that covers the whole axis: the program's outputs by name. */
std::map<std::string, Tensor> finalize_states(const Plan &plan, size_t chain, const SizeBinding &sizes,
                                              const std::map<std::string, Tensor> &context,
                                              const std::vector<StateField> &fields, const ChainState &state);

}  // namespace rf

