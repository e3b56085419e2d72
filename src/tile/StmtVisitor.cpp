/** \file StmtVisitor.cpp
 * The default recursions of StmtVisitor and StmtMutator, and the small walks built on them.
 */
#include "tile/StmtVisitor.h"

#include "support/Error.h"

namespace rf::tile {

void for_each_own_expr(const Stmt &s, const std::function<void(const Expr &)> &f) {
    for (const Expr *e : {&s.var, &s.begin, &s.end, &s.cond, &s.target, &s.target2, &s.value, &s.index, &s.scale, &s.k})
        if (*e) f(*e);
    for (const auto *list : {&s.dims, &s.args, &s.args2})
        for (const Expr &e : *list)
            if (e) f(e);
    if (s.gemm) {
        const GemmInfo &g = *s.gemm;
        for (const Expr *e : {&g.M, &g.N, &g.K, &g.a_base, &g.b_base, &g.c_base, &g.a_si, &g.a_sk, &g.b_sj, &g.b_sk, &g.c_si, &g.alpha, &g.accumulate_if})
            if (*e) f(*e);
    }
}

// ---- StmtVisitor.

void StmtVisitor::visit(const StmtP &s) {
    switch (s->kind) {
    case StmtKind::Block: visit_block(s); return;
    case StmtKind::For: visit_for(s); return;
    case StmtKind::If: visit_if(s); return;
    case StmtKind::Decl: visit_decl(s); return;
    case StmtKind::Assign: visit_assign(s); return;
    case StmtKind::Accum: visit_accum(s); return;
    case StmtKind::ArgSelect: visit_arg_select(s); return;
    case StmtKind::TopKInsert: visit_topk_insert(s); return;
    case StmtKind::PolyShift: visit_poly_shift(s); return;
    case StmtKind::Gemm: visit_gemm(s); return;
    case StmtKind::Store: visit_store(s); return;
    case StmtKind::CopyRow: visit_copy_row(s); return;
    case StmtKind::Prefetch: visit_prefetch(s); return;
    case StmtKind::FinishCopies: visit_finish_copies(s); return;
    case StmtKind::Comment: visit_comment(s); return;
    }
    RF_INTERNAL_ASSERT(false) << "unknown statement kind " << static_cast<int>(s->kind);
}

void StmtVisitor::visit_list(const std::vector<StmtP> &list) {
    for (const StmtP &c : list) visit(c);
}

void StmtVisitor::visit_exprs(const StmtP &s) {
    for_each_own_expr(*s, [&](const Expr &e) { visit_expr(e); });
}

// ---- StmtMutator.

StmtP StmtMutator::mutate(const StmtP &s) {
    switch (s->kind) {
    case StmtKind::Block: return mutate_block(s);
    case StmtKind::For: return mutate_for(s);
    case StmtKind::If: return mutate_if(s);
    case StmtKind::Decl: return mutate_decl(s);
    case StmtKind::Assign: return mutate_assign(s);
    case StmtKind::Accum: return mutate_accum(s);
    case StmtKind::ArgSelect: return mutate_arg_select(s);
    case StmtKind::TopKInsert: return mutate_topk_insert(s);
    case StmtKind::PolyShift: return mutate_poly_shift(s);
    case StmtKind::Gemm: return mutate_gemm(s);
    case StmtKind::Store: return mutate_store(s);
    case StmtKind::CopyRow: return mutate_copy_row(s);
    case StmtKind::Prefetch: return mutate_prefetch(s);
    case StmtKind::FinishCopies: return mutate_finish_copies(s);
    case StmtKind::Comment: return mutate_comment(s);
    }
    RF_INTERNAL_ASSERT(false) << "unknown statement kind " << static_cast<int>(s->kind);
    return s;
}

std::vector<StmtP> StmtMutator::mutate_list(const std::vector<StmtP> &list) {
    std::vector<StmtP> out;
    out.reserve(list.size());
    for (const StmtP &c : list) out.push_back(mutate(c));
    return out;
}

namespace {

bool same_list(const std::vector<StmtP> &a, const std::vector<StmtP> &b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (a[i] != b[i]) return false;
    return true;
}

}  // namespace

StmtP StmtMutator::mutate_own(const StmtP &s) {
    // Mutated into a scratch copy; the copy is kept only when some expression or the name changed.
    Stmt c = *s;
    bool changed = false;
    auto E = [&](Expr &e) {
        if (!e) return;
        Expr n = mutate_expr(e);
        changed = changed || n != e;
        e = n;
    };
    for (Expr *e : {&c.var, &c.begin, &c.end, &c.cond, &c.target, &c.target2, &c.value, &c.index, &c.scale, &c.k}) E(*e);
    for (auto *list : {&c.dims, &c.args, &c.args2})
        for (Expr &e : *list) E(e);
    if (s->gemm) {
        GemmInfo g = *s->gemm;
        bool before = changed;
        changed = false;
        for (Expr *e : {&g.M, &g.N, &g.K, &g.a_base, &g.b_base, &g.c_base, &g.a_si, &g.a_sk, &g.b_sj, &g.b_sk, &g.c_si, &g.alpha, &g.accumulate_if}) E(*e);
        if (changed) c.gemm = std::make_shared<GemmInfo>(std::move(g));
        changed = changed || before;
    }
    if (!c.name.empty() && c.kind != StmtKind::Comment) {
        std::string n = mutate_name(c.name);
        changed = changed || n != c.name;
        c.name = std::move(n);
    }
    if (!changed) return s;
    return std::make_shared<Stmt>(std::move(c));
}

StmtP StmtMutator::mutate_children(const StmtP &s) {
    if (s->body.empty() && s->else_body.empty()) return s;
    std::vector<StmtP> body = mutate_list(s->body), else_body = mutate_list(s->else_body);
    if (same_list(body, s->body) && same_list(else_body, s->else_body)) return s;
    return with_body(s, std::move(body), std::move(else_body));
}

// ---- Walks built on them.

void for_each_stmt(const StmtP &s, const std::function<void(const StmtP &)> &f) {
    struct Walk : StmtVisitor {
        const std::function<void(const StmtP &)> &f;
        explicit Walk(const std::function<void(const StmtP &)> &f) : f(f) {}
        void visit(const StmtP &s) override {
            f(s);
            visit_children(s);
        }
    } w(f);
    w.visit(s);
}

bool any_stmt(const StmtP &s, const std::function<bool(const StmtP &)> &pred) {
    struct Find : StmtVisitor {
        const std::function<bool(const StmtP &)> &pred;
        bool hit = false;
        explicit Find(const std::function<bool(const StmtP &)> &p) : pred(p) {}
        void visit(const StmtP &s) override {
            if (hit) return;
            if (pred(s)) hit = true;
            else visit_children(s);
        }
    } f(pred);
    f.visit(s);
    return f.hit;
}

bool any_child(const StmtP &s, const std::function<bool(const StmtP &)> &pred) {
    for (const auto *list : {&s->body, &s->else_body})
        for (const StmtP &c : *list)
            if (pred(c)) return true;
    return false;
}

StmtP rewrite_bottom_up(const StmtP &s, const std::function<StmtP(const StmtP &)> &f) {
    struct Rewrite : StmtMutator {
        const std::function<StmtP(const StmtP &)> &f;
        explicit Rewrite(const std::function<StmtP(const StmtP &)> &f) : f(f) {}
        StmtP mutate(const StmtP &s) override { return f(mutate_children(s)); }
    } r(f);
    return r.mutate(s);
}

StmtP drop_stmts(const StmtP &s, const std::function<bool(const StmtP &)> &gone) {
    return rewrite_bottom_up(s, [&](const StmtP &p) -> StmtP {
        std::vector<StmtP> b, e;
        for (const StmtP &c : p->body)
            if (!gone(c)) b.push_back(c);
        for (const StmtP &c : p->else_body)
            if (!gone(c)) e.push_back(c);
        return b.size() == p->body.size() && e.size() == p->else_body.size() ? p : with_body(p, b, e);
    });
}

}  // namespace rf::tile
