/** \file Simplify.h
 * The canonical simplifier: rewrites an expression into a canonical form in which equal real
 * functions built from the same atoms usually become the same interned node (pointer-equal).
 *
 * Canonical form (all of it is produced by simplify(); the analysis in fuse/ relies on it):
 *  - Sub, Div, Neg disappear: a - b = Add(a, Mul(-1, b)), a / b = Mul(a, Pow(b, -1)), -a = Mul(-1, a).
 *    sqrt(x) = Pow(x, 0.5), rsqrt(x) = Pow(x, -0.5), exp2(x) = exp(x * ln 2), log2(x) = log(x) / ln 2,
 *    c^x = exp(x * log c) for a constant c > 0.
 *  - Add: flattened, like terms collected (2*x + 3*x = 5*x), at most one Const, placed LAST, and
 *    the other terms sorted by compare_exprs of the term WITHOUT its coefficient (so 0.125*S - m
 *    keeps S before m). A term is `c * rest` with its numeric coefficient c as the FIRST arg of a
 *    Mul (omitted when 1).
 *  - Mul: flattened, at most one Const (the coefficient), placed FIRST, factors with equal bases
 *    merged by adding exponents (x * x = Pow(x, 2), x * Pow(x, -1) = 1 when x is provably non-zero
 *    — see Sign.h; exponents of the same sign always merge; otherwise the factors are kept), the
 *    rest sorted by compare_exprs. exp(a) * exp(b) = exp(a + b) (products of exps are merged into
 *    one exp). A coefficient times a single sum is distributed: 2 * (x + y) = 2*x + 2*y. A sum next
 *    to other factors is "monic": its content goes to the coefficient, z * (2x + 2y) =
 *    2 * z * (x + y), z * (1 - x) = -(z * (x - 1)) (content = the first term's coefficient when it
 *    divides every coefficient exactly, else only its sign).
 *  - Pow: Pow(Pow(x, a), b) = Pow(x, a*b) when a*b keeps the domain (b an integer, or x >= 0);
 *    Pow(Pow(x, 2k), b) = Pow(abs(x), 2k*b) (so sqrt(x^2) = abs(x)); Pow(x*y, n) = Pow(x, n) *
 *    Pow(y, n) for integer n, and provably positive factors are pulled out for any n;
 *    Pow(x, 1) = x; Pow(x, 0) = 1; Pow(exp(a), b) = exp(a*b); Pow(abs(x), 2k) = Pow(x, 2k); the
 *    content of a sum base is pulled out ((2x + 2y)^-1 = 0.5 * (x + y)^-1).
 *  - exp/log: exp(0) = 1, log(1) = 0, exp(log(x)) = x when x >= 0 provable, log(exp(x)) = x,
 *    log(x * y) = log(x) + log(y) for the provably positive factors, log(Pow(x, c)) = c * log(x)
 *    when x > 0, log(x^2k) = 2k * log(abs(x)).
 *  - abs(x) = x when x >= 0, -x when x <= 0, abs(c * x) = |c| * abs(x); tanh(-x) = -tanh(x).
 *  - Constant folding of every node kind whose arguments are constants (including Cast, Call,
 *    Select, Cmp, Min, Max), with IEEE semantics, and with the language's semantics for Sub and
 *    Div of constants ((-inf) - (-inf) = -inf, 0 / 0 = 0); folding never produces NaN from
 *    non-NaN inputs (such nodes are left as they are: 0 * inf, inf - inf, log(-1), sqrt(-2)).
 *  - Min/Max/Select/Cmp/And/Or/Not: arguments simplified and commutative operands sorted;
 *    max(x, x) = x; max(a, b) = b when the intervals prove a <= b (max(-inf, x) = x);
 *    select(true, a, b) = a; select(c, a, a) = a; select(not c, a, b) = select(c, b, a);
 *    a > b becomes b < a and a >= b becomes b <= a; comparisons are decided when constant, when
 *    the intervals prove them, or when a - b simplifies to a constant (i + 1 > i) — only for
 *    operands that cannot be NaN; not (a < b) = b <= a likewise.
 *  - Int expressions (index arithmetic) are simplified with integer rules only ((x + c) - c = x,
 *    x / 1 = x, x % 1 = 0, (c*k*y + r) / c = k*y + r / c, (c*k*y + r) % c = r % c,
 *    (x / a) / b = x / (a*b), (x % c) % c = x % c, constant folding with floor semantics) and are
 *    never turned into real Pow: x * x stays a product for Int x (also pow(i, n), 1 < n <= 16).
 *    Constants in a sum or product are Int-typed when every other operand is Int and the value
 *    is integral (i + 1.0 is the Int i + 1).
 *  - Load indices are simplified; Reduce nodes: the body and extents are simplified, the node
 *    is kept.
 *  - Casts are kept (never stripped, even to f64); their argument is simplified;
 *    cast_t(cast_t(x)) = cast_t(x).
 * Soundness: every rule is an identity on the reals wherever the input is defined (every
 * sub-expression finite; rules may extend the domain: sqrt(x)^2 = x, 0 * log(x) = 0), under its
 * stated precondition; a rule whose precondition cannot be proven by Sign.h (with the
 * default facts) is not applied. The language's masked-row conventions for non-constant
 * operands ((-inf) - (-inf) = -inf, 0 / 0 = 0) are not kept by the a - b and a / b rewrites:
 * code that evaluates canonical forms on masked rows must guard them.
 * Results are memoized per thread and per arena (reset when current_arena() changes), so a
 * repeated call costs a hash lookup; simplify(simplify(e)) == simplify(e).
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
