/** \file PlanInterp.cpp
 * Executes a fusion plan element by element: each cascade row is split into random segments, each
 * segment is swept in random tiles with the derived update, the segment states are combined in a
 * random order with the derived merge, and the epilogue finalizes the members. Definitions outside
 * cascades (prologues over other axes, element-wise outputs) are evaluated literally. The
 * machinery is interp/PlanInterpImpl.h.
 */
#include "interp/PlanInterpImpl.h"
#include "sym/Sign.h"

namespace rf {

namespace plan_interp {

/** Sweeps [from, to) into st with each member's derived update (the rescale of multiplicative
 *  members, the shift of the shift forms, the selections) in the order of the pass. */
void Interp::update(State &st, const std::vector<MemberRt> &mem, int64_t from, int64_t to) {
    int64_t n_old = st.n;
    st.n += to - from;
    for (size_t k = 0; k < mem.size(); k++) {
        const MemberRt &m = mem[k];
        const MemberAnalysis &a = *m.a;
        for (int64_t x = 0; x < m.extra_count; x++) {
            Elem &e = st.members[k][static_cast<size_t>(x)];
            Evaluator ev(env(&st, &mem, false));
            bind_point(ev, m, x);
            switch (a.relation) {
            case Relation::Independent:
            case Relation::None:  // a member that did not fuse runs in its own pass: its d is final
            case Relation::Additive:
            case Relation::Monotone: {
                bool sel = a.relation == Relation::Additive || a.relation == Relation::Monotone;
                Expr body = sel ? (a.Gsel_literal ? a.Gsel_literal : a.Gsel) : m.def->body->body();
                ReduceOp op = sel ? m.sel_op : a.op;
                if (op == ReduceOp::Sum) {
                    // A plain sum is kept relative to a reference point (its first finite term):
                    // Σ v = Σ (v - ref) + n ref. The partial sums stay small, so a float32 state keeps
                    // the mean accurate (the shifted-data form of Welford's algorithm). Terms of one
                    // sign, and bodies with a select, are summed as they are (ref = 0; sym/Sign.cpp,
                    // sum_shifts_terms, says why): Σ select(c == ia, x, 0) shifted by x[0] summed
                    // C − 1 terms of −x[0] in float32 and lost 3 digits (fuzz_specs.py seed 1255 #82).
                    const bool shifted = sum_shifts_terms(body);
                    for (int64_t j = from; j < to; j++) {
                        bind_axis(ev, m, j);
                        double v = ev.eval(body);
                        if (!e.seen) {
                            e.tag = {shifted && std::isfinite(v) ? v : 0.0};
                            e.acc = 0;
                            e.seen = true;
                        }
                        e.acc = rnd(e.acc + rnd(v - e.tag[0]));
                    }
                    break;
                }
                for (int64_t j = from; j < to; j++) {
                    bind_axis(ev, m, j);
                    double v = ev.eval(body);
                    if (op == ReduceOp::TopK && sel && !a.increasing) v = -v;  // bottom-k of G as top-k of -G
                    select_into(e, op, m.k, v, j);
                }
                break;
            }
            case Relation::Multiplicative: {
                std::vector<double> d = deltas(st, mem, k, x, false, true);
                // A zero sum stays zero under any rescale; skipping it avoids 0 · inf when the old δ
                // was degenerate (a running scale of 0).
                if (e.seen && d != e.tag && !(a.op == ReduceOp::Sum && e.acc == 0)) {
                    double al = alpha(m, x, d, e.tag);
                    e.acc = rnd(e.acc * (a.op == ReduceOp::Prod ? std::pow(al, static_cast<double>(n_old)) : al));
                }
                for (size_t i = 0; i < d.size(); i++) ev.bind(a.delta_syms[i], d[i]);
                // The update term U = G·H_run is the body itself divided by the deferred factors:
                // evaluating the body as written keeps the spec's own conventions (0/0 = 0) that the
                // canonical U may not; it falls back to U where H_def is 0 or not finite.
                Evaluator lit(env(&st, &mem, false, true));
                bind_point(lit, m, x);
                double inv_hdef = 1;
                if (!a.H_def->is_const(1)) {
                    for (size_t i = 0; i < d.size(); i++) lit.bind(a.delta_syms[i], d[i]);
                    inv_hdef = 1.0 / lit.eval(a.H_def);
                }
                bool literal = !a.defers_exp && std::isfinite(inv_hdef) && inv_hdef != 0;
                for (int64_t j = from; j < to; j++) {
                    bind_axis(ev, m, j);
                    double u;
                    if (literal) {
                        bind_axis(lit, m, j);
                        u = rnd(lit.eval(m.def->body->body()) * inv_hdef);
                    } else {
                        u = ev.eval(a.U);
                    }
                    e.acc = a.op == ReduceOp::Prod ? rnd(e.acc * u) : rnd(e.acc + u);
                }
                e.tag = d;
                e.seen = true;
                break;
            }
            case Relation::Polynomial: case Relation::ExpPolynomial: {
                std::vector<double> c = deltas(st, mem, k, x, true, true);
                if (e.seen) e.S = shift(m, x, e.S, e.tag, c);
                for (size_t i = 0; i < c.size(); i++) ev.bind(a.delta_syms[i], c[i]);
                for (int64_t j = from; j < to; j++) {
                    bind_axis(ev, m, j);
                    for (size_t b = 0; b < a.basis.size(); b++) e.S[b] = rnd(e.S[b] + ev.eval(a.basis[b]));
                }
                e.tag = c;
                e.seen = true;
                break;
            }
            }
        }
    }
}

}  // namespace plan_interp

using plan_interp::Interp;

std::map<std::string, Tensor> run_plan(const Plan &plan, const SizeBinding &sizes,
                                       const std::map<std::string, Tensor> &inputs, const PlanInterpOptions &opts) {
    return Interp(plan, sizes, opts).run(inputs);
}

}  // namespace rf
