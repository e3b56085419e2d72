/** \file Sign.cpp
 * The sign and interval analysis of Sign.h: one interval rule per node kind, over Interval.h.
 */
#include "sym/Sign.h"

#include <algorithm>
#include <unordered_map>

#include "ir/Eval.h"
#include "sym/Interval.h"
#include "sym/SimplifyInternal.h"
#include "sym/SymCache.h"

namespace rf {

namespace sym {

namespace {

constexpr double INF = INFINITY;

Interval nan_everything() { return iv::make(-INF, false, INF, false, true); }

class Analyzer {
public:
    Analyzer(const Facts *facts, std::unordered_map<Expr, Interval> &memo) : facts_(facts), memo_(memo) {}

    Interval of(Expr e) {
        if (auto it = memo_.find(e); it != memo_.end()) return it->second;
        Interval r = compute(e);
        memo_[e] = r;
        return r;
    }

private:
    bool fact(Expr e, Interval &out) {
        if (!facts_) return false;
        if (auto it = facts_->atoms.find(e); it != facts_->atoms.end()) {
            out = it->second;
            return true;
        }
        return facts_->lookup && facts_->lookup(e, out);
    }

    Interval var(Expr e) {
        Interval base = iv::reals();
        if (e->role == VarRole::Size) base = iv::make(1, false, INF, true);
        else if (e->role == VarRole::Index) base = iv::make(0, false, INF, true);
        Interval f;
        if (fact(e, f)) return iv::intersect(base, f);
        return base;
    }

    Interval call(Func fn, Expr arg) {
        Interval a = of(arg);
        auto fe = [fn](double x) { return eval_func(fn, x); };
        switch (fn) {
        case Func::exp:
        case Func::exp2: return range(iv::increasing(a, fe), a, 0, INF);
        case Func::log:
        case Func::log2: {
            // Defined for x >= 0 (log 0 = -inf); NaN below.
            if (a.hi < 0 || (a.hi == 0 && a.hi_open)) return nan_everything();
            bool nan = a.lo < 0;
            if (a.lo < 0) a.lo = 0, a.lo_open = false;
            Interval r = iv::increasing(a, fe);
            r.may_be_nan |= nan;
            return r;
        }
        case Func::sqrt: return iv::pow_const(a, 0.5);
        case Func::rsqrt: return iv::pow_const(a, -0.5);
        case Func::abs: return iv::abs(a);
        case Func::tanh: return range(iv::increasing(a, fe), a, -1, 1);
        case Func::sigmoid: return range(iv::increasing(a, fe), a, 0, 1);
        case Func::round:
        case Func::floor:
        case Func::ceil: return iv::increasing(a, fe, false);
        }
        return nan_everything();
    }

    /** Clips the image r of an increasing function to its range [lo, hi] (undoing the one-ulp
     *  widening or rounding past it). A range bound is reached only in the limit, so it is
     *  attained only when the argument attains the matching infinity. */
    static Interval range(Interval r, const Interval &arg, double lo, double hi) {
        if (r.lo <= lo) r.lo = lo, r.lo_open = !(arg.lo == -INF && !arg.lo_open);
        if (r.hi >= hi) r.hi = hi, r.hi_open = !(arg.hi == INF && !arg.hi_open);
        return r;
    }

    Interval power(Expr e) {
        Interval a = of(e->args[0]);
        Expr x = e->args[1];
        if (x->kind == Kind::Const) return iv::pow_const(a, x->value);
        Interval p = of(x);
        bool nan = p.may_be_nan || a.may_be_nan;
        bool attained_inf = a.hi == INF && !a.hi_open;
        // x^y for x > 0 finite and y finite is a positive real; 0^y and inf^y can be 0 or inf.
        if (a.is_positive() && !attained_inf) return iv::make(0, true, INF, true, nan);
        if (a.is_nonnegative()) return iv::make(0, false, INF, false, nan);
        return nan_everything();
    }

    Interval reduce(Expr e) {
        Interval b = of(e->body());
        Interval n = iv::make(1, false, 1, false);
        for (Expr x : e->extents) n = iv::mul(n, of(x));
        bool may_be_empty = n.lo < 1;
        Interval nonempty = n;
        if (nonempty.lo < 1) nonempty.lo = 1, nonempty.lo_open = false;
        Interval r;
        switch (e->rop) {
        case ReduceOp::Sum: {
            // A sum of k values of B is k times their mean, and the mean lies in B (B is convex).
            r = iv::mul(nonempty, b);
            bool both_inf = (b.lo == -INF && !b.lo_open) && (b.hi == INF && !b.hi_open);
            r.may_be_nan |= both_inf;
            if (may_be_empty) r = iv::hull(r, Interval::point(0));
            break;
        }
        case ReduceOp::Prod:
            if (b.is_positive()) r = iv::make(0, true, b.hi <= 1 ? 1 : INF, b.hi > 1 && !(b.hi == INF && !b.hi_open));
            else if (b.is_nonnegative()) r = iv::make(0, false, b.hi <= 1 ? 1 : INF, false);
            else if (!b.may_be_nan && b.lo >= -1 && b.hi <= 1) r = iv::make(-1, false, 1, false);
            else r = Interval::everything();
            r.may_be_nan |= b.may_be_nan;
            if (may_be_empty) r = iv::hull(r, Interval::point(1));
            break;
        case ReduceOp::Max:
        case ReduceOp::Min:
        case ReduceOp::TopK:
            r = b;
            if (may_be_empty) r = iv::hull(r, Interval::point(e->rop == ReduceOp::Min ? INF : -INF));
            break;
        case ReduceOp::ArgMax:
        case ReduceOp::ArgMin:
            r = iv::make(0, false, n.hi == INF ? INF : n.hi - 1, n.hi == INF);
            break;
        }
        return r;
    }

    Interval compute(Expr e) {
        const auto &a = e->args;
        switch (e->kind) {
        case Kind::Const: return std::isnan(e->value) ? nan_everything() : Interval::point(e->value);
        case Kind::Var: return var(e);
        case Kind::Load: {
            Interval f;
            if (fact(e, f)) return f;
            return iv::reals();
        }
        case Kind::Add: {
            Interval r = of(a[0]);
            for (size_t i = 1; i < a.size(); i++) r = iv::add(r, of(a[i]));
            return r;
        }
        case Kind::Sub: return iv::add(of(a[0]), iv::neg(of(a[1])));
        case Kind::Mul: {
            // A factor repeated k times is a k-th power (x * x >= 0, as Int products keep it).
            std::vector<std::pair<Expr, int>> counts;
            for (Expr f : a) {
                auto it = std::find_if(counts.begin(), counts.end(), [f](const auto &c) { return c.first == f; });
                if (it == counts.end()) counts.emplace_back(f, 1);
                else it->second++;
            }
            Interval r = Interval::point(1);
            for (auto &[f, k] : counts) r = iv::mul(r, k == 1 ? of(f) : iv::pow_const(of(f), k));
            return r;
        }
        case Kind::Div: {
            Interval x = of(a[0]), y = of(a[1]);
            Interval r = iv::mul(x, iv::recip(y));
            // 0 / 0 = 0 in the language: possible when both contain 0.
            auto has_zero = [](const Interval &i) {
                return (i.lo < 0 || (i.lo == 0 && !i.lo_open)) && (i.hi > 0 || (i.hi == 0 && !i.hi_open));
            };
            if (has_zero(x) && has_zero(y)) r = iv::hull(r, Interval::point(0));
            return r;
        }
        case Kind::Neg: return iv::neg(of(a[0]));
        case Kind::Pow: return power(e);
        case Kind::Call: return call(e->func, a[0]);
        case Kind::Min: return iv::min(of(a[0]), of(a[1]));
        case Kind::Max: return iv::max(of(a[0]), of(a[1]));
        case Kind::Select:
            if (a[0]->kind == Kind::Const) return of(a[0]->value != 0 ? a[1] : a[2]);
            return iv::hull(of(a[1]), of(a[2]));
        case Kind::Cmp:
        case Kind::And:
        case Kind::Or:
        case Kind::Not: return iv::make(0, false, 1, false);
        case Kind::Cast: {
            Interval x = of(a[0]);
            if (e->dtype == DType::f64) return x;
            DType t = e->dtype;
            bool nan = x.may_be_nan;
            x.may_be_nan = false;
            Interval r = iv::increasing(x, [t](double v) { return round_to_dtype(v, t); }, false);
            if (nan && is_int(t)) r = iv::hull(r, Interval::point(0));  // NaN -> 0
            else r.may_be_nan = nan;
            return r;
        }
        case Kind::IDiv:
        case Kind::Mod: {
            Expr d = a[1];
            if (d->kind != Kind::Const || !is_int_value(d->value) || d->value == 0) return iv::reals();
            double c = d->value;
            if (e->kind == Kind::Mod)
                return c > 0 ? iv::make(0, false, c - 1, false) : iv::make(c + 1, false, 0, false);
            auto f = [c](double v) { return std::floor(v / c); };
            Interval x = of(a[0]);
            return c > 0 ? iv::increasing(x, f, false) : iv::decreasing(x, f);
        }
        case Kind::Reduce: return reduce(e);
        }
        return nan_everything();
    }

    const Facts *facts_;
    std::unordered_map<Expr, Interval> &memo_;
};

}  // namespace

Interval interval_default(Expr e) {
    Analyzer a(nullptr, sym_cache().intervals);
    return a.of(e);
}

}  // namespace sym

Interval interval_of(Expr e, const Facts &facts) {
    sym::SymEntry entry;
    if (facts.atoms.empty() && !facts.lookup) return sym::interval_default(e);
    std::unordered_map<Expr, Interval> memo;
    sym::Analyzer a(&facts, memo);
    return a.of(e);
}

bool is_positive(Expr e, const Facts &facts) { return interval_of(e, facts).is_positive(); }
bool is_negative(Expr e, const Facts &facts) { return interval_of(e, facts).is_negative(); }
bool is_nonnegative(Expr e, const Facts &facts) { return interval_of(e, facts).is_nonnegative(); }
bool is_nonzero(Expr e, const Facts &facts) { return interval_of(e, facts).is_nonzero(); }
bool has_one_sign(Expr e, const Facts &facts) {
    Interval i = interval_of(e, facts);
    return i.is_nonnegative() || i.is_nonpositive();
}

bool sum_shifts_terms(Expr body) {
    // Σ v = Σ (v - ref) + n·ref with ref the first term: small partial sums keep a mean far from 0
    // exact. Not for a body with a select (a mask, an indicator): its terms are exactly 0 beside
    // values, no single reference is close to both, and n·ref cancelled all but a few digits of the
    // float tile sums (Σ exp(x - m)·[c < argmax] over a causal mask lost 3 digits on the CPU;
    // fuzz_specs.py seed 14 #14). Nor for terms of one sign (exp, squares, abs): then |Σ v| = Σ |v|,
    // so the plain sum is already as accurate as its terms, while the shifted terms v - v0 sum to up
    // to Σ |v| + n·|v0| in magnitude and acc + n·v0 cancels it: softmax f32, C = 4096, with each row's
    // max first (v0 = 1, every other term v - 1 ≈ -1) was 9.3e-5 off relative (1.5e-6 with the max
    // elsewhere). ref = 0 there: the plain sum.
    return !any_of(body, [](Expr n) { return n->kind == Kind::Select; }) && !has_one_sign(body);
}

}  // namespace rf
