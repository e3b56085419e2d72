/** \file Grad.h
 * The derived backward pass (docs/grad.md): from a forward program, the backward program as an
 * ordinary spec, and the forward-with-residuals spec that saves what the backward reads.
 *
 * The backward's inputs are the forward's inputs, the adjoints of the forward's float outputs (`dO`
 * for output `O`) and the residuals; its outputs are the gradients (`dQ` for input `Q`). Both
 * programs print as `.rf` text (spec/Print.h) and are parsed back, so every command works on them.
 */
#pragma once

#include <string>
#include <vector>

#include "ir/Program.h"

namespace rf {

struct GradOptions {
    /** Inputs to differentiate with respect to; empty = every float input. */
    std::vector<std::string> wrt;
    /** Treat rounding casts (and `round`) as the identity in the backward (the straight-through
     *  estimator) instead of refusing them. */
    bool straight_through = false;
};

struct GradResult {
    std::string backward_spec;  ///< `.rf` text of the backward program
    std::string forward_spec;   ///< `.rf` text of the forward with its residuals as extra outputs
    Program backward;           ///< backward_spec parsed (checked, lifted, inlined)
    Program forward;            ///< forward_spec parsed
    std::vector<std::string> notes;  ///< what the derivation decided (stabilizers, residuals), one line each
    std::vector<std::pair<std::string, std::string>> adjoints;   ///< forward output -> its adjoint input (dO)
    std::vector<std::pair<std::string, std::string>> gradients;  ///< forward input -> its gradient output (dQ)
};

/** Derives the backward of `forward` (a program made by the frontend). UserError, located at the
 *  offending definition, for what the rules refuse: a rounding cast without straight_through, a load
 *  whose index is not an index variable (or `h / G`), a multi-axis max used as a value, a nested
 *  reduction over a differentiated load, an unknown or integer `wrt` input. */
GradResult derive_backward(const Program &forward, const GradOptions &options);

}  // namespace rf
