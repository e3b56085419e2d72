/** \file TabulateLiteralTerms.cpp
 * The tile pass that evaluates, once per row, the terms of a literal recompute that do not depend on
 * the element being recomputed: attention's exp(S[j] − m) for every j before the loop over the output
 * columns e, instead of again (with S[j]'s own sum over d) for every e.
 */
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* A member whose final state is not finite on some row recomputes that row from the spec's own
 * expression (LowerMerge.cpp, `if $litK != 0`), element by element of its extra indices:
 *     for x in [b, e):  t[x] = F(Σ_j G(T(j), x))
 * where T(j) holds a nested reduction (attention: T(j) = exp2((Σ_d Q[i,d]·K[j,d])·c − m)·…, with
 * G = T(j)·V[j,x]). Evaluated as written, each of the X values of x recomputes every T(j): X·N·D work
 * a row where N·D would do (a NaN key in an [8, 2048, 2048, 128] attention made every row of its head
 * literal: minutes instead of a tenth of a second).
 * Rule: for such a loop (independent or serial; more than one iteration unless its bounds say
 * otherwise; a body of assignments and stores), a reduction R over axes J at the top of a value (not
 * inside another reduction; not a top-k), with extents that are kernel constants, and a maximal
 * real-valued subexpression T of R's body that
 *   - holds a nested reduction (what makes it worth an array),
 *   - mentions one of J, no axis of a reduction between R and T, and nothing the loop declares or
 *     writes (its variable included), and binds none of J again inside,
 * becomes a load of a new float64 array $tabK[J] (row-major over J), filled before the loop by
 *     for J:  $tabK[J] = T(J)
 * The same operations on the same values in the same type (the loop's values and the array are
 * float64): every element of the loop reads the value it computed before, bit for bit. The array
 * and its loop go under `if b < e` with the loop, so no load is made for an empty range that the loop
 * would not make. Equal terms (hash-consed: the same pointer) share one array. */

bool single_iteration(const Stmt &loop) {
    return loop.begin->is_const() && loop.end->is_const() && loop.end->value - loop.begin->value <= 1;
}

bool plain_body(const Stmt &loop) {
    for (const StmtP &s : loop.body)
        if (s->kind != StmtKind::Assign && s->kind != StmtKind::Store && s->kind != StmtKind::Comment) return false;
    return !loop.body.empty();
}

bool has_reduction(Expr e) {
    return any_of(e, [](Expr n) { return n->kind == Kind::Reduce; });
}

bool mentions_any(Expr e, const std::vector<std::string> &names) {
    for (const std::string &n : names)
        if (mentions(e, n)) return true;
    return false;
}

/** The row-major position of `vars` in an array of `extents`: ((v0·E1 + v1)·E2 + v2)… */
Expr flat_index(const std::vector<Expr> &vars, const std::vector<Expr> &extents) {
    Expr index = vars[0];
    for (size_t i = 1; i < vars.size(); i++) index = make_add(make_mul(index, extents[i]), vars[i]);
    return index;
}

/** One array to fill: the term, the reduction axes it is tabulated over and their extents. */
struct Table {
    std::string name;
    Expr term;
    std::vector<Expr> axes, extents;
};

class Tabulator {
public:
    Tabulator(const std::set<std::string> &written, std::set<std::string> &names, int &next)
        : written_(written), names_(names), next_(next) {}

    /** e with the tabulable terms of its top-level reductions replaced by loads of their arrays. */
    Expr top(Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            if (n->kind != Kind::Reduce) return nullptr;
            if (n->rop == ReduceOp::TopK) return n;
            for (Expr x : n->extents)
                if (!kernel_constant(x)) return n;
            std::vector<std::string> axes;
            for (size_t i = 0; i < n->num_axes(); i++) axes.push_back(n->axis(i)->name);
            Expr body = within(n, n->body(), axes, {});
            return body == n->body() ? n : with_args(n, replaced_body(n, body));
        });
    }

    std::vector<Table> tables;

private:
    static std::vector<Expr> replaced_body(Expr r, Expr body) {
        std::vector<Expr> args = r->args;
        args[0] = body;
        return args;
    }

    /** e (inside reduction r's body, under reductions binding `bound`) with its maximal tabulable
     *  terms replaced. */
    Expr within(Expr r, Expr e, const std::vector<std::string> &axes, std::vector<std::string> bound) {
        if (e->stype == SType::Real && has_reduction(e) && mentions_any(e, axes) && !mentions_any(e, bound) &&
            !rebinds(e, axes) && invariant_here(e))
            return load_of(r, e);
        if (e->kind == Kind::Reduce) {
            for (size_t i = 0; i < e->num_axes(); i++) bound.push_back(e->axis(i)->name);
            Expr body = within(r, e->body(), axes, bound);
            return body == e->body() ? e : with_args(e, replaced_body(e, body));
        }
        std::vector<Expr> args;
        bool changed = false;
        for (Expr a : e->args) {
            args.push_back(within(r, a, axes, bound));
            changed = changed || args.back() != a;
        }
        return changed ? with_args(e, std::move(args)) : e;
    }

    /** A reduction inside e binds one of `axes` again (its uses would not be R's: the fill's renaming
     *  of R's axes must not reach them). */
    static bool rebinds(Expr e, const std::vector<std::string> &axes) {
        return any_of(e, [&](Expr n) {
            if (n->kind != Kind::Reduce) return false;
            for (size_t i = 0; i < n->num_axes(); i++)
                for (const std::string &a : axes)
                    if (n->axis(i)->name == a) return true;
            return false;
        });
    }

    /** No Var or Load of a name the loop declares or writes (the nested reductions are allowed:
     *  their axes are bound inside e). */
    bool invariant_here(Expr e) const {
        for (const std::string &w : written_)
            if (mentions(e, w)) return false;
        return true;
    }

    Expr load_of(Expr r, Expr term) {
        const std::vector<Expr> axes(r->args.begin() + 1, r->args.end());
        Expr index = flat_index(axes, r->extents);
        for (const Table &t : tables)
            if (t.term == term && t.axes == axes) return make_load(t.name, {index}, DType::f64, SType::Real);
        tables.push_back(Table{fresh_name("$tab", names_, next_), term, axes, r->extents});
        return make_load(tables.back().name, {index}, DType::f64, SType::Real);
    }

    const std::set<std::string> &written_;
    std::set<std::string> &names_;
    int &next_;
};

/** The declaration and the loops that fill t: for fresh variables J': $tab[J'] = T(J'). */
std::vector<StmtP> fill(const Table &t, std::set<std::string> &names, int &next) {
    std::vector<Expr> vars;
    Expr term = t.term;
    for (size_t i = 0; i < t.axes.size(); i++) {
        vars.push_back(make_index(fresh_name("$tj", names, next)));
        term = substitute(term, t.axes[i], vars.back());
    }
    Expr size = t.extents[0];
    for (size_t i = 1; i < t.extents.size(); i++) size = make_mul(size, t.extents[i]);
    StmtP loop = assign(make_load(t.name, {flat_index(vars, t.extents)}, DType::f64, SType::Real), term);
    for (size_t i = vars.size(); i-- > 0;) loop = for_loop(vars[i], make_int(0), t.extents[i], {loop});
    return {decl(t.name, LocalClass::State, {size}, nullptr), loop};
}

class LiteralLoops : public StmtMutator {
public:
    explicit LiteralLoops(const StmtP &body) { written_in(body, names_); }

    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override {
        std::vector<StmtP> out;
        for (const StmtP &s : in) {
            StmtP r = mutate(s);
            out.push_back(is_candidate(*r) ? tabulated(r) : r);
        }
        return out;
    }

private:
    static bool is_candidate(const Stmt &s) {
        // Not lanes loops: their values are vector code, whose functions need not round as the fill's
        // scalar ones do (the literal loops stay independent: element-lanes refuses nested reductions).
        return s.kind == StmtKind::For && (s.loop == LoopKind::Independent || s.loop == LoopKind::Serial) &&
               !single_iteration(s) && plain_body(s);
    }

    StmtP tabulated(const StmtP &loop) {
        std::set<std::string> written;
        written_in(loop, written);
        Tabulator tab(written, names_, next_);
        std::vector<StmtP> body;
        for (const StmtP &s : loop->body) {
            if (s->kind == StmtKind::Comment) {
                body.push_back(s);
                continue;
            }
            Stmt c = *s;
            c.value = tab.top(s->value);
            body.push_back(std::make_shared<const Stmt>(std::move(c)));
        }
        if (tab.tables.empty()) return loop;
        std::vector<StmtP> guarded;
        for (const Table &t : tab.tables)
            for (StmtP &f : fill(t, names_, next_)) guarded.push_back(f);
        guarded.push_back(with_body(loop, body));
        return if_then(make_cmp(CmpOp::LT, loop->begin, loop->end), guarded);
    }

    std::set<std::string> names_;
    int next_ = 0;
};

}  // namespace

Module tabulate_literal_terms(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = LiteralLoops(k.body).mutate(k.body);
    return m;
}

}  // namespace rf::tile
