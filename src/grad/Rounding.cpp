/** \file Rounding.cpp
 * Rounding has no useful derivative (0 almost everywhere, undefined at the steps): a cast that
 * rounds, or round/floor/ceil, on a differentiated path is refused unless the user asks for the
 * straight-through estimator, d q(u)/du := 1.
 *
 * Exact casts are not rounding: widening a loaded input to a float type that holds every value of
 * its dtype (bf16/f16/fp8/int8 -> f32 or f64, f32 -> f64) is the identity, and derivative() already
 * differentiates a cast as its argument. With straight_through, round(u) is replaced by the cast
 * i64(u) (the same value: both round half to even) so that derivative() treats it as the identity;
 * floor and ceil have no cast of the same value and stay refused.
 */
#include "grad/GradInternal.h"
#include "spec/Print.h"
#include "sym/Simplify.h"

namespace rf::grad {

namespace {

int float_rank(DType t) {
    switch (t) {
    case DType::f64: return 4;
    case DType::f32: return 3;
    case DType::f16: case DType::bf16: return 2;
    default: return 1;  // fp8 and the integers up to i8 fit in f16, bf16, f32 and f64
    }
}

bool is_exact_cast(Expr c) {
    Expr a = c->args[0];
    if (a->kind != Kind::Load || a->stype != SType::Real) return false;
    if (c->dtype != DType::f32 && c->dtype != DType::f64) return false;
    if (a->dtype == DType::i32 || a->dtype == DType::i64) return c->dtype == DType::f64 && a->dtype == DType::i32;
    return float_rank(a->dtype) < float_rank(c->dtype) || a->dtype == c->dtype;
}

bool depends_on_active(Expr e, const std::set<std::string> &active) {
    return any_of(e, [&](Expr n) { return n->kind == Kind::Load && active.count(n->name); });
}

bool is_rounding(Expr n) {
    return (n->kind == Kind::Cast && !is_exact_cast(n)) ||
           (n->kind == Kind::Call && (n->func == Func::round || n->func == Func::floor || n->func == Func::ceil));
}

}  // namespace

/* A rounding's value depends on how its argument is evaluated: round(v·127/a) and round(127·a⁻¹·v)
 * (the simplifier's normal form) are equal as real numbers but not in floating point, and at an exact
 * tie (v = a/2 gives 63.5) the two land on different integers. The backward recomputes the forward's
 * roundings (the quantized factor of a straight-through dW), so each rounding it keeps is hidden from
 * the simplifier and the derivative behind a placeholder symbol and put back verbatim: both passes
 * then round the same floating-point value. */
Expr KeptRoundings::hide(Expr e, const std::function<bool(Expr)> &keep) {
    return substitute(e, [&](Expr n) -> Expr {
        // A comparison too, always: its derivative is 0 wherever it is defined, and the backward must
        // decide it as the forward did. Simplified, `5·tanh(X/5) > tm` became `tm < 5·tanh(0.2·X)`,
        // which at the row's own top-1 value (a tie in the forward) rounded the other way and let a
        // gradient through (fuzz_specs.py seed 1251, --commands grad).
        if (n->kind != Kind::Cmp && (!is_rounding(n) || !keep(n))) return nullptr;
        auto [it, fresh] = placeholder_of_.emplace(n, nullptr);
        if (fresh) {
            it->second = make_var("$rounding" + std::to_string(placeholder_of_.size()), VarRole::Symbol, n->stype);
            rounding_of_[it->second] = n;
        }
        return it->second;
    });
}

Expr KeptRoundings::restore(Expr e) const {
    if (rounding_of_.empty()) return e;
    return substitute(e, [&](Expr n) -> Expr {
        auto it = rounding_of_.find(n);
        return it == rounding_of_.end() ? nullptr : it->second;
    });
}

Expr simplify_keeping_roundings(Expr e) {
    KeptRoundings kept;
    return kept.restore(simplify(kept.hide(e, [](Expr) { return true; })));
}

Expr check_rounding(Expr e, const TensorDef &def, const std::set<std::string> &active, bool straight_through) {
    visit(e, [&](Expr n) {
        if (!is_rounding(n) || !depends_on_active(n->args[0], active)) return;
        bool steps = n->kind == Kind::Call && n->func != Func::round;
        if (straight_through && !steps) return;
        std::string what = "'" + print_spec_expr(n) + "'";
        if (what.size() > 80) what = std::string("'") + (n->kind == Kind::Cast ? dtype_name(n->dtype) : func_name(n->func)) + "(...)'";
        throw UserError(def.loc, "cannot differentiate the rounding " + what + " in the definition of '" +
                                     spec_identifier(def.name) + "': its derivative is 0 almost everywhere" +
                                     (steps ? " (floor and ceil are refused even with --straight-through)"
                                            : "; pass --straight-through to treat it as the identity"));
    });
    if (!straight_through) return e;
    return substitute(e, [](Expr n) -> Expr {
        if (n->kind == Kind::Call && n->func == Func::round) return make_cast(DType::i64, n->args[0]);
        return nullptr;
    });
}

}  // namespace rf::grad
