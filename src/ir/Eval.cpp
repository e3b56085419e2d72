/** \file Eval.cpp
 * The scalar evaluator of Eval.h.
 */
#include "ir/Eval.h"

#include <cmath>
#include <limits>
#include <vector>

#include "support/Error.h"

namespace rf {

double eval_sub(double a, double b) {
    if (std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0)) return a;  // masked stays masked
    return a - b;
}

double eval_div(double a, double b) {
    if (a == 0 && b == 0) return 0;  // an empty row normalizes to 0
    return a / b;
}

double eval_func(Func f, double x) {
    switch (f) {
    case Func::exp: return std::exp(x);
    case Func::exp2: return std::exp2(x);
    case Func::log: return std::log(x);
    case Func::log2: return std::log2(x);
    case Func::sqrt: return std::sqrt(x);
    case Func::rsqrt: return 1.0 / std::sqrt(x);
    case Func::abs: return std::fabs(x);
    case Func::tanh: return std::tanh(x);
    case Func::sigmoid: return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
    case Func::round: return std::nearbyint(x);
    case Func::floor: return std::floor(x);
    case Func::ceil: return std::ceil(x);
    }
    return NAN;
}

double eval_cmp(CmpOp op, double x, double y) {
    switch (op) {
    case CmpOp::LT: return x < y;
    case CmpOp::LE: return x <= y;
    case CmpOp::GT: return x > y;
    case CmpOp::GE: return x >= y;
    case CmpOp::EQ: return x == y;
    case CmpOp::NE: return x != y;
    }
    return 0;
}

// NaN-propagating max/min (like torch.max), so a NaN is never silently dropped.
double nan_max(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
double nan_min(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

double Evaluator::round(double v) const { return env_.f32 ? static_cast<double>(static_cast<float>(v)) : v; }

namespace {
int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}
}  // namespace

double Evaluator::eval(Expr e) {
    const auto &a = e->args;
    switch (e->kind) {
    case Kind::Const: return e->value;
    case Kind::Var: {
        auto it = bound_.find(e);
        if (it != bound_.end()) return it->second;
        RF_INTERNAL_ASSERT(env_.var_value) << "no value for variable " << e->name;
        return env_.var_value(e);
    }
    case Kind::Load: {
        int64_t idx[16];
        RF_INTERNAL_ASSERT(a.size() <= 16) << "too many dimensions";
        for (size_t i = 0; i < a.size(); i++) idx[i] = static_cast<int64_t>(eval(a[i]));
        double v = env_.load_value(e, idx);
        return e->stype == SType::Real ? round(v) : v;
    }
    case Kind::Add: {
        double s = eval(a[0]);
        for (size_t i = 1; i < a.size(); i++) s = round(s + eval(a[i]));
        return s;
    }
    case Kind::Sub: return round(eval_sub(eval(a[0]), eval(a[1])));
    case Kind::Mul: {
        double p = eval(a[0]);
        for (size_t i = 1; i < a.size(); i++) p = round(p * eval(a[i]));
        return p;
    }
    case Kind::Div: return round(eval_div(eval(a[0]), eval(a[1])));
    case Kind::Neg: return -eval(a[0]);
    case Kind::Pow: {
        double b = eval(a[0]), x = eval(a[1]);
        if (x == -1) return round(eval_div(1.0, b));
        return round(std::pow(b, x));
    }
    case Kind::Call: return round(eval_func(e->func, eval(a[0])));
    case Kind::Min: return nan_min(eval(a[0]), eval(a[1]));
    case Kind::Max: return nan_max(eval(a[0]), eval(a[1]));
    case Kind::Select: return eval(a[0]) != 0 ? eval(a[1]) : eval(a[2]);
    case Kind::Cmp: return eval_cmp(e->cmp, eval(a[0]), eval(a[1]));
    case Kind::And: return (eval(a[0]) != 0) && (eval(a[1]) != 0);
    case Kind::Or: return (eval(a[0]) != 0) || (eval(a[1]) != 0);
    case Kind::Not: return eval(a[0]) == 0;
    case Kind::Cast: return round_to_dtype(eval(a[0]), e->dtype);
    case Kind::IDiv: {
        int64_t x = static_cast<int64_t>(eval(a[0])), y = static_cast<int64_t>(eval(a[1]));
        if (y == 0) throw UserError({}, "integer division by zero in an index expression");
        return static_cast<double>(floor_div(x, y));
    }
    case Kind::Mod: {
        int64_t x = static_cast<int64_t>(eval(a[0])), y = static_cast<int64_t>(eval(a[1]));
        if (y == 0) throw UserError({}, "integer modulo by zero in an index expression");
        return static_cast<double>(x - y * floor_div(x, y));
    }
    case Kind::Reduce: return eval_reduce(e);
    }
    return NAN;
}

double Evaluator::eval_reduce(Expr e) {
    RF_INTERNAL_ASSERT(e->rop != ReduceOp::TopK) << "top-k cannot be evaluated as a scalar";
    size_t n = e->num_axes();
    std::vector<int64_t> ext(n), pos(n, 0);
    int64_t total = 1;
    for (size_t i = 0; i < n; i++) {
        ext[i] = static_cast<int64_t>(eval(e->extents[i]));
        total *= std::max<int64_t>(ext[i], 0);
    }
    double acc;
    switch (e->rop) {
    case ReduceOp::Sum: acc = 0; break;
    case ReduceOp::Prod: acc = 1; break;
    case ReduceOp::Max: case ReduceOp::ArgMax: acc = -INFINITY; break;
    default: acc = INFINITY; break;
    }
    double best_index = 0;
    bool have = false;
    for (int64_t flat = 0; flat < total; flat++) {
        int64_t rem = flat;
        for (size_t i = n; i-- > 0;) {
            pos[i] = rem % ext[i];
            rem /= ext[i];
            bound_[e->axis(i)] = static_cast<double>(pos[i]);
        }
        double v = eval(e->body());
        switch (e->rop) {
        case ReduceOp::Sum: acc = round(acc + v); break;
        case ReduceOp::Prod: acc = round(acc * v); break;
        case ReduceOp::Max: acc = nan_max(acc, v); break;
        case ReduceOp::Min: acc = nan_min(acc, v); break;
        case ReduceOp::ArgMax:
            if (!have || v > acc) { acc = v; best_index = static_cast<double>(flat); have = true; }
            break;
        case ReduceOp::ArgMin:
            if (!have || v < acc) { acc = v; best_index = static_cast<double>(flat); have = true; }
            break;
        default: break;
        }
    }
    for (size_t i = 0; i < n; i++) bound_.erase(e->axis(i));
    if (e->rop == ReduceOp::ArgMax || e->rop == ReduceOp::ArgMin) return best_index;
    return acc;
}

double reduce_identity(ReduceOp op) {
    switch (op) {
    case ReduceOp::Sum: return 0;
    case ReduceOp::Prod: return 1;
    case ReduceOp::Max: case ReduceOp::ArgMax: case ReduceOp::TopK: return -INFINITY;
    default: return INFINITY;
    }
}

ReduceOp mirrored(ReduceOp op) {
    switch (op) {
    case ReduceOp::Max: return ReduceOp::Min;
    case ReduceOp::Min: return ReduceOp::Max;
    case ReduceOp::ArgMax: return ReduceOp::ArgMin;
    case ReduceOp::ArgMin: return ReduceOp::ArgMax;
    default: return op;
    }
}

}  // namespace rf
