/** \file StmtVisitor.h
 * The one recursion over tile IR statements: a visitor and a mutator with one virtual per StmtKind
 * whose defaults recurse into both child lists (body and else_body), so that no pass or printer has to
 * remember else_body on its own.
 */
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tile/TileIR.h"

namespace rf::tile {

/** Walks a statement tree. Each visit_<kind> defaults to visit_exprs (the node's own expressions, in
 *  the order of for_each_own_expr) followed by visit_children; an override that wants the children
 *  visited calls visit_children itself. Overriding visit (calling StmtVisitor::visit) sees every
 *  statement before its kind's hook. */
class StmtVisitor {
public:
    virtual ~StmtVisitor() = default;
    /** Dispatches on s->kind. */
    virtual void visit(const StmtP &s);
    /** Visits the statements of a list in order. */
    virtual void visit_list(const std::vector<StmtP> &list);

    virtual void visit_block(const StmtP &s) { visit_default(s); }
    virtual void visit_for(const StmtP &s) { visit_default(s); }
    virtual void visit_if(const StmtP &s) { visit_default(s); }
    virtual void visit_decl(const StmtP &s) { visit_default(s); }
    virtual void visit_assign(const StmtP &s) { visit_default(s); }
    virtual void visit_accum(const StmtP &s) { visit_default(s); }
    virtual void visit_arg_select(const StmtP &s) { visit_default(s); }
    virtual void visit_topk_insert(const StmtP &s) { visit_default(s); }
    virtual void visit_poly_shift(const StmtP &s) { visit_default(s); }
    virtual void visit_gemm(const StmtP &s) { visit_default(s); }
    virtual void visit_store(const StmtP &s) { visit_default(s); }
    virtual void visit_copy_row(const StmtP &s) { visit_default(s); }
    virtual void visit_prefetch(const StmtP &s) { visit_default(s); }
    virtual void visit_finish_copies(const StmtP &s) { visit_default(s); }
    virtual void visit_comment(const StmtP &s) { visit_default(s); }

    /** Called by the defaults for every non-null own expression of a statement; does nothing. */
    virtual void visit_expr(const Expr &) {}

protected:
    void visit_default(const StmtP &s) {
        visit_exprs(s);
        visit_children(s);
    }
    void visit_exprs(const StmtP &s);
    void visit_children(const StmtP &s) {
        visit_list(s->body);
        visit_list(s->else_body);
    }
};

/** Rebuilds a statement tree. Each mutate_<kind> defaults to mutate_default: the node's own
 *  expressions through mutate_expr, its local name through mutate_name, both child lists through
 *  mutate_list; when nothing changed (every result is the same pointer or an equal name) the SAME
 *  StmtP comes back, so an identity mutation allocates nothing and a rewrite deep in the tree rebuilds
 *  only the path to it. */
class StmtMutator {
public:
    virtual ~StmtMutator() = default;
    /** Dispatches on s->kind. */
    virtual StmtP mutate(const StmtP &s);
    /** Mutates the statements of a list in order; an override may drop, insert or reorder. */
    virtual std::vector<StmtP> mutate_list(const std::vector<StmtP> &list);

    virtual StmtP mutate_block(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_for(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_if(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_decl(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_assign(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_accum(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_arg_select(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_topk_insert(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_poly_shift(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_gemm(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_store(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_copy_row(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_prefetch(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_finish_copies(const StmtP &s) { return mutate_default(s); }
    virtual StmtP mutate_comment(const StmtP &s) { return mutate_default(s); }

    /** An own expression of a statement (never null); the identity. */
    virtual Expr mutate_expr(const Expr &e) { return e; }
    /** The local a statement names (Decl, TopKInsert, PolyShift; never a Comment's text); the identity. */
    virtual std::string mutate_name(const std::string &n) { return n; }

protected:
    StmtP mutate_default(const StmtP &s) { return mutate_children(mutate_own(s)); }
    /** s with its own expressions and name mutated, children untouched (s itself when unchanged). */
    StmtP mutate_own(const StmtP &s);
    /** s with both child lists mutated (s itself when unchanged). */
    StmtP mutate_children(const StmtP &s);
};

/** Calls f on every non-null own expression of s (not its children's), in a fixed order: var, begin,
 *  end, cond, target, target2, value, index, k, dims, args, args2, then the GEMM's M, N, K, a_base,
 *  b_base, c_base, a_si, a_sk, b_sj, b_sk, c_si, alpha. */
void for_each_own_expr(const Stmt &s, const std::function<void(const Expr &)> &f);

/** Calls f on s and every statement below it, parents before children, then before else. */
void for_each_stmt(const StmtP &s, const std::function<void(const StmtP &)> &f);

/** True when pred holds for s or a statement below it; stops at the first hit. */
bool any_stmt(const StmtP &s, const std::function<bool(const StmtP &)> &pred);

/** True when pred holds for a direct child of s (body, then else_body); stops at the first hit. For
 *  walks that decide per kind whether to go deeper. */
bool any_child(const StmtP &s, const std::function<bool(const StmtP &)> &pred);

/** Bottom-up rewriting: every statement of s's tree, its children rewritten first, replaced by f of the
 *  result (f returns its argument to keep it). Unchanged subtrees keep their pointers. */
StmtP rewrite_bottom_up(const StmtP &s, const std::function<StmtP(const StmtP &)> &f);

/** s with every statement for which `gone` holds removed from the lists below it (body and else),
 *  bottom-up: a loop emptied by the removals is itself tested by `gone` in its parent's list. s itself
 *  is kept (the caller tests it). Unchanged subtrees keep their pointers. */
StmtP drop_stmts(const StmtP &s, const std::function<bool(const StmtP &)> &gone);

}  // namespace rf::tile
