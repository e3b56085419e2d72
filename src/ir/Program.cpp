/** \file Program.cpp
 * Lookups, size binding with its bounds proof (interval arithmetic over every index expression),
 * integer evaluation of extents and the stable text dump of a Program (`--emit ir`).
 */
#include "ir/Program.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace rf {

const InputDecl *Program::find_input(const std::string &n) const {
    for (const InputDecl &i : inputs)
        if (i.name == n) return &i;
    return nullptr;
}

const TensorDef *Program::find_def(const std::string &n) const {
    for (const TensorDef &d : defs)
        if (d.name == n || (!d.index_name.empty() && d.index_name == n)) return &d;
    return nullptr;
}

const SizeDecl *Program::find_size(const std::string &n) const {
    for (const SizeDecl &s : sizes)
        if (s.name == n) return &s;
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Integer evaluation

namespace {
using i128 = __int128;

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}
i128 floor_div128(i128 a, i128 b) {
    i128 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

[[noreturn]] void overflow(Expr e) {
    throw UserError({}, "integer overflow evaluating '" + to_string(e) + "'");
}

class IntEval {
public:
    explicit IntEval(const SizeBinding &s) : sizes_(s) {}
    int64_t eval(Expr e) {
        auto it = memo_.find(e);
        if (it != memo_.end()) return it->second;
        int64_t v = compute(e);
        memo_[e] = v;
        return v;
    }

private:
    int64_t compute(Expr e) {
        const auto &a = e->args;
        int64_t r = 0;
        switch (e->kind) {
        case Kind::Const: {
            double v = e->value;
            if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || v != static_cast<double>(static_cast<int64_t>(v)))
                throw UserError({}, "'" + to_string(e) + "' is not an integer");
            return static_cast<int64_t>(v);
        }
        case Kind::Var: {
            RF_INTERNAL_ASSERT(e->role == VarRole::Size) << "eval_int of the non-size variable " << e->name;
            auto it = sizes_.find(e->name);
            if (it == sizes_.end()) throw UserError({}, "size '" + e->name + "' has no value; pass --size " + e->name + "=VALUE");
            return it->second;
        }
        case Kind::Add:
            r = eval(a[0]);
            for (size_t i = 1; i < a.size(); i++)
                if (__builtin_add_overflow(r, eval(a[i]), &r)) overflow(e);
            return r;
        case Kind::Mul:
            r = eval(a[0]);
            for (size_t i = 1; i < a.size(); i++)
                if (__builtin_mul_overflow(r, eval(a[i]), &r)) overflow(e);
            return r;
        case Kind::Sub:
            if (__builtin_sub_overflow(eval(a[0]), eval(a[1]), &r)) overflow(e);
            return r;
        case Kind::Neg:
            if (__builtin_sub_overflow(int64_t(0), eval(a[0]), &r)) overflow(e);
            return r;
        case Kind::Min: return std::min(eval(a[0]), eval(a[1]));
        case Kind::Max: return std::max(eval(a[0]), eval(a[1]));
        case Kind::IDiv: case Kind::Mod: {
            int64_t x = eval(a[0]), y = eval(a[1]);
            if (y == 0) throw UserError({}, "integer division by zero in '" + to_string(e) + "'");
            if (y == -1 && x == INT64_MIN) overflow(e);
            int64_t q = floor_div(x, y);
            return e->kind == Kind::IDiv ? q : x - y * q;
        }
        case Kind::Select:
            // Integer choices between sizes (the lowering's buffer extents: one copy per worker
            // when the rows are fewer than the workers).
            if (a[0]->kind == Kind::Cmp) {
                int64_t x = eval(a[0]->args[0]), y = eval(a[0]->args[1]);
                bool c = false;
                switch (a[0]->cmp) {
                case CmpOp::LT: c = x < y; break;
                case CmpOp::LE: c = x <= y; break;
                case CmpOp::GT: c = x > y; break;
                case CmpOp::GE: c = x >= y; break;
                case CmpOp::EQ: c = x == y; break;
                case CmpOp::NE: c = x != y; break;
                }
                return eval(c ? a[1] : a[2]);
            }
            break;
        default: break;
        }
        RF_INTERNAL_ASSERT(false) << "eval_int of a non-integer expression: " << to_string(e);
        return 0;
    }
    const SizeBinding &sizes_;
    std::unordered_map<Expr, int64_t> memo_;
};

[[noreturn]] void rethrow_at(const UserError &e, SourceLoc loc) {
    throw UserError(e.loc().valid() ? e.loc() : loc, e.what());
}

// ---------------------------------------------------------------------------------------------
// Bounds: interval evaluation of index expressions with concrete variable ranges

struct Interval {
    i128 lo, hi;
};

const i128 kBoundLimit = i128(1) << 62;

/** Checks every load of one definition. Ranges are memoized per (node, environment) so shared
 *  subtrees cost once; an environment is the set of index-variable ranges in scope. */
class BoundsChecker {
public:
    BoundsChecker(const std::map<std::string, std::vector<int64_t>> &dims, IntEval &ev) : dims_(dims), ev_(ev) {}

    void check_def(const TensorDef &d) {
        Env env;
        for (size_t i = 0; i < d.vars.size(); i++) {
            if (d.is_topk() && i + 1 == d.vars.size()) continue;  // the k axis does not occur in the body
            env[d.vars[i]->name] = {0, ev_.eval(d.extents[i]) - 1};
        }
        walk(d.body, env, intern(env));
    }

private:
    using Env = std::map<std::string, Interval>;

    int intern(const Env &env) {
        std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> key;
        for (auto &[n, r] : env) key.push_back({n, {static_cast<int64_t>(r.lo), static_cast<int64_t>(r.hi)}});
        auto it = env_ids_.find(key);
        if (it != env_ids_.end()) return it->second;
        int id = static_cast<int>(env_ids_.size());
        env_ids_[key] = id;
        return id;
    }

    void walk(Expr e, const Env &env, int env_id) {
        if (!visited_.insert({e, env_id}).second) return;
        if (e->kind == Kind::Reduce) {
            Env inner = env;
            for (size_t i = 0; i < e->num_axes(); i++) inner[e->axis(i)->name] = {0, ev_.eval(e->extents[i]) - 1};
            walk(e->body(), inner, intern(inner));
            return;
        }
        if (e->kind == Kind::Load) {
            auto it = dims_.find(e->name);
            RF_INTERNAL_ASSERT(it != dims_.end() && it->second.size() == e->args.size())
                << "load of unknown tensor or wrong rank: " << e->name;
            for (size_t i = 0; i < e->args.size(); i++) {
                Interval r = range(e->args[i], env, env_id);
                int64_t extent = it->second[i];
                std::string head = "index '" + to_string(e->args[i]) + "' of " + e->name + " dimension " + std::to_string(i + 1);
                if (r.lo < 0)
                    throw UserError({}, head + " can reach " + std::to_string(static_cast<int64_t>(r.lo)) +
                                            " but indices start at 0");
                if (r.hi >= extent)
                    throw UserError({}, head + " can reach " + std::to_string(static_cast<int64_t>(r.hi)) +
                                            " but its extent is " + std::to_string(extent));
            }
        }
        for (Expr a : e->args) walk(a, env, env_id);
    }

    Interval checked(Interval r, Expr e) {
        if (r.lo < -kBoundLimit || r.hi > kBoundLimit)
            throw UserError({}, "index expression '" + to_string(e) + "' can overflow 64-bit integers");
        return r;
    }

    Interval range(Expr e, const Env &env, int env_id) {
        auto key = std::make_pair(e, env_id);
        auto it = memo_.find(key);
        if (it != memo_.end()) return it->second;
        Interval r = checked(compute(e, env, env_id), e);
        memo_[key] = r;
        return r;
    }

    Interval compute(Expr e, const Env &env, int env_id) {
        const auto &a = e->args;
        auto sub = [&](size_t i) { return range(a[i], env, env_id); };
        switch (e->kind) {
        case Kind::Const: {
            int64_t v = ev_.eval(e);
            return {v, v};
        }
        case Kind::Var: {
            if (e->role == VarRole::Size) {
                int64_t v = ev_.eval(e);
                return {v, v};
            }
            auto it = env.find(e->name);
            RF_INTERNAL_ASSERT(it != env.end()) << "index variable '" << e->name << "' is not bound";
            return it->second;
        }
        case Kind::Add: case Kind::Mul: {
            Interval r = sub(0);
            for (size_t i = 1; i < a.size(); i++) {
                Interval b = sub(i);
                if (e->kind == Kind::Add) r = {r.lo + b.lo, r.hi + b.hi};
                else {
                    i128 c[4] = {r.lo * b.lo, r.lo * b.hi, r.hi * b.lo, r.hi * b.hi};
                    r = {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
                }
                r = checked(r, e);
            }
            return r;
        }
        case Kind::Sub: {
            Interval x = sub(0), y = sub(1);
            return {x.lo - y.hi, x.hi - y.lo};
        }
        case Kind::Neg: {
            Interval x = sub(0);
            return {-x.hi, -x.lo};
        }
        case Kind::Min: case Kind::Max: {
            Interval x = sub(0), y = sub(1);
            if (e->kind == Kind::Min) return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
            return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
        }
        case Kind::IDiv: case Kind::Mod: {
            Interval x = sub(0), d = sub(1);
            if (d.lo <= 0 && d.hi >= 0)
                throw UserError({}, "the divisor '" + to_string(a[1]) + "' in '" + to_string(e) + "' can be 0");
            if (e->kind == Kind::IDiv) {
                // Floor division is monotone in each argument on a sign-definite divisor range,
                // so the extremes are at the corners.
                i128 c[4] = {floor_div128(x.lo, d.lo), floor_div128(x.lo, d.hi), floor_div128(x.hi, d.lo),
                             floor_div128(x.hi, d.hi)};
                return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
            }
            if (d.lo >= 1) {
                if (x.lo >= 0 && x.hi < d.lo) return x;  // already reduced
                if (d.lo == d.hi && floor_div128(x.lo, d.lo) == floor_div128(x.hi, d.lo)) {
                    i128 q = floor_div128(x.lo, d.lo);
                    return {x.lo - q * d.lo, x.hi - q * d.lo};
                }
                return {0, d.hi - 1};
            }
            return {d.lo + 1, 0};  // negative divisor: floor modulo takes its sign
        }
        default: break;
        }
        RF_INTERNAL_ASSERT(false) << "non-integer index expression: " << to_string(e);
        return {0, 0};
    }

    const std::map<std::string, std::vector<int64_t>> &dims_;
    IntEval &ev_;
    std::map<std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>>, int> env_ids_;
    std::set<std::pair<Expr, int>> visited_;
    std::map<std::pair<Expr, int>, Interval> memo_;
};

int64_t eval_extent(IntEval &ev, Expr e, SourceLoc loc, const std::string &what) {
    int64_t v;
    try {
        v = ev.eval(e);
    } catch (const UserError &err) {
        rethrow_at(err, loc);
    }
    if (v < 1)
        throw UserError(loc, what + " is '" + to_string(e) + "' = " + std::to_string(v) + "; extents must be at least 1");
    return v;
}
}  // namespace

int64_t eval_int(Expr e, const SizeBinding &sizes) {
    IntEval ev(sizes);
    return ev.eval(e);
}

SizeBinding bind_sizes(const Program &p, const std::map<std::string, int64_t> &explicit_sizes) {
    std::set<std::string> declared;
    for (const SizeDecl &s : p.sizes) declared.insert(s.name);
    for (const auto &[n, v] : explicit_sizes) {
        if (!declared.count(n)) {
            std::string known;
            for (const SizeDecl &s : p.sizes) known += (known.empty() ? "" : ", ") + s.name;
            throw UserError({}, "unknown size '" + n + "' (the spec declares: " + (known.empty() ? "none" : known) + ")");
        }
    }
    SizeBinding b;
    for (const SizeDecl &s : p.sizes) {
        auto it = explicit_sizes.find(s.name);
        std::optional<int64_t> v = it != explicit_sizes.end() ? std::optional<int64_t>(it->second) : s.default_value;
        if (!v) throw UserError(s.loc, "size '" + s.name + "' has no value; pass --size " + s.name + "=VALUE");
        if (*v < 1 || *v >= (int64_t(1) << 31))
            throw UserError(s.loc, "size '" + s.name + "' = " + std::to_string(*v) + " is out of range [1, 2^31)");
        b[s.name] = *v;
    }
    IntEval ev(b);
    std::map<std::string, std::vector<int64_t>> dims;
    for (const InputDecl &in : p.inputs) {
        auto &d = dims[in.name];
        for (size_t i = 0; i < in.dims.size(); i++)
            d.push_back(eval_extent(ev, in.dims[i], in.loc, "dimension " + std::to_string(i + 1) + " of '" + in.name + "'"));
    }
    for (const TensorDef &def : p.defs) {
        auto &d = dims[def.name];
        for (size_t i = 0; i < def.extents.size(); i++)
            d.push_back(eval_extent(ev, def.extents[i], def.loc,
                                    "the extent of '" + def.vars[i]->name + "' in '" + def.name + "'"));
        if (def.is_topk()) dims[def.index_name] = d;
        try {
            visit(def.body, [&](Expr n) {
                if (n->kind != Kind::Reduce) return;
                for (size_t i = 0; i < n->num_axes(); i++)
                    eval_extent(ev, n->extents[i], def.loc, "the extent of reduction axis '" + n->axis(i)->name + "'");
            });
        } catch (const UserError &err) {
            rethrow_at(err, def.loc);
        }
        if (def.is_topk()) {
            int64_t k = d.back(), n = ev.eval(def.body->extents[0]);
            if (k > n)
                throw UserError(def.loc, "top-k K = " + std::to_string(k) + " is larger than the extent " +
                                             std::to_string(n) + " of axis '" + def.body->axis(0)->name + "'");
        }
    }
    // Bounds last: every tensor's dimensions are known by now (a load names an earlier tensor).
    BoundsChecker bounds(dims, ev);
    for (const TensorDef &def : p.defs) {
        try {
            bounds.check_def(def);
        } catch (const UserError &err) {
            rethrow_at(err, def.loc);
        }
    }
    return b;
}

// ---------------------------------------------------------------------------------------------
// Dump

std::string to_string(const Program &p) {
    std::ostringstream os;
    for (const SizeDecl &s : p.sizes) {
        os << "size " << s.name;
        if (s.default_value) os << " = " << *s.default_value;
        os << "\n";
    }
    for (const InputDecl &in : p.inputs) {
        os << "input " << in.name << "[";
        for (size_t i = 0; i < in.dims.size(); i++) os << (i ? ", " : "") << to_string(in.dims[i]);
        os << "] : " << dtype_name(in.dtype) << "\n";
    }
    auto lhs = [](const std::string &name, const TensorDef &d) {
        std::string s = name + "[";
        for (size_t i = 0; i < d.vars.size(); i++)
            s += (i ? ", " : "") + d.vars[i]->name + ":" + to_string(d.extents[i]);
        return s + "]";
    };
    for (const TensorDef &d : p.defs) {
        os << lhs(d.name, d);
        if (d.is_topk()) {
            // Printed by hand: the Reduce node's k is 0 when K is symbolic; the k axis extent is K.
            Expr r = d.body;
            os << ", " << lhs(d.index_name, d) << " = topk(" << r->axis(0)->name << ", " << to_string(d.extents.back())
               << ": " << to_string(r->body()) << ")\n";
        } else {
            os << " = " << to_string(d.body) << "\n";
        }
    }
    for (const OutputDecl &o : p.outputs) os << "output " << o.name << " : " << dtype_name(o.dtype) << "\n";
    return os.str();
}

}  // namespace rf
