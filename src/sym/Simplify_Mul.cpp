/** \file Simplify_Mul.cpp
 * Canonical products: flattening, the numeric coefficient, merging of equal bases and of
 * exponentials, distribution of a lone coefficient over a sum and content extraction from sum factors.
 */
#include <algorithm>
#include <unordered_map>

#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"

namespace rf::sym {

namespace {

/** Multiplies constants in ascending order (operand order does not matter). Returns false when the
 *  product would be NaN although no operand is NaN (0 * inf). */
bool fold_product(std::vector<double> v, double &out) {
    std::sort(v.begin(), v.end());
    double p = 1;
    bool had_nan = false;
    for (double x : v) {
        had_nan |= std::isnan(x);
        p *= x;
    }
    if (std::isnan(p) && !had_nan) return false;
    out = p;
    return true;
}

/** Sums exponents in ascending order; false when the sum is NaN. */
bool fold_exponent_sum(std::vector<double> v, double &out) {
    std::sort(v.begin(), v.end());
    double s = 0;
    for (double x : v) s += x;
    if (std::isnan(s)) return false;
    out = s;
    return true;
}

/** The largest integer power that is written as a repeated product of an Int base. */
constexpr double kMaxIntRepeat = 16;

struct Group {
    Expr base;
    std::vector<Expr> factors;  // the original factors (base^exponent)
    std::vector<Expr> exponents;
};

Expr exponent_of(Expr f) { return f->kind == Kind::Pow ? f->args[1] : nullptr; }

/** True when a merged factor must go through grouping again: it is not a power of `base` any more
 *  (a constant, a product, an exp, or a power of another base such as abs(x)^2 = x^2). */
bool needs_another_round(Expr f, Expr base) {
    if (f->kind == Kind::Const || f->kind == Kind::Mul || is_call(f, Func::exp)) return true;
    Expr grouped_by = f->kind == Kind::Pow ? f->args[0] : f;  // (x^3)^0.5 * (x^3)^0.5 = x^3: base x
    return grouped_by != base;
}

/** Emits base^v for a merged numeric exponent v. */
void emit_power(Expr base, double v, std::vector<Expr> &out, bool &again) {
    if (v == 0) return;  // x^0 = 1
    // An Int base keeps positive integer powers as repeated products: Int arithmetic never
    // becomes a real Pow (x*x stays x*x).
    if (base->stype == SType::Int && is_int_value(v) && v > 0 && v <= kMaxIntRepeat) {
        for (int i = 0; i < static_cast<int>(v); i++) out.push_back(base);
        again |= needs_another_round(base, base);
        return;
    }
    Expr r = canon_pow(base, real(v));
    again |= needs_another_round(r, base);
    out.push_back(r);
}

/** Merges the factors of one base. Rules, with e_i the exponents:
 *   x^a * x^b = x^(a+b)   when x > 0 (any exponents, numeric or symbolic);
 *   x^a * x^b = x^(a+b)   for numeric a, b when x != 0, or when a, b have the same sign (a, b >= 0
 *                         or a, b < 0): then every valuation where the product is finite agrees,
 *                         and no division by zero is hidden (x * x^-1 stays unless x != 0).
 *   Symbolic exponents of a base of unknown sign are kept as they are. */
void merge_group(const Group &g, std::vector<Expr> &out, bool &again) {
    if (g.factors.size() == 1) {
        out.push_back(g.factors[0]);
        return;
    }
    bool all_numeric = true;
    for (Expr e : g.exponents) all_numeric &= e->kind == Kind::Const;
    if (!all_numeric && pos(g.base)) {
        Expr total = canon_add(g.exponents);
        Expr r = canon_pow(g.base, total);
        again |= needs_another_round(r, g.base);
        out.push_back(r);
        return;
    }
    std::vector<double> all, nonneg_exps, neg_exps;
    for (size_t i = 0; i < g.factors.size(); i++) {
        Expr e = g.exponents[i];
        if (e->kind != Kind::Const) {
            out.push_back(g.factors[i]);
            continue;
        }
        all.push_back(e->value);
        (e->value >= 0 ? nonneg_exps : neg_exps).push_back(e->value);
    }
    auto keep_originals = [&](bool negative) {
        for (size_t i = 0; i < g.factors.size(); i++) {
            Expr e = g.exponents[i];
            if (e->kind == Kind::Const && (e->value < 0) == negative) out.push_back(g.factors[i]);
        }
    };
    double v;
    if (nonzero(g.base) && fold_exponent_sum(all, v)) {
        emit_power(g.base, v, out, again);
        return;
    }
    if (!nonneg_exps.empty()) {
        if (fold_exponent_sum(nonneg_exps, v)) emit_power(g.base, v, out, again);
        else keep_originals(false);
    }
    if (!neg_exps.empty()) {
        if (fold_exponent_sum(neg_exps, v)) emit_power(g.base, v, out, again);
        else keep_originals(true);
    }
}

}  // namespace

// Rules (identities on the reals):
//   (a * b) * c = a * b * c                    flattening
//   c1 * c2 = fold(c1 * c2)                    unless 0 * inf (NaN): then kept apart
//   0 * x = 0                                  x not a constant
//   1 * x = x
//   x^a * x^b = x^(a+b)                        preconditions in merge_group
//   exp(a) * exp(b) = exp(a + b)               always (exp > 0)
//   c * (a + b) = c*a + c*b                    a finite coefficient times a single sum
//   x * (k*a + k*b) = k * x * (a + b)          a sum next to other factors gives up its content k
//                                              (see sum_content)
// Order: coefficient first, the other factors sorted by compare_exprs.
Expr canon_mul(const std::vector<Expr> &args) {
    std::vector<double> consts;
    bool consts_int = true;
    std::vector<Expr> work = args;
    std::vector<Expr> out;
    for (int round = 0;; round++) {
        std::vector<Expr> flat;
        flat.reserve(work.size());
        for (Expr a : work) {
            if (a->kind == Kind::Mul) flat.insert(flat.end(), a->args.begin(), a->args.end());
            else flat.push_back(a);
        }
        std::vector<Group> groups;
        std::unordered_map<Expr, size_t> index;
        std::vector<Expr> exps;  // exp factors
        out.clear();
        for (Expr f : flat) {
            if (f->kind == Kind::Const) {
                consts.push_back(f->value);
                consts_int &= f->stype != SType::Real;
                continue;
            }
            if (is_call(f, Func::exp)) {
                exps.push_back(f);
                continue;
            }
            Expr base = f->kind == Kind::Pow ? f->args[0] : f;
            Expr ex = exponent_of(f);
            auto it = index.find(base);
            if (it == index.end()) {
                index.emplace(base, groups.size());
                groups.push_back({base, {}, {}});
                it = index.find(base);
            }
            Group &g = groups[it->second];
            g.factors.push_back(f);
            g.exponents.push_back(ex ? ex : num(1));
        }
        bool again = false;
        bool last_round = round >= 8;  // a safety net: merging always shrinks, this never triggers
        for (const Group &g : groups) {
            if (last_round) out.insert(out.end(), g.factors.begin(), g.factors.end());
            else merge_group(g, out, again);
        }
        if (exps.size() == 1 || (last_round && !exps.empty())) {
            out.insert(out.end(), exps.begin(), exps.end());
        } else if (exps.size() > 1) {
            std::vector<Expr> exponents;
            for (Expr e : exps) exponents.push_back(e->args[0]);
            Expr merged = canon_call(Func::exp, canon_add(exponents));
            again |= !is_call(merged, Func::exp);
            out.push_back(merged);
        }
        if (!again || last_round) break;
        work = std::move(out);
        out = {};
    }

    double c = 1;
    if (!fold_product(consts, c)) {
        // 0 * inf: keep the constants as separate factors (never fold to NaN).
        std::sort(out.begin(), out.end(), ExprLess());
        std::sort(consts.begin(), consts.end());
        std::vector<Expr> all;
        for (double v : consts) all.push_back(num(v));
        all.insert(all.end(), out.begin(), out.end());
        return all.size() == 1 ? all[0] : make_mul(std::move(all));
    }
    bool factors_int = true;
    for (Expr f : out) factors_int &= f->stype == SType::Int;
    if (out.empty()) return num(c, consts_int);
    if (c == 0) return num(0, factors_int);
    std::sort(out.begin(), out.end(), ExprLess());
    if (out.size() == 1 && c == 1) return out[0];
    if (out.size() == 1 && out[0]->kind == Kind::Add && std::isfinite(c)) {
        // c * (a + b) = c*a + c*b: a lone sum takes the coefficient.
        std::vector<Expr> terms;
        for (Expr t : out[0]->args) terms.push_back(canon_mul({num(c, factors_int), t}));
        return canon_add(terms);
    }
    // Next to other factors, a sum gives its content to the coefficient, x * (2a + 2b) =
    // 2 * x * (a + b), so that equal products have equal coefficients and like terms collect.
    bool moved = false;
    for (Expr &f : out) {
        if (f->kind != Kind::Add) continue;
        auto [k, monic] = sum_content(f);
        if (k == 1) continue;
        c *= k;
        f = monic;
        moved = true;
    }
    if (moved) {
        // The normalized sums may now merge with each other (x * (2a + 2b) * (a + b)).
        out.push_back(num(c, factors_int));
        return canon_mul(out);
    }
    if (c == 1) return make_mul(std::move(out));
    out.insert(out.begin(), num(c, factors_int));
    return make_mul(std::move(out));
}

}  // namespace rf::sym
