/** \file Magnitude.cpp
 * The magnitude reference of Magnitude.h: the reference's computation once more, carrying for every
 * real subexpression its value and its cancellation excess x (M = |value| + x).
 */
#include "interp/Magnitude.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "interp/Reference.h"
#include "ir/Eval.h"
#include "support/Error.h"

namespace rf {

namespace {

/** A value, its excess x >= 0 (M = |v| + x), and whether every correct implementation computes it
 *  without rounding (inputs, representable constants, and selections, negations and casts of such). */
struct ValueExcess {
    double v;
    double x;
    bool exact = false;
};

/** The excess of a value whose scale is m: m - |v| when that is positive and v is finite, else 0.
 *  A NaN m (0 · inf, inf - inf in a masked row) gives 0: no loosening where the model says nothing. */
double excess(double v, double m) {
    if (!std::isfinite(v) || !(m > std::fabs(v))) return 0;
    return m - std::fabs(v);
}

double scale(const ValueExcess &e) { return std::fabs(e.v) + e.x; }

/** x for a finite value, 0 for a non-finite value or a NaN x (0 · inf). */
double finite_or_zero(double v, double x) { return std::isfinite(v) && x == x ? x : 0; }

/** a · b to first order: δ(ab) = a δb + b δa. (The second-order δa δb is T² small: M(a) · M(b)
 *  would count it at order T and multiply two amplifications that only add.) */
ValueExcess product(const ValueExcess &a, const ValueExcess &b) {
    double v = a.v * b.v;
    double x = (a.x > 0 ? a.x * std::fabs(b.v) : 0) + (b.x > 0 ? std::fabs(a.v) * b.x : 0);
    return {v, finite_or_zero(v, x)};
}

/** A term's share of the error scale of a sum of n terms. An inexact term carries an error of about
 *  T·M(term), so it counts fully. An exact term carries none: two exact terms are added with one
 *  rounding, relative to the result (0 beyond it); from three on, the partial sums an implementation
 *  rounds (in an order it chooses) are bounded only by Σ|terms|, so exact terms count by |term|. */
double term_scale(const ValueExcess &t, int64_t n) { return t.exact && n < 3 ? 0.0 : scale(t); }

/** A real constant is exact when float32 holds it (0.5, 2, sizes), else it is off by its rounding. */
bool representable(double c) { return !std::isfinite(c) || static_cast<double>(static_cast<float>(c)) == c; }

// NaN-propagating max/min, as the reference's (ir/Eval.cpp).
double nan_max(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
double nan_min(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

/** |f'(a)| for f(a) = v: how far a first-order perturbation of the argument moves the result. */
double derivative_magnitude(Func f, double a, double v) {
    switch (f) {
    case Func::exp: return std::fabs(v);
    case Func::exp2: return std::fabs(v) * std::log(2.0);
    case Func::log: return 1.0 / std::fabs(a);
    case Func::log2: return 1.0 / (std::fabs(a) * std::log(2.0));
    case Func::sqrt: return 0.5 / std::fabs(v);
    case Func::rsqrt: return 0.5 * std::fabs(v) / std::fabs(a);
    case Func::abs: return 1.0;
    case Func::tanh: return std::fabs(1.0 - v * v);
    case Func::sigmoid: return std::fabs(v * (1.0 - v));
    case Func::round: case Func::floor: case Func::ceil: return 0.0;  // piecewise constant
    }
    return 0.0;
}

/** What a Load reads: the reference values and, for a definition, its magnitudes (inputs: none). */
struct Source {
    Expr load;
    const Tensor *value;
    const Tensor *magnitude;
    bool exact;  ///< an input, or a definition every element of which is exact
};

/** Evaluates one definition's body with excesses. Index, boolean and size subexpressions go to the
 *  reference's Evaluator (their values are exact: x = 0); the axes this walker binds are bound there
 *  too, so both see the same point. */
class ExcessEvaluator {
public:
    ExcessEvaluator(const TensorDef &d, const SizeBinding &sizes, const std::map<std::string, Tensor> &reference,
                    const std::map<std::string, Tensor> &magnitude, const std::set<std::string> &inexact)
        : ev_(make_env(sizes, reference)) {
        visit(d.body, [&](Expr e) {
            if (e->kind != Kind::Load) return;
            auto v = reference.find(e->name);
            RF_INTERNAL_ASSERT(v != reference.end()) << "magnitude: '" << e->name << "' has no reference value";
            auto m = magnitude.find(e->name);
            sources_.push_back({e, &v->second, m == magnitude.end() ? nullptr : &m->second, !inexact.count(e->name)});
        });
    }

    void bind(Expr var, double value) { ev_.bind(var, value); }

    ValueExcess eval(Expr e) {
        const auto &a = e->args;
        if (e->stype != SType::Real) return {ev_.eval(e), 0, true};
        switch (e->kind) {
        case Kind::Load: return load(e);
        case Kind::Add: {
            const int64_t n = static_cast<int64_t>(a.size());
            ValueExcess s = eval(a[0]);
            double m = term_scale(s, n);
            for (size_t i = 1; i < a.size(); i++) {
                ValueExcess t = eval(a[i]);
                s.v += t.v;
                m += term_scale(t, n);
            }
            return {s.v, excess(s.v, m)};
        }
        case Kind::Sub: {
            ValueExcess l = eval(a[0]), r = eval(a[1]);
            double v = eval_sub(l.v, r.v);
            return {v, excess(v, term_scale(l, 2) + term_scale(r, 2))};
        }
        case Kind::Mul: {
            ValueExcess p = eval(a[0]);
            for (size_t i = 1; i < a.size(); i++) p = product(p, eval(a[i]));
            return {p.v, p.x};
        }
        case Kind::Div: {
            // First order: δ(a/b) = δa / b - a δb / b².
            ValueExcess l = eval(a[0]), r = eval(a[1]);
            double v = eval_div(l.v, r.v);
            if (r.v == 0 || !std::isfinite(r.v)) return {v, 0};
            return {v, finite_or_zero(v, l.x / std::fabs(r.v) + std::fabs(l.v) * r.x / (r.v * r.v))};
        }
        case Kind::Neg: {
            ValueExcess t = eval(a[0]);
            return {-t.v, t.x, t.exact};
        }
        case Kind::Pow: {
            ValueExcess b = eval(a[0]), p = eval(a[1]);
            double v = p.v == -1 ? eval_div(1.0, b.v) : std::pow(b.v, p.v);
            double x = 0;
            if (b.x > 0 && b.v != 0) x += std::fabs(p.v * v / b.v) * b.x;
            if (p.x > 0 && b.v > 0) x += std::fabs(v * std::log(b.v)) * p.x;
            return {v, finite_or_zero(v, x)};
        }
        case Kind::Call: {
            ValueExcess t = eval(a[0]);
            double v = eval_func(e->func, t.v);
            double x = t.x > 0 ? derivative_magnitude(e->func, t.v, v) * t.x : 0;
            // log and log2 also turn the argument's own rounding into an absolute error: |a f'(a)| is
            // 1 (1/ln 2), so an argument within T·|a| moves the result by T, which T·|log a| does not
            // cover near a = 1 (log-sum-exp of terms 1 and 7e-13: float rounds the sum to 1 and its
            // log to 0 against 7e-13; scripts/fuzz_specs.py seed 1238 #9). M(log a) = |log a| + M(a)/|a|.
            if (!t.exact && (e->func == Func::log || e->func == Func::log2) && t.v != 0)
                x = derivative_magnitude(e->func, t.v, v) * (std::fabs(t.v) + t.x);
            return {v, finite_or_zero(v, x), t.exact && e->func == Func::abs};
        }
        case Kind::Min: case Kind::Max: {
            ValueExcess l = eval(a[0]), r = eval(a[1]);
            double v = e->kind == Kind::Max ? nan_max(l.v, r.v) : nan_min(l.v, r.v);
            return {v, std::isfinite(v) ? std::max(l.x, r.x) : 0, l.exact && r.exact};
        }
        case Kind::Select: return ev_.eval(a[0]) != 0 ? eval(a[1]) : eval(a[2]);
        case Kind::Cast: {
            ValueExcess t = eval(a[0]);
            double v = round_to_dtype(t.v, e->dtype);
            return {v, std::isfinite(v) ? t.x : 0, t.exact};
        }
        case Kind::Reduce: return reduce(e);
        default: {  // constants, sizes, and whatever has no rounding to model
            double v = ev_.eval(e);
            return {v, 0, representable(v)};
        }
        }
    }

    /** The largest excess of red's body over its axes (how far any candidate of a top-k may move),
     *  and whether every candidate is exact. */
    ValueExcess max_excess_over(Expr red) {
        ValueExcess r{0, 0, true};
        for_each_point(red, [&](Expr body) {
            ValueExcess t = eval(body);
            r.x = std::max(r.x, t.x);
            r.exact = r.exact && t.exact;
        });
        return r;
    }

private:
    static EvalEnv make_env(const SizeBinding &sizes, const std::map<std::string, Tensor> &reference) {
        EvalEnv env;
        env.var_value = [&sizes](Expr v) -> double {
            auto it = sizes.find(v->name);
            RF_INTERNAL_ASSERT(it != sizes.end()) << "magnitude: no value for '" << v->name << "'";
            return static_cast<double>(it->second);
        };
        env.load_value = [&reference](Expr load, const int64_t *idx) {
            const Tensor &t = reference.at(load->name);
            return t.data[static_cast<size_t>(t.offset(idx, t.rank()))];
        };
        return env;
    }

    ValueExcess load(Expr e) {
        const Source *s = nullptr;
        for (const Source &c : sources_)
            if (c.load == e) s = &c;
        RF_INTERNAL_ASSERT(s) << "magnitude: load of " << e->name << " was not resolved";
        int64_t idx[16];
        RF_INTERNAL_ASSERT(e->args.size() <= 16) << "too many dimensions";
        for (size_t i = 0; i < e->args.size(); i++) idx[i] = static_cast<int64_t>(ev_.eval(e->args[i]));
        size_t off = static_cast<size_t>(s->value->offset(idx, e->args.size()));
        double v = s->value->data[off];
        return {v, s->magnitude ? excess(v, s->magnitude->data[off]) : 0, s->exact};
    }

    /** Calls f(body) at every point of red's axes (row-major, as the reference), axes bound. */
    template <typename F>
    void for_each_point(Expr red, F &&f) {
        size_t n = red->num_axes();
        std::vector<int64_t> ext(n);
        for (size_t i = 0; i < n; i++) ext[i] = static_cast<int64_t>(ev_.eval(red->extents[i]));
        const int64_t total = points(red);
        for (int64_t flat = 0; flat < total; flat++) {
            int64_t rem = flat;
            for (size_t i = n; i-- > 0;) {
                ev_.bind(red->axis(i), static_cast<double>(rem % ext[i]));
                rem /= ext[i];
            }
            f(red->body());
        }
        for (size_t i = 0; i < n; i++) ev_.unbind(red->axis(i));
    }

    ValueExcess reduce(Expr e) {
        double v = reduce_identity(e->rop), m = 0, x = 0;
        ValueExcess prod{1, 0};
        bool exact = true;
        const int64_t n = points(e);
        for_each_point(e, [&](Expr body) {
            ValueExcess t = eval(body);
            exact = exact && t.exact;
            switch (e->rop) {
            case ReduceOp::Sum: v += t.v; m += term_scale(t, n); break;
            case ReduceOp::Prod: prod = product(prod, t); break;
            case ReduceOp::Max: v = nan_max(v, t.v); x = std::max(x, t.x); break;
            case ReduceOp::Min: v = nan_min(v, t.v); x = std::max(x, t.x); break;
            default: internal_error("magnitude: reduction " + std::string(reduce_name(e->rop)) + " in a real value",
                                    __FILE__, __LINE__);
            }
        });
        if (e->rop == ReduceOp::Sum) return {v, excess(v, m)};
        if (e->rop == ReduceOp::Prod) return {prod.v, prod.x};
        return {v, std::isfinite(v) ? x : 0, exact};  // a max or min is one of its (exact?) candidates
    }

    int64_t points(Expr red) {
        int64_t total = 1;
        for (Expr ext : red->extents) total *= std::max<int64_t>(static_cast<int64_t>(ev_.eval(ext)), 0);
        return total;
    }

    Evaluator ev_;
    std::vector<Source> sources_;
};

}  // namespace

std::map<std::string, Tensor> run_magnitude(const Program &p, const SizeBinding &sizes,
                                            const std::map<std::string, Tensor> &reference) {
    std::map<std::string, Tensor> magnitude;
    std::set<std::string> inexact;  // definitions with an element some implementation rounds
    for (const TensorDef &d : p.defs) {
        const Tensor &ref = reference.at(d.name);
        Tensor m(ref.shape, DType::f64);
        ExcessEvaluator ev(d, sizes, reference, magnitude, inexact);
        bool exact = true;
        std::vector<int64_t> idx(ref.shape.size(), 0);
        if (d.is_topk()) {
            // Each of the k values is an order statistic of the body: it moves by at most the largest
            // excess of any candidate along the axis. One row of k values per outer index.
            const int64_t k = ref.shape.back();
            for (int64_t o = 0; o * k < ref.numel(); o++) {
                for (size_t i = 0; i + 1 < idx.size(); i++) ev.bind(d.vars[i], static_cast<double>(idx[i]));
                ValueExcess c = ev.max_excess_over(d.body);
                exact = exact && c.exact;
                for (int64_t r = 0; r < k; r++) {
                    size_t off = static_cast<size_t>(o * k + r);
                    m.data[off] = std::fabs(ref.data[off]) + (std::isfinite(ref.data[off]) ? c.x : 0);
                }
                idx.back() = k - 1;
                next_index(idx, ref.shape);
            }
        } else {
            for (int64_t flat = 0; flat < ref.numel(); flat++) {
                for (size_t i = 0; i < idx.size(); i++) ev.bind(d.vars[i], static_cast<double>(idx[i]));
                // The reference's own value, so M >= |reference| holds element by element.
                double v = ref.data[static_cast<size_t>(flat)];
                ValueExcess t = ev.eval(d.body);
                exact = exact && t.exact;
                m.data[static_cast<size_t>(flat)] = std::fabs(v) + (std::isfinite(v) ? t.x : 0);
                next_index(idx, ref.shape);
            }
        }
        if (!exact) inexact.insert(d.name);
        magnitude[d.name] = std::move(m);
    }
    return magnitude;
}

}  // namespace rf
