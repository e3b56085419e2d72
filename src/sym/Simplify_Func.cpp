/** \file Simplify_Func.cpp
 * Canonical element-wise functions (exp, log, abs, tanh, ...) and casts.
 */
#include <numbers>

#include "ir/Eval.h"
#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"

namespace rf::sym {

namespace {

bool is_even_int(double v) { return is_int_value(v) && std::fmod(v, 2.0) == 0; }

/** log of a product: log(p * y) = log(p) + log(y) for a provably positive p and any y (y < 0 gives
 *  NaN on both sides, y = 0 gives -inf on both sides); a positive coefficient c gives the constant
 *  log(c). Only the provably positive factors are split off; the rest stays under one log. */
Expr log_of_mul(Expr a) {
    std::vector<Expr> parts, rest;
    for (Expr f : a->args) {
        bool positive = f->kind == Kind::Const ? (f->value > 0 && std::isfinite(f->value)) : pos_or_nan(f);
        if (positive) parts.push_back(canon_call(Func::log, f));
        else rest.push_back(f);
    }
    if (parts.empty()) return make_call(Func::log, a);
    if (!rest.empty()) parts.push_back(canon_call(Func::log, rest.size() == 1 ? rest[0] : canon_mul(rest)));
    return canon_add(parts);
}

/** log(x^e) = e * log(x) when x > 0;  log(x^(2k)) = 2k * log(|x|) (x = 0: -inf on both sides for
 *  k > 0, +inf for k < 0). */
Expr log_of_pow(Expr a) {
    Expr x = a->args[0], e = a->args[1];
    if (pos_or_nan(x)) return canon_mul({e, canon_call(Func::log, x)});
    if (e->kind == Kind::Const && is_even_int(e->value))
        return canon_mul({e, canon_call(Func::log, canon_call(Func::abs, x))});
    return make_call(Func::log, a);
}

}  // namespace

// Rules:
//   f(c) = fold                          every function of a constant, unless NaN from non-NaN
//   sqrt(x) = x^0.5, rsqrt(x) = x^-0.5
//   exp2(x) = exp(x * ln 2), log2(x) = log(x) * (1 / ln 2)
//   exp(log(x)) = x                      when x >= 0 (x = 0: exp(-inf) = 0); here and below "x >= 0"
//                                        means every non-NaN value (a NaN x is NaN on both sides)
//   log(exp(x)) = x                      always
//   log(x*y), log(x^e)                   see log_of_mul, log_of_pow
//   |x| = x when x >= 0;  |x| = -x when x <= 0;  |c*x| = |c| * |x|
//   tanh(c*x) = -tanh(-c*x) for c < 0    (tanh is odd: the argument's coefficient made positive)
//   round/floor/ceil(x) = x              for an Int-typed x
Expr canon_call(Func f, Expr a) {
    if (a->kind == Kind::Const) {
        double r = eval_func(f, a->value);
        if (!(std::isnan(r) && !std::isnan(a->value))) return real(r);
        return make_call(f, a);
    }
    switch (f) {
    case Func::sqrt: return canon_pow(a, real(0.5));
    case Func::rsqrt: return canon_pow(a, real(-0.5));
    case Func::exp2: return canon_call(Func::exp, canon_mul({a, real(std::numbers::ln2)}));
    case Func::log2: return canon_mul({canon_call(Func::log, a), real(1.0 / std::numbers::ln2)});
    case Func::exp:
        if (is_call(a, Func::log) && nonneg_or_nan(a->args[0])) return a->args[0];
        return make_call(f, a);
    case Func::log:
        if (is_call(a, Func::exp)) return a->args[0];
        if (a->kind == Kind::Mul) return log_of_mul(a);
        if (a->kind == Kind::Pow) return log_of_pow(a);
        return make_call(f, a);
    case Func::abs: {
        if (nonneg_or_nan(a)) return a;
        if (nonpos_or_nan(a)) return canon_neg(a);
        auto [c, rest] = split_coefficient(a);
        if (c != 1 && std::isfinite(c) && rest->kind != Kind::Const)
            return canon_mul({num(std::fabs(c), a->stype == SType::Int), canon_call(Func::abs, rest)});
        return make_call(f, a);
    }
    case Func::tanh: {
        auto [c, rest] = split_coefficient(a);
        if (c < 0 && std::isfinite(c)) return canon_neg(canon_call(Func::tanh, canon_neg(a)));
        return make_call(f, a);
    }
    case Func::round:
    case Func::floor:
    case Func::ceil:
        if (a->stype == SType::Int) return a;
        return make_call(f, a);
    case Func::sigmoid: return make_call(f, a);
    }
    return make_call(f, a);
}

// Rules:
//   cast_t(c) = round_to_dtype(c, t)     (rounding never produces NaN from a non-NaN value)
//   cast_t(cast_t(x)) = cast_t(x)        rounding to t is idempotent
// Other casts are kept: a cast is never stripped, even to f64.
Expr canon_cast(DType t, Expr a) {
    if (a->kind == Kind::Const) return num(round_to_dtype(a->value, t), is_int(t));
    if (a->kind == Kind::Cast && a->dtype == t) return a;
    return make_cast(t, a);
}

}  // namespace rf::sym
