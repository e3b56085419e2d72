/** \file LowerPlan.cpp
 * Plan → tile IR module: the buffers, the order of kernels (chains once what they read exists,
 * as the plan interpreter does), per-tile prologues, per-row epilogues, one kernel per chain pass
 * (or one for all passes on chip), and single-definition kernels for everything outside chains.
 */
#include <algorithm>
#include <deque>
#include <optional>
#include <set>

#include "support/Error.h"
#include "tile/Lower.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"

namespace rf::tile {

namespace {

/** Names every definition reads. */
std::set<std::string> loads_of(Expr e) {
    std::set<std::string> out;
    visit(e, [&](Expr n) {
        if (n->kind == Kind::Load) out.insert(n->name);
    });
    return out;
}

/** A single-member chain for a reduction that runs on its own (outside every chain, or unfused). */
ChainPlan single_member_chain(const TensorDef &d) {
    ChainPlan c;
    Expr red = d.body;
    for (size_t i = 0; i < red->num_axes(); i++) {
        c.axes.push_back(red->axis(i)->name);
        c.axis_extents.push_back(red->extents[i]);
    }
    c.n_row = d.vars.size() - (d.is_topk() ? 1 : 0);
    c.members = {d.name};
    MemberAnalysis a;
    a.name = d.name;
    a.op = red->rop;
    a.k = red->k;
    a.relation = Relation::None;
    a.reason = "runs on its own";
    c.verdicts = {a};
    c.pass_of = {0};
    PassPlan pp;
    pp.members = {d.name};
    pp.members_exec = {a};
    c.passes = {pp};
    c.strategy = Strategy::MultiPass;
    c.strategy_reason = "a reduction on its own";
    return c;
}

class ModuleLowering {
public:
    ModuleLowering(const Plan &plan, const LowerOptions &o) : plan_(plan), p_(*plan.program), o_(o) {}

    Module run() {
        m_.compute = o_.compute;
        for (const SizeDecl &s : p_.sizes) m_.sizes.push_back(s.name);
        std::vector<ChainPlan> chains;
        if (o_.unfused) {
            for (const TensorDef &d : p_.defs)
                if (d.is_reduction()) chains.push_back(single_member_chain(d));
        } else {
            chains = plan_.chains;
            std::set<std::string> in_chain;
            for (const ChainPlan &c : chains)
                for (const std::string &n : c.members) in_chain.insert(n);
            for (const TensorDef &d : p_.defs)
                if (d.is_reduction() && !in_chain.count(d.name) && !tile_prologue(d.name, chains)) chains.push_back(single_member_chain(d));
        }
        choose_prologues(chains);
        if (!o_.unfused) choose_row_reduced_members(chains);
        make_buffers(chains);
        order(chains);
        return std::move(m_);
    }

private:
    // ---- Per-tile prologues: a reduction over another axis read by members at (row, axis) exactly.
    /** A reduction every reader of which is a member of a chain it can be the prologue of: it is
     *  then computed per tile inside each such chain (recomputed in every one: the derived attention
     *  backward computes QKᵀ and dO·Vᵀ in its dQ chain and again in its dK/dV chain, as the
     *  FlashAttention-2 backward does, instead of storing two B·H·M·N tensors). */
    bool tile_prologue(const std::string &name, const std::vector<ChainPlan> &chains) {
        if (prologue_slots_.count(name)) return true;
        for (const OutputDecl &out : p_.outputs)
            if (out.name == name) return false;  // an output is stored
        std::map<size_t, std::vector<size_t>> where;
        for (size_t ci = 0; ci < chains.size(); ci++)
            if (auto slots = prologue_slots(name, chains[ci])) where[ci] = *slots;
        if (where.empty()) return false;
        for (const TensorDef &u : p_.defs) {
            if (u.name == name || !mentions(u.body, name)) continue;
            bool covered = false;
            for (const auto &[ci, slots] : where)
                covered = covered || std::find(chains[ci].members.begin(), chains[ci].members.end(), u.name) != chains[ci].members.end();
            if (!covered) return false;
        }
        prologue_slots_[name] = where;
        return true;
    }

    /** Where the prologue's definition vars sit in chain c's loops, when every member of c that
     *  reads it reads it at the same distinct loop vars (row vars, axis vars): slot k < n_row is row
     *  var k, slot n_row + a is axis a. S_sum[b,h,i,j] read by dQ[b,h,i,d] = Σ_j gives (0,1,2,3);
     *  read by dK[b,h,j,d] = Σ_i it gives (0,1,3,2), the transposed tile; read by the grouped
     *  dK[b,g,j,d] = Σ_{h,i} it gives (0,3,4,2) (g unused). nullopt when c reads it otherwise. */
    std::optional<std::vector<size_t>> prologue_slots(const std::string &name, const ChainPlan &c) {
        if (std::find(c.prologue.begin(), c.prologue.end(), name) == c.prologue.end()) return std::nullopt;
        const TensorDef *d = p_.find_def(name);
        size_t n_axes = c.axis_extents.size();
        if (!d || d->is_topk() || d->vars.size() > c.n_row + n_axes) return std::nullopt;
        std::optional<std::vector<size_t>> found;
        bool ok = true;
        for (const std::string &member : c.members) {
            const TensorDef *u = p_.find_def(member);
            if (!u || !mentions(u->body, name)) continue;
            if (u->body->kind != Kind::Reduce || u->body->num_axes() != n_axes || u->vars.size() < c.n_row) return std::nullopt;
            std::vector<Expr> loop_vars(u->vars.begin(), u->vars.begin() + static_cast<long>(c.n_row));
            std::vector<Expr> loop_ext(u->extents.begin(), u->extents.begin() + static_cast<long>(c.n_row));
            for (size_t a = 0; a < n_axes; a++) {
                loop_vars.push_back(u->body->axis(a));
                loop_ext.push_back(c.axis_extents[a]);
            }
            visit(u->body, [&](Expr n) {
                if (n->kind != Kind::Load || n->name != name || !ok) return;
                std::vector<size_t> slots;
                std::set<size_t> used;
                for (size_t i = 0; i < n->args.size() && ok; i++) {
                    auto at = std::find(loop_vars.begin(), loop_vars.end(), n->args[i]);
                    size_t slot = static_cast<size_t>(at - loop_vars.begin());
                    ok = at != loop_vars.end() && used.insert(slot).second && d->extents[i] == loop_ext[slot];
                    slots.push_back(slot);
                }
                ok = ok && (!found || *found == slots);
                if (ok) found = slots;
            });
            if (!ok) return std::nullopt;
        }
        // A prologue over fewer vars than the loops is recomputed for every value of the vars it
        // lacks. Worth it for a tile of rows × axis positions (the grouped dK chain's S lacks only
        // the K/V head: stored, it would be B·Hq·M·N); not for a vector along the axis alone (a
        // column max cmx[c] read by a row reduction over c would be recomputed for every row).
        if (found && d->vars.size() < c.n_row + n_axes) {
            bool row = false, axis = false;
            for (size_t slot : *found) (slot < c.n_row ? row : axis) = true;
            if (!row || !axis) return std::nullopt;
        }
        return found;
    }

    void choose_prologues(const std::vector<ChainPlan> &chains) {
        if (o_.unfused) return;
        for (const ChainPlan &c : chains)
            for (const std::string &n : c.prologue) tile_prologue(n, chains);
    }

    /** Chains that run inside another chain's kernel (LowerRowReduced.cpp), with a float buffer of
     *  partial sums each. */
    void choose_row_reduced_members(const std::vector<ChainPlan> &chains) {
        row_reduced_ = choose_row_reduced(chains, prologue_slots_, p_, o_);
        for (auto &[host, members] : row_reduced_.by_host)
            for (RowReducedMember &r : members) {
                r.partial = "%rowsum" + std::to_string(partial_buffers_.size());
                partial_buffers_.push_back({r.partial, Buffer::Role::Temp, DType::f32,
                                            {row_reduced_partial_elements(r, chains[host], p_, row_reduced_workers())}});
            }
    }
    int row_reduced_workers() const { return std::max(1, o_.threads > 0 ? o_.threads : o_.workers); }

    // ---- Buffers.
    void make_buffers(const std::vector<ChainPlan> &chains) {
        std::set<std::string> read;
        for (const TensorDef &d : p_.defs)
            for (const std::string &n : loads_of(d.body)) read.insert(n);
        for (const InputDecl &in : p_.inputs) m_.buffers.push_back({in.name, Buffer::Role::Input, in.dtype, in.dims});
        std::set<std::string> outputs;
        for (const OutputDecl &out : p_.outputs) {
            const TensorDef *d = p_.find_def(out.name);
            RF_INTERNAL_ASSERT(d) << "output without definition";
            m_.buffers.push_back({out.name, Buffer::Role::Output, out.dtype, d->extents});
            outputs.insert(out.name);
        }
        for (const TensorDef &d : p_.defs) {
            if (prologue_slots_.count(d.name)) continue;
            for (const std::string &n : {d.name, d.index_name}) {
                if (n.empty()) continue;
                if (read.count(n) || !outputs.count(n)) m_.buffers.push_back({n, Buffer::Role::Temp, DType::f64, d.extents});
            }
        }
        for (const Buffer &b : partial_buffers_) m_.buffers.push_back(b);
        (void)chains;
    }

    // ---- Kernel order.
    void order(const std::vector<ChainPlan> &chains) {
        std::set<std::string> done;
        for (const InputDecl &in : p_.inputs) done.insert(in.name);
        std::vector<size_t> pending;
        for (size_t i = 0; i < chains.size(); i++)
            if (!row_reduced_.absorbed.count(i)) pending.push_back(i);
        std::vector<const TensorDef *> elementwise;
        for (const TensorDef &d : p_.defs)
            if (!d.is_reduction()) elementwise.push_back(&d);
        std::set<const TensorDef *> placed;
        auto ready = [&](const TensorDef &d, const std::set<std::string> &own) {
            for (const std::string &n : loads_of(d.body))
                if (!own.count(n) && !done.count(n)) {
                    // A per-tile prologue is ready once what it reads is.
                    if (prologue_slots_.count(n)) {
                        for (const std::string &q : loads_of(p_.find_def(n)->body))
                            if (!done.count(q)) return false;
                        continue;
                    }
                    return false;
                }
            return true;
        };
        while (!pending.empty()) {
            bool progress = false;
            for (size_t pi = 0; pi < pending.size() && !progress; pi++) {
                const ChainPlan &c = chains[pending[pi]];
                std::set<std::string> own;
                for (const std::string &n : c.members) {
                    own.insert(n);
                    if (const TensorDef *d = p_.find_def(n); d->is_topk()) own.insert(d->index_name);
                }
                bool ok = true;
                for (const std::string &n : c.members) ok = ok && ready(*p_.find_def(n), own);
                if (auto rows = row_reduced_.by_host.find(pending[pi]); rows != row_reduced_.by_host.end())
                    for (const RowReducedMember &r : rows->second) ok = ok && ready(*r.def, own);
                if (!ok) continue;
                emit_chain(c, pending[pi], done, elementwise, placed);
                pending.erase(pending.begin() + static_cast<long>(pi));
                progress = true;
            }
            RF_INTERNAL_ASSERT(progress) << "the plan's chains depend on each other in a cycle";
        }
        for (const TensorDef *d : elementwise)
            if (!placed.count(d)) emit_elementwise(*d);
    }

    /** Element-wise definitions the last kernel of chain c can compute per row. */
    std::vector<const TensorDef *> row_epilogues(const ChainPlan &c, const std::set<std::string> &done,
                                                 const std::vector<const TensorDef *> &elementwise,
                                                 std::set<const TensorDef *> &placed) {
        std::vector<const TensorDef *> out;
        if (o_.unfused) return out;
        const TensorDef *first = p_.find_def(c.members[0]);
        std::set<std::string> here(c.members.begin(), c.members.end());
        for (const TensorDef *d : elementwise) {
            if (placed.count(d)) continue;
            if (std::find(c.epilogue.begin(), c.epilogue.end(), d->name) == c.epilogue.end()) continue;
            if (d->vars.size() < c.n_row) continue;
            bool ok = true;
            for (size_t i = 0; i < c.n_row; i++) ok = ok && d->extents[i] == first->extents[i];
            visit(d->body, [&](Expr n) {
                if (n->kind != Kind::Load || !ok) return;
                if (here.count(n->name)) {
                    for (size_t i = 0; i < c.n_row; i++) ok = ok && n->args[i] == d->vars[i];
                } else if (!done.count(n->name)) {
                    ok = false;
                }
            });
            if (!ok) continue;
            out.push_back(d);
            placed.insert(d);
            here.insert(d->name);
        }
        return out;
    }

    void emit_chain(const ChainPlan &c0, size_t ci, std::set<std::string> &done,
                    const std::vector<const TensorDef *> &elementwise, std::set<const TensorDef *> &placed) {
        Schedule s = default_schedule(c0, p_, o_);
        std::map<std::string, std::string> term_store;
        auto rows = row_reduced_.by_host.find(ci);
        const bool hosts = rows != row_reduced_.by_host.end();
        bool may_split = !hosts && s.segments <= 1 && s.strategy != Strategy::MultiPass && s.strategy != Strategy::Incremental && !o_.force_strategy;
        if (may_split) {
            if (auto split = split_for_term_reuse(c0, elementwise, term_store)) split_chains_.push_back(*split);
        }
        const ChainPlan &c = term_store.empty() ? c0 : split_chains_.back();
        if (auto it = o_.schedules.find(static_cast<int>(ci)); it != o_.schedules.end()) s = it->second;
        if (o_.force_strategy) {
            s.strategy = *o_.force_strategy;
            if (s.strategy == Strategy::MultiSegment && s.segments <= 1) s.segments = 2 * std::max(1, o_.threads > 0 ? o_.threads : o_.workers);
            if (s.strategy != Strategy::MultiSegment) s.segments = 1;
        }
        if (o_.force_tile > 0) s.tile = o_.force_tile;
        if (o_.force_row_block > 0) s.row_block = o_.force_row_block;
        if (o_.force_segments > 0) s.segments = o_.force_segments;
        if (s.segments > 1) s.strategy = Strategy::MultiSegment;
        if (hosts && !o_.force_tile && !o_.schedules.count(static_cast<int>(ci))) s.tile = row_reduced_tile(s.tile, rows->second, o_);
        std::map<std::string, std::vector<size_t>> prologues;
        for (auto &[name, where] : prologue_slots_)
            if (auto it = where.find(ci); it != where.end()) prologues[name] = it->second;
        std::vector<PassContext> ctxs;
        for (const PassPlan &pp : c.passes) {
            PassContext ctx;
            ctx.program = &p_;
            ctx.chain = &c;
            ctx.pass = &pp;
            ctx.schedule = s;
            ctx.tile_row_pad = o_.tile_row_pad;
            ctx.epilogue_row_buffer = o_.epilogue_row_buffer;
            ctx.tile_prologues = prologues;
            ctxs.push_back(ctx);
        }
        std::string what;
        for (const std::string &n : c.members) what += (what.empty() ? "" : ", ") + n;
        if (hosts) {
            RF_INTERNAL_ASSERT(ctxs.size() == 1 && s.segments <= 1) << "a chain with row-reduced members in several passes or segments";
            ctxs[0].row_reduced = rows->second;
            ctxs[0].row_reduced_workers = row_reduced_workers();
            for (const RowReducedMember &r : rows->second) {
                what += " + " + r.def->name + " (over the rows)";
            }
        }
        bool onchip = c.passes.size() > 1 && s.segments <= 1 && s.strategy != Strategy::MultiPass;
        if (onchip) {
            // Members of the chain are computed before its epilogue.
            for (const std::string &n : c.members) done.insert(n);
            ctxs.back().epilogues = row_epilogues(c, done, elementwise, placed);
            for (auto &[member, target] : term_store)
                for (const TensorDef *e : ctxs.back().epilogues)
                    if (e->name == target || (target[0] == '$' && e->name == term_owner_)) {
                        ctxs.back().term_store[member] = target;
                        if (target[0] == '$') ctxs.back().term_reader = e->name;
                    }
            mark_row_outputs(ctxs.back());
            Kernel k;
            k.name = "k" + std::to_string(m_.kernels.size()) + "_chain_onchip";
            k.what = "chain [" + what + "], " + std::to_string(c.passes.size()) + " passes on chip" + epilogue_text(ctxs.back());
            k.schedule = s;
            k.schedule.strategy = Strategy::OnchipMultipass;
            k.body = lower_onchip_rows(ctxs);
            m_.kernels.push_back(k);
        } else {
            for (size_t pi = 0; pi < ctxs.size(); pi++) {
                for (const std::string &n : c.passes[pi].members) done.insert(n);
                PassContext &ctx = ctxs[pi];
                if (pi + 1 == ctxs.size()) {
                    for (const std::string &n : c.members) done.insert(n);
                    ctx.epilogues = row_epilogues(c, done, elementwise, placed);
                    mark_row_outputs(ctx);
                }
                Kernel k;
                k.name = "k" + std::to_string(m_.kernels.size()) + "_chain_pass" + std::to_string(pi);
                std::string mem;
                for (const std::string &n : c.passes[pi].members) mem += (mem.empty() ? "" : ", ") + n;
                k.what = "chain [" + what + "] pass " + std::to_string(pi) + ": " + mem + epilogue_text(ctx);
                k.schedule = s;
                if (s.segments > 1) ctx.scratch_buffer = "%scratch" + std::to_string(m_.kernels.size());
                PassKernel pk = lower_pass(ctx);
                if (pk.scratch_elements)
                    m_.buffers.push_back({ctx.scratch_buffer, Buffer::Role::Temp, DType::f64, {pk.scratch_elements}});
                k.body = pk.body;
                m_.kernels.push_back(k);
            }
        }
        for (const std::string &n : c.members)
            if (const TensorDef *d = p_.find_def(n); d->is_topk()) done.insert(d->index_name);
        for (const TensorDef *d : ctxs.back().epilogues) done.insert(d->name);
        if (hosts)  // final once the whole kernel has run: never a row epilogue of the host
            for (const RowReducedMember &r : rows->second) done.insert(r.def->name);
    }

    /** Softmax-like chains on chip: when an element-wise output contains a multiplicative member's
     *  term (exp(X - m) in Y = exp(X - m) / s), computing the member in a second pass over the
     *  cached row with its δ final lets the sweep store each term and the epilogue reuse it — one
     *  exponential per element instead of two. Returns the split chain, or nothing. */
    std::optional<ChainPlan> split_for_term_reuse(const ChainPlan &c, const std::vector<const TensorDef *> &elementwise,
                                                  std::map<std::string, std::string> &store) {
        if (o_.unfused || c.passes.size() != 1 || c.axis_extents.size() != 1 || c.n_row == 0) return std::nullopt;
        const PassPlan &pp = c.passes[0];
        for (size_t k = 1; k < pp.members.size(); k++) {
            const MemberAnalysis &a = pp.members_exec[k];
            const TensorDef *s = p_.find_def(pp.members[k]);
            if (a.relation != Relation::Multiplicative || a.op != ReduceOp::Sum || !a.H_def || !a.H_def->is_const(1) ||
                s->vars.size() != c.n_row || s->is_topk())
                continue;
            // Later members must not read each other (they become literal reductions over final δ).
            std::set<std::string> later(pp.members.begin() + static_cast<long>(k), pp.members.end());
            bool independent = true;
            for (size_t q = k; q < pp.members.size(); q++)
                visit(p_.find_def(pp.members[q])->body, [&](Expr n) {
                    if (n->kind == Kind::Load && later.count(n->name)) independent = false;
                });
            if (!independent) return std::nullopt;
            for (const TensorDef *e : elementwise) {
                if (std::find(c.epilogue.begin(), c.epilogue.end(), e->name) == c.epilogue.end()) continue;
                if (e->vars.size() != c.n_row + 1 || e->extents.back() != c.axis_extents[0]) continue;
                const OutputDecl *out = nullptr;
                for (const OutputDecl &o : p_.outputs)
                    if (o.name == e->name) out = &o;
                // An f64 output (or a temporary) holds the term exactly: it is stored there and read back
                // in place. Any other output gets a per-row float buffer, an f32 one too on the CPU, whose
                // epilogue writes a row output in chunks through the worker's RowStream (one write of
                // the output, streamed when large) where in place wrote it twice, read for ownership
                // first. f32 softmax R = 4096 (AMX Xeon, `redfuse bench` A/B): C = 1024 1.15 -> 1.08 ms,
                // C = 4096 5.9-6.6 -> 4.6-4.8, C = 8192 13.0-13.6 -> 11.35-11.45. (Before the chunked
                // epilogue and RowStream the row buffer was slower: 12.9 against 10.8 ms at C = 8192.)
                // Rows known to be short (under 128 values at the planning sizes) stay in place: the
                // buffer and the copy cost more than they save there (C = 16, R = 65536: 1.17 ->
                // 1.64 ms; C = 64 equal; MoE's top-4 softmax 1.14 -> 1.30 ms). GPUs keep f32 outputs
                // in place (not measured there).
                std::optional<int64_t> row = known_product({c.axis_extents[0]}, o_.sizes);
                bool short_row = row && *row < 128;
                bool in_place = !out || out->dtype == DType::f64 ||
                                (out->dtype == DType::f32 && (!o_.epilogue_row_buffer || short_row));
                // The member's term and the output over the same (row, axis) variables.
                std::map<std::string, Expr> to_s, to_e;
                for (size_t i = 0; i < c.n_row; i++) {
                    Expr v = make_index("$canon" + std::to_string(i));
                    to_s[s->vars[i]->name] = v;
                    to_e[e->vars[i]->name] = v;
                }
                Expr jv = make_index("$canonj");
                to_s[s->body->axis(0)->name] = jv;
                to_e[e->vars.back()->name] = jv;
                auto canon = [](Expr x, const std::map<std::string, Expr> &m) {
                    return substitute(x, [&](Expr n) -> Expr {
                        if (n->kind != Kind::Var || n->role != VarRole::Index) return nullptr;
                        auto it = m.find(n->name);
                        return it == m.end() ? nullptr : it->second;
                    });
                };
                Expr term = canon(s->body->body(), to_s), body = canon(e->body, to_e);
                if (!any_of(body, [&](Expr n) { return n == term; })) continue;
                ChainPlan split = c;
                PassPlan first, second;
                for (size_t q = 0; q < pp.members.size(); q++) {
                    if (q < k) {
                        first.members.push_back(pp.members[q]);
                        first.members_exec.push_back(pp.members_exec[q]);
                        continue;
                    }
                    // With δ final, the member is a plain reduction of its body as written.
                    const TensorDef *d = p_.find_def(pp.members[q]);
                    MemberAnalysis lit = single_member_chain(*d).passes[0].members_exec[0];
                    second.members.push_back(pp.members[q]);
                    second.members_exec.push_back(lit);
                }
                split.passes = {first, second};
                split.strategy = Strategy::OnchipMultipass;
                store[s->name] = in_place ? e->name : "$rowterm";
                term_owner_ = e->name;
                return split;
            }
        }
        return std::nullopt;
    }

    /** f32 outputs of the epilogue (and bf16 ones where LowerOptions::bf16_row_outputs) that no
     *  definition reads and no term is stored into. */
    void mark_row_outputs(PassContext &ctx) {
        for (const TensorDef *d : ctx.epilogues) {
            const OutputDecl *out = nullptr;
            for (const OutputDecl &o : p_.outputs)
                if (o.name == d->name) out = &o;
            bool row_dtype = out && (out->dtype == DType::f32 || (out->dtype == DType::bf16 && o_.bf16_row_outputs));
            if (!row_dtype || d->vars.size() <= ctx.chain->n_row) continue;
            bool read = false;
            for (const TensorDef &u : p_.defs)
                visit(u.body, [&](Expr n) { read = read || (n->kind == Kind::Load && n->name == d->name); });
            for (auto &[member, target] : ctx.term_store) read = read || target == d->name;
            if (!read) ctx.row_outputs.insert(d->name);
        }
    }

    std::string epilogue_text(const PassContext &ctx) {
        if (ctx.epilogues.empty()) return "";
        std::string s = "; epilogue";
        for (const TensorDef *d : ctx.epilogues) s += " " + d->name;
        return s;
    }

    /** An element-wise definition on its own: parallel over all but the last axis, vector over it. */
    void emit_elementwise(const TensorDef &d) {
        Kernel k;
        k.name = "k" + std::to_string(m_.kernels.size()) + "_elementwise";
        k.what = "element-wise " + d.name;
        k.schedule.strategy = Strategy::Literal;
        std::vector<Expr> outer(d.extents.begin(), d.extents.end() - (d.extents.empty() ? 0 : 1));
        Expr inner_ext = d.extents.empty() ? int_c(1) : d.extents.back();
        Expr o = make_index("$o"), i = make_index("$i");
        std::vector<Expr> idx;
        std::map<std::string, Expr> vars;
        for (size_t q = 0; q < outer.size(); q++) {
            idx.push_back(unravel(o, outer, q));
            vars[d.vars[q]->name] = idx.back();
        }
        if (!d.extents.empty()) {
            idx.push_back(i);
            vars[d.vars.back()->name] = i;
        }
        Expr body = substitute(d.body, [&](Expr n) -> Expr {
            if (n->kind != Kind::Var || n->role != VarRole::Index) return nullptr;
            auto it = vars.find(n->name);
            return it == vars.end() ? nullptr : it->second;
        });
        StmtP st = store(make_load(d.name, idx, DType::f64, SType::Real), body);
        StmtP inner = for_loop(i, int_c(0), inner_ext, {st}, LoopKind::Simd);
        k.body = for_loop(o, int_c(0), product(outer), {inner}, LoopKind::Parallel);
        m_.kernels.push_back(k);
    }

    const Plan &plan_;
    const Program &p_;
    const LowerOptions &o_;
    Module m_;
    RowReducedChoice row_reduced_;
    std::vector<Buffer> partial_buffers_;
    /** Per-tile prologue -> the chains computing it -> its slots there (prologue_slots). */
    std::map<std::string, std::map<size_t, std::vector<size_t>>> prologue_slots_;
    std::deque<ChainPlan> split_chains_;
    std::string term_owner_;  ///< the element-wise definition whose terms go to a row buffer  ///< chains re-split for term reuse (kernels point into them)
};

}  // namespace

Module lower_without_passes(const Plan &plan, const LowerOptions &opts) { return ModuleLowering(plan, opts).run(); }

Module lower_plan(const Plan &plan, const LowerOptions &opts) {
    Module m = lower_without_passes(plan, opts);
    if (verify_each_pass()) verify(m);
    for (const TilePassInfo &pass : tile_passes()) {
        if (!pass.always && !opts.passes) continue;
        if (pass.float_states_only && !opts.float_states) continue;
        if (pass.cpu_only && opts.float_states) continue;
        m = pass.run(m);
        if (verify_each_pass()) verify(m);
    }
    return m;
}

}  // namespace rf::tile
