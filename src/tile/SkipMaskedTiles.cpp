/** \file SkipMaskedTiles.cpp
 * The tile pass that decides, per (row block × tile of the axis), from the conditions of the
 * selects that mask the tile's elements (causal, sliding-window attention), whether every element is
 * masked (the tile is skipped), none is (the condition is dropped), or some are (the tile is narrowed
 * to the columns where some mask can hold).
 */
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "sym/Sign.h"
#include "sym/Simplify.h"
#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* A tile loop, as the lowering writes it (LowerPass.cpp `tiles`):
 *     for $tile in [0, ntiles):  index $tb = ...; index $te = ...; (index bookkeeping, tile array
 *                                declarations)  REST
 * A *mask* is a select(c, a, b) in REST whose condition c compares integer affine functions of the
 * loop variables of REST (the box: $jj in [$tb, $te), $rr in [0, $nbv), ...) and of values invariant
 * in REST. Over the box, an affine d = Σ c_v·v + r lies in [min d, max d] with
 *     min d = r + Σ_v c_v·(c_v > 0 ? begin_v : end_v − 1),   max d likewise with the ends swapped,
 * (exact when the box is not empty; when a loop of the box is empty the select is never evaluated
 * and any answer is right), so `d ≤ 0` holds everywhere when max d ≤ 0 and nowhere when min d ≥ 1;
 * `and` / `or` / `not` combine the two answers. Both answers are integer expressions of the values
 * around REST ($tb, $te, $rbase, $nbv), evaluated once per tile before REST:
 *     dead = every mask's c is false everywhere,  full = every mask's c is true everywhere.
 * Causal (j ≤ i, i = $rbase + $rr): full ⇔ $te − 1 ≤ $rbase (the tile's last key is at most the
 * block's first row), dead ⇔ $tb − ($rbase + $nbv − 1) ≥ 1 (its first key is past the last row);
 * the sliding window adds i − j < W: dead also when $rbase − ($te − 1) ≥ W.
 *
 * Full tiles run REST with every mask replaced by its `a` branch (the select yields a at every
 * element: exact), in a copy whose locals are renamed (arrays stay unique per parallel region).
 *
 * Dead tiles are skipped. Precondition, checked on REST with every mask replaced by its `b` branch
 * (REST_b; `neutral_tile`): every value REST_b reduces is the neutral element of its reduction, by
 * interval arithmetic (sym/Sign.h) on the value, not by its shape:
 *     max= v with v ∈ {−inf}, min= v with v ∈ {+inf}, sum= v with v ∈ {0}, prod= v with v ∈ {1};
 * attention: b = −inf, so the max member's tile maximum stays −inf (its init) and the running max
 * m is unchanged, and the exp tile is exp2(−inf − h) = 0 for every finite h (the lowering's δ is
 * sanitized: an all-masked row so far has δ = 0); tile arrays known to be 0 are substituted in
 * later values, so l's sum of the exp tile adds 0 and the P·V GEMM adds 0·V = 0. That last step
 * takes loads of inputs to be finite (the convention of sym's interval analysis: an atom is a finite
 * real): with an inf or NaN in V at a masked key, the unskipped kernel gave NaN (0·inf), the skipped
 * one does not. Assignments to running states outside the reductions must be identities
 * (max(s, −inf) = s, NaN included) or the online algorithm's bookkeeping (seen flags, tags = δ,
 * rescales s·α(δ, τ)): with every member's running value unchanged by the checked reductions, δ
 * stays the τ it was stamped with, α(δ, δ) = 1, and a flag set on a zero accumulator changes no
 * result (finalize and merge treat acc = 0 alike whatever the flag). Selections (argmax, top-k),
 * shift states, stores and accumulating GEMMs of non-zero tiles refuse. An all-masked row gives
 * what it gave: its state stays at its initial values either way, and the finalization recomputes
 * a row whose final δ is not finite literally, outside the tile loop.
 * The index bookkeeping before REST (the element count $A_n) still runs for skipped tiles. */

using Box = std::map<std::string, std::pair<Expr, Expr>>;  // loop variable -> [begin, end)

Expr ic(int64_t v) { return make_int(v); }

/** e as Σ c_v·v + residual over the box variables; nullopt when not of that form. */
std::optional<std::map<std::string, int64_t>> affine(Expr e, const Box &box, int64_t sign, std::vector<Expr> &res) {
    std::map<std::string, int64_t> c;
    auto merge = [&](const std::optional<std::map<std::string, int64_t>> &m) {
        if (!m) return false;
        for (const auto &[v, k] : *m) c[v] += k;
        return true;
    };
    switch (e->kind) {
    case Kind::Var:
        if (box.count(e->name)) return std::map<std::string, int64_t>{{e->name, sign}};
        break;
    case Kind::Add:
        for (Expr a : e->args)
            if (!merge(affine(a, box, sign, res))) return std::nullopt;
        return c;
    case Kind::Sub:
        if (!merge(affine(e->args[0], box, sign, res)) || !merge(affine(e->args[1], box, -sign, res))) return std::nullopt;
        return c;
    case Kind::Neg: return affine(e->args[0], box, -sign, res);
    case Kind::Mul:
        if (e->args.size() == 2 && e->args[0]->is_const() && e->args[0]->value == static_cast<double>(static_cast<int64_t>(e->args[0]->value)))
            return affine(e->args[1], box, sign * static_cast<int64_t>(e->args[0]->value), res);
        break;
    default: break;
    }
    for (const auto &[v, r] : box)
        if (mentions(e, v)) return std::nullopt;
    res.push_back(sign == 1 ? e : make_mul(ic(sign), e));
    return c;
}

/** min (lower = true) or max of d over the box; null when d is not affine in it. */
Expr extreme(Expr d, const Box &box, bool lower) {
    std::vector<Expr> res;
    auto c = affine(d, box, 1, res);
    if (!c) return nullptr;
    std::vector<Expr> terms = res;
    for (const auto &[v, k] : *c) {
        if (k == 0) continue;
        const auto &[b, e] = box.at(v);
        Expr at = (k > 0) == lower ? b : make_sub(e, ic(1));
        terms.push_back(make_mul(ic(k), at));
    }
    if (terms.empty()) return ic(0);
    return simplify(terms.size() == 1 ? terms[0] : make_add(terms));
}

struct Decided {
    Expr full = nullptr, dead = nullptr;  // true everywhere / false everywhere (null: unknown)
};

Expr or_(Expr a, Expr b) { return !a ? b : !b ? a : make_or(a, b); }

/** True when e only takes integer values: index arithmetic, and loads of integer-typed tensors (a
 *  shard's global offset, a per-row length) combined by + − × (the d < 0 ⇔ d + 1 ≤ 0 step needs it). */
bool integral(Expr e) {
    if (e->stype == SType::Int) return true;
    switch (e->kind) {
    case Kind::Load: return e->dtype == DType::i64 || e->dtype == DType::i32 || e->dtype == DType::i8;
    case Kind::Const: return e->value == std::floor(e->value) && std::isfinite(e->value);
    case Kind::Add:
    case Kind::Sub:
    case Kind::Neg:
    case Kind::Mul: return std::all_of(e->args.begin(), e->args.end(), integral);
    default: return false;
    }
}

/** When c is true / false on the whole box. */
Decided decide(Expr c, const Box &box) {
    if (c->is_const()) return {make_bool(c->value != 0), make_bool(c->value == 0)};
    switch (c->kind) {
    case Kind::Not: {
        Decided a = decide(c->args[0], box);
        return {a.dead, a.full};
    }
    case Kind::And: {
        Decided a = decide(c->args[0], box), b = decide(c->args[1], box);
        return {a.full && b.full ? make_and(a.full, b.full) : nullptr, or_(a.dead, b.dead)};
    }
    case Kind::Or: {
        Decided a = decide(c->args[0], box), b = decide(c->args[1], box);
        return {or_(a.full, b.full), a.dead && b.dead ? make_and(a.dead, b.dead) : nullptr};
    }
    case Kind::Cmp: break;
    default: return {};
    }
    Expr a = c->args[0], b = c->args[1];
    if (!integral(a) || !integral(b)) return {};
    // Normalize to d ≤ 0 or d < 0 (d integer: d < 0 ⇔ d + 1 ≤ 0).
    auto le = [&](Expr d) -> Decided {
        Expr lo = extreme(d, box, true), hi = extreme(d, box, false);
        if (!lo || !hi) return {};
        return {make_cmp(CmpOp::LE, hi, ic(0)), make_cmp(CmpOp::GE, lo, ic(1))};
    };
    switch (c->cmp) {
    case CmpOp::LE: return le(make_sub(a, b));
    case CmpOp::LT: return le(make_add(make_sub(a, b), ic(1)));
    case CmpOp::GE: return le(make_sub(b, a));
    case CmpOp::GT: return le(make_add(make_sub(b, a), ic(1)));
    case CmpOp::EQ: {
        Decided x = le(make_sub(a, b)), y = le(make_sub(b, a));
        return {x.full && y.full ? make_and(x.full, y.full) : nullptr, x.dead && y.dead ? make_or(x.dead, y.dead) : nullptr};
    }
    case CmpOp::NE: {
        Decided x = le(make_sub(a, b)), y = le(make_sub(b, a));
        return {x.dead && y.dead ? make_or(x.dead, y.dead) : nullptr, x.full && y.full ? make_and(x.full, y.full) : nullptr};
    }
    }
    return {};
}

/** The columns [lo, hi) of the tile where a condition can hold for some row (null: unbounded). */
struct Span {
    Expr lo = nullptr, hi = nullptr;
};

/** The names of the tile loop's bounds: a box variable over [$tb, $te) walks the tile's columns. */
struct TileAxis {
    std::string tb, te;
    bool walks(const std::pair<Expr, Expr> &r) const {
        return r.first->kind == Kind::Var && r.first->name == tb && r.second->kind == Kind::Var && r.second->name == te;
    }
    bool mentioned_by(const std::pair<Expr, Expr> &r) const {
        return mentions(r.first, tb) || mentions(r.first, te) || mentions(r.second, tb) || mentions(r.second, te);
    }
};

/** Span of `d ≤ 0` (d affine over the box, integer). With one column variable j (coefficient
 *  k = ±1) and R the minimum over the rest of the box of d − k·j, the column J is dead (d ≥ 1 for
 *  every row) iff k·J + R ≥ 1:  k = 1: live J < 1 − R;  k = −1: live J ≥ R. Unbounded when d does
 *  not read a column variable, reads two, scales one, or reads another variable whose range depends
 *  on the tile's bounds (a column in another form). */
Span span_le(Expr d, const Box &box, const TileAxis &axis) {
    std::vector<Expr> res;
    auto c = affine(d, box, 1, res);
    if (!c) return {};
    std::string column;
    int64_t k = 0;
    for (const auto &[v, coef] : *c) {
        if (coef == 0) continue;
        if (!axis.walks(box.at(v))) {
            if (axis.mentioned_by(box.at(v))) return {};
            continue;
        }
        if (!column.empty() || (coef != 1 && coef != -1)) return {};
        column = v, k = coef;
    }
    if (column.empty()) return {};
    Expr r = extreme(make_sub(d, make_mul(ic(k), make_index(column))), box, true);
    if (!r) return {};
    return k == 1 ? Span{nullptr, simplify(make_sub(ic(1), r))} : Span{r, nullptr};
}

/** The tighter of two bounds (a null bound is no bound). */
Expr tighter(Expr a, Expr b, bool lower) { return !a ? b : !b ? a : lower ? make_max(a, b) : make_min(a, b); }

/** Span of a condition: where it can hold. */
Span span_of(Expr c, const Box &box, const TileAxis &axis) {
    switch (c->kind) {
    case Kind::And: {  // both hold: the intersection
        Span a = span_of(c->args[0], box, axis), b = span_of(c->args[1], box, axis);
        return {tighter(a.lo, b.lo, true), tighter(a.hi, b.hi, false)};
    }
    case Kind::Or: {  // either holds: the hull, bounded where both are
        Span a = span_of(c->args[0], box, axis), b = span_of(c->args[1], box, axis);
        return {a.lo && b.lo ? make_min(a.lo, b.lo) : nullptr, a.hi && b.hi ? make_max(a.hi, b.hi) : nullptr};
    }
    case Kind::Cmp: break;
    default: return {};
    }
    Expr a = c->args[0], b = c->args[1];
    if (!integral(a) || !integral(b)) return {};
    switch (c->cmp) {
    case CmpOp::LE: return span_le(make_sub(a, b), box, axis);
    case CmpOp::LT: return span_le(make_add(make_sub(a, b), ic(1)), box, axis);
    case CmpOp::GE: return span_le(make_sub(b, a), box, axis);
    case CmpOp::GT: return span_le(make_add(make_sub(b, a), ic(1)), box, axis);
    case CmpOp::EQ: {
        Span x = span_le(make_sub(a, b), box, axis), y = span_le(make_sub(b, a), box, axis);
        return {tighter(x.lo, y.lo, true), tighter(x.hi, y.hi, false)};
    }
    default: return {};
    }
}

/** The masks of REST and what decides them: walks the loops, keeping the box of the enclosing ones
 *  whose bounds are invariant in REST. */
class FindMasks : public StmtVisitor {
public:
    FindMasks(const std::set<std::string> &written, TileAxis axis) : written_(written), axis_(std::move(axis)) {}
    std::set<Expr> masks;          // the conditions decided on their box
    std::set<Expr> full, dead;     // per occurrence: the condition true / false on the box
    std::set<Expr> bad;            // conditions of selects with an occurrence that is not decided
    std::vector<Span> spans;       // per occurrence: the columns where the condition can hold

    void visit_for(const StmtP &s) override {
        visit_exprs(s);
        bool boxed = invariant(s->begin, written_) && invariant(s->end, written_) && cannot_trap(s->begin) &&
                     cannot_trap(s->end) && !reads_memory(s->begin) && !reads_memory(s->end) && !box_.count(s->var->name);
        if (boxed) box_[s->var->name] = {s->begin, s->end};
        visit_children(s);
        if (boxed) box_.erase(s->var->name);
    }
    void visit_expr(const Expr &e) override {
        // The axes of nested reductions (a prologue's sum(e: select(c + e < R, ...))) vary inside
        // the expression: a condition on one is decided per element of that reduction, never per
        // tile (decide() would take e for an invariant and the tile's test would read it unbound).
        std::set<Expr> inner_axes;
        rf::visit(e, [&](Expr n) {
            if (n->kind == Kind::Reduce)
                for (size_t i = 0; i < n->num_axes(); i++) inner_axes.insert(n->axis(i));
        });
        rf::visit(e, [&](Expr n) {
            if (n->kind != Kind::Select) return;
            Expr c = n->args[0];
            bool on_box = false;
            for (const auto &[v, r] : box_) on_box = on_box || mentions(c, v);
            bool on_inner_axis = any_of(c, [&](Expr v) { return inner_axes.count(v) > 0; });
            Decided d = on_box && !on_inner_axis && no_unboxed_locals(c) ? decide(c, box_) : Decided{};
            if (!d.full || !d.dead) {  // every occurrence of a mask must be decided on its box
                bad.insert(c);
                return;
            }
            masks.insert(c);
            full.insert(simplify(d.full));
            dead.insert(simplify(d.dead));
            spans.push_back(span_of(c, box_, axis_));
        });
    }

private:
    /** c reads nothing REST writes but the box's own variables, and no memory but 0-dim buffers
     *  (a shard's offset: one value for the whole kernel, read once per tile by the guard). */
    bool no_unboxed_locals(Expr c) const {
        bool memory = any_of(c, [&](Expr n) {
            return n->kind == Kind::Load && (!n->args.empty() || n->name.rfind("$", 0) == 0 || written_.count(n->name));
        });
        if (memory || !cannot_trap(c)) return false;
        bool ok = true;
        rf::visit(c, [&](Expr n) {
            if (n->kind == Kind::Var && written_.count(n->name) && !box_.count(n->name)) ok = false;
        });
        return ok;
    }
    const std::set<std::string> &written_;
    TileAxis axis_;
    Box box_;
};

/** REST with every mask replaced by one of its branches (1: the value when true, 2: when false). */
StmtP pick_branch(const StmtP &s, const std::set<Expr> &masks, int branch) {
    auto f = [&](Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            return n->kind == Kind::Select && masks.count(n->args[0]) ? n->args[branch] : nullptr;
        });
    };
    return mutate(s, f, [](const std::string &n) { return n; });
}

/** The neutral-tile check on REST_b (the header comment's precondition): walks REST_b in order,
 *  knowing scalar tile locals whose value is a constant and tile arrays that hold 0 (written 0 by
 *  an element-wise loop of the tile, or declared = 0), and refuses at the first reduction of a
 *  value that is not provably its neutral element or the first statement it cannot account for. */
class NeutralCheck {
public:
    NeutralCheck(const std::set<std::string> &declared, const std::set<std::string> &states) : declared_(declared), states_(states) {}
    bool ok = true;

    void list(const std::vector<StmtP> &l) {
        for (const StmtP &s : l)
            if (ok) stmt(s);
    }

private:
    const std::set<std::string> &declared_;  // locals declared in REST
    const std::set<std::string> &states_;    // the kernel's state arrays
    std::map<std::string, double> consts_;  // scalar locals of REST with a known constant value
    std::set<std::string> zeros_;           // tile arrays that hold 0

    Expr known(Expr e) const {
        return simplify(substitute(e, [&](Expr n) -> Expr {
            if (n->kind == Kind::Var && consts_.count(n->name)) return make_const(consts_.at(n->name), n->stype);
            if (n->kind == Kind::Load && zeros_.count(n->name)) return make_const(0, n->stype);
            return nullptr;
        }));
    }
    /** The value of e when interval arithmetic pins it to one point. */
    std::optional<double> point(Expr e) const {
        Interval iv = interval_of(known(e));
        if (iv.may_be_nan || iv.lo != iv.hi || iv.lo_open || iv.hi_open) return std::nullopt;
        return iv.lo;
    }
    static double neutral(ReduceOp op) {
        switch (op) {
        case ReduceOp::Sum: return 0;
        case ReduceOp::Prod: return 1;
        case ReduceOp::Max: return -INFINITY;
        case ReduceOp::Min: return INFINITY;
        default: return NAN;
        }
    }
    bool is_zero_array(Expr base) const { return base->kind == Kind::Load && zeros_.count(base->name); }
    /** v is s itself or max(s, −inf) / min(s, +inf): an identity for every s, NaN included. */
    bool identity(Expr target, Expr v) const {
        v = known(v);
        target = simplify(target);  // known() simplifies the index expressions inside v alike
        if (v == target) return true;
        if (v->kind != Kind::Max && v->kind != Kind::Min) return false;
        double id = v->kind == Kind::Max ? -INFINITY : INFINITY;
        for (int q = 0; q < 2; q++)
            if (v->args[q] == target && point(v->args[1 - q]) == id) return true;
        return false;
    }

    void stmt(const StmtP &s) {
        switch (s->kind) {
        case StmtKind::Block: list(s->body); return;
        case StmtKind::For: return loop(s);
        case StmtKind::If: return branch(s);
        case StmtKind::Comment: return;
        case StmtKind::Decl: return decl(s);
        case StmtKind::Accum: {
            auto p = point(s->value);
            ok = p && *p == neutral(s->op);
            return;
        }
        case StmtKind::Assign: return assign(s);
        case StmtKind::Gemm: return gemm(*s->gemm);
        default: ok = false; return;  // selections, shift states, stores: not accounted for
        }
    }
    /** A loop may run no iteration: a scalar it assigns is unknown after it. Arrays it writes
     *  element-wise keep what was learned (the lowering's tile loops read what they wrote). */
    void loop(const StmtP &s) {
        list(s->body);
        // (Accumulations keep their target: each was checked to add the neutral element.)
        for_each_stmt(s, [&](const StmtP &a) {
            if (a->kind == StmtKind::Assign && a->target->kind == Kind::Var) consts_.erase(a->target->name);
        });
    }
    /** Each branch from what was known before the If; afterwards, what either writes is unknown. */
    void branch(const StmtP &s) {
        auto consts = consts_;
        auto zeros = zeros_;
        list(s->body);
        consts_ = consts, zeros_ = zeros;
        list(s->else_body);
        consts_ = consts, zeros_ = zeros;
        std::set<std::string> w;
        written_in(s, w);
        for (const std::string &n : w) consts_.erase(n), zeros_.erase(n);
    }
    void decl(const StmtP &s) {
        if (s->dims.empty()) {
            auto p = s->value ? point(s->value) : std::nullopt;
            if (p) consts_[s->name] = *p; else consts_.erase(s->name);
        } else if (s->value && point(s->value) == 0.0) {
            zeros_.insert(s->name);
        } else {
            zeros_.erase(s->name);
        }
    }
    void assign(const StmtP &s) {
        const std::string &t = s->target->name;
        if (t.rfind("$", 0) != 0) { ok = false; return; }  // a buffer
        auto p = point(s->value);
        if (s->target->kind == Kind::Var) {  // a scalar: only its uses matter, and they are checked
            if (p) consts_[t] = *p; else consts_.erase(t);
            return;
        }
        if (declared_.count(t) || !states_.count(t)) {  // a tile array (or a state array of this tile)
            if (p == 0.0) zeros_.insert(t); else zeros_.erase(t);
            return;
        }
        // A running state: an identity, or the bookkeeping of the header comment (flags and tags
        // set to constants or to δ, rescales s·α).
        if (identity(s->target, s->value)) return;
        Expr v = known(s->value), t0 = simplify(s->target);
        ok = v->is_const() || v->kind == Kind::Var ||
             (v->kind == Kind::Mul && std::find(v->args.begin(), v->args.end(), t0) != v->args.end());
    }
    void gemm(const GemmInfo &g) {
        if (g.accumulate) {
            ok = is_zero_array(g.a_base) || is_zero_array(g.b_base);  // C += 0·B = C (B finite)
            return;
        }
        if (g.c_base->kind != Kind::Load || g.c_base->name.rfind("$", 0) != 0 || states_.count(g.c_base->name)) {
            ok = false;  // overwriting a buffer or a running state
            return;
        }
        zeros_.erase(g.c_base->name);  // C = A·Bᵀ: a tile array with new (checked where used) values
    }
};

bool neutral_tile(const std::vector<StmtP> &rest_b, const std::set<std::string> &declared, const std::set<std::string> &states) {
    NeutralCheck c(declared, states);
    c.list(rest_b);
    return c.ok;
}

Expr conj(const std::set<Expr> &xs) {
    Expr r = nullptr;
    for (Expr x : xs) r = r ? make_and(r, x) : x;
    return simplify(r);
}

/** The statements before REST: the tile's bounds, index bookkeeping, tile array declarations. */
bool prefix_stmt(const StmtP &s) {
    if (s->kind == StmtKind::Decl) return s->cls == LocalClass::Index || (!s->dims.empty() && !s->value);
    return s->kind == StmtKind::Assign && s->target->kind == Kind::Var && s->target->stype == SType::Int;
}

/** Rule (the partial tiles of causal and sliding-window attention): REST of a tile that is neither
 *  dead nor full runs on the columns where some mask can hold,
 *      $tb' = max($tb, lo),  $te' = min($te, hi)   (lo, hi: the hull of every occurrence's Span),
 *  with $tb, $te read as $tb', $te' throughout REST (its loops, tile array offsets, GEMM extents and
 *  operands). Precondition: the one of skipping dead tiles (neutral_tile on REST_b), since the
 *  columns cut off are dead for every row of the block: each reduction met the neutral element
 *  there (the max −inf, the exp tile 0, the sums and the P·V GEMM 0), so leaving them out changes
 *  no accumulated value; and REST reads no other bookkeeping of the tile ($nold, the element
 *  counts), which still counts the whole tile. Causal, rows [r, r + n): $te' = min($te, r + n),
 *  the keys past the block's last row; with 64-row blocks and 256-key tiles the diagonal tile
 *  computes 64..256 columns instead of 256. */
std::vector<StmtP> narrowed(const std::vector<StmtP> &rest, const std::vector<Span> &spans, const std::vector<StmtP> &prefix,
                            const TileAxis &axis) {
    Expr lo = nullptr, hi = nullptr;
    bool lo_bounded = true, hi_bounded = true;
    for (const Span &sp : spans) {
        lo_bounded = lo_bounded && sp.lo, hi_bounded = hi_bounded && sp.hi;
        if (lo_bounded) lo = lo ? make_min(lo, sp.lo) : sp.lo;
        if (hi_bounded) hi = hi ? make_max(hi, sp.hi) : sp.hi;
    }
    if (spans.empty() || (!lo_bounded && !hi_bounded)) return rest;
    for (const StmtP &p : prefix) {
        bool scalar = (p->kind == StmtKind::Decl && p->dims.empty()) || (p->kind == StmtKind::Assign && p->target->kind == Kind::Var);
        const std::string &name = p->kind == StmtKind::Decl ? p->name : p->target->name;
        if (!scalar || name == axis.tb || name == axis.te) continue;
        for (const StmtP &s : rest)
            if (mentions_anywhere(s, name)) return rest;
    }
    Expr tb = make_var(axis.tb, VarRole::Symbol, SType::Int), te = make_var(axis.te, VarRole::Symbol, SType::Int);
    std::vector<StmtP> out;
    if (lo_bounded) out.push_back(decl(axis.tb + "_live", LocalClass::Index, {}, simplify(make_max(tb, lo))));
    if (hi_bounded) out.push_back(decl(axis.te + "_live", LocalClass::Index, {}, simplify(make_min(te, hi))));
    auto live = [&](const std::string &n) {
        return (lo_bounded && n == axis.tb) || (hi_bounded && n == axis.te) ? n + "_live" : n;
    };
    for (const StmtP &s : rest) out.push_back(rename_locals(s, live));
    return out;
}

StmtP rewrite_tile_loop(const StmtP &loop, const std::set<std::string> &states) {
    const auto &body = loop->body;
    if (body.size() < 3 || body[0]->kind != StmtKind::Decl || body[0]->name != "$tb") return loop;
    size_t n = 0;
    while (n < body.size() && prefix_stmt(body[n])) n++;
    std::vector<StmtP> prefix(body.begin(), body.begin() + n), rest;
    // REST's own uninitialized tile arrays are declared before the guard instead, shared by both
    // copies (on a GPU, shared memory for one); an array holds nothing from one tile to the next.
    for (size_t q = n; q < body.size(); q++)
        (body[q]->kind == StmtKind::Decl && !body[q]->dims.empty() && !body[q]->value ? prefix : rest).push_back(body[q]);
    if (rest.empty()) return loop;
    std::set<std::string> written, declared;
    for (const StmtP &s : rest) {
        written_in(s, written);
        for_each_stmt(s, [&](const StmtP &d) {
            if (d->kind == StmtKind::Decl) declared.insert(d->name);
        });
    }
    TileAxis axis{body[0]->name, body[1]->kind == StmtKind::Decl ? body[1]->name : std::string()};
    FindMasks fm(written, axis);
    fm.visit_list(rest);
    if (fm.masks.empty()) return loop;
    for (Expr c : fm.bad)  // a mask with an occurrence that is not decided on its box: unchanged
        if (fm.masks.count(c)) return loop;
    std::vector<StmtP> rest_a, rest_b;
    for (const StmtP &s : rest) {
        rest_a.push_back(rename_locals(pick_branch(s, fm.masks, 1), [&](const std::string &nm) {
            return declared.count(nm) ? nm + "_f" : nm;
        }));
        rest_b.push_back(pick_branch(s, fm.masks, 2));
    }
    std::vector<StmtP> out = prefix;
    out.push_back(comment("masked tiles: skipped when every element is masked, unmasked when none is"));
    if (neutral_tile(rest_b, declared, states))
        out.push_back(if_then(simplify(make_not(conj(fm.dead))), {if_then(conj(fm.full), rest_a, narrowed(rest, fm.spans, prefix, axis))}));
    else
        out.push_back(if_then(conj(fm.full), rest_a, rest));
    return with_body(loop, out);
}

}  // namespace

Module skip_masked_tiles(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        std::set<std::string> states;
        for_each_stmt(k.body, [&](const StmtP &s) {
            if (s->kind == StmtKind::Decl && (s->cls == LocalClass::State || s->cls == LocalClass::LaneState) && !s->dims.empty())
                states.insert(s->name);
        });
        k.body = rewrite_bottom_up(k.body, [&](const StmtP &s) {
            if (s->kind == StmtKind::For && s->loop == LoopKind::Serial && s->var->name == "$tile") return rewrite_tile_loop(s, states);
            return s;
        });
    }
    return m;
}

}  // namespace rf::tile
