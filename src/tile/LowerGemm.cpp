/** \file LowerGemm.cpp
 * Member GEMMs chosen while lowering a pass: Σ_j F(j)·W(j, x) members over a block of rows (one GEMM,
 * a GEMM per GQA group, or a GEMV per row), and per-tile factors shared by members. (Prologue GEMMs,
 * QKᵀ, are found afterwards by the recognize_gemms pass, RecognizeGemms.cpp.)
 */
#include <algorithm>

#include "tile/GemmOperands.h"
#include "tile/PassLowering.h"

namespace rf::tile::lowering {

gemm_operands::Rows PassLowering::block_rows() const {
    Expr rbase = local_var("$rbase", SType::Int);
    return {rr(), rbase, make_add(rbase, rr()), nb_};
}

int PassLowering::dim_of(Expr load, Expr v) const { return gemm_operands::dim_of(load, v, block_rows()); }

Expr PassLowering::group_divisor(Expr e) const { return gemm_operands::group_divisor(e, block_rows()); }

Expr PassLowering::grouped(Expr e, Expr G) const { return gemm_operands::grouped(e, G, block_rows()); }

StmtP PassLowering::when_grouped(Expr G, StmtP block, StmtP rows) const {
    return gemm_operands::when_grouped(G, block_rows(), std::move(block), std::move(rows));
}

Expr PassLowering::stride(Expr load, int d) const {
    const TensorDef *def = p_.find_def(load->name);
    const InputDecl *in = p_.find_input(load->name);
    return gemm_operands::stride(in ? in->dims : def->extents, d);
}

Expr PassLowering::gemm_operand(Expr e) { return gemm_operands::operand(e); }

Expr PassLowering::at_origin(Expr load, const std::map<Expr, Expr> &to) const {
    return gemm_operands::at_origin(load, to, block_rows());
}

Expr PassLowering::strip_widening(Expr e) {
    while (e->kind == Kind::Cast && (e->dtype == DType::f32 || e->dtype == DType::f64)) e = e->args[0];
    return e;
}

Expr PassLowering::term_of(const std::string &P, const MemberInfo &m, Expr x) {
    if (m.form == Form::Mult) {
        if (!m.a->H_def->is_const(1)) return nullptr;
        return bind(m.def->body->body(), m, x, jh(), Mode{P, false, true});
    }
    if (m.form == Form::SumShift && !m.sel && m.a->relation != Relation::Polynomial)
        return bind(m.def->body->body(), m, x, jh(), Mode{P, false, false});
    return nullptr;
}

std::optional<PassLowering::MemberGemm> PassLowering::gemm_form(const std::string &P, const MemberInfo &m) {
    if (m.extra_vars.size() != 1 || axis_ext_.size() != 1) return std::nullopt;
    // A few columns (x, y, z) are better as vector loops over the tile than as a GEMM call.
    if (m.X->is_const() && m.X->value < 16) return std::nullopt;
    Expr t = term_of(P, m, xg());
    auto split = t ? gemm_operands::split_factor(t, "$xg") : std::nullopt;  // F and the factor carrying x
    if (!split) return std::nullopt;
    MemberGemm g;
    Expr a = split->second;
    g.W = gemm_operand(a);
    if (!g.W) {
        // Weights stored in 16 or 8 bits (quantized GEMMs: f32(Wq[n, k]) with Wq f8e4m3) are
        // a GEMM operand as they are: every backend widens them exactly to f32.
        Expr w = strip_widening(a);
        bool narrow = w->kind == Kind::Load && !w->name.empty() && w->name[0] != '$' &&
                      (w->dtype == DType::f16 || w->dtype == DType::f8e4m3 || w->dtype == DType::f8e5m2);
        if (narrow) g.W = w;
    }
    if (!g.W) {
        Expr w = strip_widening(a);
        if (w->kind != Kind::Load || w->dtype != DType::i8 || w->name.empty() || w->name[0] == '$') return std::nullopt;
        g.W = w;
        g.int8 = true;
    }
    g.per_row = mentions(g.W, "$rr");
    g.F = split->first;
    if (g.int8) {
        // Quantized activations times int8 weights: F must itself be an i8-rounded value.
        Expr q = strip_widening(g.F);
        if (q->kind != Kind::Cast || q->dtype != DType::i8) return std::nullopt;
    }
    g.w_x = dim_of(g.W, xg());
    g.w_j = dim_of(g.W, jh());
    int last = static_cast<int>(g.W->args.size()) - 1;
    if (g.w_x < 0 || g.w_j < 0) return std::nullopt;
    if (g.w_x == last) g.nn = true;
    else if (g.w_j == last) g.nn = false;
    else return std::nullopt;
    if (g.int8 && g.nn) return std::nullopt;  // the int8 kernel takes W[x][j] (K contiguous)
    return g;
}

void PassLowering::plan_gemms(const std::string &P) {
    gemm_of_.clear();
    shared_.clear();
    for (const MemberInfo &m : members_)
        if (auto g = gemm_form(P, m)) {
            gemm_of_[m.k] = *g;
            if (!shared_.count(g->F)) shared_[g->F] = {"$f" + std::to_string(uid_++), false};
            if (g->int8) int8_arrays_.insert(shared_.at(g->F).first);
        }
}

Expr PassLowering::shared_term(const std::string &P, const MemberInfo &m) {
    if (!m.extra_vars.empty()) return nullptr;
    Expr t = term_of(P, m, int_c(0));
    return t && shared_.count(t) ? t : nullptr;
}

Expr PassLowering::shared_at(Expr F) {
    const std::string &name = shared_.at(F).first;
    return local_at(name, add_i(mul_i(rr(), int_c(shared_stride(name))), make_sub(jh(), local_var("$tb", SType::Int))));
}

bool PassLowering::materialize(Expr F, std::vector<StmtP> &out) {
    auto it = shared_.find(F);
    if (it == shared_.end()) return false;
    if (!it->second.second) {
        it->second.second = true;
        out.push_back(rows_of_block({for_loop(jh(), local_var("$tb", SType::Int), local_var("$te", SType::Int),
                                              {assign(shared_at(F), F)}, LoopKind::Simd)}));
    }
    return true;
}

void PassLowering::hoist_deltas(const std::string &P, const MemberInfo &m, std::vector<StmtP> &out) {
    hoisted_.erase(m.k);
    if (m.form != Form::Mult || m.extra_vars.empty()) return;
    std::vector<Expr> probe = deltas(m, xg(), Mode{P, false, true});
    for (Expr e : probe)
        if (mentions(e, "$xg")) return;
    std::string dn = "$dh" + std::to_string(uid_++);
    std::vector<Expr> locals;
    for (size_t i = 0; i < probe.size(); i++) {
        out.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, probe[i]));
        locals.push_back(local_var(dn + "_" + std::to_string(i)));
    }
    hoisted_[m.k] = locals;
}

std::vector<Expr> PassLowering::rescale_key(const std::string &P, const MemberInfo &m) {
    // α with placeholders for δ and the tags: two members with the same δ (which reads only
    // members before them: δ's dependencies precede a member in the chain) and the same α rescale
    // by the same value whenever their tags agree.
    if (m.form != Form::Mult || m.a->op != ReduceOp::Sum || m.nd == 0) return {};
    Mode san{P, false, true};
    std::vector<Expr> k = deltas(m, xg(), san), now, old;
    for (Expr d : k)
        if (mentions(d, "$xg")) return {};
    for (size_t i = 0; i < m.nd; i++) {
        now.push_back(local_var("$rf_now" + std::to_string(i)));
        old.push_back(local_var("$rf_old" + std::to_string(i)));
    }
    Expr al = alpha(m, xg(), now, old, san);
    if (mentions(al, "$xg")) return {};
    k.push_back(al);
    return k;
}

void PassLowering::plan_shared_rescales(const std::string &P) {
    rescale_factor_.clear();
    rescale_first_.clear();
    std::map<std::vector<Expr>, std::vector<const MemberInfo *>> groups;
    std::vector<std::vector<Expr>> order;
    for (const MemberInfo &m : members_) {
        std::vector<Expr> k = rescale_key(P, m);
        if (k.empty()) continue;
        if (!groups.count(k)) order.push_back(k);
        groups[k].push_back(&m);
    }
    auto one_point = [](const MemberInfo *m) { return m->X->is_const() && m->X->value <= 1; };
    for (const std::vector<Expr> &k : order) {
        std::vector<const MemberInfo *> g = groups[k];
        // The factor reads the tags of one member at x = 0, which exist only where it has an extra
        // point: a member with a constant, positive X answers for all; otherwise the members are
        // split by X (all of a part empty or all not), each part with its own factor.
        std::vector<std::vector<const MemberInfo *>> parts;
        auto fixed = std::find_if(g.begin(), g.end(), [](const MemberInfo *m) { return m->X->is_const() && m->X->value >= 1; });
        if (fixed != g.end()) {
            std::rotate(g.begin(), fixed, fixed + 1);  // the representative first, the rest in order
            parts.push_back(g);
        } else {
            for (const MemberInfo *m : g) {
                auto same = std::find_if(parts.begin(), parts.end(), [&](const auto &q) { return q[0]->X == m->X; });
                if (same == parts.end()) parts.push_back({m});
                else same->push_back(m);
            }
        }
        for (const std::vector<const MemberInfo *> &part : parts) {
            // One member with several extra points shares the factor among them (their tags move
            // together for the same reason); one member with one point has nothing to share.
            if (part.size() < 2 && one_point(part[0])) continue;
            std::string f = "$rf" + std::to_string(uid_++);
            int first = part[0]->k;
            for (const MemberInfo *m : part) {
                rescale_factor_[m->k] = f;
                first = std::min(first, m->k);
            }
            rescale_first_[first] = part[0]->k;
        }
    }
    for (int k : row_flagged_) RF_INTERNAL_ASSERT(rescale_factor_.count(k)) << "row-flagged member " << k << " without a row factor";
}

std::vector<StmtP> PassLowering::shared_rescale_factor(const std::string &P, const MemberInfo &m) {
    auto first = rescale_first_.find(m.k);
    if (first == rescale_first_.end()) return {};
    const MemberInfo &rep = members_.at(static_cast<size_t>(first->second));
    const std::string &f = rescale_factor_.at(m.k);
    Mode san{P, false, true};
    // Per row: f = α(δ, τ_rep) when the representative has seen terms and δ moved, else 1.
    std::vector<StmtP> row;
    std::vector<Expr> d, dv = deltas(rep, int_c(0), san);
    std::string dn = "$d" + std::to_string(uid_++), fn = f + "_v";
    for (size_t i = 0; i < dv.size(); i++) {
        row.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, dv[i]));
        d.push_back(local_var(dn + "_" + std::to_string(i)));
    }
    std::vector<Expr> t0 = tags(P, rep, int_c(0));
    row.push_back(decl(fn, LocalClass::State, {}, real_c(1)));
    Expr due = make_and(seen_b(P, rep, int_c(0)), differs(d, t0));
    if (!(rep.X->is_const() && rep.X->value >= 1)) due = make_and(make_cmp(CmpOp::GT, rep.X, int_c(0)), due);
    row.push_back(if_then(due, {assign(local_var(fn), alpha(rep, int_c(0), d, t0, san))}));
    row.push_back(assign(local_at(f, rr()), local_var(fn)));
    return {comment("rescale factor per row, shared by the members and extra points with this δ and α"), decl(f, LocalClass::Tile, {int_c(nb_)}, nullptr),
            rows_of_block(row)};
}

std::vector<StmtP> PassLowering::rescale(const std::string &P, const MemberInfo &m, Expr x, std::vector<Expr> &d) {
    std::vector<StmtP> s;
    if (m.form != Form::Mult) return s;
    const MemberAnalysis &a = *m.a;
    Mode san{P, false, true};
    if (auto it = hoisted_.find(m.k); it != hoisted_.end()) {
        d = it->second;
    } else {
        std::string dn = "$d" + std::to_string(uid_++);
        std::vector<Expr> dv = deltas(m, x, san);
        for (size_t i = 0; i < dv.size(); i++) {
            s.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, dv[i]));
            d.push_back(local_var(dn + "_" + std::to_string(i)));
        }
    }
    if (auto f = rescale_factor_.find(m.k); f != rescale_factor_.end()) {
        // The group's factor (1 where this member's tags say no rescale is due: they equal the
        // representative's). acc = 0 stays 0, as below.
        s.push_back(if_then(make_cmp(CmpOp::NE, acc(P, m, x), real_c(0)), {assign(acc(P, m, x), make_mul(acc(P, m, x), local_at(f->second, rr())))}));
        return s;
    }
    std::vector<Expr> t = tags(P, m, x);
    Expr al = alpha(m, x, d, t, san);
    if (a.op == ReduceOp::Prod) al = make_pow(al, local_var("$nold", SType::Int));
    Expr cond = make_and(seen_b(P, m, x), differs(d, t));
    if (a.op == ReduceOp::Sum) cond = make_and(cond, make_cmp(CmpOp::NE, acc(P, m, x), real_c(0)));
    s.push_back(if_then(cond, {assign(acc(P, m, x), make_mul(acc(P, m, x), al))}));
    return s;
}

std::vector<StmtP> PassLowering::after_terms(const std::string &P, const MemberInfo &m, Expr x, const std::vector<Expr> &d) {
    std::vector<StmtP> s;
    for (size_t i = 0; i < d.size(); i++) s.push_back(assign(tag(P, m, x, i), d[i]));
    s.push_back(assign(seen(P, m, x), real_c(1)));
    return s;
}

std::vector<StmtP> PassLowering::shared_update(const std::string &P, const MemberInfo &m, Expr x, Expr F) {
    std::vector<Expr> d;
    std::vector<StmtP> s = rescale(P, m, x, d);
    std::string tn = "$t" + std::to_string(uid_++);
    s.push_back(decl(tn, LocalClass::Tile, {}, real_c(0)));
    std::vector<StmtP> loop{accum(ReduceOp::Sum, local_var(tn), shared_at(F))};
    // A member whose terms the epilogue reuses (Y = exp(X - m) / s: split_for_term_reuse) stores
    // each term, as plain_update does: the epilogue only divides what is stored. Without this, a
    // term shared with a GEMM member (O = Σ exp(X - m)·V / s beside Y) left Y unwritten.
    if (auto it = ctx_.term_store.find(m.def->name); it != ctx_.term_store.end()) {
        if (it->second[0] == '$') {
            loop.push_back(assign(local_at(it->second, add_i(mul_i(rr(), L_), jh())), shared_at(F)));
        } else {
            std::vector<Expr> at(row_vars_.begin(), row_vars_.end());
            at.push_back(jh());
            loop.push_back(store(make_load(it->second, at, DType::f64, SType::Real), shared_at(F)));
        }
    }
    s.push_back(for_loop(jh(), local_var("$tb", SType::Int), local_var("$te", SType::Int), loop, LoopKind::Simd));
    s.push_back(accum(ReduceOp::Sum, acc(P, m, x), local_var(tn)));
    for (const StmtP &q : after_terms(P, m, x, d)) s.push_back(q);
    return s;
}

bool PassLowering::row_rescale(const std::string &P, const MemberInfo &m, std::vector<StmtP> &out) {
    // One factor per row instead of one exp per column: when δ does not depend on the free index x
    // (hoisted) and neither does α = H(δ_new)/H(δ_old) apart from the tags, every column of the
    // row carries the same tag and seen flag — this GEMM path rescales all columns before the tile,
    // adds the tile's product to all of them and sets all their tags after it, the merge maps equal
    // inputs to equal outputs, and every state starts equal — so column 0 speaks for the row:
    //   s_x ← s_x · α(δ, tag_0)   for every x, when seen_0 and δ ≠ tag_0.
    auto it = hoisted_.find(m.k);
    if (m.form != Form::Mult || m.a->op != ReduceOp::Sum || it == hoisted_.end()) return false;
    Mode san{P, false, true};
    const std::vector<Expr> &d = it->second;
    std::vector<Expr> t0 = tags(P, m, int_c(0));
    Expr al = alpha(m, xg(), d, t0, san);
    if (mentions(al, "$xg")) return false;
    std::string f = "$rs" + std::to_string(uid_++);
    if (auto shared = rescale_factor_.find(m.k); shared != rescale_factor_.end()) {
        out.push_back(decl(f, LocalClass::State, {}, local_at(shared->second, rr())));
    } else {
        out.push_back(decl(f, LocalClass::State, {}, real_c(1)));
        out.push_back(if_then(make_and(make_cmp(CmpOp::GT, m.X, int_c(0)), make_and(seen_b(P, m, int_c(0)), differs(d, t0))),
                              {assign(local_var(f), al)}));
    }
    StmtP columns = over_extra(m, [&](Expr x) {
        // acc = 0 stays 0 (α may overflow to inf where the old tag is far above the new δ).
        return std::vector<StmtP>{if_then(make_cmp(CmpOp::NE, acc(P, m, x), real_c(0)), {assign(acc(P, m, x), make_mul(acc(P, m, x), local_var(f)))})};
    });
    // A factor of 1 leaves every column as it is (s · 1 = s for every float: ±0, ±inf and NaN
    // included), so the row skips them: once a row's running max settles, most tiles rescale nothing.
    out.push_back(if_then(make_cmp(CmpOp::NE, local_var(f), real_c(1)), {columns}));
    return true;
}

std::vector<StmtP> PassLowering::member_gemm(const std::string &P, const MemberInfo &m, const MemberGemm &g) {
    std::vector<StmtP> out;
    materialize(g.F, out);
    std::vector<StmtP> pre;
    hoist_deltas(P, m, pre);
    if (!row_rescale(P, m, pre))
        pre.push_back(over_extra(m, [&](Expr x) {
            std::vector<Expr> d;
            return rescale(P, m, x, d);
        }));
    if (m.form == Form::Mult) out.push_back(rows_of_block(pre));
    std::string tmp = "$g" + std::to_string(uid_++);
    out.push_back(decl(tmp, LocalClass::Tile, {mul_i(int_c(nb_), m.X)}, g.nn ? real_c(0) : nullptr));
    GemmInfo gi;
    gi.M = g.per_row ? int_c(1) : local_var("$nbv", SType::Int);
    gi.N = m.X;
    gi.K = make_sub(local_var("$te", SType::Int), local_var("$tb", SType::Int));
    const std::string &a_name = shared_.at(g.F).first;
    gi.a_base = local_at(a_name, g.per_row ? mul_i(rr(), int_c(shared_stride(a_name))) : int_c(0));
    gi.a_si = int_c(shared_stride(a_name));
    gi.a_sk = int_c(1);
    gi.b_base = g.per_row ? substitute(substitute(g.W, xg(), int_c(0)), jh(), local_var("$tb", SType::Int))
                          : at_origin(g.W, {{xg(), int_c(0)}, {jh(), local_var("$tb", SType::Int)}});
    gi.b_sj = stride(g.W, g.w_x);
    gi.b_sk = stride(g.W, g.w_j);
    gi.c_base = local_at(tmp, g.per_row ? mul_i(rr(), m.X) : int_c(0));
    gi.c_si = m.X;
    gi.alpha = real_c(1);
    gi.trans_b = !g.nn;
    gi.accumulate = g.nn;
    if (!g.per_row) {
        out.push_back(gemm(gi));
    } else {
        StmtP rows = rows_of_block({gemm(gi)});
        Expr G = group_divisor(g.W);
        if (G && nb_ > 1) {
            GemmInfo gb = gi;
            gb.M = local_var("$nbv", SType::Int);
            gb.a_base = local_at(shared_.at(g.F).first, int_c(0));
            gb.b_base = at_origin(grouped(g.W, G), {{xg(), int_c(0)}, {jh(), local_var("$tb", SType::Int)}});
            gb.c_base = local_at(tmp, int_c(0));
            out.push_back(when_grouped(G, gemm(gb), rows));
        } else {
            out.push_back(rows);
        }
    }
    std::vector<StmtP> post;
    hoist_deltas(P, m, post);
    post.push_back(over_extra(m, [&](Expr x) {
        std::vector<Expr> d;
        std::vector<StmtP> s;
        if (m.form == Form::Mult) {
            // δ again for the tag (hoisted when it does not depend on x); the rescale happened above.
            if (auto it = hoisted_.find(m.k); it != hoisted_.end()) d = it->second;
            else
                for (size_t i = 0; i < m.nd; i++) d.push_back(deltas(m, x, Mode{P, false, true})[i]);
        }
        s.push_back(accum(ReduceOp::Sum, acc(P, m, x), local_at(tmp, add_i(mul_i(rr(), m.X), x))));
        if (!row_flagged_.count(m.k))
            for (const StmtP &q : after_terms(P, m, x, d)) s.push_back(q);
        return s;
    }));
    if (row_flagged_.count(m.k))  // the row's flag and tags, once
        for (const StmtP &q : after_terms(P, m, int_c(0), hoisted_.at(m.k))) post.push_back(q);
    out.push_back(rows_of_block(post));
    hoisted_.erase(m.k);
    return out;
}

}  // namespace rf::tile::lowering
