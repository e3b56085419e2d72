/** \file exp2_row_test.cpp
 * rfk::exp2_row (redfuse_cpu_rows.h), the row exp2 that generated float vector loops call for their exp2
 * (CpuKernelPrinter.cpp print_staged_exp2), against float64 exp2: within 1 ulp over a dense sweep and a
 * stride through every float, exact at 2^k, special values (±inf, NaN, ±0) as exp2 gives them, and
 * every length up to a few vectors without touching the element past the end; rfk::exp2_affine_row
 * (2^(x·a + b), into another row or in place) likewise; rfk::exp2_row_sum (Σ 2^((x + c)·a) + d over a
 * float or bf16 row, the terms stored or not, in place) to 1 ulp per term and a sum within float
 * rounding of the float64 one, NaN and ±inf among the elements; rfk::row_max / row_min (the max or
 * min of a scaled float or bf16 row, NaN-propagating) equal to a fold in float; the Half accuracy of
 * all three (rfk::Exp2Accuracy::Half: 3e-6 relative, exact at 2^k); on AVX2, Exp2x8's lockstep groups
 * (their fast path) bit for bit equal to its clamped method. The in-process test
 * runs the path of the default flags (scalar); the same checks are compiled again with AVX-512 and
 * AVX2 flags by the system compiler (this file with RFK_EXP2_ROW_DRIVER defined) and run as a child.
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/kernels/redfuse_cpu.h"
#include "runtime/kernels/redfuse_cpu_rows.h"
#include "UlpError.h"


namespace exp2_row_check {

const float kInf = std::numeric_limits<float>::infinity();


/** f as a row element of type T: itself, or bf16 rounded as the kernels store it. */
template <typename T>
T encode_as(float f) {
    if constexpr (std::is_same_v<T, uint16_t>) return rfk::store_bf16(f);
    else return f;
}

/** rfk::exp2_row_sum over rows of float or bf16 (T), every length up to a few vectors. */
template <typename T>
void check_row_sum(const std::function<void(const std::string &)> &fail) {
    const bool bf16 = std::is_same_v<T, uint16_t>;
    auto encode = [](float f) { return encode_as<T>(f); };
    const float shifts[] = {0.0f, -3.5f, 10.0f}, scales[] = {1.0f, 1.4426950408889634f}, offsets[] = {0.0f, -0.25f};
    for (float c : shifts)
        for (float a : scales)
            for (float d : offsets)
                for (int64_t n = 0; n <= 70; ++n)
                    for (int dst_kind = 0; dst_kind < (bf16 ? 2 : 3); ++dst_kind) {  // none, another row, in place
                        std::vector<T> src(size_t(n) + 1);
                        for (int64_t i = 0; i <= n; ++i) src[size_t(i)] = encode(-12.0f + 0.37f * float(i));
                        std::vector<float> row(size_t(n) + 1, 12345.0f);
                        float *dst = dst_kind == 0 ? nullptr : row.data();
                        if constexpr (!std::is_same_v<T, uint16_t>)
                            if (dst_kind == 2) dst = src.data();
                        std::vector<T> in = src;
                        float sum = rfk::exp2_row_sum(dst, src.data(), n, c, a, d);
                        double want_sum = 0, magnitude = 0;
                        std::string where = std::string(bf16 ? "bf16" : "f32") + " n=" + std::to_string(n) + " c=" + std::to_string(c) +
                                            " a=" + std::to_string(a) + " d=" + std::to_string(d) + " dst " + std::to_string(dst_kind);
                        for (int64_t i = 0; i < n; ++i) {
                            float arg = (rfk::row_value(in.data(), i) + c) * a;  // rounded as the kernel rounds it
                            double want = std::exp2(double(arg));
                            want_sum += want + d;
                            magnitude += std::fabs(want) + std::fabs(d);
                            if (dst && ulp_error(dst[size_t(i)], want) > 1.0) return fail("exp2_row_sum " + where + ": element " + std::to_string(i));
                        }
                        if (std::fabs(double(sum) - want_sum) > 1e-6 * magnitude + 1e-30) return fail("exp2_row_sum " + where + ": sum");
                        if (dst_kind == 1 && row[size_t(n)] != 12345.0f) return fail("exp2_row_sum " + where + " wrote past the end");
                    }
    // A NaN makes the sum NaN; -inf contributes 2^-inf = 0 (c finite, a > 0), +inf an inf.
    std::vector<T> special(40, encode(1.0f));
    // A length the compiler does not see: with n known, GCC 12 at -O3 -mavx2 warns (-Waggressive-loop-
    // optimizations) that the bf16 tail loop's iteration 2^63 - 1 would overflow its pointer.
    volatile int64_t opaque = int64_t(special.size());
    const int64_t n = opaque;
    special[3] = encode(-kInf);
    std::vector<float> out(special.size());
    float finite = rfk::exp2_row_sum(out.data(), special.data(), n, 0.0f, 1.0f, 0.0f);
    if (out[3] != 0.0f || finite != 78.0f) fail("exp2_row_sum: -inf element");
    special[37] = encode(kInf);
    if (rfk::exp2_row_sum(out.data(), special.data(), n, 0.0f, 1.0f, 0.0f) != kInf) fail("exp2_row_sum: +inf element");
    special[20] = encode(std::numeric_limits<float>::quiet_NaN());
    if (!std::isnan(rfk::exp2_row_sum((float *)nullptr, special.data(), n, 0.0f, 1.0f, 0.0f))) fail("exp2_row_sum: NaN element");
}

/** rfk::row_max / row_min over rows of float or bf16 (T): max(init, x_i · c) with NaN propagating, every
 *  length up to a few vectors, NaN and ±inf at every position, scales of both signs and the ones that
 *  go element by element (0, ±inf, NaN), against a fold in float. Equal as values (±0 alike). */
template <typename T>
void check_row_extremes(const std::function<void(const std::string &)> &fail) {
    const bool bf16 = std::is_same_v<T, uint16_t>;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto encode = [](float f) { return encode_as<T>(f); };
    auto fold = [&](bool want_max, const std::vector<T> &x, int64_t n, float c, float init) {
        float r = init;
        for (int64_t i = 0; i < n; ++i) r = want_max ? rfk::max<float>(r, rfk::row_value(x.data(), i) * c) : rfk::min<float>(r, rfk::row_value(x.data(), i) * c);
        return r;
    };
    const float scales[] = {1.0f, 0.125f, -3.0f, 0.0f, kInf, -kInf, nan}, inits[] = {-kInf, kInf, 2.5f, nan};
    const float specials[] = {0.0f, nan, kInf, -kInf, -0.0f, 1e30f};
    // NaNs next to ±inf (store_bf16 would give the canonical positive one): the key test's edges.
    auto edge_nan = [&](bool negative) -> T {
        if constexpr (std::is_same_v<T, uint16_t>) return uint16_t(negative ? 0xFF81 : 0x7F81);
        else return negative ? -nan : nan;
    };
    for (int64_t n = 0; n <= 70; ++n)
        for (int special = 0; special < 8; ++special)
            for (int64_t at : {int64_t(0), n / 2, n - 1}) {
                std::vector<T> x(size_t(n) + 1);
                for (int64_t i = 0; i <= n; ++i) x[size_t(i)] = encode(std::sin(float(i) * 1.7f) * 40.0f);  // both signs, no order
                x[size_t(n)] = encode(nan);  // past the end: never read
                if (special > 0 && n > 0) x[size_t(at)] = special >= 6 ? edge_nan(special == 6) : encode(specials[special]);
                for (float c : scales)
                    for (float init : inits)
                        for (bool want_max : {true, false}) {
                            float got = want_max ? rfk::row_max(x.data(), n, c, init) : rfk::row_min(x.data(), n, c, init);
                            float want = fold(want_max, x, n, c, init);
                            if (got == want || (got != got && want != want)) continue;
                            return fail(std::string("row_") + (want_max ? "max " : "min ") + (bf16 ? "bf16" : "f32") + " n=" + std::to_string(n) +
                                        " special " + std::to_string(special) + " at " + std::to_string(at) + " c=" + std::to_string(c) +
                                        " init=" + std::to_string(init) + ": " + std::to_string(got) + " want " + std::to_string(want));
                        }
            }
}

/** rfk::row_sum over rows of float or bf16 (T): whole numbers (exact sums in any order) of every length
 *  through the 64-wide loop and its tail, a NaN or an infinity at several positions, and a NaN just past
 *  the row that must not be read. */
template <typename T>
void check_plain_row_sums(const std::function<void(const std::string &)> &fail) {
    const bool bf16 = std::is_same_v<T, uint16_t>;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto encode = [](float f) { return encode_as<T>(f); };
    const float specials[] = {0.0f, nan, kInf, -kInf};
    for (int64_t n = 0; n <= 150; ++n)
        for (int special = 0; special < 5; ++special)
            for (int64_t at : {int64_t(0), n / 2, n - 1}) {
                std::vector<T> x(size_t(n) + 1);
                for (int64_t i = 0; i < n; ++i) x[size_t(i)] = encode(float(int(i * 7 % 23) - 11));
                x[size_t(n)] = encode(nan);  // past the end: never read
                if (special > 0 && n > 0) x[size_t(at)] = encode(specials[special < 4 ? special : 2]);
                if (special == 4 && n > 1) x[size_t(n - 1 - at)] = encode(-kInf);  // inf + -inf: NaN (or -inf alone when at = n - 1 - at)
                double want = 0;
                for (int64_t i = 0; i < n; ++i) want += double(rfk::row_value(x.data(), i));
                const float got = rfk::row_sum(x.data(), n);
                if (double(got) == want || (got != got && want != want)) continue;
                return fail(std::string("row_sum ") + (bf16 ? "bf16" : "f32") + " n=" + std::to_string(n) + " special " + std::to_string(special) +
                            " at " + std::to_string(at) + ": " + std::to_string(got) + " want " + std::to_string(want));
            }
}

const char *path();

/** Whether y is 2^x to the Half polynomial's accuracy (rfk::Exp2Accuracy::Half): 3e-6 relative, plus
 *  half a subnormal step where 2^x is below the normal range (vscalefps rounds once into it). */
bool within_half_accuracy(float y, double want) {
    if (std::isnan(want)) return std::isnan(y);
    if (std::isinf(want) || want >= 0x1p128) return y == std::numeric_limits<float>::infinity();  // beyond float: inf
    return std::fabs(double(y) - want) <= 3e-6 * want + std::ldexp(1.0, -150);
}

/** The Half polynomial through exp2_row, exp2_affine_row and exp2_row_sum (float and bf16 rows): within
 *  3e-6 over a dense sweep, exact at 2^k and the special values, tails masked; on a vector path really
 *  the cheaper form (some element more than 1 ulp off; the scalar path computes exp2_f for both). */
void check_half(bool vector_path, const std::function<void(const std::string &)> &fail) {
    using rfk::Exp2Accuracy;
    std::vector<float> xs = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 127.99999f, 128.0f, -149.0f, -150.0f, -151.0f};
    for (int i = 0; i <= 600000; ++i) xs.push_back(-155.0f + 285.0f * float(i) / 600000.0f);
    for (int k = -149; k <= 127; ++k) xs.push_back(float(k));
    std::vector<float> ys = xs;
    rfk::exp2_row<Exp2Accuracy::Half>(ys.data(), int64_t(ys.size()));
    double worst_ulp = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        const double want = std::exp2(double(xs[i]));
        worst_ulp = std::max(worst_ulp, std::isfinite(want) ? ulp_error(ys[i], want) : 0.0);
        if (!within_half_accuracy(ys[i], want)) return fail("exp2_row<Half>(" + std::to_string(xs[i]) + ") = " + std::to_string(ys[i]));
        if (xs[i] == std::nearbyint(xs[i]) && xs[i] >= -149 && xs[i] <= 127 && ys[i] != std::ldexp(1.0f, int(xs[i])))
            return fail("exp2_row<Half>(" + std::to_string(xs[i]) + ") is not a power of two");
    }
    if (vector_path && worst_ulp <= 1.0) fail("exp2_row<Half> is as accurate as the Float form: the degree-4 polynomial is not in use");
    for (int64_t n = 0; n <= 70; ++n) {
        std::vector<float> in(size_t(n) + 1), row(size_t(n) + 1, 12345.0f);
        for (int64_t i = 0; i < n; ++i) in[size_t(i)] = -20.0f + 0.7f * float(i);
        rfk::exp2_affine_row<Exp2Accuracy::Half>(row.data(), in.data(), n, 1.4426950408889634f, -3.0f);
        for (int64_t i = 0; i < n; ++i)
            if (!within_half_accuracy(row[size_t(i)], std::exp2(double(std::fma(in[size_t(i)], 1.4426950408889634f, -3.0f)))))
                return fail("exp2_affine_row<Half> n=" + std::to_string(n) + ": element " + std::to_string(i));
        if (row[size_t(n)] != 12345.0f) return fail("exp2_affine_row<Half> n=" + std::to_string(n) + " wrote past the end");
        std::vector<uint16_t> bf((size_t(n)));
        for (int64_t i = 0; i < n; ++i) bf[size_t(i)] = rfk::store_bf16(in[size_t(i)]);
        std::fill(row.begin(), row.end(), 12345.0f);
        const float sum = rfk::exp2_row_sum<Exp2Accuracy::Half>(row.data(), bf.data(), n, -2.5f, 1.4426950408889634f, 0.0f);
        double want_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double want = std::exp2(double((rfk::bf16_to_float(bf[size_t(i)]) - 2.5f) * 1.4426950408889634f));
            want_sum += want;
            if (!within_half_accuracy(row[size_t(i)], want)) return fail("exp2_row_sum<Half> bf16 n=" + std::to_string(n) + ": element " + std::to_string(i));
        }
        if (std::fabs(double(sum) - want_sum) > 4e-6 * want_sum + 1e-30) return fail("exp2_row_sum<Half> bf16 n=" + std::to_string(n) + ": sum");
        if (row[size_t(n)] != 12345.0f) return fail("exp2_row_sum<Half> n=" + std::to_string(n) + " wrote past the end");
    }
}

#if !(defined(__AVX512F__) && defined(__AVX512DQ__)) && defined(__AVX2__) && defined(__FMA__)
/** AVX2: the lockstep groups of Exp2x8 (fast path, or the clamped method when a lane is outside
 *  its range) give the same bits as the clamped method one vector at a time, for every x in xs
 *  in groups of 1 to 3 vectors, at both accuracies. */
template <rfk::Exp2Accuracy A>
void check_lockstep_bits(const std::vector<float> &xs, const std::function<void(const std::string &)> &fail) {
    const rfk::Exp2x8<A> e;
    auto group = [&](auto vectors) {
        constexpr int U = decltype(vectors)::value;
        for (size_t i = 0; i + 8 * U <= xs.size(); i += 8 * U) {
            __m256 v[U];
            for (int u = 0; u < U; ++u) v[u] = _mm256_loadu_ps(xs.data() + i + 8 * u);
            e.template lockstep<U>(v);
            for (int u = 0; u < U; ++u) {
                alignas(32) float got[8], want[8];
                _mm256_store_ps(got, v[u]);
                _mm256_store_ps(want, e(_mm256_loadu_ps(xs.data() + i + 8 * u)));
                if (std::memcmp(got, want, sizeof got) != 0) {
                    for (int l = 0; l < 8; ++l)
                        if (std::memcmp(got + l, want + l, 4) != 0) {
                            std::ostringstream m;
                            m << "Exp2x8::lockstep<" << U << "> differs from the clamped method at x = " << std::hexfloat << xs[i + 8 * u + l];
                            return fail(m.str());
                        }
                }
            }
        }
    };
    group(std::integral_constant<int, 1>{});
    group(std::integral_constant<int, 2>{});
    group(std::integral_constant<int, 3>{});
}
#endif

/** The failures as text ("" when none), at most a few lines. */
std::string check(bool thorough) {
    std::ostringstream out;
    int lines = 0;
    auto fail = [&](const std::string &what) {
        if (lines++ < 8) out << what << "\n";
    };
    std::vector<float> xs = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 1e-45f, -1e-45f, 127.99999f,
                             128.0f, 129.0f, -126.0f, -149.0f, -149.5f, -150.0f, -150.00002f, -151.0f, 0.5f, -0.5f, 1e30f, -1e30f};
    int steps = thorough ? 4000000 : 200000;
    for (int i = 0; i <= steps; ++i) xs.push_back(-160.0f + 300.0f * float(i) / float(steps));
    // A stride through every bit pattern (both signs, every exponent); odd, so it meets every residue.
    uint32_t stride = thorough ? 997u : 65537u;
    for (uint64_t b = 0; b < (1ull << 32); b += stride) {
        uint32_t u = uint32_t(b);
        float f;
        std::memcpy(&f, &u, 4);
        xs.push_back(f);
    }
    for (int k = -149; k <= 127; ++k) xs.push_back(float(k));
#if !(defined(__AVX512F__) && defined(__AVX512DQ__)) && defined(__AVX2__) && defined(__FMA__)
    check_lockstep_bits<rfk::Exp2Accuracy::Float>(xs, fail);
    check_lockstep_bits<rfk::Exp2Accuracy::Half>(xs, fail);
#endif
    std::vector<float> ys = xs;
    rfk::exp2_row(ys.data(), int64_t(ys.size()));
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        double err = ulp_error(ys[i], std::exp2(double(xs[i])));
        if (err > worst) worst = err, worst_x = xs[i];
        if (xs[i] == std::nearbyint(xs[i]) && xs[i] >= -149 && xs[i] <= 127 && ys[i] != std::ldexp(1.0f, int(xs[i])))
            fail("exp2_row(" + std::to_string(xs[i]) + ") is not a power of two");
        if ((xs[i] == kInf && ys[i] != kInf) || (xs[i] == -kInf && !(ys[i] == 0 && !std::signbit(ys[i]))) ||
            (std::isnan(xs[i]) && !std::isnan(ys[i])) || (xs[i] == 0 && ys[i] != 1.0f))
            fail("exp2_row special value " + std::to_string(xs[i]) + " -> " + std::to_string(ys[i]));
    }
    if (worst > 1.0) {
        std::ostringstream m;
        m << "exp2_row: " << worst << " ulp at x = " << std::hexfloat << worst_x;
        fail(m.str());
    }
    // Every length up to a few vectors: the tails are masked, the element past the end untouched.
    for (int64_t n = 0; n <= 70; ++n) {
        std::vector<float> in(size_t(n) + 1), row;
        for (int64_t i = 0; i < n; ++i) in[size_t(i)] = -20.0f + 0.7f * float(i);
        in[size_t(n)] = 12345.0f;
        row = in;
        rfk::exp2_row(row.data(), n);
        for (int64_t i = 0; i < n; ++i)
            if (ulp_error(row[size_t(i)], std::exp2(double(in[size_t(i)]))) > 1.0) {
                fail("exp2_row n=" + std::to_string(n) + ": element " + std::to_string(i));
                break;
            }
        if (row[size_t(n)] != 12345.0f) fail("exp2_row n=" + std::to_string(n) + " wrote past the end");
    }
    // exp2_affine_row: 2^(x * a + b) with the argument one fused multiply-add, into another row or in
    // place, every length up to a few vectors (tails masked, nothing past the end written).
    const float scales[] = {1.0f, 0.125f, 1.4426950408889634f, -3.0f}, offsets[] = {0.0f, -7.25f, 100.0f, -kInf};
    for (float a : scales)
        for (float b : offsets)
            for (int64_t n = 0; n <= 70; ++n)
                for (bool in_place : {false, true}) {
                    std::vector<float> in(size_t(n) + 1), row(size_t(n) + 1, 12345.0f);
                    for (int64_t i = 0; i < n; ++i) in[size_t(i)] = -20.0f + 0.7f * float(i);
                    in[size_t(n)] = 12345.0f;
                    std::vector<float> &dst = in_place ? in : row;
                    std::vector<float> src = in;
                    rfk::exp2_affine_row(dst.data(), in.data(), n, a, b);
                    for (int64_t i = 0; i < n; ++i) {
                        double want = std::exp2(double(std::fma(src[size_t(i)], a, b)));
                        if (ulp_error(dst[size_t(i)], want) > 1.0) {
                            fail("exp2_affine_row n=" + std::to_string(n) + " a=" + std::to_string(a) + " b=" + std::to_string(b) +
                                 (in_place ? " in place" : "") + ": element " + std::to_string(i));
                            break;
                        }
                    }
                    if (dst[size_t(n)] != 12345.0f) fail("exp2_affine_row n=" + std::to_string(n) + " wrote past the end");
                }
    check_row_sum<float>(fail);
    check_row_sum<uint16_t>(fail);
    check_row_extremes<float>(fail);
    check_row_extremes<uint16_t>(fail);
    check_plain_row_sums<float>(fail);
    check_plain_row_sums<uint16_t>(fail);
    check_half(std::string(path()) != "scalar", fail);
    return out.str();
}

/** Which path of exp2_row these flags compiled. */
const char *path() {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2";
#else
    return "scalar";
#endif
}

}  // namespace exp2_row_check

#if defined(RFK_EXP2_ROW_DRIVER)

int main() {
    std::string failures = exp2_row_check::check(true);
    if (!failures.empty()) {
        std::printf("%s", failures.c_str());
        return 1;
    }
    std::printf("ok %s\n", exp2_row_check::path());
    return 0;
}

#else

#include <gtest/gtest.h>

#include "ChildDriver.h"

namespace {

/** This file built as the child driver with `flags` (the generated kernels' -O3): it must print
 *  "ok <level>" and compile without warnings. */
void check_compiled_path(const std::vector<std::string> &flags, const std::vector<std::string> &cpu_flags, const std::string &level) {
    rf::test::check_child_driver(REDFUSE_SOURCE_DIR "/tests/unit/runtime/exp2_row_test.cpp",
                                 {"-std=c++17", "-O3", "-Wall", "-Wextra", "-DRFK_EXP2_ROW_DRIVER", "-I" REDFUSE_SOURCE_DIR "/src"},
                                 flags, cpu_flags, level);
}

}  // namespace

TEST(Exp2Row, DefaultPathWithinOneUlp) { EXPECT_EQ(exp2_row_check::check(false), ""); }

TEST(Exp2Row, Avx512PathWithinOneUlp) {
    check_compiled_path({"-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma"},
                        {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx2", "fma"}, "avx512");
}

TEST(Exp2Row, Avx2PathWithinOneUlp) { check_compiled_path({"-mavx2", "-mfma"}, {"avx2", "fma"}, "avx2"); }

#endif
