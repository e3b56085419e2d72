/** \file Eval.h
 * Scalar evaluation of expressions in float64 (optionally rounding every real operation to float32),
 * with the language's literal semantics. It is the single definition of what an expression means,
 * shared by the reference interpreter, the plan interpreter and the numeric checks of derivations.
 *
 * Semantics beyond IEEE (documented in docs/language.md, "Masked rows"):
 *  - (-inf) - (-inf) = -inf and (+inf) - (+inf) = +inf: a fully masked row stays masked instead of
 *    turning into NaN (so exp(S - m) over a row of -inf gives 0, not NaN);
 *  - 0 / 0 = 0: normalizing an empty (fully masked) row gives 0.
 *  - IDiv and Mod are floor-based; Cmp/And/Or/Not give 1 or 0; Cast rounds with round_to_dtype;
 *    round() is round-half-to-even; argmax/argmin give the first (lowest flattened) index.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "ir/Expr.h"

namespace rf {

struct EvalEnv {
    /** Value of a Var that is not bound by an enclosing Reduce (sizes, symbols, free index vars). */
    std::function<double(Expr var)> var_value;
    /** Value of a Load, given its indices already evaluated (idx has load->args.size() entries). */
    std::function<double(Expr load, const int64_t *idx)> load_value;
    /** Round the result of every real operation (and every loaded value) to float32. */
    bool f32 = false;
};

class Evaluator {
public:
    explicit Evaluator(EvalEnv env) : env_(std::move(env)) {}
    double eval(Expr e);
    /** Binds an index var for subsequent eval calls (overrides var_value). */
    void bind(Expr var, double value) { bound_[var] = value; }
    void unbind(Expr var) { bound_.erase(var); }

private:
    double eval_reduce(Expr e);
    double round(double v) const;
    EvalEnv env_;
    std::unordered_map<Expr, double> bound_;
};

/** The binary arithmetic of the language, shared with generated code semantics. */
double eval_sub(double a, double b);
double eval_div(double a, double b);
double eval_func(Func f, double x);
/** A comparison as the language gives it: 1 or 0. */
double eval_cmp(CmpOp op, double x, double y);
/** max/min that propagate NaN (element-wise `max(a, b)` of the language). */
double nan_max(double a, double b);
double nan_min(double a, double b);

/** The identity of a reduction (0, 1, -inf for max/argmax/top-k, +inf for min/argmin). */
double reduce_identity(ReduceOp op);
/** The selection that a decreasing map turns op into (max <-> min, argmax <-> argmin). */
ReduceOp mirrored(ReduceOp op);

}  // namespace rf
