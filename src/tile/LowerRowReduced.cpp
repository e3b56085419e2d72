/** \file LowerRowReduced.cpp
 * Row-reduced members: a sum over one chain's row variable computed inside that chain's tiles, where
 * the chain already holds its terms' shared factor (the attention backward's dQ = Σ_j dS·K inside the
 * dK/dV chain, whose tiles hold dS: 5 tile GEMMs per tile pair instead of 7; linear + cross-entropy's
 * dX inside its dW chain: 3 GEMMs instead of 4). The choice, the per-tile GEMM and the kernel shape.
 */
#include <algorithm>

#include "support/Error.h"
#include "tile/GemmOperands.h"
#include "tile/Lower.h"
#include "tile/PassLowering.h"

namespace rf::tile {

namespace {

bool is_var(Expr e, const std::string &name) { return e->kind == Kind::Var && e->role == VarRole::Index && e->name == name; }

/** The host chain's loop slots of u's variables when u can ride along host (see RowReducedMember):
 *  u = Σ_j F·W with every per-tile prologue u reads computed in host at the same slots, j at host's
 *  last row slot, every host slot bound by one of u's variables, one variable left over (the last
 *  of u, the GEMM's N), and W a load of an input indexed by j and that variable (contiguous) but not
 *  by the host's axis. nullopt otherwise. */
std::optional<RowReducedMember> as_row_reduced(const TensorDef &u, const ChainPlan &host, size_t host_index,
                                               const std::map<std::string, std::map<size_t, std::vector<size_t>>> &prologues,
                                               const Program &p) {
    if (u.body->kind != Kind::Reduce || u.body->rop != ReduceOp::Sum || u.body->num_axes() != 1 || u.is_topk()) return std::nullopt;
    const TensorDef *first = p.find_def(host.members[0]);
    const size_t n_row = host.n_row;
    Expr j = u.body->axis(0);
    RowReducedMember r;
    r.def = &u;
    r.slot_of[j->name] = n_row - 1;
    bool ok = true, shares = false;
    std::set<std::string> host_members(host.members.begin(), host.members.end());
    visit(u.body, [&](Expr n) {
        if (n->kind != Kind::Load || !ok) return;
        if (host_members.count(n->name)) ok = false;  // a running value of the host: not final yet
        auto pro = prologues.find(n->name);
        if (pro == prologues.end()) return;
        auto at = pro->second.find(host_index);
        if (at == pro->second.end()) {
            ok = false;
            return;
        }
        shares = true;
        for (size_t i = 0; i < n->args.size() && ok; i++) {
            Expr a = n->args[i];
            if (a->kind != Kind::Var || a->role != VarRole::Index) {
                ok = false;
                break;
            }
            auto [it, fresh] = r.slot_of.emplace(a->name, at->second[i]);
            ok = fresh || it->second == at->second[i];
        }
    });
    if (!ok || !shares) return std::nullopt;
    // Injective, every slot bound, extents agreeing with the host's loops.
    std::set<size_t> bound;
    for (auto &[name, slot] : r.slot_of)
        if (!bound.insert(slot).second) return std::nullopt;
    if (bound.size() != n_row + 1) return std::nullopt;
    if (u.body->extents[0] != first->extents[n_row - 1]) return std::nullopt;
    std::string axis_var;
    for (size_t i = 0; i < u.vars.size(); i++) {
        auto it = r.slot_of.find(u.vars[i]->name);
        if (it == r.slot_of.end()) {
            if (r.extra || i + 1 != u.vars.size()) return std::nullopt;
            r.extra = u.vars[i];
            continue;
        }
        if (it->second == n_row - 1) return std::nullopt;
        Expr want = it->second < n_row ? first->extents[it->second] : host.axis_extents[0];
        if (u.extents[i] != want) return std::nullopt;
        if (it->second == n_row) axis_var = u.vars[i]->name;
    }
    if (!r.extra || axis_var.empty()) return std::nullopt;
    // The term F·W: exactly one factor carries the extra variable, an input load as the GEMM's B.
    auto split = gemm_operands::split_factor(u.body->body(), r.extra->name);
    if (!split) return std::nullopt;
    Expr w = gemm_operands::operand(split->second);
    if (!w || !p.find_input(w->name)) return std::nullopt;
    if (!is_var(w->args.back(), r.extra->name) || mentions(w, axis_var)) return std::nullopt;
    int at_j = 0;
    for (Expr a : w->args) at_j += is_var(a, j->name) ? 1 : mentions(a, j->name) ? 2 : 0;
    if (at_j != 1) return std::nullopt;
    for (size_t i = 0; i + 1 < w->args.size(); i++)
        if (mentions(w->args[i], r.extra->name)) return std::nullopt;
    return r;
}

/** A chain that can host row-reduced members: one pass, one axis, one segment (the partial sums
 *  are per worker or per outer row; segments would split a row's tiles across workers). */
bool can_host(const ChainPlan &c, size_t index, const Program &p, const LowerOptions &o) {
    if (!c.fused || c.passes.size() != 1 || c.axis_extents.size() != 1 || c.n_row == 0) return false;
    if (auto it = o.schedules.find(static_cast<int>(index)); it != o.schedules.end() && it->second.segments > 1) return false;
    Schedule s = default_schedule(c, p, o);
    // Rows as SIMD lanes keep no row-major tile of the block for the row-reduced GEMM to read.
    return s.segments <= 1 && s.strategy != Strategy::MultiPass && s.row_lanes == RowLanes::None;
}

/** Every member a single-pass independent sum: the chain's kernel does nothing the host cannot. */
bool can_ride(const ChainPlan &c) {
    if (c.passes.size() != 1) return false;
    for (const MemberAnalysis &a : c.passes[0].members_exec)
        if (a.relation != Relation::Independent || a.op != ReduceOp::Sum) return false;
    return true;
}

bool reads_any(const Program &p, const std::vector<std::string> &readers, const std::set<std::string> &names) {
    bool found = false;
    for (const std::string &n : readers)
        if (const TensorDef *d = p.find_def(n))
            visit(d->body, [&](Expr e) { found = found || (e->kind == Kind::Load && names.count(e->name)); });
    return found;
}

}  // namespace

RowReducedChoice choose_row_reduced(const std::vector<ChainPlan> &chains,
                                    const std::map<std::string, std::map<size_t, std::vector<size_t>>> &prologues,
                                    const Program &p, const LowerOptions &o) {
    RowReducedChoice choice;
    if (!o.row_reduced_members || o.unfused || o.force_strategy || o.force_segments > 1 || o.compute != DType::f32) return choice;
    struct Candidate {
        size_t rider, host;
        std::vector<RowReducedMember> members;
        int64_t elements;  // the partial sums' size: the smaller, the better
    };
    std::vector<Candidate> found;
    for (size_t a = 0; a < chains.size(); a++) {
        if (!can_ride(chains[a])) continue;
        std::set<std::string> riders(chains[a].members.begin(), chains[a].members.end());
        for (size_t h = 0; h < chains.size(); h++) {
            if (h == a || !can_host(chains[h], h, p, o)) continue;
            // Neither chain may read the other's members (the host's running values are not final;
            // the riders' are not known before the host's last tile).
            std::vector<std::string> host_reads = chains[h].members;
            for (const std::string &n : chains[h].prologue) host_reads.push_back(n);
            if (reads_any(p, host_reads, riders)) continue;
            Candidate c{a, h, {}, 0};
            bool ok = true;
            for (const std::string &n : chains[a].members) {
                auto r = as_row_reduced(*p.find_def(n), chains[h], h, prologues, p);
                if (!r) {
                    ok = false;
                    break;
                }
                c.elements += known_product(r->def->extents, o.sizes).value_or(int64_t(1) << 40);
                c.members.push_back(*r);
            }
            if (ok) found.push_back(std::move(c));
        }
    }
    std::stable_sort(found.begin(), found.end(), [](const Candidate &x, const Candidate &y) { return x.elements < y.elements; });
    for (Candidate &c : found) {
        // A chain rides along one host; a host does not ride.
        if (choice.absorbed.count(c.rider) || choice.absorbed.count(c.host) || choice.by_host.count(c.rider)) continue;
        choice.absorbed.insert(c.rider);
        for (RowReducedMember &m : c.members) choice.by_host[c.host].push_back(std::move(m));
    }
    return choice;
}

int64_t row_reduced_tile(int64_t tile, const std::vector<RowReducedMember> &members, const LowerOptions &o) {
    // Linear + cross-entropy's backward on a 1 MiB L2 (AMD Zen 4, 2 threads): X = D = 1024, tile
    // 1024 → 256, 776 → 688 ms (128: 792 ms); D = 2048: 128, 256 and 512 within 4%.
    if (o.fast_memory_bytes <= 0) return tile;
    for (const RowReducedMember &r : members)
        if (auto x = known_product({r.def->extents.back()}, o.sizes))
            while (tile > 256 && tile * *x * 4 > 2 * o.fast_memory_bytes) tile /= 2;
    return tile;
}

Expr row_reduced_partial_elements(const RowReducedMember &r, const ChainPlan &host, const Program &p, int workers) {
    const TensorDef *first = p.find_def(host.members[0]);
    std::vector<Expr> outer(first->extents.begin(), first->extents.begin() + static_cast<long>(host.n_row - 1));
    Expr E = product(r.def->extents);
    // Fewer outer rows than workers: one copy per worker (see PassLowering::row_reduced_kernel).
    return make_mul(E, make_select(make_cmp(CmpOp::LT, product(outer), int_c(workers)), int_c(workers), int_c(1)));
}

}  // namespace rf::tile

namespace rf::tile::lowering {

std::optional<PassLowering::RowReducedGemm> PassLowering::row_reduced_form(const RowReducedMember &r) {
    std::map<std::string, Expr> vars;
    for (auto &[name, slot] : r.slot_of) vars[name] = slot < c_.n_row ? row_vars_[slot] : jh();
    vars[r.extra->name] = xg();
    auto split = gemm_operands::split_factor(translate(r.def->body->body(), vars, jh(), Mode{}), "$xg");
    if (!split) return std::nullopt;
    RowReducedGemm g;
    g.W = gemm_operand(split->second);
    if (!g.W || mentions(g.W, "$jh")) return std::nullopt;
    g.F = split->first;
    g.w_k = dim_of(g.W, rr());
    int last = static_cast<int>(g.W->args.size()) - 1;
    if (g.w_k < 0 || dim_of(g.W, xg()) != last) return std::nullopt;
    return g;
}

void PassLowering::plan_row_reduced() {
    row_reduced_gemm_.clear();
    for (size_t i = 0; i < ctx_.row_reduced.size(); i++) {
        auto g = row_reduced_form(ctx_.row_reduced[i]);
        RF_INTERNAL_ASSERT(g) << "row-reduced member '" << ctx_.row_reduced[i].def->name << "' is not a tile GEMM";
        row_reduced_gemm_.push_back(*g);
        if (!shared_.count(g->F)) shared_[g->F] = {"$f" + std::to_string(uid_++), false};
    }
}

Expr PassLowering::row_reduced_index(const RowReducedMember &r, const std::function<Expr(size_t slot)> &at_slot, Expr extra) {
    std::vector<Expr> idx;
    for (Expr v : r.def->vars) idx.push_back(v == r.extra ? extra : at_slot(r.slot_of.at(v->name)));
    return flatten(idx, r.def->extents);
}

std::vector<StmtP> PassLowering::row_reduced_updates() {
    // partial[i][x] += Σ_rr F[rr][i] · W[rbase + rr][x] over the block's rows and the tile's i: one
    // GEMM C += Aᵀ·B whose A is the factor's tile array as the members left it (rows: the block's).
    std::vector<StmtP> out;
    Expr tb = local_var("$tb", SType::Int), te = local_var("$te", SType::Int);
    for (size_t i = 0; i < ctx_.row_reduced.size(); i++) {
        const RowReducedMember &r = ctx_.row_reduced[i];
        const RowReducedGemm &g = row_reduced_gemm_[i];
        out.push_back(comment("row-reduced member " + std::to_string(i) + ": summed over the block's rows"));
        materialize(g.F, out);
        const TensorDef *d = r.def;
        GemmInfo gi;
        gi.M = make_sub(te, tb);
        gi.N = d->extents.back();
        gi.K = local_var("$nbv", SType::Int);
        const std::string &a_name = shared_.at(g.F).first;
        gi.a_base = local_at(a_name, int_c(0));
        gi.a_si = int_c(1);
        gi.a_sk = int_c(shared_stride(a_name));
        gi.b_base = at_origin(g.W, {{xg(), int_c(0)}, {rr(), int_c(0)}});
        gi.b_sj = int_c(1);
        gi.b_sk = stride(g.W, g.w_k);
        Expr origin = row_reduced_index(r, [&](size_t slot) { return slot < c_.n_row ? row_vars_[slot] : tb; }, int_c(0));
        gi.c_base = make_load(r.partial, {add_i(local_var("$poff" + std::to_string(i), SType::Int), origin)}, DType::f32, SType::Real);
        size_t axis_dim = 0;
        for (size_t k = 0; k < d->vars.size(); k++)
            if (d->vars[k] != r.extra && r.slot_of.at(d->vars[k]->name) == c_.n_row) axis_dim = k;
        gi.c_si = gemm_operands::stride(d->extents, static_cast<int>(axis_dim));
        gi.alpha = real_c(1);
        gi.trans_b = false;
        gi.accumulate = true;
        out.push_back(gemm(gi));
    }
    return out;
}

StmtP PassLowering::worker_copies_added(const RowReducedMember &r) {
    // out[p] = Σ_w partial[w·E + p] in worker order; parallel over the points but the last
    // dimension, a serial loop along it (contiguous).
    const int64_t Wn = ctx_.row_reduced_workers;
    std::vector<Expr> lead(r.def->extents.begin(), r.def->extents.end() - 1);
    Expr e = make_index("$me" + std::to_string(uid_++)), x = make_index("$mx" + std::to_string(uid_++));
    Expr w = make_index("$mw" + std::to_string(uid_++));
    Expr E = product(r.def->extents);
    std::vector<Expr> idx;
    std::vector<StmtP> row;
    for (size_t k = 0; k < lead.size(); k++) {
        std::string n = "$mi" + std::to_string(uid_++);
        row.push_back(decl(n, LocalClass::Index, {}, unravel(e, lead, k)));
        idx.push_back(local_var(n, SType::Int));
    }
    idx.push_back(x);
    Expr partial = make_load(r.partial, {add_i(mul_i(w, E), flatten(idx, r.def->extents))}, DType::f32, SType::Real);
    std::string s = "$ms" + std::to_string(uid_++);
    row.push_back(for_loop(x, int_c(0), r.def->extents.back(),
                           {decl(s, LocalClass::Tile, {}, real_c(0)),
                            for_loop(w, int_c(0), int_c(Wn), {assign(local_var(s), make_add(local_var(s), partial))}),
                            store(make_load(r.def->name, idx, DType::f64, SType::Real), local_var(s))}));
    return for_loop(e, int_c(0), product(lead), row, LoopKind::Parallel);
}

PassKernel PassLowering::row_reduced_kernel() {
    // Two forms, chosen at run time by the sizes. With at least as many outer rows (the host's rows
    // but the blocked one: b, h) as workers, each outer row is one parallel iteration that owns the
    // partial sums it touches (dQ[b, h, :, :]): it zeroes them, sweeps its row blocks and stores
    // them. With fewer, each worker sums the row blocks w, w + W, ... into its own copy, and the
    // copies are added in worker order afterwards: deterministic for a given number of workers.
    const int64_t Wn = ctx_.row_reduced_workers;
    Expr W = int_c(Wn);
    std::vector<Expr> outer_ext(block_ext_.begin(), block_ext_.end() - 1);
    Expr O = product(outer_ext), NJ = block_ext_.back();
    Expr owner = make_cmp(CmpOp::GE, O, W);
    Expr u = make_index("$u"), q = make_index("$q");
    Expr own = local_var("$own", SType::Int);  // 1: outer-row form
    // The outer row's coordinates, once per iteration (owner form).
    std::vector<StmtP> body;
    std::vector<Expr> outer_at;
    for (size_t k = 0; k < outer_ext.size(); k++) {
        std::string n = "$ro" + std::to_string(k);
        body.push_back(decl(n, LocalClass::Index, {}, unravel(u, outer_ext, k)));
        outer_at.push_back(local_var(n, SType::Int));
    }
    // Zero or store the partial sums of outer row u (owner form), every (axis, extra) point.
    auto per_point = [&](const RowReducedMember &r, const std::function<StmtP(Expr flat, const std::vector<Expr> &idx)> &f) {
        Expr a = make_index("$ra" + std::to_string(uid_++)), x = make_index("$rx" + std::to_string(uid_++));
        std::vector<Expr> idx;
        for (Expr v : r.def->vars) {
            if (v == r.extra) {
                idx.push_back(x);
                continue;
            }
            size_t slot = r.slot_of.at(v->name);
            idx.push_back(slot < c_.n_row ? outer_at[slot] : a);
        }
        return for_loop(a, int_c(0), axis_ext_[0], {for_loop(x, int_c(0), r.def->extents.back(), {f(flatten(idx, r.def->extents), idx)})});
    };
    auto partial_at = [&](const RowReducedMember &r, Expr flat) { return make_load(r.partial, {flat}, DType::f32, SType::Real); };
    auto target_at = [&](const RowReducedMember &r, const std::vector<Expr> &idx) { return make_load(r.def->name, idx, DType::f64, SType::Real); };
    body.push_back(decl("$own", LocalClass::Index, {}, make_select(owner, int_c(1), int_c(0))));
    for (size_t i = 0; i < ctx_.row_reduced.size(); i++)  // where this iteration's partial sums start
        body.push_back(decl("$poff" + std::to_string(i), LocalClass::Index, {},
                            make_select(owner, int_c(0), mul_i(u, product(ctx_.row_reduced[i].def->extents)))));
    std::vector<StmtP> zero_owned, zero_copy, store_owned;
    for (const RowReducedMember &r : ctx_.row_reduced) {
        zero_owned.push_back(per_point(r, [&](Expr flat, const std::vector<Expr> &) { return store(partial_at(r, flat), real_c(0)); }));
        store_owned.push_back(per_point(r, [&](Expr flat, const std::vector<Expr> &idx) { return store(target_at(r, idx), partial_at(r, flat)); }));
        Expr e = make_index("$re" + std::to_string(uid_++));
        Expr E = product(r.def->extents);
        zero_copy.push_back(for_loop(e, int_c(0), E, {store(partial_at(r, add_i(mul_i(u, E), e)), real_c(0))}));
    }
    body.push_back(if_then(make_cmp(CmpOp::NE, own, int_c(0)), zero_owned, zero_copy));
    Expr steps = make_select(owner, NJ, make_idiv(add_i(make_sub(product(block_ext_), u), int_c(Wn - 1)), W));
    std::vector<StmtP> row = row_decls(make_select(owner, add_i(mul_i(u, NJ), q), add_i(u, mul_i(q, W))));
    for (const StmtP &s : row_statements()) row.push_back(s);
    body.push_back(for_loop(q, int_c(0), steps, row));
    body.push_back(if_then(make_cmp(CmpOp::NE, own, int_c(0)), store_owned));
    std::vector<StmtP> kernel{for_loop(u, int_c(0), make_select(owner, O, W), body, LoopKind::Parallel)};
    // The worker copies, added in order.
    std::vector<StmtP> merges;
    for (const RowReducedMember &r : ctx_.row_reduced) merges.push_back(worker_copies_added(r));
    kernel.push_back(if_then(make_cmp(CmpOp::LT, O, W), merges));
    return {block(kernel), nullptr};
}

}  // namespace rf::tile::lowering
