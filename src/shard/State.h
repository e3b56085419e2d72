/** \file State.h
 * The layout of a chain's partial state as named tensors (docs/sharding.md, "State layout"): what
 * each tensor holds for its member. Shared by the partial program (shard/Partial.h) and the
 * derived merge and epilogue that consume it (interp/PlanInterp.h).
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "interp/Tensor.h"

namespace rf {

/** What one state tensor holds for its member (docs/sharding.md, "State layout"). */
enum class StateRole : uint8_t {
    Acc,         ///< the running value: Σ U(x, tag) (multiplicative), the sum/product/max/min, or the
                 ///< selected value of an argmax/argmin (in the selection's own space)
    Tag,         ///< δ_i at which Acc or the moments are referenced (one tensor per δ: tag0, tag1, ...)
    Moment,      ///< S_α: the shifted moments of a polynomial or exponential-polynomial member
    Index,       ///< argmax/argmin: the global index of the selected element
    TopValues,   ///< top-k: the selected values, best first (min(k, n) of them)
    TopIndices,  ///< top-k: their global indices
};
const char *state_role_name(StateRole r);

struct StateField {
    std::string key;     ///< the state's name for it: "<member>.<role>[i]" (e.g. "l.acc", "O.sum.tag0")
    std::string member;  ///< the chain member it belongs to
    StateRole role = StateRole::Acc;
    int slot = 0;        ///< Tag: which δ; Moment: which α (the order of the member's basis)
    bool is_index = false;  ///< holds axis positions (the offset is added after the partial kernel)
    bool per_row = false;   ///< shaped like the chain's row only (a tag that no later variable changes)
    int64_t k = 0;          ///< TopValues: the candidates a state of at least k positions keeps
};

/** A chain's partial state over some positions of its axis: n, and one tensor per field (by key).
 *  Tensors are float64 on the host; index fields hold global axis positions. */
struct ChainState {
    int64_t n = 0;
    std::map<std::string, Tensor> fields;
};

}  // namespace rf
