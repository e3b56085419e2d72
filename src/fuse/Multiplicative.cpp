/** \file Multiplicative.cpp
 * The multiplicative form with deferred factors (docs/design.md §3): a sum or product member
 * whose body factors as F(x, δ) = G(x) · H(δ). The running state is s = H_run(δ_cur) · Σ G; when
 * δ moves from δ_old to δ_new, s ← s · H_run(δ_new) / H_run(δ_old). Only the exp factors of H
 * (those that keep exp(x) in range) stay in the running state; the other factors of H are applied
 * once in the epilogue.
 */
#include <cmath>

#include "fuse/Forms.h"
#include "sym/Expand.h"
#include "sym/Simplify.h"
#include "support/Error.h"

namespace rf::fuse_detail {

namespace {

struct Split {
    Expr G, H;
};

bool is_integer_const(Expr e) { return e->is_const() && std::isfinite(e->value) && e->value == std::floor(e->value); }

bool split(const Body &b, Expr e, Split &out, std::string &reason);

/** The outcome of a rule that covers only some nodes of its kind (calls, powers). */
enum class Rule { Split, Failed, NotApplicable };
Rule outcome(bool ok) { return ok ? Rule::Split : Rule::Failed; }

/** (Π g_i h_i) = (Π g_i)(Π h_i). */
bool split_product(const Body &b, Expr e, Split &out, std::string &reason) {
    std::vector<Expr> gs, hs;
    for (Expr f : e->args) {
        Split s;
        if (!split(b, f, s, reason)) return false;
        gs.push_back(s.G);
        hs.push_back(s.H);
    }
    out = {simplify(make_mul(gs)), simplify(make_mul(hs))};
    return true;
}

/** exp(a + b) = exp(a) · exp(b): every term of the argument must be x-only or δ-only. Canonical
 *  forms may keep a sum inside a product (c · (m - X) / t); it is distributed first. */
bool split_exp(const Body &b, Expr e, Split &out, std::string &reason) {
    Expr arg = e->args[0]->kind == Kind::Add ? e->args[0] : expand(e->args[0]);
    std::vector<Expr> terms = arg->kind == Kind::Add ? arg->args : std::vector<Expr>{arg};
    std::vector<Expr> xs, ds;
    for (Expr t : terms) {
        bool tx = depends_on_x(b, t), td = depends_on_d(b, t);
        if (tx && td) {
            reason = "exp of a term that mixes the axis data and earlier results: " + shown(t);
            return false;
        }
        (td ? ds : xs).push_back(t);
    }
    out = {simplify(make_call(Func::exp, xs.empty() ? make_const(0) : make_add(xs))),
           simplify(make_call(Func::exp, make_add(ds)))};
    return true;
}

/** Calls that split: rounding (transparent for the algebra like a narrow cast; exactness is
 *  tracked apart), exp, and |g h| = |g| |h|. */
Rule split_call(const Body &b, Expr e, Split &out, std::string &reason) {
    if (is_rounding(e)) return outcome(split(b, e->args[0], out, reason));
    if (e->func == Func::exp) return outcome(split_exp(b, e, out, reason));
    if (e->func != Func::abs) return Rule::NotApplicable;
    Split s;
    if (!split(b, e->args[0], s, reason)) return Rule::Failed;
    out = {simplify(make_call(Func::abs, s.G)), simplify(make_call(Func::abs, s.H))};
    return Rule::Split;
}

/** (g h)^p = g^p h^p: always for integer p; for real p when g >= 0 and h > 0. And c^(a + b) =
 *  c^a c^b for a constant base c > 0, split as exp((a + b) log c). */
Rule split_pow(const Body &b, Expr e, Split &out, std::string &reason) {
    Expr base = e->args[0], ex = e->args[1];
    if (!depends_on_x(b, ex) && !depends_on_d(b, ex)) {
        Split s;
        if (!split(b, base, s, reason)) return Rule::Failed;
        if (!is_integer_const(ex) && !(is_nonnegative(s.G, b.facts) && is_positive(s.H, b.facts))) {
            reason = "a non-integer power of a product whose factors' signs are unknown: " + shown(e);
            return Rule::Failed;
        }
        out = {simplify(make_pow(s.G, ex)), simplify(make_pow(s.H, ex))};
        return Rule::Split;
    }
    if (!depends_on_x(b, base) && !depends_on_d(b, base) && is_positive(base, b.facts))
        return outcome(split(b, simplify(make_call(Func::exp, make_mul(ex, make_call(Func::log, base)))), out, reason));
    return Rule::NotApplicable;
}

/** select(mask(x), g1 h, g2 h) = select(mask(x), g1, g2) · h; a zero branch takes the other's h. */
bool split_select(const Body &b, Expr e, Split &out, std::string &reason) {
    Expr cond = e->args[0];
    if (depends_on_d(b, cond)) {
        reason = "a condition that depends on earlier results: " + shown(cond);
        return false;
    }
    Split a, c;
    if (!split(b, e->args[1], a, reason) || !split(b, e->args[2], c, reason)) return false;
    Expr h;
    if (e->args[2]->is_const(0)) h = a.H;
    else if (e->args[1]->is_const(0)) h = c.H;
    else if (provably_equal(a.H, c.H)) h = a.H;
    else {
        reason = "the branches of " + shown(e) + " scale differently with earlier results";
        return false;
    }
    out = {simplify(make_select(cond, a.G, c.G)), h};
    return true;
}

/** Σ g_i h_i = (Σ g_i (h_i / h_0)) h_0 when every h_i / h_0 is a constant. */
bool split_sum(const Body &b, Expr e, Split &out, std::string &reason) {
    std::vector<Split> parts;
    for (Expr t : e->args) {
        Split s;
        if (!split(b, t, s, reason)) return false;
        parts.push_back(s);
    }
    Expr h0 = parts[0].H;
    std::vector<Expr> gs;
    for (const Split &s : parts) {
        Expr ratio = simplify(make_div(s.H, h0));
        if (depends_on_d(b, ratio)) {
            reason = "a sum of terms that depend differently on earlier results: " + shown(e);
            return false;
        }
        gs.push_back(make_mul(s.G, ratio));
    }
    out = {simplify(make_add(gs)), h0};
    return true;
}

/** Splits e into G(x) · H(δ), or returns false with a reason naming the offending sub-expression. */
bool split(const Body &b, Expr e, Split &out, std::string &reason) {
    bool x = depends_on_x(b, e), d = depends_on_d(b, e);
    if (!d) { out = {e, make_const(1)}; return true; }
    if (!x) { out = {make_const(1), e}; return true; }
    switch (e->kind) {
    case Kind::Mul: return split_product(b, e, out, reason);
    case Kind::Call:
        if (Rule r = split_call(b, e, out, reason); r != Rule::NotApplicable) return r == Rule::Split;
        break;
    case Kind::Pow:
        if (Rule r = split_pow(b, e, out, reason); r != Rule::NotApplicable) return r == Rule::Split;
        break;
    case Kind::Select: return split_select(b, e, out, reason);
    case Kind::Add: return split_sum(b, e, out, reason);
    // A rounding cast is transparent for the algebra; exactness is tracked separately.
    case Kind::Cast: return split(b, e->args[0], out, reason);
    default: break;
    }
    reason = "F is not a product G(x)·H(d): " + shown(e) + " mixes the axis data and earlier results";
    return false;
}

/** The factors of a product (e itself when it is not one), and the terms of a sum. */
std::vector<Expr> factors_of(Expr e) { return e->kind == Kind::Mul ? e->args : std::vector<Expr>{e}; }
std::vector<Expr> terms_of(Expr e) { return e->kind == Kind::Add ? e->args : std::vector<Expr>{e}; }
bool is_exp(Expr f) { return f->kind == Kind::Call && f->func == Func::exp; }

/** For an exponent term c·δ_i, whether pred(i, c) holds (false for any other term). */
bool delta_term_where(const Body &b, Expr term, bool (Body::*pred)(size_t, double) const) {
    auto [coef, rest] = split_coefficient(term);
    for (size_t i = 0; i < b.delta_syms.size(); i++)
        if (rest == b.delta_syms[i]) return (b.*pred)(i, coef);
    return false;
}

/** True for an exponent term c·δ_i that keeps the running terms in range (Body::stabilizes). */
bool stabilizing(const Body &b, Expr term) { return delta_term_where(b, term, &Body::stabilizes); }

/** An exponent term c·δ_i that, alone in the running state, can overflow where the spec does not
 *  (Body::unbounded_alone); null when no term of H's exp factors is one, or when one of their terms
 *  stabilizes (split_deferred then defers the others). */
Expr unbounded_exponent_term(const Body &b, Expr H) {
    Expr unbounded = nullptr;
    bool stable = false;
    for (Expr f : factors_of(H)) {
        if (!is_exp(f)) continue;
        for (Expr t : terms_of(f->args[0])) {
            stable = stable || stabilizing(b, t);
            if (!unbounded && delta_term_where(b, t, &Body::unbounded_alone)) unbounded = t;
        }
    }
    return stable ? nullptr : unbounded;
}

/** H = H_run · H_def: exp factors stay in the running state (they keep exp(x) in range); every other
 *  factor is deferred to the epilogue. For a sum, where some exponent term is stabilizing (c·m with
 *  m a running max, c < 0), the other exponent terms are deferred too: with
 *      F = G(x) · exp(-m + mu),   Σ_j F = exp(mu) · Σ_j G(x_j) exp(-m)
 *  (exp(mu) is constant along the axis), so the state holds Σ G·exp(-m_run) <= (terms)·max G·exp(-m)
 *  — bounded as the spec's own terms are — and exp(mu) is applied once, at its final value. Kept in
 *  the state instead, exp(mu_run) can overflow where the spec does not (a running mean of a row
 *  whose first half is 200 and second half -200 is 100 half-way and 0 at the end). Without a
 *  stabilizing term all stay; derive_multiplicative has already refused the exponent terms on a
 *  running sum there (exp(X - mu) alone: unbounded_exponent_term). */
void split_deferred(const Body &b, ReduceOp op, Expr H, Expr &H_run, Expr &H_def, bool &defers_exp) {
    std::vector<Expr> run, def, stable, unstable;
    for (Expr f : factors_of(H)) {
        if (!is_exp(f)) {
            def.push_back(f);
            continue;
        }
        run.push_back(f);
        for (Expr t : terms_of(f->args[0])) (stabilizing(b, t) ? stable : unstable).push_back(t);
    }
    if (op == ReduceOp::Sum && !stable.empty() && !unstable.empty()) {
        run = {make_call(Func::exp, make_add(stable))};
        def.push_back(make_call(Func::exp, make_add(unstable)));
        defers_exp = true;
    }
    H_run = run.empty() ? make_const(1) : simplify(make_mul(run));
    H_def = def.empty() ? make_const(1) : simplify(make_mul(def));
}

}  // namespace

bool derive_multiplicative(const Body &b, MemberAnalysis &m, std::string &reason) {
    Split s;
    if (!split(b, b.F, s, reason)) return false;
    // exp(X - mu) with mu a running sum or mean and no running max beside it: the state's terms
    // exp(X - mu_run) can overflow where the spec's exp(X - mu) do not (a row of values near 100 has a
    // running mean near 0 at first). The member then runs after the pass that finishes mu.
    if (Expr t = unbounded_exponent_term(b, s.H)) {
        reason = "H = " + shown(s.H) + ": its exponent term " + shown(t) +
                 " runs with a value that moves either way (not a running max or min), and nothing beside it keeps "
                 "the running terms in range: they could overflow where the spec's do not";
        return false;
    }
    m.G = s.G;
    m.H = s.H;
    split_deferred(b, m.op, s.H, m.H_run, m.H_def, m.defers_exp);
    if (b.inexact) {
        // The approximate incremental plan quantizes each tile with the running δ: the whole H moves
        // with the state, and the update term is F itself (with its cast) at the running δ.
        m.H_run = m.H;
        m.H_def = make_const(1);
        m.defers_exp = false;
        m.U = b.F;
    } else {
        m.U = simplify(make_mul(m.G, m.H_run));
    }
    // alpha = H_run(δ_new) / H_run(δ_old), simplified so that exp(-m_new) / exp(-m_old) becomes
    // exp(m_old - m_new), which never overflows when m_new >= m_old.
    m.old_syms.clear();
    Expr H_old = m.H_run;
    for (Expr d : b.delta_syms) {
        Expr old = make_symbol(d->name + "@old");
        m.old_syms.push_back(old);
        H_old = substitute(H_old, d, old);
    }
    m.alpha = simplify(make_div(m.H_run, H_old));
    if (!is_nonzero(m.H_run, b.facts)) m.preconditions.push_back("H_run(d) != 0 and finite: " + to_string(m.H_run));
    return true;
}

}  // namespace rf::fuse_detail
