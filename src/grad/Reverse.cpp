/** \file Reverse.cpp
 * Reverse mode over the definitions, last to first. Each definition T[v] = ⊕_a F(v, a, loads)
 * with adjoint dT (the sum of what its users contributed, plus the input dO when T is an output)
 * sends to every differentiated load X[idx] of F a term in gather form (Gather.cpp):
 *   sum       T = Σ_a F          dX += Σ dT·∂F/∂X                 (a sum sends its adjoint to every term)
 *   element   T = F              dX += dT·∂F/∂X
 *   max/min   T = max_a F        dX += Σ select(a == T_arg, dT·∂F/∂X, 0) with T_arg = argmax_a F,
 *                                the forward's lowest index on ties (one axis only)
 *   top-k     W[t,r] = topk_a F  dX += Σ select(a == I[t,r], dW·∂F/∂X, 0)
 *   product   T = Π_a F          dX += Σ dT·(T/F)·∂F/∂X              (precondition: F != 0)
 * ∂F/∂X is the symbolic derivative (sym/Derivative.h): select routes by its condition, max/min/abs
 * piecewise. A cancelling stabilizer (Stabilizer.cpp) is no atom: its adjoint is identically 0.
 * Integer inputs and index-valued definitions (argmax, top-k indices) get no adjoint.
 */
#include "grad/GradInternal.h"
#include "spec/Print.h"
#include "sym/Derivative.h"
#include "sym/Simplify.h"

namespace rf::grad {

namespace {

struct State {
    const Program &p;
    std::set<std::string> stabilizers, active;
    std::map<std::string, std::vector<Expr>> terms;
    std::map<std::string, std::vector<Expr>> input_vars;
    bool straight_through;
    Names &names;
    RawBackward raw;
};

/** Names for the variables of an input's gradient: those of the first load that indexes every
 *  dimension by a distinct variable; `h / G` dimensions are named after h (hk). */
std::vector<Expr> pick_input_vars(State &s, const InputDecl &in) {
    std::vector<Expr> best;
    for (const auto &d : s.p.defs) {
        visit(d.body, [&](Expr n) {
            if (!best.empty() || n->kind != Kind::Load || n->name != in.name) return;
            std::vector<Expr> vs;
            std::set<std::string> seen;
            for (Expr a : n->args) {
                Expr v = a->kind == Kind::IDiv ? a->args[0] : a;
                if (v->kind != Kind::Var || v->role != VarRole::Index) return;
                std::string nm = a->kind == Kind::IDiv ? s.names.fresh(v->name + "k") : v->name;
                if (!seen.insert(nm).second) return;
                vs.push_back(make_index(nm));
            }
            best = vs;
        });
    }
    if (best.empty())
        for (size_t i = 0; i < in.dims.size(); i++) best.push_back(make_index(s.names.fresh("w" + std::to_string(i + 1))));
    return best;
}

const std::vector<Expr> &target_vars(State &s, const std::string &name) {
    if (const TensorDef *d = s.p.find_def(name)) return d->vars;
    auto it = s.input_vars.find(name);
    if (it == s.input_vars.end()) it = s.input_vars.emplace(name, pick_input_vars(s, *s.p.find_input(name))).first;
    return it->second;
}

bool is_atom(const State &s, Expr n) {
    return n->kind == Kind::Load && n->stype == SType::Real && s.active.count(n->name) && !s.stabilizers.count(n->name);
}

/** The definitions whose value depends on a differentiated input (the forward order makes one pass enough). */
std::set<std::string> active_set(const Program &p, const std::vector<std::string> &wrt) {
    std::set<std::string> act(wrt.begin(), wrt.end());
    for (const auto &d : p.defs) {
        if (d.stype != SType::Real) continue;
        if (any_of(d.body, [&](Expr n) { return n->kind == Kind::Load && act.count(n->name); })) act.insert(d.name);
    }
    return act;
}

/** How a term of one position of the reduction reaches the result (the table above). */
std::function<Expr(Expr)> reduction_weight(State &s, const TensorDef &d, Expr g) {
    Expr r = d.body;
    if (r->rop == ReduceOp::Sum) return [](Expr c) { return c; };
    if (r->rop == ReduceOp::Prod) {
        Expr t = make_load(d.name, d.vars, DType::f64, SType::Real);
        return [t, r](Expr c) { return make_mul({c, t, make_pow(r->body(), make_const(-1))}); };
    }
    std::string arg_name = d.index_name;
    if (!d.is_topk()) {
        if (r->num_axes() != 1)
            throw UserError(d.loc, "cannot derive the gradient of '" + spec_identifier(d.name) +
                                       "': a max or min over several axes used as a value has no single argmax to route to");
        arg_name = s.names.fresh(spec_identifier(d.name) + "_arg");
        TensorDef a;
        a.name = arg_name;
        a.vars = d.vars;
        a.extents = d.extents;
        a.stype = SType::Int;
        a.loc = d.loc;
        a.body = make_reduce(r->rop == ReduceOp::Max ? ReduceOp::ArgMax : ReduceOp::ArgMin, {r->axis(0)}, {r->extents[0]},
                             r->body());
        s.raw.defs.push_back(a);
        s.raw.notes.push_back("'" + spec_identifier(d.name) + "' is a value: its adjoint goes to the index " +
                              arg_name + " selects (the lowest on ties)");
    }
    Expr cond = make_cmp(CmpOp::EQ, r->axis(0), make_load(arg_name, d.vars, DType::f64, SType::Int));
    return [cond](Expr c) { return make_select(cond, c, make_const(0)); };
}

void backprop_def(State &s, const TensorDef &d, Expr g) {
    Scope sc{d.vars, d.extents};
    Expr f = d.body;
    std::function<Expr(Expr)> weight = [](Expr c) { return c; };
    if (d.is_reduction()) {
        for (size_t i = 0; i < d.body->num_axes(); i++) {
            sc.vars.push_back(d.body->axis(i));
            sc.extents.push_back(d.body->extents[i]);
        }
        f = d.body->body();
        weight = reduction_weight(s, d, g);
    }
    f = check_rounding(f, d, s.active, s.straight_through);
    bool nested = any_of(f, [&](Expr n) {
        return n->kind == Kind::Reduce && any_of(n, [&](Expr m) { return is_atom(s, m); });
    });
    if (nested)
        throw UserError(d.loc, "cannot derive the gradient of '" + spec_identifier(d.name) +
                                   "': it reads a differentiated tensor inside a nested reduction (not supported yet)");
    // Roundings the gradient does not pass through (their argument reads no differentiated tensor) stay
    // as written through the simplifier and the derivative: the backward recomputes their values and
    // must round what the forward rounded.
    KeptRoundings kept;
    Expr fs = simplify(kept.hide(f, [&](Expr n) { return !any_of(n, [&](Expr m) { return is_atom(s, m); }); }));
    std::vector<Expr> atoms;
    visit(fs, [&](Expr n) {
        if (is_atom(s, n)) atoms.push_back(n);
    });
    for (Expr a : atoms) {
        Expr da = derivative(fs, a);
        if (da->is_const(0.0)) continue;
        Expr c = weight(kept.restore(make_mul(g, da)));
        const TensorDef *ad = s.p.find_def(a->name);
        const std::vector<Expr> &ext = ad ? ad->extents : s.p.find_input(a->name)->dims;
        s.terms[a->name].push_back(gather(c, a, sc, target_vars(s, a->name), ext, d.loc, d.name));
    }
}

/** dT as a load: the single term when it already is a load of T's variables, else a definition. */
Expr adjoint_of_def(State &s, const TensorDef &d) {
    const auto &ts = s.terms[d.name];
    if (ts.size() == 1 && ts[0]->kind == Kind::Load && ts[0]->args == d.vars) return ts[0];
    TensorDef a;
    a.name = s.names.fresh("d" + spec_identifier(d.name));
    a.vars = d.vars;
    a.extents = d.extents;
    a.loc = d.loc;
    a.body = ts.size() == 1 ? ts[0] : make_add(ts);
    s.raw.defs.push_back(a);
    return make_load(a.name, d.vars, DType::f64, SType::Real);
}

}  // namespace

RawBackward reverse_mode(const Program &p, const std::vector<std::string> &wrt, const std::vector<ShiftLaw> &laws,
                         bool straight_through, Names &names) {
    State s{p, {}, active_set(p, wrt), {}, {}, straight_through, names, {}};
    for (const auto &l : laws) {
        s.stabilizers.insert(l.stabilizer);
        s.raw.notes.push_back("stabilizer '" + spec_identifier(l.stabilizer) +
                              "' carries no gradient: every output is invariant under its shift");
    }
    for (const auto &o : p.outputs) {
        const TensorDef *d = p.find_def(o.name);
        if (!d || o.name == d->index_name || d->stype != SType::Real || !is_float(o.dtype) || !s.active.count(d->name))
            continue;
        std::string n = names.fresh("d" + spec_identifier(o.name));
        s.raw.adjoint_inputs.push_back(o.name);
        s.raw.adjoint_of[o.name] = n;
        s.terms[o.name].push_back(make_load(n, d->vars, o.dtype, SType::Real));
    }
    for (size_t i = p.defs.size(); i-- > 0;) {
        const TensorDef &d = p.defs[i];
        if (!s.active.count(d.name) || s.stabilizers.count(d.name) || s.terms[d.name].empty()) continue;
        backprop_def(s, d, adjoint_of_def(s, d));
    }
    for (const std::string &x : wrt) {
        const InputDecl *in = p.find_input(x);
        TensorDef g;
        g.name = names.fresh("d" + spec_identifier(x));
        g.vars = target_vars(s, x);
        g.extents = in->dims;
        g.loc = in->loc;
        const auto &ts = s.terms[x];
        g.body = ts.empty() ? make_const(0) : ts.size() == 1 ? ts[0] : make_add(ts);
        s.raw.defs.push_back(g);
        s.raw.gradients.push_back({x, g.name});
    }
    return std::move(s.raw);
}

}  // namespace rf::grad
