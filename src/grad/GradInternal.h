/** \file GradInternal.h
 * What the passes of src/grad/ share: the shift laws of stabilizers (Stabilizer.cpp), the gather
 * form of one load's contribution (Gather.cpp), reverse mode over the definitions (Reverse.cpp),
 * the rounding check (Rounding.cpp) and the residual choice (Residuals.cpp). Grad.cpp runs them.
 */
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grad/Grad.h"
#include "ir/Program.h"

namespace rf::grad {

/** Hands out spec identifiers that collide with nothing already taken (global names and every
 *  index variable of the forward, so a new global never collides with a local). */
class Names {
public:
    explicit Names(const Program &p);
    /** `base` (made an identifier), or base2, base3, ... when taken; the result is taken. */
    std::string fresh(const std::string &base);
    void take(const std::string &n) { taken_.insert(n); }

private:
    std::set<std::string> taken_;
};

/** A stabilizer m whose shift the outputs ignore. Under m -> m + t every definition T downstream of
 *  m becomes T·exp(-k_T·t) (`k` holds k_T; 0 = invariant), and every float output is invariant.
 *  `normalizer` is a positive sum l over m's row with k_l != 0 (empty if none): at the point of the
 *  orbit t = log(l)/k_l the normalizer is 1 and m is L = m + log(l)/k_l. */
struct ShiftLaw {
    std::string stabilizer;
    std::map<std::string, double> k;
    std::string normalizer;
    double k_normalizer = 0;
};

/** The cancelling stabilizers of p (Stabilizer.cpp): max/min definitions whose shift laws hold. */
std::vector<ShiftLaw> cancelling_stabilizers(const Program &p);

/** Index variables in scope where a contribution is formed: a definition's variables then its
 *  reduction axes, each with its extent. */
struct Scope {
    std::vector<Expr> vars;
    std::vector<Expr> extents;
};

/** The gather form (Gather.cpp) of `term` (an expression over `scope`) contributed to the tensor
 *  loaded by `load`, as an expression over `target_vars` (the tensor's own variables):
 *  dX[w] = sum over the scope variables that w does not determine of term. Loads whose index at a
 *  dimension is a scope variable (once) are handled directly, `h / G` (G free of index variables)
 *  by summing h under the mask G·w <= h < G·w + G; other index forms are a UserError at `loc`
 *  naming the load and the definition `def_name`, and so is a variable whose extent differs from the
 *  dimension's (`target_extents`: a partial read such as MLA's e < Dv of a Dk-wide row). */
Expr gather(Expr term, Expr load, const Scope &scope, const std::vector<Expr> &target_vars,
            const std::vector<Expr> &target_extents, SourceLoc loc, const std::string &def_name);

/** UserError at def.loc when `e` rounds (a narrowing cast, round, floor, ceil) on a path that
 *  depends on a load of a tensor in `active`, unless straight_through (Rounding.cpp); with
 *  straight_through, the value of `e` to differentiate: round(u) becomes the cast i64(u), which has
 *  the same value and the identity's derivative. */
Expr check_rounding(Expr e, const TensorDef &def, const std::set<std::string> &active, bool straight_through);

/** Rounding subtrees (a narrowing cast, round, floor, ceil) hidden behind placeholder symbols, so that
 *  the simplifier and the derivative leave them exactly as written and the backward rounds the same
 *  floating-point value as the forward (Rounding.cpp). */
class KeptRoundings {
public:
    /** e with each rounding n for which keep(n) holds replaced by its placeholder. */
    Expr hide(Expr e, const std::function<bool(Expr)> &keep);
    /** e with the placeholders replaced by their roundings. */
    Expr restore(Expr e) const;

private:
    std::map<Expr, Expr> placeholder_of_, rounding_of_;
};

/** simplify(e) with every rounding subtree left as written. */
Expr simplify_keeping_roundings(Expr e);

/** The backward's definitions before residuals are resolved (Reverse.cpp): they load forward
 *  definitions by their forward names. */
struct RawBackward {
    std::vector<TensorDef> defs;                    ///< adjoints, argmax helpers, gradients, in order
    std::vector<std::string> adjoint_inputs;        ///< forward outputs O whose dO is an input
    std::map<std::string, std::string> adjoint_of;  ///< forward output -> its adjoint input's name
    std::vector<std::pair<std::string, std::string>> gradients;  ///< input -> gradient definition name
    std::vector<std::string> notes;
};

RawBackward reverse_mode(const Program &p, const std::vector<std::string> &wrt, const std::vector<ShiftLaw> &laws,
                         bool straight_through, Names &names);

/** The backward and forward-with-residuals programs (Residuals.cpp), before printing. */
struct Resolved {
    Program backward;
    Program forward;
    std::vector<std::string> notes;
};

Resolved resolve_residuals(const Program &p, RawBackward raw, const std::vector<ShiftLaw> &laws, Names &names);

/** Renames index variables: every Var in `from` (by name) becomes the matching Expr of `to`,
 *  simultaneously. */
Expr rename_vars(Expr e, const std::map<std::string, Expr> &to);

/** Negative powers of the backward read as 0 where their base is 0 (EmptyRows.cpp): a fully masked
 *  row's gradient is 0, as its forward output is. */
void guard_empty_reciprocals(Program &backward, const Program &forward);

}  // namespace rf::grad
