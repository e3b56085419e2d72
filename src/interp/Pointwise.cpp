/** \file Pointwise.cpp
 * A tree of closures for an element-wise body (interp/Pointwise.h). Each node's closure computes
 * exactly what Evaluator::eval computes for it in float64.
 */
#include "interp/Pointwise.h"

#include <cmath>

#include "ir/Eval.h"

namespace rf {

namespace {

struct Compiler {
    const TensorDef &d;
    const std::map<std::string, Tensor> &tensors;
    const SizeBinding &sizes;

    std::optional<PointwiseFn> go(Expr e) {
        switch (e->kind) {
        case Kind::Const: {
            double v = e->value;
            return PointwiseFn([v](const int64_t *) { return v; });
        }
        case Kind::Var: {
            for (size_t i = 0; i < d.vars.size(); i++)
                if (d.vars[i]->name == e->name) return PointwiseFn([i](const int64_t *idx) { return static_cast<double>(idx[i]); });
            auto it = sizes.find(e->name);
            if (it == sizes.end()) return std::nullopt;
            double v = static_cast<double>(it->second);
            return PointwiseFn([v](const int64_t *) { return v; });
        }
        case Kind::Load: return load(e);
        case Kind::Neg: return unary(e, [](double x) { return -x; });
        case Kind::Call: {
            Func f = e->func;
            return unary(e, [f](double x) { return eval_func(f, x); });
        }
        case Kind::Cast: {
            DType t = e->dtype;
            return unary(e, [t](double x) { return round_to_dtype(x, t); });
        }
        case Kind::Not: return unary(e, [](double x) { return x == 0 ? 1.0 : 0.0; });
        case Kind::Add: return fold(e, [](double a, double b) { return a + b; });
        case Kind::Mul: return fold(e, [](double a, double b) { return a * b; });
        case Kind::Sub: return binary(e, [](double a, double b) { return eval_sub(a, b); });
        case Kind::Div: return binary(e, [](double a, double b) { return eval_div(a, b); });
        case Kind::Min: return binary(e, [](double a, double b) { return nan_min(a, b); });
        case Kind::Max: return binary(e, [](double a, double b) { return nan_max(a, b); });
        case Kind::And: return binary(e, [](double a, double b) { return (a != 0 && b != 0) ? 1.0 : 0.0; });
        case Kind::Or: return binary(e, [](double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; });
        case Kind::Pow: return binary(e, [](double b, double x) { return x == -1 ? eval_div(1.0, b) : std::pow(b, x); });
        case Kind::Cmp: {
            CmpOp op = e->cmp;
            return binary(e, [op](double x, double y) { return eval_cmp(op, x, y); });
        }
        case Kind::Select: {
            auto c = go(e->args[0]), a = go(e->args[1]), b = go(e->args[2]);
            if (!c || !a || !b) return std::nullopt;
            return PointwiseFn([c = *c, a = *a, b = *b](const int64_t *idx) { return c(idx) != 0 ? a(idx) : b(idx); });
        }
        default: return std::nullopt;  // reductions, index arithmetic: the Evaluator's
        }
    }

    /** A load at the definition's variables or constants: an offset from strides. */
    std::optional<PointwiseFn> load(Expr e) {
        auto it = tensors.find(e->name);
        if (it == tensors.end() || it->second.shape.size() != e->args.size()) return std::nullopt;
        const Tensor *t = &it->second;
        std::vector<std::pair<int, int64_t>> terms;  // (variable position or -1 for a constant, stride or offset)
        int64_t stride = 1;
        for (size_t k = e->args.size(); k-- > 0;) {
            Expr a = e->args[k];
            int pos = -1;
            for (size_t i = 0; i < d.vars.size(); i++)
                if (a == d.vars[i]) pos = static_cast<int>(i);
            if (pos >= 0) terms.push_back({pos, stride});
            else if (a->kind == Kind::Const) terms.push_back({-1, static_cast<int64_t>(a->value) * stride});
            else return std::nullopt;
            stride *= t->shape[k];
        }
        return PointwiseFn([t, terms](const int64_t *idx) {
            int64_t off = 0;
            for (const auto &[pos, s] : terms) off += pos >= 0 ? idx[pos] * s : s;
            return t->data[static_cast<size_t>(off)];
        });
    }

    template <class F>
    std::optional<PointwiseFn> unary(Expr e, F f) {
        auto a = go(e->args[0]);
        if (!a) return std::nullopt;
        return PointwiseFn([a = *a, f](const int64_t *idx) { return f(a(idx)); });
    }
    template <class F>
    std::optional<PointwiseFn> binary(Expr e, F f) {
        auto a = go(e->args[0]), b = go(e->args[1]);
        if (!a || !b) return std::nullopt;
        return PointwiseFn([a = *a, b = *b, f](const int64_t *idx) { return f(a(idx), b(idx)); });
    }
    template <class F>
    std::optional<PointwiseFn> fold(Expr e, F f) {
        std::vector<PointwiseFn> parts;
        for (Expr a : e->args) {
            auto p = go(a);
            if (!p) return std::nullopt;
            parts.push_back(*p);
        }
        return PointwiseFn([parts, f](const int64_t *idx) {
            double s = parts[0](idx);
            for (size_t i = 1; i < parts.size(); i++) s = f(s, parts[i](idx));
            return s;
        });
    }
};

}  // namespace

std::optional<PointwiseFn> compile_pointwise(const TensorDef &d, const std::map<std::string, Tensor> &tensors,
                                             const SizeBinding &sizes) {
    if (d.is_reduction() || d.is_topk()) return std::nullopt;
    return Compiler{d, tensors, sizes}.go(d.body);
}

}  // namespace rf
