/** \file compare_test.cpp
 * Output comparison: normwise errors, non-finite values, exact mode, and the tolerance formula.
 */
#include <gtest/gtest.h>

#include <cmath>

#include "interp/Compare.h"
#include "support/Error.h"

using namespace rf;

namespace {
Tensor vec(std::vector<double> v) {
    Tensor t({static_cast<int64_t>(v.size())});
    t.data = std::move(v);
    return t;
}
}  // namespace

TEST(Compare, NormwiseRelativeError) {
    CompareResult r = compare(vec({1.0, 100.001, 1e-9}), vec({1.0, 100.0, 0.0}), 1e-4);
    EXPECT_NEAR(r.max_abs_err, 1e-3, 1e-12);
    EXPECT_NEAR(r.max_rel_err, 1e-5, 1e-14);  // scaled by max|ref| = 100, not by each element
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.mismatches, 0);
    r = compare(vec({1.0, 100.1, 0.0}), vec({1.0, 100.0, 0.0}), 1e-4);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.mismatches, 1);
    EXPECT_EQ(r.worst, 1);
}

TEST(Compare, AllZeroReferenceUsesAbsoluteError) {
    CompareResult r = compare(vec({0.0, 1e-7}), vec({0.0, 0.0}), 1e-6);
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.max_rel_err, r.max_abs_err);
    EXPECT_FALSE(compare(vec({0.0, 1e-3}), vec({0.0, 0.0}), 1e-6).ok);
}

TEST(Compare, NaNInOutputFails) {
    CompareResult r = compare(vec({1.0, NAN, 3.0}), vec({1.0, 2.0, 3.0}), 1e-3);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.nans, 1);
    EXPECT_EQ(r.mismatches, 1);
    EXPECT_EQ(r.worst, 1);
    // An unwritten (poisoned) output fails entirely.
    r = compare(Tensor({4}), vec({1, 2, 3, 4}), 1e-3);
    EXPECT_EQ(r.nans, 4);
    EXPECT_FALSE(r.ok);
}

TEST(Compare, ANumberWhereTheReferenceIsNaNIsCountedApart) {
    // The approximate quantization plan met an infinite scale and gave -inf where exact arithmetic gives
    // NaN (scripts/fuzz_specs.py seed 1207 #130): reports said "max_abs_err 0 ... 3 element(s) wrong".
    CompareResult r = compare(vec({-INFINITY, 1.0, 2.0, NAN}), vec({NAN, 1.0, NAN, NAN}), 1e-3);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.mismatches, 2);
    EXPECT_EQ(r.numbers_for_nan, 2);
    EXPECT_EQ(r.nans, 0);
    EXPECT_EQ(r.max_abs_err, 0);
    EXPECT_EQ(r.worst, 0);
}

TEST(Compare, InfinitiesMustMatch) {
    EXPECT_TRUE(compare(vec({-INFINITY, 1.0}), vec({-INFINITY, 1.0}), 1e-6).ok);  // masked row lse
    EXPECT_FALSE(compare(vec({INFINITY, 1.0}), vec({-INFINITY, 1.0}), 1e-6).ok);
    EXPECT_FALSE(compare(vec({-1e300, 1.0}), vec({-INFINITY, 1.0}), 1e-6).ok);
    EXPECT_FALSE(compare(vec({INFINITY, 1.0}), vec({2.0, 1.0}), 1e-6).ok);
    // Infinities in the reference do not poison the scale of the finite elements.
    CompareResult r = compare(vec({-INFINITY, 1.0 + 1e-9}), vec({-INFINITY, 1.0}), 1e-6);
    EXPECT_TRUE(r.ok);
    EXPECT_NEAR(r.max_rel_err, 1e-9, 1e-15);
    // A NaN reference (the spec literally computes NaN) needs a NaN output.
    EXPECT_TRUE(compare(vec({NAN}), vec({NAN}), 1e-6).ok);
    EXPECT_FALSE(compare(vec({0.0}), vec({NAN}), 1e-6).ok);
}

TEST(Compare, ExactModeRequiresEquality) {
    EXPECT_TRUE(compare(vec({3, 1, 4}), vec({3, 1, 4}), 0, true).ok);
    CompareResult r = compare(vec({3, 1, 5}), vec({3, 1, 4}), 0.5, true);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.mismatches, 1);
    EXPECT_EQ(r.worst, 2);
}

TEST(Compare, ShapeMismatchIsInternalError) {
    EXPECT_THROW(compare(vec({1, 2}), vec({1, 2, 3}), 1e-6), InternalError);
}

TEST(Compare, ToleranceIsMonotoneInLengthAndOrderedByPrecision) {
    for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::f8e4m3, DType::i32})
        for (bool f32 : {false, true}) {
            double prev = 0;
            for (int64_t n : {1, 2, 7, 64, 1000, 4096, 100000, 10000000}) {
                double t = tolerance(d, f32, n);
                EXPECT_GE(t, prev) << dtype_name(d) << " n=" << n;
                EXPECT_GT(t, 0);
                prev = t;
            }
        }
    EXPECT_LT(tolerance(DType::f64, false, 4096), 2e-9);
    EXPECT_LT(tolerance(DType::f64, false, 4096), tolerance(DType::f64, true, 4096));
    EXPECT_LT(tolerance(DType::f32, true, 4096), tolerance(DType::bf16, true, 4096));
    EXPECT_LT(tolerance(DType::bf16, true, 4096), tolerance(DType::f8e4m3, true, 4096));
    EXPECT_LE(tolerance(DType::f32, true, int64_t(1) << 40), 1e-3 + 1e-6);  // capped
    EXPECT_GE(tolerance(DType::bf16, false, 1), 2 * dtype_epsilon(DType::bf16));
}

TEST(Compare, MagnitudeWidensOnlyBeyondTheNormwiseScale) {
    Tensor ref = vec({1.0, 100.0, 0.5}), out = vec({1.0, 100.0, 0.5 + 2e-3});
    // Magnitudes at or below max|ref| change nothing: the result equals the plain comparison's.
    Tensor low = vec({1.0, 100.0, 50.0});
    CompareResult plain = compare(out, ref, 1e-5), same = compare(out, ref, 1e-5, false, &low, 1e-5);
    EXPECT_EQ(plain.ok, same.ok);
    EXPECT_EQ(plain.max_rel_err, same.max_rel_err);
    EXPECT_EQ(same.cancellation, 1.0);
    EXPECT_FALSE(same.ok);
    // The third element's terms summed to 1000 in magnitude: magnitude_tol per unit beyond 100.
    Tensor high = vec({1.0, 100.0, 1000.0});
    CompareResult r = compare(out, ref, 1e-5, false, &high, 1e-5);
    EXPECT_TRUE(r.ok);  // limit 1e-5 · 100 + 1e-5 · 900 = 1e-2
    EXPECT_NEAR(r.cancellation, 10.0, 1e-12);
    EXPECT_NEAR(r.max_rel_err, 2e-3 / 1000, 1e-15);
    // Only the part of the tolerance passed as magnitude_tol grows (an output dtype's rounding is
    // relative to the value): none passed, nothing widens.
    EXPECT_FALSE(compare(out, ref, 1e-5, false, &high, 0).ok);
    // A wrong element is still wrong at its own scale, and a NaN magnitude widens nothing.
    EXPECT_FALSE(compare(vec({1.0, 100.0, 20.0}), ref, 1e-5, false, &high, 1e-5).ok);
    Tensor nan = vec({NAN, NAN, NAN});
    EXPECT_FALSE(compare(out, ref, 1e-5, false, &nan, 1e-5).ok);
}

TEST(Compare, WideningIsCapped) {
    // An output that cancels to 1e-4 of its terms (M = 1e4 · |ref|): uncapped, the f32 compute
    // tolerance (1e-4 at n = 625) widened by 1e4 accepted a result 10% off (the audit of issue 15).
    // The cap: at most kMaxCancellationWidening · B beyond tol · B, whatever M is.
    const double tol = 1e-4;
    Tensor ref = vec({1.0}), mag = vec({1e4});
    for (double off : {1.1, 1.01, 1.002}) {
        CompareResult r = compare(vec({off}), ref, tol, false, &mag, tol);
        EXPECT_FALSE(r.ok) << off;
        EXPECT_TRUE(r.widening_capped) << off;
        EXPECT_NEAR(r.cancellation, 1 + kMaxCancellationWidening / tol, 1e-9);
    }
    // Within the cap: accepted, and reported as capped.
    CompareResult near = compare(vec({1.0005}), ref, tol, false, &mag, tol);
    EXPECT_TRUE(near.ok);
    EXPECT_TRUE(near.widening_capped);
    // A widening below the cap is not capped, and no magnitude caps nothing.
    Tensor small = vec({5.0});
    CompareResult below = compare(vec({1.0003}), ref, tol, false, &small, tol);
    EXPECT_TRUE(below.ok);
    EXPECT_FALSE(below.widening_capped);
    EXPECT_NEAR(below.cancellation, 5.0, 1e-12);
    EXPECT_FALSE(compare(vec({1.0003}), ref, tol).widening_capped);
}

TEST(Compare, TheCapStopsAtFloatsResolutionOfMaxRef) {
    // A reference that cancelled to float64 noise (B = 1e-16) beside a magnitude of 8: float32
    // rounds terms of size 8 to ~5e-7, so every digit of the output is noise and the cap (relative
    // to B) gives way to the widened limit for the part of M beyond B / u.
    const double tol = 6e-6, u = 0x1p-24;
    Tensor ref = vec({1e-16}), mag = vec({8.0});
    CompareResult noise = compare(vec({7e-7}), ref, tol, false, &mag, tol, u);
    EXPECT_TRUE(noise.ok);
    EXPECT_GT(noise.cancellation, 1e15);  // the limit is about tol · 8, not tol · B
    // Without the target's roundoff the cap still holds, and a result beyond tol · M still fails.
    EXPECT_FALSE(compare(vec({7e-7}), ref, tol, false, &mag, tol).ok);
    EXPECT_FALSE(compare(vec({1e-4}), ref, tol, false, &mag, tol, u).ok);
    // Where B is resolvable (M <= B / u) nothing changes: the case of WideningIsCapped.
    Tensor one = vec({1.0}), mag4 = vec({1e4});
    for (double off : {1.1, 1.01, 1.002}) {
        CompareResult r = compare(vec({off}), one, 1e-4, false, &mag4, 1e-4, u);
        EXPECT_FALSE(r.ok) << off;
        EXPECT_TRUE(r.widening_capped) << off;
    }
    // Partly resolvable: only the magnitude beyond B / u widens past the cap.
    Tensor tiny = vec({1e-7}), mag1 = vec({1.0});  // B / u = 1.68, M = 1: the cap holds
    EXPECT_FALSE(compare(vec({1e-7 + 1e-9}), tiny, tol, false, &mag1, tol, u).ok);
    Tensor mag10 = vec({10.0});  // M - B / u = 8.3: a limit of about 5e-5
    EXPECT_TRUE(compare(vec({1e-7 + 4e-5}), tiny, tol, false, &mag10, tol, u).ok);
    EXPECT_FALSE(compare(vec({1e-7 + 6e-5}), tiny, tol, false, &mag10, tol, u).ok);
}

TEST(Compare, Float32OverflowIsAcceptedOnlyBeyondFloat32) {
    // The reference before its f32 store: 1e81 and -3.6e41 lie beyond float32, 1e38 and FLT_MAX
    // within it; a float32 kernel's infinity agrees only with the first two, and only by sign.
    const double flt_max = 3.4028234663852886e38;
    Tensor ref = vec({1e81, -3.6e41, 1e38, flt_max, 1e81, 1e81, 2.0});
    Tensor out = vec({INFINITY, -INFINITY, INFINITY, INFINITY, -INFINITY, NAN, 2.0});
    Tensor expected = vec({flt_max, -flt_max, 1e38, flt_max, flt_max, flt_max, 2.0});  // as stored
    EXPECT_EQ(compare(out, expected, 1e-6).mismatches, 6);
    EXPECT_EQ(accept_f32_overflow(out, ref, expected), 2);
    EXPECT_EQ(expected.data[0], INFINITY);
    EXPECT_EQ(expected.data[1], -INFINITY);
    CompareResult r = compare(out, expected, 1e-6);
    EXPECT_EQ(r.mismatches, 4);  // within float32, the wrong sign and the NaN stay wrong
    EXPECT_EQ(r.nans, 1);
    // The accepted elements leave the normwise scale: max|ref| is that of 1e38 and FLT_MAX, not more.
    Tensor small = vec({1e81, 2.0}), small_out = vec({INFINITY, 2.1}), small_expected = vec({flt_max, 2.0});
    CompareResult before = compare(small_out, small_expected, 1e-6);
    EXPECT_EQ(before.mismatches, 1);  // the infinity; FLT_MAX in the scale hides the 5% error
    EXPECT_EQ(before.worst, 0);
    accept_f32_overflow(small_out, small, small_expected);
    CompareResult after = compare(small_out, small_expected, 1e-6);
    EXPECT_EQ(after.mismatches, 1);  // the 5% error
    EXPECT_EQ(after.worst, 1);
}
