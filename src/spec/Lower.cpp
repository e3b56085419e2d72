/** \file Lower.cpp
 * Lifting and inlining (docs/language.md, "What --emit ir shows"). Inlining keeps later stages
 * simple: every non-output definition is a reduction, and element-wise work appears where it is
 * used. Lifting gives every reduction a name so the planner sees a flat list of reductions.
 */
#include "spec/Lower.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_set>

#include "spec/Limits.h"

namespace rf::spec {

// ---------------------------------------------------------------------------------------------
// IrLimits

IrLimits::IrLimits() : start_(current_arena().size()) {}

int IrLimits::depth(Expr e) {
    auto it = depth_.find(e);
    if (it != depth_.end()) return it->second;
    int d = 0;
    for (Expr a : e->args) d = std::max(d, depth(a));
    for (Expr a : e->extents) d = std::max(d, depth(a));
    depth_[e] = d + 1;
    return d + 1;
}

int64_t IrLimits::tree_size(Expr e) {
    auto it = size_.find(e);
    if (it != size_.end()) return it->second;
    const int64_t cap = int64_t(1) << 40;  // saturate: only comparisons with the limit matter
    int64_t s = 1;
    for (Expr a : e->args) s = std::min(cap, s + tree_size(a));
    for (Expr a : e->extents) s = std::min(cap, s + tree_size(a));
    size_[e] = s;
    return s;
}

void IrLimits::check(Expr e, SourceLoc loc, const std::string &what) {
    // Depth first: tree_size and depth recurse, and a bounded depth keeps that recursion safe
    // (every expression built from user text has been checked before it is nested further).
    if (depth(e) > kMaxIrDepth)
        throw UserError(loc, what + " is nested too deeply after inlining (more than " + std::to_string(kMaxIrDepth) +
                                 " levels)");
    if (tree_size(e) > kMaxTreeSize)
        throw UserError(loc, what + " is too large after inlining (more than " + std::to_string(kMaxTreeSize) +
                                 " operations)");
}

void IrLimits::check_budget(SourceLoc loc) const {
    if (current_arena().size() - start_ > kMaxIrNodes)
        throw UserError(loc, "spec is too large: it expands to more than " + std::to_string(kMaxIrNodes) +
                                 " expression nodes after inlining");
}

// ---------------------------------------------------------------------------------------------
// Lowerer

const std::vector<std::string> &Lowerer::free_vars(Expr e) {
    auto it = free_.find(e);
    if (it != free_.end()) return it->second;
    std::vector<std::string> out;
    if (e->kind == Kind::Var) {
        if (e->role == VarRole::Index) out.push_back(e->name);
    } else if (e->kind == Kind::Reduce) {
        std::set<std::string> bound;
        for (size_t i = 0; i < e->num_axes(); i++) bound.insert(e->axis(i)->name);
        for (const std::string &v : free_vars(e->body()))
            if (!bound.count(v)) out.push_back(v);
    } else {
        std::set<std::string> all;
        for (Expr a : e->args) {
            const auto &fv = free_vars(a);
            all.insert(fv.begin(), fv.end());
        }
        out.assign(all.begin(), all.end());
    }
    return free_[e] = std::move(out);
}

Expr Lowerer::inline_elementwise(Expr body, const TensorDef &def) {
    size_t start = current_arena().size();
    std::string what = "definition '" + def.name + "'";
    return substitute(body, [&](Expr n) -> Expr {
        if (n->kind != Kind::Load) return nullptr;
        auto it = inline_.find(n->name);
        if (it == inline_.end()) return nullptr;
        const TensorDef &d = defs_[it->second];
        RF_INTERNAL_ASSERT(d.vars.size() == n->args.size()) << "rank mismatch inlining " << d.name;
        // Simultaneous substitution of the callee's index variables by the load's index
        // expressions. The callee has no reductions, hence no binders that could capture them.
        std::unordered_map<Expr, Expr> map;
        for (size_t i = 0; i < d.vars.size(); i++) map[d.vars[i]] = n->args[i];
        Expr r = map.empty() ? d.body : substitute(d.body, [&](Expr v) -> Expr {
            auto m = map.find(v);
            return m == map.end() ? nullptr : m->second;
        });
        // Every node created here ends up in the result, whose tree is at least as large, so a
        // large count means the result is too large: stop before the expansion explodes.
        if (current_arena().size() - start > static_cast<size_t>(kMaxTreeSize))
            throw UserError(def.loc, what + " is too large after inlining (more than " +
                                         std::to_string(kMaxTreeSize) + " operations)");
        return r;
    });
}

Expr Lowerer::lift(TensorDef &def, std::vector<TensorDef> &lifted) {
    // Outermost reductions in source (pre-)order, each distinct node once.
    std::vector<Expr> found;
    std::unordered_set<Expr> seen;
    std::function<void(Expr)> walk = [&](Expr e) {
        if (!seen.insert(e).second) return;
        if (e->kind == Kind::Reduce) {
            found.push_back(e);
            return;
        }
        for (Expr a : e->args) walk(a);
    };
    walk(def.body);
    if (found.empty()) return def.body;

    std::map<std::string, int> count;
    std::unordered_map<Expr, Expr> replacement;
    for (Expr r : found) {
        std::string op = reduce_name(r->rop);
        int n = ++count[op];
        TensorDef l;
        l.name = def.name + "." + op + (n > 1 ? std::to_string(n) : "");
        const auto &fv = free_vars(r);
        for (size_t i = 0; i < def.vars.size(); i++) {
            if (std::binary_search(fv.begin(), fv.end(), def.vars[i]->name)) {
                l.vars.push_back(def.vars[i]);
                l.extents.push_back(def.extents[i]);
            }
        }
        RF_INTERNAL_ASSERT(l.vars.size() == fv.size()) << "reduction in " << def.name << " has a free variable that is "
                                                        << "not an index variable of the definition";
        l.body = r;
        l.stype = r->stype;
        l.loc = def.loc;
        replacement[r] = make_load(l.name, l.vars, DType::f64, r->stype);
        lifted.push_back(std::move(l));
    }
    return substitute(def.body, [&](Expr n) -> Expr {
        auto it = replacement.find(n);
        return it == replacement.end() ? nullptr : it->second;
    });
}

void Lowerer::add(const TensorDef &raw) {
    TensorDef def = raw;
    std::string what = "definition '" + def.name + "'";
    def.body = inline_elementwise(def.body, def);
    limits_.check(def.body, def.loc, what);
    std::vector<TensorDef> lifted;
    // Top-k stays whole (its body may hold nested reductions); a body that is one reduction is
    // already in final form; anything else gets its outermost reductions lifted.
    if (!def.is_topk() && def.body->kind != Kind::Reduce) def.body = lift(def, lifted);
    for (TensorDef &l : lifted) {
        defs_.push_back(std::move(l));
        elementwise_.push_back(false);
    }
    bool ew = def.body->kind != Kind::Reduce;
    if (ew) inline_[def.name] = defs_.size();
    defs_.push_back(std::move(def));
    elementwise_.push_back(ew);
    limits_.check_budget(raw.loc);
}

std::vector<TensorDef> Lowerer::finish(const std::vector<OutputDecl> &outputs) const {
    std::unordered_set<std::string> out;
    for (const OutputDecl &o : outputs) out.insert(o.name);
    std::vector<TensorDef> result;
    for (size_t i = 0; i < defs_.size(); i++)
        if (!elementwise_[i] || out.count(defs_[i].name)) result.push_back(defs_[i]);
    return result;
}

}  // namespace rf::spec
