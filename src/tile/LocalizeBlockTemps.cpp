/** \file LocalizeBlockTemps.cpp
 * The CPU tile pass that keeps a float64 temporary which each row block writes and reads only at
 * its own rows in an array of that block, instead of a global buffer holding every row.
 */
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* A chain's finalize stores each member's value into a float64 temporary and its epilogue reads
 * it back (LowerMerge.cpp); when a value may need the literal recompute, the finalize also reads
 * a temporary it stored (m in attention's l and O). In the kernel of a row-blocked plan:
 *     for row in [0, R) parallel:
 *         index r0 = ..., r1 = ..., rbase = ...      (the block's coordinates, never reassigned)
 *         ...
 *         for rr in [0, nbv):  store T[r0, r1, rbase + rr, c] = V      nbv = min(B, E − rbase) ≤ B
 *         ...                  ... T[r0, r1, rbase + rr', e] ...        rr' in [0, nbv')  ≤ B
 * When every mention of T (mentioned by this kernel only) has that shape, with the same prefix
 * (r0, r1) and base (rbase) of index locals the parallel body declares once and never assigns,
 * every element an iteration touches lies in its own block
 *     { T[p, base + rr, c] : 0 ≤ rr < B, c in T's trailing extents },
 * and distinct iterations have distinct blocks (the lowering's row decomposition maps row to the
 * block coordinates one to one, LowerPlan.cpp). So no iteration sees another's elements, and the
 * map T[p, base + rr, c0, .., cn] ↦ L[rr·S + lin(c)] (S the product of T's trailing extents, lin
 * the row-major position of c among them) is one to one on the block: the iteration computes the
 * same values reading and writing L, a float64 array of B·S elements per worker. T goes: per row
 * block, no stores of a float64 row to memory of the whole output (16 MiB for attention's O at
 * M = 2048, H = 8, D = 128) to read back at once, and the epilogue reads L while it is in cache.
 * A read of an element the iteration has not yet written would differ (T held an earlier value),
 * but the lowering reads a temporary only after the finalize that stores it. Preconditions, each
 * checked: T is a temporary one kernel mentions, only inside its (first) parallel loop, in no GEMM
 * and no row copy; every mention is a load or store with one index of the form base + rr where rr
 * is the variable of a loop [0, E) around it, E a constant B or an index local declared
 * min(B, ..); the indices before it and base are the same in every mention and read only sizes
 * and index locals declared once at the top of the parallel body, never assigned; B is the same
 * in every mention. */

struct RowAccess {
    size_t at = 0;              ///< position of the row index among T's indices
    std::vector<Expr> prefix;   ///< the indices before it
    Expr base = nullptr;        ///< the row index is base + rr
    int64_t rows = 0;           ///< B: rr < B
};

/** B when `end` is a constant B or an index local declared min(B, ..) or min(.., B). */
std::optional<int64_t> row_bound(Expr end, const std::map<std::string, Expr> &index_decls) {
    if (end->is_const()) return static_cast<int64_t>(end->value);
    if (end->kind != Kind::Var) return std::nullopt;
    auto it = index_decls.find(end->name);
    if (it == index_decls.end() || it->second->kind != Kind::Min) return std::nullopt;
    for (Expr a : it->second->args)
        if (a->is_const() && a->value >= 1) return static_cast<int64_t>(a->value);
    return std::nullopt;
}

/** Rewrites the mentions of T inside the parallel loop; `failed` on any mention of another shape. */
class Localizer {
public:
    Localizer(const Buffer &t, bool output_too, std::string local, const std::map<std::string, Expr> &index_decls,
              const std::set<std::string> &fixed)
        : t_(t), output_too_(output_too), local_(std::move(local)), index_decls_(index_decls), fixed_(fixed) {}
    bool failed = false;
    std::optional<RowAccess> shape;

    StmtP run(const StmtP &s) {
        return rewrite_with_loops(s, [&](const StmtP &c, const std::vector<LoopRange> &loops) { return own(c, loops); });
    }

private:
    /** c's own part with the mentions of T rewritten (c's children are rewritten after it). */
    StmtP own(const StmtP &c, const std::vector<LoopRange> &loops) {
        loops_ = &loops;
        if (c->kind == StmtKind::Gemm || c->kind == StmtKind::CopyRow) {
            if (mentions_own(c, t_.name)) failed = true;
            return c;
        }
        auto rewrite = [&](Expr e) { return substitute(e, [&](Expr n) { return load(n); }); };
        if (c->kind != StmtKind::Store || c->target->kind != Kind::Load || c->target->name != t_.name) return map_own_exprs(c, rewrite);
        // A store writes every buffer of its tensor (CpuKernelPrinter.cpp): an output of the same name
        // keeps its store, now of the local's value.
        Expr element = load(c->target);
        StmtP a = assign(element, rewrite(c->value));
        return output_too_ && element ? block({a, store(c->target, element)}) : a;
    }

    /** The local element for a load of T, or nullptr (and failed) when its shape is another. */
    Expr load(Expr n) {
        if (n->kind != Kind::Load || n->name != t_.name) return nullptr;
        auto a = access(n);
        if (!a || (shape && (a->at != shape->at || a->prefix != shape->prefix || a->base != shape->base || a->rows != shape->rows))) {
            failed = true;
            return nullptr;
        }
        shape = a;
        // L[rr·S + lin(c)]: row-major over T's trailing extents.
        Expr index = n->args[a->at]->args[1];
        for (size_t d = a->at + 1; d < n->args.size(); d++) index = make_add(make_mul(index, t_.dims[d]), n->args[d]);
        return local_at(local_, index, n->stype);
    }

    std::optional<RowAccess> access(Expr n) const {
        if (n->args.size() != t_.dims.size()) return std::nullopt;
        for (size_t at = 0; at < n->args.size(); at++) {
            Expr r = n->args[at];
            if (r->kind != Kind::Add || r->args.size() != 2 || r->args[1]->kind != Kind::Var) continue;
            auto loop = loop_from_zero(*loops_, r->args[1]);
            auto rows = loop ? row_bound(loop->end, index_decls_) : std::nullopt;
            if (!rows) continue;
            RowAccess a{at, std::vector<Expr>(n->args.begin(), n->args.begin() + at), r->args[0], *rows};
            bool fixed = block_invariant(a.base);
            for (Expr p : a.prefix) fixed = fixed && block_invariant(p);
            for (size_t d = at + 1; d < n->args.size(); d++) fixed = fixed && !mentions(n->args[d], t_.name);
            if (fixed) return a;
        }
        return std::nullopt;
    }

    /** Reads only sizes and the parallel body's fixed index locals (no loads). */
    bool block_invariant(Expr e) const {
        return !any_of(e, [&](Expr x) {
            if (x->kind == Kind::Load || x->kind == Kind::Reduce) return true;
            return x->kind == Kind::Var && x->role != VarRole::Size && !fixed_.count(x->name);
        });
    }

    const Buffer &t_;
    bool output_too_;
    std::string local_;
    const std::map<std::string, Expr> &index_decls_;
    const std::set<std::string> &fixed_;
    const std::vector<LoopRange> *loops_ = nullptr;  ///< the loops around the statement being rewritten
};

/** The first parallel loop of a kernel body, or nullptr. */
StmtP parallel_loop(const StmtP &body) {
    StmtP found;
    any_stmt(body, [&](const StmtP &s) {
        if (s->kind == StmtKind::For && s->loop == LoopKind::Parallel) found = s;
        return found != nullptr;
    });
    return found;
}

/** Index locals declared once at the top of the parallel body and assigned nowhere in it. */
std::set<std::string> fixed_index_locals(const StmtP &par, std::map<std::string, Expr> &values) {
    std::set<std::string> fixed, assigned;
    for_each_stmt(par, [&](const StmtP &s) {
        if (s->kind == StmtKind::Assign && s->target->kind == Kind::Var) assigned.insert(s->target->name);
    });
    for (const StmtP &s : par->body)
        if (s->kind == StmtKind::Decl && s->cls == LocalClass::Index && s->dims.empty() && s->value && !assigned.count(s->name)) {
            fixed.insert(s->name);
            values[s->name] = s->value;
        }
    return fixed;
}

/** True when the block's coordinates depend on the parallel loop's variable (through the index
 *  locals they read): a block every iteration shares would not be private. */
bool follows_row(const RowAccess &a, Expr row, const std::map<std::string, Expr> &index_decls) {
    std::function<bool(Expr, int)> depends = [&](Expr e, int depth) {
        return any_of(e, [&](Expr x) {
            if (x == row) return true;
            auto it = x->kind == Kind::Var ? index_decls.find(x->name) : index_decls.end();
            return it != index_decls.end() && depth < 8 && depends(it->second, depth + 1);
        });
    };
    if (depends(a.base, 0)) return true;
    for (Expr p : a.prefix)
        if (depends(p, 0)) return true;
    return false;
}

/** A local name no statement of the kernel uses. */
std::string fresh_local(const StmtP &body, int &counter) {
    for (;;) {
        std::string n = "$blk" + std::to_string(counter++);
        if (!mentions_anywhere(body, n) && !any_stmt(body, [&](const StmtP &s) { return s->name == n; })) return n;
    }
}

/** s with the statement `from` (by pointer) replaced by `to`. */
StmtP replace_stmt(const StmtP &s, const StmtP &from, const StmtP &to) {
    if (s == from) return to;
    std::vector<StmtP> b, e;
    bool changed = false;
    for (const StmtP &c : s->body) b.push_back(replace_stmt(c, from, to)), changed |= b.back() != c;
    for (const StmtP &c : s->else_body) e.push_back(replace_stmt(c, from, to)), changed |= e.back() != c;
    return changed ? with_body(s, b, e) : s;
}

/** The kernel body with T in a per-block local, or nullopt when a precondition fails. */
std::optional<StmtP> localize(const StmtP &body, const Buffer &t, bool output_too, int &counter) {
    StmtP par = parallel_loop(body);
    if (!par || mentions_anywhere(replace_stmt(body, par, block({})), t.name)) return std::nullopt;
    std::map<std::string, Expr> index_decls;
    std::set<std::string> fixed = fixed_index_locals(par, index_decls);
    std::string local = fresh_local(body, counter);
    Localizer f(t, output_too, local, index_decls, fixed);
    std::vector<StmtP> inner;
    for (const StmtP &c : par->body) inner.push_back(f.run(c));
    if (f.failed || !f.shape || !follows_row(*f.shape, par->var, index_decls)) return std::nullopt;
    // B·S float64 elements, uninitialized: every element is stored before it is read.
    Expr size = make_int(f.shape->rows);
    for (size_t d = f.shape->at + 1; d < t.dims.size(); d++) size = make_mul(size, t.dims[d]);
    inner.insert(inner.begin(), decl(local, LocalClass::State, {size}, nullptr));
    return replace_stmt(body, par, with_body(par, inner, par->else_body));
}

}  // namespace

Module localize_block_temps(const Module &in) {
    Module m = in;
    std::vector<Buffer> kept;
    int counter = 0;
    for (const Buffer &t : in.buffers) {
        std::vector<Kernel *> users;
        for (Kernel &k : m.kernels)
            if (mentions_anywhere(k.body, t.name)) users.push_back(&k);
        bool output_too = false;
        for (const Buffer &b : in.buffers) output_too |= b.name == t.name && b.role == Buffer::Role::Output;
        std::optional<StmtP> body;
        if (t.role == Buffer::Role::Temp && t.dtype == DType::f64 && users.size() == 1)
            body = localize(users[0]->body, t, output_too, counter);
        if (!body) {
            kept.push_back(t);
            continue;
        }
        users[0]->body = *body;
    }
    m.buffers = kept;
    return m;
}

}  // namespace rf::tile
