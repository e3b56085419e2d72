/** \file Simplify.h
 * The canonical simplifier: rewrites an expression into a canonical form in which equal real
 * functions built from the same atoms usually become the same interned node (pointer-equal).
 *
 * Canonical form (all of it is produced by simplify(); the analysis in fuse/ relies on it):
 *  - Sub, Div, Neg disappear: a - b = Add(a, Mul(-1, b)), a / b = Mul(a, Pow(b, -1)), -a = Mul(-1, a).
 *    sqrt(x) = Pow(x, 0.5), rsqrt(x) = Pow(x, -0.5), exp2(x) = exp(x * ln 2), log2(x) = log(x) / ln 2.
 *  - Add: flattened, like terms collected (2*x + 3*x = 5*x), at most one Const, placed LAST, and
 *    the other terms sorted by compare_exprs. A term is `c * rest` with its numeric coefficient c as
 *    the FIRST arg of a Mul (omitted when 1).
 *  - Mul: flattened, at most one Const (the coefficient), placed FIRST, factors with equal bases
 *    merged by adding exponents (x * x = Pow(x, 2), x * Pow(x, -1) = 1 when x is provably non-zero
 *    — see Sign.h; otherwise the factors are kept), the rest sorted by compare_exprs.
 *    exp(a) * exp(b) = exp(a + b) (products of exps are merged into one exp).
 *  - Pow: Pow(Pow(x, a), b) = Pow(x, a*b) when a*b keeps the domain (b an integer, or x >= 0);
 *    Pow(x*y, n) = Pow(x, n) * Pow(y, n) for integer n; Pow(x, 1) = x; Pow(x, 0) = 1;
 *    Pow(exp(a), b) = exp(a*b).
 *  - exp/log: exp(0) = 1, log(1) = 0, exp(log(x)) = x when x > 0 provable, log(exp(x)) = x,
 *    log(x * y) = log(x) + log(y) when both provably > 0, log(Pow(x, c)) = c * log(x) when x > 0.
 *  - Constant folding of every node kind whose arguments are constants (including Cast, Call,
 *    Select, Cmp, Min, Max), with IEEE semantics; folding never produces NaN from non-NaN inputs
 *    (such nodes are left as they are).
 *  - Min/Max/Select/Cmp/And/Or/Not: arguments simplified; max(x, x) = x; select(true, a, b) = a;
 *    select(c, a, a) = a; comparisons of constants folded.
 *  - Int expressions (index arithmetic: IDiv, Mod) are simplified with integer rules only
 *    ((x + c) - c = x, x / 1 = x, x % 1 = 0, constant folding) and are never turned into real Pow.
 *  - Reduce nodes: the body is simplified; the node is kept.
 *  - Casts are kept (never stripped); their argument is simplified.
 * Soundness: every rule is an identity on the reals under its stated precondition; a rule whose
 * precondition cannot be proven by Sign.h is not applied.
 */
#pragma once

#include "ir/Expr.h"

namespace rf {

Expr simplify(Expr e);

/** Canonical-form helpers (they simplify their result): */
Expr add(Expr a, Expr b);
Expr sub(Expr a, Expr b);
Expr mul(Expr a, Expr b);
Expr div(Expr a, Expr b);
Expr neg(Expr a);
Expr pow(Expr a, Expr b);
Expr exp(Expr a);
Expr log(Expr a);

/** Splits a canonical term into (numeric coefficient, rest): 3*x*y -> (3, x*y); x -> (1, x); 5 -> (5, 1). */
std::pair<double, Expr> split_coefficient(Expr term);

/** True when simplify(a - b) is the constant 0, or expand(a - b) is (polynomial identities). */
bool provably_equal(Expr a, Expr b);

/** Drops the calling thread's memo tables (simplify, intervals, expand). Never needed for
 *  correctness (they are reset whenever the current arena changes); tests use it to check that
 *  re-simplifying a result from scratch gives the same node. */
void clear_simplify_cache();

}  // namespace rf
