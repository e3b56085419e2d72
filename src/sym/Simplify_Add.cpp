/** \file Simplify_Add.cpp
 * Canonical sums: flattening, collection of like terms, constant folding and the term order.
 */
#include <algorithm>
#include <unordered_map>

#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"

namespace rf::sym {

Expr num(double v, bool int_type) {
    if (v == 0) v = 0.0;  // -0 -> +0: the reals have one zero
    return make_const(v, int_type && is_int_value(v) ? SType::Int : SType::Real);
}

Expr make_term(double coefficient, Expr rest) {
    if (coefficient == 1) return rest;
    bool int_type = rest->stype == SType::Int;
    std::vector<Expr> args{num(coefficient, int_type)};
    if (rest->kind == Kind::Mul) args.insert(args.end(), rest->args.begin(), rest->args.end());
    else args.push_back(rest);
    return make_mul(std::move(args));
}

namespace {

bool t_is_one(Expr e) { return e->kind == Kind::Const && e->value == 1; }

/** Sums constants in ascending order, so that the result does not depend on operand order.
 *  Returns false when the sum would be NaN although no operand is NaN (inf + -inf). */
bool fold_sum(std::vector<double> v, double &out) {
    std::sort(v.begin(), v.end());
    double s = 0;
    bool had_nan = false;
    for (double x : v) {
        had_nan |= std::isnan(x);
        s += x;
    }
    if (std::isnan(s) && !had_nan) return false;
    out = s;
    return true;
}

struct LikeTerms {
    Expr rest;
    std::vector<double> coefficients;
};

}  // namespace

// Rules (all identities on the reals):
//   (a + b) + c = a + b + c                          flattening
//   c1 + c2 = fold(c1 + c2)                          unless inf + -inf (NaN): then kept apart
//   k1*t + k2*t = (k1 + k2)*t                        like terms, t without coefficient
//   0*t = 0                                          a collected coefficient of 0 drops the term
//   x + 0 = x
// Order: terms sorted by compare_exprs of the term without its coefficient; the constant last.
// Type: Int when every non-constant term is Int and the constant is integral.
Expr canon_add(const std::vector<Expr> &args) {
    std::vector<Expr> flat;
    flat.reserve(args.size());
    for (Expr a : args) {
        if (a->kind == Kind::Add) flat.insert(flat.end(), a->args.begin(), a->args.end());
        else flat.push_back(a);
    }
    std::vector<double> consts;
    bool consts_int = true;
    bool terms_int = true;
    std::vector<LikeTerms> groups;
    std::unordered_map<Expr, size_t> index;
    for (Expr t : flat) {
        if (t->kind == Kind::Const) {
            consts.push_back(t->value);
            consts_int &= t->stype != SType::Real;
            continue;
        }
        terms_int &= t->stype == SType::Int;
        auto [c, rest] = split_coefficient(t);
        auto it = index.find(rest);
        if (it == index.end()) {
            index.emplace(rest, groups.size());
            groups.push_back({rest, {c}});
        } else {
            groups[it->second].coefficients.push_back(c);
        }
    }

    std::vector<std::pair<Expr, double>> terms;  // (rest, coefficient)
    for (auto &g : groups) {
        double c;
        if (fold_sum(g.coefficients, c)) {
            if (c != 0) terms.emplace_back(g.rest, c);
        } else {
            for (double k : g.coefficients) terms.emplace_back(g.rest, k);
        }
    }
    std::sort(terms.begin(), terms.end(), [](const auto &a, const auto &b) {
        int c = compare_exprs(a.first, b.first);
        return c != 0 ? c < 0 : a.second < b.second;
    });

    std::vector<Expr> out;
    out.reserve(terms.size() + 1);
    for (auto &[rest, c] : terms) out.push_back(make_term(c, rest));

    double k = 0;
    if (fold_sum(consts, k)) {
        bool had_terms = !groups.empty();
        bool int_type = had_terms ? terms_int : consts_int;
        if (k != 0 || out.empty()) out.push_back(num(k, int_type));
    } else {
        std::sort(consts.begin(), consts.end());
        for (double v : consts) out.push_back(num(v, false));
    }
    if (out.size() == 1) return out[0];
    return make_add(std::move(out));
}

// Content of a sum: k * (a + b/k) with k the coefficient of the first term, so that the first term
// has coefficient 1. Used when k divides every coefficient exactly (in Int sums: as integers);
// otherwise only the sign is taken out (k = -1 when the first coefficient is negative), which is
// always exact. Non-finite coefficients: k = 1.
std::pair<double, Expr> sum_content(Expr sum) {
    double k0 = split_coefficient(sum->args[0]).first;
    if (k0 == 1 || !std::isfinite(k0) || k0 == 0) return {1.0, sum};
    bool int_type = sum->stype == SType::Int;
    std::vector<std::pair<double, Expr>> parts;
    bool exact = true;
    for (Expr t : sum->args) {
        auto [c, rest] = split_coefficient(t);
        if (!std::isfinite(c)) return {1.0, sum};
        double q = c / k0;
        if (std::fma(q, k0, -c) != 0 || (int_type && !is_int_value(q))) exact = false;  // q * k0 == c exactly
        parts.emplace_back(c, rest);
    }
    double k = exact ? k0 : (k0 < 0 ? -1.0 : 1.0);
    if (k == 1) return {1.0, sum};
    std::vector<Expr> terms;
    for (auto &[c, rest] : parts)
        terms.push_back(rest->kind == Kind::Const && t_is_one(rest) ? num(c / k, int_type) : make_term(c / k, rest));
    return {k, canon_add(terms)};
}

Expr canon_neg(Expr a) { return canon_mul({minus_one(a), a}); }

Expr canon_sub(Expr a, Expr b) { return canon_add({a, canon_neg(b)}); }

}  // namespace rf::sym
