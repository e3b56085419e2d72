/** \file InvariantSums.cpp
 * The tile pass that takes out of a vector loop the sums that need no loop: a sum of a term the loop
 * does not change (the count that a polynomial member keeps: t += 1) is the trip count times the
 * term, and a sum of the same term as an earlier sum of the loop (moment of inertia's Σ w, three
 * times) is that sum's value.
 */
#include <map>
#include <set>
#include <string>

#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* In a vector loop `for j in [b, e)` (LoopKind::Simd), over its top-level statements:
 * Rule 1 (invariant term): `t += v` with t a scalar local, v reading neither j nor anything the loop
 *   writes (and holding no reduction):  Σ_{j=b}^{e-1} v = max(e − b, 0) · v.  The accumulation leaves
 *   the loop and `t += max(e − b, 0) · v` follows it. The value is the product rounded once instead of
 *   e − b rounded additions: the same for v = 1 (counts below 2^24, exact either way), within the sum's
 *   own rounding otherwise.
 * Rule 2 (repeated term): `t2 += v` after `t1 += v` in the same loop (the same v: expressions are
 *   hash-consed, so pointer equality is structural equality), t1 and t2 scalar locals declared in the
 *   list holding the loop with the same initial value and not touched between their declarations and
 *   the loop, neither written by another statement of the loop nor read in it. Both reductions run
 *   the same additions in the same order, so t2 = t1 bit for bit after the loop: the accumulation
 *   into t2 leaves the loop and `t2 = t1` follows it.
 * Precondition of both: the accumulations are sums (op Sum) into scalar Vars; a loop left with no
 * statement goes. */

/** The names the loop's statements write or declare, its own variable and those of nested loops. */
std::set<std::string> written_in(const StmtP &loop) {
    std::set<std::string> out{loop->var->name};
    for (const StmtP &c : loop->body)
        for_each_stmt(c, [&](const StmtP &s) {
            if (s->kind == StmtKind::Decl) out.insert(s->name);
            if (s->kind == StmtKind::For) out.insert(s->var->name);
            if (s->target) out.insert(s->target->name);
            if (s->target2) out.insert(s->target2->name);
        });
    return out;
}

/** How many statements of the loop's body (at any depth) read name in an expression other than an
 *  accumulation's own target. */
int reads_in(const StmtP &loop, const std::string &name) {
    int n = 0;
    for (const StmtP &c : loop->body)
        for_each_stmt(c, [&](const StmtP &s) {
            bool reads = false;
            for_each_own_expr(*s, [&](const Expr &e) { reads = reads || (e != s->target && mentions(e, name)); });
            if (reads) n++;
        });
    return n;
}

/** How many statements of the loop's body (at any depth) write name. */
int writes_in(const StmtP &loop, const std::string &name) {
    int n = 0;
    for (const StmtP &c : loop->body)
        for_each_stmt(c, [&](const StmtP &s) { n += (s->target && s->target->name == name) || (s->kind == StmtKind::Decl && s->name == name); });
    return n;
}

bool plain_sum(const StmtP &s) { return s->kind == StmtKind::Accum && s->op == ReduceOp::Sum && s->target->kind == Kind::Var; }

class InvariantSums : public StmtMutator {
public:
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &list) override {
        std::vector<StmtP> in = StmtMutator::mutate_list(list), out;
        for (size_t i = 0; i < in.size(); ++i) {
            const StmtP &s = in[i];
            if (s->kind != StmtKind::For || s->loop != LoopKind::Simd) {
                out.push_back(s);
                continue;
            }
            std::vector<StmtP> after;
            StmtP loop = take_sums_out(s, in, i, after);
            if (!loop->body.empty()) out.push_back(loop);
            out.insert(out.end(), after.begin(), after.end());
        }
        return out;
    }

private:
    /** The loop without the accumulations the rules take out; their replacements go to `after`. */
    static StmtP take_sums_out(const StmtP &loop, const std::vector<StmtP> &list, size_t at, std::vector<StmtP> &after) {
        const std::set<std::string> written = written_in(loop);
        std::map<Expr, Expr> first_sum_of;  // term -> the target of the first sum of it kept in the loop
        std::vector<StmtP> body;
        for (const StmtP &s : loop->body) {
            if (!plain_sum(s) || reads_in(loop, s->target->name) > 0 || writes_in(loop, s->target->name) != 1) {
                body.push_back(s);
                continue;
            }
            const Expr v = s->value;
            bool invariant = !any_of(v, [](Expr n) { return n->kind == Kind::Reduce; });
            for (const std::string &w : written) invariant = invariant && !mentions(v, w);
            if (invariant) {
                Expr count = make_max(make_sub(loop->end, loop->begin), int_c(0));
                after.push_back(accum(ReduceOp::Sum, s->target, make_mul(count, v)));
                continue;
            }
            auto first = first_sum_of.find(v);
            if (first != first_sum_of.end() && same_start(list, at, first->second->name, s->target->name)) {
                after.push_back(assign(s->target, first->second));
                continue;
            }
            if (first == first_sum_of.end()) first_sum_of[v] = s->target;
            body.push_back(s);
        }
        if (body.size() == loop->body.size()) return loop;
        return for_loop(loop->var, loop->begin, loop->end, body, loop->loop);
    }

    /** True when a and b are declared in list before position `at` as scalars of one class with the
     *  same initial value, and no statement between a declaration and `at` mentions either. */
    static bool same_start(const std::vector<StmtP> &list, size_t at, const std::string &a, const std::string &b) {
        StmtP da, db;
        for (size_t i = at; i-- > 0;) {
            const StmtP &s = list[i];
            if (s->kind == StmtKind::Decl && (s->name == a || s->name == b)) {
                (s->name == a ? da : db) = s;
                if (da && db) break;
                continue;
            }
            if (any_stmt(s, [&](const StmtP &t) {
                    bool hit = false;
                    for_each_own_expr(*t, [&](const Expr &e) { hit = hit || mentions(e, a) || mentions(e, b); });
                    return hit || (t->kind == StmtKind::Decl && (t->name == a || t->name == b));
                }))
                return false;
        }
        return da && db && da->dims.empty() && db->dims.empty() && da->cls == db->cls && da->value && da->value == db->value;
    }
};

}  // namespace

Module take_invariant_sums_out(const Module &in) {
    Module m = in;
    InvariantSums pass;
    for (Kernel &k : m.kernels) k.body = pass.mutate(k.body);
    return m;
}

}  // namespace rf::tile
