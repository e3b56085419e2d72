/** \file LowerPass.cpp
 * Lowers one chain pass to a kernel body: running states per member (plan interpreter semantics,
 * src/interp/PlanInterp.cpp, including its guards), tiles of the cascade axis, segment merges with
 * the derived merge, finalization (with the literal recompute of rows whose final δ is not finite)
 * and the per-row epilogue. This file: the state, expression translation, per-tile updates and kernel
 * shapes; member GEMMs are in LowerGemm.cpp (prologue GEMMs: the recognize_gemms pass),
 * merges/finalization/epilogue in LowerMerge.cpp.
 */
#include "tile/LowerPass.h"
#include "tile/PassLowering.h"

#include <cmath>
#include <functional>
#include <optional>
#include <limits>

#include "ir/Eval.h"
#include "support/Error.h"
#include "sym/Sign.h"

namespace rf::tile {

// ---- Small constructors.
Expr local_var(const std::string &name, SType t) { return make_var(name, VarRole::Symbol, t); }
Expr local_at(const std::string &name, Expr index, SType t) { return make_load(name, {index}, DType::f64, t); }
Expr int_c(int64_t v) { return make_int(v); }
Expr real_c(double v) { return make_const(v); }
Expr product(const std::vector<Expr> &v) {
    if (v.empty()) return int_c(1);
    return v.size() == 1 ? v[0] : make_mul(v);
}
Expr flatten(const std::vector<Expr> &indices, const std::vector<Expr> &extents) {
    Expr flat = int_c(0);
    for (size_t i = 0; i < indices.size(); i++)
        flat = i == 0 ? indices[0] : make_add(make_mul(flat, extents[i]), indices[i]);
    return flat;
}
Expr unravel(Expr flat, const std::vector<Expr> &extents, size_t i) {
    std::vector<Expr> inner(extents.begin() + static_cast<long>(i) + 1, extents.end());
    Expr q = inner.empty() ? flat : make_idiv(flat, product(inner));
    return i == 0 ? q : make_mod(q, extents[i]);
}
Expr is_finite(Expr v) { return make_cmp(CmpOp::LT, make_call(Func::abs, v), real_c(INFINITY)); }

}  // namespace rf::tile

namespace rf::tile::lowering {

PassKernel PassLowering::run() {
    prepare();
    RF_INTERNAL_ASSERT(ctx_.row_reduced.empty() || ctx_.schedule.segments <= 1) << "row-reduced members in a multi-segment pass";
    return ctx_.schedule.segments > 1 ? multi_segment() : single_segment();
}

void PassLowering::prepare() {
    const TensorDef *first = p_.find_def(c_.members[0]);
    // Rows are taken in blocks of nb along the innermost row variable: row r_last = $rbase + $rr
    // for $rr < $nbv (the valid rows of the block). Tile GEMMs then cover the whole block.
    nb_ = c_.n_row == 0 ? 1 : std::max<int64_t>(1, ctx_.schedule.row_block);
    for (size_t i = 0; i < c_.n_row; i++) {
        row_ext_.push_back(first->extents[i]);
        block_ext_.push_back(first->extents[i]);
        if (i + 1 == c_.n_row) {
            row_vars_.push_back(make_add(local_var("$rbase", SType::Int), rr()));
            block_ext_.back() = make_idiv(make_add(first->extents[i], int_c(nb_ - 1)), int_c(nb_));
        } else {
            row_vars_.push_back(make_index("$r" + std::to_string(i)));
        }
    }
    axis_ext_ = c_.axis_extents;
    L_ = product(axis_ext_);
    for (size_t k = 0; k < ctx_.pass->members.size(); k++) members_.push_back(info(static_cast<int>(k)));
    for (const auto &[d, slots] : ctx_.tile_prologues) prologue_local(d);
    for (const MemberInfo &m : members_) {
        names_[m.def->name] = m.k;
        if (m.def->is_topk()) names_[m.def->index_name] = m.k;
        // The key does not depend on the state's name: any prefix decides.
        if (!rescale_key("$A", m).empty() && !(m.X->is_const() && m.X->value <= 1)) row_flagged_.insert(m.k);
    }
}

MemberInfo PassLowering::info(int k) {
    MemberInfo m;
    m.k = k;
    m.def = p_.find_def(ctx_.pass->members[static_cast<size_t>(k)]);
    m.a = &ctx_.pass->members_exec[static_cast<size_t>(k)];
    size_t nv = m.def->vars.size() - (m.def->is_topk() ? 1 : 0);
    for (size_t i = c_.n_row; i < nv; i++) {
        m.extra_vars.push_back(m.def->vars[i]);
        m.extra_ext.push_back(m.def->extents[i]);
    }
    m.X = product(m.extra_ext);
    const MemberAnalysis &a = *m.a;
    m.sel = a.relation == Relation::Additive || a.relation == Relation::Monotone;
    m.op = a.op;
    if (m.sel && !a.increasing) m.op = mirrored(a.op);
    m.nd = a.delta_syms.size();
    if (m.def->is_topk()) m.K = m.def->extents.back();
    if (a.relation == Relation::Multiplicative) m.form = Form::Mult;
    else if (is_shift_form(a.relation)) m.form = Form::Poly;
    else if (m.op == ReduceOp::TopK) m.form = Form::TopK;
    else if (m.op == ReduceOp::ArgMax || m.op == ReduceOp::ArgMin) m.form = Form::ArgSelect;
    else if (m.op == ReduceOp::Max || m.op == ReduceOp::Min) m.form = Form::Select;
    else if (m.op == ReduceOp::Prod) m.form = Form::Prod;
    else m.form = Form::SumShift;
    return m;
}

Expr PassLowering::tag(const std::string &P, const MemberInfo &m, Expr x, size_t i) {
    // A shifted sum keeps its reference point in slot 0 (nd = 0): one slot per x at least.
    int64_t width = static_cast<int64_t>(std::max<size_t>(1, m.nd));
    return local_at(field(P, m.k, "_tag"), add_i(mul_i(flag_slot(m, x), int_c(width)), int_c(static_cast<int64_t>(i))));
}

std::vector<std::pair<std::string, Expr>> PassLowering::fields(const std::string &P) {
    std::vector<std::pair<std::string, Expr>> f;
    for (const MemberInfo &m0 : members_) {
        MemberInfo m = m0;
        m.X = nb_ == 1 ? m0.X : mul_i(m0.X, int_c(nb_));  // every row of the block
        Expr flags = row_flagged_.count(m.k) ? int_c(nb_) : m.X;  // one per row, or one per point
        f.push_back({field(P, m.k, "_acc"), m.X});
        f.push_back({field(P, m.k, "_seen"), flags});
        if (m.form == Form::ArgSelect) f.push_back({field(P, m.k, "_idx"), m.X});
        if (m.form == Form::SumShift || m.form == Form::Mult || m.form == Form::Poly)
            f.push_back({field(P, m.k, "_tag"), mul_i(flags, int_c(static_cast<int64_t>(std::max<size_t>(1, m.nd))))});
        if (m.form == Form::Poly)
            f.push_back({field(P, m.k, "_S"), mul_i(m.X, int_c(static_cast<int64_t>(m.a->alphas.size())))});
        if (m.form == Form::TopK) {
            f.push_back({field(P, m.k, "_tk_v"), mul_i(m.X, m.K)});
            f.push_back({field(P, m.k, "_tk_i"), mul_i(m.X, m.K)});
            f.push_back({field(P, m.k, "_tk_n"), m.X});
        }
    }
    return f;
}

double PassLowering::acc_init(const MemberInfo &m) {
    switch (m.form) {
    case Form::Mult: case Form::Poly: return reduce_identity(m.a->op);
    case Form::SumShift: return 0;
    case Form::Prod: return 1;
    default: return reduce_identity(m.op);
    }
}

LocalClass PassLowering::field_class(const std::string &P, const std::string &name) const {
    // LaneState: a running state to the passes that look for them (skip-masked), printed in the
    // compute type. A lane top-k list's values and count (lanes_topk says why; its indices stay
    // float64, exact at any axis length). A lane max, min or plain sum's running value: each of its
    // updates computes in the compute type (its rows loop is a simd loop), so a float64 state only
    // converted it twice per term: MoE routing T = 16384, E = 8, top-2, emitted kernel, AMD Zen 4:
    // 0.26-0.28 -> 0.24-0.27 ms, same bits. The multiplicative sum stays float64: its rescale
    // (acc·α(δ, τ)) runs per row in float64; so do the merges of segment states (a column reduction
    // split along its axis), which keep every accumulator float64.
    for (const MemberInfo &m : members_) {
        if (!lanes(m)) continue;
        if (m.form == Form::TopK && (name == field(P, m.k, "_tk_v") || name == field(P, m.k, "_tk_n"))) return LocalClass::LaneState;
        if ((m.form == Form::Select || m.form == Form::SumShift) && ctx_.schedule.segments <= 1 && name == field(P, m.k, "_acc"))
            return LocalClass::LaneState;
    }
    return LocalClass::State;
}

void PassLowering::init_state(std::vector<StmtP> &out, const std::string &P) {
    out.push_back(decl(P + "_n", LocalClass::Index, {}, int_c(0)));
    for (auto &[name, n] : fields(P)) {
        double v = 0;
        for (const MemberInfo &m : members_)
            if (name == field(P, m.k, "_acc")) v = acc_init(m);
        if (name.size() > 4 && name.substr(name.size() - 4) == "_idx") v = std::numeric_limits<double>::max();
        out.push_back(decl(name, field_class(P, name), {n}, real_c(v)));
    }
}

Expr PassLowering::bind(Expr e, const MemberInfo &m, Expr x, Expr j, const Mode &mode) {
    std::map<std::string, Expr> vars;
    for (size_t i = 0; i < c_.n_row; i++) vars[m.def->vars[i]->name] = row_vars_[i];
    for (size_t i = 0; i < m.extra_vars.size(); i++) vars[m.extra_vars[i]->name] = unravel(x, m.extra_ext, i);
    if (j && m.def->body->kind == Kind::Reduce)
        for (size_t i = 0; i < m.def->body->num_axes(); i++) vars[m.def->body->axis(i)->name] = unravel(j, axis_ext_, i);
    return translate(e, vars, j, mode);
}

Expr PassLowering::translate(Expr e, const std::map<std::string, Expr> &vars, Expr j, const Mode &mode) {
    return substitute(e, [&](Expr n) -> Expr {
        if (n->kind == Kind::Var && n->role == VarRole::Index) {
            auto it = vars.find(n->name);
            return it == vars.end() ? nullptr : it->second;
        }
        if (n->kind != Kind::Load) return nullptr;
        bool prologue = ctx_.tile_prologues.count(n->name) > 0;
        auto it = names_.find(n->name);
        if (!prologue && (it == names_.end() || mode.P.empty())) return nullptr;
        std::vector<Expr> args;
        for (Expr a : n->args) args.push_back(translate(a, vars, j, mode));
        if (prologue) {
            // Computed per tile: read the tile array; outside the tile loop (a literal recompute),
            // evaluate the prologue's definition in place.
            if (j) return local_at(prologue_local(n->name), add_i(mul_i(rr(), int_c(row_stride())), make_sub(j, local_var("$tb", SType::Int))));
            const TensorDef *d = p_.find_def(n->name);
            std::map<std::string, Expr> dv;
            for (size_t i = 0; i < d->vars.size(); i++) dv[d->vars[i]->name] = args[i];
            return translate(d->body, dv, nullptr, mode);
        }
        const MemberInfo &m = members_[static_cast<size_t>(it->second)];
        std::vector<Expr> extra(args.begin() + static_cast<long>(c_.n_row),
                                args.begin() + static_cast<long>(c_.n_row + m.extra_ext.size()));
        if (m.form == Form::TopK)
            throw UserError(m.def->loc, "the CPU backend cannot read the top-k member '" + m.def->name +
                                            "' inside its own pass yet");
        Expr v = current_value(m, flatten(extra, m.extra_ext), mode);
        return mode.sanitize ? sanitize(v) : v;
    });
}

std::string PassLowering::prologue_local(const std::string &def) {
    auto it = prologue_ids_.find(def);
    if (it != prologue_ids_.end()) return it->second;
    std::string name = "$pro" + std::to_string(prologue_ids_.size());
    prologue_ids_[def] = name;
    return name;
}

std::vector<Expr> PassLowering::deltas(const MemberInfo &m, Expr x, const Mode &mode) {
    std::vector<Expr> d;
    for (Expr e : m.a->delta_exprs) {
        Expr v = bind(e, m, x, nullptr, mode);
        d.push_back(mode.sanitize ? sanitize(v) : v);
    }
    return d;
}

std::vector<Expr> PassLowering::delta_inputs(const MemberInfo &m, Expr x, const Mode &mode) {
    std::vector<Expr> v;
    for (Expr e : m.a->delta_exprs)
        any_of(e, [&](Expr n) {
            if (n->kind == Kind::Load && names_.count(n->name)) v.push_back(bind(n, m, x, nullptr, mode));
            return false;
        });
    return v;
}

Expr PassLowering::with_deltas(Expr e, const MemberInfo &m, const std::vector<Expr> &now, const std::vector<Expr> &old) {
    for (size_t i = 0; i < now.size(); i++) e = substitute(e, m.a->delta_syms[i], now[i]);
    for (size_t i = 0; i < old.size() && i < m.a->old_syms.size(); i++) e = substitute(e, m.a->old_syms[i], old[i]);
    return e;
}

Expr PassLowering::alpha(const MemberInfo &m, Expr x, const std::vector<Expr> &now, const std::vector<Expr> &old, const Mode &mode) {
    return bind(with_deltas(m.a->alpha, m, now, old), m, x, nullptr, mode);
}

std::vector<Expr> PassLowering::tags(const std::string &P, const MemberInfo &m, Expr x) {
    std::vector<Expr> t;
    for (size_t i = 0; i < m.nd; i++) t.push_back(tag(P, m, x, i));
    return t;
}

Expr PassLowering::differs(const std::vector<Expr> &a, const std::vector<Expr> &b) {
    std::vector<Expr> c;
    for (size_t i = 0; i < a.size(); i++) c.push_back(make_cmp(CmpOp::NE, a[i], b[i]));
    return any(c);
}

Expr PassLowering::poly_value(const std::string &P, const MemberInfo &m, Expr x, const std::vector<Expr> &now) {
    const auto &al = m.a->alphas;
    std::vector<Expr> terms;
    std::vector<Expr> t = tags(P, m, x);
    for (size_t b = 0; b < al.size(); b++) {
        std::vector<Expr> f{local_at(field(P, m.k, "_S"), add_i(mul_i(sl(m, x), int_c(static_cast<int64_t>(al.size()))), int_c(static_cast<int64_t>(b))))};
        for (size_t i = 0; i < now.size(); i++)
            for (int q = 0; q < al[b][i]; q++) f.push_back(make_sub(now[i], t[i]));
        terms.push_back(f.size() == 1 ? f[0] : make_mul(f));
    }
    Expr v = terms.size() == 1 ? terms[0] : make_add(terms);
    // Exponential-polynomial: the value at d is e^{λ·(d - ref)} Σ_α S_α(ref) (d - ref)^α.
    if (m.a->relation == Relation::ExpPolynomial) v = make_mul(v, alpha(m, x, now, t, Mode{P, false, false}));
    return v;
}

Expr PassLowering::current_value(const MemberInfo &m, Expr x, const Mode &mode) {
    Expr v = value_of(mode.P, m, x, Mode{mode.P, false, false});
    if (mode.estimate && m.a->op == ReduceOp::Sum)
        v = make_select(make_cmp(CmpOp::GT, count(mode.P), int_c(0)), make_div(make_mul(v, L_), count(mode.P)), v);
    return v;
}

Expr PassLowering::value_of(const std::string &P, const MemberInfo &m, Expr x, const Mode &raw) {
    const MemberAnalysis &a = *m.a;
    Expr n = count(P);
    Expr v = nullptr;
    switch (m.form) {
    case Form::SumShift:
        v = make_select(seen_b(P, m, x), make_add(acc(P, m, x), make_mul(n, tag(P, m, x, 0))), real_c(0));
        break;
    case Form::ArgSelect: v = make_select(seen_b(P, m, x), idx(P, m, x), real_c(0)); break;
    case Form::Select: case Form::Prod: v = acc(P, m, x); break;
    case Form::Mult: {
        std::vector<Expr> d = deltas(m, x, raw), safe;
        for (Expr e : d) safe.push_back(sanitize(e));
        std::vector<Expr> t = tags(P, m, x);
        Expr al = alpha(m, x, safe, t, raw);
        if (a.op == ReduceOp::Prod) al = make_pow(al, n);
        Expr s = make_select(differs(safe, t), make_mul(acc(P, m, x), al), acc(P, m, x));
        Expr h = bind(with_deltas(a.H_def, m, d, {}), m, x, nullptr, raw);
        if (a.op == ReduceOp::Prod) h = make_pow(h, n);
        Expr empty = make_or(make_not(seen_b(P, m, x)), make_cmp(CmpOp::EQ, acc(P, m, x), real_c(0)));
        v = make_select(empty, real_c(0), make_mul(s, h));
        break;
    }
    case Form::Poly: {
        std::vector<Expr> d = deltas(m, x, raw);
        v = poly_value(P, m, x, d);
        // Deferred exponent terms of the exponential-polynomial form, at the final δ.
        if (a.H_def && !a.H_def->is_const(1)) v = make_mul(v, bind(with_deltas(a.H_def, m, d, {}), m, x, nullptr, raw));
        v = make_select(seen_b(P, m, x), v, real_c(0));
        break;
    }
    case Form::TopK: RF_INTERNAL_ASSERT(false) << "top-k value read in its pass";
    }
    // φ maps the selected G to the member's value; an arg-selection's value is the index itself.
    if (m.sel && m.form != Form::ArgSelect) v = apply_phi(m, x, v, raw);
    return v;
}

Expr PassLowering::apply_phi(const MemberInfo &m, Expr x, Expr u, const Mode &mode) {
    const MemberAnalysis &a = *m.a;
    if (a.phi_literal) return bind(substitute(a.phi_literal, a.u_sym, u), m, x, nullptr, mode);
    Expr phi = substitute(a.phi, a.u_sym, u);
    return bind(with_deltas(phi, m, deltas(m, x, mode), {}), m, x, nullptr, mode);
}

StmtP PassLowering::over_extra(const MemberInfo &m, const std::function<std::vector<StmtP>(Expr)> &body) {
    Expr x = make_index("$x" + std::to_string(m.k) + "_" + std::to_string(uid_++));
    return for_loop(x, int_c(0), m.X, body(x), LoopKind::Independent);
}

std::vector<StmtP> PassLowering::update_tile(const std::string &P) {
    std::vector<StmtP> out;
    Expr j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
    for (const auto &[def, local] : prologue_ids_) {
        auto slots = ctx_.tile_prologues.find(def);
        if (slots == ctx_.tile_prologues.end()) continue;
        const TensorDef *d = p_.find_def(def);
        Expr j = jvar();
        std::map<std::string, Expr> vars;
        for (size_t i = 0; i < d->vars.size(); i++) {
            size_t slot = slots->second[i];
            vars[d->vars[i]->name] = slot < c_.n_row ? row_vars_[slot] : unravel(j, axis_ext_, slot - c_.n_row);
        }
        Expr v = translate(d->body, vars, nullptr, Mode{});
        // A dot product over the row block (QKᵀ) becomes a GEMM in the recognize_gemms pass.
        out.push_back(rows_of_block({for_loop(j, j0, j1, {assign(local_at(local, add_i(mul_i(rr(), int_c(row_stride())), make_sub(j, j0))), v)}, LoopKind::Simd)}));
    }
    plan_gemms(P);
    plan_row_reduced();
    plan_shared_rescales(P);
    plan_companions(P);
    for (const MemberInfo &m : members_) {
        const MemberAnalysis &a = *m.a;
        Mode run{P, false, false}, san{P, false, true};
        out.push_back(comment("member " + std::to_string(m.k) + ": " + relation_name(a.relation)));
        for (const StmtP &s : shared_rescale_factor(P, m)) out.push_back(s);
        if (auto it = gemm_of_.find(m.k); it != gemm_of_.end()) {
            for (const StmtP &s : member_gemm(P, m, it->second)) out.push_back(s);
            continue;
        }
        if (Expr t = shared_term(P, m); t && materialize(t, out)) {
            out.push_back(rows_of_block({over_extra(m, [&](Expr x) { return shared_update(P, m, x, t); })}));
            continue;
        }
        if (lanes(m)) {
            for (const StmtP &s : lanes_member(P, m, run)) out.push_back(s);
            continue;
        }
        switch (m.form) {
        case Form::SumShift: case Form::Select: case Form::Prod: case Form::ArgSelect: case Form::TopK: {
            Expr body = selection_body(m);
            out.push_back(rows_of_block({over_extra(m, [&](Expr x) { return plain_update(P, m, x, body, run); })}));
            break;
        }
        case Form::Mult:
        {
            std::vector<StmtP> body;
            hoist_deltas(P, m, body);
            body.push_back(over_extra(m, [&](Expr x) { return mult_update(P, m, x, san); }));
            if (row_flagged_.count(m.k))  // the row's flag and tags, after every point is rescaled
                for (const StmtP &q : after_terms(P, m, int_c(0), hoisted_.at(m.k))) body.push_back(q);
            out.push_back(rows_of_block(body));
            hoisted_.erase(m.k);
        }
            break;
        case Form::Poly:
            out.push_back(rows_of_block({over_extra(m, [&](Expr x) {
                std::vector<StmtP> s;
                std::vector<Expr> c = deltas(m, x, Mode{P, true, true});
                std::vector<Expr> cv;
                std::string tagn = "$c" + std::to_string(uid_++);
                for (size_t i = 0; i < c.size(); i++) {
                    s.push_back(decl(tagn + "_" + std::to_string(i), LocalClass::State, {}, c[i]));
                    cv.push_back(local_var(tagn + "_" + std::to_string(i)));
                }
                s.push_back(if_then(seen_b(P, m, x), {shift_at(P, m, x, tags(P, m, x), cv)}));
                std::vector<StmtP> loop;
                std::vector<std::string> accs;
                for (size_t b = 0; b < a.basis.size(); b++) {
                    accs.push_back("$t" + std::to_string(uid_++));
                    s.push_back(decl(accs.back(), LocalClass::Tile, {}, real_c(0)));
                }
                Expr j = jvar();
                for (size_t b = 0; b < a.basis.size(); b++)
                    loop.push_back(accum(ReduceOp::Sum, local_var(accs[b]), bind(with_deltas(a.basis[b], m, cv, {}), m, x, j, san)));
                s.push_back(for_loop(j, j0, j1, loop, LoopKind::Simd));
                Expr nb = int_c(static_cast<int64_t>(a.alphas.size()));
                for (size_t b = 0; b < a.basis.size(); b++)
                    s.push_back(accum(ReduceOp::Sum, local_at(field(P, m.k, "_S"), add_i(mul_i(sl(m, x), nb), int_c(static_cast<int64_t>(b)))), local_var(accs[b])));
                for (const StmtP &q : companion_updates(P, m, x, accs)) s.push_back(q);
                for (size_t i = 0; i < cv.size(); i++) s.push_back(assign(tag(P, m, x, i), cv[i]));
                s.push_back(assign(seen(P, m, x), real_c(1)));
                return s;
            })}));
            break;
        }
    }
    for (const StmtP &s : row_reduced_updates()) out.push_back(s);
    return out;
}

StmtP PassLowering::shift_at(const std::string &P, const MemberInfo &m, Expr x, std::vector<Expr> from, std::vector<Expr> to) {
    // PolyShift works on the S slots of one extra point: name + offset carried in args via a
    // Load of the first slot (the printer takes its address).
    Expr nb = int_c(static_cast<int64_t>(m.a->alphas.size()));
    Expr g = m.a->relation == Relation::ExpPolynomial ? alpha(m, x, to, from, Mode{P, false, true}) : nullptr;
    auto s = std::const_pointer_cast<Stmt>(poly_shift(field(P, m.k, "_S"), m.a->alphas, std::move(from), std::move(to)));
    s->target = local_at(field(P, m.k, "_S"), mul_i(sl(m, x), nb));
    if (!g) return s;
    // The exponential-polynomial map is the binomial shift times e^{λ·(ref - ref_old)} (<= 1 for a
    // running max); a zero moment is left as it is, never 0 · inf.
    std::string gn = "$g" + std::to_string(uid_++);
    Expr q = make_index("$q" + std::to_string(uid_++));
    Expr S = local_at(field(P, m.k, "_S"), add_i(mul_i(sl(m, x), nb), q));
    Expr scaled = make_select(make_cmp(CmpOp::EQ, S, real_c(0)), S, make_mul(S, local_var(gn)));
    return block({s, decl(gn, LocalClass::State, {}, g), for_loop(q, int_c(0), nb, {assign(S, scaled)})});
}

StmtP PassLowering::shift_reference(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, const Mode &run) {
    // The reference point of a shifted sum (sum_shifts_terms); 0 for the plain sum.
    Expr ref = real_c(0);
    if (sum_shifts_terms(body_expr)) {
        Expr first = bind(body_expr, m, x, local_var("$tb", SType::Int), run);
        // The identity holds for any ref, but the tile loop forms v - ref in the compute type (float32)
        // while ref is evaluated here in the state's type (float64 on the CPU). "ref finite" must hold
        // in float32: exp(186.7) is 1e81 in float64, inf as a float, and the loop's terms became
        // inf - inf = inf, exp(16) - inf = -inf, whose sum is NaN where the plain float sum is inf
        // (scripts/fuzz_specs.py seed 77 #93). Bounding |ref| by 2^64 also keeps L·|ref| (L <= 2^20
        // terms per tile) far from float32's 2^128, so the shifted partial sums cannot overflow where
        // the plain ones do not; a mean beyond 2^64 gains nothing from the shift. Otherwise ref = 0.
        ref = make_select(make_cmp(CmpOp::LE, make_call(Func::abs, first), real_c(0x1p64)), first, real_c(0));
    }
    return if_then(make_not(seen_b(P, m, x)), {assign(tag(P, m, x, 0), ref), assign(acc(P, m, x), real_c(0)),
                                               assign(seen(P, m, x), real_c(1))});
}

Expr PassLowering::shifted_term(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, Expr v) {
    return sum_shifts_terms(body_expr) ? make_sub(v, tag(P, m, x, 0)) : v;
}

std::vector<StmtP> PassLowering::plain_update(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, const Mode &run) {
    std::vector<StmtP> s;
    Expr j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
    Expr j = jvar();
    Expr v = bind(body_expr, m, x, j, run);
    switch (m.form) {
    case Form::SumShift: {
        // Σ v = Σ (v - ref) + n·ref with ref the first term (shift_reference), or 0: then the terms
        // are summed as they are (the reference stays 0: acc + n·0 reads the same).
        s.push_back(shift_reference(P, m, x, body_expr, run));
        std::string t = "$t" + std::to_string(uid_++);
        s.push_back(decl(t, LocalClass::Tile, {}, real_c(0)));
        std::vector<StmtP> loop{accum(ReduceOp::Sum, local_var(t), shifted_term(P, m, x, body_expr, v))};
        if (auto it = ctx_.term_store.find(m.def->name); it != ctx_.term_store.end()) {
            if (it->second[0] == '$') {
                loop.push_back(assign(local_at(it->second, add_i(mul_i(rr(), L_), j)), v));
            } else {
                std::vector<Expr> at(row_vars_.begin(), row_vars_.end());
                at.push_back(j);
                loop.push_back(store(make_load(it->second, at, DType::f64, SType::Real), v));
            }
        }
        s.push_back(for_loop(j, j0, j1, loop, LoopKind::Simd));
        s.push_back(accum(ReduceOp::Sum, acc(P, m, x), local_var(t)));
        break;
    }
    case Form::Prod: {
        std::string t = "$t" + std::to_string(uid_++);
        s.push_back(decl(t, LocalClass::Tile, {}, real_c(1)));
        s.push_back(for_loop(j, j0, j1, {accum(ReduceOp::Prod, local_var(t), v)}, LoopKind::Simd));
        s.push_back(accum(ReduceOp::Prod, acc(P, m, x), local_var(t)));
        s.push_back(assign(seen(P, m, x), real_c(1)));
        break;
    }
    case Form::Select: {
        std::string t = "$t" + std::to_string(uid_++);
        s.push_back(decl(t, LocalClass::Tile, {}, real_c(reduce_identity(m.op))));
        s.push_back(for_loop(j, j0, j1, {accum(m.op, local_var(t), v)}, LoopKind::Simd));
        Expr best = m.op == ReduceOp::Max ? make_max(acc(P, m, x), local_var(t)) : make_min(acc(P, m, x), local_var(t));
        s.push_back(assign(acc(P, m, x), best));
        s.push_back(assign(seen(P, m, x), real_c(1)));
        break;
    }
    case Form::ArgSelect: {
        // The tile's best value first (a vector reduction); the index scan runs only when the
        // tile can win (ties keep the earlier, lower index).
        ReduceOp vop = m.op == ReduceOp::ArgMax ? ReduceOp::Max : ReduceOp::Min;
        std::string t = "$t" + std::to_string(uid_++);
        s.push_back(decl(t, LocalClass::Tile, {}, real_c(reduce_identity(vop))));
        s.push_back(for_loop(j, j0, j1, {accum(vop, local_var(t), v)}, LoopKind::Simd));
        Expr tv = local_var(t), cur = acc(P, m, x);
        Expr wins = make_or(make_not(seen_b(P, m, x)),
                            make_or(make_and(make_cmp(CmpOp::NE, tv, tv), make_cmp(CmpOp::EQ, cur, cur)),
                                    make_cmp(vop == ReduceOp::Max ? CmpOp::GT : CmpOp::LT, tv, cur)));
        Expr j2 = jvar();
        Expr v2 = bind(body_expr, m, x, j2, run);
        s.push_back(if_then(wins, {for_loop(j2, j0, j1, {arg_select(m.op, cur, idx(P, m, x), v2, j2)})}));
        s.push_back(assign(seen(P, m, x), real_c(1)));
        break;
    }
    case Form::TopK: {
        Expr val = topk_key(m, v);
        s.push_back(for_loop(j, j0, j1, {topk_insert(field(P, m.k, "_tk"), mul_i(sl(m, x), m.K), sl(m, x), m.K, ReduceOp::TopK, val, j)}));
        s.push_back(assign(seen(P, m, x), real_c(1)));
        break;
    }
    default: RF_INTERNAL_ASSERT(false) << "not a plain member";
    }
    return s;
}

std::vector<StmtP> PassLowering::mult_update(const std::string &P, const MemberInfo &m, Expr x, const Mode &san) {
    const MemberAnalysis &a = *m.a;
    Expr j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
    std::vector<Expr> d;
    std::vector<StmtP> s = rescale(P, m, x, d);
    if (companion_into_.count(m.k)) {  // its tile sum is added in a later member's loop (LowerCompanions.cpp)
        for (const StmtP &q : after_terms(P, m, x, d)) s.push_back(q);
        return s;
    }
    // The update term is the body as written divided by the deferred factors (keeps 0/0 = 0);
    // U itself where H_def is 0 or not finite.
    Expr j = jvar();
    Expr body = bind(m.def->body->body(), m, x, j, san);
    Expr term;
    if (a.H_def->is_const(1)) {
        term = body;
    } else if (a.defers_exp) {
        term = bind(with_deltas(a.U, m, d, {}), m, x, j, san);
    } else {
        std::string ih = "$ih" + std::to_string(uid_++);
        s.push_back(decl(ih, LocalClass::State, {}, make_div(real_c(1), bind(with_deltas(a.H_def, m, d, {}), m, x, nullptr, san))));
        Expr u = bind(with_deltas(a.U, m, d, {}), m, x, j, san);
        Expr ihv = local_var(ih);
        term = make_select(make_and(is_finite(ihv), make_cmp(CmpOp::NE, ihv, real_c(0))), make_mul(body, ihv), u);
    }
    std::string tn = "$t" + std::to_string(uid_++);
    s.push_back(decl(tn, LocalClass::Tile, {}, real_c(a.op == ReduceOp::Prod ? 1 : 0)));
    s.push_back(for_loop(j, j0, j1, {accum(a.op == ReduceOp::Prod ? ReduceOp::Prod : ReduceOp::Sum, local_var(tn), term)}, LoopKind::Simd));
    s.push_back(accum(a.op == ReduceOp::Prod ? ReduceOp::Prod : ReduceOp::Sum, acc(P, m, x), local_var(tn)));
    if (row_flagged_.count(m.k)) return s;  // update_tile writes the row's flag and tags after the points
    for (const StmtP &q : after_terms(P, m, x, d)) s.push_back(q);
    return s;
}

std::vector<StmtP> PassLowering::row_decls(Expr flat_row) {
    std::vector<StmtP> s;
    for (size_t i = 0; i + 1 < c_.n_row; i++)
        s.push_back(decl(row_vars_[i]->name, LocalClass::Index, {}, unravel(flat_row, block_ext_, i)));
    Expr base = c_.n_row == 0 ? int_c(0) : mul_i(unravel(flat_row, block_ext_, c_.n_row - 1), int_c(nb_));
    s.push_back(decl("$rbase", LocalClass::Index, {}, base));
    Expr valid = c_.n_row == 0 ? int_c(1) : make_min(int_c(nb_), make_sub(row_ext_.back(), local_var("$rbase", SType::Int)));
    s.push_back(decl("$nbv", LocalClass::Index, {}, valid));
    return s;
}

StmtP PassLowering::tiles(const std::string &P, Expr lo, Expr hi) {
    Expr T = int_c(ctx_.schedule.tile);
    Expr t = make_index("$tile");
    std::vector<StmtP> body;
    Expr j0 = add_i(lo, mul_i(t, T));
    body.push_back(decl("$tb", LocalClass::Index, {}, j0));
    body.push_back(decl("$te", LocalClass::Index, {}, make_min(add_i(local_var("$tb", SType::Int), T), hi)));
    body.push_back(decl("$nold", LocalClass::Index, {}, count(P)));
    body.push_back(assign(count(P), add_i(count(P), make_sub(local_var("$te", SType::Int), local_var("$tb", SType::Int)))));
    // Prologue tile arrays are declared before the update that fills them.
    std::vector<StmtP> upd = update_tile(P);
    for (const auto &[def, local] : prologue_ids_) body.push_back(decl(local, LocalClass::Tile, {int_c(nb_ * row_stride())}, nullptr));
    for (const auto &[F, arr] : shared_)
        body.push_back(decl(arr.first, int8_arrays_.count(arr.first) ? LocalClass::Int8 : LocalClass::Tile,
                            {int_c(nb_ * shared_stride(arr.first))}, nullptr));
    for (const StmtP &s : upd) body.push_back(s);
    Expr ntiles = make_idiv(add_i(make_sub(hi, lo), int_c(ctx_.schedule.tile - 1)), T);
    return for_loop(t, int_c(0), ntiles, body);
}

PassKernel PassLowering::single_segment() {
    if (!ctx_.row_reduced.empty()) return row_reduced_kernel();
    Expr row = make_index("$row");
    std::vector<StmtP> body = row_decls(row);
    for (const StmtP &s : row_statements()) body.push_back(s);
    return {for_loop(row, int_c(0), product(block_ext_), body, LoopKind::Parallel), nullptr};
}

std::vector<StmtP> PassLowering::row_statements() {
    std::vector<StmtP> body;
    for (const auto &[member, target] : ctx_.term_store)
        if (target[0] == '$') body.push_back(decl(target, LocalClass::Tile, {mul_i(int_c(nb_), L_)}, nullptr));
    init_state(body, "$A");
    body.push_back(tiles("$A", int_c(0), L_));
    for (const StmtP &s : lists_to_rows("$A")) body.push_back(s);
    for (const StmtP &s : finalize("$A")) body.push_back(s);
    for (const StmtP &s : epilogue()) body.push_back(s);
    return body;
}

PassKernel PassLowering::multi_segment() {
    Expr S = int_c(ctx_.schedule.segments);
    Expr rows = product(block_ext_);
    Expr SS = int_c(1);  // the count n
    std::vector<std::pair<std::string, Expr>> f = fields("$A");
    for (auto &[name, n] : f) SS = add_i(SS, n);
    const std::string &buf = ctx_.scratch_buffer;
    auto save_or_load = [&](const std::string &P, Expr base, bool save) {
        std::vector<StmtP> s;
        Expr off = base;
        Expr slot0 = make_load(buf, {off}, DType::f64, SType::Real);
        if (save) s.push_back(store(slot0, count(P)));
        else s.push_back(assign(count(P), make_cast(DType::i64, slot0)));
        off = add_i(off, int_c(1));
        for (auto &[name, n] : fields(P)) {
            Expr q = make_index("$q" + std::to_string(uid_++));
            Expr g = make_load(buf, {add_i(off, q)}, DType::f64, SType::Real);
            s.push_back(for_loop(q, int_c(0), n, {save ? store(g, local_at(name, q)) : assign(local_at(name, q), g)}));
            off = add_i(off, n);
        }
        return s;
    };
    // Phase 1: every (row, segment) pair sweeps its part of the axis.
    Expr w = make_index("$w");
    std::vector<StmtP> p1;
    p1.push_back(decl("$rowflat", LocalClass::Index, {}, make_idiv(w, S)));
    p1.push_back(decl("$seg", LocalClass::Index, {}, make_mod(w, S)));
    for (const StmtP &s : row_decls(local_var("$rowflat", SType::Int))) p1.push_back(s);
    init_state(p1, "$A");
    Expr seg = local_var("$seg", SType::Int);
    p1.push_back(decl("$lo", LocalClass::Index, {}, make_idiv(mul_i(seg, L_), S)));
    p1.push_back(decl("$hi", LocalClass::Index, {}, make_idiv(mul_i(add_i(seg, int_c(1)), L_), S)));
    p1.push_back(tiles("$A", local_var("$lo", SType::Int), local_var("$hi", SType::Int)));
    for (const StmtP &s : save_or_load("$A", mul_i(w, SS), true)) p1.push_back(s);
    // Phase 2: per row, merge the segment states in order, finalize, epilogue.
    Expr row = make_index("$row");
    std::vector<StmtP> p2;
    for (const StmtP &s : row_decls(row)) p2.push_back(s);
    init_state(p2, "$A");
    init_state(p2, "$B");
    for (const StmtP &s : save_or_load("$A", mul_i(mul_i(row, S), SS), false)) p2.push_back(s);
    Expr sv = make_index("$s");
    std::vector<StmtP> m = save_or_load("$B", mul_i(add_i(mul_i(row, S), sv), SS), false);
    for (const StmtP &s : merge("$A", "$B")) m.push_back(s);
    p2.push_back(for_loop(sv, int_c(1), S, m));
    for (const StmtP &s : finalize("$A")) p2.push_back(s);
    for (const StmtP &s : epilogue()) p2.push_back(s);
    StmtP body = block({for_loop(w, int_c(0), mul_i(rows, S), p1, LoopKind::Parallel),
                        for_loop(row, int_c(0), rows, p2, LoopKind::Parallel)});
    return {body, mul_i(mul_i(rows, S), SS)};
}

}  // namespace rf::tile::lowering

namespace rf::tile {

using lowering::PassLowering;


PassKernel lower_pass(const PassContext &ctx) {
    PassLowering l(ctx);
    return l.run();
}

StmtP lower_onchip_rows(const std::vector<PassContext> &passes) {
    // Every pass of the chain on the same row, one after the other, while the row is in cache. The
    // locals of pass i are renamed apart ($p<i>_...); the row variables are shared.
    std::vector<StmtP> body;
    Expr row = make_index("$row"), rows = nullptr;
    for (size_t i = 0; i < passes.size(); i++) {
        PassLowering l(passes[i]);
        l.prepare();
        if (i == 0) {
            body = l.row_decls_public(row);
            rows = l.rows();
        }
        std::string pfx = "$p" + std::to_string(i) + "_";
        auto rename = [&](const std::string &n) {
            if (n.empty() || n[0] != '$' || n == "$row" || n == "$rbase" || n == "$nbv" ||
                (n.size() >= 3 && n[1] == 'r' && isdigit(static_cast<unsigned char>(n[2]))))
                return n;
            return pfx + n.substr(1);
        };
        body.push_back(comment("pass " + std::to_string(i)));
        body.push_back(rename_locals(block(l.row_statements()), rename));
    }
    return for_loop(row, int_c(0), rows, body, LoopKind::Parallel);
}

}  // namespace rf::tile
