/** \file Derivative.h
 * Symbolic differentiation of real expressions with respect to an atom (a Var or a Load node,
 * matched by pointer equality), returning a simplified result.
 */
#pragma once

#include "ir/Expr.h"

namespace rf {

/** d e / d atom. Rules: sum, product, quotient, chain rule for every Func, Pow with constant and
 *  non-constant exponents, Min/Max/Select/Abs piecewise (as Select on the same condition), Cast treated
 *  as identity (its derivative is the argument's; the caller tracks exactness), Reduce of a body:
 *  the Reduce Sum of the derivative of the body (other Reduce ops: throws InternalError if the body
 *  mentions the atom). Cmp/Bool nodes have no derivative (0 where they appear as Select conditions). */
Expr derivative(Expr e, Expr atom);

}  // namespace rf
