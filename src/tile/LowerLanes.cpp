/** \file LowerLanes.cpp
 * Per-tile member updates that take the rows of a block as SIMD lanes (Schedule::row_lanes, the CPU):
 * for each axis position j of the tile, one vector step over the block's rows. Column reductions
 * (a shifted sum read along the innermost row variable) and chains of short rows (MoE routing's
 * softmax and top-k over 8-256 experts: a row is shorter than a vector loop's set-up) use them. Each
 * row's terms are still taken in the order of j; rows are independent, so the exchange of the loops
 * changes nothing but a sum's rounding order.
 */
#include "tile/PassLowering.h"

#include "support/Error.h"

namespace rf::tile::lowering {

namespace {
/** The longest top-k list kept as lanes: its insertion is K compare-and-swap steps per element. */
constexpr int64_t kLaneTopK = 16;
}  // namespace

bool PassLowering::lanes(const MemberInfo &m) const {
    const RowLanes which = ctx_.schedule.row_lanes;
    if (which == RowLanes::None || nb_ <= 1 || !m.X->is_const(1) || ctx_.term_store.count(m.def->name)) return false;
    if (which == RowLanes::TopK && m.form != Form::TopK) return false;
    switch (m.form) {
    case Form::SumShift: return !m.sel;
    case Form::Select: return true;
    // The term loop reads δ afresh per element; a deferred factor H_def (its 1/H) or a companion
    // member that sums this member's terms keeps the row-at-a-time update.
    case Form::Mult:
        return m.a->op == ReduceOp::Sum && m.a->H_def && m.a->H_def->is_const(1) && !companion_into_.count(m.k) &&
               !row_flagged_.count(m.k);
    // The lane layout of the list (slot-major, tk_slot) is not the one segment merges insert into.
    case Form::TopK: return ctx_.schedule.segments <= 1 && m.K->is_const() && m.K->value >= 1 && m.K->value <= kLaneTopK;
    default: return false;
    }
}

std::vector<StmtP> PassLowering::lists_to_rows(const std::string &P) {
    // A lane list keeps slot q of every row of the block side by side (q·nb + rr: a vector step over
    // the rows reads and writes one contiguous run per slot); after the last tile it goes back to
    // one row's K slots together (rr·K + q), the layout finalize reads with a vector loop per row.
    std::vector<StmtP> out;
    for (const MemberInfo &m : members_) {
        if (m.form != Form::TopK || !lanes(m) || lane_list_outputs(m)) continue;
        Expr K = m.K, n = mul_i(K, int_c(nb_)), q = make_index("$q" + std::to_string(uid_++));
        Expr q2 = make_index("$q" + std::to_string(uid_++));
        for (const char *f : {"_tk_v", "_tk_i"}) {
            std::string list = field(P, m.k, f), rows = "$tkrows" + std::to_string(uid_++);
            out.push_back(decl(rows, LocalClass::State, {n}, real_c(0)));
            out.push_back(rows_of_block({for_loop(q, int_c(0), K, {assign(local_at(rows, add_i(mul_i(rr(), K), q)),
                                                                          local_at(list, add_i(mul_i(q, int_c(nb_)), rr())))})}));
            out.push_back(for_loop(q2, int_c(0), n, {assign(local_at(list, q2), local_at(rows, q2))}, LoopKind::Lanes));
        }
    }
    return out;
}

bool PassLowering::lane_list_outputs(const MemberInfo &m) const {
    if (m.form != Form::TopK || !lanes(m)) return false;
    // A later member whose final value reads the list's outputs (at its row) needs them written in
    // the rows' finalization, before its own.
    for (const MemberInfo &later : members_)
        if (later.k > m.k)
            for (const std::string &dep : later.a->deps)
                if (dep == m.def->name || dep == m.def->index_name) return false;
    return true;
}

StmtP PassLowering::lane_list_stores(const std::string &P, const MemberInfo &m) {
    // Why: a slot loop per row (K = 6 iterations of float64 exp and division, a vector of 4 and two
    // scalar calls) cost more than the routing itself for short rows (MoE routing T = 16384, E = 8,
    // top-6: 0.68 -> 0.47 ms, emitted kernel, AMD Zen 4). Per slot, one vector loop over the rows
    // reads the list where the insertion left it (slot-major: q·nb + rr) and the rows' member values
    // (their finalization ran first), each element the same expression as the row-at-a-time form.
    Expr q = make_index("$sl" + std::to_string(uid_++));
    Expr slot = add_i(mul_i(q, int_c(nb_)), rr());
    auto target = [&](const std::string &name) {
        std::vector<Expr> i(row_vars_.begin(), row_vars_.end());
        i.push_back(q);
        return make_load(name, i, DType::f64, SType::Real);
    };
    StmtP rows = for_loop(rr(), int_c(0), local_var("$nbv", SType::Int),
                          {store(target(m.def->name), listed_output(P, m, int_c(0), slot)),
                           store(target(m.def->index_name), local_at(field(P, m.k, "_tk_i"), slot))},
                          LoopKind::Lanes);
    return for_loop(q, int_c(0), m.K, {rows});
}

Expr PassLowering::selection_body(const MemberInfo &m) const {
    const MemberAnalysis &a = *m.a;
    return m.sel ? (a.Gsel_literal ? a.Gsel_literal : a.Gsel) : m.def->body->body();
}

Expr PassLowering::topk_key(const MemberInfo &m, Expr v) const {
    return (m.sel && !m.a->increasing) ? make_neg(v) : v;  // bottom-k of G as top-k of -G
}

std::vector<StmtP> PassLowering::lanes_member(const std::string &P, const MemberInfo &m, const Mode &run) {
    switch (m.form) {
    case Form::SumShift: return lanes_update(P, m, m.def->body->body(), run);
    case Form::Select: return lanes_select(P, m, run);
    case Form::Mult: return lanes_mult(P, m);
    case Form::TopK: return lanes_topk(P, m, run);
    default: RF_INTERNAL_ASSERT(false) << "member " << m.def->name << " has no lane update";
    }
    return {};
}

StmtP PassLowering::over_lanes(std::vector<StmtP> body) {
    return for_loop(rr(), int_c(0), local_var("$nbv", SType::Int), std::move(body), LoopKind::Simd);
}

std::vector<StmtP> PassLowering::lanes_update(const std::string &P, const MemberInfo &m, Expr body_expr, const Mode &run) {
    // The plain shifted sum (plain_update) with the loops exchanged: acc[rr] += v(rr, j) − ref[rr],
    // one term at a time (no tile partial sum).
    std::vector<StmtP> s;
    Expr x = int_c(0), j0 = local_var("$tb", SType::Int), j1 = local_var("$te", SType::Int);
    Expr j = jvar();
    s.push_back(rows_of_block({shift_reference(P, m, x, body_expr, run)}));
    Expr v = bind(body_expr, m, x, j, run);
    Expr term = shifted_term(P, m, x, body_expr, v);
    s.push_back(for_loop(j, j0, j1, {over_lanes({assign(acc(P, m, x), make_add(acc(P, m, x), term))})}, LoopKind::Serial));
    return s;
}

std::vector<StmtP> PassLowering::lanes_select(const std::string &P, const MemberInfo &m, const Mode &run) {
    // acc[rr] = max(acc[rr], v(rr, j)) for each j: the NaN-propagating max (or min) of the plain
    // update, applied per term instead of to a tile's partial result; max and min are exact, so the
    // order changes nothing.
    Expr x = int_c(0), j = jvar();
    Expr v = bind(selection_body(m), m, x, j, run);
    Expr best = m.op == ReduceOp::Max ? make_max(acc(P, m, x), v) : make_min(acc(P, m, x), v);
    return {for_loop(j, local_var("$tb", SType::Int), local_var("$te", SType::Int), {over_lanes({assign(acc(P, m, x), best)})},
                     LoopKind::Serial),
            over_lanes({assign(seen(P, m, x), real_c(1))})};
}

std::vector<StmtP> PassLowering::lanes_mult(const std::string &P, const MemberInfo &m) {
    // The multiplicative update (mult_update) with the term loop exchanged: per row, δ now and the
    // rescale of the row's sum when δ moved (acc·α(δ, τ)); then acc[rr] += G(rr, j)·H(δ[rr]) for each j,
    // the body as written with the running δ (H_def = 1); then τ = δ and the seen flag per row.
    Mode san{P, false, true};
    Expr x = int_c(0), j = jvar();
    std::vector<Expr> d;
    std::vector<StmtP> s{rows_of_block(rescale(P, m, x, d))};
    Expr term = bind(m.def->body->body(), m, x, j, san);
    s.push_back(for_loop(j, local_var("$tb", SType::Int), local_var("$te", SType::Int),
                         {over_lanes({assign(acc(P, m, x), make_add(acc(P, m, x), term))})}, LoopKind::Serial));
    s.push_back(rows_of_block(after_terms(P, m, x, deltas(m, x, san))));
    return s;
}

std::vector<StmtP> PassLowering::lanes_topk(const std::string &P, const MemberInfo &m, const Mode &run) {
    // Sorted insertion without a branch, the same in every lane. Slot q's entry e_q ranks after the
    // candidate (v, j) when b_q: the slot is still empty, or v ranks before e_q under topk_insert's
    // `better` — NaN before numbers, then the larger value; j is larger than every listed index (the
    // axis is swept in order), so an equal entry stays ahead. The list is sorted, so b is false up to
    // the candidate's place and true from there: slot q takes e_q where !b_q, the candidate where b_q
    // and !b_(q-1), and e_(q-1) where both (the list shifts down by one, the last entry falls off).
    // Every b_q compares with the candidate itself: the slots' decisions do not wait on each other.
    const int64_t K = static_cast<int64_t>(m.K->value);
    Expr x = int_c(0), j = jvar();
    std::string id = std::to_string(uid_++);
    Expr cv = local_var("$cv" + id), ci = local_var("$ci" + id);
    Expr count = local_at(field(P, m.k, "_tk_n"), sl(m, x));
    auto is_nan = [](Expr e) { return make_cmp(CmpOp::NE, e, e); };
    // The candidate is computed in the kernel's compute type (a Tile local), as every vectorized pass
    // computes the same element (see the note at the end). The list's values, its count and the
    // slots' decisions are of that type too (field_class), so every comparison is one vector of
    // floats per 16 rows; the indices stay float64 (exact at any axis length), selected by those
    // decisions. Float64 values and decisions took two vectors per step: MoE routing T = 16384,
    // E = 64, top-8, emitted kernel, AMD Zen 4: 2.05 -> 1.5 ms. (A float compared in float64 kept GCC
    // from vectorizing the rows loop at all: E = 64, top-2, 0.96 -> 2.7 ms.)
    std::vector<StmtP> lane{decl("$cv" + id, LocalClass::Tile, {}, topk_key(m, bind(selection_body(m), m, x, j, run))),
                            decl("$ci" + id, LocalClass::State, {}, make_cast(DType::f64, j))};
    auto slot = [&](const char *f, int64_t q) { return local_at(field(P, m.k, f), add_i(int_c(q * nb_), rr())); };
    std::vector<Expr> ev, ei, after;
    for (int64_t q = 0; q < K; q++) {
        std::string n = id + "_" + std::to_string(q);
        ev.push_back(local_var("$ev" + n));
        ei.push_back(local_var("$ei" + n));
        after.push_back(make_cmp(CmpOp::NE, local_var("$af" + n), real_c(0)));
        Expr empty = make_cmp(CmpOp::GE, real_c(static_cast<double>(q)), count);
        Expr ahead = make_or(make_and(is_nan(cv), make_not(is_nan(ev[q]))), make_cmp(CmpOp::GT, cv, ev[q]));
        lane.push_back(decl("$ev" + n, LocalClass::Tile, {}, slot("_tk_v", q)));
        lane.push_back(decl("$ei" + n, LocalClass::State, {}, slot("_tk_i", q)));
        lane.push_back(decl("$af" + n, LocalClass::Tile, {}, make_select(make_or(empty, ahead), real_c(1), real_c(0))));
    }
    for (int64_t q = 0; q < K; q++) {
        Expr in_v = q == 0 ? cv : make_select(after[q - 1], ev[q - 1], cv);
        Expr in_i = q == 0 ? ci : make_select(after[q - 1], ei[q - 1], ci);
        lane.push_back(assign(slot("_tk_v", q), make_select(after[q], in_v, ev[q])));
        lane.push_back(assign(slot("_tk_i", q), make_select(after[q], in_i, ei[q])));
    }
    lane.push_back(assign(count, make_min(make_add(count, real_c(1)), real_c(static_cast<double>(K)))));
    // The rows loop is Lanes, not Simd: the list's slots and comparisons stay float64 states. The
    // candidate itself is computed in the compute type (a Tile local), like the row-at-a-time
    // insertion (CpuKernelPrinter.cpp selected_value): the listed value must be the element every other
    // pass recomputes, bit for bit — in float64 it rounded to a top-k output one ulp away from the
    // float recomputation, and `f(X) >= TV[r,0]` (TV the top-1 of f(X)) failed on its own maximum
    // (scripts/fuzz_specs.py seed 1204 #53). Two elements equal in float now tie (lower index
    // first), as they do in every vectorized pass.
    StmtP rows = for_loop(rr(), int_c(0), local_var("$nbv", SType::Int), lane, LoopKind::Lanes);
    // The insertion is skipped when no row's list takes the candidate. b_(K-1) is true whenever any
    // b_q is (the list is sorted: v ahead of e_q is ahead of e_(K-1); q >= count gives K-1 >= count),
    // and with every b_q false the steps above keep each slot and count = min(count + 1, K) = K:
    // skipping them changes nothing. Past the first entries few candidates enter (about K/j at the
    // j-th element of a random row), so one comparison replaces K compare-and-swap steps. Only a
    // block of one row (a single token's routing) checks: in a block of several rows some row takes
    // the candidate often enough that the check and its mispredicted branches cost more than the
    // steps they skip (MoE routing T=16384, E=64: 0.93 -> 1.49 ms when every block checked).
    const std::string need = "$need" + id;
    Expr nbv = local_var("$nbv", SType::Int);
    // The check's key is the candidate as the insertion computes it (a Tile local, compute type).
    Expr key = local_var("$ck" + id), last = slot("_tk_v", K - 1);
    Expr enters = make_or(make_cmp(CmpOp::GE, real_c(static_cast<double>(K - 1)), count),
                          make_or(make_and(is_nan(key), make_not(is_nan(last))), make_cmp(CmpOp::GT, key, last)));
    std::vector<StmtP> check{decl("$ck" + id, LocalClass::Tile, {}, topk_key(m, bind(selection_body(m), m, x, j, run))),
                             assign(local_var(need), make_select(enters, real_c(1), real_c(0)))};
    std::vector<StmtP> step{
        decl(need, LocalClass::State, {}, make_select(make_cmp(CmpOp::GT, nbv, int_c(1)), real_c(1), real_c(0))),
        if_then(make_cmp(CmpOp::EQ, local_var(need), real_c(0)), {for_loop(rr(), int_c(0), nbv, check, LoopKind::Serial)}),
        if_then(make_cmp(CmpOp::NE, local_var(need), real_c(0)), {rows})};
    return {for_loop(j, local_var("$tb", SType::Int), local_var("$te", SType::Int), step, LoopKind::Serial),
            over_lanes({assign(seen(P, m, x), real_c(1))})};
}

}  // namespace rf::tile::lowering
