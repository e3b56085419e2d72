/** \file PlanInterpFinalize.cpp
 * The plan interpreter's finalization of a row: each member's final value from its state (the
 * multiplicative rescale and H_def, the shift forms' deferred terms, φ of a selection), the outputs
 * written member by member, and the literal recomputes of rows whose δ is not finite (sums, shift
 * forms and top-k lists ranked on F itself).
 */
#include "interp/PlanInterpImpl.h"

namespace rf::plan_interp {

const Interp::MultFinal &Interp::mult_final(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra) {
    const MemberRt &m = mem[k];
    const MemberAnalysis &a = *m.a;
    if (memo_ && m.row_only)
        for (const MultFinal &f : final_memo_)
            if (f.st == &st && f.k == k) return f;
    // Row-only members keep their scale tag at the row's first point (the same at every point).
    const Elem &e = st.members[k][static_cast<size_t>(m.row_only ? 0 : extra)];
    std::vector<double> raw = deltas(st, mem, k, extra, false, false);
    std::vector<double> safe = raw;
    for (double &v : safe)
        if (!std::isfinite(v)) v = 0;
    double n = static_cast<double>(st.n);
    MultFinal f{&st, k, safe != e.tag, 1, 1};
    if (f.rescale) {
        double al = alpha(m, extra, safe, e.tag);
        f.alpha = a.op == ReduceOp::Prod ? std::pow(al, n) : al;
    }
    Evaluator ev(env(nullptr, nullptr, false));
    bind_point(ev, m, extra);
    for (size_t i = 0; i < raw.size(); i++) ev.bind(a.delta_syms[i], raw[i]);
    double hdef = ev.eval(a.H_def);
    f.hdef = a.op == ReduceOp::Prod ? std::pow(hdef, n) : hdef;
    if (!(memo_ && m.row_only)) {
        final_scratch_ = f;
        return final_scratch_;
    }
    final_memo_.push_back(f);
    return final_memo_.back();
}

double Interp::finalize(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra, int64_t slot,
                bool want_index) {
    const MemberRt &m = mem[k];
    const MemberAnalysis &a = *m.a;
    const Elem &e = st.members[k][static_cast<size_t>(extra)];
    switch (a.relation) {
    case Relation::Multiplicative: {
        if (!e.seen || e.acc == 0) return 0;  // an empty sum, or all terms zero
        const MultFinal &f = mult_final(st, mem, k, extra);
        double s = e.acc;
        if (f.rescale) s = rnd(s * f.alpha);
        return rnd(s * f.hdef);
    }
    case Relation::Polynomial:
    case Relation::ExpPolynomial: {
        if (!e.seen) return 0;
        std::vector<double> d = deltas(st, mem, k, extra, false, false);
        double v = shift(m, extra, e.S, e.tag, d)[0];
        if (a.H_def && !a.H_def->is_const(1)) {  // deferred exponent terms, at the final δ
            Evaluator ev(env(nullptr, nullptr, false));
            bind_point(ev, m, extra);
            for (size_t i = 0; i < d.size(); i++) ev.bind(a.delta_syms[i], d[i]);
            v = rnd(v * ev.eval(a.H_def));
        }
        return v;
    }
    default: break;
    }
    bool sel = a.relation == Relation::Additive || a.relation == Relation::Monotone;
    ReduceOp op = sel ? m.sel_op : a.op;
    double u;
    if (op == ReduceOp::TopK) {
        RF_INTERNAL_ASSERT(slot < static_cast<int64_t>(e.list.size())) << "top-k slot not filled";
        const auto &entry = e.list[static_cast<size_t>(slot)];
        if (want_index) return static_cast<double>(entry.second);
        u = (sel && !a.increasing) ? -entry.first : entry.first;
    } else if (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) {
        return e.seen ? e.index : 0;
    } else if (op == ReduceOp::Sum) {
        u = e.seen ? rnd(e.acc + rnd(static_cast<double>(st.n) * e.tag[0])) : 0.0;
    } else {
        u = e.acc;
    }
    if (!sel) return u;
    Evaluator ev(env(&st, &mem, false));
    ev.bind(a.u_sym, u);
    bind_point(ev, m, extra);  // φ may read inputs at the row (a bias, a nested max over another axis)
    // φ as written keeps the masked-row conventions: exp(-inf - (-inf)) / 0 = 0, not NaN.
    if (a.phi_literal) return ev.eval(a.phi_literal);
    std::vector<double> d = deltas(st, mem, k, extra, false, false);
    for (size_t i = 0; i < d.size(); i++) ev.bind(a.delta_syms[i], d[i]);
    return ev.eval(a.phi);
}

void Interp::write_outputs(const State &st, const std::vector<MemberRt> &mem) {
    memo_row(memo_);
    final_mode_ = true;
    std::set<std::string> literal;
    for (size_t k = 0; k < mem.size(); k++) {
        const MemberRt &m = mem[k];
        Tensor &out = t_[m.def->name];
        bool relit = false;
        for (const std::string &d : m.a->deps) relit |= literal.count(d) > 0;
        // From exported states (finalize_states) there are no inputs along the axis to recompute from:
        // the state's own finalization stands (0 for an empty or all-zero sum, as the literal gives).
        if (!from_states_ && !relit && (m.a->relation == Relation::Multiplicative || is_shift_form(m.a->relation))) {
            for (int64_t x = 0; x < m.extra_count && !relit; x++) {
                for (double v : deltas(st, mem, k, x, false, false)) relit |= !std::isfinite(v);
                relit |= !delta_inputs_finite(st, mem, k, x);
            }
        }
        if (!from_states_ && m.def->is_topk() && (m.a->relation == Relation::Additive || m.a->relation == Relation::Monotone) &&
            topk_delta_not_finite(st, mem, k)) {
            literal_topk(m);
            continue;
        }
        if (relit && !m.def->is_topk()) {
            literal.insert(m.def->name);
            for (int64_t x = 0; x < m.extra_count; x++) {
                Evaluator ev(env(nullptr, nullptr, false));
                bind_point(ev, m, x);
                out.data[static_cast<size_t>(flat_offset(out, m, x))] = ev.eval(m.def->body);
            }
            continue;
        }
        std::vector<int64_t> idx(row_);
        idx.resize(row_.size() + m.extra_shape.size());
        for (int64_t x = 0; x < m.extra_count; x++) {
            int64_t rem = x;
            for (size_t i = m.extra_shape.size(); i-- > 0;) {
                idx[row_.size() + i] = rem % m.extra_shape[i];
                rem /= m.extra_shape[i];
            }
            if (m.def->is_topk()) {
                Tensor &ind = t_[m.def->index_name];
                for (int64_t s = 0; s < m.k; s++) {
                    idx.push_back(s);
                    out.data[static_cast<size_t>(out.offset(idx.data(), idx.size()))] = finalize(st, mem, k, x, s, false);
                    ind.data[static_cast<size_t>(ind.offset(idx.data(), idx.size()))] = finalize(st, mem, k, x, s, true);
                    idx.pop_back();
                }
            } else {
                out.data[static_cast<size_t>(out.offset(idx.data(), idx.size()))] = finalize(st, mem, k, x, 0, false);
            }
        }
    }
    final_mode_ = false;
}

bool Interp::topk_delta_not_finite(const State &st, const std::vector<MemberRt> &mem, size_t k) {
    for (int64_t x = 0; x < mem[k].extra_count; x++) {
        for (double v : deltas(st, mem, k, x, false, false))
            if (!std::isfinite(v)) return true;
        if (!delta_inputs_finite(st, mem, k, x)) return true;
    }
    return false;
}

void Interp::literal_topk(const MemberRt &m) {
    const Expr red = m.def->body;
    std::vector<int64_t> shape;
    int64_t n = 1;
    for (Expr e : red->extents) {
        shape.push_back(eval_extent(e, sizes_));
        n *= shape.back();
    }
    Tensor &out = t_[m.def->name], &ind = t_[m.def->index_name];
    std::vector<std::pair<double, int64_t>> cand(static_cast<size_t>(n));
    for (int64_t x = 0; x < m.extra_count; x++) {
        Evaluator ev(env(nullptr, nullptr, false));
        bind_point(ev, m, x);
        rank_topk_candidates(ev, red, shape, m.k, cand);
        std::vector<int64_t> idx(row_);
        idx.resize(row_.size() + m.extra_shape.size() + 1);
        for (size_t i = m.extra_shape.size(), rem = static_cast<size_t>(x); i-- > 0; rem /= static_cast<size_t>(m.extra_shape[i]))
            idx[row_.size() + i] = static_cast<int64_t>(rem % static_cast<size_t>(m.extra_shape[i]));
        for (int64_t s = 0; s < m.k; s++) {
            idx.back() = s;
            out.data[static_cast<size_t>(out.offset(idx.data(), idx.size()))] = cand[static_cast<size_t>(s)].first;
            ind.data[static_cast<size_t>(ind.offset(idx.data(), idx.size()))] = static_cast<double>(cand[static_cast<size_t>(s)].second);
        }
    }
}

int64_t Interp::flat_offset(const Tensor &out, const MemberRt &m, int64_t x) {
    std::vector<int64_t> idx(row_);
    std::vector<int64_t> ex(m.extra_shape.size());
    for (size_t i = m.extra_shape.size(); i-- > 0;) {
        ex[i] = x % m.extra_shape[i];
        x /= m.extra_shape[i];
    }
    idx.insert(idx.end(), ex.begin(), ex.end());
    return out.offset(idx.data(), idx.size());
}

}  // namespace rf::plan_interp
