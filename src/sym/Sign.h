/** \file Sign.h
 * Sign and interval analysis of real expressions: what can be proven about the value of an
 * expression for every valuation of its free atoms, given facts about some atoms.
 */
#pragma once

#include <cmath>
#include <functional>
#include <map>

#include "ir/Expr.h"

namespace rf {

/** A closed interval [lo, hi] of the extended reals, plus flags that make the strict cases exact. */
struct Interval {
    double lo = -INFINITY;
    double hi = INFINITY;
    bool lo_open = false;  // lo itself is excluded (e.g. exp(x) in (0, inf))
    bool hi_open = false;
    bool may_be_nan = false;

    /** [-inf, inf], infinities included (closed). */
    static Interval everything() { return {}; }
    static Interval point(double v) { return {v, v, false, false, false}; }
    /** (-inf, inf): any finite real (open infinite endpoints mean "unbounded", not "may be inf"). */
    static Interval real() { return {-INFINITY, INFINITY, true, true, false}; }
    /** (0, inf): a finite positive real. Give "tensor s is positive" facts in this form: a closed
     *  inf endpoint would admit s = inf, and 1 / s would not be provably positive. */
    static Interval positive() { return {0, INFINITY, true, true, false}; }
    /** [0, inf): a finite non-negative real. */
    static Interval nonnegative() { return {0, INFINITY, false, true, false}; }
    static Interval negative() { return {-INFINITY, 0, true, true, false}; }
    bool is_positive() const { return !may_be_nan && (lo > 0 || (lo == 0 && lo_open)); }
    bool is_negative() const { return !may_be_nan && (hi < 0 || (hi == 0 && hi_open)); }
    bool is_nonnegative() const { return !may_be_nan && lo >= 0; }
    bool is_nonpositive() const { return !may_be_nan && hi <= 0; }
    bool is_nonzero() const { return is_positive() || is_negative(); }
};

/** Facts about atoms (Vars and Loads), looked up by node. An atom with no fact is any finite real
 *  (Interval::real()); a Size var is >= 1 and an Index var >= 0 unless a fact says more (a fact for
 *  a Var is intersected with what its role implies). */
struct Facts {
    std::map<Expr, Interval> atoms;
    /** Optional extra lookup for atoms without an entry (for example a Load of a tensor known to be a
     *  sum of exponentials, which is positive). Returns false when it knows nothing. */
    std::function<bool(Expr, Interval &)> lookup;
};

/** Interval of e. Sizes (VarRole::Size) are >= 1; Index vars >= 0; exp > 0; abs >= 0; even powers
 *  >= 0; sqrt >= 0; sigmoid in (0, 1); tanh in (-1, 1); a Reduce Sum/Prod/Max/Min of a body whose
 *  interval is known has the corresponding interval (a sum over a non-empty axis of positives is
 *  positive); Select joins its branches; Cast keeps the sign (a positive value may round to 0 in
 *  a narrow type, so a cast of a positive is only non-negative unless its lower bound survives
 *  the rounding).
 *  Constants are exact, including -inf (a closed endpoint: exp(select(c, x, -inf)) is only >= 0).
 *  may_be_nan is set where a domain can be violated (log or a fractional power of a possibly
 *  negative value, inf - inf, 0 * inf, a NaN constant); is_positive() etc. are false then.
 *  Results under the default facts are cached per arena; with facts, within the call. */
Interval interval_of(Expr e, const Facts &facts = {});

bool is_positive(Expr e, const Facts &facts = {});
bool is_negative(Expr e, const Facts &facts = {});
bool is_nonnegative(Expr e, const Facts &facts = {});
bool is_nonzero(Expr e, const Facts &facts = {});
/** e >= 0 or e <= 0 for every valuation (neither may be NaN). */
bool has_one_sign(Expr e, const Facts &facts = {});
/** Whether a plain sum of `body` keeps its terms relative to a reference point, its first term
 *  (Σ v = Σ (v − ref) + n·ref): not for a body with a select, nor for terms of one sign. The tile
 *  lowering (shift_reference in src/tile/LowerPass.cpp) and the plan interpreter
 *  (src/interp/PlanInterp.cpp) both ask it, so their sums round alike. */
bool sum_shifts_terms(Expr body);

}  // namespace rf
