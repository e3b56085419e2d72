/** \file LoopFacts.cpp
 * The loop facts of LoopFacts.h.
 */
#include "tile/LoopFacts.h"

#include "sym/Simplify.h"
#include "tile/StmtVisitor.h"

namespace rf::tile::loop_facts {

namespace {

/** The names one statement itself declares or writes (written_in without the children). */
void written_by(const StmtP &s, std::set<std::string> &out) {
    auto name_of = [&](Expr t) {
        if (t && (t->kind == Kind::Var || t->kind == Kind::Load)) out.insert(t->name);
    };
    switch (s->kind) {
    case StmtKind::For: out.insert(s->var->name); break;
    case StmtKind::Decl: out.insert(s->name); break;
    case StmtKind::Assign: case StmtKind::Accum: case StmtKind::ArgSelect: case StmtKind::Store: case StmtKind::CopyRow:
        name_of(s->target);
        name_of(s->target2);
        break;
    case StmtKind::TopKInsert:
        for (const char *f : {"_v", "_i", "_n"}) out.insert(s->name + f);
        break;
    case StmtKind::PolyShift:
        out.insert(s->name);
        name_of(s->target);
        break;
    case StmtKind::Gemm: name_of(s->gemm->c_base); break;
    default: break;
    }
}

}  // namespace

void written_in(const StmtP &s, std::set<std::string> &out) {
    for_each_stmt(s, [&](const StmtP &c) { written_by(c, out); });
}

bool mentions_own(const StmtP &s, const std::string &name) {
    bool hit = false;
    for_each_own_expr(*s, [&](const Expr &e) { hit = hit || mentions(e, name); });
    return hit;
}

bool mentions_anywhere(const StmtP &s, const std::string &name) {
    return any_stmt(s, [&](const StmtP &c) { return mentions_own(c, name); });
}

bool invariant(Expr e, const std::set<std::string> &written) {
    return !any_of(e, [&](Expr n) {
        if (n->kind == Kind::Reduce) return true;
        return (n->kind == Kind::Var || n->kind == Kind::Load) && written.count(n->name) > 0;
    });
}

bool is_tile_loop(const StmtP &s) {
    if (s->kind != StmtKind::For) return false;
    const std::string &v = s->var->name;
    return v == "$tile" || (v.size() > 5 && v.compare(v.size() - 5, 5, "_tile") == 0);
}

bool kernel_constant(Expr e) {
    return !any_of(e, [](Expr n) {
        return n->kind == Kind::Reduce || n->kind == Kind::Load || (n->kind == Kind::Var && n->role != VarRole::Size);
    });
}

bool same_value(Expr a, Expr b) { return rf::to_string(simplify(a)) == rf::to_string(simplify(b)); }

bool cannot_trap(Expr e) {
    return !any_of(e, [](Expr n) {
        if (n->kind != Kind::IDiv && n->kind != Kind::Mod) return false;
        return !(n->args[1]->is_const() && n->args[1]->value != 0);
    });
}

bool reads_memory(Expr e) {
    return any_of(e, [](Expr n) { return n->kind == Kind::Load; });
}

std::string fresh_name(const std::string &prefix, std::set<std::string> &taken, int &next) {
    std::string name;
    do name = prefix + std::to_string(next++);
    while (taken.count(name));
    taken.insert(name);
    return name;
}

DeclaredLocals declared_locals(const StmtP &body) {
    std::map<std::string, std::pair<LocalClass, bool>> seen;  // name -> (class, scalar)
    std::set<std::string> mixed;
    for_each_stmt(body, [&](const StmtP &s) {
        if (s->kind != StmtKind::Decl) return;
        auto [it, fresh] = seen.emplace(s->name, std::make_pair(s->cls, s->dims.empty()));
        if (!fresh && it->second != std::make_pair(s->cls, s->dims.empty())) mixed.insert(s->name);
    });
    DeclaredLocals out;
    for (const auto &[name, kind] : seen) {
        if (mixed.count(name)) continue;
        if (!kind.second) out.arrays.emplace(name, kind.first);
        else if (kind.first == LocalClass::Tile) out.tile_scalars.insert(name);
    }
    return out;
}

Expr offset_beside(Expr index, Expr x) {
    if (index == x) return make_int(0);
    if (index->kind != Kind::Add) return nullptr;
    std::vector<Expr> rest;
    int found = 0;
    for (Expr a : index->args) {
        if (a == x) found++;
        else if (mentions(a, x->name)) return nullptr;
        else rest.push_back(a);
    }
    if (found != 1 || rest.empty()) return nullptr;
    Expr b = rest[0];
    for (size_t i = 1; i < rest.size(); i++) b = make_add(b, rest[i]);
    return b;
}

namespace {

bool positive_const(Expr e, double &v) {
    if (!e->is_const() || e->value < 1 || e->value != static_cast<double>(static_cast<int64_t>(e->value))) return false;
    v = e->value;
    return true;
}

/** The value of a known index local, or null. */
Expr value_of(Expr e, const Facts &f) {
    if (e->kind != Kind::Var) return nullptr;
    auto it = f.index_values.find(e->name);
    return it == f.index_values.end() ? nullptr : it->second;
}

/** tb < hi for tb = lo + t * T with t in [0, (hi - lo + T - 1) / T). */
bool tile_start_below(Expr tb, Expr hi, const Facts &f) {
    Expr v = value_of(tb, f);
    if (!v || v->kind != Kind::Add || v->args.size() != 2) return false;
    Expr lo = v->args[0], step = v->args[1];
    if (step->kind != Kind::Mul || step->args.size() != 2 || step->args[0]->kind != Kind::Var) return false;
    double T;
    if (!positive_const(step->args[1], T)) return false;
    auto range = f.loop_ranges.find(step->args[0]->name);
    if (range == f.loop_ranges.end() || !range->second.first->is_const(0)) return false;
    Expr n = range->second.second;  // (hi - lo + T - 1) / T
    if (n->kind != Kind::IDiv || !n->args[1]->is_const(T)) return false;
    Expr num = n->args[0];
    if (num->kind != Kind::Add || num->args.size() != 2 || !num->args[1]->is_const(T - 1)) return false;
    Expr diff = num->args[0];
    return diff->kind == Kind::Sub && diff->args[0] == hi && diff->args[1] == lo;
}

/** 0 < nbv for the rows of a block as the lowering declares them (LowerPass.cpp row_decls):
 *      for row in [0, (E + B - 1) / B):  rbase = row * B;  nbv = min(B, E - rbase)
 *  row ≤ (E + B − 1) / B − 1 gives row·B ≤ E − 1, so E − rbase ≥ 1, and B ≥ 1. */
bool block_has_rows(Expr nbv, const Facts &f) {
    Expr v = value_of(nbv, f);
    if (!v || v->kind != Kind::Min) return false;
    double B;
    int c = positive_const(v->args[0], B) ? 0 : positive_const(v->args[1], B) ? 1 : -1;
    if (c < 0) return false;
    Expr rest = v->args[1 - c];
    if (rest->kind != Kind::Sub) return false;
    Expr E = rest->args[0], rbase = value_of(rest->args[1], f);
    if (!rbase || rbase->kind != Kind::Mul || rbase->args.size() != 2 || rbase->args[0]->kind != Kind::Var ||
        !rbase->args[1]->is_const(B))
        return false;
    auto range = f.loop_ranges.find(rbase->args[0]->name);
    if (range == f.loop_ranges.end() || !range->second.first->is_const(0)) return false;
    Expr n = range->second.second;  // (E + B - 1) / B
    if (n->kind != Kind::IDiv || !n->args[1]->is_const(B)) return false;
    Expr num = n->args[0];
    return num->kind == Kind::Add && num->args.size() == 2 && num->args[0] == E && num->args[1]->is_const(B - 1);
}

}  // namespace

bool runs_at_least_once(Expr begin, Expr end, const Facts &f) {
    if (begin->is_const() && end->is_const()) return begin->value < end->value;
    if (begin->is_const(0) && block_has_rows(end, f)) return true;
    // te = min(tb + T, hi) with T >= 1 and tb < hi.
    Expr te = value_of(end, f);
    if (!te || te->kind != Kind::Min) return false;
    Expr step = te->args[0], hi = te->args[1];
    double T;
    if (step->kind != Kind::Add || step->args.size() != 2 || step->args[0] != begin || !positive_const(step->args[1], T)) return false;
    return tile_start_below(begin, hi, f);
}

std::optional<LoopRange> loop_from_zero(const std::vector<LoopRange> &loops, Expr var) {
    for (const LoopRange &l : loops)
        if (l.var == var && l.begin->is_const(0)) return l;
    return std::nullopt;
}

namespace {

StmtP rewrite_below(const StmtP &s, const OwnRewrite &own, std::vector<LoopRange> &loops) {
    if (s->kind == StmtKind::For) loops.push_back({s->var, s->begin, s->end});
    StmtP o = own(s, loops);
    if (s->body.empty() && s->else_body.empty()) {
        if (s->kind == StmtKind::For) loops.pop_back();
        return o;
    }
    std::vector<StmtP> b, e;
    for (const StmtP &c : s->body) b.push_back(rewrite_below(c, own, loops));
    for (const StmtP &c : s->else_body) e.push_back(rewrite_below(c, own, loops));
    if (s->kind == StmtKind::For) loops.pop_back();
    return with_body(o, b, e);
}

}  // namespace

StmtP rewrite_with_loops(const StmtP &s, const OwnRewrite &own) {
    std::vector<LoopRange> loops;
    return rewrite_below(s, own, loops);
}

}  // namespace rf::tile::loop_facts
