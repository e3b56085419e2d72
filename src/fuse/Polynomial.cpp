/** \file Polynomial.cpp
 * The polynomial form of docs/design.md §3, the shift form: a sum member whose body is a
 * polynomial of degree p in the δ atoms. The state keeps S_α(c) = Σ_j ∂^α F(x_j, c) / α! for
 * |α| <= p, relative to a reference point c near the data, and moves it exactly with the
 * multivariate binomial shift
 *     S_β(c') = Σ_{α >= β} Π_i C(α_i, β_i) (c'_i - c_i)^(α_i - β_i) · S_α(c),
 * so any c is exact in real arithmetic; the running estimate of δ is the numerically good one
 * (Welford/Chan for variance). The result is S_0 shifted to the final δ.
 */
#include <map>

#include "fuse/Forms.h"
#include "sym/Derivative.h"
#include "sym/Simplify.h"

namespace rf::fuse_detail {

namespace {
constexpr int kMaxDegree = 4;
constexpr size_t kMaxDeltas = 6;

double factorial(int n) {
    double f = 1;
    for (int i = 2; i <= n; i++) f *= i;
    return f;
}
}  // namespace

bool derive_polynomial(const Body &b, MemberAnalysis &m, std::string &reason) {
    size_t q = b.delta_syms.size();
    if (q == 0 || q > kMaxDeltas) {
        reason = "too many independent earlier-result terms for the shift form";
        return false;
    }
    // Piecewise nodes (max, min, select, abs, rounding) whose arguments move with δ have derivatives
    // that hold only on one side of a kink: a polynomial certificate would be wrong across it.
    bool piecewise = false;
    visit(b.F, [&](Expr n) {
        if (n->kind == Kind::Select) {
            if (depends_on_d(b, n->args[0])) piecewise = true;  // a mask that moves with d
            return;
        }
        bool kink = n->kind == Kind::Min || n->kind == Kind::Max || n->kind == Kind::Cast ||
                    (n->kind == Kind::Call && (n->func == Func::abs || is_rounding(n)));
        if (kink && depends_on_d(b, n)) piecewise = true;
    });
    if (piecewise) {
        reason = "F is piecewise in the earlier results (max, min, select, abs or rounding of a term with d)";
        return false;
    }
    // Derivatives by total order: level[α] = ∂^α F (α a multi-index with sorted differentiation).
    std::map<std::vector<int>, Expr> all;
    std::vector<int> zero(q, 0);
    all[zero] = b.F;
    std::map<std::vector<int>, Expr> frontier = all;
    int degree = -1;
    for (int order = 1; order <= kMaxDegree + 1; order++) {
        std::map<std::vector<int>, Expr> next;
        bool all_zero = true;
        for (const auto &[alpha, D] : frontier) {
            // Differentiate only by δ_i with i >= the last index used, so each α is reached once.
            size_t last = 0;
            for (size_t i = 0; i < q; i++)
                if (alpha[i] > 0) last = i;
            for (size_t i = last; i < q; i++) {
                std::vector<int> beta = alpha;
                beta[i]++;
                if (next.count(beta)) continue;
                Expr d = simplify(derivative(D, b.delta_syms[i]));
                if (!d->is_const(0)) all_zero = false;
                next[beta] = d;
            }
        }
        if (all_zero) {
            degree = order - 1;
            break;
        }
        for (auto &[alpha, D] : next) all[alpha] = D;
        frontier = next;
    }
    if (degree < 0) {
        reason = "F is not a polynomial in the earlier results of degree <= " + std::to_string(kMaxDegree);
        return false;
    }
    m.degree = degree;
    m.alphas.clear();
    m.basis.clear();
    for (const auto &[alpha, D] : all) {
        int total = 0;
        double fact = 1;
        for (int a : alpha) {
            total += a;
            fact *= factorial(a);
        }
        if (total > degree || D->is_const(0)) {
            if (total != 0) continue;  // keep S_0 even when it is 0
        }
        if (total == 0) {
            m.alphas.insert(m.alphas.begin(), alpha);
            m.basis.insert(m.basis.begin(), D);
        } else {
            m.alphas.push_back(alpha);
            m.basis.push_back(simplify(make_mul(make_const(1.0 / fact), D)));
        }
    }
    return true;
}

}  // namespace rf::fuse_detail
