/** \file SymTestUtil.h
 * Shared helpers of the symbolic-engine tests: short constructors, a random expression generator
 * and an evaluator wrapper over rf::Evaluator.
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ir/Eval.h"
#include "ir/Expr.h"

namespace rf::symtest {

inline Expr C(double v) { return make_const(v); }
inline Expr I(int64_t v) { return make_int(v); }
inline Expr sym(const std::string &n) { return make_symbol(n); }
inline Expr call(Func f, Expr a) { return make_call(f, a); }

/** Random expression trees over a few Symbol atoms and constants. */
class RandomExpr {
public:
    RandomExpr(uint64_t seed, std::vector<Expr> atoms) : rng_(seed), atoms_(std::move(atoms)) {}
    /** Casts quantize (their derivative is taken as the argument's): off for derivative checks. */
    bool casts = true;

    Expr gen(int depth) {
        if (depth <= 0 || pick(10) < 2) return leaf();
        Expr a = gen(depth - 1);
        switch (pick(21)) {
        case 17: return call(pick(2) ? Func::rsqrt : Func::exp2, a);
        case 18: return call(Func::log2, a);
        case 19: return make_pow(a, gen(depth - 1));  // symbolic exponent
        case 20: return casts ? make_cast(pick(2) ? DType::f32 : DType::bf16, a) : a;
        case 0: return make_add(a, gen(depth - 1));
        case 1: return make_sub(a, gen(depth - 1));
        case 2: return make_mul(a, gen(depth - 1));
        case 3: return make_div(a, gen(depth - 1));
        case 4: return make_neg(a);
        case 5: {
            static const double ex[] = {-2, -1, 0, 1, 2, 3, 0.5, -0.5};
            return make_pow(a, C(ex[pick(8)]));
        }
        case 6: return call(Func::exp, a);
        case 7: return call(Func::log, a);
        case 8: return call(Func::sqrt, a);
        case 9: return call(Func::abs, a);
        case 10: return call(Func::tanh, a);
        case 11: return call(Func::sigmoid, a);
        case 12: return make_max(a, gen(depth - 1));
        case 13: return make_min(a, gen(depth - 1));
        case 14: {
            static const CmpOp ops[] = {CmpOp::LT, CmpOp::LE, CmpOp::GT, CmpOp::GE, CmpOp::EQ, CmpOp::NE};
            Expr c = make_cmp(ops[pick(6)], a, gen(depth - 1));
            return make_select(c, gen(depth - 1), gen(depth - 1));
        }
        case 15: return make_add(make_mul(C(konst()), a), gen(depth - 1));
        default: return make_mul(a, a);
        }
    }

    Expr leaf() {
        if (pick(3) == 0) return C(konst());
        return atoms_[pick(atoms_.size())];
    }

    double konst() {
        static const double k[] = {-2, -1, -0.5, 0.5, 1, 2, 3, 0.125, 0, 1.5};
        return k[pick(10)];
    }

    size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
    double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
    std::mt19937_64 &rng() { return rng_; }

private:
    std::mt19937_64 rng_;
    std::vector<Expr> atoms_;
};

/** Evaluates with rf::Evaluator under a valuation of Vars (by node) and Loads (by node). */
inline double eval_at(Expr e, const std::map<Expr, double> &values) {
    EvalEnv env;
    env.var_value = [&](Expr v) { return values.at(v); };
    env.load_value = [&](Expr l, const int64_t *) { return values.at(l); };
    Evaluator ev(env);
    return ev.eval(e);
}

/** True when every sub-expression of e evaluates to a finite value, no division or reciprocal
 *  has a zero denominator, and no comparison is within rounding of its boundary (where rounding
 *  differences between equivalent forms flip a select): the valuation is inside the real domain
 *  of e and away from its discontinuities. Also returns the largest magnitude of a
 *  sub-expression (for rounding tolerances). */
inline bool defined_at(Expr e, const std::map<Expr, double> &values, double &max_mag) {
    bool ok = true;
    max_mag = 0;
    visit(e, [&](Expr n) {
        if (!ok || n->kind == Kind::Reduce) return;
        double v = eval_at(n, values);
        if (!std::isfinite(v)) ok = false;
        max_mag = std::max(max_mag, std::fabs(v));
        if (n->kind == Kind::Div && eval_at(n->args[1], values) == 0) ok = false;
        if (n->kind == Kind::Pow && eval_at(n->args[0], values) == 0) ok = false;
        // Near a singular point of sqrt/log/fractional powers, rounding noise of order 1e-16 in
        // the argument becomes a visible difference (sqrt) or a domain error (a tiny negative).
        bool singular = (n->kind == Kind::Pow && n->args[1]->kind == Kind::Const &&
                         n->args[1]->value != std::floor(n->args[1]->value)) ||
                        (n->kind == Kind::Call && (n->func == Func::sqrt || n->func == Func::rsqrt ||
                                                   n->func == Func::log || n->func == Func::log2));
        if (singular && std::fabs(eval_at(n->args[0], values)) < 1e-6) ok = false;
        // A negative base to a computed exponent is defined only at integer exponents, where a
        // rounding difference of the exponent (y / y vs y * y^-1) makes it NaN.
        if (n->kind == Kind::Pow && n->args[1]->kind != Kind::Const && eval_at(n->args[0], values) < 0) ok = false;
        if (n->kind == Kind::Cmp) {
            double a = eval_at(n->args[0], values), b = eval_at(n->args[1], values);
            if (std::fabs(a - b) <= 1e-7 * std::max({1.0, std::fabs(a), std::fabs(b)})) ok = false;
        }
    });
    return ok;
}

}  // namespace rf::symtest
