/** \file Simplify.cpp
 * The simplifier's driver: the per-arena memo, the bottom-up walk that hands each node to its
 * canonical constructor, and the public helpers of Simplify.h.
 */
#include "sym/Simplify.h"

#include "ir/Eval.h"
#include "sym/Expand.h"
#include "sym/SimplifyInternal.h"
#include "sym/SymCache.h"

namespace rf {

namespace sym {

namespace {

/** Simplifies one node whose children are already canonical. */
Expr canonicalize(Expr e, const std::vector<Expr> &a) {
    switch (e->kind) {
    case Kind::Const:
        if (e->value == 0 && std::signbit(e->value)) return make_const(0.0, e->stype);
        return e;
    case Kind::Var: return e;
    case Kind::Load: return with_args(e, a);
    case Kind::Add: return canon_add(a);
    case Kind::Sub:
        // Constants fold with the language's subtraction ((-inf) - (-inf) = -inf).
        if (a[0]->kind == Kind::Const && a[1]->kind == Kind::Const) {
            double r = eval_sub(a[0]->value, a[1]->value);
            if (!(std::isnan(r) && !std::isnan(a[0]->value) && !std::isnan(a[1]->value)))
                return num(r, e->stype == SType::Int);
        }
        return canon_sub(a[0], a[1]);  // a - b = a + (-1)*b
    case Kind::Mul: return canon_mul(a);
    case Kind::Div:
        // Constants fold with the language's division (0 / 0 = 0).
        if (a[0]->kind == Kind::Const && a[1]->kind == Kind::Const) {
            double r = eval_div(a[0]->value, a[1]->value);
            if (!(std::isnan(r) && !std::isnan(a[0]->value) && !std::isnan(a[1]->value))) return real(r);
        }
        return canon_mul({a[0], canon_pow(a[1], real(-1))});  // a / b = a * b^-1
    case Kind::Neg: return canon_neg(a[0]);                      // -a = (-1)*a
    case Kind::Pow: return canon_pow(a[0], a[1]);
    case Kind::Call: return canon_call(e->func, a[0]);
    case Kind::Min: return canon_min(a[0], a[1]);
    case Kind::Max: return canon_max(a[0], a[1]);
    case Kind::Select: return canon_select(a[0], a[1], a[2]);
    case Kind::Cmp: return canon_cmp(e->cmp, a[0], a[1]);
    case Kind::And: return canon_and(a[0], a[1]);
    case Kind::Or: return canon_or(a[0], a[1]);
    case Kind::Not: return canon_not(a[0]);
    case Kind::Cast: return canon_cast(e->dtype, a[0]);
    case Kind::IDiv: return canon_idiv(a[0], a[1]);
    case Kind::Mod: return canon_mod(a[0], a[1]);
    case Kind::Reduce: break;  // handled by the caller (extents)
    }
    return e;
}

}  // namespace

Expr simplify_rec(Expr e) {
    auto &memo = sym_cache().simplified;
    if (auto it = memo.find(e); it != memo.end()) return it->second;
    Expr r;
    if (e->kind == Kind::Reduce) {
        // The body and the extents are simplified; the axes (binders) and the node are kept.
        std::vector<Expr> axes(e->args.begin() + 1, e->args.end()), extents;
        for (Expr x : e->extents) extents.push_back(simplify_rec(x));
        Expr body = simplify_rec(e->body());
        r = (body == e->body() && extents == e->extents) ? e
                                                        : make_reduce(e->rop, axes, extents, body, e->k);
    } else {
        std::vector<Expr> args;
        args.reserve(e->args.size());
        for (Expr x : e->args) args.push_back(simplify_rec(x));
        r = canonicalize(e, args);
    }
    memo[e] = r;
    memo.emplace(r, r);  // canonical forms are fixed points
    return r;
}

}  // namespace sym

Expr simplify(Expr e) {
    sym::SymEntry entry;
    return sym::simplify_rec(e);
}

void clear_simplify_cache() { sym::reset_sym_cache(); }

Expr add(Expr a, Expr b) { return simplify(make_add(a, b)); }
Expr sub(Expr a, Expr b) { return simplify(make_sub(a, b)); }
Expr mul(Expr a, Expr b) { return simplify(make_mul(a, b)); }
Expr div(Expr a, Expr b) { return simplify(make_div(a, b)); }
Expr neg(Expr a) { return simplify(make_neg(a)); }
Expr pow(Expr a, Expr b) { return simplify(make_pow(a, b)); }
Expr exp(Expr a) { return simplify(make_call(Func::exp, a)); }
Expr log(Expr a) { return simplify(make_call(Func::log, a)); }

std::pair<double, Expr> split_coefficient(Expr term) {
    bool int_type = term->stype == SType::Int;
    if (term->kind == Kind::Const) return {term->value, sym::num(1, int_type)};
    if (term->kind == Kind::Mul && term->args[0]->kind == Kind::Const) {
        double c = term->args[0]->value;
        if (term->args.size() == 2) return {c, term->args[1]};
        return {c, make_mul(std::vector<Expr>(term->args.begin() + 1, term->args.end()))};
    }
    return {1.0, term};
}

bool provably_equal(Expr a, Expr b) {
    sym::SymEntry entry;
    if (a == b) return true;
    Expr d = sym::simplify_rec(make_sub(a, b));
    if (d->is_const(0)) return true;
    // Expansion decides polynomial identities such as (x + 1)^2 = x^2 + 2x + 1.
    return expand(d)->is_const(0);
}

}  // namespace rf
