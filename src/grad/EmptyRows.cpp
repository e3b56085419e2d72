/** \file EmptyRows.cpp
 * The backward's negative powers read as 0 where their base is 0, so a fully masked (empty) row
 * gets gradient 0 as its forward gets output 0, instead of inf · 0 = NaN.
 */
#include "grad/GradInternal.h"
#include "spec/Print.h"
#include "sym/Sign.h"

namespace rf::grad {

/* Rule: x^c (constant c < 0) becomes select(x == 0, 0, x^c) unless x is provably nonzero.
 * Why: the derivative of u / s is (u' s − u s') / s², and of log s is s' / s. A fully masked row
 * has s = 0 (a sum of exp(−inf) terms) and u = 0, so its forward value is the convention's
 * 0 / 0 = 0 (language.md §8), constant in the inputs: its gradient is 0. Every term of the derived
 * backward that carries s^c also carries a factor that is 0 on such a row (the masked exp, or u),
 * and inf · 0 would make it NaN; with s^c read as 0 there, the term is 0.
 * Precondition for exactness: none where s ≠ 0 (the select keeps x^c). Where s = 0 for another
 * reason the forward itself is ±inf or 0 / 0 and has no derivative; the backward then gives 0
 * there too. Bases proven nonzero (rsqrt(var + eps) with a positive bound, pow(D, −0.5) of a size)
 * are left alone. */
void guard_empty_reciprocals(Program &backward, const Program &forward) {
    // A residual (a load of a forward definition) has the interval of its definition: V_sum =
    // Σ X² is >= 0, so rsqrt(V_sum / C + eps) needs no guard.
    Facts facts;
    facts.lookup = [&](Expr atom, Interval &out) {
        if (atom->kind != Kind::Load || backward.find_def(atom->name)) return false;
        const TensorDef *d = forward.find_def(atom->name);
        for (const TensorDef &f : forward.defs)  // a lifted V.sum is saved as V_sum
            if (!d && spec_identifier(f.name) == atom->name) d = &f;
        if (!d || !d->body || d->is_topk()) return false;
        out = interval_of(d->body);
        return true;
    };
    for (TensorDef &d : backward.defs) {
        if (!d.body) continue;
        d.body = substitute(d.body, [&](Expr n) -> Expr {
            if (n->kind != Kind::Pow || !n->args[1]->is_const() || !(n->args[1]->value < 0)) return nullptr;
            Expr base = n->args[0];
            if (base->stype != SType::Real || is_nonzero(base, facts)) return nullptr;
            return make_select(make_cmp(CmpOp::EQ, base, make_const(0)), make_const(0), n);
        });
    }
}

}  // namespace rf::grad
