/** \file FoldExp2.cpp
 * The tile pass exp(e) → exp2(e · log2 e), with log2 e folded into e's constant and loop-invariant
 * coefficients so that vector loops lose the multiply exp does inside.
 */
#include <cmath>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

constexpr double kLog2e = 1.4426950408889634074;

/* Math: exp(e) = 2^(e·L) with L = log2(e). The product e·L is formed by distributing L over e's terms
 * when every term has a place to absorb it for free:
 *     (a + b)·L = a·L + b·L      (a − b)·L = a·L − b·L      (−a)·L = −(a·L)      (a / b)·L = (a·L) / b
 *     select(c, a, b)·L = select(c, a·L, b·L)
 *     (c · x)·L = (c·L) · x      for a constant c (folded now, in double)
 *     (f · x)·L = (f·L) · x      for a factor f invariant in the enclosing vector loop, or built from
 *                                sizes only: HoistInvariants then computes f·L once, before the loop
 *     f·L                        for a whole term f that is such an invariant
 * Attention's exp(S·(1/√D) − m) becomes exp2(S·((1/√D)·L) − m·L): once hoisted, one multiply, one
 * subtraction and exp2 per element (FlashAttention's softmax_scale_log2). When some term has no such
 * place (softmax's exp(X − m): X is a bare element) the pass writes exp2(e·L): the same work as exp
 * (which multiplies by L inside), and X − m is still formed before rounding by L (distributing would
 * round X·L and m·L apart, an exponent error of about |m|·2^-24 instead of |X − m|·2^-24). The per-row
 * rescales exp(−d + tag) are such sums. Inside a nested reduction only constants absorb L.
 *
 * Precondition: none beyond the language's semantics, which both forms share: L > 0 is finite, so
 * ±inf·L = ±inf and the spec's (−inf) − (−inf) = −inf holds on both sides; NaN stays NaN; 0·L = 0 keeps
 * 0/0 = 0; exp2(−inf) = 0, exp2(+inf) = inf, exp2(NaN) = NaN on every backend (rfk::exp2_f on the CPU,
 * exp2/exp2f in OpenCL and CUDA). The one difference: a finite term beyond FLT_MAX / L ≈ 2.4e38
 * overflows to inf where exp's argument would not (both results are 0 or inf then, unless two such
 * terms cancel).
 */

/** Rewrites every own expression; inside a simd loop the names the loop writes say what is invariant. */
class Exp2Folder : public StmtMutator {
public:
    Expr mutate_expr(const Expr &e) override { return rewrite(e, simd_written_); }

    StmtP mutate_for(const StmtP &s) override {
        if (s->loop != LoopKind::Simd) return mutate_default(s);
        // The loop's own bounds see the outer context; its body sees what the loop writes.
        StmtP c = mutate_own(s);
        std::set<std::string> written;
        written_in(s, written);
        const std::set<std::string> *saved = simd_written_;
        simd_written_ = &written;
        StmtP r = mutate_children(c);
        simd_written_ = saved;
        return r;
    }

private:
    /** Every exp in e as exp2; inside a nested reduction only constants count as invariant. */
    Expr rewrite(Expr e, const std::set<std::string> *simd_written) {
        return substitute(e, [&](Expr n) -> Expr {
            if (n->kind == Kind::Reduce) {
                std::vector<Expr> args = n->args;
                args[0] = rewrite(n->args[0], nullptr);
                return with_args(n, std::move(args));
            }
            if (n->kind != Kind::Call || n->func != Func::exp) return nullptr;
            Expr arg = rewrite(n->args[0], simd_written);
            ctx_ = simd_written;
            Expr folded = absorb(arg);
            return make_call(Func::exp2, folded ? folded : make_mul(arg, make_const(kLog2e)));
        });
    }

    /** A place where L costs nothing: a constant or size-only value, or an invariant of the loop. */
    bool free_factor(Expr f) const {
        if (f->stype == SType::Bool) return false;
        return kernel_constant(f) || (ctx_ && invariant(f, *ctx_));
    }

    /** e·L with L absorbed by constants and invariant factors, or null when some term has no place. */
    Expr absorb(Expr e) {
        Expr L = make_const(kLog2e);
        if (e->kind == Kind::Const) return make_const(e->value * kLog2e);
        // A whole invariant term keeps its shape (one value to hoist), unless a constant factor
        // of it can take L for nothing.
        bool const_factor = false;
        if (e->kind == Kind::Mul)
            for (Expr x : e->args) const_factor = const_factor || x->is_const();
        if (!const_factor && free_factor(e)) return make_mul(e, L);
        switch (e->kind) {
        case Kind::Add: {
            std::vector<Expr> terms;
            for (Expr a : e->args) {
                Expr t = absorb(a);
                if (!t) return nullptr;
                terms.push_back(t);
            }
            return make_add(terms);
        }
        case Kind::Sub: {
            Expr a = absorb(e->args[0]), b = a ? absorb(e->args[1]) : nullptr;
            return b ? make_sub(a, b) : nullptr;
        }
        case Kind::Neg: {
            Expr a = absorb(e->args[0]);
            return a ? make_neg(a) : nullptr;
        }
        case Kind::Div: {
            Expr a = absorb(e->args[0]);
            return a ? make_div(a, e->args[1]) : nullptr;
        }
        case Kind::Select: {
            Expr a = absorb(e->args[1]), b = a ? absorb(e->args[2]) : nullptr;
            return b ? make_select(e->args[0], a, b) : nullptr;
        }
        case Kind::Mul: {
            std::vector<Expr> f = e->args;
            for (Expr &x : f)
                if (x->is_const()) {
                    x = make_const(x->value * kLog2e);
                    return make_mul(f);
                }
            // The invariant factors, grouped with L where the first of them stood.
            std::vector<Expr> inv, out;
            size_t at = 0;
            for (Expr x : f) {
                if (free_factor(x)) {
                    if (inv.empty()) at = out.size();
                    inv.push_back(x);
                } else {
                    out.push_back(x);
                }
            }
            if (inv.empty()) return nullptr;
            inv.push_back(L);
            out.insert(out.begin() + static_cast<long>(at), make_mul(inv));
            return out.size() == 1 ? out[0] : make_mul(out);
        }
        default: return free_factor(e) ? make_mul(e, L) : nullptr;
        }
    }

    const std::set<std::string> *ctx_ = nullptr;
    const std::set<std::string> *simd_written_ = nullptr;  ///< names written by the innermost simd loop
};

}  // namespace

Module fold_exp2(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = Exp2Folder().mutate(k.body);
    return m;
}

}  // namespace rf::tile
