/** \file Derivative.cpp
 * Symbolic differentiation (Derivative.h) of canonical expressions, built with the canonical
 * constructors so that every intermediate result is already simplified.
 */
#include "sym/Derivative.h"

#include <numbers>
#include <unordered_map>

#include "support/Error.h"
#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"
#include "sym/SymCache.h"

namespace rf {

namespace sym {

namespace {

class Differentiator {
public:
    explicit Differentiator(Expr atom) : atom_(atom) {}

    Expr d(Expr e) {
        if (auto it = memo_.find(e); it != memo_.end()) return it->second;
        Expr r = depends(e) ? rule(e) : zero();
        memo_[e] = r;
        return r;
    }

private:
    static Expr zero() { return real(0); }

    /** True when e mentions the atom (a Load is an atom: its indices are not descended into). */
    bool depends(Expr e) {
        if (e == atom_) return true;
        if (auto it = dep_.find(e); it != dep_.end()) return it->second;
        bool r = false;
        if (e->kind != Kind::Load && e->kind != Kind::Var && e->kind != Kind::Const) {
            for (Expr a : e->args) r = r || depends(a);
            for (Expr a : e->extents) r = r || depends(a);
        }
        dep_[e] = r;
        return r;
    }

    // Rules (u, v the arguments, u' = du/d atom):
    //   (sum u_i)' = sum u_i'
    //   (prod u_i)' = sum_i u_i' * prod_{j != i} u_j
    //   (u^c)' = c * u^(c-1) * u'                    constant exponent c
    //   (u^v)' = u^v * (v' * log(u) + v * u' / u)    general exponent
    //   exp(u)' = exp(u) u';  log(u)' = u' / u;  tanh(u)' = (1 - tanh(u)^2) u'
    //   sigmoid(u)' = sigmoid(u) (1 - sigmoid(u)) u';  sqrt, rsqrt, exp2, log2 by their powers
    //   |u|' = select(u >= 0, u', -u');  min(u, v)' = select(u <= v, u', v');  max likewise
    //   select(c, u, v)' = select(c, u', v');  cast(u)' = u'  (the caller tracks exactness)
    //   round/floor/ceil(u)' = 0 (piecewise constant); comparisons and Int arithmetic: 0
    //   (sum_j u)' = sum_j u';  other reductions: InternalError when the body depends on the atom
    Expr rule(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const: return zero();
        case Kind::Var:
        case Kind::Load: return e == atom_ ? real(1) : zero();
        case Kind::Add: {
            std::vector<Expr> t;
            for (Expr x : a) t.push_back(d(x));
            return canon_add(t);
        }
        case Kind::Sub: return canon_sub(d(a[0]), d(a[1]));
        case Kind::Neg: return canon_neg(d(a[0]));
        case Kind::Mul: {
            std::vector<Expr> t;
            for (size_t i = 0; i < a.size(); i++) {
                Expr di = d(a[i]);
                if (di->is_const(0)) continue;
                std::vector<Expr> f{di};
                for (size_t j = 0; j < a.size(); j++)
                    if (j != i) f.push_back(a[j]);
                t.push_back(canon_mul(f));
            }
            return t.empty() ? zero() : canon_add(t);
        }
        case Kind::Div: return d(canon_mul({a[0], canon_pow(a[1], real(-1))}));
        case Kind::Pow: return power(e);
        case Kind::Call: return call(e);
        case Kind::Min:
        case Kind::Max: {
            CmpOp op = e->kind == Kind::Min ? CmpOp::LE : CmpOp::GE;
            return canon_select(canon_cmp(op, a[0], a[1]), d(a[0]), d(a[1]));
        }
        case Kind::Select: return canon_select(a[0], d(a[1]), d(a[2]));
        case Kind::Cast: return d(a[0]);
        case Kind::Reduce: {
            if (e->rop != ReduceOp::Sum)
                throw InternalError(std::string("derivative of a ") + reduce_name(e->rop) +
                                    " reduction whose body depends on " + to_string(atom_));
            Expr body = d(e->body());
            if (body->is_const(0)) return zero();
            std::vector<Expr> axes(a.begin() + 1, a.end());
            return simplify_rec(make_reduce(ReduceOp::Sum, axes, e->extents, body));
        }
        case Kind::Cmp:
        case Kind::And:
        case Kind::Or:
        case Kind::Not:
        case Kind::IDiv:
        case Kind::Mod: return zero();
        }
        return zero();
    }

    Expr power(Expr e) {
        Expr u = e->args[0], v = e->args[1];
        if (!depends(v)) {
            // (u^v)' = v * u^(v-1) * u'
            return canon_mul({v, canon_pow(u, canon_add({v, real(-1)})), d(u)});
        }
        // (u^v)' = u^v * (v' log u + v u' / u)
        Expr t1 = canon_mul({d(v), canon_call(Func::log, u)});
        Expr t2 = canon_mul({v, d(u), canon_pow(u, real(-1))});
        return canon_mul({e, canon_add({t1, t2})});
    }

    Expr call(Expr e) {
        Expr u = e->args[0];
        Expr du = d(u);
        if (du->is_const(0)) return zero();
        switch (e->func) {
        case Func::exp: return canon_mul({e, du});
        case Func::exp2: return canon_mul({e, real(std::numbers::ln2), du});
        case Func::log: return canon_mul({du, canon_pow(u, real(-1))});
        case Func::log2: return canon_mul({du, canon_pow(u, real(-1)), real(1.0 / std::numbers::ln2)});
        case Func::sqrt: return canon_mul({real(0.5), canon_pow(u, real(-0.5)), du});
        case Func::rsqrt: return canon_mul({real(-0.5), canon_pow(u, real(-1.5)), du});
        case Func::abs: return canon_select(canon_cmp(CmpOp::GE, u, real(0)), du, canon_neg(du));
        case Func::tanh: return canon_mul({canon_sub(real(1), canon_pow(e, real(2))), du});
        case Func::sigmoid: return canon_mul({e, canon_sub(real(1), e), du});
        case Func::round:
        case Func::floor:
        case Func::ceil: return zero();
        }
        return zero();
    }

    Expr atom_;
    std::unordered_map<Expr, Expr> memo_;
    std::unordered_map<Expr, bool> dep_;
};

}  // namespace

}  // namespace sym

Expr derivative(Expr e, Expr atom) {
    sym::SymEntry entry;
    Expr a = sym::simplify_rec(atom);
    RF_INTERNAL_ASSERT(a->kind == Kind::Var || a->kind == Kind::Load)
        << "derivative with respect to a non-atom: " << to_string(atom);
    sym::Differentiator diff(a);
    return diff.d(sym::simplify_rec(e));
}

}  // namespace rf
