/** \file CoalesceTileArrays.cpp
 * The tile pass that lets a tile array take over the storage of another one declared in the same
 * statement list once that one is dead, or while the statement that kills it rewrites it in place.
 */
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* Two tile arrays A and B declared in one statement list L (same class, same extents, neither
 * initialized) share A's storage when
 *   (1) every statement of L that mentions A comes before every statement that mentions B: B's
 *       values are all written after A's last read, so A's old contents in the shared storage are
 *       never observed (B reads before writes saw undefined values before, and see A's now); or
 *   (2) the last statement mentioning A is the first mentioning B, and it is an element-wise
 *       rewrite: it mentions B only as targets `B[i] = v`, A only as `A[i]` inside such a v with the
 *       same i, and i is injective over the loops inside the statement (below). Then every element is
 *       read (as A) and written (as B) by one iteration only, the read first: in place is the same.
 * Arrays are per iteration of the loops around L (declared inside them), so nothing carries over
 * from one iteration to the next: the lowering never reads an uninitialized tile array before writing
 * it in the same iteration (the CPU allocates one per worker, the GPU one per block, reused). The
 * rewriting statement must hold exactly one assignment to B: with two (two loops over the tile, or
 * B[v] = A[v]; B[v+1] = A[v+1]), one could overwrite an element of A the other still reads. Attention: the exp tile P = exp2(S·h1 − h2) overwrites the score
 * tile S (its last reader), halving the tile arrays of a row block (2 × 33 KiB → 33 KiB: one L1 on
 * the CPU; on a GPU, shared memory for two blocks per SM instead of one).
 *
 * Injectivity of i = Σ_v c_v·v + r over the loops v of the statement (r free of anything the
 * statement writes): with the c_v positive constants sorted c_1 < c_2 < ... and every v but the
 * last of at most n_v iterations, c_{k+1} > Σ_{q ≤ k} c_q·(n_q − 1) makes the sum a mixed-radix
 * number: distinct iterations give distinct i. A loop's iteration bound: constant bounds, or a tile
 * [tb, te) of the cascade axis with te = min(tb + T, hi) (n ≤ T). Every loop of the statement around
 * the rewrite must appear in i (else two iterations write one element). */

struct Loop {
    Expr var, begin, end;
};

/** i as Σ c_v·v + residual over the variables `vars`; nullopt when it is not of that form. */
std::optional<std::map<std::string, int64_t>> linear(Expr e, const std::set<std::string> &vars, int64_t sign,
                                                     std::vector<Expr> &residual) {
    std::map<std::string, int64_t> c;
    auto merge = [&](const std::map<std::string, int64_t> &m) {
        for (const auto &[v, k] : m) c[v] += k;
    };
    switch (e->kind) {
    case Kind::Var:
        if (vars.count(e->name)) return std::map<std::string, int64_t>{{e->name, sign}};
        residual.push_back(e);
        return c;
    case Kind::Add:
        for (Expr a : e->args) {
            auto m = linear(a, vars, sign, residual);
            if (!m) return std::nullopt;
            merge(*m);
        }
        return c;
    case Kind::Sub: {
        auto a = linear(e->args[0], vars, sign, residual), b = linear(e->args[1], vars, -sign, residual);
        if (!a || !b) return std::nullopt;
        merge(*a);
        merge(*b);
        return c;
    }
    case Kind::Neg: return linear(e->args[0], vars, -sign, residual);
    case Kind::Mul: {
        if (e->args.size() != 2) break;
        Expr k = e->args[0]->is_const() ? e->args[0] : e->args[1]->is_const() ? e->args[1] : nullptr;
        Expr v = k == e->args[0] ? e->args[1] : e->args[0];
        if (!k || k->value != static_cast<double>(static_cast<int64_t>(k->value))) break;
        return linear(v, vars, sign * static_cast<int64_t>(k->value), residual);
    }
    default: break;
    }
    for (const std::string &v : vars)
        if (mentions(e, v)) return std::nullopt;
    residual.push_back(e);
    return c;
}

/** An upper bound on the iterations of a loop, or nullopt. */
std::optional<int64_t> trip_bound(const Loop &l, const std::map<std::string, Expr> &index_values) {
    if (l.begin->is_const() && l.end->is_const()) return static_cast<int64_t>(std::max(0.0, l.end->value - l.begin->value));
    // A tile of the cascade axis: te = min(tb + T, hi) over [tb, te).
    if (l.end->kind != Kind::Var) return std::nullopt;
    auto te = index_values.find(l.end->name);
    if (te == index_values.end() || te->second->kind != Kind::Min) return std::nullopt;
    for (Expr a : te->second->args)
        if (a->kind == Kind::Add && a->args.size() == 2)
            for (int q = 0; q < 2; q++)
                if (a->args[q] == l.begin && a->args[1 - q]->is_const()) return static_cast<int64_t>(a->args[1 - q]->value);
    return std::nullopt;
}

bool injective(Expr i, const std::vector<Loop> &loops, const std::set<std::string> &written,
               const std::map<std::string, Expr> &index_values) {
    std::set<std::string> vars;
    for (const Loop &l : loops) vars.insert(l.var->name);
    std::vector<Expr> residual;
    auto c = linear(i, vars, 1, residual);
    if (!c) return false;
    for (Expr r : residual)
        if (!invariant(r, written)) return false;
    std::vector<std::pair<int64_t, const Loop *>> terms;
    for (const Loop &l : loops) {
        auto k = c->find(l.var->name);
        if (k == c->end() || k->second <= 0) return false;
        terms.push_back({k->second, &l});
    }
    std::sort(terms.begin(), terms.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    int64_t reach = 0;  // the largest Σ c_q·(v_q − begin_q) of the terms so far
    for (size_t q = 0; q < terms.size(); q++) {
        if (terms[q].first <= reach) return false;
        if (q + 1 == terms.size()) break;
        auto n = trip_bound(*terms[q].second, index_values);
        if (!n) return false;
        reach += terms[q].first * std::max<int64_t>(*n - 1, 0);
    }
    return true;
}

/** Case (2): s rewrites A into B element by element; `writes` counts the assignments to B. A walk
 *  that stops at the first statement that refutes it. */
class InPlaceCheck : public StmtVisitor {
public:
    InPlaceCheck(const std::string &A, const std::string &B, const std::set<std::string> &written,
                 const std::map<std::string, Expr> &index_values)
        : A_(A), B_(B), written_(written), index_values_(index_values) {}

    bool ok = true;
    int writes = 0;

    void visit(const StmtP &s) override {
        if (!ok) return;
        if (s->kind == StmtKind::Assign && s->target->kind == Kind::Load && s->target->name == B_) {
            writes++;
            Expr i = s->target->args.at(0);
            if (mentions(i, A_) || mentions(i, B_) || mentions(s->value, B_)) {
                ok = false;
                return;
            }
            rf::visit(s->value, [&](Expr n) { ok = ok && !(n->kind == Kind::Load && n->name == A_ && n->args.at(0) != i); });
            ok = ok && injective(i, loops_, written_, index_values_);
            return;
        }
        if (mentions_own(s, A_) || mentions_own(s, B_) || (s->kind == StmtKind::Decl && (s->name == A_ || s->name == B_))) {
            ok = false;
            return;
        }
        if (s->kind == StmtKind::For) loops_.push_back({s->var, s->begin, s->end});
        visit_children(s);
        if (s->kind == StmtKind::For) loops_.pop_back();
    }

private:
    const std::string &A_, &B_;
    const std::set<std::string> &written_;
    const std::map<std::string, Expr> &index_values_;
    std::vector<Loop> loops_;
};

/** Coalesces in every list of statements, the outer list first. */
class Coalescer : public StmtMutator {
public:
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override { return StmtMutator::mutate_list(coalesce_list(in)); }

private:
    std::vector<StmtP> coalesce_list(std::vector<StmtP> list);
};

std::vector<StmtP> Coalescer::coalesce_list(std::vector<StmtP> list) {
    // Index locals with one value in the list (declared, never assigned): the tile bounds.
    std::map<std::string, Expr> index_values;
    std::set<std::string> assigned;
    for (const StmtP &s : list)
        if (s->kind == StmtKind::Assign && s->target->kind == Kind::Var) assigned.insert(s->target->name);
    for (const StmtP &s : list)
        if (s->kind == StmtKind::Decl && s->cls == LocalClass::Index && s->dims.empty() && s->value && !assigned.count(s->name))
            index_values[s->name] = s->value;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t a = 0; a < list.size() && !changed; a++) {
            const Stmt &da = *list[a];
            if (da.kind != StmtKind::Decl || da.cls != LocalClass::Tile || da.dims.empty() || da.value) continue;
            for (size_t b = a + 1; b < list.size() && !changed; b++) {
                const Stmt &db = *list[b];
                if (db.kind != StmtKind::Decl || db.cls != da.cls || db.dims != da.dims || db.value) continue;
                std::optional<size_t> last_a, first_b;
                for (size_t q = 0; q < list.size(); q++) {
                    if (q == a || q == b) continue;
                    if (mentions_anywhere(list[q], da.name)) last_a = q;
                    if (!first_b && mentions_anywhere(list[q], db.name)) first_b = q;
                }
                if (!last_a || !first_b || *first_b < a || *last_a > *first_b) continue;
                if (*last_a == *first_b) {
                    std::set<std::string> written;
                    written_in(list[*first_b], written);
                    InPlaceCheck check(da.name, db.name, written, index_values);
                    check.visit(list[*first_b]);
                    // One assignment to B: with two (two loops, or two in one body) an iteration of
                    // one could overwrite an element of A that the other still reads.
                    if (!check.ok || check.writes != 1) continue;
                }
                std::string from = db.name, to = da.name;
                list.erase(list.begin() + static_cast<std::ptrdiff_t>(b));
                for (StmtP &s : list) s = rename_locals(s, [&](const std::string &n) { return n == from ? to : n; });
                changed = true;
            }
        }
    }
    return list;
}

}  // namespace

Module coalesce_tile_arrays(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = Coalescer().mutate(k.body);
    return m;
}

}  // namespace rf::tile
