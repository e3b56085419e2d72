/** \file Gather.cpp
 * The gather form of a load's contribution (the transpose of a load, written as a reduction the
 * engine can fuse instead of a scatter).
 *
 * Rule. In a scope of index variables s = (v, a) (a definition's variables and its reduction axes),
 * a term C(s) contributes to the tensor X read as X[idx(s)]. When every idx_p is a scope variable
 * s_{π(p)}, each at one dimension only, the map s -> idx is a projection onto the variables it
 * names, so
 *     dX[w] = Σ_{s : idx(s) = w} C(s) = Σ_{u} C(s)[s_{π(p)} := w_p]
 * where u are the scope variables no dimension names (dK[b,h,j,d] = Σ_i dS[b,h,i,j]·Q[b,h,i,d]).
 * For idx_p = h / G with G free of index variables (grouped heads), h is not determined by w_p but
 * ranges over the group: h / G = w_p ⟺ G·w_p <= h < G·w_p + G (G >= 1, floor division), so h is
 * summed under that mask. Factors of C that mention no summed variable move out of the sum
 * (Σ_u c·g(u) = c·Σ_u g(u)), and a summed variable C does not mention multiplies by its extent.
 * Precondition of the spelling: each summed variable has a direct use in the summed body (the
 * language infers a reduction axis' extent from one), else the contribution is refused.
 */
#include "grad/GradInternal.h"
#include "spec/Print.h"
#include "sym/Simplify.h"

namespace rf::grad {

Expr rename_vars(Expr e, const std::map<std::string, Expr> &to) {
    return substitute(e, [&](Expr n) -> Expr {
        if (n->kind != Kind::Var || n->role != VarRole::Index) return nullptr;
        auto it = to.find(n->name);
        return it == to.end() ? nullptr : it->second;
    });
}

namespace {

[[noreturn]] void refuse(SourceLoc loc, Expr load, const std::string &def, const std::string &why) {
    throw UserError(loc, "cannot derive the gradient through the load '" + print_spec_expr(load) +
                             "' in the definition of '" + spec_identifier(def) + "': " + why);
}

int scope_index(const Scope &s, Expr v) {
    for (size_t i = 0; i < s.vars.size(); i++)
        if (s.vars[i] == v) return static_cast<int>(i);
    return -1;
}

bool has_direct_use(Expr e, Expr var) {
    return any_of(e, [&](Expr n) {
        if (n->kind != Kind::Load) return false;
        for (Expr a : n->args)
            if (a == var) return true;
        return false;
    });
}

std::string fresh_axis(const std::string &base, const std::set<std::string> &taken) {
    std::string n = base;
    for (int k = 2; taken.count(n); k++) n = base + std::to_string(k);
    return n;
}

}  // namespace

Expr gather(Expr term, Expr load, const Scope &scope, const std::vector<Expr> &target_vars,
            const std::vector<Expr> &target_extents, SourceLoc loc, const std::string &def_name) {
    RF_INTERNAL_ASSERT(load->args.size() == target_vars.size()) << "gather: rank mismatch for " << load->name;
    std::vector<Expr> mapped(scope.vars.size(), nullptr);
    std::vector<Expr> masks;
    for (size_t p = 0; p < load->args.size(); p++) {
        Expr idx = load->args[p];
        int si = scope_index(scope, idx);
        if (si >= 0) {
            if (simplify(scope.extents[si]) != simplify(target_extents[p]))
                refuse(loc, load, def_name,
                       "'" + idx->name + "' covers " + print_spec_expr(scope.extents[si]) + " of the " +
                           print_spec_expr(target_extents[p]) + " positions of dimension " + std::to_string(p + 1) +
                           " (a partial read is not supported yet)");
            if (mapped[si]) refuse(loc, load, def_name, "the index variable '" + idx->name + "' appears at two dimensions");
            mapped[si] = target_vars[p];
            continue;
        }
        if (idx->kind == Kind::IDiv && scope_index(scope, idx->args[0]) >= 0 &&
            !any_of(idx->args[1], [](Expr n) { return n->kind == Kind::Var && n->role == VarRole::Index; })) {
            // h / G = w: h stays summed, masked to its group.
            Expr h = idx->args[0], g = idx->args[1], w = target_vars[p];
            Expr lo = make_mul(g, w);
            masks.push_back(make_and(make_cmp(CmpOp::LE, lo, h), make_cmp(CmpOp::LT, h, make_add(lo, g))));
            continue;
        }
        refuse(loc, load, def_name,
               "its index '" + print_spec_expr(idx) + "' at dimension " + std::to_string(p + 1) +
                   " is neither an index variable nor 'h / G'");
    }
    // Summed variables get names that the target's variables cannot capture.
    std::set<std::string> taken;
    for (Expr w : target_vars) taken.insert(w->name);
    std::map<std::string, Expr> ren;
    std::vector<Expr> axes, extents;
    for (size_t i = 0; i < scope.vars.size(); i++) {
        if (mapped[i]) {
            ren[scope.vars[i]->name] = mapped[i];
            continue;
        }
        std::string n = fresh_axis(scope.vars[i]->name, taken);
        taken.insert(n);
        Expr v = make_index(n);
        ren[scope.vars[i]->name] = v;
        axes.push_back(v);
        extents.push_back(scope.extents[i]);
    }
    Expr c = simplify_keeping_roundings(rename_vars(term, ren));
    for (Expr &mk : masks) mk = rename_vars(mk, ren);
    if (axes.empty()) return masks.empty() ? c : make_select(masks[0], c, make_const(0));
    // Split the product into the factors that depend on the summed variables and the others.
    std::vector<Expr> factors = c->kind == Kind::Mul ? c->args : std::vector<Expr>{c};
    std::vector<Expr> inner, outer;
    for (Expr f : factors) {
        bool dep = false;
        for (Expr a : axes) dep = dep || mentions(f, a->name);
        (dep ? inner : outer).push_back(f);
    }
    Expr body = inner.empty() ? make_const(1) : inner.size() == 1 ? inner[0] : make_mul(inner);
    for (Expr mk : masks) body = make_select(mk, body, make_const(0));
    std::vector<Expr> kept_axes, kept_extents;
    for (size_t i = 0; i < axes.size(); i++) {
        // Σ_u select(u == Y, g, 0) = g when g does not mention u and Y (an argmax: one index in
        // range) does not either: the routed adjoint of a max whose term does not vary along u.
        if (body->kind == Kind::Select && body->args[2]->is_const(0.0) && body->args[0]->kind == Kind::Cmp &&
            body->args[0]->cmp == CmpOp::EQ && !mentions(body->args[1], axes[i]->name)) {
            Expr c = body->args[0];
            Expr other = c->args[0] == axes[i] ? c->args[1] : c->args[1] == axes[i] ? c->args[0] : nullptr;
            if (other && !mentions(other, axes[i]->name)) {
                body = body->args[1];
                continue;
            }
        }
        if (!mentions(body, axes[i]->name)) {
            outer.push_back(extents[i]);  // Σ_u c = extent(u)·c
            continue;
        }
        if (!has_direct_use(body, axes[i]))
            refuse(loc, load, def_name, "the summed variable '" + axes[i]->name + "' is not used directly by any load");
        kept_axes.push_back(axes[i]);
        kept_extents.push_back(extents[i]);
    }
    if (!kept_axes.empty()) outer.push_back(make_reduce(ReduceOp::Sum, kept_axes, kept_extents, body));
    else if (!inner.empty() || !masks.empty()) outer.push_back(body);
    return outer.empty() ? make_const(1) : outer.size() == 1 ? outer[0] : make_mul(outer);
}

}  // namespace rf::grad
