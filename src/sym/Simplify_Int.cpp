/** \file Simplify_Int.cpp
 * Canonical index arithmetic: floor division and modulo by integer constants, with integer-safe
 * rules only.
 */
#include <cstdint>

#include "sym/Simplify.h"
#include "sym/SimplifyInternal.h"

namespace rf::sym {

namespace {

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/** An integer constant that fits comfortably in int64 (no overflow in the folds below). */
bool small_int(Expr e, int64_t &out) {
    if (e->kind != Kind::Const || !is_int_value(e->value) || std::fabs(e->value) > 9.0e15) return false;
    out = static_cast<int64_t>(e->value);
    return true;
}

/** Splits an Int sum a into the terms whose coefficient is a multiple of c (returned divided by c,
 *  in `quotient`) and the others (`remainder`). */
void split_multiples(Expr a, int64_t c, std::vector<Expr> &quotient, std::vector<Expr> &remainder) {
    std::vector<Expr> terms = a->kind == Kind::Add ? a->args : std::vector<Expr>{a};
    for (Expr t : terms) {
        auto [k, rest] = split_coefficient(t);
        int64_t ki;
        if (t->stype == SType::Int && small_int(num(k, true), ki) && ki % c == 0) {
            int64_t q = ki / c;
            quotient.push_back(rest->kind == Kind::Const ? num(static_cast<double>(q) * rest->value, true)
                                                         : make_term(static_cast<double>(q), rest));
        } else {
            remainder.push_back(t);
        }
    }
}

}  // namespace

// Rules (floor division on integers, c a nonzero integer constant):
//   c1 / c2 = floor(c1 / c2)                       c2 != 0 (division by zero is left for the
//                                                  evaluator to report)
//   x / 1 = x;  x / -1 = -x;  0 / c = 0
//   (q*c*y + r) / c = q*y + r / c                  floor((r + c*k) / c) = floor(r / c) + k, k integer
//   (x / a) / b = x / (a*b)                        a, b > 0
//   x / c = 0                                      when 0 <= x < c is proven (c > 0)
Expr canon_idiv(Expr a, Expr b) {
    int64_t x, c;
    if (small_int(a, x) && small_int(b, c) && c != 0) return num(static_cast<double>(floor_div(x, c)), true);
    if (a->stype != SType::Int || !small_int(b, c) || c == 0) return make_idiv(a, b);
    if (c == 1) return a;
    if (c == -1) return canon_neg(a);
    if (a->is_const(0)) return num(0, true);
    int64_t inner;
    if (a->kind == Kind::IDiv && c > 0 && small_int(a->args[1], inner) && inner > 0 && inner < (int64_t(1) << 31) &&
        c < (int64_t(1) << 31))
        return canon_idiv(a->args[0], num(static_cast<double>(inner * c), true));
    std::vector<Expr> quotient, remainder;
    split_multiples(a, c, quotient, remainder);
    if (!quotient.empty()) {
        Expr r = remainder.empty() ? num(0, true) : canon_add(remainder);
        quotient.push_back(canon_idiv(r, num(static_cast<double>(c), true)));
        return canon_add(quotient);
    }
    Interval A = interval_default(a);
    if (c > 0 && !A.may_be_nan && A.lo >= 0 && (A.hi < c || (A.hi == c && A.hi_open))) return num(0, true);
    return make_idiv(a, num(static_cast<double>(c), true));
}

// Rules (modulo with floor semantics, c a nonzero integer constant):
//   c1 % c2 = fold;  x % 1 = x % -1 = 0;  0 % c = 0
//   (c*k*y + r) % c = r % c                        the multiples of c drop
//   (x % c) % c = x % c
//   x % c = x                                      when 0 <= x < c is proven (c > 0)
Expr canon_mod(Expr a, Expr b) {
    int64_t x, c;
    if (small_int(a, x) && small_int(b, c) && c != 0) return num(static_cast<double>(x - c * floor_div(x, c)), true);
    if (a->stype != SType::Int || !small_int(b, c) || c == 0) return make_mod(a, b);
    if (c == 1 || c == -1) return num(0, true);
    if (a->is_const(0)) return num(0, true);
    int64_t inner;
    if (a->kind == Kind::Mod && small_int(a->args[1], inner) && inner == c) return a;
    std::vector<Expr> quotient, remainder;
    split_multiples(a, c, quotient, remainder);
    if (!quotient.empty()) {
        if (remainder.empty()) return num(0, true);
        return canon_mod(canon_add(remainder), num(static_cast<double>(c), true));
    }
    Interval A = interval_default(a);
    if (c > 0 && !A.may_be_nan && A.lo >= 0 && (A.hi < c || (A.hi == c && A.hi_open))) return a;
    return make_mod(a, num(static_cast<double>(c), true));
}

}  // namespace rf::sym
