/** \file PlanInterpImpl.h
 * The plan interpreter's machinery (internal to src/interp): the per-row state of a pass (Elem,
 * State), its members at run time, and the Interp that runs the derived init / update / merge /
 * epilogue on them. PlanInterp.cpp runs whole plans with it (and defines the update);
 * PlanInterpFinalize.cpp finalizes a row's members into the outputs; ExportedStates.cpp merges and finalizes the states that partial programs export (shard/State.h).
 */
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>

#include "interp/PlanInterp.h"
#include "interp/Pointwise.h"
#include "interp/Reference.h"
#include "ir/Eval.h"
#include "support/Error.h"

namespace rf::plan_interp {


struct Elem {
    bool seen = false;
    double acc = 0, index = -1;                          // sum/prod/max/min/argmax/argmin (of F or G)
    std::vector<std::pair<double, int64_t>> list;        // top-k (value of F or G, flat index)
    std::vector<double> tag;                             // δ at the last rescale / reference point c
    std::vector<double> S;                               // polynomial state
};

struct MemberRt {
    const TensorDef *def;
    const MemberAnalysis *a;
    std::vector<int64_t> extra_shape;  // extents of the vars after the row (without the top-k axis)
    int64_t extra_count = 1;
    ReduceOp sel_op;                   // the selection actually performed on the state values
    int64_t k = 0;                     // top-k: the bound extent of the k axis (K may be a size)
    bool row_only = false;             // δ, α and H_def read no variable after the row (memoizable per row)
};

struct State {
    int64_t n = 0;
    std::vector<std::vector<Elem>> members;
};

/** "a is a better selection than b": larger (max) or smaller (min), ties to the lower index; NaN ranks first. */
inline bool better(ReduceOp op, double va, int64_t ia, double vb, int64_t ib) {
    bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax || op == ReduceOp::TopK;
    if (std::isnan(va) != std::isnan(vb)) return std::isnan(va);
    if (va != vb && !(std::isnan(va) && std::isnan(vb))) return want_max ? va > vb : va < vb;
    return ia < ib;
}

class Interp {
public:
    Interp(const Plan &plan, const SizeBinding &sizes, const PlanInterpOptions &o)
        : plan_(plan), p_(*plan.program), sizes_(sizes), opts_(o), rng_(o.seed) {}

    // ---- Exported states (shard/State.h): the same init / merge / epilogue on states as tensors.

    /** Prepares the chain's only pass for state operations, with the row inputs the merge reads. */
    std::vector<MemberRt> state_members(const ChainPlan &c, const std::map<std::string, Tensor> &context) {
        for (const auto &[name, t] : context) t_[name] = t;
        from_states_ = true;
        set_chain(c);
        RF_INTERNAL_ASSERT(c.passes.size() == 1) << "exported states of a chain in several passes";
        return pass_members(c, c.passes[0]);
    }
    int64_t rows() const {
        int64_t r = 1;
        for (int64_t v : row_shape_) r *= v;
        return r;
    }
    void row(int64_t flat) {
        set_row(flat);
        memo_row(true);  // exported states: δ, α and H_def that read only the row are evaluated once per row
    }
    State empty(const std::vector<MemberRt> &mem) { return init(mem); }
    State merged(const State &A, const State &B, const std::vector<MemberRt> &mem) { return merge(A, B, mem); }
    /** α(now, old) of a member whose α reads only the row (the current one). */
    double rescale(const MemberRt &m, const std::vector<double> &now, const std::vector<double> &old) { return alpha(m, 0, now, old); }
    void finalize_row(const State &st, const std::vector<MemberRt> &mem) { write_outputs(st, mem); }
    /** Every element-wise definition (the epilogue), then every tensor by name. */
    std::map<std::string, Tensor> epilogue() {
        for (const TensorDef &d : p_.defs)
            if (!d.is_reduction()) eval_literal(d);
        return t_;
    }
    const std::vector<int64_t> &row_shape() const { return row_shape_; }
    int64_t axis_length() const { return axis_len_; }


    std::map<std::string, Tensor> run(const std::map<std::string, Tensor> &inputs) {
        for (const InputDecl &in : p_.inputs) {
            auto it = inputs.find(in.name);
            if (it == inputs.end()) throw UserError(in.loc, "missing input '" + in.name + "'");
            if (it->second.shape != input_shape(in, sizes_))
                throw UserError(in.loc, "input '" + in.name + "' has shape " + shape_to_string(it->second.shape) +
                                            ", expected " + shape_to_string(input_shape(in, sizes_)));
            t_[in.name] = round_output(it->second, in.dtype);
        }
        // Run whatever is ready: a definition outside the chains (a prologue) once the tensors it
        // reads exist, a chain once everything its members read from outside it exists. The order of
        // definitions in the spec need not be an order of the chains.
        std::set<std::string> in_chain;
        for (const ChainPlan &c : plan_.chains)
            for (const std::string &m : c.members) {
                in_chain.insert(m);
                if (const TensorDef *d = p_.find_def(m); d && d->is_topk()) in_chain.insert(d->index_name);
            }
        auto reads_ready = [&](const TensorDef &d, const std::set<std::string> &own) {
            return !any_of(d.body, [&](Expr e) {
                return e->kind == Kind::Load && !own.count(e->name) && !t_.count(e->name);
            });
        };
        std::vector<const TensorDef *> elementwise, literal;
        for (const TensorDef &d : p_.defs) {
            if (!d.is_reduction()) elementwise.push_back(&d);
            else if (!in_chain.count(d.name)) literal.push_back(&d);
        }
        std::vector<const ChainPlan *> chains;
        for (const ChainPlan &c : plan_.chains) chains.push_back(&c);
        while (!literal.empty() || !chains.empty()) {
            bool progress = false;
            for (size_t i = 0; i < literal.size(); i++)
                if (reads_ready(*literal[i], {})) {
                    eval_literal(*literal[i]);
                    literal.erase(literal.begin() + static_cast<long>(i--));
                    progress = true;
                }
            for (size_t i = 0; i < chains.size() && !progress; i++) {
                std::set<std::string> own;
                for (const std::string &m : chains[i]->members) {
                    own.insert(m);
                    if (const TensorDef *d = p_.find_def(m); d->is_topk()) own.insert(d->index_name);
                }
                bool ready = true;
                for (const std::string &m : chains[i]->members) ready = ready && reads_ready(*p_.find_def(m), own);
                if (ready) {
                    run_chain(*chains[i]);
                    chains.erase(chains.begin() + static_cast<long>(i));
                    progress = true;
                }
            }
            RF_INTERNAL_ASSERT(progress) << "the plan's chains depend on each other in a cycle";
        }
        for (const TensorDef *d : elementwise) eval_literal(*d);
        return t_;
    }

private:
    double rnd(double v) const { return opts_.f32 ? static_cast<double>(static_cast<float>(v)) : v; }

    // ---- Literal evaluation of definitions outside cascades.
    void eval_literal(const TensorDef &d) {
        if (d.is_topk()) {
            // A top-k that no chain holds (the plan runs it alone, e.g. when its values feed a
            // later reduction over its own k axis): selected literally, as the reference does.
            run_topk(d, sizes_, t_);
            for (double &v : t_[d.name].data) v = rnd(v);
            return;
        }
        Tensor out(def_shape(d, sizes_));
        // A copy of a tensor at the definition's own indices (O = O.sum): no evaluation per element.
        Expr b = d.body;
        bool same = b->kind == Kind::Load && b->args.size() == d.vars.size() && t_.count(b->name);
        for (size_t i = 0; same && i < d.vars.size(); i++) same = b->args[i] == d.vars[i];
        if (same && t_.at(b->name).shape == out.shape) {
            out.data = t_.at(b->name).data;
            if (opts_.f32)
                for (double &v : out.data) v = rnd(v);
            t_[d.name] = std::move(out);
            return;
        }
        std::vector<int64_t> idx(d.vars.size(), 0);
        std::optional<PointwiseFn> fast = opts_.f32 ? std::nullopt : compile_pointwise(d, t_, sizes_);
        Evaluator ev(env(nullptr, nullptr, false));
        for (int64_t flat = 0; flat < out.numel(); flat++) {
            if (flat > 0)  // the next index in row-major order (no unravel per element)
                for (size_t i = d.vars.size(); i-- > 0;) {
                    if (++idx[i] < out.shape[i]) break;
                    idx[i] = 0;
                }
            if (fast) {
                out.data[static_cast<size_t>(flat)] = (*fast)(idx.data());
                continue;
            }
            for (size_t i = 0; i < d.vars.size(); i++) ev.bind(d.vars[i], static_cast<double>(idx[i]));
            out.data[static_cast<size_t>(flat)] = ev.eval(d.body);
        }
        t_[d.name] = std::move(out);
    }

    /** The environment: sizes, materialized tensors, and (when state is given) running values of
     *  pass members, or their estimates of the final value when `estimate` is set. */
    EvalEnv env(const State *st, const std::vector<MemberRt> *mem, bool estimate, bool sanitize = false) {
        EvalEnv e;
        e.f32 = opts_.f32;
        e.var_value = [this](Expr v) -> double {
            auto it = sizes_.find(v->name);
            RF_INTERNAL_ASSERT(it != sizes_.end()) << "unbound variable " << v->name;
            return static_cast<double>(it->second);
        };
        e.load_value = [this, st, mem, estimate, sanitize](Expr l, const int64_t *idx) -> double {
            if (st && mem && !final_mode_) {
                for (size_t k = 0; k < mem->size(); k++) {
                    const MemberRt &m = (*mem)[k];
                    bool values = l->name == m.def->name, indices = m.def->is_topk() && l->name == m.def->index_name;
                    if (!values && !indices) continue;
                    double v = member_value(*st, *mem, k, idx, indices, estimate);
                    // A running value that is not finite yet (the max of a masked prefix) is used as 0,
                    // consistently in δ, the tags and the update terms (see deltas()).
                    return (sanitize && !std::isfinite(v)) ? 0.0 : v;
                }
            }
            // The tensor of a load node, found by name once (map nodes stay put as tensors are added).
            auto cached = load_cache_.find(l);
            const Tensor *t = cached != load_cache_.end() ? cached->second : nullptr;
            if (!t) {
                auto it = t_.find(l->name);
                RF_INTERNAL_ASSERT(it != t_.end()) << "tensor " << l->name << " read before it is computed";
                t = &it->second;
                load_cache_[l] = t;
            }
            return t->data[static_cast<size_t>(t->offset(idx, l->args.size()))];
        };
        return e;
    }

    // ---- Cascades.
    std::vector<int64_t> row_;           // current row values
    std::vector<int64_t> row_shape_;
    int64_t axis_len_ = 0;
    std::vector<int64_t> axis_shape_;

    void run_chain(const ChainPlan &c) {
        set_chain(c);
        for (const PassPlan &pass : c.passes) run_pass(c, pass);
    }

    void set_chain(const ChainPlan &c) {
        const TensorDef *first = p_.find_def(c.members[0]);
        row_shape_.clear();
        for (size_t i = 0; i < c.n_row; i++) row_shape_.push_back(eval_extent(first->extents[i], sizes_));
        axis_shape_.clear();
        axis_len_ = 1;
        for (Expr e : c.axis_extents) {
            axis_shape_.push_back(eval_extent(e, sizes_));
            axis_len_ *= axis_shape_.back();
        }
    }

    void run_pass(const ChainPlan &c, const PassPlan &pass) {
        std::vector<MemberRt> mem = pass_members(c, pass);
        int64_t rows = 1;
        for (int64_t r : row_shape_) rows *= r;
        for (int64_t flat = 0; flat < rows; flat++) {
            set_row(flat);
            run_row(mem);
        }
    }

    std::vector<MemberRt> pass_members(const ChainPlan &c, const PassPlan &pass) {
        std::vector<MemberRt> mem;
        for (size_t k = 0; k < pass.members.size(); k++) {
            MemberRt m;
            m.def = p_.find_def(pass.members[k]);
            m.a = &pass.members_exec[k];
            size_t nv = m.def->vars.size() - (m.def->is_topk() ? 1 : 0);
            for (size_t i = c.n_row; i < nv; i++) m.extra_shape.push_back(eval_extent(m.def->extents[i], sizes_));
            for (int64_t e : m.extra_shape) m.extra_count *= e;
            m.sel_op = m.a->op;
            if (m.def->is_topk()) m.k = eval_extent(m.def->extents.back(), sizes_);
            m.row_only = true;
            for (size_t i = c.n_row; i < nv; i++) {
                const std::string &var = m.def->vars[i]->name;
                for (Expr e : m.a->delta_exprs) m.row_only = m.row_only && !mentions(e, var);
                for (Expr e : {m.a->alpha, m.a->H_def})
                    if (e) m.row_only = m.row_only && !mentions(e, var);
            }
            if ((m.a->relation == Relation::Monotone || m.a->relation == Relation::Additive) && !m.a->increasing)
                m.sel_op = mirrored(m.a->op);
            mem.push_back(m);
            Tensor out(def_shape(*m.def, sizes_));
            t_[m.def->name] = out;
            if (m.def->is_topk()) t_[m.def->index_name] = out;
        }
        return mem;
    }

    void set_row(int64_t flat) {
        row_.assign(row_shape_.size(), 0);
        for (size_t i = row_shape_.size(); i-- > 0;) {
            row_[i] = flat % row_shape_[i];
            flat /= row_shape_[i];
        }
    }

    State init(const std::vector<MemberRt> &mem) {
        State s;
        for (const MemberRt &m : mem) {
            std::vector<Elem> elems(static_cast<size_t>(m.extra_count));
            for (Elem &e : elems) {
                e.acc = reduce_identity(m.a->relation == Relation::Multiplicative || is_shift_form(m.a->relation)
                                        ? m.a->op : m.sel_op);
                if (is_shift_form(m.a->relation)) e.S.assign(m.a->alphas.size(), 0.0);
            }
            s.members.push_back(std::move(elems));
        }
        return s;
    }

    void run_row(const std::vector<MemberRt> &mem) {
        // Random segments (possibly empty), each swept in random tiles.
        int nseg = opts_.randomize ? 1 + static_cast<int>(rng_() % 4) : std::max(1, opts_.segments);
        std::vector<int64_t> cuts{0, axis_len_};
        for (int s = 1; s < nseg; s++)
            cuts.push_back(opts_.randomize ? static_cast<int64_t>(rng_() % static_cast<uint64_t>(axis_len_ + 1))
                                           : axis_len_ * s / nseg);
        std::sort(cuts.begin(), cuts.end());
        std::vector<State> states;
        for (size_t s = 0; s + 1 < cuts.size(); s++) {
            State st = init(mem);
            int64_t pos = cuts[s];
            while (pos < cuts[s + 1]) {
                int64_t len = opts_.randomize ? 1 + static_cast<int64_t>(rng_() % static_cast<uint64_t>(
                                                        std::max<int64_t>(1, (cuts[s + 1] - cuts[s] + 1) / 2)))
                                              : opts_.tile;
                int64_t end = std::min(cuts[s + 1], pos + len);
                update(st, mem, pos, end);
                pos = end;
            }
            states.push_back(std::move(st));
        }
        // A random merge tree: repeatedly merge two random states.
        while (states.size() > 1) {
            size_t i = opts_.randomize ? rng_() % states.size() : 0;
            size_t j = opts_.randomize ? rng_() % (states.size() - 1) : 0;
            if (j >= i) j++;
            State merged = merge(states[i], states[j], mem);
            if (i > j) std::swap(i, j);
            states.erase(states.begin() + static_cast<long>(j));
            states[i] = std::move(merged);
        }
        write_outputs(states[0], mem);
    }

    /** Binds a member's own vars for the current row and extra point. */
    void bind_point(Evaluator &ev, const MemberRt &m, int64_t extra) {
        for (size_t i = 0; i < row_.size(); i++) ev.bind(m.def->vars[i], static_cast<double>(row_[i]));
        int64_t rem = extra;
        for (size_t i = m.extra_shape.size(); i-- > 0;) {
            ev.bind(m.def->vars[row_.size() + i], static_cast<double>(rem % m.extra_shape[i]));
            rem /= m.extra_shape[i];
        }
    }

    void bind_axis(Evaluator &ev, const MemberRt &m, int64_t flat) {
        Expr red = m.def->body;
        int64_t rem = flat;
        for (size_t i = axis_shape_.size(); i-- > 0;) {
            ev.bind(red->axis(i), static_cast<double>(rem % axis_shape_[i]));
            rem /= axis_shape_[i];
        }
    }

    /** δ values of member k at an extra point, from running values (or estimates) of state st. */
    std::vector<double> deltas(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra,
                               bool estimate, bool sanitize) {
        const MemberRt &m = mem[k];
        // Exported states (merge_states, finalize_states) visit every extra point of a row with the
        // same δ when it reads only the row: evaluated once per row and member.
        DeltaKey key{&st, k, estimate, sanitize};
        if (memo_ && m.row_only) {
            for (const auto &[kk, v] : delta_memo_)
                if (kk == key) return v;
        }
        std::vector<double> d = eval_deltas(st, mem, k, extra, estimate, sanitize);
        if (memo_ && m.row_only) delta_memo_.push_back({key, d});
        return d;
    }

    struct DeltaKey {
        const State *st;
        size_t k;
        bool estimate, sanitize;
        bool operator==(const DeltaKey &o) const {
            return st == o.st && k == o.k && estimate == o.estimate && sanitize == o.sanitize;
        }
    };
    std::vector<std::pair<DeltaKey, std::vector<double>>> delta_memo_;
    bool memo_ = false;
    struct AlphaMemo {
        const MemberAnalysis *a = nullptr;
        std::vector<double> now, old;
        double value = 0;
    } alpha_memo_, hdef_memo_;
    /** Starts (or ends) a row of exported-state work: memoized δ and α are valid within it. */
    void memo_row(bool on) {
        memo_ = on;
        delta_memo_.clear();
        alpha_memo_.a = nullptr;
        hdef_memo_.a = nullptr;
        final_memo_.clear();
    }

    std::vector<double> eval_deltas(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra,
                                    bool estimate, bool sanitize) {
        const MemberRt &m = mem[k];
        Evaluator ev(env(&st, &mem, estimate, sanitize));
        bind_point(ev, m, extra);
        std::vector<double> d;
        for (Expr e : m.a->delta_exprs) {
            double v = ev.eval(e);
            // A non-finite δ (the max of a fully masked row so far) is replaced by 0: the invariant
            // s = H(δ_tag) ΣG holds for any δ used consistently, and 0 keeps exp(S - δ) at 0, not NaN.
            if (sanitize && !std::isfinite(v)) v = 0;
            d.push_back(v);
        }
        return d;
    }

    /** Whether every member value that m's δ expressions read is finite at an extra point. The
     *  updates read those values sanitized (a non-finite one as 0, see env()): where one is not
     *  finite while δ is (δ = 1/a with a = inf), the state holds terms of the sanitized value and
     *  the row is recomputed literally (fuzz_specs.py seed 1218 #26; LowerMerge.cpp likewise). */
    bool delta_inputs_finite(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra) {
        const MemberRt &m = mem[k];
        Evaluator ev(env(&st, &mem, false, false));
        bind_point(ev, m, extra);
        bool finite = true;
        for (Expr e : m.a->delta_exprs)
            any_of(e, [&](Expr n) {
                bool member = n->kind == Kind::Load &&
                              std::any_of(mem.begin(), mem.end(), [&](const MemberRt &o) { return o.def->name == n->name; });
                if (member && finite) finite = std::isfinite(ev.eval(n));
                return false;
            });
        return finite;
    }

    /** α(δ_now, δ_old) at an extra point (α may read inputs at the row, e.g. a temperature t[r]). */
    double alpha(const MemberRt &m, int64_t extra, const std::vector<double> &now, const std::vector<double> &old) {
        if (memo_ && m.row_only && alpha_memo_.a == m.a && alpha_memo_.now == now && alpha_memo_.old == old)
            return alpha_memo_.value;
        double v = eval_alpha(m, extra, now, old);
        if (memo_ && m.row_only) alpha_memo_ = {m.a, now, old, v};
        return v;
    }

    double eval_alpha(const MemberRt &m, int64_t extra, const std::vector<double> &now, const std::vector<double> &old) {
        Evaluator ev(env(nullptr, nullptr, false));
        bind_point(ev, m, extra);
        for (size_t i = 0; i < now.size(); i++) {
            ev.bind(m.a->delta_syms[i], now[i]);
            ev.bind(m.a->old_syms[i], old[i]);
        }
        return ev.eval(m.a->alpha);
    }

    /** S(c) -> S(c') exactly: S_β(c') = g · Σ_{α≥β} Π_i C(α_i, β_i) (c'_i - c_i)^(α_i - β_i) S_α(c), with
     *  g = e^{λ·(c' - c)} for the exponential-polynomial form (1 for the polynomial form). A state of
     *  zeros is never rescaled (no 0 · inf when the old reference was a sanitized -inf). */
    std::vector<double> shift(const MemberRt &m, int64_t extra, const std::vector<double> &S,
                              const std::vector<double> &c, const std::vector<double> &c2) {
        const MemberAnalysis &a = *m.a;
        std::vector<double> out(S.size(), 0.0);
        bool zero = std::all_of(S.begin(), S.end(), [](double v) { return v == 0; });
        if (zero || c == c2) {
            if (zero) return out;
            if (a.relation == Relation::ExpPolynomial) return S;
        }
        double g = a.relation == Relation::ExpPolynomial ? alpha(m, extra, c2, c) : 1.0;
        for (size_t b = 0; b < a.alphas.size(); b++) {
            double acc = 0;
            for (size_t al = 0; al < a.alphas.size(); al++) {
                double coef = 1;
                bool ge = true;
                for (size_t i = 0; i < c.size() && ge; i++) {
                    int hi = a.alphas[al][i], lo = a.alphas[b][i];
                    if (hi < lo) { ge = false; break; }
                    double binom = 1;
                    for (int t = 1; t <= lo; t++) binom = binom * (hi - lo + t) / t;
                    coef *= binom * std::pow(c2[i] - c[i], hi - lo);
                }
                if (ge) acc = rnd(acc + rnd(coef * S[al]));
            }
            out[b] = g == 1.0 ? acc : rnd(acc * g);
        }
        return out;
    }

    void select_into(Elem &e, ReduceOp op, int64_t k, double v, int64_t index) {
        if (op == ReduceOp::TopK) {
            e.list.push_back({v, index});
            ReduceOp ord = op;
            std::stable_sort(e.list.begin(), e.list.end(), [&](auto &x, auto &y) {
                return better(ord, x.first, x.second, y.first, y.second);
            });
            if (static_cast<int64_t>(e.list.size()) > k) e.list.resize(static_cast<size_t>(k));
            e.seen = true;
            return;
        }
        switch (op) {
        case ReduceOp::Sum: e.acc = rnd(e.acc + v); break;
        case ReduceOp::Prod: e.acc = rnd(e.acc * v); break;
        default:
            if (!e.seen || better(op, v, index, e.acc, static_cast<int64_t>(e.index))) {
                e.acc = v;
                e.index = static_cast<double>(index);
            }
        }
        e.seen = true;
    }

    /** The derived update of a state by the positions [from, to) of the axis (PlanInterp.cpp). */
    void update(State &st, const std::vector<MemberRt> &mem, int64_t from, int64_t to);

    State merge(const State &A, const State &B, const std::vector<MemberRt> &mem) {
        memo_row(memo_);  // C is a new state (it may reuse a freed one's address): nothing memoized holds
        std::vector<double> row_d;
        State C = init(mem);
        C.n = A.n + B.n;
        for (size_t k = 0; k < mem.size(); k++) {
            const MemberRt &m = mem[k];
            const MemberAnalysis &a = *m.a;
            for (int64_t x = 0; x < m.extra_count; x++) {
                const Elem &ea = A.members[k][static_cast<size_t>(x)], &eb = B.members[k][static_cast<size_t>(x)];
                Elem &ec = C.members[k][static_cast<size_t>(x)];
                ec.seen = ea.seen || eb.seen;
                switch (a.relation) {
                case Relation::Multiplicative: {
                    // Both partial states move to the merged δ, then combine: s = s_A α(δ, δ_A) ⊕ s_B α(δ, δ_B).
                    // A member whose δ reads only the row has one δ and one α per side for the row.
                    if (!(m.row_only && x > 0)) row_d = deltas(C, mem, k, x, false, true);
                    const std::vector<double> &d = row_d;
                    bool prod = a.op == ReduceOp::Prod;
                    double acc = prod ? 1.0 : 0.0;
                    for (const State *side_state : {&A, &B}) {
                        const Elem &side = side_state->members[k][static_cast<size_t>(x)];
                        const std::vector<double> &tag = side_state->members[k][static_cast<size_t>(m.row_only ? 0 : x)].tag;
                        if (!side.seen) continue;
                        double v = side.acc;
                        if (tag != d && !(!prod && v == 0)) {
                            double al = alpha(m, x, d, tag);
                            v = rnd(v * (prod ? std::pow(al, static_cast<double>(side_state->n)) : al));
                        }
                        acc = prod ? rnd(acc * v) : rnd(acc + v);
                    }
                    ec.acc = acc;
                    if (!(from_states_ && m.row_only && x > 0)) ec.tag = d;  // exported states keep it at the first point
                    break;
                }
                case Relation::Polynomial:
                case Relation::ExpPolynomial: {
                    std::vector<double> c = deltas(C, mem, k, x, true, true);
                    for (const auto *side : {&ea, &eb}) {
                        if (!side->seen) continue;
                        std::vector<double> moved = shift(m, x, side->S, side->tag, c);
                        for (size_t b = 0; b < moved.size(); b++) ec.S[b] = rnd(ec.S[b] + moved[b]);
                    }
                    ec.tag = c;
                    break;
                }
                default: {
                    bool sel = a.relation == Relation::Additive || a.relation == Relation::Monotone;
                    ReduceOp op = sel ? m.sel_op : a.op;
                    if (op == ReduceOp::Sum) {
                        // Shifted sums: move B to A's reference point, Σ = T_A + T_B + n_B (ref_B - ref_A).
                        if (ea.seen && eb.seen) {
                            ec.tag = ea.tag;
                            ec.acc = rnd(rnd(ea.acc + eb.acc) +
                                         rnd(static_cast<double>(B.n) * rnd(eb.tag[0] - ea.tag[0])));
                        } else if (ea.seen || eb.seen) {
                            const Elem &one = ea.seen ? ea : eb;
                            ec.tag = one.tag;
                            ec.acc = one.acc;
                        }
                        break;
                    }
                    ec.seen = false;
                    ec.acc = reduce_identity(op);
                    for (const auto *side : {&ea, &eb}) {
                        if (!side->seen) continue;
                        if (op == ReduceOp::TopK) {
                            for (auto &[v, i] : side->list) select_into(ec, op, m.k, v, i);
                        } else if (op == ReduceOp::Sum || op == ReduceOp::Prod) {
                            select_into(ec, op, a.k, side->acc, 0);
                        } else {
                            select_into(ec, op, a.k, side->acc, static_cast<int64_t>(side->index));
                        }
                        ec.seen = true;
                    }
                }
                }
            }
        }
        return C;
    }

    /** Value of member k at idx (a load of it by a later member or by the epilogue). */
    double member_value(const State &st, const std::vector<MemberRt> &mem, size_t k, const int64_t *idx,
                        bool want_index, bool estimate) {
        const MemberRt &m = mem[k];
        for (size_t i = 0; i < row_.size(); i++)
            RF_INTERNAL_ASSERT(idx[i] == row_[i]) << "member " << m.def->name << " read outside its row";
        int64_t extra = 0;
        for (size_t i = 0; i < m.extra_shape.size(); i++) extra = extra * m.extra_shape[i] + idx[row_.size() + i];
        int64_t slot = m.def->is_topk() ? idx[row_.size() + m.extra_shape.size()] : 0;
        double v = finalize(st, mem, k, extra, slot, want_index);
        if (estimate && m.a->op == ReduceOp::Sum && st.n > 0)
            v = v * static_cast<double>(axis_len_) / static_cast<double>(st.n);  // partial sum scaled to the axis
        return v;
    }

    /** A multiplicative member's finalization at a point: s = acc · α(δ_safe, tag) · H_def(δ). */
    struct MultFinal {
        const State *st = nullptr;
        size_t k = 0;
        bool rescale = false;
        double alpha = 1, hdef = 1;
    };
    std::vector<MultFinal> final_memo_;  // per row, for members whose δ reads only the row

    const MultFinal &mult_final(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra);
    MultFinal final_scratch_;

    double finalize(const State &st, const std::vector<MemberRt> &mem, size_t k, int64_t extra, int64_t slot,
                    bool want_index);

    /** Writes the final values of a row, member by member; later members read earlier ones from the
     *  tensors just written. A member whose final δ is not finite (a max over a fully masked row, a
     *  product that overflowed) cannot be finalized from its state — H(δ) is 0 or infinite there —
     *  so that row of it is recomputed literally (a rare second pass), and so is every member of the
     *  pass that reads it. */
    void write_outputs(const State &st, const std::vector<MemberRt> &mem);

    /** Whether top-k member k (a selection over G, F = φ_δ(G)) has a point of this row whose δ, or a
     *  member value δ reads, is not finite: φ_δ need not be strictly monotone there (MoE routing's
     *  exp(u - m)/s is NaN for every u at m = NaN, NaN or 0 at m = +inf), so the list of G is not F's. */
    bool topk_delta_not_finite(const State &st, const std::vector<MemberRt> &mem, size_t k);

    /** The row's top-k lists of m ranked on F itself, as the reference ranks them (LowerMerge.cpp
     *  literal_topk does the same in the kernels). */
    void literal_topk(const MemberRt &m);

    int64_t flat_offset(const Tensor &out, const MemberRt &m, int64_t x);

    bool final_mode_ = false;  // while writing a row's outputs, members are read from the tensors
    bool from_states_ = false; // merging or finalizing states exported by partial programs
    std::unordered_map<Expr, const Tensor *> load_cache_;

    const Plan &plan_;
    const Program &p_;
    const SizeBinding &sizes_;
    PlanInterpOptions opts_;
    std::mt19937_64 rng_;
    std::map<std::string, Tensor> t_;
};


}  // namespace rf::plan_interp
