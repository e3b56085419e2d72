/** \file Interval.cpp
 * Interval arithmetic with open/closed endpoints (Interval.h).
 */
#include "sym/Interval.h"

#include <algorithm>
#include <cmath>

namespace rf::sym::iv {

namespace {
constexpr double INF = INFINITY;

bool attained_inf(const Interval &a) { return (a.lo == -INF && !a.lo_open) || (a.hi == INF && !a.hi_open); }
bool contains_zero(const Interval &a) {
    return (a.lo < 0 || (a.lo == 0 && !a.lo_open)) && (a.hi > 0 || (a.hi == 0 && !a.hi_open));
}

/** Widens finite non-zero endpoints by one ulp: library functions are accurate to within an ulp,
 *  so the true image of an endpoint lies inside. Zero and infinite results are exact. */
Interval widen(Interval r) {
    if (std::isfinite(r.lo) && r.lo != 0) r.lo = std::nextafter(r.lo, -INF);
    if (std::isfinite(r.hi) && r.hi != 0) r.hi = std::nextafter(r.hi, INF);
    return r;
}
}  // namespace

Interval make(double lo, bool lo_open, double hi, bool hi_open, bool nan) {
    Interval r;
    r.lo = lo;
    r.lo_open = lo_open;
    r.hi = hi;
    r.hi_open = hi_open;
    r.may_be_nan = nan;
    return r;
}

Interval reals() { return make(-INF, true, INF, true); }

Interval hull(const Interval &a, const Interval &b) {
    Interval r;
    r.lo = std::min(a.lo, b.lo);
    r.lo_open = a.lo < b.lo ? a.lo_open : (b.lo < a.lo ? b.lo_open : (a.lo_open && b.lo_open));
    r.hi = std::max(a.hi, b.hi);
    r.hi_open = a.hi > b.hi ? a.hi_open : (b.hi > a.hi ? b.hi_open : (a.hi_open && b.hi_open));
    r.may_be_nan = a.may_be_nan || b.may_be_nan;
    return r;
}

Interval intersect(const Interval &a, const Interval &b) {
    Interval r;
    r.lo = std::max(a.lo, b.lo);
    r.lo_open = a.lo > b.lo ? a.lo_open : (b.lo > a.lo ? b.lo_open : (a.lo_open || b.lo_open));
    r.hi = std::min(a.hi, b.hi);
    r.hi_open = a.hi < b.hi ? a.hi_open : (b.hi < a.hi ? b.hi_open : (a.hi_open || b.hi_open));
    r.may_be_nan = a.may_be_nan && b.may_be_nan;
    if (r.lo > r.hi) return b;  // contradictory facts: trust the explicit one
    return r;
}

Interval neg(const Interval &a) { return make(-a.hi, a.hi_open, -a.lo, a.lo_open, a.may_be_nan); }

Interval add(const Interval &a, const Interval &b) {
    Interval r;
    r.may_be_nan = a.may_be_nan || b.may_be_nan;
    bool a_minf = a.lo == -INF && !a.lo_open, b_minf = b.lo == -INF && !b.lo_open;
    bool a_pinf = a.hi == INF && !a.hi_open, b_pinf = b.hi == INF && !b.hi_open;
    if ((a_minf && b_pinf) || (a_pinf && b_minf)) r.may_be_nan = true;  // inf + -inf
    // An operand that is exactly -inf (or +inf) absorbs every finite value of the other.
    if ((b.hi == -INF && !a_pinf) || (a.hi == -INF && !b_pinf)) return make(-INF, false, -INF, false, r.may_be_nan);
    if ((b.lo == INF && !a_minf) || (a.lo == INF && !b_minf)) return make(INF, false, INF, false, r.may_be_nan);
    if (a.lo == -INF || b.lo == -INF) {
        r.lo = -INF;
        r.lo_open = !(a_minf || b_minf);
    } else {
        r.lo = a.lo + b.lo;
        r.lo_open = a.lo_open || b.lo_open;
    }
    if (a.hi == INF || b.hi == INF) {
        r.hi = INF;
        r.hi_open = !(a_pinf || b_pinf);
    } else {
        r.hi = a.hi + b.hi;
        r.hi_open = a.hi_open || b.hi_open;
    }
    return r;
}

Interval mul(const Interval &a, const Interval &b) {
    bool nan = a.may_be_nan || b.may_be_nan;
    bool inf_a = attained_inf(a), inf_b = attained_inf(b);
    if ((inf_a && contains_zero(b)) || (inf_b && contains_zero(a))) return make(-INF, false, INF, false, true);
    struct Corner {
        double v;
        bool attained;
    };
    Corner c[4];
    int k = 0;
    const double xs[2] = {a.lo, a.hi}, ys[2] = {b.lo, b.hi};
    const bool xo[2] = {a.lo_open, a.hi_open}, yo[2] = {b.lo_open, b.hi_open};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            double v = xs[i] * ys[j];
            if (std::isnan(v)) v = 0;  // 0 * unbounded: the limit that matters is the zero side
            bool att = (xs[i] == 0 && !xo[i]) || (ys[j] == 0 && !yo[j]) || (!xo[i] && !yo[j]);
            c[k++] = {v, att};
        }
    Interval r;
    r.lo = c[0].v;
    r.hi = c[0].v;
    for (auto &x : c) {
        r.lo = std::min(r.lo, x.v);
        r.hi = std::max(r.hi, x.v);
    }
    r.lo_open = r.hi_open = true;
    for (auto &x : c) {
        if (x.v == r.lo && x.attained) r.lo_open = false;
        if (x.v == r.hi && x.attained) r.hi_open = false;
    }
    if (inf_a || inf_b) r.lo_open = r.hi_open = false;  // an attained infinity: stay conservative
    r.may_be_nan = nan;
    return r;
}

Interval recip(const Interval &a) {
    Interval r;
    if (a.lo > 0 || (a.lo == 0 && a.lo_open)) {
        r = make(1.0 / a.hi, a.hi_open, a.lo == 0 ? INF : 1.0 / a.lo, a.lo_open);
    } else if (a.hi < 0 || (a.hi == 0 && a.hi_open)) {
        r = make(a.hi == 0 ? -INF : 1.0 / a.hi, a.hi_open, 1.0 / a.lo, a.lo_open);
    } else if (a.lo == 0 && a.hi > 0) {
        r = make(1.0 / a.hi, a.hi_open, INF, false);  // 1 / 0 = inf
    } else {
        r = make(-INF, false, INF, false);
    }
    r.may_be_nan = a.may_be_nan;
    return widen(r);
}

Interval increasing(const Interval &a, const std::function<double(double)> &f, bool strict) {
    double lo = f(a.lo), hi = f(a.hi);
    if (std::isnan(lo) || std::isnan(hi)) return make(-INF, false, INF, false, true);
    return widen(make(lo, strict && a.lo_open, hi, strict && a.hi_open, a.may_be_nan));
}

Interval decreasing(const Interval &a, const std::function<double(double)> &f) {
    double lo = f(a.hi), hi = f(a.lo);
    if (std::isnan(lo) || std::isnan(hi)) return make(-INF, false, INF, false, true);
    return widen(make(lo, a.hi_open, hi, a.lo_open, a.may_be_nan));
}

Interval pow_const(const Interval &a, double p) {
    if (p == 0) return make(1, false, 1, false);  // pow(x, 0) = 1, even for NaN
    if (p == 1) return a;
    if (p == -1) return recip(a);
    auto f = [p](double x) { return std::pow(x, p); };
    bool integer = std::isfinite(p) && p == std::floor(p);
    if (integer) {
        if (p < 0) return recip(pow_const(a, -p));
        bool even = std::fmod(p, 2.0) == 0;
        if (!even || a.lo >= 0) return widen(increasing(a, f));
        if (a.hi <= 0) return widen(decreasing(a, f));
        // a straddles 0: [0, max(|lo|, |hi|)^p]
        double m;
        bool open;
        if (-a.lo > a.hi) m = -a.lo, open = a.lo_open;
        else if (-a.lo < a.hi) m = a.hi, open = a.hi_open;
        else m = a.hi, open = a.lo_open && a.hi_open;
        return widen(make(0, false, f(m), open, a.may_be_nan));
    }
    // Non-integer exponent: defined for x >= 0 only (NaN below).
    bool nan = a.may_be_nan || a.lo < 0 || !std::isfinite(p);
    if (a.hi < 0 || (a.hi == 0 && a.hi_open)) return make(-INF, false, INF, false, true);
    Interval b = a;
    if (b.lo < 0) b.lo = 0, b.lo_open = false;
    Interval r = p > 0 ? increasing(b, f) : decreasing(b, f);
    r.may_be_nan = r.may_be_nan || nan;
    return widen(r);
}

Interval min(const Interval &a, const Interval &b) {
    Interval r;
    r.lo = std::min(a.lo, b.lo);
    r.lo_open = a.lo < b.lo ? a.lo_open : (b.lo < a.lo ? b.lo_open : (a.lo_open && b.lo_open));
    r.hi = std::min(a.hi, b.hi);
    r.hi_open = a.hi < b.hi ? a.hi_open : (b.hi < a.hi ? b.hi_open : (a.hi_open || b.hi_open));
    r.may_be_nan = a.may_be_nan || b.may_be_nan;
    return r;
}

Interval max(const Interval &a, const Interval &b) { return neg(min(neg(a), neg(b))); }

Interval abs(const Interval &a) {
    if (a.lo >= 0) return a;
    if (a.hi <= 0) return neg(a);
    double m;
    bool open;
    if (-a.lo > a.hi) m = -a.lo, open = a.lo_open;
    else if (-a.lo < a.hi) m = a.hi, open = a.hi_open;
    else m = a.hi, open = a.lo_open && a.hi_open;
    return make(0, false, m, open, a.may_be_nan);
}

}  // namespace rf::sym::iv
