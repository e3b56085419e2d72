/** \file Expand.cpp
 * Polynomial expansion (Expand.h): distribution of products over sums and of integer powers of sums.
 */
#include "sym/Expand.h"

#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"
#include "sym/SymCache.h"

namespace rf {

namespace sym {

namespace {

constexpr size_t kMaxTerms = 4096;
constexpr double kMaxPower = 32;

std::vector<Expr> terms_of(Expr e) { return e->kind == Kind::Add ? e->args : std::vector<Expr>{e}; }

/** (sum_i a_i) * (sum_j b_j) = sum_ij a_i * b_j, term by term; a product that comes out as a sum
 *  (c * (x + y)) contributes its terms. */
std::vector<Expr> multiply_out(const std::vector<Expr> &a, const std::vector<Expr> &b) {
    std::vector<Expr> out;
    out.reserve(a.size() * b.size());
    for (Expr x : a)
        for (Expr y : b) {
            Expr p = canon_mul({x, y});
            if (p->kind == Kind::Add) out.insert(out.end(), p->args.begin(), p->args.end());
            else out.push_back(p);
        }
    return out;
}

Expr expand_rec(Expr e);

/** The expanded factors of a product, multiplied out while the term count stays bounded. */
Expr expand_mul(Expr e) {
    std::vector<Expr> acc{real(1)};
    std::vector<Expr> kept;  // factors left unexpanded (too many terms)
    for (Expr f : e->args) {
        Expr g = expand_rec(f);
        std::vector<Expr> t = terms_of(g);
        if (acc.size() * t.size() > kMaxTerms) {
            kept.push_back(g);
            continue;
        }
        acc = multiply_out(acc, t);
    }
    Expr sum = canon_add(acc);
    if (kept.empty()) return sum;
    kept.push_back(sum);
    return canon_mul(kept);
}

/** x^n for a sum x and an integer 2 <= n <= 32, multiplied out. */
Expr expand_pow(Expr e) {
    Expr b = expand_rec(e->args[0]);
    Expr x = e->args[1];
    if (b->kind == Kind::Add && x->kind == Kind::Const && is_int_value(x->value) && x->value >= 2 &&
        x->value <= kMaxPower) {
        std::vector<Expr> t = terms_of(b), acc{real(1)};
        int n = static_cast<int>(x->value);
        for (int i = 0; i < n; i++) {
            if (acc.size() * t.size() > kMaxTerms) return canon_pow(b, x);
            acc = multiply_out(acc, t);
            acc = terms_of(canon_add(acc));  // collect like terms as we go
        }
        return canon_add(acc);
    }
    return canon_pow(b, expand_rec(x));
}

Expr expand_rec(Expr e) {
    auto &memo = sym_cache().expanded;
    if (auto it = memo.find(e); it != memo.end()) return it->second;
    Expr r;
    switch (e->kind) {
    case Kind::Const:
    case Kind::Var: r = e; break;
    case Kind::Add: {
        std::vector<Expr> t;
        for (Expr a : e->args) t.push_back(expand_rec(a));
        r = canon_add(t);
        break;
    }
    case Kind::Mul: r = expand_mul(e); break;
    case Kind::Pow: r = expand_pow(e); break;
    case Kind::Reduce: {
        std::vector<Expr> axes(e->args.begin() + 1, e->args.end());
        Expr body = expand_rec(e->body());
        r = body == e->body() ? e : simplify_rec(make_reduce(e->rop, axes, e->extents, body, e->k));
        break;
    }
    default: {
        std::vector<Expr> args;
        for (Expr a : e->args) args.push_back(expand_rec(a));
        r = simplify_rec(with_args(e, args));
        break;
    }
    }
    memo[e] = r;
    return r;
}

}  // namespace

}  // namespace sym

Expr expand(Expr e) {
    sym::SymEntry entry;
    Expr r = sym::simplify_rec(e);
    // A merge inside a product can bring back a sum as a factor (sqrt(s) * sqrt(s) = s); a few
    // more passes distribute it.
    for (int i = 0; i < 4; i++) {
        Expr next = sym::expand_rec(r);
        if (next == r) break;
        r = next;
    }
    return r;
}

}  // namespace rf
