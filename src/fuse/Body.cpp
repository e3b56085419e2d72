/** \file Body.cpp
 * Puts the body F of a reduction into the form the algebra works on: nested reductions that read
 * earlier members are unrolled, F is simplified, and every maximal sub-expression that depends
 * only on earlier members becomes a symbol δ_i, so that F = F(x, δ).
 */
#include <cmath>
#include <functional>
#include <unordered_map>

#include "fuse/Forms.h"
#include "ir/Eval.h"
#include "sym/Simplify.h"
#include "support/Error.h"

namespace rf::fuse_detail {

bool depends_on_x(const Body &b, Expr e) {
    return any_of(e, [&](Expr n) { return n->kind == Kind::Var && b.axis_vars.count(n); });
}

bool depends_on_d(const Body &b, Expr e) {
    return any_of(e, [&](Expr n) {
        return n->kind == Kind::Var && n->role == VarRole::Symbol && n->name.rfind("δ", 0) == 0;
    });
}

namespace {

bool reads_members(Expr e, const std::set<std::string> &members) {
    return any_of(e, [&](Expr n) { return n->kind == Kind::Load && members.count(n->name); });
}

/** Unrolls nested Sum/Prod/Max/Min reductions over constant axes whose body reads a member:
 *  Σ_{a<3} f(a) = f(0) + f(1) + f(2). Needed so that a vector-valued d (c[s,a]) becomes scalars. */
Expr unroll_member_reductions(Expr e, const std::set<std::string> &members, std::string &reason) {
    return substitute(e, [&](Expr n) -> Expr {
        if (n->kind != Kind::Reduce || !reads_members(n->body(), members)) return nullptr;
        int64_t total = 1;
        for (Expr ext : n->extents) {
            if (!ext->is_const()) {
                reason = "it reads an earlier result inside a reduction over a symbolic axis (" + shown(n) + ")";
                return nullptr;
            }
            total *= static_cast<int64_t>(ext->value);
        }
        if (total < 1 || total > 64 || n->rop == ReduceOp::ArgMax || n->rop == ReduceOp::ArgMin || n->rop == ReduceOp::TopK) {
            reason = "it reads an earlier result inside a nested " + std::string(reduce_name(n->rop)) +
                     " that cannot be unrolled";
            return nullptr;
        }
        Expr body = unroll_member_reductions(n->body(), members, reason);
        std::vector<Expr> terms;
        std::vector<int64_t> pos(n->num_axes(), 0);
        for (int64_t flat = 0; flat < total; flat++) {
            int64_t rem = flat;
            Expr t = body;
            for (size_t i = n->num_axes(); i-- > 0;) {
                int64_t ext = static_cast<int64_t>(n->extents[i]->value);
                t = substitute(t, n->axis(i), make_int(rem % ext));
                rem /= ext;
            }
            terms.push_back(t);
        }
        Expr acc = terms[0];
        for (size_t i = 1; i < terms.size(); i++) {
            switch (n->rop) {
            case ReduceOp::Sum: acc = make_add(acc, terms[i]); break;
            case ReduceOp::Prod: acc = make_mul(acc, terms[i]); break;
            case ReduceOp::Max: acc = make_max(acc, terms[i]); break;
            default: acc = make_min(acc, terms[i]); break;
            }
        }
        return acc;
    });
}

}  // namespace

std::string shown(Expr e) {
    std::string s = to_string(e);
    if (s.size() > 160) s = s.substr(0, 150) + " ...";
    return s;
}



std::optional<Body> make_body(const TensorDef &def, const AnalysisContext &ctx, std::string &reason) {
    Body b;
    Expr red = def.body;
    RF_INTERNAL_ASSERT(red && red->kind == Kind::Reduce) << "member " << def.name << " is not a reduction";
    for (size_t i = 0; i < red->num_axes(); i++) b.axis_vars.insert(red->axis(i));
    b.literal = red->body();

    std::string unroll_reason;
    Expr F = unroll_member_reductions(red->body(), ctx.pass_members, unroll_reason);
    if (!unroll_reason.empty()) {
        reason = unroll_reason;
        return std::nullopt;
    }
    F = simplify(F);

    // Narrow casts whose argument mixes x and d are not exactly separable (docs/design.md §3).
    auto is_member_load = [&](Expr n) { return n->kind == Kind::Load && ctx.pass_members.count(n->name); };
    visit(F, [&](Expr n) {
        if (!is_rounding(n) || b.inexact) return;
        bool x = any_of(n->args[0], [&](Expr a) { return a->kind == Kind::Var && b.axis_vars.count(a); });
        bool d = any_of(n->args[0], is_member_load);
        if (x && d) {
            b.inexact = true;
            b.inexact_cast = to_string(n);
        }
    });

    // Abstract maximal d-only sub-expressions into δ symbols; inside Add/Mul the d-only operands
    // are grouped into one δ so that exp(S - m + c) becomes exp(S + c + δ0) with δ0 = -m.
    std::unordered_map<Expr, bool> dx_memo, dd_memo;
    std::function<bool(Expr)> dx = [&](Expr e) {
        auto it = dx_memo.find(e);
        if (it != dx_memo.end()) return it->second;
        bool r = any_of(e, [&](Expr n) { return n->kind == Kind::Var && b.axis_vars.count(n); });
        return dx_memo[e] = r;
    };
    std::function<bool(Expr)> dd = [&](Expr e) {
        auto it = dd_memo.find(e);
        if (it != dd_memo.end()) return it->second;
        bool r = any_of(e, is_member_load);
        return dd_memo[e] = r;
    };
    // +1 for a load of a running max member of this pass, -1 of a running min, 0 otherwise: the
    // direction its running value moves in as tiles arrive.
    auto direction_of = [&](Expr load) -> int {
        if (load->kind != Kind::Load || !ctx.pass_members.count(load->name) || !ctx.program) return 0;
        const TensorDef *d = ctx.program->find_def(load->name);
        if (!d || !d->is_reduction() || d->is_topk()) return 0;
        return d->body->rop == ReduceOp::Max ? 1 : d->body->rop == ReduceOp::Min ? -1 : 0;
    };
    // Whether an expression reads the running value of a sum or product member of this pass (through
    // plain definitions too): a value that can move either way before it settles (a running mean).
    std::function<bool(Expr, int)> reads_running_sum = [&](Expr e, int depth) -> bool {
        return depth < 8 && ctx.program && any_of(e, [&](Expr n) {
                   if (n->kind != Kind::Load) return false;
                   const TensorDef *d = ctx.program->find_def(n->name);
                   if (!d || !d->body || d->is_topk()) return false;
                   if (!d->is_reduction()) return reads_running_sum(d->body, depth + 1);
                   return ctx.pass_members.count(n->name) && (d->body->rop == ReduceOp::Sum || d->body->rop == ReduceOp::Prod);
               });
    };
    std::map<Expr, Expr> delta_of;
    auto delta_for = [&](Expr d_expr) -> Expr {
        // δ stands for the expression without its numeric coefficient (m, not -m), which reads better.
        auto [coef, rest] = split_coefficient(simplify(d_expr));
        if (rest->is_const()) return simplify(d_expr);
        auto it = delta_of.find(rest);
        Expr sym;
        if (it != delta_of.end()) sym = it->second;
        else {
            sym = make_symbol("δ" + std::to_string(b.delta_syms.size()));
            delta_of[rest] = sym;
            b.delta_syms.push_back(sym);
            b.delta_exprs.push_back(rest);
            b.delta_directions.push_back(direction_of(rest));
            b.delta_running_sums.push_back(reads_running_sum(rest, 0));
        }
        return coef == 1 ? sym : make_mul(make_const(coef), sym);
    };
    // Inside an exponent, the terms c·m with m a running max and c < 0 (or a running min and c > 0)
    // keep a δ each, apart from the other d-only terms: exp(X - m + mu) becomes exp(X + δ0 + δ1)
    // with δ0 = -m and δ1 = mu, so that the forms can keep exp(-m) in the running state (it keeps
    // exp(X - m) <= 1) and defer exp(mu), whose running value may be far above its final one.
    auto stabilizes = [&](Expr term) {
        auto [coef, rest] = split_coefficient(simplify(term));
        return coef * direction_of(rest) < 0;
    };
    std::function<Expr(Expr, bool)> abstract = [&](Expr e, bool in_exp) -> Expr {
        if (!dd(e)) return e;
        if (!dx(e)) return delta_for(e);
        if (e->kind == Kind::Add || e->kind == Kind::Mul) {
            std::vector<Expr> d_only, stable, rest;
            for (Expr a : e->args) {
                if (dd(a) && !dx(a)) (in_exp && e->kind == Kind::Add && stabilizes(a) ? stable : d_only).push_back(a);
                else rest.push_back(abstract(a, in_exp));
            }
            for (Expr a : stable) rest.push_back(delta_for(a));
            if (!d_only.empty()) {
                Expr grouped = e->kind == Kind::Add ? make_add(d_only) : make_mul(d_only);
                rest.push_back(delta_for(grouped));
            }
            return e->kind == Kind::Add ? make_add(rest) : make_mul(rest);
        }
        bool exp = e->kind == Kind::Call && e->func == Func::exp;
        std::vector<Expr> args;
        for (size_t i = 0; i < e->args.size(); i++)
            args.push_back(e->kind == Kind::Reduce && i > 0 ? e->args[i] : abstract(e->args[i], in_exp || exp));
        return with_args(e, std::move(args));
    };
    b.F = simplify(abstract(F, false));

    // Sign facts: members (and any computed tensor) have the interval of their reduction; a δ has
    // the interval of its expression.
    const Program *prog = ctx.program;
    auto memo = std::make_shared<std::map<std::string, Interval>>();
    b.facts.lookup = [prog, memo](Expr n, Interval &out) -> bool {
        if (n->kind != Kind::Load || !prog) return false;
        auto it = memo->find(n->name);
        if (it != memo->end()) {
            out = it->second;
            return true;
        }
        const TensorDef *d = prog->find_def(n->name);
        if (!d || !d->body) return false;
        (*memo)[n->name] = Interval::everything();  // guards recursion
        Interval iv = d->is_topk() ? Interval::everything() : interval_of(d->body, Facts{});
        if (d->is_topk() && n->name == d->index_name) iv = Interval{0, INFINITY};
        (*memo)[n->name] = iv;
        out = iv;
        return true;
    };
    for (size_t i = 0; i < b.delta_syms.size(); i++)
        b.facts.atoms[b.delta_syms[i]] = interval_of(b.delta_exprs[i], b.facts);
    return b;
}

double Valuation::eval(Expr e) const {
    EvalEnv env;
    env.var_value = [&](Expr v) {
        auto it = values.find(v);
        RF_INTERNAL_ASSERT(it != values.end()) << "no value for " << v->name;
        return it->second;
    };
    env.load_value = [&](Expr l, const int64_t *) {
        auto it = values.find(l);
        RF_INTERNAL_ASSERT(it != values.end()) << "no value for " << to_string(l);
        return it->second;
    };
    return Evaluator(env).eval(e);
}

std::vector<Expr> collect_atoms(const std::vector<Expr> &es) {
    std::set<Expr> seen;
    std::vector<Expr> out;
    std::function<void(Expr, const std::set<Expr> &)> go = [&](Expr e, const std::set<Expr> &bound) {
        if (e->kind == Kind::Var) {
            if (!bound.count(e) && seen.insert(e).second) out.push_back(e);
            return;
        }
        if (e->kind == Kind::Load) {
            bool uses_bound = any_of(e, [&](Expr n) { return n->kind == Kind::Var && bound.count(n); });
            if (!uses_bound && seen.insert(e).second) out.push_back(e);
            for (Expr a : e->args) go(a, bound);
            return;
        }
        if (e->kind == Kind::Reduce) {
            std::set<Expr> inner = bound;
            for (size_t i = 0; i < e->num_axes(); i++) inner.insert(e->axis(i));
            go(e->body(), inner);
            for (Expr x : e->extents) go(x, bound);
            return;
        }
        for (Expr a : e->args) go(a, bound);
    };
    for (Expr e : es)
        if (e) go(e, {});
    return out;
}

}  // namespace rf::fuse_detail

namespace rf {

bool is_rounding(Expr n) {
    if (n->kind == Kind::Cast) return n->dtype != DType::f64 && n->dtype != DType::f32;
    return n->kind == Kind::Call && (n->func == Func::round || n->func == Func::floor || n->func == Func::ceil);
}

Expr strip_rounding(Expr e) {
    std::function<Expr(Expr)> go = [&](Expr n) -> Expr {
        if (n->kind == Kind::Cast || is_rounding(n)) return substitute(n->args[0], go);
        return nullptr;
    };
    return substitute(e, go);
}

}  // namespace rf
