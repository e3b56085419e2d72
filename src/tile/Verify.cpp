/** \file Verify.cpp
 * The tile IR verifier: structural invariants every pass must keep and every backend relies on.
 */
#include <map>
#include <set>
#include <sstream>

#include "support/Error.h"
#include "tile/StmtVisitor.h"
#include "tile/TileIR.h"

namespace rf::tile {

namespace {

/** Checks one kernel; the walk carries the scopes and whether it is inside a parallel or simd loop. */
class Verifier : public StmtVisitor {
public:
    Verifier(const Module &m, const Kernel &k) : m_(m), k_(k) {
        for (const std::string &s : m.sizes) sizes_.insert(s);
    }

    void run() {
        scopes_.emplace_back();
        visit(k_.body);
    }

private:
    [[noreturn]] void fail(const StmtP &s, const std::string &why) {
        throw InternalError("tile IR verifier: kernel " + k_.name + ": " + why + "\n  at: " + to_string(s, 0));
    }

    bool declared(const std::string &name) const {
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
            if (it->count(name)) return true;
        return false;
    }

    const Stmt *local(const std::string &name) const {
        auto it = locals_.find(name);
        return it == locals_.end() ? nullptr : it->second;
    }

    void expr(const StmtP &s, Expr e) {
        if (!e) return;
        rf::visit(e, [&](Expr n) {
            if (n->kind == Kind::Var) {
                if (n->role == VarRole::Size && !sizes_.count(n->name)) fail(s, "unknown size " + n->name);
                if (n->role != VarRole::Size && !n->name.empty() && n->name[0] == '$' && !declared(n->name))
                    fail(s, "use of undeclared " + n->name);
            } else if (n->kind == Kind::Load) {
                if (!n->name.empty() && n->name[0] == '$') {
                    if (!declared(n->name)) fail(s, "use of undeclared " + n->name);
                    const Stmt *d = local(n->name);
                    if (d && d->dims.size() != n->args.size()) fail(s, "wrong rank for local " + n->name);
                } else {
                    const Buffer *b = m_.find(n->name);
                    if (!b) fail(s, "load of unknown buffer " + n->name);
                    if (b->dims.size() != n->args.size()) fail(s, "wrong rank for buffer " + n->name);
                }
            }
        });
    }

    void target(const StmtP &s, Expr t) {
        if (!t) fail(s, "missing target");
        if (t->kind == Kind::Var) {
            if (t->name.empty() || t->name[0] != '$' || !declared(t->name)) fail(s, "assignment to undeclared " + t->name);
            const Stmt *d = local(t->name);
            if (d && !d->dims.empty()) fail(s, "scalar assignment to array " + t->name);
        } else if (t->kind == Kind::Load && !t->name.empty() && t->name[0] == '$') {
            expr(s, t);
        } else {
            fail(s, "assignment target must be a local");
        }
    }

    /** A child list in a scope of its own, inside a parallel or simd loop as given. */
    void scoped_list(const std::vector<StmtP> &b, bool in_parallel, bool in_simd) {
        bool saved_parallel = in_parallel_, saved_simd = in_simd_;
        in_parallel_ = in_parallel;
        in_simd_ = in_simd;
        scopes_.emplace_back();
        visit_list(b);
        scopes_.pop_back();
        in_parallel_ = saved_parallel;
        in_simd_ = saved_simd;
    }

    void visit_block(const StmtP &s) override { visit_list(s->body); }
    void visit_comment(const StmtP &) override {}

    void visit_for(const StmtP &s) override {
        expr(s, s->begin);
        expr(s, s->end);
        if (s->loop == LoopKind::Parallel && in_parallel_) fail(s, "nested parallel loop");
        if (in_simd_) fail(s, "loop inside a simd loop");
        if (declared(s->var->name)) fail(s, "loop variable shadows " + s->var->name);
        scopes_.emplace_back();
        scopes_.back().insert(s->var->name);
        if (s->loop == LoopKind::Simd) simd_outer_.push_back(scopes_.size() - 1);
        // Arrays are allocated once per worker of a parallel loop: names are unique within one.
        std::map<std::string, const Stmt *> outer;
        if (s->loop == LoopKind::Parallel) outer.swap(locals_);
        scoped_list(s->body, in_parallel_ || s->loop == LoopKind::Parallel, s->loop == LoopKind::Simd);
        if (s->loop == LoopKind::Parallel) locals_.swap(outer);
        if (s->loop == LoopKind::Simd) simd_outer_.pop_back();
        scopes_.pop_back();
    }

    void visit_if(const StmtP &s) override {
        expr(s, s->cond);
        if (in_simd_) fail(s, "branch statement inside a simd loop (use select)");
        scoped_list(s->body, in_parallel_, in_simd_);
        scoped_list(s->else_body, in_parallel_, in_simd_);
    }

    void visit_decl(const StmtP &s) override {
        for (Expr d : s->dims)
            rf::visit(d, [&](Expr n) {
                if (n->kind == Kind::Var && n->role != VarRole::Size) fail(s, "array extent depends on " + n->name);
                if (n->kind == Kind::Load) fail(s, "array extent reads memory");
            });
        expr(s, s->value);
        if (in_simd_) fail(s, "declaration inside a simd loop");
        // Arrays are allocated once per worker: unique within a parallel loop. Scalars may be
        // declared again in a sibling scope (one per row of a block), never shadowed.
        if (!s->dims.empty() && locals_.count(s->name)) fail(s, "array declared twice: " + s->name);
        if (declared(s->name)) fail(s, "local declared twice in nested scopes: " + s->name);
        locals_[s->name] = s.get();
        scopes_.back().insert(s->name);
    }

    void visit_assign(const StmtP &s) override {
        target(s, s->target);
        expr(s, s->value);
        if (in_simd_ && s->target->kind == Kind::Var) fail(s, "scalar assignment inside a simd loop");
    }

    void visit_accum(const StmtP &s) override {
        target(s, s->target);
        expr(s, s->value);
        if (in_simd_) {
            const Stmt *d = local(s->target->name);
            if (s->target->kind != Kind::Var || !d || d->cls != LocalClass::Tile)
                fail(s, "a simd reduction must accumulate into a scalar tile local");
        }
    }

    void visit_arg_select(const StmtP &s) override {
        target(s, s->target);
        target(s, s->target2);
        expr(s, s->value);
        expr(s, s->index);
        if (in_simd_) fail(s, "arg-selection inside a simd loop");
    }

    void visit_topk_insert(const StmtP &s) override {
        if (!declared(s->name + "_v") || !declared(s->name + "_i") || !declared(s->name + "_n"))
            fail(s, "top-k list " + s->name + " not declared");
        expr(s, s->k);
        expr(s, s->value);
        expr(s, s->index);
        if (in_simd_) fail(s, "top-k insertion inside a simd loop");
    }

    void visit_poly_shift(const StmtP &s) override {
        if (!declared(s->name)) fail(s, "shift of undeclared " + s->name);
        if (s->args.size() != s->args2.size()) fail(s, "shift with mismatched reference points");
        for (Expr e : s->args) expr(s, e);
        for (Expr e : s->args2) expr(s, e);
        if (s->alphas.empty() || s->alphas[0].size() != s->args.size()) fail(s, "shift multi-indices do not match");
    }

    void visit_gemm(const StmtP &s) override {
        const GemmInfo &g = *s->gemm;
        for (Expr e : {g.M, g.N, g.K, g.a_base, g.b_base, g.c_base, g.a_si, g.a_sk, g.b_sj, g.b_sk, g.c_si, g.alpha}) {
            if (!e) fail(s, "incomplete gemm");
            expr(s, e);
        }
        if (g.accumulate_if) {
            if (!g.accumulate) fail(s, "a gemm that stores has no accumulate condition");
            expr(s, g.accumulate_if);
        }
        if (in_simd_) fail(s, "gemm inside a simd loop");
    }

    void visit_copy_row(const StmtP &s) override {
        // rfk::copy_row_f32 and copy_row_bf16 (the printer's two row copies)
        bool row_output = false;
        for (const Buffer &x : m_.buffers)
            row_output = row_output || (x.name == s->target->name && x.role == Buffer::Role::Output &&
                                        (x.dtype == DType::f32 || x.dtype == DType::bf16));
        if (!row_output) fail(s, "row copy to something other than an f32 or bf16 output");
        if (s->value->name.empty()) fail(s, "row copy from nothing");
        if (s->value->name[0] != '$') {
            const Buffer *src = m_.find(s->value->name);
            if (!src || src->role != Buffer::Role::Temp || src->dtype != DType::f32 || src->dims.size() != 1)
                fail(s, "row copy from something other than a local or a one-dimensional f32 temporary");
        }
        if (in_simd_) fail(s, "row copy inside a simd loop");
        expr(s, s->target);
        expr(s, s->value);
        expr(s, s->end);
        if (s->scale) {
            if (s->scale->stype != SType::Real) fail(s, "row copy scaled by a non-real value");
            expr(s, s->scale);
        }
    }

    void visit_finish_copies(const StmtP &s) override {
        if (s->target->name.empty() || s->target->name[0] != '$') fail(s, "finish copies below something other than a local");
        if (in_simd_) fail(s, "finish copies inside a simd loop");
        expr(s, s->target);
    }

    void visit_prefetch(const StmtP &s) override {
        const Buffer *b = m_.find(s->target->name);
        if (!b || b->role != Buffer::Role::Input) fail(s, "prefetch of something other than an input");
        expr(s, s->target);  // its address: every local it reads in scope here
        expr(s, s->end);
    }

    void visit_store(const StmtP &s) override {
        const Buffer *b = m_.find(s->target->name);
        if (!b) fail(s, "store to unknown buffer " + s->target->name);
        bool writable = false;
        for (const Buffer &x : m_.buffers)
            if (x.name == s->target->name && x.role != Buffer::Role::Input) writable = true;
        if (!writable) fail(s, "store to input " + s->target->name);
        expr(s, s->target);
        expr(s, s->value);
    }

    const Module &m_;
    const Kernel &k_;
    std::set<std::string> sizes_;
    std::vector<std::set<std::string>> scopes_;
    std::vector<size_t> simd_outer_;
    std::map<std::string, const Stmt *> locals_;
    bool in_parallel_ = false, in_simd_ = false;
};

}  // namespace

void verify(const Module &m) {
    std::set<std::string> names;
    for (const Kernel &k : m.kernels) {
        if (!names.insert(k.name).second) throw InternalError("tile IR verifier: two kernels named " + k.name);
        if (!k.body) throw InternalError("tile IR verifier: kernel " + k.name + " has no body");
        Verifier(m, k).run();
    }
}

}  // namespace rf::tile
