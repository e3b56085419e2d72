/** \file cpu_exact_division_test.cpp
 * A division the spec rounds (the int8 quantizer's round(A · 127 / a)) stays a division in the
 * compiled CPU kernel: no compile flag may turn it into a product with the divisor's reciprocal; and
 * a product rounds once, the same wherever it is used (no a·b + c contracted into one FMA).
 *
 * Why: x · (1/a) can differ from x / a by one ulp, and round() turns that ulp into a whole integer
 * step. With A = a / 2 the quotient is exactly 63.5, which rounds to 64 (ties to even); for the bf16
 * values of a picked below, fl(63.5·a · fl(1/a)) is 63.499996 and rounds to 63. GCC's
 * -freciprocal-math did exactly that to the quantizer's loop, whose divisor a[m] is invariant.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "runtime/OpenCLRuntime.h"

namespace rf {
namespace {

std::string example(const std::string &name) { return std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf"; }

float from_bits(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t bf16_bits(float f) {  // f is a bf16 value: its low 16 bits are zero
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return uint16_t(bits >> 16);
}

/** bf16 values a in [1, 2) where round(fl(fl(a/2 · 127) · fl(1/a))) is 63, not round(63.5) = 64. */
std::vector<float> reciprocal_misrounds() {
    std::vector<float> out;
    for (uint32_t b = 0x3f80; b < 0x4000; b++) {
        volatile float a = from_bits(b << 16);
        volatile float x = a / 2, p = x * 127.0f, r = 1.0f / a, product = p * r, quotient = p / a;
        if (quotient == 63.5f && std::nearbyint(product) != 64.0f) out.push_back(static_cast<float>(a));
    }
    return out;
}

TEST(CpuExactDivision, QuantizerRoundsTheQuotientNotTheReciprocalProduct) {
    const std::vector<float> hard = reciprocal_misrounds();
    ASSERT_GE(hard.size(), 8u);  // the premise: such divisors exist
    // The weight-GEMM schedule (one 16-row block, wide K), a small one, and odd sizes with tails.
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{16, 1024, 4096}, {16, 64, 256}, {3, 40, 333}}) {
        Options o;
        o.sizes = {{"M", M}, {"N", N}, {"K", K}};
        Kernel k = compile(example("quant_gemm_int8"), make_target(TargetKind::Cpu), o);
        // Row m: A[m,0] = a (the row's max |A|), every other A[m,k] = a/2, so each quantized value
        // is round(63.5) = 64. Wq is +1 (even n) or -1 (odd n) past column 0, sw = 1: C[m,n] =
        // ±64·(K-1)·a/127, where a 63 anywhere in the row would pull it by 1.6%.
        std::vector<uint16_t> a(size_t(M * K)), c(size_t(M * N));
        std::vector<int8_t> w(size_t(N * K));
        std::vector<float> sw(size_t(N), 1.0f);
        for (int64_t m = 0; m < M; m++) {
            float row_max = hard[size_t(m) % hard.size()];
            for (int64_t j = 0; j < K; j++) a[size_t(m * K + j)] = bf16_bits(j == 0 ? row_max : row_max / 2);
        }
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < K; j++) w[size_t(n * K + j)] = int8_t(j == 0 ? 0 : n % 2 ? -1 : 1);
        k({{a.data(), DType::bf16, {M, K}}, {w.data(), DType::i8, {N, K}}, {sw.data(), DType::f32, {N}}},
          {{c.data(), DType::bf16, {M, N}}});
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double want = (n % 2 ? -64.0 : 64.0) * double(K - 1) * hard[size_t(m) % hard.size()] / 127.0;
                double got = from_bits(uint32_t(c[size_t(m * N + n)]) << 16);
                ASSERT_NEAR(got, want, std::fabs(want) * 0x1p-8)
                    << "M=" << M << " N=" << N << " K=" << K << " C[" << m << "," << n << "] with a = " << hard[size_t(m) % hard.size()];
            }
    }
}

TEST(CpuExactDivision, AProductIsRoundedTheSameWhereItIsComparedAndWhereItIsSubtracted) {
    // m = max(X·g) keeps X·g rounded to float; the term X·g − m must then be exactly 0 at the max.
    // Contracted into fma(X, g, −m), the product was exact there and the term the product's rounding
    // error, which exp(mu) made ~1e9 times larger than the answer here (1e41 in fuzz seed 1228 #52).
    // The CPU's JIT flags and the OpenCL source's FP_CONTRACT pragma; mu ~ 37 keeps exp(mu) a float.
    const float g = 10.3592205f;
    ASSERT_NE(double(7.0f * g), 7.0 * double(g)) << "the premise: 7·g is not a float";
    std::vector<TargetKind> kinds{TargetKind::Cpu};
    if (ocl::unavailable_reason().empty()) kinds.push_back(TargetKind::OpenCL);
    for (TargetKind kind : kinds) {
        Kernel k = compile(std::string(REDFUSE_SOURCE_DIR) + "/tests/specs/rounded_product_at_the_max.rf", make_target(kind));
        std::vector<int8_t> x{3, 3, 3, 7, 3, 3, 3};
        float g_in = g, t = 0;
        k({{x.data(), DType::i8, {1, 7}}, {&g_in, DType::f32, {}}}, {{&t, DType::f32, {1}}});
        // The spec in float64 with the products rounded as float32 rounds them (in m and in the terms).
        double y3 = double(3.0f * g), y7 = double(7.0f * g), mu = (6 * y3 + y7) / 7;
        double want = 6 * std::exp(y3 - y7 + mu) * (y3 - y7);
        EXPECT_NEAR(t, want, std::fabs(want) * 1e-4) << to_string(kind);
    }
}

}  // namespace
}  // namespace rf
