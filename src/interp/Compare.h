/** \file Compare.h
 * Comparison of a computed output with the reference, and the tolerance a comparison is allowed by
 * output dtype, compute precision and reduction length (docs/design.md §4, "The check"), scaled
 * up where the reference's terms cancel (interp/Magnitude.h).
 */
#pragma once

#include <cstdint>
#include <string>

#include "interp/Tensor.h"

namespace rf {

struct CompareResult {
    double max_abs_err = 0;  ///< max |out - ref| over elements where both are finite
    double max_rel_err = 0;  ///< max over elements of |out - ref| / scale_i (see compare): ok iff <= tol
    double cancellation = 1; ///< max over elements of scale_i / max|ref|: how far a magnitude widened it
    int64_t mismatches = 0;  ///< elements beyond tolerance, plus every non-finite disagreement
    int64_t nans = 0;        ///< NaNs in out where ref is not NaN
    int64_t numbers_for_nan = 0;  ///< numbers or infinities in out where ref is NaN
    int64_t worst = -1;      ///< flat index of the first mismatch (or of the largest error), -1 if none
    bool widening_capped = false;  ///< some element's widening reached kMaxCancellationWidening
    bool ok = true;
};

/** The most the magnitude widening may add to an element's limit, relative to B = max|ref|: a
 *  cancelling sum is accurate only relative to Σ|terms|, but however far its terms cancel the check
 *  never accepts an error beyond tol · B + 1e-3 · B (1e-3 is also the largest compute tolerance of
 *  a float32 reduction, compute_tolerance's cap). Without the cap a sum that cancels to 1e-4 of its
 *  terms accepted a result 10% off. */
constexpr double kMaxCancellationWidening = 1e-3;

/** Compares `out` with `ref` elementwise (shapes must be equal: InternalError otherwise).
 *  - ref finite: out must be finite; its error counts toward max_abs_err.
 *  - ref ±inf: out must be the same infinity (a masked row's lse is -inf on both sides).
 *  - ref NaN: out must be NaN too (the spec literally produces NaN there).
 *  - exact (indices, integer outputs): every element must be equal.
 *  Otherwise an element is a mismatch when |out - ref| > tol · scale_i, where
 *    scale_i = B + (magnitude_tol / tol) · max(0, magnitude[i] - B),   B = max|ref| (1 if ref is all 0)
 *  i.e. the limit is tol · B plus magnitude_tol for every unit of the element's magnitude beyond B.
 *  B is normwise, so a tiny reference value next to large ones is not held to a relative bound it
 *  cannot meet. magnitude (run_magnitude's M >= |ref|; none: 0) is the element's a-priori error
 *  scale, Σ|terms| rather than |Σ terms| where terms cancel; magnitude_tol is the part of tol that
 *  grows with it (the compute part: an output dtype's rounding is relative to |ref|, not to M).
 *  Without cancellation M <= B and the limit is tol · B, as with no magnitude. The widened part is
 *  capped: scale_i <= B · (1 + kMaxCancellationWidening / tol), i.e. the limit is at most
 *  tol · B + kMaxCancellationWidening · B (widening_capped says the cap was reached) — except for
 *  the part of the magnitude that the target's arithmetic cannot resolve against B: with u =
 *  unit_roundoff > 0 (the target's, 2^-24 for float32), the cap never goes below
 *    B + (magnitude_tol / tol) · max(0, magnitude[i] - B / u).
 *  Why: B relative to a magnitude M_i > B / u lies below one rounding of M_i (u · M_i > B), so every
 *  digit of such an element is rounding noise of terms of size M_i, and a cap relative to B would
 *  fail every float computation of it (scripts/fuzz_specs.py seed 1216 #10: a third central moment
 *  over C = 2 values, zero in exact arithmetic, 7e-7 = 2.7 u · M_i in float32, against B = 1e-16).
 *  Where B is resolvable (M_i <= B / u, every cancellation short of float's resolution, the cap's
 *  own case) this adds nothing. u = 0: no such floor.
 *  ok = no mismatches, i.e. max_rel_err <= tol and every non-finite value agrees. */
CompareResult compare(const Tensor &out, const Tensor &ref, double tol, bool exact = false,
                      const Tensor *magnitude = nullptr, double magnitude_tol = 0, double unit_roundoff = 0);

/** For a target that computes in float32: where the float64 reference `ref` (before rounding to the
 *  output dtype) lies beyond float32's range (it rounds to ±inf as a float) and `out` holds that
 *  infinity, sets `expected` (ref rounded to the output dtype, where such a value saturates to the
 *  largest finite one) to the infinity, and returns how many elements it set. Why: a value beyond
 *  float32 is inf in float32 arithmetic, the kernel's only possible result; the saturated store of
 *  language.md §4 applies to finite values. Only the same sign passes, a NaN never does, and the
 *  element leaves max|ref| (the normwise scale of the others) as every reference infinity does. */
int64_t accept_f32_overflow(const Tensor &out, const Tensor &ref, Tensor &expected);

/** Normwise relative tolerance for an output of dtype `out_dtype` produced by reductions of length
 *  `reduction_length` (pass the longest reduced extent feeding the output, e.g. max(N, D) for
 *  attention; errors of chained reductions add rather than multiply):
 *    compute  = f32_compute ? min(4e-6 · sqrt(n), 1e-3)       (fp32 accumulation: random-walk
 *                                                             growth of ~60 ulps · sqrt(n))
 *                           : 1e-10 · (1 + log2 n)            (fp64: pairwise-ish growth)
 *    storage  = 2 · dtype_epsilon(out_dtype) for float dtypes (kernel and reference may round one
 *               ulp apart), 0 for integer dtypes (compare those exactly)
 *    tolerance = compute + storage.
 *  Monotone non-decreasing in n. */
double tolerance(DType out_dtype, bool f32_compute, int64_t reduction_length);
/** The compute part of tolerance (the part compare scales with an element's magnitude). */
double compute_tolerance(bool f32_compute, int64_t reduction_length);

/** One line for reports: `max_abs_err=... max_rel_err=... mismatches=... nans=... ok`. */
std::string to_string(const CompareResult &r);

}  // namespace rf
