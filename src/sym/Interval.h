/** \file Interval.h
 * Interval arithmetic on the extended reals with open/closed endpoints, the building blocks of
 * the sign analysis. Internal to src/sym.
 *
 * Conventions: an endpoint is "attained" when it is closed. An open infinite endpoint means
 * "unbounded" (the value is finite), a closed infinite endpoint means the value may be that
 * infinity (a -inf mask constant). Results are conservative: the true range is always inside.
 */
#pragma once

#include <functional>

#include "sym/Sign.h"

namespace rf::sym::iv {

Interval make(double lo, bool lo_open, double hi, bool hi_open, bool nan = false);
/** The finite reals (-inf, inf): the range of an atom nothing is known about. */
Interval reals();
Interval hull(const Interval &a, const Interval &b);
Interval intersect(const Interval &a, const Interval &b);
Interval neg(const Interval &a);
Interval add(const Interval &a, const Interval &b);
Interval mul(const Interval &a, const Interval &b);
/** 1 / a with the evaluator's division (1 / 0 = inf). */
Interval recip(const Interval &a);
/** a^p for a numeric exponent p (integer or not). */
Interval pow_const(const Interval &a, double p);
/** f(a) for a nondecreasing f; `strict` keeps open endpoints open (f strictly increasing). Finite
 *  non-zero endpoints are widened by one ulp (library functions are accurate to an ulp). */
Interval increasing(const Interval &a, const std::function<double(double)> &f, bool strict = true);
/** f(a) for a strictly decreasing f. */
Interval decreasing(const Interval &a, const std::function<double(double)> &f);
Interval min(const Interval &a, const Interval &b);
Interval max(const Interval &a, const Interval &b);
/** |a|. */
Interval abs(const Interval &a);

}  // namespace rf::sym::iv
