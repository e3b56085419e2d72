/** \file HoistInvariants.cpp
 * The tile pass that moves loop-invariant subexpressions of vector loops into scalar locals computed
 * once, before the loop or the independent loops around it.
 */
#include <map>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* For a simd loop S with the loops L1, L2, ... around it (each the owner of the list that holds the
 * previous one, each simd or independent), a subexpression e of a value computed in S moves to just
 * before L_i (a new `tile $hN = e`, e replaced by $hN) when, for S and every loop up to L_i:
 *   - e is invariant: it reads no local, loop variable or buffer that the loop declares or writes
 *     anywhere inside (an array local written anywhere in the loop makes every load of it variant),
 *     and holds no nested reduction;
 *   - evaluating e once, where the loop evaluates it zero or more times, is safe: e cannot trap
 *     (integer division and modulo only by non-zero constants: the evaluator rejects x / 0 and the CPU
 *     raises SIGFPE; real division, sqrt, log give inf/NaN and do not trap), and when e reads memory
 *     every loop it leaves provably runs at least once (LoopFacts.h: constant bounds, or a tile
 *     [tb, te) of the cascade axis), so no load is made that the loop would not make.
 * Then Σ_j f(x_j, e) = Σ_j f(x_j, $h) with $h = e exactly: the same operations on the same values in
 * the same type (tile locals have the compute type vector loops compute in).
 * The outermost such place is taken, also the body of an independent loop that holds nothing but one
 * loop (a row's values before its columns): the GPU printer still spreads such a pair (rows ×
 * columns) as one flat range, evaluating the scalar declarations before the inner loop per element,
 * or gives each row a group of threads that evaluates them once (docs/gpu.md). An e built from constants and sizes only goes to
 * the start of the parallel loop's body: once per row (block), shared by every loop of the kernel.
 * What moves: maximal real-valued subexpressions that are not trivial (a constant, a variable, a load
 * of a buffer, the negation of one; a load of a local array does move: it saves the reload). A part
 * that can go further out than the expression holding it moves there first. Equal expressions
 * (hash-consed: the same pointer) share one local while nothing between the two places writes what
 * they read. Loops of at most one iteration are left alone.
 */

/** A list of statements being rebuilt, and what it can receive. */
struct Frame {
    const Stmt *owner = nullptr;       ///< the statement whose body this is (null: the kernel root)
    std::vector<StmtP> out;            ///< rebuilt statements so far
    std::vector<StmtP> before;         ///< declarations for just before the statement being rebuilt
    std::vector<StmtP> top;            ///< declarations for the start of the list (kernel constants)
    std::map<Expr, std::string> available;  ///< value -> local holding it, valid here
};

bool is_loop(const Stmt *s, LoopKind k) { return s && s->kind == StmtKind::For && s->loop == k; }

bool trivial(Expr e) {
    switch (e->kind) {
    case Kind::Const: case Kind::Var: return true;
    case Kind::Load: return e->name.empty() || e->name[0] != '$';
    case Kind::Neg: return trivial(e->args[0]);
    default: return false;
    }
}

/** A mutator whose list hook keeps the frames: every list of statements (a loop's, an if's, a
 *  block's body) is rebuilt in a frame that can receive declarations. */
class Hoister : public StmtMutator {
public:
    explicit Hoister(const Kernel &k) {
        written_in(k.body, names_);
        for_each_stmt(k.body, [&](const StmtP &s) {
            if (s->kind == StmtKind::Assign && s->target->kind == Kind::Var) assigned_.insert(s->target->name);
        });
    }

    StmtP run(const StmtP &body) {
        frames_.push_back(Frame{});
        StmtP s = mutate(body);
        frames_.pop_back();
        return s;
    }

private:
    // ---- The walk.
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override {
        Frame f;
        f.owner = owner_;
        frames_.push_back(std::move(f));
        Facts saved = facts_;
        for (const StmtP &s : in) {
            StmtP r = mutate(s);
            Frame &cur = frames_.back();
            for (StmtP &d : cur.before) cur.out.push_back(d);
            cur.before.clear();
            cur.out.push_back(r);
            std::set<std::string> w;
            written_in(r, w);
            for (auto it = cur.available.begin(); it != cur.available.end();)
                it = invariant(it->first, w) ? std::next(it) : cur.available.erase(it);
        }
        facts_ = saved;
        Frame done = std::move(frames_.back());
        frames_.pop_back();
        std::vector<StmtP> out = std::move(done.top);
        for (StmtP &s : done.out) out.push_back(s);
        return out;
    }

    /** s with its child lists rebuilt in frames owned by s. */
    StmtP children_of(const StmtP &s) {
        const Stmt *saved = owner_;
        owner_ = s.get();
        StmtP r = mutate_children(s);
        owner_ = saved;
        return r;
    }

    StmtP mutate_decl(const StmtP &s) override {
        if (s->cls == LocalClass::Index && s->dims.empty() && s->value && !assigned_.count(s->name))
            facts_.index_values[s->name] = s->value;
        return s;
    }

    StmtP mutate_for(const StmtP &s) override {
        if (s->loop == LoopKind::Simd) return simd_loop(s);
        auto saved = facts_.loop_ranges;
        facts_.loop_ranges[s->var->name] = {s->begin, s->end};
        StmtP r = children_of(s);
        facts_.loop_ranges = saved;
        return r;
    }

    StmtP mutate_if(const StmtP &s) override { return children_of(s); }
    StmtP mutate_block(const StmtP &s) override { return children_of(s); }

    /** The loop S = loops_[0] and the loops around it that values may leave, innermost first;
     *  frames_[frames_.size() - 1 - i] holds loops_[i]. */
    StmtP simd_loop(const StmtP &s) {
        // A loop of at most one iteration has nothing to save.
        if (s->begin->is_const() && s->end->is_const() && s->end->value - s->begin->value <= 1) return s;
        loops_.clear();
        loops_.push_back(s.get());
        for (size_t i = frames_.size(); i-- > 0;) {
            const Stmt *o = frames_[i].owner;
            if (!is_loop(o, LoopKind::Simd) && !is_loop(o, LoopKind::Independent)) break;
            loops_.push_back(o);
        }
        facts_.loop_ranges[s->var->name] = {s->begin, s->end};
        std::vector<StmtP> body;
        for (const StmtP &c : s->body) {
            if (!c->value) {
                body.push_back(c);
                continue;
            }
            auto n = std::make_shared<Stmt>(*c);
            n->value = hoist_in(c->value, 0);
            body.push_back(n);
        }
        facts_.loop_ranges.erase(s->var->name);
        return with_body(s, std::move(body));
    }

    // ---- Placement. A level is a loop index i (the declaration goes just before loops_[i]), or
    // kTop: the start of the parallel loop's body.
    static constexpr int kNone = -1, kTop = 1 << 20;

    const std::set<std::string> &written(const Stmt *loop) {
        auto it = written_.find(loop);
        if (it != written_.end()) return it->second;
        std::set<std::string> &w = written_[loop];
        StmtP alias(std::shared_ptr<const Stmt>(), loop);  // non-owning view for written_in
        written_in(alias, w);
        return w;
    }

    Frame *frame_before(int level) {
        if (level == kTop) {
            for (size_t i = frames_.size(); i-- > 0;)
                if (is_loop(frames_[i].owner, LoopKind::Parallel)) return &frames_[i];
            return nullptr;
        }
        return &frames_[frames_.size() - 1 - static_cast<size_t>(level)];
    }

    /** The outermost place e can be computed at (see the file comment), or kNone. */
    int level_of(Expr e) {
        if (e->stype != SType::Real || !cannot_trap(e)) return kNone;
        if (kernel_constant(e) && frame_before(kTop)) return kTop;
        bool loads = reads_memory(e);
        int best = kNone;
        for (size_t i = 0; i < loops_.size(); i++) {
            const Stmt *L = loops_[i];
            if (!invariant(e, written(L))) break;
            if (loads && !runs_at_least_once(L->begin, L->end, facts_)) break;
            best = static_cast<int>(i);
        }
        return best;
    }

    /** e with its maximal subexpressions that can be computed further out than `inside` (a level;
     *  0: anywhere outside S) replaced by locals. */
    Expr hoist_in(Expr e, int inside) {
        return substitute(e, [&](Expr n) -> Expr {
            if (n->kind == Kind::Reduce) return n;
            int level = level_of(n);
            if (level == kNone || level < inside) return nullptr;
            if (trivial(n)) return n;
            return local(n, level);
        });
    }

    /** The local holding e at `level`: an equal value already there, or a new declaration (its own
     *  subexpressions that can go further out declared there first). */
    Expr local(Expr e, int level) {
        Expr v = level == kTop ? e : hoist_in_strict(e, level);
        Frame *f = frame_before(level);
        auto it = f->available.find(v);
        if (it == f->available.end()) {
            std::string name = fresh_name("$h", names_, next_);
            (level == kTop ? f->top : f->before).push_back(decl(name, LocalClass::Tile, {}, v));
            it = f->available.emplace(v, name).first;
        }
        return make_var(it->second, VarRole::Symbol, SType::Real);
    }

    /** The strict subexpressions of e that can go further out than `level`, hoisted. */
    Expr hoist_in_strict(Expr e, int level) {
        std::vector<Expr> args;
        for (size_t i = 0; i < e->args.size(); i++) args.push_back(hoist_in(e->args[i], level + 1));
        return with_args(e, std::move(args));
    }

    std::vector<Frame> frames_;
    const Stmt *owner_ = nullptr;  ///< the statement whose child lists are being rebuilt
    std::vector<const Stmt *> loops_;
    std::map<const Stmt *, std::set<std::string>> written_;
    std::set<std::string> names_, assigned_;
    Facts facts_;
    int next_ = 0;
};

}  // namespace

Module hoist_invariants(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = Hoister(k).run(k.body);
    return m;
}

}  // namespace rf::tile
