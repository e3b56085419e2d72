/** \file LowerCompanions.cpp
 * Companion sums in the tile update (fuse/Companions.cpp): a multiplicative member s whose tile sum
 * is κ times the tile sum of a moment S_β of a later shift-form member t (κ = ±1) gets that sum from
 * t's loop, Σ_tile U_s = κ·Σ_tile B_β, so each element's exponential is evaluated once (the softmax
 * entropy: one exp per element for s and t instead of two). s keeps its own state, rescale, tags and
 * merge; only where its tile sum is computed moves.
 *
 * Preconditions, checked here: both members have no extra points; t's reference is the running value
 * itself (no estimate of a partial sum, which s would not use); s is updated by the plain path (not a
 * GEMM, not a shared factor, no stored terms, no row flags); no member after s up to t reads s (its
 * sum lands only at t's update).
 */
#include <algorithm>

#include "tile/PassLowering.h"

namespace rf::tile::lowering {

void PassLowering::plan_companions(const std::string &P) {
    companion_into_.clear();
    companion_sums_.clear();
    auto by_name = [&](const std::string &n) -> const MemberInfo * {
        for (const MemberInfo &m : members_)
            if (m.def->name == n) return &m;
        return nullptr;
    };
    auto read_between = [&](int lo, int hi, const std::string &n) {
        for (const MemberInfo &q : members_)
            if (q.k > lo && q.k <= hi && std::count(q.a->deps.begin(), q.a->deps.end(), n)) return true;
        return false;
    };
    for (const MemberInfo &t : members_) {
        const MemberAnalysis &a = *t.a;
        if (t.form != Form::Poly || !t.extra_vars.empty()) continue;
        if (deltas(t, int_c(0), Mode{P, true, true}) != deltas(t, int_c(0), Mode{P, false, true})) continue;
        for (size_t b = 0; b < a.companion.size(); b++) {
            const MemberInfo *s = a.companion[b].empty() ? nullptr : by_name(a.companion[b]);
            if (!s || s->k >= t.k || s->form != Form::Mult || s->a->op != ReduceOp::Sum || !s->extra_vars.empty()) continue;
            if (std::abs(a.companion_scale[b]) != 1.0) continue;
            if (companion_into_.count(s->k) || gemm_of_.count(s->k) || row_flagged_.count(s->k) ||
                ctx_.term_store.count(s->def->name) || shared_term(P, *s))
                continue;
            if (read_between(s->k, t.k, s->def->name)) continue;
            companion_into_[s->k] = t.k;
            companion_sums_[t.k].push_back({b, s->k});
        }
    }
}

std::vector<StmtP> PassLowering::companion_updates(const std::string &P, const MemberInfo &t, Expr x,
                                                   const std::vector<std::string> &tile_sums) {
    std::vector<StmtP> s;
    auto it = companion_sums_.find(t.k);
    if (it == companion_sums_.end()) return s;
    for (const auto &[b, k] : it->second) {
        const MemberInfo &m = members_.at(static_cast<size_t>(k));
        Expr sum = local_var(tile_sums.at(b));
        if (t.a->companion_scale[b] < 0) sum = make_neg(sum);
        // Both have one point (x = 0): indexing s's slot by t's point variable keeps the one access
        // pattern every state slot has, which the GPU placement of states relies on.
        s.push_back(accum(ReduceOp::Sum, acc(P, m, x), sum));
    }
    return s;
}

}  // namespace rf::tile::lowering
