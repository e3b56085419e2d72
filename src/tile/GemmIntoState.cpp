/** \file GemmIntoState.cpp
 * The tile pass (GPU lowering only) that lets a member's tile GEMM accumulate straight into its
 * running state instead of into a zeroed tile array that a loop then adds to the state.
 */
#include <optional>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* The lowering writes a GEMM member's update (LowerGemm.cpp, member_gemm) as
 *     tile $g[n] = 0
 *     gemm $g[c] += F x W ...                  (one GEMM, or the GQA choice between a block GEMM
 *                                               and one GEMM per row: every GEMM into $g)
 *     for $rr ...: ... for x ...: { acc[i] sum= $g[i]; ... }   (and the row's tags and flags)
 * so acc[i] ← acc[i] + (0 + Σ_k F·W). With states in the GEMM's own type (float: every GPU
 * state; the CPU keeps states in double, so it does not run this pass) the GEMM can add into acc
 * directly, acc[i] ← acc[i] + Σ_k F·W: the same sum, added to acc in the GEMM's accumulators instead
 * of after it (a different but equally accurate rounding order). The zeroing of $g (a tile array
 * as large as the state), its stores, and the loop's reads of $g and read-modify-writes of acc go:
 * on a GPU one pass over shared memory per tile fewer, and $g's shared memory.
 * Preconditions, each checked: $g is declared with 0 right before the GEMM statement and mentioned
 * nowhere else in the list but there and in one accumulation `A[i] sum= $g[i]` (same index,
 * A a declared state array) inside the statement right after, which reads A nowhere else (it would
 * now see the sum already added); every GEMM into $g accumulates. Not checked here but by
 * construction: the GEMM writes exactly the elements the loop accumulates (member_gemm's layout,
 * M = rows, N = X, c_si = X over acc's rr·X + x), so no element of acc outside them is touched. */

/** Every GEMM under s writes into `tmp` and accumulates (and s holds nothing else that mentions it). */
bool only_accumulating_gemms(const StmtP &s, const std::string &tmp) {
    return !any_stmt(s, [&](const StmtP &c) {
        if (c->kind != StmtKind::Gemm) return mentions_own(c, tmp);
        const GemmInfo &g = *c->gemm;
        return !(g.accumulate && g.c_base->kind == Kind::Load && g.c_base->name == tmp && !mentions(g.a_base, tmp) &&
                 !mentions(g.b_base, tmp));
    });
}

/** Finds the one `A[i] sum= tmp[i]` under a statement: `found` counts such accumulations, `refuted`
 *  is set by any other mention of tmp; subtrees that do not mention tmp are skipped. */
class AccumulationFinder : public StmtVisitor {
public:
    explicit AccumulationFinder(const std::string &tmp) : tmp_(tmp) {}
    int found = 0;
    bool refuted = false;
    std::string acc;  ///< the state array of the last accumulation found

    void visit(const StmtP &s) override {
        if (refuted) return;
        if (s->kind == StmtKind::Accum && s->op == ReduceOp::Sum && s->value->kind == Kind::Load && s->value->name == tmp_) {
            Expr t = s->target;
            if (t->kind != Kind::Load || t->args.size() != 1 || s->value->args.size() != 1 || t->args[0] != s->value->args[0] ||
                mentions(t->args[0], tmp_)) {
                refuted = true;
                return;
            }
            found++;
            acc = t->name;
            return;
        }
        if (mentions_own(s, tmp_)) {
            refuted = true;
            return;
        }
        visit_children(s);
    }

    void visit_list(const std::vector<StmtP> &list) override {
        for (const StmtP &c : list)
            if (mentions_anywhere(c, tmp_)) visit(c);
    }

private:
    const std::string &tmp_;
};

/** The state array A of the one `A[i] sum= tmp[i]` under s (and no other mention of tmp), or nothing. */
std::optional<std::string> the_accumulation(const StmtP &s, const std::string &tmp, int &found) {
    AccumulationFinder f(tmp);
    f.visit(s);
    found = f.found;
    if (f.refuted || f.found == 0) return std::nullopt;
    return f.acc;
}

/** Every GEMM (into tmp, by only_accumulating_gemms) writes into the state array `acc` instead. */
class GemmRedirect : public StmtMutator {
public:
    explicit GemmRedirect(const std::string &acc) : acc_(acc) {}
    StmtP mutate_gemm(const StmtP &s) override {
        auto g = std::make_shared<GemmInfo>(*s->gemm);
        g->c_base = make_load(acc_, g->c_base->args, g->c_base->dtype, g->c_base->stype);
        auto c = std::make_shared<Stmt>(*s);
        c->gemm = g;
        return c;
    }

private:
    const std::string &acc_;
};

/** Drops the accumulations from tmp, and the loops left empty by their removal. */
class AccumulationDropper : public StmtMutator {
public:
    explicit AccumulationDropper(const std::string &tmp) : tmp_(tmp) {}
    bool dropped(const StmtP &s) const { return s->kind == StmtKind::Accum && s->value->kind == Kind::Load && s->value->name == tmp_; }
    static bool empty_loop(const StmtP &s) { return s->kind == StmtKind::For && s->body.empty(); }

    std::vector<StmtP> mutate_list(const std::vector<StmtP> &list) override {
        std::vector<StmtP> out;
        for (const StmtP &c : list) {
            if (dropped(c)) continue;
            StmtP r = mutate(c);
            if (!empty_loop(r)) out.push_back(r);
        }
        return out;
    }

private:
    const std::string &tmp_;
};

/** s without the accumulation from tmp (and without loops left empty by its removal). */
std::optional<StmtP> drop_accumulation(const StmtP &s, const std::string &tmp) {
    AccumulationDropper d(tmp);
    if (d.dropped(s)) return std::nullopt;
    StmtP r = d.mutate(s);
    if (AccumulationDropper::empty_loop(r)) return std::nullopt;
    return r;
}

/** Redirects in every list of statements, the outer list first. */
class GemmIntoState : public StmtMutator {
public:
    explicit GemmIntoState(const std::set<std::string> &states) : states_(states) {}
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override { return StmtMutator::mutate_list(rewrite_list(in)); }

private:
    std::vector<StmtP> rewrite_list(std::vector<StmtP> list);
    const std::set<std::string> &states_;
};

std::vector<StmtP> GemmIntoState::rewrite_list(std::vector<StmtP> list) {
    const std::set<std::string> &states = states_;
    for (size_t i = 0; i + 2 < list.size(); i++) {
        const Stmt &d = *list[i];
        if (d.kind != StmtKind::Decl || d.cls != LocalClass::Tile || d.dims.empty() || !d.value || !d.value->is_const(0)) continue;
        const std::string tmp = d.name;
        if (!only_accumulating_gemms(list[i + 1], tmp)) continue;
        int found = 0;
        auto acc = the_accumulation(list[i + 2], tmp, found);
        if (!acc || found != 1 || !states.count(*acc)) continue;
        bool elsewhere = false;
        for (size_t q = 0; q < list.size(); q++)
            if (q != i && q != i + 1 && q != i + 2 && mentions_anywhere(list[q], tmp)) elsewhere = true;
        if (elsewhere) continue;
        // Nothing else in the loop may read the state: it would now see the GEMM's sum already added.
        auto rest = drop_accumulation(list[i + 2], tmp);
        if (rest && mentions_anywhere(*rest, *acc)) continue;
        list[i + 1] = GemmRedirect(*acc).mutate(list[i + 1]);
        if (rest) list[i + 2] = *rest;
        else list.erase(list.begin() + static_cast<std::ptrdiff_t>(i + 2));
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return list;
}

}  // namespace

Module accumulate_gemms_into_states(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        std::set<std::string> states;
        for_each_stmt(k.body, [&](const StmtP &s) {
            if (s->kind == StmtKind::Decl && s->cls == LocalClass::State && !s->dims.empty()) states.insert(s->name);
        });
        k.body = GemmIntoState(states).mutate(k.body);
    }
    return m;
}

}  // namespace rf::tile
