/** \file FiniteInvariants.cpp
 * The tile pass that gives vector loops whose divisors or subtrahends are loop-invariant a second
 * copy for when those are finite: divisions become multiplications by a reciprocal computed once, and
 * the language's guarded subtractions plain ones (CPU only: see Passes.h).
 */
#include <functional>
#include <limits>
#include <set>
#include <vector>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* For a simd loop S whose values divide by b or subtract b (b real, invariant in S: it reads nothing
 * S writes, holds no reduction, cannot trap, is not a constant):
 *
 *     tile $rN = 1 / b                      (each divisor)
 *     tile $fN = b                          (each subtrahend)
 *     if 2^-126 <= |$rN| < inf and |$fN| < inf:  S[a / b → a · $rN, a - b → a + (-$fN)]
 *     else:                                      S
 *
 * Divisors. The guard says r is a normal float, so b is finite, non-zero, and neither 1 / b overflowed
 * (b subnormal) nor lost digits to underflow (|b| > 2^126). Then for every a: a finite a gives
 * a · fl(1/b), within 1.5 ulp of fl(a / b) (two roundings of at most half an ulp each; the product can
 * overflow only when a / b is within an ulp of the largest float); ±0 gives ±0, ±inf gives ±inf and
 * NaN gives NaN, with the signs of a / b. The language's 0 / 0 = 0 (rfk::div) needs b = 0, which the
 * guard sends to the unchanged loop. That ulp and a half is kept only where the value is continuous in
 * the quotient: a division under a rounding cast, round/floor/ceil or a comparison is left alone.
 * Subtrahends. The language's a - b (rfk::sub) is IEEE a - b except that (±inf) - (±inf) of the same
 * sign is that infinity (a fully masked row stays masked). With b finite that case cannot arise, and
 * a + (-b) is a - b exactly (negation is exact), so the copy is exact; the printer emits it without the
 * select, and GCC may fuse it with a following multiplication (softmax: (X - m) · log2 e).
 * A guard value read from memory is read before S, so the copies sit under `if begin < end` (the loop
 * runs, so its first iteration would have read it).
 *
 * Why: a 512-bit division costs several multiplications' time (Zen 4: vdivps zmm, one per 5-10
 * cycles) and each guarded subtraction three more vector operations; softmax's Y = e / s and its
 * exp(X - m), LayerNorm's and attention's O = acc / l touch every element with one value per row.
 */

/** Real, invariant divisors (Div's second operand) or subtrahends (Sub's) of S's values, each once. */
std::vector<Expr> invariant_operands(const StmtP &loop, Kind kind) {
    std::set<std::string> written;
    written_in(loop, written);
    std::vector<Expr> out;
    std::set<Expr> seen;
    // Not inside a nested reduction (a literal kernel's sum(a: ...)): its operands may use the
    // reduction's variables, bound only there.
    std::set<Expr> inside;
    for (const StmtP &c : loop->body)
        if (c->value)
            visit(c->value, [&](Expr n) {
                if (n->kind == Kind::Reduce) visit(n->body(), [&](Expr m) { inside.insert(m); });
                // Nor a division whose quotient reaches a step function: a rounding cast (f8, bf16, an
                // integer), round/floor/ceil, or a comparison turns the reciprocal's extra ulp into a
                // whole step (f32(f8e4m3(x · 448 / a)): one f8 step, 12.5%; scripts/fuzz_specs.py seed
                // 77 #56). Subtractions are rewritten exactly and stay.
                bool step = n->kind == Kind::Cast || n->kind == Kind::Cmp ||
                            (n->kind == Kind::Call && (n->func == Func::round || n->func == Func::floor || n->func == Func::ceil));
                if (step && kind == Kind::Div) visit(n, [&](Expr m) { inside.insert(m); });
            });
    for (const StmtP &c : loop->body) {
        if (!c->value) continue;
        visit(c->value, [&](Expr n) {
            if (n->kind != kind || n->stype != SType::Real || inside.count(n)) return;
            Expr b = n->args[1];
            if (b->stype != SType::Real || b->is_const() || !invariant(b, written) || !cannot_trap(b)) return;
            if (seen.insert(b).second) out.push_back(b);
        });
    }
    return out;
}

class Versioner : public StmtMutator {
public:
    explicit Versioner(const Kernel &k) { written_in(k.body, names_); }

private:
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override {
        std::vector<StmtP> out;
        for (const StmtP &s : in) {
            if (s->kind == StmtKind::For && s->loop == LoopKind::Simd && only_values(s)) {
                std::vector<StmtP> r = rewrite(s);
                out.insert(out.end(), r.begin(), r.end());
            } else {
                out.push_back(mutate(s));
            }
        }
        return out;
    }

    /** A loop of plain statements (what the CPU printer vectorizes): no nested loops or branches. */
    static bool only_values(const StmtP &s) {
        for (const StmtP &c : s->body)
            if (!c->body.empty() || !c->else_body.empty()) return false;
        return true;
    }

    Expr local(std::vector<StmtP> &head, const std::string &prefix, Expr value) {
        std::string name = fresh_name(prefix, names_, next_);
        head.push_back(decl(name, LocalClass::Tile, {}, value));
        return make_var(name, VarRole::Symbol, SType::Real);
    }

    std::vector<StmtP> rewrite(const StmtP &loop) {
        std::vector<Expr> divisors = invariant_operands(loop, Kind::Div), subtrahends = invariant_operands(loop, Kind::Sub);
        if (divisors.empty() && subtrahends.empty()) return {loop};
        const Expr inf = make_const(std::numeric_limits<double>::infinity());
        std::vector<StmtP> head;
        std::vector<Expr> conditions;
        std::vector<std::pair<Expr, Expr>> reciprocal, finite;  // b -> its local
        bool reads = false;
        for (Expr b : divisors) {
            Expr r = local(head, "$r", make_div(make_const(1), b));
            Expr mag = make_call(Func::abs, r);
            conditions.push_back(make_and(make_cmp(CmpOp::GE, mag, make_const(0x1p-126)), make_cmp(CmpOp::LT, mag, inf)));
            reciprocal.emplace_back(b, r);
            reads = reads || reads_memory(b);
        }
        for (Expr b : subtrahends) {
            Expr f = local(head, "$f", b);
            conditions.push_back(make_cmp(CmpOp::LT, make_call(Func::abs, f), inf));
            finite.emplace_back(b, f);
            reads = reads || reads_memory(b);
        }
        // The first operand is rewritten too (exp(X - m) - h holds two subtractions).
        std::function<Expr(Expr)> replace = [&](Expr e) {
            return substitute(e, [&](Expr n) -> Expr {
                if (n->kind == Kind::Reduce) return n;  // see invariant_operands
                if (n->kind == Kind::Div)
                    for (const auto &[b, r] : reciprocal)
                        if (n->args[1] == b) return make_mul(replace(n->args[0]), r);
                if (n->kind == Kind::Sub && n->stype == SType::Real)
                    for (const auto &[b, f] : finite)
                        if (n->args[1] == b) return make_add(replace(n->args[0]), make_neg(f));
                return nullptr;
            });
        };
        std::vector<StmtP> body;
        for (const StmtP &c : loop->body) body.push_back(map_own_exprs(c, replace));
        Expr guard = conditions[0];
        for (size_t i = 1; i < conditions.size(); i++) guard = make_and(guard, conditions[i]);
        head.push_back(if_then(guard, {with_body(loop, std::move(body))}, {loop}));
        if (!reads) return head;
        return {if_then(make_cmp(CmpOp::LT, loop->begin, loop->end), std::move(head))};
    }

    std::set<std::string> names_;
    int next_ = 0;
};

}  // namespace

Module version_on_finite_invariants(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = Versioner(k).mutate(k.body);
    return m;
}

}  // namespace rf::tile
