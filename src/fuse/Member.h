/** \file Member.h
 * The verdict of the fusion algebra for one reduction of a cascade: which form of docs/design.md §3 it
 * fits (with its explicit parts G, H, φ or polynomial basis), or why it fits none.
 */
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ir/Expr.h"
#include "ir/Program.h"

namespace rf {

enum class Relation { Independent, Multiplicative, Additive, Monotone, Polynomial, ExpPolynomial, None };
const char *relation_name(Relation r);
/** The forms whose state is a vector of shifted moments S_α (polynomial, exponential-polynomial). */
inline bool is_shift_form(Relation r) { return r == Relation::Polynomial || r == Relation::ExpPolynomial; }

/** One reduction r = ⊕_j F(x_j, d) analysed against the earlier members d of its pass.
 *  F is written over "d atoms": symbols δ_i standing for maximal sub-expressions of F that depend
 *  only on earlier members (e.g. δ = -m in exp(S - m), δ = mu.sum / C in (X - mu.sum / C)^2). */
struct MemberAnalysis {
    std::string name;
    ReduceOp op = ReduceOp::Sum;
    int64_t k = 0;                     ///< top-k: k when it is a literal (0 when K is a size)
    Expr k_extent = nullptr;           ///< top-k: the extent of the k axis (a literal or a size expression)
    Relation relation = Relation::None;
    bool exact = true;                 ///< false when a narrow rounding cast mixes x and d (docs/design.md §3)
    std::vector<std::string> deps;     ///< earlier members F depends on (in this pass)
    Expr F = nullptr;                  ///< simplified body over x atoms and δ symbols
    std::vector<Expr> delta_syms;      ///< δ_i symbols
    std::vector<Expr> delta_exprs;     ///< δ_i := expression over member loads (simplified)

    // Multiplicative: F = G(x) · H(δ); H = H_run · H_def where H_run holds the exp factors that keep
    // the running state in range and H_def is applied once in the epilogue (docs/design.md §3).
    Expr G = nullptr, H = nullptr, H_run = nullptr, H_def = nullptr;
    Expr U = nullptr;      ///< update term G · H_run(δ), simplified (exps merged: exp(S - m) · V)
    /** H_def holds an exponential (an exponent term deferred beside a stabilizing one, Multiplicative.cpp
     *  split_deferred): updates add U, never the body as written over H_def, which may overflow. */
    bool defers_exp = false;
    Expr alpha = nullptr;  ///< H_run(δ_new) / H_run(δ_old), simplified, over delta_syms and old_syms
    std::vector<Expr> old_syms;  ///< δ_i@old symbols used by alpha

    // Additive / monotone (selection ops): F = φ_δ(Gsel(x)), φ strictly monotone.
    Expr Gsel = nullptr;
    Expr phi = nullptr;    ///< φ over the symbol u and δ
    Expr u_sym = nullptr;
    bool increasing = true;
    /** φ in the spec's literal form (the body with its x-core replaced by u), when the core appears
     *  there as written: evaluating it keeps the masked-row conventions (exp(-inf - -inf) = 0) that
     *  the canonical φ loses. Null when the core only exists after simplification. */
    Expr phi_literal = nullptr;
    Expr Gsel_literal = nullptr;  ///< Gsel as written in the body (keeps 0/0 = 0), when it appears there

    // Polynomial (shift form): F = Σ_α D_α(x, c) (δ - c)^α exactly, for |α| <= degree.
    int degree = 0;
    std::vector<std::vector<int>> alphas;  ///< multi-indices, alphas[0] = all zeros
    std::vector<Expr> basis;               ///< D_α(x, δ) = ∂^α F / α! evaluated at δ (= c)
    // Exponential-polynomial: F = e^{λ·δ} Q(x, δ) with Q polynomial; basis = e^{λ·δ} ∂^α Q / α!,
    // H_run = e^{λ·δ}, alpha = e^{λ·(δ - δ_old)} multiplies the binomial shift (docs/design.md §3).
    std::vector<double> rates;             ///< λ_i per δ_i (empty for the other forms)
    /** Shift forms: companion[β] names an earlier multiplicative member of the pass whose running sum
     *  is S_β / companion_scale[β] (the entropy's S_1 = −s), "" when none (fuse/Companions.cpp). */
    std::vector<std::string> companion;
    std::vector<double> companion_scale;

    std::vector<std::string> preconditions;  ///< facts the derivation relies on, as text
    std::string reason;                      ///< why not fusible (relation None) or notes
    std::string counterexample;              ///< concrete numbers showing non-fusibility
    int checked_points = 0;                  ///< random points at which the verdict was re-checked
};

/** Context the member analysis needs: which tensors are members of the pass (the d), the axis
 *  variables of the reduction (the j), and sign facts about tensors. */
struct AnalysisContext {
    const Program *program = nullptr;
    std::set<std::string> pass_members;  ///< names of the earlier members of this pass
    bool allow_inexact = false;          ///< --approx: fuse through rounding casts
};

/** Analyses one reduction definition. Never throws for unfusible bodies (relation None with a
 *  reason); throws InternalError when a derived form fails its numeric re-check. */
MemberAnalysis analyze_member(const TensorDef &def, const AnalysisContext &ctx);

/** An earlier member of a pass, as find_companions sees it. */
struct Companion {
    const TensorDef *def = nullptr;
    const MemberAnalysis *analysis = nullptr;
};
/** Fills t.companion / t.companion_scale: which moments of a shift-form member t equal ±1 times the
 *  running sum of an earlier multiplicative member of its pass (fuse/Companions.cpp). */
void find_companions(MemberAnalysis &t, const TensorDef &t_def, const std::vector<Companion> &earlier);

/** True for a node that rounds its argument: a cast to a type narrower than f32, round, floor, ceil. */
bool is_rounding(Expr n);
/** e in exact arithmetic: every cast and every rounding (round, floor, ceil) removed. */
Expr strip_rounding(Expr e);

/** Maps δ and u symbols back to their expressions for display: `exp(-m[r])`, not `exp(δ0)`. */
Expr restore_deltas(const MemberAnalysis &m, Expr e);

}  // namespace rf
