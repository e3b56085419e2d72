/** \file Stabilizer.cpp
 * Which max/min definitions are stabilizers the outputs ignore, and how every definition downstream
 * of one moves when it shifts (the shift law).
 *
 * Rule. Let m be a max or min definition and t a fresh symbol. Walk the later definitions in order;
 * in the body F of each one that reads m or a definition with a law, replace m[..] by m[..] + t and
 * each E[..] with law k_E by E[..]·exp(-k_E·t), giving F(t). If ∂F(t)/∂t = -k·F(t) holds
 * identically (checked by the simplifier: provably_equal, for k in a small set of constants, or
 * ∂F/∂t simplifies to 0 for k = 0), then F(t) = F(0)·exp(-k·t), hence T(t) = T·exp(-k·t) for a
 * sum, max, min or top-k over F (exp(-k·t) > 0 keeps the order) and for an element-wise T. A
 * product or a definition without such a law breaks the rule. Precondition for "cancels": every
 * float output has k = 0, so the outputs do not depend on m at all: its adjoint is identically 0
 * and m is not differentiated (its max is never routed to an argmax). This is the multiplicative
 * form of docs/design.md §3 seen from the outputs: in exp(x - m) the factor H = exp(-m) divides out.
 */
#include <cmath>

#include "grad/GradInternal.h"
#include "sym/Derivative.h"
#include "sym/Simplify.h"

namespace rf::grad {

namespace {

const double kCandidateK[] = {1, -1, 2, -2, 0.5, -0.5, 3, -3, 4, -4};

/** F(t): loads of the stabilizer shifted by t, loads of law definitions scaled. */
Expr shifted(Expr f, const std::string &m, Expr t, const std::map<std::string, double> &k) {
    return substitute(f, [&](Expr n) -> Expr {
        if (n->kind != Kind::Load) return nullptr;
        if (n->name == m) return make_add(n, t);
        auto it = k.find(n->name);
        if (it == k.end() || it->second == 0) return nullptr;
        return make_mul(n, make_call(Func::exp, make_mul(make_const(-it->second), t)));
    });
}

/** The k of F(t) = F(0)·exp(-k·t), or nullopt when no candidate holds. */
std::optional<double> law_exponent(Expr ft, Expr t) {
    Expr d = derivative(ft, t);
    if (d->is_const(0.0)) return 0.0;
    Expr f = simplify(ft);
    for (double k : kCandidateK)
        if (provably_equal(d, mul(make_const(-k), f))) return k;
    return std::nullopt;
}

bool reads_any(Expr e, const std::string &m, const std::map<std::string, double> &k) {
    return any_of(e, [&](Expr n) { return n->kind == Kind::Load && (n->name == m || k.count(n->name)); });
}

/** A normalizer: a sum over m's row (same variables and extents) with k != 0 whose body is an
 *  exponential (so l > 0 and log(l) is defined). */
bool is_normalizer(const TensorDef &d, const TensorDef &m, double k) {
    if (k == 0 || !d.is_reduction() || d.body->rop != ReduceOp::Sum) return false;
    if (d.vars != m.vars || d.extents != m.extents) return false;
    Expr b = simplify(d.body->body());
    return b->kind == Kind::Call && b->func == Func::exp;
}

std::optional<ShiftLaw> law_of(const Program &p, size_t mi) {
    const TensorDef &m = p.defs[mi];
    Expr t = make_symbol("shift.t");
    ShiftLaw law;
    law.stabilizer = m.name;
    for (size_t i = mi + 1; i < p.defs.size(); i++) {
        const TensorDef &d = p.defs[i];
        if (!reads_any(d.body, m.name, law.k)) continue;
        bool reduce = d.is_reduction();
        if (reduce && d.body->rop == ReduceOp::Prod) return std::nullopt;
        if (d.is_topk() || (reduce && (d.body->rop == ReduceOp::ArgMax || d.body->rop == ReduceOp::ArgMin))) {
            // Positive scaling keeps which index wins: indices are invariant; top-k values scale.
            std::optional<double> k = law_exponent(shifted(reduce ? d.body->body() : d.body, m.name, t, law.k), t);
            if (!k) return std::nullopt;
            law.k[d.name] = d.is_topk() ? *k : 0.0;
            if (d.is_topk()) law.k[d.index_name] = 0.0;
            continue;
        }
        Expr f = reduce ? d.body->body() : d.body;
        if (reduce && any_of(f, [](Expr n) { return n->kind == Kind::Reduce; })) return std::nullopt;
        std::optional<double> k = law_exponent(shifted(f, m.name, t, law.k), t);
        if (!k) return std::nullopt;
        law.k[d.name] = *k;
        if (law.normalizer.empty() && is_normalizer(d, m, *k)) {
            law.normalizer = d.name;
            law.k_normalizer = *k;
        }
    }
    for (const auto &o : p.outputs) {
        const TensorDef *d = p.find_def(o.name);
        if (!d || d->stype != SType::Real || o.name == d->index_name) continue;
        if (o.name == m.name) return std::nullopt;
        auto it = law.k.find(o.name);
        if (it != law.k.end() && it->second != 0) return std::nullopt;
    }
    return law;
}

}  // namespace

std::vector<ShiftLaw> cancelling_stabilizers(const Program &p) {
    std::vector<ShiftLaw> out;
    for (size_t i = 0; i < p.defs.size(); i++) {
        const TensorDef &d = p.defs[i];
        if (!d.is_reduction() || d.is_topk() || d.stype != SType::Real) continue;
        if (d.body->rop != ReduceOp::Max && d.body->rop != ReduceOp::Min) continue;
        if (std::optional<ShiftLaw> law = law_of(p, i)) out.push_back(*law);
    }
    return out;
}

}  // namespace rf::grad
