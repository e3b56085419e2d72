/** \file Derivative.h
 * Symbolic differentiation of real expressions with respect to an atom (a Var or a Load node,
 * matched by pointer equality), returning a simplified result.
 */
#pragma once

#include "ir/Expr.h"

namespace rf {

/** d e / d atom. Rules: sum, product, quotient, chain rule for every Func, Pow with constant and
 *  non-constant exponents, Min/Max/Select/Abs piecewise (as Select on the same condition:
 *  d|u| = select(0 <= u, u', -u'), d max(u, v) = select(v <= u, u', v')), Cast treated as identity
 *  (its derivative is the argument's; the caller tracks exactness), round/floor/ceil 0, Reduce of a
 *  body: the Reduce Sum of the derivative of the body (other Reduce ops: throws InternalError if
 *  the body mentions the atom). Cmp/Bool nodes and Int index arithmetic have no derivative (0 where
 *  they appear as Select conditions or Load indices).
 *  Both e and atom are simplified first (the atom must then be a Var or a Load, else
 *  InternalError); the result is canonical, so polynomial degree shows as an exact Const 0:
 *  d^3/dmu^3 (X - mu/C)^2 is the node make_const(0). */
Expr derivative(Expr e, Expr atom);

}  // namespace rf
