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

}  // namespace rf
