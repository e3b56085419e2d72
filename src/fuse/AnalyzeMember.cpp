/** \file AnalyzeMember.cpp
 * Chooses the form (docs/design.md §3) that a reduction fits against the earlier members of its pass,
 * in order of simplicity (independent, multiplicative, polynomial, exponential-polynomial for sums; additive, monotone for
 * selections), certifies it numerically, and otherwise explains why it does not fuse.
 */
#include "fuse/Forms.h"
#include "sym/Simplify.h"
#include "support/Error.h"

namespace rf {

using namespace fuse_detail;

const char *relation_name(Relation r) {
    switch (r) {
    case Relation::Independent: return "independent";
    case Relation::Multiplicative: return "multiplicative";
    case Relation::Additive: return "additive";
    case Relation::Monotone: return "monotone";
    case Relation::Polynomial: return "polynomial";
    case Relation::ExpPolynomial: return "exp-polynomial";
    case Relation::None: return "none";
    }
    return "?";
}

Expr restore_deltas(const MemberAnalysis &m, Expr e) {
    if (!e) return e;
    for (size_t i = 0; i < m.delta_syms.size(); i++) e = substitute(e, m.delta_syms[i], m.delta_exprs[i]);
    return simplify(e);
}

namespace {
constexpr int kCertifyPoints = 128;

bool is_selection(ReduceOp op) { return op != ReduceOp::Sum && op != ReduceOp::Prod; }

/** The name of the form an attempt tried, as it opens that attempt's reason. */
const char *form_label(Relation r) {
    switch (r) {
    case Relation::Multiplicative: return "multiplicative form: ";
    case Relation::Polynomial: return "polynomial form: ";
    case Relation::ExpPolynomial: return "exponential-polynomial form: ";
    case Relation::Monotone: case Relation::Additive: return "monotone form: ";
    default: return "";
    }
}
}  // namespace

MemberAnalysis analyze_member(const TensorDef &def, const AnalysisContext &ctx) {
    MemberAnalysis m;
    m.name = def.name;
    m.op = def.body->rop;
    m.k = def.body->k;
    if (def.is_topk()) m.k_extent = def.extents.back();
    for (const std::string &n : ctx.pass_members)
        if (mentions(def.body, n)) m.deps.push_back(n);

    if (m.deps.empty()) {
        m.relation = Relation::Independent;
        m.F = simplify(def.body->body());
        return m;
    }
    std::string reason;
    std::optional<Body> body = make_body(def, ctx, reason);
    if (!body) {
        m.reason = reason;
        return m;
    }
    m.F = body->F;
    m.delta_syms = body->delta_syms;
    m.delta_exprs = body->delta_exprs;
    m.exact = !body->inexact;
    if (!depends_on_d(*body, body->F)) {
        // The dependence simplified away (e.g. m - m): the member is independent after all.
        m.relation = Relation::Independent;
        return m;
    }

    std::vector<std::string> reasons;
    auto attempt = [&](Relation r, bool (*derive)(const Body &, MemberAnalysis &, std::string &)) {
        MemberAnalysis trial = m;
        trial.relation = r;
        std::string why;
        if (!derive(*body, trial, why)) {
            reasons.push_back(form_label(r) + why);
            return false;
        }
        int points = certify(*body, trial, kCertifyPoints);
        if (points == 0) {
            reasons.push_back(std::string("the ") + relation_name(r) +
                              " form could not be re-checked at enough random points");
            return false;
        }
        trial.checked_points = points;
        m = trial;
        return true;
    };

    if (!is_selection(m.op)) {
        if (attempt(Relation::Multiplicative, derive_multiplicative)) return m;
        if (m.op == ReduceOp::Sum && !body->inexact && attempt(Relation::Polynomial, derive_polynomial)) return m;
        if (m.op == ReduceOp::Sum && !body->inexact && attempt(Relation::ExpPolynomial, derive_exp_polynomial)) return m;
        if (m.op == ReduceOp::Prod)
            reasons.push_back("polynomial and exponential-polynomial forms: they apply to sums only (a product of "
                              "shifted terms is not a linear map of a finite state)");
    } else {
        if (attempt(Relation::Monotone, derive_selection)) return m;  // sets Additive when φ = u + H
    }
    m.relation = Relation::None;
    m.reason.clear();
    for (const std::string &r : reasons) m.reason += (m.reason.empty() ? "" : "; ") + r;
    // Messages are built over δ symbols; show the earlier results they stand for (δ10 before δ1).
    for (size_t i = m.delta_syms.size(); i-- > 0;) {
        const std::string &sym = m.delta_syms[i]->name;
        std::string text = to_string(m.delta_exprs[i]);
        if (m.delta_exprs[i]->kind != Kind::Load) text = "(" + text + ")";
        for (size_t pos; (pos = m.reason.find(sym)) != std::string::npos;) m.reason.replace(pos, sym.size(), text);
    }
    m.counterexample = find_counterexample(*body, m.op);
    return m;
}

}  // namespace rf
