/** \file Companions.cpp
 * Companion sums of the shift forms: a moment S_β of a polynomial or exponential-polynomial member
 * that an earlier multiplicative member of the same pass already accumulates. The softmax entropy's
 *     t = Σ (X − m)·e^{X − m}   has   S_0 = Σ (X − c)·e^{X − c},   S_1 = −Σ e^{X − c} = −s,
 * so the derived update need not evaluate e^{X − c} twice per element: the tile sums of S_1 and of s
 * are one sum (docs/design.md §3, "companion sums").
 *
 * Precondition for S_β = κ·s (κ = ±1, exact in floating point): the basis term of S_β equals κ times
 * the update term U = G·H_run of s as functions of the data and the earlier results, with both
 * evaluated at the same running values. Both members then see the same reference in every tile (each
 * moves its tag to the running d before adding the tile), so their tile sums agree term by term.
 */
#include <algorithm>

#include "fuse/Member.h"
#include "sym/Simplify.h"

namespace rf {

namespace {

/** e's update term with e's row variables and axes renamed to those of t's definition. */
Expr renamed_term(const TensorDef &e_def, const MemberAnalysis &e, const TensorDef &t_def) {
    Expr u = restore_deltas(e, e.U);
    if (e_def.vars.size() != t_def.vars.size()) return nullptr;
    for (size_t i = 0; i < e_def.vars.size(); i++) {
        if (e_def.extents[i] != t_def.extents[i]) return nullptr;
        u = substitute(u, e_def.vars[i], t_def.vars[i]);
    }
    Expr er = e_def.body, tr = t_def.body;
    if (er->kind != Kind::Reduce || tr->kind != Kind::Reduce || er->num_axes() != tr->num_axes()) return nullptr;
    for (size_t i = 0; i < er->num_axes(); i++) u = substitute(u, er->axis(i), tr->axis(i));
    return simplify(u);
}

/** e with the factors of a product moved into the branches of a select, recursively:
 *  exp(−m)·select(c, exp(X), 0) becomes select(c, exp(X − m), 0), the shape the shift form's basis
 *  has (the simplifier compares masked terms only in one shape). */
Expr into_selects(Expr e) {
    if (e->kind == Kind::Select) return make_select(e->args[0], into_selects(e->args[1]), into_selects(e->args[2]));
    if (e->kind != Kind::Mul) return e;
    for (size_t i = 0; i < e->args.size(); i++) {
        Expr sel = e->args[i];
        if (sel->kind != Kind::Select) continue;
        Expr rest = make_const(1);
        for (size_t j = 0; j < e->args.size(); j++)
            if (j != i) rest = make_mul(rest, e->args[j]);
        return make_select(sel->args[0], into_selects(simplify(make_mul(rest, sel->args[1]))),
                           into_selects(simplify(make_mul(rest, sel->args[2]))));
    }
    return e;
}

}  // namespace

void find_companions(MemberAnalysis &t, const TensorDef &t_def, const std::vector<Companion> &earlier) {
    t.companion.assign(t.basis.size(), "");
    t.companion_scale.assign(t.basis.size(), 0.0);
    if (!is_shift_form(t.relation) || t.op != ReduceOp::Sum) return;
    auto reads = [](const MemberAnalysis &m, const std::string &n) {
        return std::find(m.deps.begin(), m.deps.end(), n) != m.deps.end();
    };
    // A reference that reads a running sum is an estimate (the polynomial form's mean: sum·C/n), not
    // the value s's terms use: no companions then.
    for (const Companion &c : earlier)
        if (c.analysis->op == ReduceOp::Sum && reads(t, c.analysis->name)) return;
    for (size_t b = 0; b < t.basis.size(); b++) {
        Expr B = restore_deltas(t, t.basis[b]);
        for (size_t i = 0; i < earlier.size(); i++) {
            const Companion &c = earlier[i];
            const MemberAnalysis &e = *c.analysis;
            if (e.relation != Relation::Multiplicative || e.op != ReduceOp::Sum || !e.U) continue;
            // s's sum lands at t's update: no member in between may read it.
            bool read = false;
            for (size_t j = i + 1; j < earlier.size(); j++) read = read || reads(*earlier[j].analysis, e.name);
            if (read) continue;
            Expr u = renamed_term(*c.def, e, t_def);
            if (!u) continue;
            for (double kappa : {1.0, -1.0}) {
                if (!provably_equal(into_selects(B), into_selects(simplify(kappa == 1 ? u : neg(u))))) continue;
                t.companion[b] = e.name;
                t.companion_scale[b] = kappa;
                break;
            }
            if (!t.companion[b].empty()) break;
        }
    }
}

}  // namespace rf
