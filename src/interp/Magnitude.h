/** \file Magnitude.h
 * The magnitude reference: beside every float64 reference value, a scale M >= |value| that grows
 * where terms cancel (Σ|terms| for a sum), so `--check` can hold a kernel to an error proportional
 * to what its arithmetic can achieve rather than to a result that cancellation made small.
 */
#pragma once

#include <map>
#include <string>

#include "interp/Tensor.h"
#include "ir/Program.h"

namespace rf {

/*
 * Why: a float computation of s = Σ t_i has an a-priori forward error bound of the form
 * c(n) · u · Σ|t_i| (u the unit roundoff), not c(n) · u · |s|. When the terms cancel, |s| << Σ|t_i|
 * and a tolerance relative to |s| rejects results that are as accurate as float arithmetic allows
 * (scripts/fuzz_specs.py found one: two terms of tanh(x - mu)·w cancelling on the CPU).
 *
 * The model (first-order running error analysis, counting only what cancellation adds). Every
 * real subexpression e gets an excess x(e) >= 0 and M(e) = |e| + x(e); x is 0 unless a cancellation
 * happened at or below e. With a tolerance T per unit of M, T·|e| is the error the old tolerance
 * already budgets for e, and T·x(e) is the extra error a cancellation below e lets through:
 *   inputs, index and boolean values, constants:   x = 0
 *   sums (a + b, a - b, sum):  M = Σ s(t) over the terms, where s(t) = M(t) for a term carrying
 *                              rounding error (its error is about T·M(t), and |Σ| can be far
 *                              smaller), and for an exact term (an input, a max of inputs, a
 *                              float-representable constant) 0 in a sum of two (one rounding,
 *                              relative to the result) or |t| in a sum of three or more (the partial
 *                              sums an implementation rounds, in its own order, are bounded only by
 *                              Σ|t|)
 *   a · b, products:           x = |a| x(b) + |b| x(a)        (first order: relative excesses add)
 *   a / b:                     x = x(a) / |b| + |a| x(b) / b²  (b's relative excess amplifies a/b)
 *   b ^ p:                     x = |p · b^(p-1)| x(b) (+ |b^p ln b| x(p) for b > 0)
 *   f(a):                      x = |f'(a)| · x(a)    (rounding functions: 0, piecewise constant);
 *                              log and log2 of an inexact a: x = |f'(a)| · M(a), since a's own
 *                              rounding, T·|a|, moves log a by T absolutely (a · log'(a) = 1)
 *   max, min, top-k:           x = max x(candidates) (order statistics are 1-Lipschitz)
 *   select, cast, negation:    x of the chosen / rounded / negated operand
 * Without cancellation every x is 0 and M = |value|: the tolerance of a computation whose sums do
 * not cancel is unchanged (softmax's exp(x - max x) subtracts exact values: no excess). Non-finite
 * values (masked rows) and NaN scales get x = 0, so M never loosens what it cannot reason about.
 */

/** M for every definition of `p` (by name; a top-k definition's values under its name, its indices
 *  are exact and get none), given `reference` = run_reference(p, sizes, inputs) on the same sizes.
 *  Inputs are exact (M = |x|). Shapes equal the reference's; every element is >= |reference|. */
std::map<std::string, Tensor> run_magnitude(const Program &p, const SizeBinding &sizes,
                                            const std::map<std::string, Tensor> &reference);

}  // namespace rf
