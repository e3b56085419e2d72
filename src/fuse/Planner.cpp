/** \file Planner.cpp
 * Builds the fusion plan: the dependence graph of the reductions, cascades as connected groups of
 * reductions over the same axis (connected by data or by reading the same input the same way — never
 * merely by equal extents), the passes each cascade needs, and the strategy chosen by a cost model.
 */
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "fuse/Plan.h"
#include "sym/Simplify.h"
#include "support/Error.h"

namespace rf {

namespace {

struct RedInfo {
    const TensorDef *def;
    std::vector<Expr> outer;  // definition vars without the top-k axis
    std::vector<Expr> axes, extents;
};

std::vector<Expr> outer_vars(const TensorDef &d) {
    std::vector<Expr> v = d.vars;
    if (d.is_topk()) v.pop_back();
    return v;
}

std::vector<Expr> outer_extents(const TensorDef &d) {
    std::vector<Expr> v = d.extents;
    if (d.is_topk()) v.pop_back();
    return v;
}

bool reads(const TensorDef &consumer, const TensorDef &producer) {
    return mentions(consumer.body, producer.name) || (producer.is_topk() && mentions(consumer.body, producer.index_name));
}

std::vector<Expr> loads_of(Expr e, const std::string &tensor) {
    std::vector<Expr> out;
    visit(e, [&](Expr n) {
        if (n->kind == Kind::Load && n->name == tensor) out.push_back(n);
    });
    return out;
}

/** R2 reads R1 at the row: the leading n indices of every load of R1 are R2's leading n vars. */
bool data_connected(const RedInfo &r1, const RedInfo &r2, size_t n) {
    std::vector<Expr> loads = loads_of(r2.def->body, r1.def->name);
    if (r1.def->is_topk()) {
        auto more = loads_of(r2.def->body, r1.def->index_name);
        loads.insert(loads.end(), more.begin(), more.end());
    }
    if (loads.empty()) return false;
    for (Expr l : loads) {
        // An earlier result is constant along the consumer's axis; a load that moves with the axis
        // (S.sum[b,h,i,j] read by max over j) is data of the consumer, not a cascade dependence.
        for (Expr a : r2.axes)
            if (mentions(l, a->name)) return false;
        for (size_t i = 0; i < n; i++)
            if (i >= l->args.size() || l->args[i] != r2.outer[i]) return false;
    }
    return true;
}

/** R1 and R2 read some tensor at the same positions once R1's row vars and axes are renamed to R2's. */
bool input_connected(const RedInfo &r1, const RedInfo &r2, size_t n) {
    std::set<std::string> tensors;
    visit(r1.def->body, [&](Expr e) {
        if (e->kind == Kind::Load) tensors.insert(e->name);
    });
    for (const std::string &t : tensors) {
        for (Expr l1 : loads_of(r1.def->body, t)) {
            Expr renamed = l1;
            for (size_t i = 0; i < n; i++) renamed = substitute(renamed, r1.outer[i], r2.outer[i]);
            for (size_t i = 0; i < r1.axes.size(); i++) renamed = substitute(renamed, r1.axes[i], r2.axes[i]);
            for (Expr l2 : loads_of(r2.def->body, t)) {
                bool uses_axis = false;
                for (Expr a : r2.axes) uses_axis |= mentions(l2, a->name);
                if (renamed == l2 && uses_axis) return true;
            }
        }
    }
    return false;
}

bool same_exprs(const std::vector<Expr> &a, const std::vector<Expr> &b, size_t n) {
    if (a.size() < n || b.size() < n) return false;
    for (size_t i = 0; i < n; i++)
        if (!provably_equal(a[i], b[i])) return false;
    return true;
}

int64_t product_of(const std::vector<Expr> &exts, const SizeBinding *sizes, bool &known) {
    int64_t p = 1;
    known = true;
    for (Expr e : exts) {
        try {
            p *= sizes ? eval_int(e, *sizes) : eval_int(e, {});
        } catch (const std::exception &) {
            known = false;
            return 0;
        }
    }
    return p;
}

/** The report of a lifted sum `NAME.sum` whose output is NAME = NAME.sum · H(d): the factors H are
 *  pushed into the sum, Σ_j F · H(d), so the verdict shows them as the deferred part of H (the 1/l
 *  of attention, the rsqrt of RMSNorm). Execution keeps them in the epilogue, where they already are. */
std::optional<TensorDef> with_epilogue_factors(const Program &p, const TensorDef &member) {
    size_t dot = member.name.rfind('.');
    if (dot == std::string::npos || member.body->rop != ReduceOp::Sum) return std::nullopt;
    const TensorDef *base = p.find_def(member.name.substr(0, dot));
    if (!base || base->is_reduction() || !base->body) return std::nullopt;
    Expr b = simplify(base->body);
    std::vector<Expr> factors = b->kind == Kind::Mul ? b->args : std::vector<Expr>{b};
    std::vector<Expr> rest;
    int found = 0;
    for (Expr f : factors) {
        if (f->kind == Kind::Load && f->name == member.name) {
            if (f->args != member.vars) return std::nullopt;
            found++;
        } else {
            if (mentions(f, member.name)) return std::nullopt;
            rest.push_back(f);
        }
    }
    if (found != 1 || rest.empty()) return std::nullopt;
    Expr extra = make_mul(rest);
    bool foreign = any_of(extra, [&](Expr n) {
        return n->kind == Kind::Var && n->role == VarRole::Index &&
               std::find(member.vars.begin(), member.vars.end(), n) == member.vars.end();
    });
    if (foreign) return std::nullopt;
    TensorDef v = member;
    Expr red = member.body;
    std::vector<Expr> axes(red->args.begin() + 1, red->args.end());
    v.body = make_reduce(ReduceOp::Sum, axes, red->extents, simplify(make_mul(red->body(), extra)));
    return v;
}

// ---- Stage 1: collect the reductions.

std::vector<RedInfo> collect_reductions(const Program &p) {
    std::vector<RedInfo> reds;
    for (const TensorDef &d : p.defs) {
        if (!d.is_reduction()) continue;
        RedInfo r{&d, outer_vars(d), {}, d.body->extents};
        for (size_t i = 0; i < d.body->num_axes(); i++) r.axes.push_back(d.body->axis(i));
        reds.push_back(r);
    }
    return reds;
}

// ---- Stage 2: group the reductions into chains.

/** Transitive dependences between reductions (through element-wise definitions too, which are
 *  already inlined): closure[j] holds every reduction j depends on. */
std::vector<std::set<size_t>> dependence_closure(const std::vector<RedInfo> &reds) {
    std::vector<std::set<size_t>> closure(reds.size());
    for (size_t j = 0; j < reds.size(); j++)
        for (size_t i = 0; i < j; i++)
            if (reads(*reds[j].def, *reds[i].def)) {
                closure[j].insert(i);
                closure[j].insert(closure[i].begin(), closure[i].end());
            }
    return closure;
}

/** Every read of reduction r moves with the reading reduction's axis, and r is no output: the
 *  value is needed only tile by tile. (Σ_e O·dO of the attention backward is also read at the row
 *  by dQ: it must be stored, so it runs as a chain of its own.) */
bool only_read_along_axes(const Program &p, const std::vector<RedInfo> &reds, size_t r) {
    const std::string &name = reds[r].def->name;
    for (const OutputDecl &o : p.outputs)
        if (o.name == name) return false;
    for (const TensorDef &d : p.defs) {
        if (&d == reds[r].def || !mentions(d.body, name)) continue;
        if (!d.is_reduction()) return false;
        for (Expr l : loads_of(d.body, name)) {
            bool along = false;
            for (size_t a = 0; a < d.body->num_axes(); a++) along = along || mentions(l, d.body->axis(a)->name);
            if (!along) return false;
        }
    }
    return true;
}

/** Reduction r can be computed per tile where it is read: every read moves with the reader's
 *  axis, at plain index variables (a tile of r), and r is no top-k (its values come in k-lists). */
bool tile_prologue_candidate(const Program &p, const std::vector<RedInfo> &reds, size_t r) {
    if (reds[r].def->is_topk() || !only_read_along_axes(p, reds, r)) return false;
    for (const RedInfo &c : reds)
        for (Expr l : loads_of(c.def->body, reds[r].def->name))
            for (Expr a : l->args)
                if (a->kind != Kind::Var || a->role != VarRole::Index) return false;
    return true;
}

/** The leading vars of m that its reads of computed tensors use (0 when it reads none, or a top-k:
 *  then every var is a row var). */
size_t computed_row(const Program &p, const RedInfo &m) {
    if (m.def->is_topk()) return 0;
    std::set<std::string> computed;
    for (const TensorDef &d : p.defs) computed.insert(d.name);
    size_t row = 0;
    visit(m.def->body, [&](Expr n) {
        if (n->kind != Kind::Load || !computed.count(n->name)) return;
        for (size_t v = 0; v < m.outer.size(); v++)
            if (mentions(n, m.outer[v]->name)) row = std::max(row, v + 1);
    });
    return row;
}

/** Where a load's indices sit among member m's loop variables (its outer vars, then its axes;
 *  -1 for an index that is none of them). */
std::vector<int> loop_slots(const RedInfo &m, Expr load) {
    std::vector<Expr> loop = m.outer;
    loop.insert(loop.end(), m.axes.begin(), m.axes.end());
    std::vector<int> slots;
    for (Expr a : load->args) {
        auto at = std::find(loop.begin(), loop.end(), a);
        slots.push_back(at == loop.end() ? -1 : static_cast<int>(at - loop.begin()));
    }
    return slots;
}

/** a and b read a per-tile prologue candidate at different positions of their loops: dQ[b,h,i,d] =
 *  Σ_j K·f(S[b,h,i,j]) and dK[b,h,j,d] = Σ_i Q·f(S[b,h,i,j]) when M = N. In one chain the tile would
 *  be needed once as S and once as Sᵀ; as two chains each computes its own tile. */
bool read_in_other_orders(const Program &p, const std::vector<RedInfo> &reds, const RedInfo &a, const RedInfo &b) {
    for (size_t r = 0; r < reds.size(); r++) {
        if (!tile_prologue_candidate(p, reds, r)) continue;
        std::set<std::vector<int>> orders;
        for (const RedInfo *m : {&a, &b})
            for (Expr l : loads_of(m->def->body, reds[r].def->name)) orders.insert(loop_slots(*m, l));
        if (orders.size() > 1) return true;
    }
    return false;
}

/** i and j (i < j) may share a chain: same axes and rows, no reduction k between them (i -> k -> j:
 *  k would need i's final value and feed j, so the chains would depend on each other in a cycle),
 *  and connected by data at the row or by reading the same input the same way. */
bool may_share_chain(const Program &p, const std::vector<RedInfo> &reds, const std::vector<std::set<size_t>> &closure, size_t i, size_t j) {
    const RedInfo &a = reds[i], &b = reds[j];
    if (a.extents.size() != b.extents.size() || !same_exprs(a.extents, b.extents, a.extents.size())) return false;
    size_t rows = std::min(a.outer.size(), b.outer.size());
    // Members whose reads of computed tensors use only their leading r vars have the row r, their
    // later vars being extra points (shared_row): dK[b,h,j,d] and dV[b,h,j,e] of the
    // attention backward share the row (b,h,j) even when d < D and e < Dv differ.
    size_t r = std::max(computed_row(p, a), computed_row(p, b));
    if (r >= 1 && r < rows) rows = r;
    if (!same_exprs(outer_extents(*a.def), outer_extents(*b.def), rows)) return false;
    for (size_t k : closure[j])
        if (k != i && closure[k].count(i)) return false;
    if (reads(*b.def, *a.def) && data_connected(a, b, rows)) return true;
    // A reduction read along another reduction's axis is that chain's per-tile prologue (QKᵀ in
    // attention; dO·Vᵀ in its backward): computed per tile where it is read, never stored. Joined to
    // a chain only for reading the same input, it would be stored whole instead (B·H·M·N for dO·Vᵀ
    // beside the backward's D = Σ_e O·dO).
    if (tile_prologue_candidate(p, reds, i) || tile_prologue_candidate(p, reds, j)) return false;
    if (read_in_other_orders(p, reds, a, b)) return false;
    return input_connected(a, b, rows);
}

/** The row of a chain with these members: the leading member vars their reads of computed tensors
 *  (prologues, earlier reductions) use, when that is fewer than the vars every member has; a
 *  later var is an extra point of the row, as O's d is in attention. In the derived backward
 *  dQ[b,h,i,d] = Σ_j K[b,h,j,d]·f(S_sum[b,h,i,j]) and dK[b,h,j,d] = Σ_i Q[b,h,i,d]·f(S_sum[b,h,i,j]):
 *  the per-tile prologue (QKᵀ) and f are then computed once per row and tile and the lowering sees
 *  Σ F·W(·, d) as a GEMM, instead of recomputing both for every d (D times the work). Reads of
 *  inputs do not count: W = K[b,h,j,d] is what the extra point indexes. Every var is a row var when
 *  no computed tensor is read, when every var is used, or with a top-k member. */
size_t shared_row(const Program &p, const std::vector<RedInfo> &reds, const std::vector<size_t> &members) {
    size_t n = SIZE_MAX, r = 0;
    bool topk = false;
    for (size_t k : members) {
        n = std::min(n, reds[k].outer.size());
        r = std::max(r, computed_row(p, reds[k]));
        topk = topk || reds[k].def->is_topk();
    }
    return !topk && r >= 1 && r < n ? r : n;
}

/** The members of a would-be group agree on the extents of the row the group would have (the
 *  leading vars its reads of computed tensors use, shared_row). Pairs are
 *  checked by may_share_chain; a union can still join dK[b,h,j,d] (row 3) to a member whose row is
 *  4 through dV[b,h,j,e], and d < D, e < Dv would then both be row variables. */
bool rows_agree(const Program &p, const std::vector<RedInfo> &reds, const std::set<size_t> &group) {
    size_t rows = shared_row(p, reds, std::vector<size_t>(group.begin(), group.end()));
    const TensorDef &first = *reds[*group.begin()].def;
    for (size_t k : group)
        if (!same_exprs(outer_extents(first), outer_extents(*reds[k].def), rows)) return false;
    return true;
}

/** Chains as union-find groups: root -> member indices in definition order. */
using Groups = std::map<size_t, std::vector<size_t>>;

Groups group_chains(const Program &p, const std::vector<RedInfo> &reds) {
    size_t n = reds.size();
    std::vector<std::set<size_t>> closure = dependence_closure(reds);
    std::vector<size_t> parent(n);
    std::iota(parent.begin(), parent.end(), 0);
    std::function<size_t(size_t)> find = [&](size_t x) { return parent[x] == x ? x : parent[x] = find(parent[x]); };
    // may_share_chain looks at one pair; a union joins whole groups, so a group can also gain a
    // member x and a member y with a reduction k outside the group between them (x -> k -> y: TV
    // and ct joined through m in `m = max(c: X)`, `TV = topk(c: X)`, `tm = sum(k: TV)`,
    // `ct = sum(c: ... tm ...)`) — the chains would depend on each other in a cycle. Refuse such a
    // union (reductions inside the group may lie between members: they run in a later pass).
    std::vector<std::set<size_t>> members(n);
    for (size_t i = 0; i < n; i++) members[i] = {i};
    auto between_outside = [&](const std::set<size_t> &g) {
        for (size_t k = 0; k < n; k++) {
            if (g.count(k)) continue;
            bool after_member = false, before_member = false;
            for (size_t x : g) {
                after_member = after_member || closure[k].count(x);
                before_member = before_member || closure[x].count(k);
            }
            if (after_member && before_member) return true;
        }
        return false;
    };
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < j; i++) {
            if (!may_share_chain(p, reds, closure, i, j)) continue;
            size_t a = find(i), b = find(j);
            if (a == b) continue;
            std::set<size_t> joined = members[a];
            joined.insert(members[b].begin(), members[b].end());
            if (between_outside(joined) || !rows_agree(p, reds, joined)) continue;
            parent[a] = b;
            members[b] = std::move(joined);
        }
    Groups groups;
    for (size_t i = 0; i < n; i++) groups[find(i)].push_back(i);
    return groups;
}

// ---- Stage 3: prologues (epilogues are attached per chain, once its members are known).

/** Singleton groups read per tile by other groups over a different axis are their prologue:
 *  reduction index -> the roots of every consuming group (each computes it per tile). */
std::map<size_t, std::set<size_t>> find_prologues(const Program &p, const std::vector<RedInfo> &reds, const Groups &groups) {
    std::map<size_t, std::set<size_t>> prologue_of;
    for (auto &[root, idx] : groups) {
        if (idx.size() != 1 || !tile_prologue_candidate(p, reds, idx[0])) continue;
        const RedInfo &r = reds[idx[0]];
        for (auto &[root2, idx2] : groups) {
            if (root2 == root) continue;
            for (size_t k : idx2) {
                const RedInfo &c = reds[k];
                for (Expr l : loads_of(c.def->body, r.def->name))
                    for (Expr a : c.axes)
                        if (mentions(l, a->name)) prologue_of[idx[0]].insert(root2);
            }
        }
    }
    return prologue_of;
}

/** Element-wise definitions that read a member: computed from the chain's final states. */
void attach_epilogue(ChainPlan &c, const Program &p) {
    for (const TensorDef &d : p.defs) {
        if (d.is_reduction()) continue;
        for (const std::string &m : c.members)
            if (mentions(d.body, m)) {
                c.epilogue.push_back(d.name);
                break;
            }
    }
}

// ---- Stage 4: order the chains.

/** Roots of the groups that run as chains (not prologues), by the definition position of their last member. */
std::vector<size_t> execution_order(const Groups &groups, const std::map<size_t, std::set<size_t>> &prologue_of) {
    std::vector<std::pair<size_t, size_t>> order;  // (last index, root)
    for (auto &[root, idx] : groups)
        if (!prologue_of.count(idx[0]) || idx.size() > 1) order.push_back({idx.back(), root});
    std::sort(order.begin(), order.end());
    std::vector<size_t> roots;
    for (auto &[last, root] : order) roots.push_back(root);
    return roots;
}

/** A chain before its passes: axes, the shared row, its prologues. */
ChainPlan chain_shape(const Program &p, const std::vector<RedInfo> &reds, const std::vector<size_t> &idx, size_t root,
                      const std::map<size_t, std::set<size_t>> &prologue_of) {
    ChainPlan c;
    const RedInfo &first = reds[idx[0]];
    for (Expr a : first.axes) c.axes.push_back(a->name);
    c.axis_extents = first.extents;
    for (auto &[pi, roots] : prologue_of)
        if (roots.count(root)) c.prologue.push_back(reds[pi].def->name);
    c.n_row = shared_row(p, reds, idx);
    return c;
}

// ---- Stage 5: assign every member of a chain to a pass.

/** The members already placed in pass `pass` (with the index tensor of a top-k member): the d of
 *  the algebra for a member analysed in that pass. */
std::set<std::string> members_in(const ChainPlan &c, const Program &p, int pass) {
    std::set<std::string> s;
    for (size_t m = 0; m < c.pass_of.size(); m++)
        if (c.pass_of[m] == pass) {
            s.insert(c.members[m]);
            const TensorDef *md = p.find_def(c.members[m]);
            if (md->is_topk()) s.insert(md->index_name);
        }
    return s;
}

/** The earliest pass the member `self` can run in: a member read at the row can share its pass (its
 *  running value is the d of the algebra); a member read anywhere else (another row, or along the
 *  axis) must be final first. `off_row` names the first earlier member read outside the row. */
int earliest_pass(const ChainPlan &c, const Program &p, const std::vector<RedInfo> &reds, const RedInfo &self,
                  std::string &off_row) {
    int pass = 0;
    for (size_t m = 0; m < c.pass_of.size(); m++) {
        const TensorDef &dep = *p.find_def(c.members[m]);
        if (!reads(*self.def, dep)) continue;
        const RedInfo *dep_info = nullptr;
        for (const RedInfo &r : reds)
            if (r.def == &dep) dep_info = &r;
        bool at_row = dep_info && data_connected(*dep_info, self, c.n_row);
        if (!at_row && off_row.empty()) off_row = dep.name;
        pass = std::max(pass, c.pass_of[m] + (at_row ? 0 : 1));
    }
    return pass;
}

/** The verdict reported for a member: the plain analysis, or the one with the epilogue factors
 *  pushed into the sum when that shows more. */
MemberAnalysis reported_verdict(const Program &p, const TensorDef &d, const MemberAnalysis &plain,
                                const AnalysisContext &ctx) {
    if (std::optional<TensorDef> pushed = with_epilogue_factors(p, d)) {
        MemberAnalysis v = analyze_member(*pushed, ctx);
        // Keep the pushed form only when it shows more: factors of later members (1/l) or a
        // whole deferred H where the plain member is independent (RMSNorm's rsqrt).
        bool more = plain.relation == Relation::Independent || v.deps.size() > plain.deps.size();
        if (v.relation == Relation::Multiplicative && plain.relation != Relation::None && more) return v;
    }
    return plain;
}

/** Places one member in its pass: a member that fits no form, or fits only up to rounding without
 *  --approx, moves one pass later (its d then final) and is analysed again there. */
void place_member(ChainPlan &c, const Program &p, const std::vector<RedInfo> &reds, const RedInfo &self,
                  const PlanOptions &opts, std::vector<NotFused> &not_fused) {
    const TensorDef &d = *self.def;
    c.members.push_back(d.name);
    AnalysisContext ctx;
    ctx.program = &p;
    ctx.allow_inexact = opts.approx;
    std::string off_row;
    int pass = earliest_pass(c, p, reds, self, off_row);
    ctx.pass_members = members_in(c, p, pass);
    MemberAnalysis plain = analyze_member(d, ctx);
    MemberAnalysis verdict = reported_verdict(p, d, plain, ctx);
    MemberAnalysis exec = plain;
    bool move = plain.relation == Relation::None || (!verdict.exact && !opts.approx);
    if (move) {
        pass++;
        ctx.pass_members = members_in(c, p, pass);
        exec = analyze_member(d, ctx);
    }
    if (verdict.relation == Relation::None) {
        not_fused.push_back({d.name, verdict.reason, verdict.counterexample});
        c.split_reasons.insert(SplitReason::Unfusible);
    } else if (!off_row.empty()) {
        not_fused.push_back({d.name, "it reads " + off_row + " outside its own row (another row or along the "
                             "axis), so it needs the final values of " + off_row + " and runs in a later pass", ""});
        c.split_reasons.insert(SplitReason::OffRow);
    } else if (move) {
        c.split_reasons.insert(SplitReason::Rounding);
    }
    std::vector<Companion> earlier;
    if (pass < static_cast<int>(c.passes.size()))
        for (size_t i = 0; i < c.passes[pass].members.size(); i++)
            earlier.push_back({p.find_def(c.passes[pass].members[i]), &c.passes[pass].members_exec[i]});
    find_companions(exec, d, earlier);
    if (!move) find_companions(verdict, d, earlier);
    c.pass_of.push_back(pass);
    c.verdicts.push_back(verdict);
    if (static_cast<int>(c.passes.size()) <= pass) c.passes.resize(pass + 1);
    c.passes[pass].members.push_back(d.name);
    c.passes[pass].members_exec.push_back(exec);
}

// ---- Stage 6: choose the strategy.

/** A chain split over several passes: exact_prepass when only rounding split it, else multi_pass. */
void choose_split_strategy(ChainPlan &c) {
    c.fused = false;
    bool rounding_only = c.split_reasons.size() == 1 && c.split_reasons.count(SplitReason::Rounding);
    c.strategy = rounding_only ? Strategy::ExactPrepass : Strategy::MultiPass;
    c.strategy_reason = rounding_only
                            ? "a rounding cast mixes the data and an earlier result: the exact plan computes that "
                              "result first (a cheap extra read of the row) and applies it inside the second pass; "
                              "--approx fuses with the running value instead"
                            : c.split_reasons.count(SplitReason::Unfusible)
                                  ? "some member fits no fusible form; it runs in a later pass over the data"
                                  : "some member reads an earlier result outside its row; it runs in a later pass";
}

/** A fused chain: the cost model picks segments when rows are too few for the workers, on-chip
 *  passes when a row fits in fast memory, else one online pass. */
void choose_fused_strategy(ChainPlan &c, const Program &p, const PlanOptions &o) {
    c.fused = true;
    SizeBinding defaults;
    for (const SizeDecl &s : p.sizes)
        if (s.default_value) defaults[s.name] = *s.default_value;
    const SizeBinding *sizes = o.sizes ? o.sizes : &defaults;
    bool known_rows = false, known_len = false;
    const TensorDef *first = p.find_def(c.members[0]);
    std::vector<Expr> row_ext(first->extents.begin(), first->extents.begin() + static_cast<long>(c.n_row));
    int64_t rows = product_of(row_ext, sizes, known_rows);
    int64_t len = product_of(c.axis_extents, sizes, known_len);
    if (!known_rows || !known_len) {
        c.strategy = Strategy::Incremental;
        c.strategy_reason = "sizes are not known, so the default one-pass online plan is used";
        return;
    }
    if (rows < 4 * o.parallel_units && len >= 2048) {
        c.strategy = Strategy::MultiSegment;
        int64_t want = (4 * o.parallel_units + rows - 1) / std::max<int64_t>(rows, 1);
        c.segments = static_cast<int>(std::clamp<int64_t>(want, 2, std::max<int64_t>(2, len / 512)));
        c.strategy_reason = std::to_string(rows) + " independent rows are fewer than 4 per worker on " +
                            std::to_string(o.parallel_units) + " workers; the axis of " + std::to_string(len) + " is split into " +
                            std::to_string(c.segments) + " segments merged with the derived merge";
        return;
    }
    if (c.prologue.empty() && len * 4 <= o.fast_memory_bytes) {
        c.strategy = Strategy::OnchipMultipass;
        c.strategy_reason = "a row of " + std::to_string(len) +
                            " elements fits in fast memory: it is read once and the passes run on chip, which "
                            "avoids the online rescaling";
        return;
    }
    c.strategy = Strategy::Incremental;
    c.strategy_reason = !c.prologue.empty()
                            ? std::to_string(rows) + " rows give enough parallelism and the per-tile prologue is computed "
                              "tile by tile: one online pass with running rescaling"
                            : std::to_string(rows) + " rows give enough parallelism and a row of " + std::to_string(len) +
                                  " elements does not fit in fast memory: one online pass with running rescaling";
}

void choose_strategy(ChainPlan &c, const Program &p, const PlanOptions &o) {
    if (c.members.size() == 1 && c.passes.size() == 1) {
        c.fused = true;
        c.strategy = Strategy::SinglePass;
        c.strategy_reason = "a single reduction";
    } else if (c.passes.size() > 1) {
        choose_split_strategy(c);
    } else {
        choose_fused_strategy(c, p, o);
    }
}

/** The note of a chain with a member fusible only up to rounding (the last such member). */
void note_inexact(ChainPlan &c, const PlanOptions &opts) {
    for (const MemberAnalysis &m : c.verdicts)
        if (!m.exact)
            c.note = "member " + m.name + " is fusible only up to rounding (exact: false): " +
                     (opts.approx ? "fused with the running value as requested (--approx)"
                                  : "the exact plan is used by default");
}

}  // namespace

Plan make_plan(const Program &p, const PlanOptions &opts) {
    Plan plan;
    plan.program = &p;
    std::vector<RedInfo> reds = collect_reductions(p);
    Groups groups = group_chains(p, reds);
    std::map<size_t, std::set<size_t>> prologue_of = find_prologues(p, reds, groups);
    for (size_t root : execution_order(groups, prologue_of)) {
        const std::vector<size_t> &idx = groups.at(root);
        ChainPlan c = chain_shape(p, reds, idx, root, prologue_of);
        for (size_t k : idx) place_member(c, p, reds, reds[k], opts, plan.not_fused);
        attach_epilogue(c, p);
        choose_strategy(c, p, opts);
        note_inexact(c, opts);
        plan.chains.push_back(std::move(c));
    }
    return plan;
}

}  // namespace rf
