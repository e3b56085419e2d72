/** \file Partial.h
 * Partial states as values (docs/sharding.md): from a program with one fused chain over an axis, the
 * "partial program" — an ordinary spec that runs the chain on a shard [lo, lo + n) of that axis and
 * outputs the chain's derived state as named tensors — and the layout of that state. Merging states
 * and finalizing them into the outputs is the plan interpreter's derived merge and epilogue
 * (interp/PlanInterp.h: merge_states, finalize_states), applied to the same member analyses.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "driver/Pipeline.h"
#include "shard/State.h"

namespace rf {

/** The partial program of one chain and the layout of its state. */
struct PartialProgram {
    std::string spec;             ///< `.rf` text: the partial program (outputs = fields, in order)
    size_t chain = 0;             ///< index into the plan's chains
    std::string axis;             ///< the chain's axis variable (of its first member)
    std::string axis_size;        ///< the size that is the axis's extent in the original program
    std::string shard_size;       ///< the size of the shard's extent in the partial program
    std::string offset_input;     ///< 0-dim i64 input holding lo ("" when no mask reads positions)
    std::string axis_size_input;  ///< 0-dim i64 input holding the whole axis's length ("" when unused)
    /** Inputs indexed by the axis (given as shards), with the dimension that is the axis. */
    std::vector<std::pair<std::string, size_t>> sharded_inputs;
    std::vector<StateField> fields;          ///< the partial program's outputs, in order
    std::vector<std::string> context_inputs; ///< row inputs that the merge or the epilogue read
    int64_t topk_limit = 0;                  ///< > 0: top-k members keep min(k, topk_limit) candidates
    size_t row_rank = 0;                     ///< leading dimensions of every field that are the chain's row
    nlohmann::json layout() const;           ///< the above as JSON (docs/sharding.md)
};

/** Derives the partial program for the chain over `axis` (empty: the program's only chain).
 *  `topk_limit` > 0 caps the candidates each top-k keeps (a shard shorter than k). UserError,
 *  located, when the program cannot be split along the axis: several chains, a chain in several
 *  passes, an input read along the axis at another index than the axis variable, an output that
 *  reads an input along the axis, a top-k whose k is not known. */
PartialProgram derive_partial(const Compilation &c, const std::string &axis, int64_t topk_limit = 0);

}  // namespace rf
