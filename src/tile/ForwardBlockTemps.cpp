/** \file ForwardBlockTemps.cpp
 * The CPU tile pass that drops a float64 temporary which one row block writes from a local array and
 * only the same row block's epilogue reads back: the epilogue reads the local array instead.
 */
#include <optional>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* A member's finalize stores its value into a temporary the epilogue reads (LowerMerge.cpp):
 *     for rr in [0, nbv): for x in [0, N): store T[b + rr, x] = V(rr, x)
 *     ...
 *     for rr' in [0, nbv): ... T[b + rr', e] ...
 * When T (a float64 buffer of the whole M × N output: 128 MiB for M = N = 4096) is written nowhere
 * else and read nowhere else, every read sees the element the same row block stored, and
 *     T[b + rr', e] = V(rr', e)
 * as long as V's operands still hold their values at the read: V reads no buffer the kernel writes,
 * and no local that the statements after the store write or that the store's own statement
 * declares. The store and the buffer go: per row block, one float64 write and read of N × rows
 * elements fewer, and the epilogue reads V's local array (a tile the GEMMs just wrote, still in cache).
 * Preconditions, each checked: T is a temporary mentioned by one kernel; exactly one statement stores
 * it (none of the statements after it does), with indices [b + rr, x] where rr and x are the loops [0, E_r) and [0, N) around the store (N
 * T's second extent, so every column of the row is stored); every read is T[b + rr', e] with rr' a
 * loop [0, E_r) around the read, b the same expression, in a later statement of the list that holds
 * the store's statement, which writes neither b nor E_r. */

using Loop = LoopRange;

/** Counts the stores of t below s; the last one's statement and the loops around it (from s down). */
void find_stores(const StmtP &s, const std::string &t, std::vector<Loop> &loops, StmtP &store, std::vector<Loop> &at, int &count) {
    if (s->kind == StmtKind::Store && s->target->kind == Kind::Load && s->target->name == t) {
        count++;
        store = s;
        at = loops;
    }
    if (s->kind == StmtKind::For) loops.push_back({s->var, s->begin, s->end});
    for (const std::vector<StmtP> *l : {&s->body, &s->else_body})
        for (const StmtP &c : *l) find_stores(c, t, loops, store, at, count);
    if (s->kind == StmtKind::For) loops.pop_back();
}

/** b + rr as (b, rr) when rr is a variable. */
std::optional<std::pair<Expr, Expr>> base_plus_var(Expr e) {
    if (e->kind != Kind::Add || e->args.size() != 2 || e->args[1]->kind != Kind::Var) return std::nullopt;
    return std::make_pair(e->args[0], e->args[1]);
}

/** The store of T with what its reads are checked against: T[b + rr, x] = V, rr in [0, rows). */
struct TheStore {
    StmtP stmt;
    Expr base, row, col, rows, value;
};

/** The store when it has the shape the rule needs (one store, indices [b + rr, x] over loops
 *  [0, rows) and [0, N) around it inside the statement `site`). */
std::optional<TheStore> the_store(const StmtP &site, const Buffer &t) {
    std::vector<Loop> loops, at;
    StmtP store;
    int count = 0;
    find_stores(site, t.name, loops, store, at, count);
    if (count != 1 || store->target->args.size() != 2 || t.dims.size() != 2) return std::nullopt;
    auto bv = base_plus_var(store->target->args[0]);
    Expr col = store->target->args[1];
    if (!bv || col->kind != Kind::Var) return std::nullopt;
    auto r = loop_from_zero(at, bv->second), c = loop_from_zero(at, col);
    if (!r || !c || c->end != t.dims[1]) return std::nullopt;
    return TheStore{store, bv->first, bv->second, col, r->end, store->value};
}

/** Replaces every read T[b + rr', e] below s (rr' a loop [0, rows) around it) with V(rr', e);
 *  fails on any other mention of T. */
class ReadForwarder {
public:
    ReadForwarder(const Buffer &t, const TheStore &st) : t_(t), st_(st) {}
    bool failed = false;

    StmtP run(const StmtP &s) {
        return rewrite_with_loops(s, [&](const StmtP &c, const std::vector<Loop> &loops) {
            return map_own_exprs(c, [&](Expr e) { return substitute(e, [&](Expr n) { return read(n, loops); }); });
        });
    }

private:
    Expr read(Expr n, const std::vector<Loop> &loops) {
        if (n->kind != Kind::Load || n->name != t_.name) return nullptr;
        auto bv = base_plus_var(n->args[0]);
        std::optional<Loop> r = bv ? loop_from_zero(loops, bv->second) : std::nullopt;
        if (!bv || bv->first != st_.base || !r || r->end != st_.rows || mentions(n->args[1], t_.name)) {
            failed = true;
            return nullptr;
        }
        return substitute(substitute(st_.value, st_.row, bv->second), st_.col, n->args[1]);
    }

    const Buffer &t_;
    const TheStore &st_;
};

/** Names an expression reads (locals and buffers). */
std::set<std::string> reads_of(Expr e) {
    std::set<std::string> out;
    visit(e, [&](Expr n) {
        if (n->kind == Kind::Var || n->kind == Kind::Load) out.insert(n->name);
    });
    return out;
}

/** The list holding the store's statement at `w`, every other mention of T after it. */
std::optional<StmtP> forward_in(const StmtP &s, const Buffer &t, const std::set<std::string> &kernel_writes);

std::optional<StmtP> forward_in_list(const StmtP &owner, const Buffer &t, const std::set<std::string> &kernel_writes) {
    const std::vector<StmtP> &l = owner->body;
    std::vector<size_t> hits;
    for (size_t q = 0; q < l.size(); q++)
        if (mentions_anywhere(l[q], t.name)) hits.push_back(q);
    if (hits.empty()) return std::nullopt;
    size_t w = hits[0];
    bool stores_here = any_stmt(l[w], [&](const StmtP &c) { return c->kind == StmtKind::Store && c->target->name == t.name; });
    if (!stores_here) return std::nullopt;
    if (hits.size() == 1) {  // the reads are inside the same statement: look one level down
        if (l[w]->kind != StmtKind::For && l[w]->kind != StmtKind::Block) return std::nullopt;
        auto inner = forward_in(l[w], t, kernel_writes);
        if (!inner) return std::nullopt;
        std::vector<StmtP> out = l;
        out[w] = *inner;
        return with_body(owner, out, owner->else_body);
    }
    auto st = the_store(l[w], t);
    if (!st || mentions(st->value, t.name) || any_stmt(l[w], [&](const StmtP &c) { return c != st->stmt && mentions_own(c, t.name); }))
        return std::nullopt;
    // The later mentions must all be reads: a second store (a top-k's literal fallback for rows whose
    // δ is not finite, LowerMerge.cpp literal_topk, rewrites the list after the finalize stored it)
    // would be turned into a store to V's local (fuzz_specs.py seed 1251: "store to unknown buffer").
    for (size_t q = w + 1; q < l.size(); q++)
        if (any_stmt(l[q], [&](const StmtP &c) { return c->kind == StmtKind::Store && c->target->name == t.name; })) return std::nullopt;
    // V, b and the row count must mean the same at every read: nothing after the store writes what
    // they read, V reads no buffer the kernel writes, and nothing V reads is declared inside l[w].
    std::set<std::string> later, inside;
    for (size_t q = w + 1; q < l.size(); q++) written_in(l[q], later);
    written_in(l[w], inside);
    std::set<std::string> needed = reads_of(st->value);
    for (Expr e : {st->base, st->rows})
        for (const std::string &n : reads_of(e)) needed.insert(n);
    for (const std::string &n : needed) {
        bool loop_index = n == st->row->name || n == st->col->name;
        if (!loop_index && (later.count(n) || inside.count(n))) return std::nullopt;
        if (!n.empty() && n[0] != '$' && kernel_writes.count(n)) return std::nullopt;
    }
    ReadForwarder f(t, *st);
    std::vector<StmtP> out;
    for (size_t q = 0; q < l.size(); q++) {
        if (q < w) out.push_back(l[q]);
        else if (q == w) out.push_back(rewrite_bottom_up(l[q], [&](const StmtP &c) -> StmtP {
            std::vector<StmtP> b;
            for (const StmtP &x : c->body)
                if (x != st->stmt && !((x->kind == StmtKind::For || x->kind == StmtKind::Block) && x->body.empty())) b.push_back(x);
            return b.size() == c->body.size() ? c : with_body(c, b, c->else_body);
        }));
        else out.push_back(f.run(l[q]));
    }
    if (f.failed) return std::nullopt;
    return with_body(owner, out, owner->else_body);
}

std::optional<StmtP> forward_in(const StmtP &s, const Buffer &t, const std::set<std::string> &kernel_writes) {
    if (!s->else_body.empty()) return std::nullopt;
    return forward_in_list(s, t, kernel_writes);
}

}  // namespace

Module forward_block_temps(const Module &in) {
    Module m = in;
    std::vector<Buffer> kept;
    for (const Buffer &t : in.buffers) {
        size_t users = 0;
        Kernel *user = nullptr;
        for (Kernel &k : m.kernels)
            if (mentions_anywhere(k.body, t.name)) {
                users++;
                user = &k;
            }
        if (t.role != Buffer::Role::Temp || users != 1) {
            kept.push_back(t);
            continue;
        }
        std::set<std::string> writes;
        written_in(user->body, writes);
        auto body = forward_in(user->body, t, writes);
        if (!body || mentions_anywhere(*body, t.name)) {
            kept.push_back(t);
            continue;
        }
        user->body = *body;
    }
    m.buffers = kept;
    return m;
}

}  // namespace rf::tile
