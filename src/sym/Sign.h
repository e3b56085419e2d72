/** \file Sign.h
 * Sign and interval analysis of real expressions: what can be proven about the value of an
 * expression for every valuation of its free atoms, given facts about some atoms.
 */
#pragma once

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

    static Interval everything() { return {}; }
    static Interval point(double v) { return {v, v, false, false, false}; }
    bool is_positive() const { return !may_be_nan && (lo > 0 || (lo == 0 && lo_open)); }
    bool is_negative() const { return !may_be_nan && (hi < 0 || (hi == 0 && hi_open)); }
    bool is_nonnegative() const { return !may_be_nan && lo >= 0; }
    bool is_nonpositive() const { return !may_be_nan && hi <= 0; }
    bool is_nonzero() const { return is_positive() || is_negative(); }
};

/** Facts about atoms (Vars and Loads), looked up by node. Unknown atoms range over everything. */
struct Facts {
    std::map<Expr, Interval> atoms;
    /** Optional extra lookup for atoms without an entry (for example a Load of a tensor known to be a
     *  sum of exponentials, which is positive). Returns false when it knows nothing. */
    std::function<bool(Expr, Interval &)> lookup;
};

/** Interval of e. Sizes (VarRole::Size) are >= 1; Index vars >= 0; exp > 0; abs >= 0; even powers
 *  >= 0; sqrt >= 0; sigmoid in (0, 1); tanh in (-1, 1); a Reduce Sum/Prod/Max/Min of a body whose
 *  interval is known has the corresponding interval (a sum over a non-empty axis of positives is
 *  positive); Select joins its branches; Cast keeps the sign. */
Interval interval_of(Expr e, const Facts &facts = {});

bool is_positive(Expr e, const Facts &facts = {});
bool is_negative(Expr e, const Facts &facts = {});
bool is_nonnegative(Expr e, const Facts &facts = {});
bool is_nonzero(Expr e, const Facts &facts = {});

}  // namespace rf
