/** \file Forms.h
 * Internal interface between the member analysis and the per-form derivations (one file each):
 * the abstraction of F over x and d atoms, the multiplicative, selection and polynomial forms, and
 * the numeric certificate and counterexample search.
 */
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fuse/Member.h"
#include "sym/Sign.h"

namespace rf::fuse_detail {

/** What the analysis of one body works with. */
struct Body {
    Expr F = nullptr;               ///< simplified, nested reductions over d unrolled, d abstracted
    Expr literal = nullptr;         ///< the body exactly as written (over member loads)
    std::set<Expr> axis_vars;       ///< the reduction's own axes (x dependence)
    std::vector<Expr> delta_syms;   ///< δ_i (Symbol vars)
    std::vector<Expr> delta_exprs;  ///< δ_i := expression over member loads
    /** Per δ_i: +1 when it is a running max member of the pass (its running value only rises), -1 a
     *  running min, 0 anything else. A term c·δ_i of an exponent with c·direction < 0 keeps the
     *  running terms in range (exp(X - m) <= 1); other exponent terms are deferred where one does. */
    std::vector<int> delta_directions;
    /** Per δ_i: true when it reads the running value of a sum or product member of the pass (a running
     *  mean, say), which can move either way before it settles. */
    std::vector<bool> delta_running_sums;
    Facts facts;                    ///< sign facts: member tensors, δ symbols, input intervals
    bool inexact = false;           ///< a narrow cast mixes x and d somewhere in F
    std::string inexact_cast;       ///< the first such cast, as text

    /** Whether the exponent term c·δ_i keeps the running terms in range: δ_i a running max and
     *  c < 0, or a running min and c > 0 (exp(X - m) <= 1). The rule both the multiplicative form
     *  (per exponent term, Multiplicative.cpp split_deferred) and the exponential-polynomial form
     *  (per rate, ExpPolynomial.cpp) defer the other exponent terms by. */
    bool stabilizes(size_t i, double c) const { return c * delta_directions[i] < 0; }
    /** Whether the exponent term c·δ_i, kept in the running state with nothing stabilizing beside it,
     *  can overflow where the spec does not: δ_i reads a running sum or product, which moves either way
     *  before it settles (the running mean of a row of values near 100 starts near 0, so exp(X - mu_run)
     *  is near exp(100) while every term of the spec is near exp(0)). A running max or min moves one
     *  way only: with the stabilizing sign it keeps the terms in range, with the other its terms stay
     *  below the spec's (Multiplicative.cpp, ExpPolynomial.cpp). */
    bool unbounded_alone(size_t i, double c) const { return c != 0 && delta_running_sums[i]; }
};

bool depends_on_x(const Body &b, Expr e);
bool depends_on_d(const Body &b, Expr e);

/** Builds the Body of a reduction definition against the members of its pass. Returns nullopt
 *  (with reason) when F cannot be put in analysable form (e.g. d inside a reduction over a
 *  symbolic axis). */
std::optional<Body> make_body(const TensorDef &def, const AnalysisContext &ctx, std::string &reason);

/** Form 1/5: F = G(x) · H(δ). Fills G, H, H_run, H_def, U, alpha, old_syms. */
bool derive_multiplicative(const Body &b, MemberAnalysis &m, std::string &reason);
/** Forms 2/3: F = φ_δ(G(x)) with φ strictly monotone (additive when φ = u + H(δ)). */
bool derive_selection(const Body &b, MemberAnalysis &m, std::string &reason);
/** Form 4: F polynomial of bounded degree in δ; fills degree, alphas, basis. */
bool derive_polynomial(const Body &b, MemberAnalysis &m, std::string &reason);
/** Form 6: F = e^{λ·δ} Q(x, δ) with Q polynomial in δ; fills rates, alphas, basis, alpha, old_syms. */
bool derive_exp_polynomial(const Body &b, MemberAnalysis &m, std::string &reason);

/** Re-checks the derived parts of m against F at >= min_points random points. Returns the number
 *  of points checked; throws InternalError on a disagreement. Returns 0 when too few valid points
 *  could be drawn (the caller then refuses the verdict). */
int certify(const Body &b, const MemberAnalysis &m, int min_points);

/** Searches concrete values that show F is not of the form needed by its operator. */
std::string find_counterexample(const Body &b, ReduceOp op);

/** A valuation of atoms for numeric checks. */
struct Valuation {
    std::map<Expr, double> values;  // by atom node (Var or Load)
    double eval(Expr e) const;
};

/** to_string(e), shortened to at most 160 characters for messages. */
std::string shown(Expr e);


/** The atoms (Vars and Loads, outside reduction binders) of the given expressions. */
std::vector<Expr> collect_atoms(const std::vector<Expr> &es);

}  // namespace rf::fuse_detail
