/** \file GpuPlacement.cpp
 * The GPU printer's placement decisions (see GpuPlacement.h).
 */
#include "codegen/GpuPlacement.h"

#include <algorithm>

#include "codegen/GpuMapping.h"
#include "ir/Eval.h"
#include "support/Error.h"
#include "tile/StmtVisitor.h"

namespace rf::gpu_mapping {

using namespace tile;

namespace {

/** Names of the loads and locals in e. */
void names_in(Expr e, std::set<std::string> &out) {
    if (!e) return;
    visit(e, [&](Expr x) {
        if (x->kind == Kind::Load || (x->kind == Kind::Var && !x->name.empty() && x->name[0] == '$')) out.insert(x->name);
    });
}

/** What s itself (not its children) reads and writes. */
void collect_own(const StmtP &s, Access &a) {
    for (Expr e : {s->var, s->begin, s->end, s->cond, s->target, s->target2, s->value, s->index, s->k}) names_in(e, a.reads);
    for (Expr e : s->dims) names_in(e, a.reads);
    for (Expr e : s->args) names_in(e, a.reads);
    for (Expr e : s->args2) names_in(e, a.reads);
    switch (s->kind) {
    case StmtKind::Decl: a.writes.insert(s->name); break;
    case StmtKind::Assign: case StmtKind::Accum: a.writes.insert(s->target->name); break;
    case StmtKind::ArgSelect: a.writes.insert(s->target->name); a.writes.insert(s->target2->name); break;
    case StmtKind::TopKInsert:
        for (const char *part : {"_v", "_i", "_n"}) a.writes.insert(s->name + part);
        break;
    case StmtKind::PolyShift: a.writes.insert(s->target->name); break;
    case StmtKind::Store: case StmtKind::CopyRow: a.writes.insert(s->target->name); a.stores = true; break;
    case StmtKind::Gemm: {
        const GemmInfo &g = *s->gemm;
        for (Expr e : {g.M, g.N, g.K, g.a_base, g.b_base, g.c_base, g.a_si, g.a_sk, g.b_sj, g.b_sk, g.c_si, g.alpha}) names_in(e, a.reads);
        a.writes.insert(g.c_base->name);
        a.stores = a.stores || g.c_base->name.empty() || g.c_base->name[0] != '$';
        a.gemm = true;
        break;
    }
    default: break;
    }
}

/** Registers per replicated array, at most: a top-k list, a polynomial state, a row block's states. */
constexpr int64_t kMaxReplicatedElements = 64;

}  // namespace

Access access_of(const StmtP &s) {
    Access a;
    for_each_stmt(s, [&](const StmtP &c) { collect_own(c, a); });
    return a;
}

void Placement::replicate(const std::vector<StmtP> &body) {
    // Candidates: every declared scalar or small constant-size array; then drop those the mapping
    // needs shared, until nothing changes (each round only drops, so this ends).
    auto candidate = [&](const StmtP &s) {
        if (s->kind != StmtKind::Decl) return;
        int64_t n = 1, v;
        bool constant = true;
        for (Expr d : s->dims) constant = constant && const_int(d, v) && (n *= v) > 0;
        if (constant && n <= kMaxReplicatedElements) replicated_.insert(s->name);
    };
    for (const StmtP &s : body) for_each_stmt(s, candidate);
    for (size_t before = replicated_.size() + 1; before != replicated_.size();) {
        before = replicated_.size();
        drop_conflicts(body);
    }
}

void Placement::drop(const std::set<std::string> &names) {
    for (const std::string &n : names) replicated_.erase(n);
}

/** One walk over a group-level list as the printer will map it (see CodeGen_GPU.cpp's uniform_list). */
void Placement::drop_conflicts(const std::vector<StmtP> &list) {
    // Blocks and ifs go on into both branches (the visitor's default); the other kinds decide.
    struct Walk : StmtVisitor {
        Placement &p;
        explicit Walk(Placement &p) : p(p) {}
        void visit_list(const std::vector<StmtP> &list) override {
            for (const StmtP &s : list) {
                if (p.coop(s)) visit(s);
                // One thread runs it unless every thread can: then what it writes is not replicated.
                else if (!p.replicable(s)) p.drop(access_of(s).writes);
            }
        }
        void visit_gemm(const StmtP &s) override {
            // Its operands are addressed (shared). Its extents and offsets stay shared too: the
            // tensor-core GEMM's fragments use every register (attention spilled on sm_80 with
            // its tile bounds and row count held in registers across the GEMM).
            p.drop(access_of(s).reads);
            p.drop(access_of(s).writes);
        }
        void visit_for(const StmtP &s) override {
            if (s->loop == LoopKind::Simd && p.simd_spreadable(s)) {
                // Each thread its own iterations: only tree reductions into scalars reach every thread.
                for (const StmtP &c : s->body)
                    if (!(c->kind == StmtKind::Accum && c->target->kind == Kind::Var)) p.drop(access_of(c).writes);
            } else if (s->loop == LoopKind::Independent && p.independent_spread(s)) {
                p.drop(access_of(s).writes);
            } else {
                visit_list(s->body);
            }
        }
        // Array initialisation and row copies: shared arrays, read-only sources (no children).
    } walk(*this);
    walk.visit_list(list);
}

bool Placement::replicable(const StmtP &s) const {
    Access a = access_of(s);
    if (a.stores || a.gemm) return false;
    std::set<std::string> inner;
    declared_in(s, inner);
    for (const std::string &w : a.writes)
        if (!replicated(w) && !(inner.count(w) && s->kind != StmtKind::Decl)) return false;
    return true;
}

bool Placement::simd_spreadable(const StmtP &s) const {
    if (s->loop != LoopKind::Simd) return false;
    std::set<std::string> inner;
    declared_in(s, inner);
    for (const StmtP &c : s->body) {
        if (c->kind == StmtKind::Accum && c->target->kind == Kind::Var) {
            if (inner.count(c->target->name)) return false;
            continue;
        }
        if (c->kind == StmtKind::Gemm || c->kind == StmtKind::TopKInsert || c->kind == StmtKind::PolyShift ||
            c->kind == StmtKind::ArgSelect || c->kind == StmtKind::Accum)
            return false;
        if (writes_outer_scalar(c, inner)) return false;
    }
    return private_arrays_ok(s);
}

double Placement::estimate(Expr e) const {
    Expr r = substitute(e, [&](Expr x) -> Expr {
        if (x->kind == Kind::Var && x->name == "$nbv") return make_int(k_.schedule.row_block);
        return nullptr;
    });
    EvalEnv env;
    env.var_value = [&](Expr v) -> double {
        auto it = o_.sizes.find(v->name);
        return it != o_.sizes.end() ? static_cast<double>(it->second) : 1.0;
    };
    env.load_value = [](Expr, const int64_t *) { return 1.0; };
    try {
        return Evaluator(env).eval(r);
    } catch (const std::exception &) {
        return 1;
    }
}

bool Placement::independent_spread(const StmtP &s) const {
    if (s->loop != LoopKind::Independent) return false;
    std::set<std::string> inner;
    declared_in(s, inner);
    for (const StmtP &c : s->body)
        if (writes_outer_scalar(c, inner)) return false;
    if (!private_arrays_ok(s)) return false;
    bool inner_coop = false;
    for (const StmtP &c : s->body) inner_coop = inner_coop || coop(c);
    // More than one independent iteration: one per thread, with serial (private) vector loops.
    // Cheaper than running them in step with a tree per iteration (and far fewer barriers,
    // which PoCL's work-group compiler pays for dearly inside loops); a single row (row
    // block 1) keeps its vector loops spread over the threads instead.
    return !inner_coop || estimate(make_sub(s->end, s->begin)) * inner_extent(s) >= 2;
}

double Placement::inner_extent(const StmtP &s) const {
    const StmtP in = only_child_loop(s);
    return in ? std::max(1.0, estimate(make_sub(in->end, in->begin))) : 1;  // tile bounds are locals: unknown
}

StmtP Placement::only_child_loop(const StmtP &s) const {
    StmtP found;
    std::set<std::string> prefix_reads;
    for (const StmtP &c : s->body) {
        if (c->kind == StmtKind::Comment) continue;
        // Scalar declarations before the loop (a row's hoisted values) are evaluated per flat
        // element: the same value, as the loop does not write what they read (checked below).
        if (!found && c->kind == StmtKind::Decl && c->dims.empty() && c->value) {
            Access a = access_of(c);
            prefix_reads.insert(a.reads.begin(), a.reads.end());
            continue;
        }
        if (found || c->kind != StmtKind::For) return nullptr;
        bool elementwise = c->loop == LoopKind::Simd;
        for (const StmtP &b : c->body)
            elementwise = elementwise && b->kind != StmtKind::Accum && b->kind != StmtKind::For && b->kind != StmtKind::Gemm;
        if (c->loop != LoopKind::Independent && !elementwise) return nullptr;
        found = c;
    }
    if (!found) return nullptr;
    for (const std::string &w : access_of(found).writes)
        if (prefix_reads.count(w)) return nullptr;
    bool uses = false;
    auto mark = [&](Expr e) {
        visit(e, [&](Expr x) { uses = uses || x == s->var; });
    };
    mark(found->begin);
    mark(found->end);
    return uses ? nullptr : found;
}

bool Placement::group_replicable(const StmtP &s, const std::set<std::string> &prefix_scalars) const {
    if (s->kind == StmtKind::Comment) return true;
    if (s->kind == StmtKind::Decl) return s->dims.empty();
    Access a = access_of(s);
    if (a.stores || a.gemm) return false;
    std::set<std::string> inner;
    declared_in(s, inner);
    for (const std::string &w : a.writes)
        if (!prefix_scalars.count(w) && !inner.count(w)) return false;
    return private_arrays_ok(s);
}

bool Placement::prefix_has_first_thread_statements(const std::vector<StmtP> &body, int at) const {
    std::set<std::string> scalars;
    for (int i = 0; i < at; i++) {
        const StmtP &c = body[static_cast<size_t>(i)];
        if (!group_replicable(c, scalars)) return true;
        if (c->kind == StmtKind::Decl) scalars.insert(c->name);
    }
    return false;
}

int Placement::row_group(const std::vector<StmtP> &body, bool &reduction) const {
    int at = -1;
    for (size_t i = 0; i < body.size(); i++)
        if (body[i]->kind == StmtKind::For) {
            if (at >= 0) return -1;
            at = static_cast<int>(i);
        }
    if (at < 0) return -1;
    const StmtP &loop = body[static_cast<size_t>(at)];
    // The prefix: statements every thread of the group runs (they must not read what the first
    // thread alone writes), and the first thread's.
    std::set<std::string> scalars, written_alone;
    for (int i = 0; i < at; i++) {
        const StmtP &c = body[static_cast<size_t>(i)];
        if (c->kind == StmtKind::Decl && !c->dims.empty()) return -1;  // its scope would be the first thread's
        Access a = access_of(c);
        if (group_replicable(c, scalars)) {
            for (const std::string &r : a.reads)
                if (written_alone.count(r)) return -1;
            if (c->kind == StmtKind::Decl) scalars.insert(c->name);
        } else {
            written_alone.insert(a.writes.begin(), a.writes.end());
        }
    }
    for (const std::string &r : access_of(loop).reads)
        if (written_alone.count(r)) return -1;
    if (loop->body.empty()) return -1;
    reduction = loop->loop == LoopKind::Simd;
    for (const StmtP &c : loop->body)
        reduction = reduction && c->kind == StmtKind::Accum && c->target->kind == Kind::Var && scalars.count(c->target->name);
    if (reduction) return at;
    // Independent iterations: an independent loop or an element-wise vector loop, writing no
    // scalar declared outside it.
    std::set<std::string> inner;
    declared_in(loop, inner);
    bool elementwise = loop->loop == LoopKind::Independent || loop->loop == LoopKind::Simd;
    for (const StmtP &c : loop->body) {
        if (loop->loop == LoopKind::Simd) elementwise = elementwise && c->kind != StmtKind::Accum && c->kind != StmtKind::For;
        elementwise = elementwise && c->kind != StmtKind::Gemm && !writes_outer_scalar(c, inner);
    }
    return elementwise && private_arrays_ok(loop) ? at : -1;
}

bool Placement::coop(const StmtP &s) const {
    switch (s->kind) {
    case StmtKind::For:
        RF_INTERNAL_ASSERT(s->loop != LoopKind::Parallel) << "GPU printer: nested parallel loop in " << k_.name;
        if (s->loop == LoopKind::Simd && simd_spreadable(s)) return true;
        if (s->loop == LoopKind::Independent && independent_spread(s)) return true;
        [[fallthrough]];
    case StmtKind::If: case StmtKind::Block: return any_child(s, [&](const StmtP &c) { return coop(c); });
    case StmtKind::Gemm: case StmtKind::CopyRow: return true;
    // A shared array's initialisation is spread; a replicated one is every thread's own.
    case StmtKind::Decl: return !s->dims.empty() && s->value != nullptr && !replicated(s->name);
    default: return false;
    }
}

}  // namespace rf::gpu_mapping
