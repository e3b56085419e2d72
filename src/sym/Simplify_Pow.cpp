/** \file Simplify_Pow.cpp
 * Canonical powers: constant folding, nested powers, powers of products and of exponentials.
 */
#include "ir/Eval.h"
#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"

namespace rf::sym {

namespace {

constexpr double kMaxIntRepeat = 16;

bool is_even_int(double v) { return is_int_value(v) && std::fmod(v, 2.0) == 0; }

/** x^v with the evaluator's semantics (x^-1 = 1 / x). */
double pow_value(double x, double v) { return v == -1 ? eval_div(1.0, x) : std::pow(x, v); }

/** (x^a)^v for a numeric inner exponent a and numeric outer v.
 *   (x^a)^v = x^(a*v)     when v is an integer (for x < 0 the left side is defined only for integer a;
 *                         x = 0 gives 0 or inf on both sides), or when x >= 0 (or NaN: a, v != 0
 *                         here, so a NaN x gives NaN on both sides);
 *   (x^a)^v = |x|^(a*v)   when a is an even integer (x^a = |x|^a >= 0); |x|^(2k) = x^(2k), |x|^1 = |x|.
 *   Otherwise kept. */
Expr pow_of_pow(Expr b, Expr e) {
    Expr x = b->args[0], a = b->args[1];
    if (a->kind != Kind::Const) {
        // (x^a)^e = x^(a*e) for symbolic a when e is an integer or x >= 0.
        if ((e->kind == Kind::Const && is_int_value(e->value)) || nonneg_or_nan(x)) return canon_pow(x, canon_mul({a, e}));
        return make_pow(b, e);
    }
    if (e->kind != Kind::Const) {
        if (nonneg_or_nan(x)) return canon_pow(x, canon_mul({a, e}));
        return make_pow(b, e);
    }
    double av = a->value, v = e->value, p = av * v;
    if (!std::isfinite(p)) return make_pow(b, e);
    if (is_int_value(v) || nonneg_or_nan(x)) return canon_pow(x, real(p));
    if (is_even_int(av)) {
        if (p == 1) return canon_call(Func::abs, x);
        if (is_even_int(p)) return canon_pow(x, real(p));
        return canon_pow(canon_call(Func::abs, x), real(p));
    }
    return make_pow(b, e);
}

/** (c * f1 * ... * fn)^e:
 *   = c^e * f1^e * ... * fn^e                  for an integer e (always);
 *   = p^e * (rest)^e                           pulling out every provably positive factor p
 *                                              (x*y)^e = x^e * y^e when x > 0 (or NaN), for
 *                                              any y and e != 0. */
Expr pow_of_mul(Expr b, Expr e) {
    bool integer = e->kind == Kind::Const && is_int_value(e->value);
    std::vector<Expr> pulled, rest;
    for (Expr f : b->args) {
        bool positive = f->kind == Kind::Const ? f->value > 0 : pos_or_nan(f);
        if (integer || positive) pulled.push_back(canon_pow(f, e));
        else rest.push_back(f);
    }
    if (pulled.empty()) return make_pow(b, e);
    if (!rest.empty()) {
        Expr r = rest.size() == 1 ? rest[0] : canon_mul(rest);
        pulled.push_back(canon_pow(r, e));
    }
    return canon_mul(pulled);
}

}  // namespace

// Rules:
//   x^0 = 1, x^1 = x                            (pow(x, 0) = 1 for every x, also in IEEE)
//   c1^c2 = fold                                unless the result is NaN from non-NaN constants
//   1^e = 1;  c^e = exp(e * log c) for c > 0    (a constant base with a symbolic exponent)
//   (x^a)^b, (x*y)^b                            see pow_of_pow, pow_of_mul
//   exp(a)^b = exp(a*b)                         always (exp(a) > 0)
//   |x|^(2k) = x^(2k)
//   (k*s)^v = k^v * s^v                         a sum's content k, for integer v or k > 0
//   x^n = x * ... * x                           for an Int-typed x and integer 1 <= n <= 16: index
//                                               arithmetic never becomes a real Pow
Expr canon_pow(Expr b, Expr e) {
    if (e->kind == Kind::Const) {
        if (e->stype != SType::Real) e = real(e->value);
        double v = e->value;
        if (v == 0) return real(1);
        if (v == 1) return b;
        if (b->kind == Kind::Const) {
            double r = pow_value(b->value, v);
            if (std::isnan(r) && !std::isnan(b->value) && !std::isnan(v)) return make_pow(b, e);
            return real(r);
        }
        if (b->kind == Kind::Pow) return pow_of_pow(b, e);
        if (b->kind == Kind::Mul) return pow_of_mul(b, e);
        if (is_call(b, Func::exp)) return canon_call(Func::exp, canon_mul({b->args[0], e}));
        if (is_call(b, Func::abs) && is_even_int(v)) return canon_pow(b->args[0], e);
        if (b->kind == Kind::Add) {
            // (k*s)^v = k^v * s^v for an integer v, or k > 0 (the sum's content k, see sum_content)
            auto [k, s] = sum_content(b);
            if (k != 1 && (is_int_value(v) || k > 0)) return canon_mul({canon_pow(real(k), e), canon_pow(s, e)});
        }
        if (b->stype == SType::Int && is_int_value(v) && v > 1 && v <= kMaxIntRepeat)
            return canon_mul(std::vector<Expr>(static_cast<size_t>(v), b));
        return make_pow(b, e);
    }
    if (b->kind == Kind::Const) {
        if (b->value == 1) return real(1);
        if (b->value > 0 && std::isfinite(b->value)) return canon_call(Func::exp, canon_mul({e, real(std::log(b->value))}));
        return make_pow(b, e);
    }
    if (b->kind == Kind::Pow) return pow_of_pow(b, e);
    if (b->kind == Kind::Mul) return pow_of_mul(b, e);
    if (is_call(b, Func::exp)) return canon_call(Func::exp, canon_mul({b->args[0], e}));
    return make_pow(b, e);
}

}  // namespace rf::sym
