/** \file ShardProgram.cpp
 * A program on one shard of an axis. The axis is found from the inputs' dimensions: a variable that
 * indexes a sharded dimension is a position of the axis in its definition, and a definition's
 * variable that is one makes that dimension of the definition sharded in turn. Such definitions are
 * computed for the shard only (their extent becomes the shard's), loads keep local indices, and
 * value uses of a position become global (j + lo) as in the partial program (shard/Partial.cpp).
 * A sum over the axis is this shard's part of it: exact to add up over shards, so it may be an
 * output (dQ) but nothing may read it.
 */
#include "shard/ShardProgram.h"

#include <algorithm>
#include <map>
#include <set>

#include "spec/Print.h"
#include "support/Error.h"

namespace rf {

namespace {

const char *kind_name(ShardedOutput k) {
    switch (k) {
    case ShardedOutput::Replicated: return "replicated";
    case ShardedOutput::Sharded: return "sharded";
    case ShardedOutput::PartialSum: return "partial_sum";
    }
    return "?";
}

std::string fresh(const Program &p, const std::string &base) {
    std::string n = base;
    for (int k = 2; p.find_input(n) || p.find_def(n) || p.find_size(n); k++) n = base + std::to_string(k);
    return n;
}

struct Sharder {
    const Program &p;
    std::map<std::string, std::set<size_t>> marks;  // tensor -> sharded dimensions
    std::set<std::string> partial;                  // sums over the axis (this shard's terms)
    std::string axis_size;
    Expr shard = nullptr, offset = nullptr, total = nullptr;
    bool used_offset = false, used_total = false;

    /** The variables of `d` that are positions of the axis (they index a sharded dimension). */
    std::set<std::string> axis_vars(const TensorDef &d) {
        std::set<std::string> out;
        visit(d.body, [&](Expr n) {
            if (n->kind != Kind::Load) return;
            auto m = marks.find(n->name);
            if (m == marks.end()) return;
            for (size_t dim : m->second) {
                Expr ix = n->args[dim];
                if (!(ix->kind == Kind::Var && ix->role == VarRole::Index))
                    throw UserError(d.loc, "'" + n->name + "' is read at " + print_spec_expr(ix) +
                                               " in a dimension split across shards: a shard holds its own positions only");
                out.insert(ix->name);
            }
        });
        return out;
    }

    /** A body linear in partial sums (dslope = s1 + s2, c · s, -s): this shard's part of it. */
    bool linear_in_partial(Expr e) const {
        auto reads_partial = [&](Expr x) {
            return any_of(x, [&](Expr n) { return n->kind == Kind::Load && partial.count(n->name); });
        };
        if (e->kind == Kind::Load) return partial.count(e->name) > 0;
        if (e->kind == Kind::Neg || e->kind == Kind::Cast) return linear_in_partial(e->args[0]);
        if (e->kind == Kind::Add || e->kind == Kind::Sub)  // every term a part (a replicated term would count once per shard)
            return std::all_of(e->args.begin(), e->args.end(), [&](Expr a) { return linear_in_partial(a); });
        if (e->kind == Kind::Mul || e->kind == Kind::Div) {
            int linear = 0;
            for (size_t i = 0; i < e->args.size(); i++) {
                if (!reads_partial(e->args[i])) continue;
                if ((e->kind == Kind::Div && i > 0) || !linear_in_partial(e->args[i])) return false;
                linear++;
            }
            return linear == 1;
        }
        return false;
    }

    void check_loads(const TensorDef &d, const std::set<std::string> &vars) {
        bool linear = linear_in_partial(d.body);
        visit(d.body, [&](Expr n) {
            if (n->kind != Kind::Load) return;
            if (partial.count(n->name) && !linear)
                throw UserError(d.loc, "'" + d.name + "' reads '" + n->name +
                                           "', a sum over the split axis: on a shard it is only that shard's part");
            auto m = marks.find(n->name);
            for (size_t i = 0; i < n->args.size(); i++) {
                bool sharded = m != marks.end() && m->second.count(i);
                for (const std::string &v : vars)
                    if (!sharded && mentions(n->args[i], v))
                        throw UserError(d.loc, "'" + n->name + "' is read at " + print_spec_expr(n->args[i]) +
                                                   ", a position of the split axis, in a dimension that is not split");
            }
        });
    }

    Expr rewrite(Expr e, const std::set<std::string> &vars, const TensorDef &d) {
        switch (e->kind) {
        case Kind::Load: return e;
        case Kind::Var:
            if (e->role == VarRole::Index && vars.count(e->name)) {
                used_offset = true;
                return make_add(e, offset);
            }
            if (e->role == VarRole::Size && e->name == axis_size) {
                used_total = true;
                return total;
            }
            return e;
        case Kind::Reduce: {
            std::vector<Expr> axes, extents;
            bool split = false;
            for (size_t i = 0; i < e->num_axes(); i++) {
                axes.push_back(e->axis(i));
                bool s = vars.count(e->axis(i)->name) > 0;
                split = split || s;
                extents.push_back(s ? shard : e->extents[i]);
            }
            if (split && (e->rop != ReduceOp::Sum || e != d.body))
                throw UserError(d.loc, "'" + d.name + "' " +
                                           (e->rop != ReduceOp::Sum ? std::string("takes a ") + reduce_name(e->rop)
                                                                    : std::string("uses a sum")) +
                                           " over the split axis inside its value: it needs every shard");
            return make_reduce(e->rop, axes, extents, rewrite(e->body(), vars, d), e->k);
        }
        default: {
            std::vector<Expr> args;
            for (Expr a : e->args) args.push_back(rewrite(a, vars, d));
            return with_args(e, args);
        }
        }
    }
};

}  // namespace

nlohmann::json ShardedProgram::layout() const {
    nlohmann::json j;
    j["axis_size"] = axis_size;
    j["shard_size"] = shard_size;
    j["offset_input"] = offset_input;
    j["axis_size_input"] = axis_size_input;
    j["outputs"] = nlohmann::json::array();
    for (const Output &o : outputs) j["outputs"].push_back({{"name", o.name}, {"kind", kind_name(o.kind)}, {"dim", o.dim}});
    return j;
}

ShardedProgram shard_program(const Program &p, const std::vector<std::pair<std::string, size_t>> &sharded_inputs) {
    Sharder s{p, {}, {}, "", nullptr, nullptr, nullptr};
    ShardedProgram res;
    Program out = p;
    for (const auto &[name, dim] : sharded_inputs) {
        const InputDecl *in = p.find_input(name);
        if (!in || dim >= in->dims.size()) throw UserError({}, "no input '" + name + "' with a dimension " + std::to_string(dim));
        Expr ext = in->dims[dim];
        if (!(ext->kind == Kind::Var && ext->role == VarRole::Size))
            throw UserError(in->loc, "input '" + name + "' is split along a dimension of extent " + print_spec_expr(ext) +
                                         ": a split axis needs a plain size");
        if (!s.axis_size.empty() && s.axis_size != ext->name)
            throw UserError(in->loc, "the split dimensions have different sizes (" + s.axis_size + ", " + ext->name + ")");
        s.axis_size = ext->name;
        s.marks[name].insert(dim);
    }
    if (s.axis_size.empty()) throw UserError({}, "no input is split");
    res.axis_size = s.axis_size;
    res.shard_size = fresh(p, s.axis_size + "_shard");
    s.shard = make_size(res.shard_size);
    std::string off = fresh(p, "rf_offset"), tot = fresh(p, "rf_axis_size");
    s.offset = make_load(off, {}, DType::i64, SType::Real);
    s.total = make_load(tot, {}, DType::i64, SType::Real);
    out.sizes.push_back({res.shard_size, std::nullopt, {}});
    for (InputDecl &in : out.inputs)
        for (size_t dim : s.marks[in.name]) in.dims[dim] = s.shard;
    for (TensorDef &d : out.defs) {
        if (d.is_topk() && !s.axis_vars(d).empty()) throw UserError(d.loc, "a top-k along the split axis needs every shard");
        std::set<std::string> vars = s.axis_vars(d);
        s.check_loads(d, vars);
        for (size_t i = 0; i < d.vars.size(); i++)
            if (vars.count(d.vars[i]->name)) {
                s.marks[d.name].insert(i);
                d.extents[i] = s.shard;
            }
        Expr body = d.body;
        bool sums_axis = body->kind == Kind::Reduce && body->rop == ReduceOp::Sum;
        bool split_axis = false;
        if (body->kind == Kind::Reduce)
            for (size_t i = 0; i < body->num_axes(); i++) split_axis = split_axis || vars.count(body->axis(i)->name);
        bool linear = s.linear_in_partial(body);
        d.body = s.rewrite(body, vars, d);
        if ((sums_axis && split_axis) || linear) s.partial.insert(d.name);
    }
    for (const OutputDecl &o : out.outputs) {
        ShardedProgram::Output r{o.name, ShardedOutput::Replicated, 0};
        if (s.partial.count(o.name)) r.kind = ShardedOutput::PartialSum;
        if (auto m = s.marks.find(o.name); m != s.marks.end() && !m->second.empty()) {
            if (m->second.size() != 1) throw UserError(o.loc, "output '" + o.name + "' is split in several dimensions");
            r.kind = ShardedOutput::Sharded;
            r.dim = *m->second.begin();
        }
        res.outputs.push_back(r);
    }
    if (s.used_offset) {
        out.inputs.push_back({off, {}, DType::i64, {}});
        res.offset_input = off;
    }
    if (s.used_total) {
        out.inputs.push_back({tot, {}, DType::i64, {}});
        res.axis_size_input = tot;
    }
    res.spec = print_spec(out, {"a program on one shard of a split axis (redfuse.distributed)"});
    return res;
}

}  // namespace rf
