/** \file Compare.cpp
 * Output comparison and tolerances of Compare.h.
 */
#include "interp/Compare.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "support/Error.h"

namespace rf {

CompareResult compare(const Tensor &out, const Tensor &ref, double tol, bool exact) {
    RF_INTERNAL_ASSERT(out.shape == ref.shape && out.data.size() == ref.data.size())
        << "comparing shape " << shape_to_string(out.shape) << " with reference shape " << shape_to_string(ref.shape);
    CompareResult r;
    double ref_max = 0;
    for (double v : ref.data)
        if (std::isfinite(v)) ref_max = std::max(ref_max, std::fabs(v));
    // The first pass fixes the scale; the second counts elements beyond tol at that scale.
    double limit = tol * (ref_max > 0 ? ref_max : 1.0);
    double worst_err = -1;
    int64_t worst_index = -1, first_bad = -1;
    for (size_t i = 0; i < ref.data.size(); i++) {
        double o = out.data[i], x = ref.data[i];
        bool bad;
        if (std::isnan(x)) {
            bad = !std::isnan(o);
        } else if (std::isinf(x)) {
            bad = o != x;
            if (std::isnan(o)) r.nans++;
        } else if (!std::isfinite(o)) {
            bad = true;
            if (std::isnan(o)) r.nans++;
        } else {
            double err = std::fabs(o - x);
            r.max_abs_err = std::max(r.max_abs_err, err);
            if (err > worst_err) {
                worst_err = err;
                worst_index = static_cast<int64_t>(i);
            }
            bad = exact ? o != x : err > limit;
        }
        if (bad) {
            r.mismatches++;
            if (first_bad < 0) first_bad = static_cast<int64_t>(i);
        }
    }
    r.worst = first_bad >= 0 ? first_bad : worst_index;
    r.max_rel_err = ref_max > 0 ? r.max_abs_err / ref_max : r.max_abs_err;
    r.ok = r.mismatches == 0;
    return r;
}

double tolerance(DType out_dtype, bool f32_compute, int64_t reduction_length) {
    double n = static_cast<double>(std::max<int64_t>(reduction_length, 1));
    double compute = f32_compute ? std::min(4e-6 * std::sqrt(n), 1e-3) : 1e-10 * (1.0 + std::log2(n));
    double storage = is_float(out_dtype) ? 2.0 * dtype_epsilon(out_dtype) : 0.0;
    return compute + storage;
}

std::string to_string(const CompareResult &r) {
    std::ostringstream os;
    os.precision(3);
    os << "max_abs_err=" << r.max_abs_err << " max_rel_err=" << r.max_rel_err << " mismatches=" << r.mismatches
       << " nans=" << r.nans << (r.ok ? " ok" : " FAIL");
    if (!r.ok && r.worst >= 0) os << " (first at flat index " << r.worst << ")";
    return os.str();
}

}  // namespace rf
