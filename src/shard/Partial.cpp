/** \file Partial.cpp
 * The partial program of a chain: the chain's members rewritten to run on a shard of their axis and
 * to output the state the derived merge consumes (shard/State.h), one field per tensor.
 *
 * Shard semantics. Inputs indexed by the axis arrive as the local shard, so a load keeps its local
 * index j; every value use of the position (a causal mask `j <= i`, ALiBi's `j - i`) becomes the
 * global j + lo, and every value use of the axis's size (a mean's `/ C`) becomes the whole axis's
 * length. The member analyses are those of the original program (the plan's), so the state is the
 * one the fused kernels keep:
 *   multiplicative  s = Σ G(x)·H(δ):  acc = Σ_j U(x_j, t), tag t = δ(local members), finite (0 else);
 *                   the local value is acc·H_def(δ) (0 when acc = 0, so no 0·inf)
 *   shift forms     S_α = Σ_j D_α(x_j, c), c = δ with sums scaled to the axis (a local mean), finite;
 *                   the local value is g·Σ_α (δ - c)^α S_α, g = e^{λ·(δ - c)} (1 for polynomials)
 *   selections      the sum/product/max/min of the body (of G for φ(G) members), argmax/argmin as
 *                   (value, local index), top-k as values and local indices; the caller adds lo.
 */
#include "shard/Partial.h"

#include <algorithm>
#include <limits>
#include <set>

#include "ir/Eval.h"
#include "spec/Print.h"
#include "support/Error.h"

namespace rf {

const char *state_role_name(StateRole r) {
    switch (r) {
    case StateRole::Acc: return "acc";
    case StateRole::Tag: return "tag";
    case StateRole::Moment: return "S";
    case StateRole::Index: return "index";
    case StateRole::TopValues: return "values";
    case StateRole::TopIndices: return "indices";
    }
    return "?";
}

namespace {

/** Rewrites the chain's expressions for a shard and records which tensors are indexed by the axis. */
struct Localizer {
    const Program &p;
    std::string axis_size;
    Expr offset = nullptr, total = nullptr;  // loads of the 0-dim inputs
    bool used_offset = false, used_total = false;
    std::map<std::string, std::set<size_t>> marks;  // tensor -> dimensions indexed by the axis
    SourceLoc loc;

    /** e in a definition whose axis variable is `axis` (empty: none, e.g. a row expression). */
    Expr rewrite(Expr e, const std::string &axis) {
        switch (e->kind) {
        case Kind::Load:
            for (size_t i = 0; i < e->args.size(); i++) {
                if (axis.empty() || !mentions(e->args[i], axis)) continue;
                if (!(e->args[i]->kind == Kind::Var && e->args[i]->name == axis))
                    throw UserError(loc, "'" + e->name + "' is read at " + print_spec_expr(e->args[i]) +
                                             " along the sharded axis '" + axis +
                                             "': a shard holds its own positions, so a partial state needs " +
                                             e->name + "[..., " + axis + ", ...]");
                marks[e->name].insert(i);
            }
            return e;  // indices stay local: the shard's own positions
        case Kind::Var:
            if (e->role == VarRole::Index && !axis.empty() && e->name == axis) {
                used_offset = true;
                return make_add(e, offset);  // the global position j + lo
            }
            if (e->role == VarRole::Size && e->name == axis_size) {
                used_total = true;
                return total;
            }
            return e;
        case Kind::Reduce: {
            std::vector<Expr> args = e->args;
            args[0] = rewrite(e->args[0], axis);
            return with_args(e, args);
        }
        default: {
            std::vector<Expr> args;
            for (Expr a : e->args) args.push_back(rewrite(a, axis));
            return with_args(e, args);
        }
        }
    }
};

Expr finite_or_zero(Expr e) {
    return make_select(make_cmp(CmpOp::LT, make_call(Func::abs, e), make_const(std::numeric_limits<double>::infinity())),
                       e, make_const(0));
}

/** The row loads of tensors that are not chain members (inputs read by δ, α, H_def or φ). */
void collect_inputs(Expr e, const Program &p, std::set<std::string> &out) {
    if (!e) return;
    visit(e, [&](Expr n) {
        if (n->kind == Kind::Load && p.find_input(n->name)) out.insert(n->name);
    });
}

std::string fresh_name(const Program &p, const std::set<std::string> &taken, const std::string &base) {
    auto used = [&](const std::string &n) {
        return taken.count(n) || p.find_input(n) || p.find_def(n) || p.find_size(n);
    };
    std::string n = base;
    for (int k = 2; used(n); k++) n = base + std::to_string(k);
    return n;
}

struct Builder {
    const Compilation &c;
    const Program &p;
    const ChainPlan &chain;
    int64_t topk_limit;
    Program out;
    PartialProgram res;
    Localizer loc;
    Expr shard = nullptr;  // the shard's extent (a size)
    DType state_dtype = DType::f32;
    std::set<std::string> needed;  // members whose local value a later δ reads
    std::set<std::string> context;

    Builder(const Compilation &c_, const ChainPlan &ch, int64_t limit)
        : c(c_), p(c_.program), chain(ch), topk_limit(limit), loc{c_.program, "", nullptr, nullptr, false, false, {}, {}} {}

    void add_def(const std::string &name, const TensorDef &like, Expr body, bool index = false, bool row_only = false) {
        TensorDef d;
        d.name = name;
        size_t nv = row_only ? chain.n_row : like.vars.size() - (like.is_topk() ? 1 : 0);
        d.vars.assign(like.vars.begin(), like.vars.begin() + static_cast<long>(nv));
        d.extents.assign(like.extents.begin(), like.extents.begin() + static_cast<long>(nv));
        d.body = body;
        d.stype = index ? SType::Int : SType::Real;
        d.loc = like.loc;
        out.defs.push_back(d);
    }

    void add_field(const std::string &member, StateRole role, int slot, const std::string &def_name, bool index,
                   bool per_row = false) {
        std::string key = member + "." + state_role_name(role);
        if (role == StateRole::Tag || role == StateRole::Moment) key += std::to_string(slot);
        res.fields.push_back({key, member, role, slot, index, per_row});
        out.outputs.push_back({def_name, index ? DType::i32 : state_dtype, {}});
    }

    Expr reduce(ReduceOp op, const TensorDef &d, Expr body) {
        Expr ax = d.body->axis(0);
        return make_reduce(op, {ax}, {shard}, loc.rewrite(body, ax->name));
    }

    /** δ expressions over the local values of earlier members, with sums scaled to the axis when
     *  `estimate` (a shift form's reference point). */
    Expr local_delta(const MemberAnalysis &a, size_t i, bool estimate) {
        Expr e = a.delta_exprs[i];
        if (estimate) {
            e = substitute(e, [&](Expr n) -> Expr {
                if (n->kind != Kind::Load) return nullptr;
                const MemberAnalysis *dep = analysis_of(n->name);
                if (!dep || dep->op != ReduceOp::Sum) return nullptr;
                loc.used_total = true;
                return make_mul(n, make_div(loc.total, shard));
            });
        }
        return loc.rewrite(e, "");
    }

    const MemberAnalysis *analysis_of(const std::string &name) const {
        const PassPlan &pass = chain.passes[0];
        for (size_t k = 0; k < pass.members.size(); k++)
            if (pass.members[k] == name) return &pass.members_exec[k];
        return nullptr;
    }

    std::string tmp(const std::string &base) {
        std::set<std::string> taken;
        for (const TensorDef &d : out.defs) taken.insert(d.name);
        for (const InputDecl &i : out.inputs) taken.insert(i.name);
        for (const SizeDecl &s : out.sizes) taken.insert(s.name);
        return fresh_name(p, taken, base);
    }

    void member(const TensorDef &d, const MemberAnalysis &a) {
        loc.loc = d.loc;
        const std::string &k = d.name;
        switch (a.relation) {
        case Relation::Multiplicative: {
            std::vector<Expr> tags;
            for (size_t i = 0; i < a.delta_exprs.size(); i++) {
                std::string tn = tmp(k + ".tag" + std::to_string(i));
                Expr t = finite_or_zero(local_delta(a, i, false));
                bool row = per_row(d, t);
                add_def(tn, d, t, false, row);
                add_field(k, StateRole::Tag, static_cast<int>(i), tn, false, row);
                tags.push_back(out.defs.back().body);
            }
            Expr U = a.U;
            for (size_t i = 0; i < tags.size(); i++) U = substitute(U, a.delta_syms[i], tags[i]);
            std::string an = tmp(k + ".acc");
            add_def(an, d, reduce(a.op, d, U));
            add_field(k, StateRole::Acc, 0, an, false);
            if (needed.count(k)) {
                Expr acc = make_load(an, vars_of(d), DType::f64, SType::Real), hdef = a.H_def;
                for (size_t i = 0; i < tags.size(); i++) hdef = substitute(hdef, a.delta_syms[i], local_delta(a, i, false));
                if (a.op == ReduceOp::Prod) hdef = make_pow(hdef, shard);
                add_def(k, d, make_select(make_cmp(CmpOp::EQ, acc, make_const(0)), make_const(0), make_mul(acc, hdef)));
            }
            collect_inputs(a.alpha, p, context);
            collect_inputs(a.H_def, p, context);
            break;
        }
        case Relation::Polynomial:
        case Relation::ExpPolynomial: {
            std::vector<Expr> cs;
            for (size_t i = 0; i < a.delta_exprs.size(); i++) {
                std::string tn = tmp(k + ".tag" + std::to_string(i));
                Expr t = finite_or_zero(local_delta(a, i, true));
                bool row = per_row(d, t);
                add_def(tn, d, t, false, row);
                add_field(k, StateRole::Tag, static_cast<int>(i), tn, false, row);
                cs.push_back(out.defs.back().body);
            }
            std::vector<Expr> moments;
            for (size_t b = 0; b < a.basis.size(); b++) {
                Expr basis = a.basis[b];
                for (size_t i = 0; i < cs.size(); i++) basis = substitute(basis, a.delta_syms[i], cs[i]);
                std::string sn = tmp(k + ".S" + std::to_string(b));
                // A basis function that does not vary along the axis sums to n times itself.
                bool varies = mentions(basis, d.body->axis(0)->name);
                add_def(sn, d, varies ? reduce(ReduceOp::Sum, d, basis) : make_mul(loc.rewrite(basis, ""), shard));
                add_field(k, StateRole::Moment, static_cast<int>(b), sn, false);
                moments.push_back(make_load(sn, vars_of(d), DType::f64, SType::Real));
            }
            if (needed.count(k)) {
                std::vector<Expr> terms;
                for (size_t al = 0; al < a.alphas.size(); al++) {
                    std::vector<Expr> f{moments[al]};
                    for (size_t i = 0; i < cs.size(); i++)
                        if (a.alphas[al][i] > 0)
                            f.push_back(make_pow(make_sub(local_delta(a, i, false), cs[i]), make_const(a.alphas[al][i])));
                    terms.push_back(make_mul(f));
                }
                Expr v = make_add(terms);
                if (a.relation == Relation::ExpPolynomial) {
                    Expr g = a.alpha;
                    for (size_t i = 0; i < cs.size(); i++) {
                        g = substitute(g, a.delta_syms[i], local_delta(a, i, false));
                        g = substitute(g, a.old_syms[i], cs[i]);
                    }
                    v = make_mul(g, v);
                }
                if (a.H_def && !a.H_def->is_const(1)) {  // deferred exponent terms, at the shard's δ
                    Expr hdef = a.H_def;
                    for (size_t i = 0; i < cs.size(); i++) hdef = substitute(hdef, a.delta_syms[i], local_delta(a, i, false));
                    v = make_mul(v, hdef);
                }
                add_def(k, d, v);
            }
            collect_inputs(a.alpha, p, context);
            if (a.H_def) collect_inputs(a.H_def, p, context);
            break;
        }
        case Relation::Independent:
        case Relation::Additive:
        case Relation::Monotone:
            selection(d, a);
            break;
        default:
            throw UserError(d.loc, "'" + k + "' does not fuse with the chain (" + a.reason +
                                       "): its partial state would need a second pass");
        }
    }

    void selection(const TensorDef &d, const MemberAnalysis &a) {
        const std::string &k = d.name;
        bool sel = a.relation == Relation::Additive || a.relation == Relation::Monotone;
        Expr body = sel ? (a.Gsel_literal ? a.Gsel_literal : a.Gsel) : d.body->body();
        ReduceOp op = sel && !a.increasing ? mirrored(a.op) : a.op;
        if (sel) {
            collect_inputs(a.phi_literal ? a.phi_literal : a.phi, p, context);
            for (Expr e : a.delta_exprs) collect_inputs(e, p, context);
        }
        if (op == ReduceOp::TopK) {
            int64_t kk = a.k;
            if (kk <= 0) {
                try {
                    kk = eval_int(a.k_extent, c.sizes);
                } catch (const UserError &) {
                    throw UserError(d.loc, "top-k '" + k + "': its k is a size without a value; give it a default or a --size");
                }
            }
            if (topk_limit > 0) kk = std::min(kk, topk_limit);
            if (sel && !a.increasing) body = make_neg(body);  // bottom-k of G as top-k of -G (as the merge keeps it)
            TensorDef t;
            t.name = tmp(k + ".values");
            t.index_name = tmp(k + ".indices");
            t.vars = d.vars;
            t.extents = d.extents;
            t.extents.back() = make_int(kk);
            Expr ax = d.body->axis(0);
            t.body = make_reduce(ReduceOp::TopK, {ax}, {shard}, loc.rewrite(body, ax->name), kk);
            t.loc = d.loc;
            out.defs.push_back(t);
            add_field(k, StateRole::TopValues, 0, t.name, false);
            res.fields.back().k = kk;
            add_field(k, StateRole::TopIndices, 0, t.index_name, true);
            if (needed.count(k)) throw UserError(d.loc, "top-k '" + k + "' is read by a later member of its chain: not split");
            return;
        }
        bool arg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
        std::string an = tmp(k + ".acc");
        ReduceOp value_op = op == ReduceOp::ArgMax ? ReduceOp::Max : op == ReduceOp::ArgMin ? ReduceOp::Min : op;
        add_def(an, d, reduce(value_op, d, body));
        add_field(k, StateRole::Acc, 0, an, false);
        if (arg) {
            std::string in = tmp(k + ".index");
            add_def(in, d, reduce(op, d, body), true);
            add_field(k, StateRole::Index, 0, in, true);
            if (needed.count(k)) throw UserError(d.loc, "'" + k + "' (an index) is read by a later member of its chain: not split");
            return;
        }
        if (needed.count(k)) {
            Expr u = make_load(an, vars_of(d), DType::f64, SType::Real);
            Expr v = u;
            if (sel) {
                v = substitute(a.phi_literal ? a.phi_literal : a.phi, a.u_sym, u);
                for (size_t i = 0; i < a.delta_syms.size(); i++) v = substitute(v, a.delta_syms[i], local_delta(a, i, false));
            }
            add_def(k, d, v);
        }
    }

    /** True when a row expression reads none of the member's variables after the row. */
    bool per_row(const TensorDef &d, Expr e) const {
        size_t nv = d.vars.size() - (d.is_topk() ? 1 : 0);
        for (size_t i = chain.n_row; i < nv; i++)
            if (mentions(e, d.vars[i]->name)) return false;
        return true;
    }

    static std::vector<Expr> vars_of(const TensorDef &d) {
        size_t nv = d.vars.size() - (d.is_topk() ? 1 : 0);
        return {d.vars.begin(), d.vars.begin() + static_cast<long>(nv)};
    }
};

}  // namespace

nlohmann::json PartialProgram::layout() const {
    nlohmann::json j;
    j["axis"] = axis;
    j["axis_size"] = axis_size;
    j["shard_size"] = shard_size;
    j["offset_input"] = offset_input;
    j["axis_size_input"] = axis_size_input;
    j["topk_limit"] = topk_limit;
    j["row_rank"] = row_rank;
    j["sharded_inputs"] = nlohmann::json::object();
    for (const auto &[n, d] : sharded_inputs) j["sharded_inputs"][n] = d;
    j["context_inputs"] = context_inputs;
    j["fields"] = nlohmann::json::array();
    for (const StateField &f : fields)
        j["fields"].push_back({{"key", f.key}, {"member", f.member}, {"role", state_role_name(f.role)},
                               {"slot", f.slot}, {"index", f.is_index}, {"per_row", f.per_row}, {"k", f.k}});
    return j;
}

namespace {

/** The chain over `axis` (or the only chain), checked to be one fused pass over one plain size. */
size_t pick_chain(const Compilation &c, const std::string &axis) {
    const Plan &plan = c.plan;
    std::vector<size_t> found;
    std::string axes;
    for (size_t i = 0; i < plan.chains.size(); i++) {
        const ChainPlan &ch = plan.chains[i];
        std::string a;
        for (const std::string &x : ch.axes) a += (a.empty() ? "" : ",") + x;
        axes += (axes.empty() ? "" : ", ") + a + " (" + ch.members[0] + ")";
        if (axis.empty() || (ch.axes.size() == 1 && ch.axes[0] == axis)) found.push_back(i);
    }
    if (found.size() != 1 || plan.chains.size() != 1) {
        if (found.empty() && !axis.empty())
            throw UserError({}, "no chain reduces over '" + axis + "'; the chains reduce over: " + axes);
        throw UserError({}, "partial states split a program with one chain; this one has " +
                                std::to_string(plan.chains.size()) + " (over " + axes + ")");
    }
    const ChainPlan &ch = plan.chains[found[0]];
    if (ch.axes.size() != 1)
        throw UserError(c.program.find_def(ch.members[0])->loc,
                        "the chain reduces over several axes at once; partial states split one axis");
    if (ch.passes.size() != 1)
        throw UserError(c.program.find_def(ch.passes[1].members[0])->loc,
                        "the chain needs " + std::to_string(ch.passes.size()) + " passes ('" + ch.passes[1].members[0] +
                            "' does not fuse with the earlier members): a partial state of one pass cannot be merged");
    Expr ext = ch.axis_extents[0];
    if (!(ext->kind == Kind::Var && ext->role == VarRole::Size))
        throw UserError(c.program.find_def(ch.members[0])->loc,
                        "the axis '" + ch.axes[0] + "' has extent " + print_spec_expr(ext) + ": partial states need a plain size");
    return found[0];
}

}  // namespace

namespace {

/** The prologue (QKᵀ), users first: each is indexed by the axis at the position members read it. */
void shard_prologue(Builder &b, const Program &p, const std::set<std::string> &prologue) {
    std::vector<TensorDef> pro;
    for (auto it = p.defs.rbegin(); it != p.defs.rend(); ++it) {
        if (!prologue.count(it->name)) continue;
        TensorDef d = *it;
        b.loc.loc = d.loc;
        auto marked = b.loc.marks.find(d.name);
        std::string ax;
        if (marked != b.loc.marks.end()) {
            if (marked->second.size() != 1)
                throw UserError(d.loc, "'" + d.name + "' is read along the sharded axis at several positions");
            size_t pos = *marked->second.begin();
            ax = d.vars[pos]->name;
            d.extents[pos] = b.shard;
        }
        d.body = b.loc.rewrite(d.body, ax);
        pro.insert(pro.begin(), d);
    }
    for (TensorDef &d : b.out.defs) pro.push_back(std::move(d));
    b.out.defs = std::move(pro);
}

/** Every other definition is the epilogue: it runs on the host from the final members, so it may
 *  read row inputs (kept in the state as context) but nothing along the axis. */
void check_epilogue(Builder &b, const Program &p, const std::set<std::string> &members, const std::set<std::string> &prologue) {
    for (const TensorDef &d : p.defs) {
        if (members.count(d.name) || prologue.count(d.name)) continue;
        if (d.is_reduction())
            throw UserError(d.loc, "'" + d.name + "' is a reduction outside the chain over '" + b.res.axis +
                                       "': partial states split a program with one chain");
        visit(d.body, [&](Expr n) {
            if (n->kind != Kind::Load) return;
            if (b.loc.marks.count(n->name) || prologue.count(n->name))
                throw UserError(d.loc, "'" + d.name + "' reads '" + n->name + "' along the sharded axis '" + b.res.axis +
                                           "': the outputs are computed from the merged state alone; output the "
                                           "row statistics and apply them to each shard instead");
            if (p.find_input(n->name)) b.context.insert(n->name);
        });
    }
}

/** Inputs: shards along the marked dimension, whose extent was the axis's size. */
void shard_inputs(Builder &b, const Program &p) {
    for (const InputDecl &in : p.inputs) {
        InputDecl d = in;
        auto marked = b.loc.marks.find(in.name);
        if (marked != b.loc.marks.end()) {
            if (marked->second.size() != 1)
                throw UserError(in.loc, "input '" + in.name + "' is indexed by the sharded axis in several dimensions");
            size_t pos = *marked->second.begin();
            if (!(in.dims[pos]->kind == Kind::Var && in.dims[pos]->name == b.res.axis_size))
                throw UserError(in.loc, "input '" + in.name + "' is read along the sharded axis in a dimension of extent " +
                                            print_spec_expr(in.dims[pos]) + ", not " + b.res.axis_size);
            d.dims[pos] = b.shard;
            b.res.sharded_inputs.push_back({in.name, pos});
            if (b.context.count(in.name))
                throw UserError(in.loc, "input '" + in.name + "' is sharded along the axis but read per row by the merge");
        }
        b.out.inputs.push_back(d);
    }
}

/** A sharded tensor read at another index than an axis variable anywhere in the partial program. */
void check_sharded_loads(const Builder &b) {
    for (const TensorDef &d : b.out.defs) {
        std::set<std::string> axes;
        visit(d.body, [&](Expr n) {
            if (n->kind == Kind::Reduce)
                for (size_t i = 0; i < n->num_axes(); i++) axes.insert(n->axis(i)->name);
        });
        for (Expr v : d.vars) axes.insert(v->name);
        visit(d.body, [&](Expr n) {
            auto m = n->kind == Kind::Load ? b.loc.marks.find(n->name) : b.loc.marks.end();
            if (m == b.loc.marks.end()) return;
            for (size_t pos : m->second) {
                Expr ix = n->args[pos];
                if (!(ix->kind == Kind::Var && axes.count(ix->name)))
                    throw UserError(d.loc, "'" + n->name + "' is read at " + print_spec_expr(ix) +
                                               " in a dimension that is sharded along '" + b.res.axis + "'");
            }
        });
    }
}

}  // namespace

PartialProgram derive_partial(const Compilation &c, const std::string &axis, int64_t topk_limit) {
    const Program &p = c.program;
    size_t ci = pick_chain(c, axis);
    const ChainPlan &chain = c.plan.chains[ci];
    const PassPlan &pass = chain.passes[0];
    Builder b(c, chain, topk_limit);
    b.res.chain = ci;
    b.res.row_rank = chain.n_row;
    b.res.axis = chain.axes[0];
    b.res.axis_size = chain.axis_extents[0]->name;
    b.res.topk_limit = topk_limit;
    b.loc.axis_size = b.res.axis_size;
    b.out.file = p.file;
    b.out.sizes = p.sizes;
    b.res.shard_size = b.tmp(b.res.axis_size + "_shard");
    b.out.sizes.push_back({b.res.shard_size, std::nullopt, {}});
    b.shard = make_size(b.res.shard_size);
    std::string off = b.tmp("rf_offset"), tot = b.tmp("rf_axis_size");
    b.loc.offset = make_load(off, {}, DType::i64, SType::Real);
    b.loc.total = make_load(tot, {}, DType::i64, SType::Real);
    for (const InputDecl &in : p.inputs)
        if (in.dtype == DType::f64) b.state_dtype = DType::f64;

    // Which members' local values later δ read (defined in the partial program from their state).
    for (const MemberAnalysis &a : pass.members_exec)
        for (Expr e : a.delta_exprs)
            visit(e, [&](Expr n) {
                if (n->kind == Kind::Load && b.analysis_of(n->name)) b.needed.insert(n->name);
            });
    std::set<std::string> members(pass.members.begin(), pass.members.end());
    for (size_t k = 0; k < pass.members.size(); k++) {
        const TensorDef *d = p.find_def(pass.members[k]);
        if (d->is_topk()) members.insert(d->index_name);
        b.member(*d, pass.members_exec[k]);
    }
    std::set<std::string> prologue(chain.prologue.begin(), chain.prologue.end());
    shard_prologue(b, p, prologue);
    check_epilogue(b, p, members, prologue);
    shard_inputs(b, p);
    check_sharded_loads(b);
    if (b.loc.used_offset) {
        b.out.inputs.push_back({off, {}, DType::i64, {}});
        b.res.offset_input = off;
    }
    if (b.loc.used_total) {
        b.out.inputs.push_back({tot, {}, DType::i64, {}});
        b.res.axis_size_input = tot;
    }
    b.res.context_inputs.assign(b.context.begin(), b.context.end());
    b.res.spec = print_spec(b.out, {"partial program of a chain over one shard of its axis (redfuse partial)"});
    return b.res;
}

}  // namespace rf
