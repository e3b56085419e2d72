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

}  // namespace

Expr check_rounding(Expr e, const TensorDef &def, const std::set<std::string> &active, bool straight_through) {
    visit(e, [&](Expr n) {
        bool rounding = (n->kind == Kind::Cast && !is_exact_cast(n)) ||
                        (n->kind == Kind::Call && (n->func == Func::round || n->func == Func::floor || n->func == Func::ceil));
        if (!rounding || !depends_on_active(n->args[0], active)) return;
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
