/** \file ExpPolynomial.cpp
 * The exponential-polynomial form (docs/design.md §3): a sum member whose body is
 *     F(x, δ) = e^{λ·δ} · Q(x, δ),   Q a polynomial of degree p <= 4 in the δ atoms,
 * with λ a constant vector (the rate of the exponential of the earlier results; e.g. λ = -1 on
 * δ = m for exp(X - m)). The functions e^{λ·δ} δ^α, |α| <= p, span a space closed under shifts of δ,
 * so the state is the vector of "moments" around a reference point c,
 *     T_α(c) = Σ_j e^{λ·c} ∂^α Q(x_j, c) / α!        (F(x, δ) = Σ_α T_α-terms · (δ - c)^α e^{λ·(δ - c)}),
 * and moving the reference from c to c' is the triangular map
 *     T_β(c') = e^{λ·(c' - c)} · Σ_{α >= β} Π_i C(α_i, β_i) (c'_i - c_i)^(α_i - β_i) T_α(c)
 * (the binomial shift of the polynomial form times the rescale α of the multiplicative form). It
 * holds for any c in real arithmetic; the running estimate of δ is used, which for a running max
 * keeps e^{λ·(c' - c)} <= 1 and every update term e^{λ·c} ∂^α Q (x, c) = e.g. exp(X - m_run) <= 1:
 * the stabilised online algorithm. The result is T_0 moved to the final δ.
 * λ = 0 is the polynomial form and p = 0 the multiplicative one; both are tried first.
 * One rate per member: a sum whose additive terms have several constant rates was already split
 * into one sum per rate before planning (fuse/SplitRates.cpp); what reaches here with two rates
 * mixes them inside one term (sqrt(exp(X - m) + exp(2X - 2m))) and is refused.
 */
#include <cmath>

#include "fuse/Forms.h"
#include "sym/Derivative.h"
#include "sym/Simplify.h"

namespace rf::fuse_detail {

namespace {

/** λ_i = ∂(argument)/∂δ_i for every exp whose argument moves with δ; every such exp must have the
 *  same constant rates. Returns false with a reason otherwise. */
bool find_rates(const Body &b, std::vector<double> &rates, std::string &reason) {
    std::vector<Expr> exps;
    visit(b.F, [&](Expr n) {
        if (n->kind == Kind::Call && n->func == Func::exp && depends_on_d(b, n->args[0])) exps.push_back(n);
    });
    if (exps.empty()) {
        reason = "F has no exponential of the earlier results";
        return false;
    }
    for (size_t k = 0; k < exps.size(); k++) {
        for (size_t i = 0; i < b.delta_syms.size(); i++) {
            Expr r = simplify(derivative(exps[k]->args[0], b.delta_syms[i]));
            if (!r->is_const() || !std::isfinite(r->value)) {
                reason = "the exponent of " + shown(exps[k]) +
                         " is not linear with constant rates in the earlier results (its rate is " + shown(r) + ")";
                return false;
            }
            if (k == 0) rates.push_back(r->value);
            else if (rates[i] != r->value) {
                reason = "exponentials of the earlier results with different rates: " +
                         shown(exps[0]) + " and " + shown(exps[k]) +
                         " (one rate per member; the rate split makes one sum per rate only of additive terms)";
                return false;
            }
        }
    }
    return true;
}

/** λ·δ over the given symbols. */
Expr rate_times(const std::vector<double> &rates, const std::vector<Expr> &syms) {
    std::vector<Expr> terms;
    for (size_t i = 0; i < rates.size(); i++)
        if (rates[i] != 0) terms.push_back(make_mul(make_const(rates[i]), syms[i]));
    return terms.empty() ? make_const(0) : make_add(terms);
}

/** e · f with f pushed into the branches of selects and the terms of sums, so that
 *  select(mask, (X - m)·exp(X - m), 0) · exp(m) simplifies to select(mask, (X - m)·exp(X), 0). */
Expr scale_into(Expr e, Expr f) {
    if (e->kind == Kind::Select) return make_select(e->args[0], scale_into(e->args[1], f), scale_into(e->args[2], f));
    if (e->kind == Kind::Add) {
        std::vector<Expr> terms;
        for (Expr t : e->args) terms.push_back(scale_into(t, f));
        return make_add(terms);
    }
    if (e->is_const(0)) return e;
    return simplify(make_mul(e, f));
}

}  // namespace

bool derive_exp_polynomial(const Body &b, MemberAnalysis &m, std::string &reason) {
    if (m.op != ReduceOp::Sum) {
        reason = "applies to sums only";
        return false;
    }
    if (b.inexact) {
        reason = "a rounding cast mixes the axis data and earlier results";
        return false;
    }
    std::vector<double> rates;
    if (!find_rates(b, rates, reason)) return false;
    // Q = F · e^{-λ·δ}: the simplifier merges exp(X - m) · exp(m) into exp(X).
    Expr growth = make_call(Func::exp, rate_times(rates, b.delta_syms));
    Body q = b;
    q.F = simplify(scale_into(b.F, make_call(Func::exp, make_neg(rate_times(rates, b.delta_syms)))));
    bool left = false;
    visit(q.F, [&](Expr n) {
        if (n->kind == Kind::Call && n->func == Func::exp && depends_on_d(b, n->args[0])) left = true;
    });
    if (left) {
        reason = "terms of F grow with different exponential rates in the earlier results (one rate per member; "
                 "the rate split makes one sum per rate only of additive terms): F · exp(-λ·d) = " + shown(q.F);
        return false;
    }
    std::string why;
    if (!derive_polynomial(q, m, why)) {
        reason = "F · exp(-λ·d) = " + shown(q.F) + ": " + why;
        return false;
    }
    // The rates that keep the terms in range (λ_i < 0 on a running max, > 0 on a running min) stay in
    // the running state; where there are such rates, the others are deferred to the epilogue:
    // e^{λ·δ} = e^{λ_run·δ} e^{λ_def·δ} and e^{λ_def·δ} is constant along the axis, so
    //     Σ_j F = e^{λ_def·δ} Σ_j e^{λ_run·δ} Q(x_j, δ),
    // the moments are those of e^{λ_run·δ} Q, and e^{λ_def·δ} multiplies the value at the final δ
    // (exp(X - m + mu)·(X - m): exp(mu) at its final value, not the running one, which can overflow
    // where the spec does not; Multiplicative.cpp split_deferred for the same split of H).
    std::vector<double> run_rates = rates, def_rates(rates.size(), 0.0);
    bool stable = false, other = false, unbounded = false;
    for (size_t i = 0; i < rates.size(); i++) {
        if (b.stabilizes(i, rates[i])) stable = true;
        else if (rates[i] != 0) other = true;
        unbounded = unbounded || b.unbounded_alone(i, rates[i]);
    }
    // A rate on a running sum or mean with no stabilizing rate beside it: as in the multiplicative form
    // (Multiplicative.cpp), the running terms could overflow where the spec's do not.
    if (unbounded && !stable) {
        reason = "F · exp(-λ·d) = " + shown(q.F) + ": a rate on a running value that moves either way (not a running max "
                 "or min), with no stabilizing rate beside it: the running terms could overflow where the spec's do not";
        return false;
    }
    if (stable && other)
        for (size_t i = 0; i < rates.size(); i++)
            if (!b.stabilizes(i, rates[i])) std::swap(run_rates[i], def_rates[i]);
    Expr run_growth = make_call(Func::exp, rate_times(run_rates, b.delta_syms));
    // Stabilised basis: e^{λ_run·δ} ∂^α Q / α! (exp(X) · exp(-m) becomes exp(X - m)).
    for (Expr &B : m.basis) B = simplify(scale_into(B, run_growth));
    m.rates = run_rates;
    m.H = simplify(growth);
    m.H_run = simplify(run_growth);
    m.H_def = stable && other ? simplify(make_call(Func::exp, rate_times(def_rates, b.delta_syms))) : make_const(1);
    m.defers_exp = stable && other;
    // α = e^{λ_run·δ} / e^{λ_run·δ_old} = e^{λ_run·(δ - δ_old)}: the factor of the triangular map.
    m.old_syms.clear();
    for (Expr d : b.delta_syms) m.old_syms.push_back(make_symbol(d->name + "@old"));
    m.alpha = simplify(make_call(Func::exp, make_sub(rate_times(run_rates, b.delta_syms), rate_times(run_rates, m.old_syms))));
    m.preconditions.push_back("a state of zeros is never rescaled (no 0·inf); a non-finite running d is used as 0");
    return true;
}

}  // namespace rf::fuse_detail
