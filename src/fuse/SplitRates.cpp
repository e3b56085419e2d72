/** \file SplitRates.cpp
 * The rate split (docs/design.md §3), a rewrite of the checked Program before planning.
 *
 * The exponential-polynomial form fuses a sum Σ_j e^{λ·δ}·Q(x_j, δ) with ONE constant rate vector
 * λ: the functions e^{λ·δ}·δ^α span a space closed under shifts of δ, so a state of |α| moments
 * moves from the running δ_old to δ by a triangular map times α = e^{λ·(δ − δ_old)}. A body with
 * several rates, F = Σ_k e^{λ_k·δ}·Q_k(x, δ) (λ_k distinct), lives in the direct sum of the
 * single-rate spaces; a shift of δ maps each block e^{λ_k·δ}·(polynomials) to itself, so the state
 * of F is the concatenation of one exponential-polynomial state per rate, each with its own
 * α_k = e^{λ_k·(δ − δ_old)}. Rather than a new form with block states, the sum is rewritten with
 * linearity, Σ_j (a_j + b_j) = Σ_j a_j + Σ_j b_j:
 *     t = Σ_j F(x_j, δ)   →   t.rate0 = Σ_j e^{λ_0·δ} Q_0,  t.rate1 = Σ_j e^{λ_1·δ} Q_1, ...,
 *     t = t.rate0 + t.rate1 + ...
 * and the planner sees ordinary single-rate members (the blocks of the state are their states).
 *
 * The terms are the additive terms of the body: sums and differences are split, a select over a
 * sum is distributed, select(c, a + b, e) = select(c, a, 0) + select(c, b, 0) + select(c, 0, e)
 * (masks kept), a product distributes over a factor that mixes rates, and anything else mixing
 * rates is expanded (sym/Expand.h). The rate of a term is the vector of derivatives of its
 * exponents with respect to the loads of earlier results (reduction definitions, at indices that
 * do not move along the sum's own axes: the d of the member analysis); a term whose exponentials
 * all have the same constant rate vector is single-rate (no exponential: rate 0).
 * Precondition for the split: every term's exponents are linear with constant rates in those
 * loads. A term with a non-constant rate (exp(X·m)) or whose rates cannot be separated leaves the
 * sum whole; the member analysis then refuses it with the reason of the form tried.
 */
#include "fuse/SplitRates.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "sym/Derivative.h"
#include "sym/Expand.h"
#include "sym/Simplify.h"

namespace rf {

namespace {

/** A rate vector: derivative of the exponent per load atom, zeros left out (so equal maps are
 *  equal rates). */
using Rate = std::map<Expr, double, ExprLess>;

/** What the split of one sum works with: the names of reduction results and the sum's own axes. */
struct SumContext {
    std::set<std::string> results;
    std::vector<Expr> axes;
};

bool mentions_axis(const SumContext &c, Expr e) {
    return any_of(e, [&](Expr n) {
        return n->kind == Kind::Var && std::find(c.axes.begin(), c.axes.end(), n) != c.axes.end();
    });
}

/** A load of an earlier reduction's result that is constant along the sum's axes (a d atom). */
bool is_result_load(const SumContext &c, Expr n) {
    if (n->kind != Kind::Load || n->stype != SType::Real || !c.results.count(n->name)) return false;
    for (Expr i : n->args)
        if (mentions_axis(c, i)) return false;
    return true;
}

enum class RateKind { Single, Mixed, NonConstant };
/** The exponential rate of an expression: Single (e^{λ·δ} times something free of exponentials of
 *  δ), Mixed (a sum of such with different λ, separable into terms), or NonConstant (anything
 *  else: exp(X·m), log(1 + exp(X - m)), an exponential inside a mask). */
struct TermRate {
    RateKind kind = RateKind::Single;
    Rate rate;
};

TermRate single(Rate r = {}) { return {RateKind::Single, std::move(r)}; }

Rate scaled(const Rate &r, double k) {
    Rate out;
    if (k != 0)
        for (const auto &[a, v] : r) out[a] = v * k;
    return out;
}

Rate added(Rate a, const Rate &b) {
    for (const auto &[atom, v] : b)
        if ((a[atom] += v) == 0) a.erase(atom);
    return a;
}

class RateOf {
public:
    explicit RateOf(const SumContext &c) : c_(c) {}

    TermRate operator()(Expr e) {
        auto it = memo_.find(e);
        if (it != memo_.end()) return it->second;
        TermRate r = compute(e);
        memo_[e] = r;
        return r;
    }

private:
    const SumContext &c_;
    std::map<Expr, TermRate, ExprLess> memo_;

    bool free_of_growth(Expr e) {
        TermRate r = (*this)(e);
        return r.kind == RateKind::Single && r.rate.empty();
    }

    /** e^{u}: the rate is ∂u/∂(each result load), which must be constant; u itself must be free of
     *  exponentials of the results (e^{e^m} is no exponential-polynomial). */
    TermRate exp_rate(Expr u) {
        if (!free_of_growth(u)) return {RateKind::NonConstant, {}};
        std::set<Expr> atoms;
        visit(u, [&](Expr n) {
            if (is_result_load(c_, n)) atoms.insert(n);
        });
        Rate r;
        for (Expr a : atoms) {
            Expr d = simplify(derivative(u, a));
            if (!d->is_const() || !std::isfinite(d->value)) return {RateKind::NonConstant, {}};
            if (d->value != 0) r[a] = d->value;
        }
        return single(r);
    }

    /** Sums and select branches: one rate when all agree (a 0 is in every block), else Mixed. */
    TermRate combine(const std::vector<Expr> &parts) {
        TermRate out;
        bool first = true;
        for (Expr p : parts) {
            if (p->is_const(0)) continue;
            TermRate r = (*this)(p);
            if (r.kind == RateKind::NonConstant) return r;
            if (r.kind == RateKind::Mixed) out.kind = RateKind::Mixed;
            else if (first) out.rate = r.rate;
            else if (r.rate != out.rate) out.kind = RateKind::Mixed;
            first = false;
        }
        if (out.kind == RateKind::Mixed) out.rate.clear();
        return out;
    }

    TermRate compute(Expr e) {
        switch (e->kind) {
        case Kind::Const: case Kind::Var: case Kind::Load: return single();
        case Kind::Add: return combine(e->args);
        case Kind::Sub: return combine(e->args);
        case Kind::Neg: return (*this)(e->args[0]);
        case Kind::Select:
            if (!free_of_growth(e->args[0])) return {RateKind::NonConstant, {}};
            return combine({e->args[1], e->args[2]});
        case Kind::Mul: {
            // e^{λ·δ}·e^{μ·δ} = e^{(λ+μ)·δ}: rates add; a product with a mixed factor is mixed.
            TermRate out;
            for (Expr a : e->args) {
                TermRate r = (*this)(a);
                if (r.kind == RateKind::NonConstant) return r;
                if (r.kind == RateKind::Mixed) out.kind = RateKind::Mixed;
                else out.rate = added(out.rate, r.rate);
            }
            if (out.kind == RateKind::Mixed) out.rate.clear();
            return out;
        }
        case Kind::Div: {
            TermRate a = (*this)(e->args[0]), b = (*this)(e->args[1]);
            if (b.kind != RateKind::Single) return {RateKind::NonConstant, {}};
            if (a.kind != RateKind::Single) return a;
            return single(added(a.rate, scaled(b.rate, -1)));
        }
        case Kind::Pow: {
            TermRate a = (*this)(e->args[0]);
            if (!free_of_growth(e->args[1])) return {RateKind::NonConstant, {}};
            if (a.kind == RateKind::Single && a.rate.empty()) return a;
            if (!e->args[1]->is_const()) return {RateKind::NonConstant, {}};
            if (a.kind != RateKind::Single) return a;  // (a + b)^2: mixed, expanded by the split
            return single(scaled(a.rate, e->args[1]->value));
        }
        case Kind::Call:
            if (e->func == Func::exp) return exp_rate(e->args[0]);
            [[fallthrough]];
        default:
            // Any other operation of something that grows exponentially is opaque.
            for (Expr a : e->args)
                if (!free_of_growth(a)) return {RateKind::NonConstant, {}};
            return single();
        }
    }
};

/** The rate of a term, read on its simplified form (log(exp(X - m) / s) is X - m - log(s)). */
TermRate term_rate(const SumContext &c, Expr e) { return RateOf(c)(simplify(e)); }

constexpr size_t kMaxTerms = 256;  // a product of sums distributed beyond this stays whole
constexpr int kMaxDepth = 64;

bool flatten(const SumContext &c, Expr e, std::vector<Expr> &out, int depth);

/** Terms of each factor multiplied out (the cartesian product), at most kMaxTerms. */
bool flatten_product(const SumContext &c, Expr e, std::vector<Expr> &out, int depth) {
    std::vector<std::vector<Expr>> products{{}};
    for (Expr f : e->args) {
        std::vector<Expr> terms;
        if (!flatten(c, f, terms, depth + 1)) return false;
        if (products.size() * terms.size() > kMaxTerms) return false;
        std::vector<std::vector<Expr>> next;
        for (const auto &p : products)
            for (Expr t : terms) {
                next.push_back(p);
                next.back().push_back(t);
            }
        products = std::move(next);
    }
    if (products.size() < 2) return false;  // no progress: the factors themselves mix rates
    for (const auto &p : products) out.push_back(make_mul(p));
    return true;
}

/** Appends the additive terms of e, each single-rate. False when e cannot be separated. */
bool flatten(const SumContext &c, Expr e, std::vector<Expr> &out, int depth) {
    if (depth > kMaxDepth || out.size() > kMaxTerms) return false;
    TermRate r = term_rate(c, e);
    if (r.kind == RateKind::Single) {
        out.push_back(e);
        return true;
    }
    if (r.kind == RateKind::NonConstant) return false;
    std::vector<Expr> sub;
    switch (e->kind) {
    case Kind::Add:
        for (Expr a : e->args)
            if (!flatten(c, a, out, depth + 1)) return false;
        return true;
    case Kind::Sub:
        if (!flatten(c, e->args[0], out, depth + 1) || !flatten(c, e->args[1], sub, depth + 1)) return false;
        for (Expr t : sub) out.push_back(make_neg(t));
        return true;
    case Kind::Neg:
        if (!flatten(c, e->args[0], sub, depth + 1)) return false;
        for (Expr t : sub) out.push_back(make_neg(t));
        return true;
    case Kind::Select: {
        // select(m, a, b) = select(m, a, 0) + select(m, 0, b); each branch's terms keep the mask.
        Expr zero = make_const(0);
        for (int branch : {1, 2}) {
            if (e->args[branch]->is_const(0)) continue;
            sub.clear();
            if (!flatten(c, e->args[branch], sub, depth + 1)) return false;
            for (Expr t : sub)
                out.push_back(branch == 1 ? make_select(e->args[0], t, zero) : make_select(e->args[0], zero, t));
        }
        return true;
    }
    case Kind::Mul: return flatten_product(c, e, out, depth);
    case Kind::Div: {
        // (a + b) / q = a/q + b/q for a single-rate divisor q.
        if (term_rate(c, e->args[1]).kind != RateKind::Single) return false;
        if (!flatten(c, e->args[0], sub, depth + 1)) return false;
        for (Expr t : sub) out.push_back(make_div(t, e->args[1]));
        return true;
    }
    default: {
        // Powers of sums and the like: multiplied out, then split if that gave terms.
        Expr x = expand(e);
        if (x == e || x->kind == Kind::Pow || x->kind == Kind::Call) return false;
        return flatten(c, x, out, depth + 1);
    }
    }
}

std::string number(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

std::string rate_text(const Rate &r) {
    if (r.empty()) return "0";
    std::string s;
    for (const auto &[atom, v] : r) s += (s.empty() ? "" : ", ") + number(v) + " on " + to_string(atom);
    return s;
}

/** The single-rate groups of a sum's body, in order of first appearance; empty when the sum stays
 *  whole (one group, or a term that cannot be separated). */
std::vector<std::pair<Rate, std::vector<Expr>>> rate_groups(const SumContext &c, Expr body) {
    std::vector<Expr> terms;
    if (!flatten(c, body, terms, 0)) return {};
    std::vector<std::pair<Rate, std::vector<Expr>>> groups;
    for (Expr t : terms) {
        TermRate r = term_rate(c, t);
        if (r.kind != RateKind::Single) return {};
        auto it = std::find_if(groups.begin(), groups.end(), [&](const auto &g) { return g.first == r.rate; });
        if (it == groups.end()) groups.push_back({r.rate, {t}});
        else it->second.push_back(t);
    }
    if (groups.size() < 2) return {};
    return groups;
}

/** Loads of split sums replaced by the sums of their parts' loads (same indices). */
Expr replace_split_loads(Expr e, const std::map<std::string, std::vector<std::string>> &parts) {
    if (parts.empty()) return e;
    return substitute(e, [&](Expr n) -> Expr {
        if (n->kind != Kind::Load) return nullptr;
        auto it = parts.find(n->name);
        if (it == parts.end()) return nullptr;
        std::vector<Expr> loads;
        for (const std::string &name : it->second) loads.push_back(make_load(name, n->args, n->dtype, n->stype));
        return make_add(loads);
    });
}

bool is_output(const Program &p, const std::string &name) {
    for (const OutputDecl &o : p.outputs)
        if (o.name == name) return true;
    return false;
}

}  // namespace

RateSplitResult split_sums_by_rate(const Program &p) {
    RateSplitResult r;
    r.program = p;
    SumContext base;
    for (const TensorDef &d : p.defs) {
        if (!d.is_reduction()) continue;
        base.results.insert(d.name);
        if (d.is_topk()) base.results.insert(d.index_name);
    }
    std::map<std::string, std::vector<std::string>> parts;
    std::vector<TensorDef> defs;
    for (TensorDef d : p.defs) {
        d.body = replace_split_loads(d.body, parts);
        std::vector<std::pair<Rate, std::vector<Expr>>> groups;
        if (d.is_reduction() && !d.is_topk() && d.body->rop == ReduceOp::Sum) {
            SumContext c = base;
            c.results.erase(d.name);
            c.axes.assign(d.body->args.begin() + 1, d.body->args.end());
            groups = rate_groups(c, d.body->body());
        }
        if (groups.empty()) {
            defs.push_back(std::move(d));
            continue;
        }
        RateSplit s{d.name, {}, {}};
        std::vector<Expr> loads;
        for (size_t k = 0; k < groups.size(); k++) {
            TensorDef part = d;
            part.name = d.name + ".rate" + std::to_string(k);
            RF_INTERNAL_ASSERT(!p.find_def(part.name)) << "rate split: '" << part.name << "' is already defined";
            part.body = make_reduce(ReduceOp::Sum, std::vector<Expr>(d.body->args.begin() + 1, d.body->args.end()), d.body->extents, make_add(groups[k].second));
            s.parts.push_back(part.name);
            s.rates.push_back(rate_text(groups[k].first));
            loads.push_back(make_load(part.name, d.vars, DType::f64, SType::Real));
            defs.push_back(std::move(part));
        }
        parts[d.name] = s.parts;
        if (is_output(p, d.name)) {  // the output stays, as the element-wise sum of its parts
            d.body = make_add(loads);
            defs.push_back(std::move(d));
        }
        r.splits.push_back(std::move(s));
    }
    if (!r.splits.empty()) r.program.defs = std::move(defs);
    return r;
}

std::string to_string(const RateSplit &s) {
    std::string out = s.name + " =";
    for (size_t k = 0; k < s.parts.size(); k++) out += (k ? " + " : " ") + s.parts[k];
    return out;
}

}  // namespace rf
