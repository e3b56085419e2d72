/** \file LowerMerge.cpp
 * The end of a pass: merging segment states with the derived merge, finalizing members (with the
 * literal recompute of rows whose final δ is not finite), and the per-row epilogue.
 */
#include <algorithm>

#include "tile/PassLowering.h"

namespace rf::tile::lowering {

std::vector<StmtP> PassLowering::merge(const std::string &A, const std::string &B) {
    std::vector<StmtP> out;
    Expr nA = local_var("$nA", SType::Int);
    out.push_back(decl("$nA", LocalClass::Index, {}, count(A)));
    out.push_back(assign(count(A), make_add(count(A), count(B))));
    std::vector<StmtP> per_row;
    for (const MemberInfo &m : members_) {
        const MemberAnalysis &a = *m.a;
        per_row.push_back(over_extra(m, [&](Expr x) {
            std::vector<StmtP> s;
            Expr sa = seen_b(A, m, x), sb = seen_b(B, m, x);
            switch (m.form) {
            case Form::Mult: {
                std::string dn = "$d" + std::to_string(uid_++);
                std::vector<Expr> d, dv = deltas(m, x, Mode{A, false, true});
                for (size_t i = 0; i < dv.size(); i++) {
                    s.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, dv[i]));
                    d.push_back(local_var(dn + "_" + std::to_string(i)));
                }
                bool prod = a.op == ReduceOp::Prod;
                auto moved = [&](const std::string &P, Expr n) {
                    Expr al = alpha(m, x, d, tags(P, m, x), Mode{A, false, true});
                    if (prod) al = make_pow(al, n);
                    Expr keep = make_not(differs(d, tags(P, m, x)));
                    if (!prod) keep = make_or(keep, make_cmp(CmpOp::EQ, acc(P, m, x), real_c(0)));
                    return make_select(seen_b(P, m, x), make_select(keep, acc(P, m, x), make_mul(acc(P, m, x), al)),
                                       real_c(prod ? 1 : 0));
                };
                Expr va = moved(A, nA), vb = moved(B, count(B));
                s.push_back(assign(acc(A, m, x), prod ? make_mul(va, vb) : make_add(va, vb)));
                if (row_flagged_.count(m.k)) return s;  // the row's flag and tags after every point (below)
                for (size_t i = 0; i < d.size(); i++) s.push_back(assign(tag(A, m, x, i), d[i]));
                break;
            }
            case Form::Poly: {
                std::string cn = "$c" + std::to_string(uid_++);
                std::vector<Expr> c, cvv = deltas(m, x, Mode{A, true, true});
                for (size_t i = 0; i < cvv.size(); i++) {
                    s.push_back(decl(cn + "_" + std::to_string(i), LocalClass::State, {}, cvv[i]));
                    c.push_back(local_var(cn + "_" + std::to_string(i)));
                }
                Expr nb = int_c(static_cast<int64_t>(a.alphas.size()));
                s.push_back(if_then(sa, {shift_at(A, m, x, tags(A, m, x), c)}));
                s.push_back(if_then(sb, {shift_at(B, m, x, tags(B, m, x), c)}));
                Expr q = make_index("$q" + std::to_string(uid_++));
                Expr slot = add_i(mul_i(sl(m, x), nb), q);
                Expr sA = local_at(field(A, m.k, "_S"), slot), sB = local_at(field(B, m.k, "_S"), slot);
                s.push_back(for_loop(q, int_c(0), nb, {assign(sA, make_add(make_select(sa, sA, real_c(0)), make_select(sb, sB, real_c(0))))}));
                for (size_t i = 0; i < c.size(); i++) s.push_back(assign(tag(A, m, x, i), c[i]));
                break;
            }
            case Form::SumShift:
                // Move B to A's reference point: Σ = T_A + T_B + n_B (ref_B - ref_A).
                s.push_back(if_then(make_and(sa, sb),
                                    {assign(acc(A, m, x), make_add({acc(A, m, x), acc(B, m, x),
                                                                    make_mul(count(B), make_sub(tag(B, m, x, 0), tag(A, m, x, 0)))}))},
                                    {if_then(sb, {assign(acc(A, m, x), acc(B, m, x)), assign(tag(A, m, x, 0), tag(B, m, x, 0))})}));
                break;
            case Form::Prod: s.push_back(if_then(sb, {accum(ReduceOp::Prod, acc(A, m, x), acc(B, m, x))})); break;
            case Form::Select: {
                Expr best = m.op == ReduceOp::Max ? make_max(acc(A, m, x), acc(B, m, x)) : make_min(acc(A, m, x), acc(B, m, x));
                s.push_back(if_then(sb, {if_then(sa, {assign(acc(A, m, x), best)}, {assign(acc(A, m, x), acc(B, m, x))})}));
                break;
            }
            case Form::ArgSelect:
                s.push_back(if_then(sb, {if_then(sa, {arg_select(m.op, acc(A, m, x), idx(A, m, x), acc(B, m, x), idx(B, m, x))},
                                                 {assign(acc(A, m, x), acc(B, m, x)), assign(idx(A, m, x), idx(B, m, x))})}));
                break;
            case Form::TopK: {
                // Segment states keep each row's K slots together (lanes() leaves such lists alone).
                RF_INTERNAL_ASSERT(!lanes(m)) << "a lane-layout top-k list in a segment merge";
                Expr q = make_index("$q" + std::to_string(uid_++));
                Expr slot = add_i(mul_i(sl(m, x), m.K), q);
                s.push_back(for_loop(q, int_c(0), make_cast(DType::i64, local_at(field(B, m.k, "_tk_n"), sl(m, x))),
                                     {topk_insert(field(A, m.k, "_tk"), mul_i(sl(m, x), m.K), sl(m, x), m.K, ReduceOp::TopK,
                                                  local_at(field(B, m.k, "_tk_v"), slot), local_at(field(B, m.k, "_tk_i"), slot))}));
                break;
            }
            }
            s.push_back(assign(seen(A, m, x), make_select(make_or(sa, sb), real_c(1), real_c(0))));
            return s;
        }));
        if (row_flagged_.count(m.k)) {
            // Every point read the row's flags and tags of A and B above; now they move on once.
            Expr x0 = int_c(0);
            std::string dn = "$d" + std::to_string(uid_++);
            std::vector<Expr> dv = deltas(m, x0, Mode{A, false, true});
            for (size_t i = 0; i < dv.size(); i++) {
                per_row.push_back(decl(dn + "_" + std::to_string(i), LocalClass::State, {}, dv[i]));
                per_row.push_back(assign(tag(A, m, x0, i), local_var(dn + "_" + std::to_string(i))));
            }
            per_row.push_back(assign(seen(A, m, x0), make_select(make_or(seen_b(A, m, x0), seen_b(B, m, x0)), real_c(1), real_c(0))));
        }
    }
    out.push_back(rows_of_block(per_row));
    return out;
}

std::vector<StmtP> PassLowering::finalize(const std::string &P) {
    std::vector<StmtP> pre, out, after_rows;
    Mode fin{};  // member loads read the buffers (earlier members are written first)
    std::vector<Expr> row_idx(row_vars_.begin(), row_vars_.end());
    for (const MemberInfo &m : members_) {
        const MemberAnalysis &a = *m.a;
        std::string lit = "$lit" + std::to_string(m.k);
        Expr deps_literal = make_bool(false);
        for (const std::string &dep : a.deps)
            if (auto it = names_.find(dep); it != names_.end() && it->second < m.k)
                deps_literal = make_or(deps_literal, make_cmp(CmpOp::NE, local_var("$lit" + std::to_string(it->second), SType::Int), int_c(0)));
        out.push_back(decl(lit, LocalClass::Index, {}, make_select(deps_literal, int_c(1), int_c(0))));
        if (m.form == Form::Mult || m.form == Form::Poly) {
            out.push_back(over_extra(m, [&](Expr x) {
                std::vector<Expr> bad;
                for (Expr d : deltas(m, x, fin)) bad.push_back(make_not(is_finite(d)));
                // The tile body read the members inside δ sanitized (a non-finite value as 0), so a
                // row where one of them is not finite is recomputed literally even when δ is finite:
                // δ = 1/a with a = max|x| = inf (a masked row's -inf) is 0, while the body had
                // divided by the sanitized 0 (fuzz_specs.py seed 1218 #26, --approx: q = ±inf
                // where the spec gives 0·inf = NaN). Softmax-like δ = m adds nothing new.
                for (Expr v : delta_inputs(m, x, fin)) {
                    Expr b = make_not(is_finite(v));
                    if (std::find(bad.begin(), bad.end(), b) == bad.end()) bad.push_back(b);
                }
                Expr recompute = any(bad);
                // A sum whose every term was 0 (a fully masked row: exp(S - m) with S = m = -inf, 0 in
                // the language) is 0 literally too: no second pass over the row (which, for a chain on
                // a shard where most rows see only masked keys, would be most rows).
                if (m.form == Form::Mult && a.op == ReduceOp::Sum)
                    recompute = make_and(recompute, make_cmp(CmpOp::NE, acc(P, m, x), real_c(0)));
                return std::vector<StmtP>{if_then(recompute, {assign(local_var(lit, SType::Int), int_c(1))})};
            }));
        }
        if (lane_list_outputs(m)) {  // written per slot after the rows (LowerLanes.cpp)
            after_rows.push_back(lane_list_stores(P, m));
            if (m.sel) {
                // Each row's test joins the rows' finalization loop (where δ's members were just
                // computed), raising one flag for the block; the literal lists run only under it.
                std::string any_bad = "$ltkany" + std::to_string(uid_++);
                pre.push_back(decl(any_bad, LocalClass::Index, {}, int_c(0)));
                out.push_back(if_then(topk_delta_not_finite(m, int_c(0)), {assign(local_var(any_bad, SType::Int), int_c(1))}));
                after_rows.push_back(if_then(make_cmp(CmpOp::NE, local_var(any_bad, SType::Int), int_c(0)), {rows_of_block({literal_topk(m)})}));
            }
            continue;
        }
        auto target = [&](const std::string &name, Expr x, Expr slot) {
            std::vector<Expr> i = row_idx;
            for (size_t q = 0; q < m.extra_ext.size(); q++) i.push_back(unravel(x, m.extra_ext, q));
            if (slot) i.push_back(slot);
            return make_load(name, i, DType::f64, SType::Real);
        };
        std::vector<StmtP> normal;
        if (m.form == Form::TopK) {
            normal.push_back(over_extra(m, [&](Expr x) {
                Expr sl = make_index("$sl" + std::to_string(uid_++));
                Expr slot = add_i(mul_i(this->sl(m, x), m.K), sl);
                // The K slots as one vector loop in float64 (φ = exp(u - m)/s per slot of MoE routing).
                return std::vector<StmtP>{for_loop(sl, int_c(0), m.K,
                                                   {store(target(m.def->name, x, sl), listed_output(P, m, x, slot)),
                                                    store(target(m.def->index_name, x, sl), local_at(field(P, m.k, "_tk_i"), slot))},
                                                   LoopKind::Lanes)};
            }));
        } else {
            normal.push_back(over_extra(m, [&](Expr x) {
                return std::vector<StmtP>{store(target(m.def->name, x, nullptr), final_value(P, m, x))};
            }));
        }
        if (m.def->is_topk()) {
            for (const StmtP &s : normal) out.push_back(s);
            if (m.sel) out.push_back(literal_topk(m));
            continue;
        }
        std::vector<StmtP> literal{over_extra(m, [&](Expr x) {
            return std::vector<StmtP>{store(target(m.def->name, x, nullptr), bind(m.def->body, m, x, nullptr, fin))};
        })};
        out.push_back(if_then(make_cmp(CmpOp::NE, local_var(lit, SType::Int), int_c(0)), literal, normal));
    }
    std::vector<StmtP> all = pre;
    all.push_back(rows_of_block(out));
    all.insert(all.end(), after_rows.begin(), after_rows.end());
    return all;
}

StmtP PassLowering::literal_topk(const MemberInfo &m) {
    // The list ranks G where F = φ_δ(G) is strictly monotone in G for every finite δ. A row whose δ
    // (or a member δ reads) is not finite may have no such order: MoE routing's φ = exp(u - m)/s is
    // NaN for every u when a logit is NaN (m = s = NaN), and NaN or 0 when one is +inf (m = +inf), so
    // the spec's list is its NaN and zero ties by index (NaN ranks first), not the largest logits.
    // Such a row ranks F itself: F per element, in the order of the axis, into a list of its own,
    // stored over the outputs the list of G gave (runs after them).
    const Mode fin{};
    return over_extra(m, [&](Expr x) {
        const std::string id = std::to_string(uid_++), list = "$ltk" + id;
        Expr j = make_index("$lj" + id), q = make_index("$lq" + id);
        std::map<std::string, Expr> vars;
        for (size_t i = 0; i < c_.n_row; i++) vars[m.def->vars[i]->name] = row_vars_[i];
        for (size_t i = 0; i < m.extra_vars.size(); i++) vars[m.extra_vars[i]->name] = unravel(x, m.extra_ext, i);
        Expr n = int_c(1);
        for (size_t i = 0; i < m.def->body->num_axes(); i++) {
            vars[m.def->body->axis(i)->name] = unravel(j, axis_ext_, i);
            n = mul_i(n, axis_ext_[i]);
        }
        Expr F = translate(m.def->body->body(), vars, nullptr, fin);  // no tile: prologues in place
        auto target = [&](const std::string &name) {
            std::vector<Expr> at(row_vars_.begin(), row_vars_.end());
            for (size_t i = 0; i < m.extra_ext.size(); i++) at.push_back(unravel(x, m.extra_ext, i));
            at.push_back(q);
            return make_load(name, at, DType::f64, SType::Real);
        };
        std::vector<StmtP> literal{
            decl(list + "_v", LocalClass::State, {m.K}, real_c(0)), decl(list + "_i", LocalClass::State, {m.K}, real_c(0)),
            decl(list + "_n", LocalClass::State, {int_c(1)}, real_c(0)),
            for_loop(j, int_c(0), n, {topk_insert(list, int_c(0), int_c(0), m.K, ReduceOp::TopK, F, j)}),
            for_loop(q, int_c(0), m.K,
                     {store(target(m.def->name), local_at(list + "_v", q)), store(target(m.def->index_name), local_at(list + "_i", q))})};
        return std::vector<StmtP>{if_then(topk_delta_not_finite(m, x), literal)};
    });
}

Expr PassLowering::topk_delta_not_finite(const MemberInfo &m, Expr x) {
    const Mode fin{};
    std::vector<Expr> bad;
    for (Expr d : deltas(m, x, fin)) bad.push_back(make_not(is_finite(d)));
    for (Expr v : delta_inputs(m, x, fin)) {
        Expr b = make_not(is_finite(v));
        if (std::find(bad.begin(), bad.end(), b) == bad.end()) bad.push_back(b);
    }
    return any(bad);
}

Expr PassLowering::listed_output(const std::string &P, const MemberInfo &m, Expr x, Expr slot) {
    Expr u = local_at(field(P, m.k, "_tk_v"), slot);
    if (m.sel && !m.a->increasing) u = make_neg(u);  // a bottom-k of G was listed as the top-k of -G
    return m.sel ? apply_phi(m, x, u, Mode{}) : u;
}

void PassLowering::chunked_row_output(const TensorDef *d, Expr x, Expr v, std::vector<StmtP> &out) {
    // A row output over one axis of extent X, computed and copied out kEpilogueChunk values at a
    // time: for c in [0, ceil(X / S)): e0 = c·S, e1 = min(e0 + S, X); $ep[x - e0] = v(x) for x in
    // [e0, e1); copy Out[row, e0][0, e1 - e0) = $ep. Same values, same roundings as one row at a time;
    // the buffer (S floats, on the stack) stays in L1 between the computation and the copy, where a
    // whole row's buffer (32 KiB at C = 8192, next to the row's kept terms) went through L2 (bf16
    // softmax R = 4096, C = 8192, AMX Xeon: 7.9 -> 6.8 ms in a C++ driver).
    const int64_t S = kEpilogueChunk;
    Expr X = d->extents.back();
    Expr c = make_index("$ec" + std::to_string(uid_++));
    std::string e0 = "$e0_" + std::to_string(uid_), e1 = "$e1_" + std::to_string(uid_), buf = "$ep" + std::to_string(uid_);
    uid_++;
    Expr lo = local_var(e0, SType::Int), hi = local_var(e1, SType::Int);
    Expr cap = X->is_const() && X->value < static_cast<double>(S) ? X : int_c(S);
    epilogue_arrays_.push_back(decl(buf, LocalClass::Tile, {cap}, nullptr));
    std::vector<Expr> first(row_vars_.begin(), row_vars_.end());
    first.push_back(lo);
    std::vector<StmtP> body{decl(e0, LocalClass::Index, {}, mul_i(c, int_c(S))),
                            decl(e1, LocalClass::Index, {}, make_min(add_i(lo, int_c(S)), X)),
                            for_loop(x, lo, hi, {assign(local_at(buf, make_sub(x, lo)), v)}, LoopKind::Simd),
                            copy_row(make_load(d->name, first, DType::f64, SType::Real), local_at(buf, int_c(0)), make_sub(hi, lo))};
    out.push_back(for_loop(c, int_c(0), make_idiv(add_i(X, int_c(S - 1)), int_c(S)), body));
}

std::vector<StmtP> PassLowering::epilogue() {
    std::vector<StmtP> out;
    if (ctx_.epilogues.empty()) return out;
    epilogue_arrays_.clear();
    for (const TensorDef *d : ctx_.epilogues) {
        std::vector<Expr> ext(d->extents.begin() + static_cast<long>(c_.n_row), d->extents.end());
        Expr x = make_index("$e" + std::to_string(uid_++));
        std::map<std::string, Expr> vars;
        std::vector<Expr> idx(row_vars_.begin(), row_vars_.end());
        for (size_t i = 0; i < c_.n_row; i++) vars[d->vars[i]->name] = row_vars_[i];
        for (size_t i = c_.n_row; i < d->vars.size(); i++) {
            Expr u = unravel(x, ext, i - c_.n_row);
            vars[d->vars[i]->name] = u;
            idx.push_back(u);
        }
        Expr v = translate(d->body, vars, nullptr, Mode{});
        for (const auto &[member, target] : ctx_.term_store) {
            bool local = target[0] == '$';
            if (!local && target != d->name) continue;
            if (local && ctx_.term_reader != d->name) continue;
            // The member's term at this element was kept during the sweep: read it back.
            const MemberInfo &m = members_[static_cast<size_t>(names_.at(member))];
            Expr term = bind(m.def->body->body(), m, int_c(0), x, Mode{});
            Expr kept = local ? local_at(target, add_i(mul_i(rr(), L_), x)) : make_load(d->name, idx, DType::f64, SType::Real);
            v = substitute(v, term, kept);
        }
        out.push_back(comment("epilogue: definition " + std::to_string(d - &p_.defs[0])));
        if (ctx_.row_outputs.count(d->name) && ctx_.epilogue_row_buffer && ext.size() == 1) {
            chunked_row_output(d, x, v, out);
            continue;
        }
        if (ctx_.row_outputs.count(d->name)) {
            std::string buf = "$ep" + std::to_string(uid_++);
            Expr X = product(ext);
            // One row reused by the block's rows where they run in turn (the row is copied out before
            // the next is computed), else one per row.
            Expr row = ctx_.epilogue_row_buffer ? int_c(0) : mul_i(rr(), X);
            epilogue_arrays_.push_back(decl(buf, LocalClass::Tile, {ctx_.epilogue_row_buffer ? X : mul_i(int_c(nb_), X)}, nullptr));
            out.push_back(for_loop(x, int_c(0), X, {assign(local_at(buf, add_i(row, x)), v)}, LoopKind::Simd));
            std::vector<Expr> first(row_vars_.begin(), row_vars_.end());
            for (size_t i = c_.n_row; i < d->vars.size(); i++) first.push_back(int_c(0));
            out.push_back(copy_row(make_load(d->name, first, DType::f64, SType::Real), local_at(buf, row), X));
            continue;
        }
        out.push_back(for_loop(x, int_c(0), product(ext), {store(make_load(d->name, idx, DType::f64, SType::Real), v)}, LoopKind::Simd));
    }
    std::vector<StmtP> all = epilogue_arrays_;
    // Rows that share one row buffer run in order: their loop is serial, not independent.
    bool shared_row = ctx_.epilogue_row_buffer && !epilogue_arrays_.empty();
    all.push_back(rows_of_block(std::move(out), shared_row ? LoopKind::Serial : LoopKind::Independent));
    return all;
}

}  // namespace rf::tile::lowering
