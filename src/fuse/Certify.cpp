/** \file Certify.cpp
 * The numeric side of soundness (docs/design.md §3, certification): every derived form is
 * re-checked in float64 at many random points of its atoms, and an unfusible body gets concrete
 * values that show why.
 */
#include <cmath>
#include <random>
#include <sstream>

#include "fuse/Forms.h"
#include "sym/Simplify.h"
#include "support/Error.h"

namespace rf::fuse_detail {

namespace {

/** Nested reductions that remain in F (over other axes, not reading d) are opaque x atoms here. */
struct Opaque {
    std::map<Expr, Expr> of;
    Expr operator()(Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            if (n->kind != Kind::Reduce) return nullptr;
            auto it = of.find(n);
            if (it != of.end()) return it->second;
            Expr s = make_symbol("ρ" + std::to_string(of.size()));
            of[n] = s;
            return s;
        });
    }
};

/** Evaluates, mapping evaluation errors at random points (an index division by zero) to NaN. */
double safe_eval(const Valuation &v, Expr e) {
    try {
        return v.eval(e);
    } catch (const UserError &) {
        return NAN;
    }
}

double draw(std::mt19937_64 &rng, const Interval &iv, Expr atom) {
    if (atom->kind == Kind::Var && atom->role == VarRole::Size) return std::uniform_int_distribution<int>(1, 9)(rng);
    if (atom->kind == Kind::Var && atom->role == VarRole::Index) return std::uniform_int_distribution<int>(0, 9)(rng);
    if (atom->stype == SType::Int) return std::uniform_int_distribution<int>(0, 9)(rng);
    double lo = std::max(iv.lo, -3.0), hi = std::min(iv.hi, 3.0);
    if (iv.lo >= 3.0) { lo = iv.lo; hi = iv.lo + 3; }
    if (iv.hi <= -3.0) { hi = iv.hi; lo = iv.hi - 3; }
    if (lo >= hi) return lo;
    double v = std::uniform_real_distribution<double>(lo, hi)(rng);
    if (iv.lo_open && v <= iv.lo) v = iv.lo + 1e-3;
    return v;
}

/** Agreement up to rounding: the error of evaluating either side is a few ulps of `scale`, the
 *  largest magnitude that went into the sums (not of the result, which may cancel to near 0). */
bool close(double a, double b, double scale) { return std::fabs(a - b) <= 1e-9 * scale + 1e-12; }

/** m.alpha with δ_old := old (the factor e^{λ·(δ - old)} of the exponential-polynomial shift). */
Expr at_old(const MemberAnalysis &m, const std::vector<Expr> &now, const std::vector<Expr> &old) {
    Expr e = m.alpha;
    for (size_t i = 0; i < now.size(); i++) e = substitute(e, m.old_syms[i], old[i]);
    return e;
}

/** The shift form's identity at a random point c, opaque (fills c_syms and the terms): F(x, δ) =
 *  Σ_α D_α(x, c) (δ - c)^α, times e^{λ·(δ - c)} for the exponential-polynomial form. */
Expr taylor_terms(const Body &b, const MemberAnalysis &m, std::vector<Expr> &c_syms, std::vector<Expr> &poly_terms,
                  Opaque &opaque) {
    std::vector<Expr> terms;
    for (Expr d : b.delta_syms) c_syms.push_back(make_symbol(d->name + "@c"));
    Expr growth = m.relation == Relation::ExpPolynomial ? at_old(m, b.delta_syms, c_syms) : nullptr;
    for (size_t k = 0; k < m.alphas.size(); k++) {
        Expr t = m.basis[k];
        for (size_t i = 0; i < b.delta_syms.size(); i++) t = substitute(t, b.delta_syms[i], c_syms[i]);
        std::vector<Expr> factors{t};
        if (growth) factors.push_back(growth);
        if (m.H_def && !m.H_def->is_const(1)) factors.push_back(m.H_def);  // deferred exponent terms, at δ
        for (size_t i = 0; i < b.delta_syms.size(); i++)
            for (int p = 0; p < m.alphas[k][i]; p++) factors.push_back(make_sub(b.delta_syms[i], c_syms[i]));
        terms.push_back(make_mul(factors));
    }
    Expr sum = opaque(make_add(terms));
    for (Expr t : terms) poly_terms.push_back(opaque(t));
    return sum;
}

/** The state transform the update and the merge execute, checked at one point: the basis sums of
 *  one term at c, moved to c' by the triangular map T_β(c') = g(c', c) Σ_{α≥β} Π C(α,β)(c' − c)^(α−β)
 *  T_α(c) (g = e^{λ·(c' − c)}, or 1), equal the basis at c'. Returns false when a value is not
 *  finite (the point is skipped); throws InternalError on a disagreement. */
bool check_shift(const Body &b, const MemberAnalysis &m, Opaque &opaque, Valuation val, std::mt19937_64 &rng) {
    size_t q = b.delta_syms.size();
    std::vector<double> c1(q), c2(q);
    for (size_t i = 0; i < q; i++) {
        Interval iv = b.facts.atoms.count(b.delta_syms[i]) ? b.facts.atoms.at(b.delta_syms[i]) : Interval{};
        c1[i] = draw(rng, iv, b.delta_syms[i]);
        c2[i] = draw(rng, iv, b.delta_syms[i]);
    }
    auto basis_at = [&](const std::vector<double> &c) {
        std::vector<double> v;
        for (size_t i = 0; i < q; i++) val.values[b.delta_syms[i]] = c[i];
        for (Expr B : m.basis) v.push_back(safe_eval(val, opaque(B)));
        return v;
    };
    std::vector<double> T1 = basis_at(c1), T2 = basis_at(c2);
    double g = 1;
    if (m.relation == Relation::ExpPolynomial) {
        for (size_t i = 0; i < q; i++) {
            val.values[b.delta_syms[i]] = c2[i];
            val.values[m.old_syms[i]] = c1[i];
        }
        g = safe_eval(val, opaque(m.alpha));
    }
    for (size_t be = 0; be < m.alphas.size(); be++) {
        double acc = 0, scale = 0;
        for (size_t al = 0; al < m.alphas.size(); al++) {
            double coef = 1;
            for (size_t i = 0; i < q && coef != 0; i++) {
                int hi = m.alphas[al][i], lo = m.alphas[be][i];
                if (hi < lo) coef = 0;
                double binom = 1;
                for (int t = 1; t <= lo; t++) binom = binom * (hi - lo + t) / t;
                coef *= binom * std::pow(c2[i] - c1[i], hi - lo);
            }
            acc += g * coef * T1[al];
            scale += std::fabs(g * coef * T1[al]);
        }
        if (!std::isfinite(acc) || !std::isfinite(T2[be]) || !std::isfinite(scale)) return false;
        if (!close(acc, T2[be], scale + std::fabs(T2[be])))
            throw InternalError("the derived shift of " + m.name + " (update and merge) disagrees with its basis at a "
                                "random point: moved = " + std::to_string(acc) + ", basis = " + std::to_string(T2[be]));
    }
    return true;
}

std::string fmt(double v) {
    std::ostringstream os;
    os.precision(6);
    os << v;
    return os.str();
}

}  // namespace

int certify(const Body &b, const MemberAnalysis &m, int min_points) {
    Opaque opaque;
    Expr F = opaque(b.F);
    if (b.inexact) F = strip_rounding(F);  // inexact forms are exact for the body without its roundings
    // The identity each form promises, as (lhs, rhs) evaluated on the same atoms.
    std::vector<Expr> exprs{F};
    Expr rhs = nullptr;
    std::vector<Expr> c_syms;
    std::vector<Expr> poly_terms;  // the Taylor terms: their magnitudes set the scale of the rounding error
    switch (m.relation) {
    case Relation::Multiplicative: rhs = opaque(make_mul(m.G, m.H)); break;
    case Relation::Additive:
    case Relation::Monotone: rhs = opaque(substitute(m.phi, m.u_sym, m.Gsel)); break;
    case Relation::Polynomial:
    case Relation::ExpPolynomial:
        rhs = taylor_terms(b, m, c_syms, poly_terms, opaque);
        break;
    default: return 0;
    }
    if (b.inexact) rhs = strip_rounding(rhs);
    exprs.push_back(rhs);
    std::vector<Expr> atoms = collect_atoms(exprs);
    for (Expr c : c_syms) atoms.push_back(c);

    std::mt19937_64 rng(12345);
    int valid = 0;
    for (int attempt = 0; attempt < 40 * min_points && valid < min_points; attempt++) {
        Valuation val;
        for (Expr a : atoms) {
            Interval iv;
            auto it = b.facts.atoms.find(a);
            if (it != b.facts.atoms.end()) iv = it->second;
            else if (a->kind == Kind::Load && b.facts.lookup) b.facts.lookup(a, iv);
            val.values[a] = draw(rng, iv, a);
        }
        for (size_t i = 0; i < c_syms.size(); i++) {
            Interval iv = b.facts.atoms.count(b.delta_syms[i]) ? b.facts.atoms.at(b.delta_syms[i]) : Interval{};
            val.values[c_syms[i]] = draw(rng, iv, c_syms[i]);
        }
        double lhs_v = safe_eval(val, F), rhs_v = safe_eval(val, rhs);
        if (!std::isfinite(lhs_v) || !std::isfinite(rhs_v)) continue;
        double scale = std::max(std::fabs(lhs_v), std::fabs(rhs_v));
        for (Expr t : poly_terms) scale += std::fabs(safe_eval(val, b.inexact ? strip_rounding(t) : t));
        if (!std::isfinite(scale)) continue;
        if (!close(lhs_v, rhs_v, scale))
            throw InternalError("derived " + std::string(relation_name(m.relation)) + " form of " + m.name +
                                " disagrees with F at a random point: F = " + fmt(lhs_v) + ", derived = " + fmt(rhs_v) +
                                " (F = " + to_string(b.F) + ")");
        if (m.relation == Relation::ExpPolynomial && !check_shift(b, m, opaque, val, rng)) continue;
        if (m.relation == Relation::Monotone || m.relation == Relation::Additive) {
            // Spot-check strict monotonicity of φ in u at this δ.
            Valuation v2 = val;
            double u1 = safe_eval(val, opaque(m.Gsel)), u2 = u1 + 0.5;
            v2.values[m.u_sym] = u1;
            Valuation v3 = val;
            v3.values[m.u_sym] = u2;
            Expr phi = opaque(m.phi);
            double p1 = safe_eval(v2, phi), p2 = safe_eval(v3, phi);
            if (std::isfinite(p1) && std::isfinite(p2) && (m.increasing ? p2 < p1 : p2 > p1))
                throw InternalError("derived φ of " + m.name + " is not monotone at a random point");
        }
        valid++;
    }
    return valid >= min_points ? valid : 0;
}

std::string find_counterexample(const Body &b, ReduceOp op) {
    Opaque opaque;
    Expr F = opaque(b.F);
    std::vector<Expr> atoms = collect_atoms({F});
    std::vector<Expr> xs, ds, cs;
    for (Expr a : atoms) {
        if (a->kind == Kind::Var && a->role == VarRole::Index) cs.push_back(a);  // positions stay fixed
        else if (depends_on_d(b, a)) ds.push_back(a);
        else if (depends_on_x(b, a) || (a->kind == Kind::Var && a->name.rfind("ρ", 0) == 0)) xs.push_back(a);
        else cs.push_back(a);
    }
    if (xs.empty() || ds.empty()) return "";
    std::mt19937_64 rng(7);
    const double small[] = {-1, 0, 1, 2, 3, 0.5};
    bool sum_like = op == ReduceOp::Sum || op == ReduceOp::Prod;
    for (int attempt = 0; attempt < 2000; attempt++) {
        bool use_small = attempt < 1000;
        auto pick = [&](Expr a) {
            if (a->kind == Kind::Var && a->role == VarRole::Index) return static_cast<double>(rng() % 5);
            if (a->kind == Kind::Var && a->role == VarRole::Size) return static_cast<double>(1 + rng() % 5);
            return use_small ? small[rng() % 6] : std::uniform_real_distribution<double>(-3, 3)(rng);
        };
        Valuation base;
        for (Expr c : cs) base.values[c] = pick(c);
        std::vector<double> x1, x2, d1, d2;
        for (Expr x : xs) { x1.push_back(pick(x)); x2.push_back(pick(x)); }
        for (Expr d : ds) { d1.push_back(pick(d)); d2.push_back(pick(d)); }
        auto at = [&](const std::vector<double> &xv, const std::vector<double> &dv) {
            Valuation v = base;
            for (size_t i = 0; i < xs.size(); i++) v.values[xs[i]] = xv[i];
            for (size_t i = 0; i < ds.size(); i++) v.values[ds[i]] = dv[i];
            return safe_eval(v, F);
        };
        double f11 = at(x1, d1), f22 = at(x2, d2), f12 = at(x1, d2), f21 = at(x2, d1);
        if (!std::isfinite(f11) || !std::isfinite(f22) || !std::isfinite(f12) || !std::isfinite(f21)) continue;
        auto describe = [&](const std::vector<double> &v1, const std::vector<double> &v2, const std::vector<Expr> &names,
                            const char *tag) {
            std::string s;
            for (size_t i = 0; i < names.size(); i++) {
                Expr shown = names[i];
                for (size_t k = 0; k < b.delta_syms.size(); k++)
                    if (b.delta_syms[k] == shown) shown = b.delta_exprs[k];
                s += std::string(i ? ", " : "") + to_string(shown) + " = " + fmt(v1[i]) + " (" + tag + "1) / " +
                     fmt(v2[i]) + " (" + tag + "2)";
            }
            return s;
        };
        std::string where = describe(x1, x2, xs, "x") + "; " + describe(d1, d2, ds, "d");
        if (sum_like) {
            double l = f11 * f22, r = f12 * f21;
            if (std::fabs(l - r) > 1e-6 * (std::fabs(l) + std::fabs(r)) + 1e-9)
                return "F(x1,d1)·F(x2,d2) = " + fmt(l) + " but F(x1,d2)·F(x2,d1) = " + fmt(r) + " with " + where;
        } else {
            // The order of two elements flips with d, so no selection over a G(x) alone can be right.
            if ((f11 < f21 && f12 > f22) || (f11 > f21 && f12 < f22))
                return "F(x1,d1) = " + fmt(f11) + (f11 < f21 ? " < " : " > ") + "F(x2,d1) = " + fmt(f21) +
                       " but F(x1,d2) = " + fmt(f12) + (f12 > f22 ? " > " : " < ") + "F(x2,d2) = " + fmt(f22) +
                       " with " + where;
        }
    }
    return "";
}

}  // namespace rf::fuse_detail
