/** \file PlanInterp.cpp
 * Executes a fusion plan element by element: each cascade row is split into random segments, each
 * segment is swept in random tiles with the derived update, the segment states are combined in a
 * random order with the derived merge, and the epilogue finalizes the members. Definitions outside
 * cascades (prologues over other axes, element-wise outputs) are evaluated literally. The
 * machinery is interp/PlanInterpImpl.h.
 */
#include "interp/PlanInterpImpl.h"

namespace rf {

using plan_interp::Interp;

std::map<std::string, Tensor> run_plan(const Plan &plan, const SizeBinding &sizes,
                                       const std::map<std::string, Tensor> &inputs, const PlanInterpOptions &opts) {
    return Interp(plan, sizes, opts).run(inputs);
}

}  // namespace rf
