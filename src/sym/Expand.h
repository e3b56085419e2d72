/** \file Expand.h
 * Polynomial expansion: distributes products over sums and multiplies out integer powers of sums,
 * so that a polynomial in some atoms becomes a canonical sum of monomials.
 */
#pragma once

#include "ir/Expr.h"

namespace rf {

/** Expands e everywhere (also inside function arguments): products of sums are distributed and
 *  x^n for a sum x and an integer 2 <= n <= 32 is multiplied out. Negative and fractional powers of
 *  sums are kept as factors (their bases are expanded). The result is canonical
 *  (simplify(expand(e)) == expand(e)) and equal to e as a real function. A product that would have
 *  more than 4096 terms is left factored. */
Expr expand(Expr e);

}  // namespace rf
