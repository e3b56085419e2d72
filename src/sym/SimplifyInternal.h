/** \file SimplifyInternal.h
 * The canonical constructors shared by the simplifier's rule files, the derivative and expand:
 * each takes arguments that are already canonical and returns a canonical node. Internal to src/sym.
 */
#pragma once

#include <cmath>
#include <vector>

#include "ir/Expr.h"
#include "sym/Sign.h"

namespace rf::sym {

// ---- Numbers
/** True for finite doubles with no fractional part. */
inline bool is_int_value(double v) { return std::isfinite(v) && v == std::floor(v); }
/** A numeric constant; Int-typed when `int_type` and the value is integral, else Real. -0 becomes 0. */
Expr num(double v, bool int_type = false);
inline Expr real(double v) { return num(v, false); }
/** Const of -1 typed like e (Int for Int expressions). */
inline Expr minus_one(Expr e) { return num(-1, e->stype == SType::Int); }
/** True when e is a Call of f. */
inline bool is_call(Expr e, Func f) { return e->kind == Kind::Call && e->func == f; }
/** Builds coefficient * rest for a canonical `rest` without coefficient (no distribution). */
Expr make_term(double coefficient, Expr rest);

/** The content of a canonical sum: (k, s) with sum = k * s and s's first coefficient 1 where k
 *  divides every coefficient exactly, else k = -1 or 1 (only the sign). */
std::pair<double, Expr> sum_content(Expr sum);

// ---- Canonical constructors (arguments must be canonical)
Expr canon_add(const std::vector<Expr> &args);
Expr canon_mul(const std::vector<Expr> &args);
Expr canon_neg(Expr a);
Expr canon_sub(Expr a, Expr b);
Expr canon_pow(Expr base, Expr exponent);
Expr canon_call(Func f, Expr a);
Expr canon_min(Expr a, Expr b);
Expr canon_max(Expr a, Expr b);
Expr canon_select(Expr c, Expr a, Expr b);
Expr canon_cmp(CmpOp op, Expr a, Expr b);
Expr canon_and(Expr a, Expr b);
Expr canon_or(Expr a, Expr b);
Expr canon_not(Expr a);
Expr canon_cast(DType t, Expr a);
Expr canon_idiv(Expr a, Expr b);
Expr canon_mod(Expr a, Expr b);

/** simplify() without the entry check (for use inside a SymEntry). */
Expr simplify_rec(Expr e);

// ---- Sign queries under the default facts, cached per arena (inside a SymEntry)
Interval interval_default(Expr e);
inline bool pos(Expr e) { return interval_default(e).is_positive(); }
inline bool nonneg(Expr e) { return interval_default(e).is_nonnegative(); }
inline bool nonpos(Expr e) { return interval_default(e).is_nonpositive(); }
inline bool nonzero(Expr e) { return interval_default(e).is_nonzero(); }
/** Every non-NaN value of e is >= 0 (resp. > 0). Enough for rules whose two sides are both NaN
 *  when e is NaN (abs(x) = x, exp(log x) = x, log(p*y) = log p + log y, ...). */
inline bool nonneg_or_nan(Expr e) { return interval_default(e).lo >= 0; }
inline bool pos_or_nan(Expr e) {
    Interval i = interval_default(e);
    return i.lo > 0 || (i.lo == 0 && i.lo_open);
}
inline bool nonpos_or_nan(Expr e) { return interval_default(e).hi <= 0; }

}  // namespace rf::sym
