/** \file Compare.cpp
 * Output comparison and tolerances of Compare.h.
 */
#include "interp/Compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "support/Error.h"

namespace rf {

CompareResult compare(const Tensor &out, const Tensor &ref, double tol, bool exact, const Tensor *magnitude,
                      double magnitude_tol, double unit_roundoff) {
    RF_INTERNAL_ASSERT(out.shape == ref.shape && out.data.size() == ref.data.size())
        << "comparing shape " << shape_to_string(out.shape) << " with reference shape " << shape_to_string(ref.shape);
    RF_INTERNAL_ASSERT(!magnitude || magnitude->data.size() == ref.data.size()) << "magnitude of another shape";
    CompareResult r;
    double ref_max = 0;
    for (double v : ref.data)
        if (std::isfinite(v)) ref_max = std::max(ref_max, std::fabs(v));
    // The first pass fixes the normwise scale; the second counts elements beyond tol at that scale,
    // widened by magnitude_tol per unit of magnitude beyond it (a NaN magnitude widens nothing).
    const double base = ref_max > 0 ? ref_max : 1.0;
    const double widen = magnitude && tol > 0 && std::isfinite(tol) ? magnitude_tol / tol : 0.0;
    const double widest = widen > 0 ? base * (1.0 + kMaxCancellationWidening / tol) : base;
    double worst_err = -1;
    int64_t worst_index = -1, first_bad = -1;
    for (size_t i = 0; i < ref.data.size(); i++) {
        double o = out.data[i], x = ref.data[i];
        bool bad;
        if (std::isnan(x)) {
            bad = !std::isnan(o);
            if (bad) r.numbers_for_nan++;
        } else if (std::isinf(x)) {
            bad = o != x;
            if (std::isnan(o)) r.nans++;
        } else if (!std::isfinite(o)) {
            bad = true;
            if (std::isnan(o)) r.nans++;
        } else {
            double err = std::fabs(o - x);
            double mag = magnitude ? magnitude->data[i] : 0.0;
            double scale = mag > base ? base + widen * (mag - base) : base;
            // The cap, unless part of the magnitude lies beyond float's resolution of B (Compare.h).
            double unresolved = unit_roundoff > 0 ? base + widen * std::max(0.0, mag - base / unit_roundoff) : base;
            double cap = std::max(widest, unresolved);
            if (widen > 0 && scale > cap) {
                scale = cap;
                r.widening_capped = true;
            }
            r.max_abs_err = std::max(r.max_abs_err, err);
            r.max_rel_err = std::max(r.max_rel_err, err / scale);
            r.cancellation = std::max(r.cancellation, scale / base);
            if (err / scale > worst_err) {
                worst_err = err / scale;
                worst_index = static_cast<int64_t>(i);
            }
            bad = exact ? o != x : err > tol * scale;
        }
        if (bad) {
            r.mismatches++;
            if (first_bad < 0) first_bad = static_cast<int64_t>(i);
        }
    }
    r.worst = first_bad >= 0 ? first_bad : worst_index;
    r.ok = r.mismatches == 0;
    return r;
}

int64_t accept_f32_overflow(const Tensor &out, const Tensor &ref, Tensor &expected) {
    RF_INTERNAL_ASSERT(out.data.size() == ref.data.size() && expected.data.size() == ref.data.size())
        << "accepting overflow across shapes " << shape_to_string(out.shape) << " and " << shape_to_string(ref.shape);
    int64_t n = 0;
    for (size_t i = 0; i < ref.data.size(); i++) {
        double x = ref.data[i], o = out.data[i];
        // static_cast<float> rounds to nearest: inf exactly when float32 arithmetic overflows.
        if (!std::isfinite(x) || !std::isinf(static_cast<float>(x)) || !std::isinf(o) || (o > 0) != (x > 0)) continue;
        expected.data[i] = o;
        n++;
    }
    return n;
}

double compute_tolerance(bool f32_compute, int64_t reduction_length) {
    double n = static_cast<double>(std::max<int64_t>(reduction_length, 1));
    return f32_compute ? std::min(4e-6 * std::sqrt(n), 1e-3) : 1e-10 * (1.0 + std::log2(n));
}

double tolerance(DType out_dtype, bool f32_compute, int64_t reduction_length) {
    double storage = is_float(out_dtype) ? 2.0 * dtype_epsilon(out_dtype) : 0.0;
    return compute_tolerance(f32_compute, reduction_length) + storage;
}

std::string to_string(const CompareResult &r) {
    std::ostringstream os;
    os.precision(3);
    os << "max_abs_err=" << r.max_abs_err << " max_rel_err=" << r.max_rel_err << " mismatches=" << r.mismatches
       << " nans=" << r.nans << " numbers_for_nan=" << r.numbers_for_nan << (r.ok ? " ok" : " FAIL");
    if (!r.ok && r.worst >= 0) os << " (first at flat index " << r.worst << ")";
    return os.str();
}

}  // namespace rf
