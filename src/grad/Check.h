/** \file Check.h
 * The derived backward against central finite differences of the forward's float64 reference, at
 * random inputs and adjoints: what `redfuse grad --check` prints and tests/unit/grad assert.
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "grad/Grad.h"
#include "interp/Tensor.h"
#include "ir/Program.h"

namespace rf {

struct GradientCheck {
    std::string input, gradient;  ///< X and its gradient output dX
    int64_t elements = 0;         ///< of the gradient
    int checked = 0;              ///< elements compared with a central difference
    int skipped = 0;              ///< elements where the forward is undefined or not differentiable
    double max_abs_err = 0;       ///< over the checked elements, beyond the rounding error of the differences
    double scale = 1;             ///< max(1, max |dX|): the error is relative to it
    int64_t worst = -1;           ///< flat index of the largest error (-1: none checked)
    bool ok = true;               ///< max_abs_err <= tolerance · scale and, for more than one element, checked > 0
};

struct GradCheckReport {
    std::vector<GradientCheck> gradients;
    bool ok = true;
    bool forward_finite = true;  ///< false: an output is not finite at the random inputs; nothing was compared
    static constexpr double kTolerance = 1e-6;  ///< of scale; h = 1e-5·max(1, |x|)
};

/** `p` with every float input and output widened to f64: the check is of the math. */
Program widened_to_f64(Program p);
/** `p` with every rounding (narrow casts, round, floor, ceil) removed from its definitions: the
 *  program whose derivative the straight-through estimator stands for (`grad --check
 *  --straight-through` checks that one; a rounded forward is piecewise constant). */
Program without_rounding(Program p);

/** The backward `g` run by the float64 reference on `inputs`, the adjoints `adjoints` (by their
 *  input names, dO, ...) and the residuals of g.forward at `inputs`: every gradient, by name. */
std::map<std::string, Tensor> run_backward_reference(const GradResult &g, const SizeBinding &s,
                                                     const std::map<std::string, Tensor> &inputs,
                                                     const std::map<std::string, Tensor> &adjoints);

/** The backward `g` of `forward` (widened by widened_to_f64) run by the float64 reference at sizes
 *  `s`, against (φ(x + h) − φ(x − h)) / 2h with φ = Σ_O <dO, O>, at up to `points` random elements
 *  of every differentiated input (φ differenced output element by output element, with the rounding
 *  error of those differences allowed for). Points where an output is not finite, or where the
 *  one-sided differences disagree by more than 1e-3·scale (a kink of max or abs, an exact tie), are
 *  skipped; when an output is not finite at the inputs themselves nothing is compared. */
GradCheckReport check_against_finite_differences(const Program &forward, const GradResult &g, const SizeBinding &s,
                                                 uint64_t seed, int points = 10);

}  // namespace rf
