/** \file ElementLanes.cpp
 * The CPU tile pass that runs an independent loop assigning one float64 array element per
 * iteration (a member's finalize over its free index) as a vector loop, the calls it repeats on
 * every iteration with the same arguments computed once before it.
 */
#include <map>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* A member's finalize writes, per row, every element of its free index (LowerMerge.cpp):
 *     for x in [0, X) independent:
 *         A[rr·X + x] = select(seen[rr] = 0 or acc[rr·X + x] = 0, 0,
 *                              select(m′ ≠ tag[rr], acc[rr·X + x] · exp2((tag[rr] − m′)·log2 e), acc[..]))
 * (attention's O with X = D: 128 × D elements per row block). Printed as a scalar loop, each
 * iteration branches twice and calls exp2 when the row's reference point moved. Two rewrites:
 *  (1) every maximal subexpression c of the value that is real, reads nothing the loop writes,
 *      does not mention x, holds a call (exp2, log, ..) and cannot trap is computed once into a
 *      float64 local before the loop: c has the same value on every iteration (its operands do not
 *      change in the loop), so  ∀x: V(x, c) = V(x, h) with h = c evaluated before the loop. When c
 *      reads memory and the loop may run zero times, loop and locals go under `if begin < end` (c's
 *      loads are then the ones the first iteration would do).
 *  (2) the loop becomes a lanes loop (a vector loop whose values stay float64, LoopKind::Lanes):
 *      an independent loop touches disjoint elements in every iteration, its one statement writes
 *      A[i(x)] and reads A only at that same element, so the iterations commute and may run as
 *      vector lanes; the values are computed in float64 as before, elementwise, with the same
 *      operations: the results are the same.
 * Preconditions, each checked: the loop is independent, its body one assignment to an element of
 * a local array whose index mentions x, the value holds no nested reduction (the literal
 * recompute's sums stay scalar) and reads the target array only at the target's element. */

bool is_local_array_element(Expr e) { return e->kind == Kind::Load && !e->name.empty() && e->name[0] == '$'; }

/** The loop as a lanes loop with its repeated calls before it; nullptr when it does not qualify. */
class ElementLoop {
public:
    ElementLoop(const StmtP &loop, const Facts &facts, int &next, std::set<std::string> &names)
        : loop_(loop), facts_(facts), next_(next), names_(names) {}

    StmtP rewrite() {
        const StmtP &s = loop_;
        if (s->kind != StmtKind::For || s->loop != LoopKind::Independent || s->body.size() != 1) return nullptr;
        const StmtP &a = s->body[0];
        if (a->kind != StmtKind::Assign || !is_local_array_element(a->target) || !mentions(a->target, s->var->name)) return nullptr;
        if (any_of(a->value, [](Expr n) { return n->kind == Kind::Reduce; })) return nullptr;
        bool other_element = any_of(a->value, [&](Expr n) { return n->kind == Kind::Load && n->name == a->target->name && n != a->target; });
        if (other_element) return nullptr;
        written_in(s, written_);
        Expr value = hoist(a->value);
        StmtP lanes = for_loop(s->var, s->begin, s->end, {assign(a->target, value)}, LoopKind::Lanes);
        if (before_.empty()) return lanes;
        std::vector<StmtP> out = before_;
        out.push_back(lanes);
        if (!loads_ || runs_at_least_once(s->begin, s->end, facts_)) return block(out);
        return if_then(make_cmp(CmpOp::LT, s->begin, s->end), out);
    }

private:
    Expr hoist(Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            if (!worth_hoisting(n)) return nullptr;
            std::string name = fresh_name("$el", names_, next_);
            before_.push_back(decl(name, LocalClass::State, {}, n));
            loads_ = loads_ || reads_memory(n);
            return make_var(name, VarRole::Symbol, SType::Real);
        });
    }

    bool worth_hoisting(Expr n) const {
        if (n->stype != SType::Real || mentions(n, loop_->var->name) || !invariant(n, written_) || !cannot_trap(n)) return false;
        return any_of(n, [](Expr c) { return c->kind == Kind::Call; });
    }

    const StmtP &loop_;
    const Facts &facts_;
    int &next_;
    std::set<std::string> &names_;
    std::set<std::string> written_;
    std::vector<StmtP> before_;
    bool loads_ = false;
};

/** Rewrites every qualifying loop, knowing the index locals' values for runs_at_least_once. */
class Lanes : public StmtMutator {
public:
    Lanes(std::set<std::string> names, std::set<std::string> assigned) : names_(std::move(names)), assigned_(std::move(assigned)) {}

    StmtP mutate_decl(const StmtP &s) override {
        if (s->cls == LocalClass::Index && s->dims.empty() && s->value && !assigned_.count(s->name)) facts_.index_values[s->name] = s->value;
        return s;
    }
    StmtP mutate_for(const StmtP &s) override {
        if (StmtP r = ElementLoop(s, facts_, next_, names_).rewrite()) return r;
        auto saved = facts_.loop_ranges;
        facts_.loop_ranges[s->var->name] = {s->begin, s->end};
        StmtP r = mutate_default(s);
        facts_.loop_ranges = saved;
        return r;
    }

private:
    Facts facts_;
    int next_ = 0;
    std::set<std::string> names_, assigned_;
};

}  // namespace

Module run_element_loops_as_lanes(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        std::set<std::string> names, assigned;
        for_each_stmt(k.body, [&](const StmtP &s) {
            if (s->kind == StmtKind::Decl) names.insert(s->name);
            if (s->kind == StmtKind::Assign && s->target->kind == Kind::Var) assigned.insert(s->target->name);
        });
        // Index locals that are reassigned ($A_n) have no single value to reason with.
        k.body = Lanes(names, assigned).mutate(k.body);
    }
    return m;
}

}  // namespace rf::tile
