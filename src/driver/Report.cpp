/** \file Report.cpp
 * The `analyze` report in its two forms (text for people, JSON per docs/cli.md for tools) and the
 * `--emit plan` dump, all printed from the plan's derived expressions.
 */
#include <algorithm>
#include <sstream>

#include "driver/Report.h"
#include "sym/Simplify.h"

namespace rf {

namespace {

nlohmann::json member_json(const MemberAnalysis &m, int pass) {
    MemberText t = describe_member(m);
    nlohmann::json j;
    j["name"] = m.name;
    j["op"] = reduce_name(m.op);
    if (m.op == ReduceOp::TopK) {
        if (m.k_extent && m.k_extent->is_const()) j["k"] = static_cast<int64_t>(m.k_extent->value);
        else if (m.k_extent) j["k"] = to_string(m.k_extent);
    }
    j["relation"] = relation_name(m.relation);
    j["exact"] = m.exact;
    j["pass"] = pass;
    j["depends_on"] = m.deps;
    if (!t.G.empty()) j["G"] = t.G;
    if (!t.H.empty()) j["H"] = t.H;
    if (!t.phi.empty()) j["phi"] = t.phi;
    if (m.relation == Relation::Monotone || m.relation == Relation::Additive) j["increasing"] = m.increasing;
    if (m.relation == Relation::Multiplicative) {
        j["H_running"] = to_string(restore_deltas(m, m.H_run));
        j["H_deferred"] = t.deferred;
        j["rescale"] = !m.H_run->is_const(1);
    }
    if (is_shift_form(m.relation)) {
        if (!t.matrix.empty()) j["shift"] = t.matrix;
        j["degree"] = m.degree;
        j["basis"] = t.basis;
        // Extension (docs/cli.md): the moments an earlier member already sums, with their sign.
        nlohmann::json comp = nlohmann::json::array();
        for (size_t b = 0; b < m.companion.size(); b++)
            if (!m.companion[b].empty()) comp.push_back({{"moment", static_cast<int64_t>(b)}, {"member", m.companion[b]}, {"scale", m.companion_scale[b]}});
        if (!comp.empty()) j["companions"] = comp;
        // Extension: exponent terms deferred to the epilogue beside a running max (docs/design.md §3).
        if (!t.deferred.empty()) j["H_deferred"] = t.deferred;
    }
    j["init"] = t.init;
    j["update"] = t.update;
    j["merge"] = t.merge;
    if (!t.epilogue.empty()) j["epilogue"] = t.epilogue;
    if (!m.preconditions.empty()) j["preconditions"] = m.preconditions;
    if (m.checked_points) j["checked_points"] = m.checked_points;
    if (!m.reason.empty()) j["reason"] = m.reason;
    if (!m.counterexample.empty()) j["counterexample"] = m.counterexample;
    return j;
}

/** The rate splits whose parts are members of the chain (docs/design.md §3, the rate split). */
std::vector<const RateSplit *> splits_of(const Compilation &c, const ChainPlan &ch) {
    std::vector<const RateSplit *> out;
    for (const RateSplit &s : c.rate_splits)
        if (std::find(ch.members.begin(), ch.members.end(), s.parts[0]) != ch.members.end()) out.push_back(&s);
    return out;
}

}  // namespace

nlohmann::json analysis_json(const Compilation &c) {
    nlohmann::json j;
    j["file"] = c.file;
    j["chains"] = nlohmann::json::array();
    for (const ChainPlan &ch : c.plan.chains) {
        nlohmann::json cj;
        cj["axes"] = ch.axes;
        std::vector<std::string> exts;
        for (Expr e : ch.axis_extents) exts.push_back(to_string(e));
        cj["axis_extents"] = exts;
        cj["members"] = ch.members;
        cj["fused"] = ch.fused;
        cj["strategy"] = to_string(ch.strategy);
        cj["strategy_reason"] = ch.strategy_reason;
        if (ch.strategy == Strategy::MultiSegment) cj["segments"] = ch.segments;
        cj["passes"] = ch.passes.size();
        cj["prologue"] = ch.prologue;
        cj["epilogue"] = ch.epilogue;
        if (!ch.note.empty()) cj["note"] = ch.note;
        for (const RateSplit *rs : splits_of(c, ch))
            cj["rate_splits"].push_back({{"name", rs->name}, {"parts", rs->parts}, {"rates", rs->rates}});
        cj["members_detail"] = nlohmann::json::array();
        for (size_t k = 0; k < ch.members.size(); k++) cj["members_detail"].push_back(member_json(ch.verdicts[k], ch.pass_of[k]));
        j["chains"].push_back(cj);
    }
    j["not_fused"] = nlohmann::json::array();
    for (const NotFused &n : c.plan.not_fused) {
        nlohmann::json nj{{"name", n.name}, {"reason", n.reason}};
        if (!n.counterexample.empty()) nj["counterexample"] = n.counterexample;
        j["not_fused"].push_back(nj);
    }
    j["analyze_ms"] = c.analyze_ms;
    return j;
}

std::string analysis_text(const Compilation &c) {
    std::ostringstream os;
    os << c.file << ": " << c.plan.chains.size() << " chain" << (c.plan.chains.size() == 1 ? "" : "s") << "\n";
    int i = 0;
    for (const ChainPlan &ch : c.plan.chains) {
        os << "\nchain " << i++ << " over ";
        for (size_t a = 0; a < ch.axes.size(); a++)
            os << (a ? ", " : "") << ch.axes[a] << " < " << to_string(ch.axis_extents[a]);
        os << ": " << (ch.fused ? "fused" : "not fused") << ", strategy " << to_string(ch.strategy) << "\n";
        os << "  why: " << ch.strategy_reason << "\n";
        for (const RateSplit *rs : splits_of(c, ch)) {
            os << "  split by exponential rate: " << to_string(*rs) << "\n";
            for (size_t k = 0; k < rs->parts.size(); k++) os << "      " << rs->parts[k] << ": rate " << rs->rates[k] << "\n";
        }
        if (!ch.prologue.empty()) {
            os << "  prologue (per tile):";
            for (const std::string &p : ch.prologue) os << " " << p;
            os << "\n";
        }
        for (size_t k = 0; k < ch.members.size(); k++) {
            const MemberAnalysis &m = ch.verdicts[k];
            MemberText t = describe_member(m);
            os << "  " << m.name << " = " << reduce_name(m.op) << ": " << relation_name(m.relation);
            if (!m.exact) os << " (exact: false)";
            if (ch.passes.size() > 1) os << "  [pass " << ch.pass_of[k] << "]";
            os << "\n";
            if (!t.G.empty()) os << "      G = " << t.G << "\n";
            if (!t.H.empty()) os << "      H = " << t.H << "\n";
            if (!t.phi.empty()) os << "      φ(u) = " << t.phi << (m.increasing ? "  (increasing)" : "  (decreasing)") << "\n";
            if (m.relation == Relation::Multiplicative && !m.H_def->is_const(1))
                os << "      deferred to the epilogue: " << t.deferred << "\n";
            for (const std::string &b : t.basis) os << "      " << b << "\n";
            if (!t.matrix.empty()) {
                os << "      shift (ref_old → ref, triangular):\n";
                for (const std::string &l : t.matrix) os << "        " << l << "\n";
            }
            os << "      init:   " << t.init << "\n";
            os << "      update: " << t.update << "\n";
            os << "      merge:  " << t.merge << "\n";
            if (!t.epilogue.empty()) os << "      final:  " << t.epilogue << "\n";
            if (!m.reason.empty()) os << "      reason: " << m.reason << "\n";
            if (!m.counterexample.empty()) os << "      counterexample: " << m.counterexample << "\n";
        }
        if (!ch.epilogue.empty()) {
            os << "  epilogue:";
            for (const std::string &e : ch.epilogue) os << " " << e;
            os << "\n";
        }
        if (!ch.note.empty()) os << "  note: " << ch.note << "\n";
    }
    if (!c.plan.not_fused.empty()) {
        os << "\nnot fused:\n";
        for (const NotFused &n : c.plan.not_fused) os << "  " << n.name << ": " << n.reason << "\n";
    }
    return os.str();
}

std::string plan_dump(const Compilation &c) {
    std::ostringstream os;
    for (const RateSplit &s : c.rate_splits) os << "split " << to_string(s) << "\n";
    for (const ChainPlan &ch : c.plan.chains) {
        os << "chain [";
        for (size_t k = 0; k < ch.members.size(); k++) os << (k ? ", " : "") << ch.members[k];
        os << "] axes [";
        for (size_t a = 0; a < ch.axes.size(); a++) os << (a ? ", " : "") << ch.axes[a];
        os << "] row " << ch.n_row << " strategy " << to_string(ch.strategy) << "\n";
        for (size_t p = 0; p < ch.passes.size(); p++) {
            os << "  pass " << p << "\n";
            for (const MemberAnalysis &m : ch.passes[p].members_exec) {
                os << "    " << m.name << ": " << relation_name(m.relation) << "\n";
                for (size_t i = 0; i < m.delta_syms.size(); i++)
                    os << "      " << m.delta_syms[i]->name << " := " << to_string(m.delta_exprs[i]) << "\n";
                if (m.F) os << "      F = " << to_string(m.F) << "\n";
                if (m.U) os << "      U = " << to_string(m.U) << "\n";
                if (m.alpha) os << "      alpha = " << to_string(m.alpha) << "\n";
                if (m.H_def) os << "      H_def = " << to_string(m.H_def) << "\n";
                if (m.Gsel) os << "      Gsel = " << to_string(m.Gsel) << ", phi = " << to_string(m.phi) << "\n";
                for (size_t b = 0; b < m.basis.size(); b++) os << "      D" << b << " = " << to_string(m.basis[b]) << "\n";
            }
        }
    }
    return os.str();
}

}  // namespace rf
