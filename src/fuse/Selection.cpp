/** \file Selection.cpp
 * The additive and monotone forms (docs/design.md §3) for max, min, argmax, argmin and top-k:
 * F(x, δ) = φ_δ(G(x)) with φ_δ strictly monotone in G for every valid δ. Then ⊕_j F = φ_δ(⊕_j G)
 * with the same indices (a decreasing φ swaps max and min), so nothing is rescaled: the state is the
 * selection over G and φ is applied in the epilogue. The additive form is the special case φ(u) = u + H(δ).
 */
#include <cmath>
#include <functional>

#include "fuse/Forms.h"
#include "sym/Derivative.h"
#include "sym/Simplify.h"

namespace rf::fuse_detail {

namespace {

/** Replaces every maximal x-only sub-expression by one symbol u, grouping the x-only operands of an
 *  Add or Mul. Returns false if F has more than one distinct x-only core (e.g. X[j] and Y[j] used
 *  apart), since then no single G orders the elements. */
bool abstract_core(const Body &b, Expr F, Expr u, Expr &phi, Expr &core, std::string &reason) {
    core = nullptr;
    bool ok = true;
    std::function<Expr(Expr)> go = [&](Expr e) -> Expr {
        bool x = depends_on_x(b, e), d = depends_on_d(b, e);
        if (!x) return e;
        if (!d) {
            Expr c = simplify(e);
            if (core && core != c) ok = false;
            core = c;
            return u;
        }
        if (e->kind == Kind::Add || e->kind == Kind::Mul) {
            std::vector<Expr> xs, rest;
            for (Expr a : e->args) {
                if (depends_on_x(b, a) && !depends_on_d(b, a)) xs.push_back(a);
                else rest.push_back(go(a));
            }
            if (!xs.empty()) rest.push_back(go(e->kind == Kind::Add ? make_add(xs) : make_mul(xs)));
            return e->kind == Kind::Add ? make_add(rest) : make_mul(rest);
        }
        std::vector<Expr> args;
        for (Expr a : e->args) args.push_back(go(a));
        return with_args(e, std::move(args));
    };
    phi = go(F);
    if (!ok) reason = "F depends on the axis through more than one independent term, so no single G(x) orders it";
    if (ok && !core) {
        reason = "F does not depend on the reduction axis";
        ok = false;
    }
    return ok;
}

/** Moves strictly monotone wrappers of the core into φ so that G is as raw as possible: top-k over
 *  exp(X) / s is top-k over X. Each step keeps φ(G) unchanged: φ'(u) = φ(f(u)), G' = f^-1(G). */
void peel(Expr &core, Expr &phi, Expr u, const Body &b) {
    for (int guard = 0; guard < 16; guard++) {
        Expr inner = nullptr, wrapped = nullptr;
        if (core->kind == Kind::Call &&
            (core->func == Func::exp || core->func == Func::tanh || core->func == Func::sigmoid ||
             core->func == Func::exp2 || core->func == Func::log || core->func == Func::log2)) {
            inner = core->args[0];
            wrapped = make_call(core->func, u);
        } else if (core->kind == Kind::Mul && core->args[0]->is_const() && core->args[0]->value != 0) {
            inner = simplify(make_mul(std::vector<Expr>(core->args.begin() + 1, core->args.end())));
            wrapped = make_mul(core->args[0], u);
        } else if (core->kind == Kind::Add && core->args.back()->is_const()) {
            inner = simplify(make_add(std::vector<Expr>(core->args.begin(), core->args.end() - 1)));
            wrapped = make_add(u, core->args.back());
        }
        if (!inner || !depends_on_x(b, inner)) return;
        phi = simplify(substitute(phi, u, wrapped));
        core = inner;
    }
}

/** Structural monotonicity of e in u: +1 increasing, -1 decreasing, 0 constant in u, 2 unknown.
 *  Uses the composition rules (sums of like-monotone terms, products with a factor of known sign,
 *  increasing functions exp, log, sqrt, tanh, sigmoid, odd or positive powers of non-negatives),
 *  which prove cases the derivative's sign analysis misses (1 - tanh(u)^2 > 0). */
int monotonicity(Expr e, Expr u, const Facts &facts) {
    if (e == u) return 1;
    if (!mentions(e, u->name)) return 0;
    switch (e->kind) {
    case Kind::Add: {
        int dir = 0;
        for (Expr a : e->args) {
            int m = monotonicity(a, u, facts);
            if (m == 2 || (m != 0 && dir != 0 && m != dir)) return 2;
            if (m != 0) dir = m;
        }
        return dir;
    }
    case Kind::Mul: {
        int dir = 0, sign = 1;
        for (Expr a : e->args) {
            int m = monotonicity(a, u, facts);
            if (m == 2) return 2;
            if (m != 0) {
                if (dir != 0) return 2;  // u in two factors: no simple rule
                dir = m;
                continue;
            }
            if (is_positive(a, facts)) continue;
            if (is_negative(a, facts)) sign = -sign;
            else return 2;
        }
        return dir * sign;
    }
    case Kind::Call: {
        int m = monotonicity(e->args[0], u, facts);
        switch (e->func) {
        case Func::exp: case Func::exp2: case Func::log: case Func::log2: case Func::sqrt:
        case Func::tanh: case Func::sigmoid: return m;
        case Func::rsqrt: return m == 2 ? 2 : -m;
        default: return 2;
        }
    }
    case Kind::Neg: {
        int m = monotonicity(e->args[0], u, facts);
        return m == 2 ? 2 : -m;
    }
    case Kind::Pow: {
        Expr ex = e->args[1];
        if (!ex->is_const()) return 2;
        int m = monotonicity(e->args[0], u, facts);
        if (m == 2) return 2;
        double c = ex->value;
        bool odd = c == std::floor(c) && static_cast<long long>(c) % 2 != 0;
        if (c > 0 && odd) return m;
        if (is_positive(e->args[0], facts)) return c > 0 ? m : -m;
        return 2;
    }
    default: return 2;
    }
}

/** The sub-expression of the literal body that simplifies to the core, or null. */
Expr literal_core(const Body &b, Expr core) {
    Expr found = nullptr;
    visit(b.literal, [&](Expr n) {
        if (!found && depends_on_x(b, n) && simplify(n) == core) found = n;
    });
    return found;
}

/** The literal body with the sub-expression that simplifies to the core replaced by u. */
Expr literal_phi(const Body &b, Expr core, Expr u) {
    Expr found = literal_core(b, core);
    if (!found) return nullptr;
    Expr phi = substitute(b.literal, found, u);
    return depends_on_x(b, phi) ? nullptr : phi;
}

}  // namespace

bool derive_selection(const Body &b, MemberAnalysis &m, std::string &reason) {
    Expr u = make_symbol("u");
    Expr phi, core;
    if (!abstract_core(b, b.F, u, phi, core, reason)) return false;
    phi = simplify(phi);
    Expr rest = simplify(make_sub(phi, u));
    if (!mentions(rest, "u")) {
        // Additive (form 2): F = G(x) + H(δ), so ⊕_j F = (⊕_j G) + H(δ).
        m.Gsel = core;
        m.phi = phi;
        m.u_sym = u;
        m.increasing = true;
        m.H = rest;
        m.phi_literal = literal_phi(b, core, u);
        m.Gsel_literal = literal_core(b, core);
        m.relation = Relation::Additive;
        m.preconditions.push_back("F = G + H(d)");
        return true;
    }
    peel(core, phi, u, b);

    Facts facts = b.facts;
    facts.atoms[u] = interval_of(core, b.facts);
    Expr dphi = simplify(derivative(phi, u));
    int structural = monotonicity(phi, u, facts);
    if (structural == 1 || structural == -1) m.increasing = structural == 1;
    else if (is_positive(dphi, facts)) m.increasing = true;
    else if (is_negative(dphi, facts)) m.increasing = false;
    else {
        reason = "cannot prove that F = " + shown(phi) + " is strictly monotone in u = " + shown(core) +
                 " (dF/du = " + shown(dphi) + " has unknown sign)";
        return false;
    }
    m.Gsel = core;
    m.phi = phi;
    m.u_sym = u;
    m.phi_literal = literal_phi(b, core, u);
    m.Gsel_literal = literal_core(b, core);
    m.relation = Relation::Monotone;
    m.preconditions.push_back(std::string("dF/dG = ") + shown(dphi) + (m.increasing ? " > 0" : " < 0"));
    return true;
}

}  // namespace rf::fuse_detail
