/** \file Describe.cpp
 * Readable formulas for a member's derivation: G, H (or φ, or the polynomial basis), the update of
 * its running state per tile, the merge of two partial states, and the epilogue. All of them are
 * printed from the derived expressions, with δ symbols restored to the earlier results they stand for.
 */
#include "fuse/Plan.h"
#include "sym/Simplify.h"

namespace rf {

namespace {

/** Display order: positive terms of a sum first, so exp(m_old - m) reads as written by hand. */
Expr pretty(Expr e) {
    return substitute(e, [](Expr n) -> Expr {
        if (n->kind != Kind::Add) return nullptr;
        std::vector<Expr> pos, neg;
        for (Expr a : n->args) {
            Expr p = pretty(a);
            bool negative = (p->kind == Kind::Mul && p->args[0]->is_const() && p->args[0]->value < 0) ||
                            (p->is_const() && p->value < 0);
            (negative ? neg : pos).push_back(p);
        }
        if (pos.empty()) return nullptr;
        pos.insert(pos.end(), neg.begin(), neg.end());
        return make_add(pos);
    });
}

std::string text(Expr e) { return to_string(pretty(e)); }

/** Renames every Load of an earlier member in e by appending a suffix (m -> m_old, m_A). */
Expr rename_members(Expr e, const std::vector<std::string> &deps, const std::string &suffix) {
    return substitute(e, [&](Expr n) -> Expr {
        if (n->kind != Kind::Load) return nullptr;
        for (const std::string &d : deps)
            if (n->name == d) return make_load(d + suffix, n->args, n->dtype, n->stype);
        return nullptr;
    });
}

/** α(d_new, d_old) as text with the old earlier results renamed by suffix. */
std::string alpha_text(const MemberAnalysis &m, const std::string &suffix) {
    Expr a = m.alpha;
    for (size_t i = 0; i < m.delta_syms.size(); i++) {
        a = substitute(a, m.old_syms[i], rename_members(m.delta_exprs[i], m.deps, suffix));
        a = substitute(a, m.delta_syms[i], m.delta_exprs[i]);
    }
    return text(simplify(a));
}

/** d_i − d_i,old as text (the earlier results each δ stands for, the old ones renamed). */
std::string step_text(const MemberAnalysis &m, size_t i) {
    Expr step = make_sub(m.delta_exprs[i], rename_members(m.delta_exprs[i], m.deps, "_old"));
    return "(" + text(simplify(step)) + ")";
}

std::string index_text(const std::vector<int> &alpha) {
    std::string idx;
    for (int a : alpha) idx += std::to_string(a);
    return idx;
}

/** The triangular map of a shift form, one line per β:
 *  S_β ← [e^{λ·(d − d_old)} ·] Σ_{α≥β} Π_i C(α_i, β_i) (d_i − d_i,old)^(α_i − β_i) S_α. */
std::vector<std::string> matrix_text(const MemberAnalysis &m) {
    std::vector<std::string> lines;
    std::string g = m.relation == Relation::ExpPolynomial ? alpha_text(m, "_old") : "";
    for (size_t be = 0; be < m.alphas.size(); be++) {
        std::string sum;
        for (size_t al = 0; al < m.alphas.size(); al++) {
            double coef = 1;
            std::string factors;
            for (size_t i = 0; i < m.alphas[al].size() && coef != 0; i++) {
                int hi = m.alphas[al][i], lo = m.alphas[be][i];
                if (hi < lo) coef = 0;
                for (int t = 1; t <= lo; t++) coef = coef * (hi - lo + t) / t;
                if (hi - lo >= 1) factors += "·" + step_text(m, i) + (hi - lo > 1 ? "^" + std::to_string(hi - lo) : "");
            }
            if (coef == 0) continue;
            std::string c = coef == 1 ? "" : to_string(make_const(coef)) + "·";
            std::string term = c + (factors.empty() ? "" : factors.substr(2) + "·") + "S_" + index_text(m.alphas[al]);
            sum += (sum.empty() ? "" : " + ") + term;
        }
        std::string lhs = "S_" + index_text(m.alphas[be]) + " ← ";
        bool single = sum.find(" + ") == std::string::npos;
        lines.push_back(lhs + (g.empty() ? sum : g + " · " + (single ? sum : "(" + sum + ")")));
    }
    return lines;
}

std::string select_op_name(ReduceOp op, bool increasing) {
    if (increasing) return reduce_name(op);
    switch (op) {
    case ReduceOp::Max: return "min";
    case ReduceOp::Min: return "max";
    case ReduceOp::ArgMax: return "argmin";
    case ReduceOp::ArgMin: return "argmax";
    case ReduceOp::TopK: return "bottomk";
    default: return reduce_name(op);
    }
}

std::string plain_update(ReduceOp op, const std::string &s, const std::string &body) {
    switch (op) {
    case ReduceOp::Sum: return s + " ← " + s + " + Σ_tile " + body;
    case ReduceOp::Prod: return s + " ← " + s + " · Π_tile " + body;
    case ReduceOp::Max: return s + " ← max(" + s + ", max_tile " + body + ")";
    case ReduceOp::Min: return s + " ← min(" + s + ", min_tile " + body + ")";
    case ReduceOp::ArgMax: return "(" + s + ".value, " + s + ".index) ← first maximum of the state and the tile of " + body;
    case ReduceOp::ArgMin: return "(" + s + ".value, " + s + ".index) ← first minimum of the state and the tile of " + body;
    case ReduceOp::TopK: return s + " ← the k largest of (" + s + " ∪ tile values of " + body + "), ties to the lower index";
    }
    return "";
}

std::string plain_merge(ReduceOp op, const std::string &s) {
    switch (op) {
    case ReduceOp::Sum: return s + " = " + s + "_A + " + s + "_B";
    case ReduceOp::Prod: return s + " = " + s + "_A · " + s + "_B";
    case ReduceOp::Max: return s + " = max(" + s + "_A, " + s + "_B)";
    case ReduceOp::Min: return s + " = min(" + s + "_A, " + s + "_B)";
    case ReduceOp::ArgMax: case ReduceOp::ArgMin:
        return s + " = the better of A and B by value, the lower index on ties";
    case ReduceOp::TopK: return s + " = the k best of A ∪ B, ties to the lower index";
    }
    return "";
}

std::string init_of(ReduceOp op, const std::string &s) {
    switch (op) {
    case ReduceOp::Sum: return s + " = 0";
    case ReduceOp::Prod: return s + " = 1";
    case ReduceOp::Max: return s + " = -inf";
    case ReduceOp::Min: return s + " = inf";
    case ReduceOp::ArgMax: return s + " = (value -inf, no index)";
    case ReduceOp::ArgMin: return s + " = (value inf, no index)";
    case ReduceOp::TopK: return s + " = k empty slots";
    }
    return "";
}

/** The exponential-polynomial form: its basis sums, the triangular map, update, merge, epilogue. */
void describe_exp_polynomial(const MemberAnalysis &m, MemberText &t) {
    const std::string &s = m.name;
    for (size_t k = 0; k < m.alphas.size(); k++) {
        std::string line = "S_" + index_text(m.alphas[k]) + " = Σ " + text(restore_deltas(m, m.basis[k]));
        if (k < m.companion.size() && !m.companion[k].empty())
            line += "   = " + std::string(m.companion_scale[k] < 0 ? "−" : "") + m.companion[k] +
                    " (a companion sum: the update sums these terms once, for " + m.companion[k] + " and " + s + ")";
        t.basis.push_back(line);
    }
    std::string ds;
    for (size_t i = 0; i < m.delta_exprs.size(); i++) ds += (i ? ", " : "") + text(m.delta_exprs[i]);
    t.H = text(restore_deltas(m, m.H_run)) + " · (polynomial of degree " + std::to_string(m.degree) + " in (" + ds + "))";
    t.matrix = matrix_text(m);
    t.init = "S_α = 0 for every α, ref unset (the first update sets it; an empty state is never rescaled)";
    t.update = "ref ← running (" + ds + "); S ← the shift above from ref_old to ref; "
               "S_β ← S_β + Σ_tile (the term of S_β at d = ref)";
    t.merge = "ref = the merged earlier results; move S_A and S_B to ref by the triangular map, then add";
    t.epilogue = s + " = " + alpha_text(m, "_ref") + " · Σ_α S_α(ref) (d − d_ref)^α at the final d = (" + ds + ")";
    if (m.H_def && !m.H_def->is_const(1)) {
        t.deferred = text(restore_deltas(m, m.H_def));
        t.epilogue += ", times " + t.deferred;
    }
}

}  // namespace

MemberText describe_member(const MemberAnalysis &m) {
    MemberText t;
    const std::string &s = m.name;
    switch (m.relation) {
    case Relation::Independent:
    case Relation::None:
        t.init = init_of(m.op, s);
        t.update = plain_update(m.op, s, m.F ? text(restore_deltas(m, m.F)) : "F");
        t.merge = plain_merge(m.op, s);
        break;
    case Relation::Multiplicative: {
        t.G = text(m.G);
        t.H = text(restore_deltas(m, m.H));
        t.deferred = text(restore_deltas(m, m.H_def));
        t.init = init_of(m.op, s) + ", scale tag unset (the first update sets it; an empty state is never rescaled)";
        std::string u = text(restore_deltas(m, m.U));
        bool rescale = !m.H_run->is_const(1);
        if (m.op == ReduceOp::Sum) {
            t.update = rescale ? s + " ← " + s + " · " + alpha_text(m, "_old") + " + Σ_tile " + u
                               : s + " ← " + s + " + Σ_tile " + u + "   (H fully deferred: no rescale)";
            t.merge = rescale ? s + " = " + s + "_A · " + alpha_text(m, "_A") + " + " + s + "_B · " + alpha_text(m, "_B")
                              : s + " = " + s + "_A + " + s + "_B";
        } else {
            t.update = rescale ? s + " ← " + s + " · (" + alpha_text(m, "_old") + ")^n_seen · Π_tile " + u
                               : s + " ← " + s + " · Π_tile " + u;
            t.merge = rescale ? s + " = " + s + "_A · (" + alpha_text(m, "_A") + ")^n_A · " + s + "_B · (" +
                                    alpha_text(m, "_B") + ")^n_B"
                              : s + " = " + s + "_A · " + s + "_B";
        }
        if (!m.H_def->is_const(1))
            t.epilogue = s + " = " + s + "_state · (" + t.deferred + ")" + (m.op == ReduceOp::Prod ? "^n" : "");
        break;
    }
    case Relation::Additive:
    case Relation::Monotone: {
        t.G = text(m.Gsel);
        t.phi = text(restore_deltas(m, m.phi));
        if (m.H) t.H = text(restore_deltas(m, m.H));
        std::string op = select_op_name(m.op, m.increasing);
        ReduceOp init_op = m.op;
        if (!m.increasing && m.op == ReduceOp::Max) init_op = ReduceOp::Min;
        if (!m.increasing && m.op == ReduceOp::Min) init_op = ReduceOp::Max;
        t.init = init_of(init_op, s + ".G");
        t.update = s + ".G ← " + op + " of (" + s + ".G and the tile of G = " + t.G + ")";
        t.merge = s + ".G = " + op + " of (" + s + "_A.G, " + s + "_B.G)";
        t.epilogue = (m.op == ReduceOp::ArgMax || m.op == ReduceOp::ArgMin)
                         ? s + " = the index of " + s + ".G"
                         : s + " = φ(" + s + ".G) with φ(u) = " + t.phi;
        break;
    }
    case Relation::ExpPolynomial: describe_exp_polynomial(m, t); break;
    case Relation::Polynomial: {
        for (size_t k = 0; k < m.alphas.size(); k++) {
            std::string idx;
            for (int a : m.alphas[k]) idx += std::to_string(a);
            t.basis.push_back("S_" + idx + " = Σ " + text(restore_deltas(m, m.basis[k])));
        }
        std::string ds;
        for (size_t i = 0; i < m.delta_exprs.size(); i++) ds += (i ? ", " : "") + text(m.delta_exprs[i]);
        t.init = "S_α = 0 for every α, ref unset";
        t.H = "polynomial of degree " + std::to_string(m.degree) + " in (" + ds + ")";
        t.update = "ref ← running estimate of (" + ds + "); S_β ← Σ_{α≥β} C(α,β)(ref − ref_old)^(α−β) S_α(ref_old) + "
                   "Σ_tile ∂^β F(x, ref)/β!";
        t.merge = "ref = estimate from the merged earlier results; shift S_A and S_B to ref exactly, then add";
        t.epilogue = s + " = Σ_α S_α(ref) (d − ref)^α at the final d = (" + ds + ")";
        break;
    }
    }
    return t;
}

}  // namespace rf
