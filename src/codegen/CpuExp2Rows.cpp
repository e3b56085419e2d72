/** \file CpuExp2Rows.cpp
 * The exp2 calls the CPU printer computes a row at a time (see CpuExp2Rows.h).
 */
#include "codegen/CpuExp2Rows.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "tile/StmtVisitor.h"

namespace rf::cpu_exp2 {

using namespace tile;

bool offset_of_loop_var(Expr i, Expr var) {
    if (i == var) return true;
    if (i->kind == Kind::Sub) return offset_of_loop_var(i->args[0], var) && !mentions(i->args[1], var->name);
    if (i->kind != Kind::Add) return false;
    int with_var = 0;
    for (Expr a : i->args) {
        if (!mentions(a, var->name)) continue;
        if (!offset_of_loop_var(a, var)) return false;
        with_var++;
    }
    return with_var == 1;
}

std::vector<Expr> stageable_exp2_args(const StmtP &loop) {
    std::vector<Expr> args;
    std::set<std::string> written;
    // Arrays the loop writes only element-wise at one index i(j) injective in the loop variable j
    // (attention's exp tile P overwriting its score tile S in place): an exp2 argument may read them at
    // that same i(j). Staged, a strip's arguments are read before any of the strip's writes; with i
    // injective, iteration j reads the element only iteration j writes, so it sees what it saw inline.
    std::map<std::string, Expr> elementwise;
    std::set<std::string> not_elementwise;
    bool plain = true;
    for (const StmtP &c : loop->body)
        for_each_stmt(c, [&](const StmtP &s) {
            switch (s->kind) {
            case StmtKind::Block: case StmtKind::Comment: break;
            case StmtKind::Assign: case StmtKind::Accum: {
                const std::string &w = s->target->name;
                written.insert(w);
                Expr t = s->target;
                bool at_one_index = s->kind == StmtKind::Assign && t->kind == Kind::Load && t->args.size() == 1 &&
                                    offset_of_loop_var(t->args[0], loop->var) && (!elementwise.count(w) || elementwise[w] == t->args[0]);
                if (at_one_index) elementwise[w] = t->args[0];
                else not_elementwise.insert(w);
                break;
            }
            default: plain = false;
            }
        });
    if (!plain) return {};
    for (const std::string &w : not_elementwise) elementwise.erase(w);
    auto reads_only_own_element = [&](Expr a, const std::string &w) {
        auto it = elementwise.find(w);
        if (it == elementwise.end()) return false;
        return !any_of(a, [&](Expr n) {
            return (n->kind == Kind::Var && n->name == w) || (n->kind == Kind::Load && n->name == w && (n->args.size() != 1 || n->args[0] != it->second));
        });
    };
    std::function<void(Expr)> find = [&](Expr e) {
        if (e->kind == Kind::Reduce) return;  // a nested reduction binds its own axes
        if (e->kind == Kind::Call && e->func == Func::exp2 && e->stype == SType::Real) {
            Expr a = e->args[0];
            bool reads_written = false;
            for (const std::string &w : written) reads_written = reads_written || (mentions(a, w) && !reads_only_own_element(a, w));
            bool nested = any_of(a, [](Expr n) { return n->kind == Kind::Reduce; });
            if (!reads_written && !nested && args.size() < 4 && std::find(args.begin(), args.end(), a) == args.end()) args.push_back(a);
            return;
        }
        for (Expr a : e->args) find(a);
    };
    for (const StmtP &c : loop->body)
        for_each_stmt(c, [&](const StmtP &s) {
            if (s->value) find(s->value);
        });
    return args;
}

namespace {

/** The loop-variant factor of a product or the loop-variant term of a sum: the one argument that
 *  mentions var (null when none or several do); `rest` gets the others. */
Expr the_variant_one(Expr e, Expr var, std::vector<Expr> &rest) {
    Expr variant = nullptr;
    for (Expr a : e->args) {
        if (!mentions(a, var->name)) {
            rest.push_back(a);
            continue;
        }
        if (variant) return nullptr;
        variant = a;
    }
    return variant;
}

/** S[k(j)] read along a row: the last index j + (terms without j), the others free of j (a float tile
 *  array, one index, when is_row accepts only those). */
bool row_element(Expr e, Expr var, const std::function<bool(const std::string &)> &is_row) {
    if (e->kind != Kind::Load || e->args.empty() || !is_row(e->name)) return false;
    for (size_t i = 0; i + 1 < e->args.size(); ++i)
        if (mentions(e->args[i], var->name)) return false;
    return offset_of_loop_var(e->args.back(), var);
}

/** x · a with x a contiguous float tile load (or x alone): fills source and scale. */
bool match_scaled_load(Expr e, Expr var, const std::function<bool(const std::string &)> &is_float_tile, Exp2RowInPlace &out) {
    auto contiguous_tile_load = [&](Expr x) { return row_element(x, var, is_float_tile); };
    if (contiguous_tile_load(e)) {
        out.source = e;
        return true;
    }
    if (e->kind != Kind::Mul) return false;
    std::vector<Expr> factors;
    Expr x = the_variant_one(e, var, factors);
    if (!x || !contiguous_tile_load(x) || factors.empty()) return false;
    out.source = x;
    out.scale = make_mul(factors);
    return true;
}

}  // namespace

std::optional<Exp2RowInPlace> exp2_row_in_place(const StmtP &loop, const std::function<bool(const std::string &)> &is_float_tile) {
    if (loop->body.size() != 1) return std::nullopt;
    const StmtP &s = loop->body[0];
    if (s->kind != StmtKind::Assign) return std::nullopt;
    Expr t = s->target, v = s->value;
    if (t->kind != Kind::Load || t->args.size() != 1 || !is_float_tile(t->name) || !offset_of_loop_var(t->args[0], loop->var))
        return std::nullopt;
    if (v->kind != Kind::Call || v->func != Func::exp2 || v->stype != SType::Real) return std::nullopt;
    std::vector<Expr> staged = stageable_exp2_args(loop);
    if (staged.size() != 1 || staged[0] != v->args[0]) return std::nullopt;
    Exp2RowInPlace out{t, v->args[0], nullptr, nullptr, nullptr};
    // The invariant parts may not read T: the fused pass writes T's row while it reads them.
    auto invariant = [&](const std::vector<Expr> &es) {
        return std::none_of(es.begin(), es.end(), [&](Expr e) { return mentions(e, t->name) || any_of(e, [](Expr n) { return n->kind == Kind::Reduce; }); });
    };
    Expr arg = out.arg;
    // arg = (x · a) + b: the one loop-variant term of a sum (or arg itself) is the scaled load.
    Exp2RowInPlace affine = out;
    std::vector<Expr> terms;
    Expr scaled = arg->kind == Kind::Add ? the_variant_one(arg, loop->var, terms) : arg;
    if (scaled && match_scaled_load(scaled, loop->var, is_float_tile, affine) && invariant(terms) &&
        (!affine.scale || invariant({affine.scale}))) {
        if (!terms.empty()) affine.offset = make_add(terms);
        return affine;
    }
    return out;
}

namespace {

/** the_variant_one of a binary node, its other argument in `other`: null for any other arity. */
Expr variant_of_two(Expr e, Expr var, Expr &other) {
    std::vector<Expr> rest;
    Expr variant = e->args.size() == 2 ? the_variant_one(e, var, rest) : nullptr;
    if (variant) other = rest[0];
    return variant;
}

}  // namespace

std::optional<Exp2RowSum> exp2_row_sum(const StmtP &loop, const std::function<bool(const std::string &)> &is_float_tile,
                                       const std::function<bool(const std::string &)> &is_row) {
    Expr var = loop->var, call = nullptr;
    Exp2RowSum out{};
    // The statements, each with exp2(arg) as the whole value or a term of it.
    auto same_call = [&](Expr c) {
        if (c->kind != Kind::Call || c->func != Func::exp2 || c->stype != SType::Real) return false;
        if (!call) call = c;
        return c == call;
    };
    for (const StmtP &s : loop->body) {
        if (s->kind == StmtKind::Comment) continue;
        if (s->kind == StmtKind::Accum && !out.sum_target && s->op == ReduceOp::Sum && s->target->kind == Kind::Var) {
            Expr d = nullptr;
            Expr term = s->value->kind == Kind::Add ? variant_of_two(s->value, var, d) : s->value;
            if (!term || !same_call(term)) return std::nullopt;
            out.sum_target = s->target;
            out.sum_offset = d;
        } else if (s->kind == StmtKind::Assign && !out.store_target) {
            Expr t = s->target;
            if (t->kind != Kind::Load || t->args.size() != 1 || !is_float_tile(t->name) || !offset_of_loop_var(t->args[0], var) ||
                !same_call(s->value))
                return std::nullopt;
            out.store_target = t;
        } else {
            return std::nullopt;
        }
    }
    if (!call) return std::nullopt;
    std::vector<Expr> staged = stageable_exp2_args(loop);
    Expr arg = call->args[0];
    if (staged.size() != 1 || staged[0] != arg) return std::nullopt;
    // arg = (S + c) · a, (S + c), S · a or S.
    Expr x = arg;
    if (x->kind == Kind::Mul && !(x = variant_of_two(arg, var, out.scale))) return std::nullopt;
    if (x->kind == Kind::Add && !(x = variant_of_two(x, var, out.shift))) return std::nullopt;
    if (!row_element(x, var, is_row)) return std::nullopt;
    out.source = x;
    // Evaluated once, before the row: the invariant parts may read neither the sum nor the row written
    // (nor hold a reduction of their own).
    for (Expr e : {out.shift, out.scale, out.sum_offset}) {
        if (!e) continue;
        if (any_of(e, [](Expr n) { return n->kind == Kind::Reduce; })) return std::nullopt;
        if (out.sum_target && mentions(e, out.sum_target->name)) return std::nullopt;
        if (out.store_target && mentions(e, out.store_target->name)) return std::nullopt;
    }
    return out;
}

namespace {

/** The loop's one statement besides comments, if it has exactly one and it is an Accum; else null. */
StmtP only_accum(const StmtP &loop) {
    StmtP only;
    for (const StmtP &s : loop->body) {
        if (s->kind == StmtKind::Comment) continue;
        if (only) return nullptr;
        only = s;
    }
    return only && only->kind == StmtKind::Accum ? only : nullptr;
}

}  // namespace

std::optional<RowExtreme> row_extreme(const StmtP &loop, const std::function<bool(const std::string &)> &is_row) {
    StmtP only = only_accum(loop);
    if (!only || (only->op != ReduceOp::Max && only->op != ReduceOp::Min)) return std::nullopt;
    RowExtreme out{only->value, nullptr, only->target, only->op == ReduceOp::Max};
    if (out.source->kind == Kind::Mul && !(out.source = variant_of_two(only->value, loop->var, out.scale))) return std::nullopt;
    if (only->target->kind != Kind::Var || !row_element(out.source, loop->var, is_row) || mentions(only->value, only->target->name))
        return std::nullopt;
    if (out.scale && any_of(out.scale, [](Expr n) { return n->kind == Kind::Reduce; })) return std::nullopt;
    return out;
}

std::optional<RowSum> row_sum(const StmtP &loop, const std::function<bool(const std::string &)> &is_row) {
    StmtP only = only_accum(loop);
    if (!only || only->op != ReduceOp::Sum) return std::nullopt;
    if (only->target->kind != Kind::Var || !row_element(only->value, loop->var, is_row) || mentions(only->value, only->target->name))
        return std::nullopt;
    return RowSum{only->value, only->target};
}

bool unit_stride_loads(const StmtP &loop) {
    bool unit = true;
    const Expr j = loop->var;
    auto check = [&](Expr e) {
        if (!e) return;
        visit(e, [&](Expr n) {
            if (n->kind != Kind::Load || n->args.empty() || !mentions(n, j->name)) return;
            for (size_t i = 0; i + 1 < n->args.size(); i++) unit = unit && !mentions(n->args[i], j->name);
            unit = unit && offset_of_loop_var(n->args.back(), j);
        });
    };
    for (const StmtP &c : loop->body)
        for_each_stmt(c, [&](const StmtP &s) {
            for (Expr e : {s->value, s->index, s->cond, s->target}) check(e);
        });
    return unit;
}

}  // namespace rf::cpu_exp2
