/** \file Reference.cpp
 * The float64 reference interpreter of Reference.h: one Evaluator per definition, driven over the
 * definition's index space, with loads resolved once per definition rather than per element.
 */
#include "interp/Reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/Eval.h"
#include "support/Error.h"

namespace rf {

namespace {

// The reference is for test-sized problems: beyond 2^31 elements (16 GiB of doubles) it would
// exhaust memory or run for hours, so refuse with a message instead.
constexpr int64_t kMaxReferenceElements = int64_t(1) << 31;

/** Size Vars by pointer, resolved from the binding on first use (a linear scan beats a string map
 *  lookup for the handful of sizes a spec has). */
class SizeTable {
public:
    explicit SizeTable(const SizeBinding &sizes) : sizes_(sizes) {}
    double value(Expr var) {
        for (auto &[v, x] : cache_)
            if (v == var) return x;
        if (var->role != VarRole::Size)
            internal_error("variable '" + var->name + "' has no value (not a size, not bound)", __FILE__, __LINE__);
        auto it = sizes_.find(var->name);
        if (it == sizes_.end()) throw UserError({}, "size '" + var->name + "' has no value");
        cache_.emplace_back(var, static_cast<double>(it->second));
        return cache_.back().second;
    }

private:
    const SizeBinding &sizes_;
    std::vector<std::pair<Expr, double>> cache_;
};

/** What a Load node of a definition body reads: resolved once per definition. */
struct LoadSlot {
    Expr load;
    const Tensor *tensor;
};

/** The environment of one definition: sizes, and the tensors its loads read. */
class DefEnv {
public:
    DefEnv(const TensorDef &d, const SizeBinding &sizes, const std::map<std::string, Tensor> &results)
        : def_(d), sizes_(sizes) {
        visit(d.body, [&](Expr e) {
            if (e->kind != Kind::Load) return;
            auto it = results.find(e->name);
            if (it == results.end())
                throw UserError(d.loc, "'" + d.name + "' reads '" + e->name + "', which is not defined before it");
            if (it->second.rank() != e->args.size())
                throw UserError(d.loc, "'" + d.name + "' indexes '" + e->name + "' with " +
                                           std::to_string(e->args.size()) + " indices, but it has rank " +
                                           std::to_string(it->second.rank()));
            slots_.push_back({e, &it->second});
        });
    }

    EvalEnv env() {
        EvalEnv env;
        env.var_value = [this](Expr v) { return sizes_.value(v); };
        env.load_value = [this](Expr load, const int64_t *idx) { return load_value(load, idx); };
        return env;
    }

private:
    double load_value(Expr load, const int64_t *idx) {
        const Tensor *t = nullptr;
        for (const LoadSlot &s : slots_)
            if (s.load == load) {
                t = s.tensor;
                break;
            }
        RF_INTERNAL_ASSERT(t) << "load of " << load->name << " was not resolved";
        int64_t off = 0;
        for (size_t i = 0; i < t->shape.size(); i++) {
            if (idx[i] < 0 || idx[i] >= t->shape[i])
                throw UserError(def_.loc, "'" + def_.name + "' reads '" + load->name + "' out of bounds: index " +
                                              std::to_string(idx[i]) + " in dimension " + std::to_string(i) +
                                              " of extent " + std::to_string(t->shape[i]));
            off = off * t->shape[i] + idx[i];
        }
        return t->data[static_cast<size_t>(off)];
    }

    const TensorDef &def_;
    SizeTable sizes_;
    std::vector<LoadSlot> slots_;
};

void run_elementwise(const TensorDef &d, const SizeBinding &sizes, std::map<std::string, Tensor> &results) {
    std::vector<int64_t> shape = def_shape(d, sizes);
    checked_numel(shape, "'" + d.name + "' (in the reference interpreter)", kMaxReferenceElements);
    Tensor out(shape, DType::f64);
    DefEnv denv(d, sizes, results);
    Evaluator ev(denv.env());
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t flat = 0; flat < out.numel(); flat++) {
        for (size_t i = 0; i < idx.size(); i++) ev.bind(d.vars[i], static_cast<double>(idx[i]));
        out.data[static_cast<size_t>(flat)] = ev.eval(d.body);
        next_index(idx, shape);
    }
    results[d.name] = std::move(out);
}

}  // namespace

/** Top-k order: larger first, NaN above everything, ties by lower index. */
bool topk_before(const std::pair<double, int64_t> &a, const std::pair<double, int64_t> &b) {
    bool an = std::isnan(a.first), bn = std::isnan(b.first);
    if (an != bn) return an;
    if (!an && a.first != b.first) return a.first > b.first;
    return a.second < b.second;
}

void rank_topk_candidates(Evaluator &ev, Expr red, const std::vector<int64_t> &red_shape, int64_t k,
                          std::vector<std::pair<double, int64_t>> &cand) {
    std::vector<int64_t> pos(red_shape.size(), 0);
    for (size_t j = 0; j < cand.size(); j++) {
        for (size_t a = 0; a < pos.size(); a++) ev.bind(red->axis(a), static_cast<double>(pos[a]));
        cand[j] = {ev.eval(red->body()), static_cast<int64_t>(j)};
        next_index(pos, red_shape);
    }
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), topk_before);
}

void run_topk(const TensorDef &d, const SizeBinding &sizes, std::map<std::string, Tensor> &results) {
    Expr red = d.body;
    RF_INTERNAL_ASSERT(red && red->kind == Kind::Reduce && red->rop == ReduceOp::TopK)
        << "top-k definition '" << d.name << "' has no TopK body";
    RF_INTERNAL_ASSERT(!d.vars.empty()) << "top-k definition '" << d.name << "' has no k axis";
    std::vector<int64_t> shape = def_shape(d, sizes);
    checked_numel(shape, "'" + d.name + "' (in the reference interpreter)", kMaxReferenceElements);
    // K may be a size: the k axis's bound extent is the k of this run (Reduce::k is 0 then).
    const int64_t k = shape.back();
    if (red->k != 0 && red->k != k)
        internal_error("top-k '" + d.name + "': k axis has extent " + std::to_string(k) + ", k is " +
                           std::to_string(red->k),
                       __FILE__, __LINE__);
    std::vector<int64_t> red_shape;
    for (Expr e : red->extents) red_shape.push_back(eval_extent(e, sizes));
    int64_t n = checked_numel(red_shape, "top-k '" + d.name + "'", kMaxReferenceElements);
    if (k > n)
        throw UserError(d.loc, "top-k of '" + d.name + "' asks for " + std::to_string(k) + " elements of " +
                                   std::to_string(n));

    Tensor values(shape, DType::f64), indices(shape, DType::f64);
    DefEnv denv(d, sizes, results);
    Evaluator ev(denv.env());
    std::vector<int64_t> outer_shape(shape.begin(), shape.end() - 1), outer(outer_shape.size(), 0);
    std::vector<std::pair<double, int64_t>> cand(static_cast<size_t>(n));
    int64_t outer_count = checked_numel(outer_shape, "top-k '" + d.name + "'");
    for (int64_t o = 0; o < outer_count; o++) {
        for (size_t i = 0; i < outer.size(); i++) ev.bind(d.vars[i], static_cast<double>(outer[i]));
        rank_topk_candidates(ev, red, red_shape, k, cand);
        for (int64_t r = 0; r < k; r++) {
            size_t off = static_cast<size_t>(o * k + r);
            values.data[off] = cand[static_cast<size_t>(r)].first;
            indices.data[off] = static_cast<double>(cand[static_cast<size_t>(r)].second);
        }
        next_index(outer, outer_shape);
    }
    for (size_t a = 0; a < red_shape.size(); a++) ev.unbind(red->axis(a));
    results[d.name] = std::move(values);
    results[d.index_name] = std::move(indices);
}

int64_t eval_extent(Expr e, const SizeBinding &sizes) {
    SizeTable table(sizes);
    EvalEnv env;
    env.var_value = [&](Expr v) { return table.value(v); };
    env.load_value = [](Expr load, const int64_t *) -> double {
        internal_error("extent reads tensor '" + load->name + "'", __FILE__, __LINE__);
    };
    Evaluator ev(std::move(env));
    double v = ev.eval(e);
    if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) > 9e15)
        throw UserError({}, "extent " + to_string(e) + " is not an integer at these sizes");
    return static_cast<int64_t>(v);
}

static std::vector<int64_t> shape_of(const std::vector<Expr> &dims, const SizeBinding &sizes, SourceLoc loc,
                                     const std::string &what) {
    std::vector<int64_t> shape;
    for (Expr e : dims) {
        int64_t v = eval_extent(e, sizes);
        if (v < 1)
            throw UserError(loc, what + ": extent " + to_string(e) + " is " + std::to_string(v) + " (must be >= 1)");
        shape.push_back(v);
    }
    checked_numel(shape, what);
    return shape;
}

std::vector<int64_t> input_shape(const InputDecl &in, const SizeBinding &sizes) {
    return shape_of(in.dims, sizes, in.loc, "input '" + in.name + "'");
}

std::vector<int64_t> def_shape(const TensorDef &d, const SizeBinding &sizes) {
    RF_INTERNAL_ASSERT(d.vars.size() == d.extents.size()) << "definition '" << d.name << "' vars/extents differ";
    return shape_of(d.extents, sizes, d.loc, "'" + d.name + "'");
}

std::map<std::string, Tensor> run_reference(const Program &p, const SizeBinding &sizes,
                                            const std::map<std::string, Tensor> &inputs) {
    std::map<std::string, Tensor> results;
    for (const InputDecl &in : p.inputs) {
        auto it = inputs.find(in.name);
        if (it == inputs.end()) throw UserError(in.loc, "no value given for input '" + in.name + "'");
        std::vector<int64_t> shape = input_shape(in, sizes);
        const Tensor &t = it->second;
        if (t.shape != shape)
            throw UserError(in.loc, "input '" + in.name + "' has shape " + shape_to_string(t.shape) + ", expected " +
                                        shape_to_string(shape));
        if (t.numel() != checked_numel(shape, "input '" + in.name + "'"))
            throw UserError(in.loc, "input '" + in.name + "' holds " + std::to_string(t.numel()) +
                                        " values for shape " + shape_to_string(shape));
        results[in.name] = round_output(t, in.dtype);
    }
    for (const TensorDef &d : p.defs) {
        if (d.is_topk())
            run_topk(d, sizes, results);
        else
            run_elementwise(d, sizes, results);
    }
    return results;
}

Tensor round_output(const Tensor &t, DType d) {
    Tensor r;
    r.shape = t.shape;
    r.dtype = d;
    r.data.resize(t.data.size());
    for (size_t i = 0; i < t.data.size(); i++) r.data[i] = round_to_dtype(t.data[i], d);
    return r;
}

std::map<std::string, Tensor> reference_outputs(const Program &p, const std::map<std::string, Tensor> &results) {
    std::map<std::string, Tensor> outs;
    for (const OutputDecl &o : p.outputs) {
        auto it = results.find(o.name);
        if (it == results.end()) throw UserError(o.loc, "output '" + o.name + "' is not defined");
        outs[o.name] = round_output(it->second, o.dtype);
    }
    return outs;
}

}  // namespace rf
