/** \file ReciprocalDivisors.cpp
 * The tile pass that turns divisions by a loop-invariant divisor in vector loops into multiplications
 * by its reciprocal, computed once before the loop (CPU only: see Passes.h).
 */
#include <limits>
#include <set>
#include <vector>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* For a simd loop S whose values divide by b (real, invariant in S: it reads nothing S writes, holds
 * no reduction, cannot trap), every a / b in S becomes a · r with r = 1 / b declared before S:
 *
 *     tile $rN = 1 / b
 *     if 2^-126 <= |$rN| < inf:  S[a / b → a · $rN]
 *     else:                      S
 *
 * The guard says r is a normal float, so b is finite, non-zero, and neither 1 / b overflowed (b
 * subnormal) nor lost digits to underflow (|b| > 2^126). Then for every a: a finite a gives
 * a · fl(1/b), within 1.5 ulp of fl(a / b) (two roundings of at most half an ulp each; the product can
 * overflow only when a / b is within an ulp of the largest float); ±0 gives ±0, ±inf gives ±inf and
 * NaN gives NaN, with the signs of a / b. The language's 0 / 0 = 0 (rfk::div) needs b = 0, which the
 * guard sends to the unchanged loop. A divisor that reads memory is read before S, so the two copies sit
 * under `if begin < end` (the loop runs, so its first iteration would have read it).
 *
 * Why: a vector division costs about ten multiplications' time (Zen 4: vdivps zmm, one per 5-10
 * cycles), and softmax's normalization Y = e / s, LayerNorm's and attention's O = acc / l divide every
 * element by one value per row.
 */

/** Real, invariant divisors of the values of S's body (each once, in order of appearance). */
std::vector<Expr> invariant_divisors(const StmtP &loop) {
    std::set<std::string> written;
    written_in(loop, written);
    std::vector<Expr> out;
    std::set<Expr> seen;
    for (const StmtP &c : loop->body) {
        if (!c->value) continue;
        visit(c->value, [&](Expr n) {
            if (n->kind != Kind::Div) return;
            Expr b = n->args[1];
            if (b->stype != SType::Real || b->is_const() || !invariant(b, written) || !cannot_trap(b)) return;
            if (seen.insert(b).second) out.push_back(b);
        });
    }
    return out;
}

class Reciprocals : public StmtMutator {
public:
    explicit Reciprocals(const Kernel &k) { written_in(k.body, names_); }

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

    std::vector<StmtP> rewrite(const StmtP &loop) {
        std::vector<Expr> divisors = invariant_divisors(loop);
        if (divisors.empty()) return {loop};
        std::vector<StmtP> head;
        std::vector<Expr> normals;
        bool reads = false;
        std::vector<std::pair<Expr, Expr>> to_reciprocal;  // b -> $rN
        for (Expr b : divisors) {
            std::string name;
            do name = "$r" + std::to_string(next_++);
            while (names_.count(name));
            names_.insert(name);
            head.push_back(decl(name, LocalClass::Tile, {}, make_div(make_const(1), b)));
            Expr r = make_var(name, VarRole::Symbol, SType::Real);
            Expr mag = make_call(Func::abs, r);
            Expr normal = make_and(make_cmp(CmpOp::GE, mag, make_const(0x1p-126)),
                                   make_cmp(CmpOp::LT, mag, make_const(std::numeric_limits<double>::infinity())));
            normals.push_back(normal);
            to_reciprocal.emplace_back(b, r);
            reads = reads || reads_memory(b);
        }
        std::vector<StmtP> body;
        for (const StmtP &c : loop->body) {
            body.push_back(map_own_exprs(c, [&](Expr e) {
                return substitute(e, [&](Expr n) -> Expr {
                    if (n->kind != Kind::Div) return nullptr;
                    for (const auto &[b, r] : to_reciprocal)
                        if (n->args[1] == b) return make_mul(n->args[0], r);
                    return nullptr;
                });
            }));
        }
        Expr guard = normals[0];
        for (size_t i = 1; i < normals.size(); i++) guard = make_and(guard, normals[i]);
        head.push_back(if_then(guard, {with_body(loop, std::move(body))}, {loop}));
        if (!reads) return head;
        return {if_then(make_cmp(CmpOp::LT, loop->begin, loop->end), std::move(head))};
    }

    std::set<std::string> names_;
    int next_ = 0;
};

}  // namespace

Module reciprocal_divisors(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = Reciprocals(k).mutate(k.body);
    return m;
}

}  // namespace rf::tile
