/** \file simd_kernels_test.cpp
 * redfuse_simd.h, redfuse_simd_gemm.h and redfuse_simd_fp8.h against double-precision references: every GEMM over many shapes (0, 1, primes, tails,
 * padded leading dimensions, block boundaries), exact int8, exp within 2 ulp (and redfuse_cpu.h's exp_f and
 * exp2_f, which generated vector loops inline), row reductions with NaN and -inf, bf16 casts as
 * rfk::cast_bf16. The in-process tests exercise the path of the default flags (scalar); the same checks
 * are compiled again with AVX-512 and AVX2 flags by the system compiler (this file with RFK_SIMD_DRIVER
 * defined) and run as a child process.
 *
 * Inputs sit in buffers that end at an inaccessible page and have NaN (or garbage) in their row padding, so
 * a read past a row or past the end shows up as a crash or a wrong value; outputs start as NaN when
 * `accumulate` is false and keep a sentinel in their padding, so a read of C or a stray store shows too.
 */

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kernels/redfuse_cpu.h"
#include "runtime/kernels/redfuse_cpu_rows.h"
#include "runtime/kernels/redfuse_cpu_row_copies.h"
#include "UlpError.h"
#include "runtime/kernels/redfuse_simd.h"
#include "runtime/kernels/redfuse_simd_gemm.h"
#include "runtime/kernels/redfuse_simd_gemm_nn.h"
#include "runtime/kernels/redfuse_simd_int8.h"
#include "runtime/kernels/redfuse_simd_bf16.h"
#include "runtime/kernels/redfuse_simd_amx.h"
#include "runtime/kernels/redfuse_simd_fp8.h"

#include "SimdCheckSupport.h"
#include "SimdCallStateChecks.h"
#include "SimdRowCopyChecks.h"

namespace simd_check {

/** The cross product of edge sizes plus shapes that cross the kernels' block sizes (KC, NC, MC). */
std::vector<Shape> gemm_shapes() {
    std::vector<int64_t> sizes = kThorough ? std::vector<int64_t>{0, 1, 3, 7, 16, 17, 33, 65, 130}
                                           : std::vector<int64_t>{0, 1, 3, 7, 17, 33};
    std::vector<Shape> out;
    for (int64_t m : sizes)
        for (int64_t n : sizes)
            for (int64_t k : sizes) out.push_back({m, n, k});
    std::vector<Shape> extra = {{65, 130, 16}, {16, 65, 130}, {130, 17, 65}, {8, 64, 256}, {9, 40, 600},
                                {20, 600, 7},  {200, 20, 9},  {64, 64, 64},  {4, 70, 513}, {64, 128, 128},
                                // the dot form over long K rows (a call per group of 4 B rows), several row strips
                                {16, 9, 1000}, {7, 5, 700},   {12, 6, 1500},
                                // the bf16 B-in-place form (b_in_place_halves): full and partial 32-row panels,
                                // column groups with a tail, an odd K, and two row blocks; 16-row panels (M = 16,
                                // a partial one at M = 15, three at M = 48)
                                {64, 141, 1025}, {96, 200, 600}, {150, 301, 513}, {16, 77, 1023}, {15, 40, 517},
                                {48, 100, 700},
                                // the AMX sweep's K blocks (8 steps) and column chunks (4 blocks), and rows 1 or 2 KiB
                                // apart (copied slice by slice when the leading dimension draws no padding), and a
                                // weight GEMM at M <= 32 whose 1 KiB-strided weight rows are read in place (one
                                // column block reads each slice: no copy)
                                {64, 96, 1024}, {96, 64, 512}, {40, 300, 1024}, {16, 200, 1024}, {32, 300, 512},
                                // few-row bf16 P·V (nn_acc_bf16_few_rows): decode's 4 rows x D = 128 over a key tile,
                                // two strips with a 100-column tail and an odd K, one row past 64 columns
                                {4, 128, 256}, {6, 100, 255}, {1, 130, 63},
                                // few-row f32 P·V (nn_acc_few_rows): 128-column blocks in strips of 2 and 1 rows, a
                                // 44-column tail through nn_acc, K past its 512-row blocks
                                {3, 300, 600}, {2, 128, 1030},
                                // decode with 8 and 16 query heads per KV head: the dot form for QK^T (kPackMinM),
                                // whole-row P·V strips at 8 and 7 rows (a 4-column tail through nn_acc's 8-row
                                // block), bf16 register pairs at 16 rows with tails and an odd K
                                {8, 128, 256}, {7, 260, 300}, {16, 130, 129},
                                // more than 2 rows of bf16 P·V in 32-column blocks: strips of 8 and 4 rows, a 1-column tail
                                {12, 33, 257}};
    // {20, 40, 2100}: past the 2048-long K blocks of the bf16 pair kernels.
    if (kThorough) extra.insert(extra.end(), {{140, 530, 300}, {1, 1000, 128}, {128, 256, 64}, {5, 64, 1100}, {8, 17, 1025}, {20, 40, 2100},
                                             // the B-in-place form's K blocks (4096 long at 128 rows), odd last block
                                             {128, 260, 4101}});
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
}

// ------------------------------------------------------------------------------------------------------
// Float-output GEMMs.
// ------------------------------------------------------------------------------------------------------
enum class Gemm { NtF32, NtBf16, NtF32Bf16, NnF32, NnF32Bf16, NtF32E4m3, NtF32E5m2, NtF32F16, NtF32AsBf16, NnF32AsBf16 };

const char *gemm_name(Gemm g) {
    switch (g) {
    case Gemm::NtF32: return "gemm_nt_f32";
    case Gemm::NtBf16: return "gemm_nt_bf16";
    case Gemm::NtF32Bf16: return "gemm_nt_f32_bf16";
    case Gemm::NnF32: return "gemm_nn_acc_f32";
    case Gemm::NnF32Bf16: return "gemm_nn_acc_f32_bf16";
    case Gemm::NtF32E4m3: return "gemm_nt_f32_f8e4m3";
    case Gemm::NtF32E5m2: return "gemm_nt_f32_f8e5m2";
    case Gemm::NtF32F16: return "gemm_nt_f32_f16";
    case Gemm::NtF32AsBf16: return "gemm_nt_f32_as_bf16";
    case Gemm::NnF32AsBf16: return "gemm_nn_acc_f32_as_bf16";
    }
    return "?";
}

/** Narrow weight storage: fp8 bytes in `q8`, f16 halves in `b16`. */
enum class Narrow { None, E4m3, E5m2, F16 };

/** A row-major rows x cols operand with leading dimension ld (padding NaN), in f32, bf16 or a narrow
 *  storage; `value` holds what the kernel must see (the stored value, widened). Narrow elements are
 *  any finite bit pattern (every exponent, subnormals, both zeros); e5m2 and f16 at most 2^8 in
 *  magnitude so products stay finite. */
struct Operand {
    int64_t rows, cols, ld;
    bool bf16;
    Guarded<float> f32;
    Guarded<uint16_t> b16;
    Guarded<uint8_t> q8;
    std::vector<double> value;
    Operand(Rng &rng, int64_t rows_, int64_t cols_, bool bf16_, Narrow narrow = Narrow::None)
        : rows(rows_), cols(cols_), ld(cols_ + rng.below(4)), bf16(bf16_), f32(size_t(rows_ * ld)),
          b16(size_t(rows_ * ld)), q8(size_t(rows_ * ld)), value(size_t(rows_ * cols_)) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < ld; ++c) {
                float v = c < cols ? rng.uniform(-1.0f, 1.0f) : kNaN;
                uint16_t h = rfk::f32_to_bf16(v);
                uint8_t q = 0x7F;  // NaN in the padding (both fp8 formats)
                if (bf16) v = rfk::bf16_to_f32(h);
                if (narrow == Narrow::F16) {
                    h = 0x7E00;  // NaN
                    if (c < cols) {
                        do h = uint16_t(rng.below(65536));
                        while (((h >> 10) & 0x1F) > 22);  // |v| < 2^8
                        v = rfk::f16_to_float(h);
                    }
                } else if (narrow != Narrow::None && c < cols) {
                    if (narrow == Narrow::E4m3) {
                        do q = uint8_t(rng.below(256));
                        while ((q & 0x7F) == 0x7F);
                        v = rfk::f8e4m3_to_float(q);
                    } else {
                        do q = uint8_t(rng.below(256));
                        while (((q >> 2) & 0x1F) > 22);
                        v = rfk::f8e5m2_to_float(q);
                    }
                }
                f32[size_t(r * ld + c)] = v;
                b16[size_t(r * ld + c)] = h;
                q8[size_t(r * ld + c)] = q;
                if (c < cols) value[size_t(r * cols + c)] = v;
            }
    }
    double at(int64_t r, int64_t c) const { return value[size_t(r * cols + c)]; }
};

void check_float_gemm(Gemm g, Failures &f) {
    Rng rng(uint64_t(g) * 1000 + 17);
    const float alphas[] = {1.0f, 0.5f, -1.25f};
    const float sentinel = 777.0f;
    bool nn = g == Gemm::NnF32 || g == Gemm::NnF32Bf16 || g == Gemm::NnF32AsBf16;
    int case_index = 0;
    for (const Shape &s : gemm_shapes()) {
        for (int variant = 0; variant < 2; ++variant) {
            int64_t M = s.M, N = s.N, K = s.K;
            bool accumulate = nn || variant == 1;
            float alpha = nn ? 1.0f : alphas[case_index++ % 3];
            bool a_bf16 = g == Gemm::NtBf16, b_bf16 = g == Gemm::NtBf16 || g == Gemm::NtF32Bf16 || g == Gemm::NnF32Bf16 ||
                                                  g == Gemm::NtF32AsBf16 || g == Gemm::NnF32AsBf16;
            Operand A(rng, M, K, a_bf16);
            Narrow narrow = g == Gemm::NtF32E4m3 ? Narrow::E4m3 : g == Gemm::NtF32E5m2 ? Narrow::E5m2 : g == Gemm::NtF32F16 ? Narrow::F16 : Narrow::None;
            Operand B(rng, nn ? K : N, nn ? N : K, b_bf16, narrow);
            int64_t ldc = N + rng.below(3);
            Guarded<float> C(size_t(M * ldc));
            std::vector<float> c_old(size_t(M * ldc));
            for (int64_t i = 0; i < M * ldc; ++i)
                C[size_t(i)] = c_old[size_t(i)] = (i % ldc) >= N ? sentinel : (accumulate ? rng.uniform(-2.0f, 2.0f) : kNaN);

            switch (g) {
            case Gemm::NtF32: rfk::gemm_nt_f32(M, N, K, alpha, A.f32.data(), A.ld, B.f32.data(), B.ld, C.data(), ldc, accumulate); break;
            case Gemm::NtBf16: rfk::gemm_nt_bf16(M, N, K, alpha, A.b16.data(), A.ld, B.b16.data(), B.ld, C.data(), ldc, accumulate); break;
            case Gemm::NtF32Bf16: rfk::gemm_nt_f32_bf16(M, N, K, alpha, A.f32.data(), A.ld, B.b16.data(), B.ld, C.data(), ldc, accumulate); break;
            case Gemm::NnF32: rfk::gemm_nn_acc_f32(M, N, K, A.f32.data(), A.ld, B.f32.data(), B.ld, C.data(), ldc); break;
            case Gemm::NnF32Bf16: rfk::gemm_nn_acc_f32_bf16(M, N, K, A.f32.data(), A.ld, B.b16.data(), B.ld, C.data(), ldc); break;
            case Gemm::NtF32E4m3:
                rfk::gemm_nt_f32_f8e4m3(M, N, K, alpha, A.f32.data(), A.ld, B.q8.data(), B.ld, C.data(), ldc, accumulate);
                break;
            case Gemm::NtF32E5m2:
                rfk::gemm_nt_f32_f8e5m2(M, N, K, alpha, A.f32.data(), A.ld, B.q8.data(), B.ld, C.data(), ldc, accumulate);
                break;
            case Gemm::NtF32F16: rfk::gemm_nt_f32_f16(M, N, K, alpha, A.f32.data(), A.ld, B.b16.data(), B.ld, C.data(), ldc, accumulate); break;
            case Gemm::NtF32AsBf16:
                rfk::gemm_nt_f32_as_bf16(M, N, K, alpha, A.f32.data(), A.ld, B.b16.data(), B.ld, C.data(), ldc, accumulate);
                break;
            case Gemm::NnF32AsBf16: rfk::gemm_nn_acc_f32_as_bf16(M, N, K, A.f32.data(), A.ld, B.b16.data(), B.ld, C.data(), ldc); break;
            }
            // The *_as_bf16 GEMMs multiply A rounded to bf16 where they use the bf16 unit.
            bool rounds_a = (g == Gemm::NtF32AsBf16 || g == Gemm::NnF32AsBf16) && rfk::kTileProductsInBf16;
            auto a_at = [&](int64_t i, int64_t k) {
                return rounds_a ? double(rfk::bf16_to_f32(rfk::f32_to_bf16(float(A.at(i, k))))) : A.at(i, k);
            };

            int bad = 0;
            for (int64_t i = 0; i < M && bad == 0; ++i)
                for (int64_t j = 0; j < ldc && bad == 0; ++j) {
                    float got = C[size_t(i * ldc + j)], old = c_old[size_t(i * ldc + j)];
                    if (j >= N) {
                        if (std::memcmp(&got, &sentinel, 4) != 0) {
                            f.add(describe(gemm_name(g), M, N, K, accumulate) + ": wrote padding column " + std::to_string(j));
                            ++bad;
                        }
                        continue;
                    }
                    double dot = 0, mag = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        double p = a_at(i, k) * (nn ? B.at(k, j) : B.at(j, k));
                        dot += p;
                        mag += std::fabs(p);
                    }
                    double ref = double(alpha) * dot + (accumulate ? double(old) : 0.0);
                    // Float accumulation in any order: <= (K + 2) eps per unit of magnitude, doubled for slack.
                    double tol = 2 * kEps * ((double(K) + 2) * std::fabs(alpha) * mag + (accumulate ? std::fabs(double(old)) : 0.0));
                    if (!(std::fabs(double(got) - ref) <= tol)) {
                        std::ostringstream m;
                        m << describe(gemm_name(g), M, N, K, accumulate) << ": C[" << i << "][" << j << "] = " << got
                          << ", reference " << ref << " (tolerance " << tol << ")";
                        f.add(m.str());
                        ++bad;
                    }
                }
        }
    }
}

/** Every e4m3, e5m2 and f16 bit pattern widened by the GEMMs' loads (vector and scalar) equals the
 *  compiler's decoding (rfk::f8e4m3_to_float, f8e5m2_to_float, f16_to_float).
 *  (The vector loads are inlined here, outside the headers' silencing of GCC 12's false
 *  -Wmaybe-uninitialized on AVX-512 intrinsics.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
void check_e4m3_widening(Failures &f) {
    uint8_t bits[256 + 16];
    for (int i = 0; i < 256 + 16; ++i) bits[i] = uint8_t(i);
    auto same = [](float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; };
    for (int i = 0; i < 256; ++i)
        if (!same(rfk::simd_detail::e4m3_to_f32(bits[i]), rfk::f8e4m3_to_float(bits[i]))) f.add("e4m3_to_f32(" + std::to_string(i) + ")");
    for (int h = 0; h < 65536; ++h)
        if (!same(rfk::simd_detail::f16_to_f32(uint16_t(h)), rfk::f16_to_float(uint16_t(h)))) f.add("f16_to_f32(" + std::to_string(h) + ")");
#if defined(RFK_SIMD_NARROW)
    for (int i = 0; i < 256; i += rfk::simd_detail::VW) {
        float out[rfk::simd_detail::VW];
        rfk::simd_detail::vstore(out, rfk::simd_detail::vload(reinterpret_cast<const rfk::simd_detail::e5m2 *>(bits + i)));
        for (int t = 0; t < rfk::simd_detail::VW; ++t)
            if (!same(out[t], rfk::f8e5m2_to_float(bits[i + t]))) f.add("vector e5m2 widening of " + std::to_string(i + t));
    }
    std::vector<uint16_t> halves(65536 + 16);
    for (size_t h = 0; h < halves.size(); ++h) halves[h] = uint16_t(h);
    for (int h = 0; h < 65536; h += rfk::simd_detail::VW) {
        float out[rfk::simd_detail::VW];
        rfk::simd_detail::vstore(out, rfk::simd_detail::vload(reinterpret_cast<const rfk::simd_detail::f16 *>(halves.data() + h)));
        for (int t = 0; t < rfk::simd_detail::VW; ++t)
            if (!same(out[t], rfk::f16_to_float(uint16_t(h + t)))) f.add("vector f16 widening of " + std::to_string(h + t));
    }
#endif
#if defined(RFK_SIMD_VECTOR)
    using rfk::simd_detail::VW;
    for (int i = 0; i < 256; i += VW) {
        float out[VW], part[VW];
        rfk::simd_detail::vstore(out, rfk::simd_detail::vload(reinterpret_cast<const rfk::simd_detail::e4m3 *>(bits + i)));
        rfk::simd_detail::vstore(part, rfk::simd_detail::vload_n(reinterpret_cast<const rfk::simd_detail::e4m3 *>(bits + i), 3));
        for (int t = 0; t < VW; ++t)
            if (!same(out[t], rfk::f8e4m3_to_float(bits[i + t])) || (t < 3 && !same(part[t], out[t])) || (t >= 3 && part[t] != 0.0f))
                f.add(std::string("vector e4m3 widening (") + rfk::simd_level() + ") of " + std::to_string(i + t));
    }
#endif
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// ------------------------------------------------------------------------------------------------------
// int8 GEMM: exact.
// ------------------------------------------------------------------------------------------------------
void check_s8_gemm(Failures &f) {
    Rng rng(99);
    std::vector<Shape> shapes = gemm_shapes();
    // {20, 40, 4100}: the outer-product form past its 4096-byte K blocks.
    shapes.insert(shapes.end(), {{2, 5, 4096}, {16, 9, 1000}, {3, 3, 63}, {3, 3, 64}, {3, 3, 65}, {20, 40, 4100}});
    // The B-in-place form: a K with 3 bytes in its last quad; past its 8192-byte K blocks at 128 rows. The shapes
    // that would take 16-row panels (M = 15, 16, 48) run the dot form, which shifts B as it loads it and corrects
    // by the row sums of A, with 1-3 bytes in the last quad (masked loads); {16, 9, 1000} (N < 16) too.
    shapes.insert(shapes.end(), {{64, 130, 1027}, {16, 77, 1025}, {15, 40, 518}, {48, 100, 701}});
    // The dot form's strips: M <= 6 in one strip of up to 6 rows, then strips of 4 and a shorter last one
    // (N < 16 keeps M = 14 on the dot form at a short K).
    shapes.insert(shapes.end(), {{5, 21, 1030}, {6, 19, 1024}, {7, 30, 1029}, {13, 17, 1101}, {14, 6, 200}});
    // Without VNNI (AVX2) the B-in-place form on int16 pairs: 8-row panels (M = 6..11, groups of 12 B rows) and
    // 16-row ones (M >= 12, groups of 6), an odd K (the last pair's missing half), N past whole groups, K past
    // the 1024-deep blocks of a 128-row block (added to C), and a second row block (M > 128).
    shapes.insert(shapes.end(), {{6, 25, 99}, {11, 13, 517}, {12, 7, 33}, {17, 31, 1500}, {130, 19, 1030}});
    if (kThorough) shapes.insert(shapes.end(), {{128, 256, 8195}});
    int case_index = 0;
    for (const Shape &s : shapes) {
        for (int variant = 0; variant < 2; ++variant) {
            int64_t M = s.M, N = s.N, K = s.K;
            bool accumulate = variant == 1;
            // Every third case uses only the extremes, where the unsigned shifts (of A or of B) and their
            // corrections are largest.
            bool extremes = case_index++ % 3 == 2;
            auto draw = [&]() { return extremes ? int8_t(rng.below(2) ? 127 : -128) : int8_t(rng.below(256) - 128); };
            int64_t lda = K + rng.below(5), ldb = K + rng.below(5), ldc = N + rng.below(3);
            Guarded<int8_t> A(size_t(M * lda)), B(size_t(N * ldb));
            for (int64_t i = 0; i < M * lda; ++i) A[size_t(i)] = draw();  // padding too: garbage must be ignored
            for (int64_t i = 0; i < N * ldb; ++i) B[size_t(i)] = draw();
            Guarded<int32_t> C(size_t(M * ldc));
            std::vector<int32_t> c_old(size_t(M * ldc));
            for (int64_t i = 0; i < M * ldc; ++i) C[size_t(i)] = c_old[size_t(i)] = int32_t(rng.next());
            rfk::gemm_nt_s8s8_s32(M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, accumulate);
            int bad = 0;
            for (int64_t i = 0; i < M && bad == 0; ++i)
                for (int64_t j = 0; j < ldc && bad == 0; ++j) {
                    int64_t want = c_old[size_t(i * ldc + j)];
                    if (j < N) {
                        int64_t dot = 0;
                        for (int64_t k = 0; k < K; ++k) dot += int64_t(A[size_t(i * lda + k)]) * B[size_t(j * ldb + k)];
                        want = int64_t(int32_t(uint32_t(int64_t(accumulate ? want : 0) + dot)));
                    }
                    if (C[size_t(i * ldc + j)] != want) {
                        std::ostringstream m;
                        m << describe("gemm_nt_s8s8_s32", M, N, K, accumulate) << ": C[" << i << "][" << j
                          << "] = " << C[size_t(i * ldc + j)] << ", want " << want;
                        f.add(m.str());
                        ++bad;
                    }
                }
        }
    }
}

// ------------------------------------------------------------------------------------------------------
// exp and the row primitives.
// ------------------------------------------------------------------------------------------------------

/** Sample points for exp: a dense sweep of [-110, 92] and every special value. */
std::vector<float> exp_inputs() {
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, kNaN, -kNaN, 88.72283f, 88.7228394f, 88.72284f,
                             89.0f, 100.0f, 1e30f, std::numeric_limits<float>::max(), -87.33654f, -87.3366f,
                             -103.27893f, -103.972f, -103.973f, -104.0f, -110.0f, -1e30f,
                             -std::numeric_limits<float>::max(), 1e-45f, -1e-45f, 1e-38f, 0.34657359f, -0.34657359f};
    int steps = kThorough ? 2000000 : 100000;
    for (int i = 0; i <= steps; ++i) xs.push_back(-110.0f + 202.0f * float(i) / float(steps));
    for (int i = 0; i <= 20000; ++i) xs.push_back(std::ldexp(1.0f, -30) * float(i));  // near zero
    return xs;
}

void check_exp(Failures &f) {
    std::vector<float> xs = exp_inputs();
    Guarded<float> x(xs.size()), y(xs.size());
    std::memcpy(x.data(), xs.data(), xs.size() * 4);
    rfk::exp_f32(x.data(), int64_t(xs.size()), y.data());
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        double err = ulp_error(y[i], std::exp(double(xs[i])));
        if (err > worst) worst = err, worst_x = xs[i];
    }
    if (worst > 2.0) {
        std::ostringstream m;
        m << "exp_f32 (" << rfk::simd_level() << "): " << worst << " ulp at x = " << worst_x;
        f.add(m.str());
    }
    // Every length up to a few vectors, so each tail size runs against the guard page.
    Rng rng(5);
    for (int64_t n = 0; n <= 70; ++n) {
        Guarded<float> xn{size_t(n)}, yn{size_t(n)};
        for (int64_t i = 0; i < n; ++i) xn[size_t(i)] = rng.uniform(-20.0f, 20.0f);
        rfk::exp_f32(xn.data(), n, yn.data());
        for (int64_t i = 0; i < n; ++i)
            if (ulp_error(yn[size_t(i)], std::exp(double(xn[size_t(i)]))) > 2.0) {
                f.add("exp_f32 n=" + std::to_string(n) + ": element " + std::to_string(i));
                break;
            }
    }
}

/** rfk::exp_f and rfk::exp2_f of redfuse_cpu.h (what generated kernels call inside their vector loops,
 *  exp2 after the tile pass FoldExp2) against double references: within 2 ulp everywhere, exact at the
 *  special values and at integer powers of two. */
void check_scalar_exp(Failures &f) {
    std::vector<float> xs = exp_inputs();
    std::vector<float> x2;
    for (float x : xs) x2.push_back(x * 1.44269504f);  // [-158.7, 132.7]: both ends saturate
    for (float x : {128.0f, 127.99999f, 127.5f, -126.0f, -149.0f, -149.5f, -150.0f, -150.00002f, -151.0f, -152.0f, 0.5f,
                    -0.5f, 0.49999997f, -0.49999997f, 1e-30f})
        x2.push_back(x);
    for (int k = -149; k <= 127; ++k) x2.push_back(float(k));
    auto scan = [&](const char *what, const std::vector<float> &in, float (*fn)(float), double (*ref)(double)) {
        double worst = 0;
        float worst_x = 0;
        for (float x : in) {
            double err = ulp_error(fn(x), ref(double(x)));
            if (err > worst) worst = err, worst_x = x;
        }
        if (worst > 2.0) {
            std::ostringstream m;
            m << what << ": " << worst << " ulp at x = " << worst_x;
            f.add(m.str());
        }
    };
    scan("exp_f", xs, [](float x) { return rfk::exp_f(x); }, [](double x) { return std::exp(x); });
    scan("exp2_f", x2, [](float x) { return rfk::exp2_f(x); }, [](double x) { return std::exp2(x); });
    for (int k = -149; k <= 127; ++k)
        if (rfk::exp2_f(float(k)) != std::ldexp(1.0f, k)) f.add("exp2_f(" + std::to_string(k) + ") is not 2^" + std::to_string(k));
    if (rfk::exp2_f(-kInf) != 0.0f || rfk::exp2_f(kInf) != kInf || !std::isnan(rfk::exp2_f(kNaN)) || rfk::exp2_f(0.0f) != 1.0f)
        f.add("exp2_f special values (-inf, inf, NaN, 0)");
}

/** rfk::tanh_f (softcapping's 30·tanh(S/30) in the vector loops) against std::tanh in double: within
 *  2 ulp on a stride through every float from 0 to 11 (past it tanh rounds to 1) and their negatives,
 *  both sides of the branch at 0.625, ±0 and NaN passed through, ±inf and huge values to ±1. */
void check_scalar_tanh(Failures &f) {
    std::vector<float> xs = {0.625f, 0.62499994f, 0.62500006f, 1e-30f, 1e-45f, 9.0f, 9.1f, 20.0f, 1e30f, kInf};
    for (uint32_t b = 0; b < 0x41300000u; b += 97) {
        float x;
        std::memcpy(&x, &b, 4);
        xs.push_back(x);
    }
    double worst = 0;
    float worst_x = 0;
    for (float x : xs)
        for (float s : {x, -x}) {
            double err = ulp_error(rfk::tanh_f(s), std::tanh(double(s)));
            if (err > worst) worst = err, worst_x = s;
        }
    if (worst > 2.0) {
        std::ostringstream m;
        m << "tanh_f: " << worst << " ulp at x = " << worst_x;
        f.add(m.str());
    }
    if (!std::isnan(rfk::tanh_f(kNaN)) || !std::signbit(rfk::tanh_f(-0.0f)) || rfk::tanh_f(0.0f) != 0.0f ||
        rfk::tanh_f(kInf) != 1.0f || rfk::tanh_f(-kInf) != -1.0f)
        f.add("tanh_f special values (NaN, -0, 0, inf, -inf)");
}

/** The reference of exp_shift_sum_f32's argument: x*scale and the spec's subtraction, each rounded to float. */
float shifted_ref(float x, float scale, float m) {
    volatile float xs = x * scale;  // volatile: no contraction into an fma
    float xsv = xs;
    return (std::isinf(m) && xsv == m) ? xsv : xsv - m;
}

void check_exp_shift_sum(Failures &f) {
    Rng rng(11);
    struct Case {
        int64_t n;
        float scale, m;
        int special;  // 0 random, 1 fully masked row, 2 some -inf with m = -inf, 3 a NaN, 4 m = +inf rows
    };
    std::vector<Case> cases;
    for (int64_t n : {0, 1, 5, 15, 16, 17, 31, 32, 33, 47, 100, 1000, 8193}) {
        cases.push_back({n, 0.125f, 0.0f, 0});
        cases.push_back({n, 1.0f, 3.5f, 0});
        cases.push_back({n, 1.0f, -kInf, 1});
        cases.push_back({n, 1.0f, -kInf, 2});
        cases.push_back({n, 0.5f, 1.0f, 3});
        cases.push_back({n, 1.0f, kInf, 4});
    }
    for (const Case &c : cases) {
        Guarded<float> x(size_t(c.n)), y(size_t(c.n));
        for (int64_t i = 0; i < c.n; ++i) {
            float v = rng.uniform(-12.0f, 12.0f);
            if (c.special == 1 || (c.special == 2 && i % 3 == 0)) v = -kInf;
            if (c.special == 3 && i == c.n / 2) v = kNaN;
            if (c.special == 4 && i % 2 == 0) v = kInf;
            x[size_t(i)] = v;
        }
        float sum = rfk::exp_shift_sum_f32(x.data(), c.n, c.scale, c.m, y.data());
        double ref_sum = 0;
        bool has_nan = false, bad = false;
        for (int64_t i = 0; i < c.n && !bad; ++i) {
            float t = shifted_ref(x[size_t(i)], c.scale, c.m);
            double want = std::exp(double(t));
            has_nan = has_nan || std::isnan(want);
            ref_sum += want;
            if (ulp_error(y[size_t(i)], want) > 2.0) {
                std::ostringstream m;
                m << "exp_shift_sum_f32 (" << rfk::simd_level() << ") n=" << c.n << " special=" << c.special << ": y[" << i
                  << "] = " << y[size_t(i)] << " for x = " << x[size_t(i)] << ", want " << want;
                f.add(m.str());
                bad = true;
            }
        }
        bool sum_ok = has_nan ? std::isnan(sum)
                    : std::isinf(ref_sum) ? sum == kInf
                                          : std::fabs(double(sum) - ref_sum) <= (double(c.n) + 4) * 2 * kEps * ref_sum;
        if (!sum_ok && !bad) {
            std::ostringstream m;
            m << "exp_shift_sum_f32 (" << rfk::simd_level() << ") n=" << c.n << " special=" << c.special << ": sum " << sum
              << ", want " << ref_sum;
            f.add(m.str());
        }
    }
}

void check_rows(Failures &f) {
    Rng rng(23);
    for (int64_t n = 0; n <= 100; n += (n < 40 ? 1 : 13)) {
        for (int variant = 0; variant < 5; ++variant) {
            Guarded<float> x{size_t(n)};
            for (int64_t i = 0; i < n; ++i) x[size_t(i)] = variant == 3 ? -kInf : rng.uniform(-50.0f, 50.0f);
            int64_t nan_at = variant == 1 && n > 0 ? rng.below(n) : -1;
            if (nan_at >= 0) x[size_t(nan_at)] = kNaN;
            const float inits[] = {-kInf, 0.0f, 60.0f, kNaN, -kInf};
            float init = inits[variant];
            // max: exact, and NaN anywhere (or as init) gives NaN.
            float want_max = init;
            bool nan = std::isnan(init);
            for (int64_t i = 0; i < n; ++i) {
                nan = nan || std::isnan(x[size_t(i)]);
                if (x[size_t(i)] > want_max) want_max = x[size_t(i)];
            }
            float got_max = rfk::max_f32(x.data(), n, init);
            if (nan ? !std::isnan(got_max) : got_max != want_max) {
                std::ostringstream m;
                m << "max_f32 (" << rfk::simd_level() << ") n=" << n << " variant " << variant << ": " << got_max << ", want "
                  << (nan ? kNaN : want_max);
                f.add(m.str());
            }
            // sum: within n eps of the magnitude.
            double want_sum = 0, mag = 0;
            for (int64_t i = 0; i < n; ++i) want_sum += x[size_t(i)], mag += std::fabs(double(x[size_t(i)]));
            float got_sum = rfk::sum_f32(x.data(), n);
            bool sum_ok = std::isnan(want_sum) ? std::isnan(got_sum)
                        : std::isinf(want_sum) ? got_sum == float(want_sum)
                                               : std::fabs(double(got_sum) - want_sum) <= (double(n) + 2) * kEps * mag;
            if (!sum_ok) f.add("sum_f32 (" + std::string(rfk::simd_level()) + ") n=" + std::to_string(n));
            // scale: one rounding per element, bit-exact; must not touch past n (guard page).
            std::vector<float> before(x.data(), x.data() + n);
            rfk::scale_f32(x.data(), n, -0.3f);
            for (int64_t i = 0; i < n; ++i) {
                float want = before[size_t(i)] * -0.3f;
                if (std::memcmp(&want, &x[size_t(i)], 4) != 0 && !(std::isnan(want) && std::isnan(x[size_t(i)]))) {
                    f.add("scale_f32 (" + std::string(rfk::simd_level()) + ") n=" + std::to_string(n) + " element " + std::to_string(i));
                    break;
                }
            }
        }
    }
}

void check_topk(Failures &f) {
    Rng rng(31);
    for (int trial = 0; trial < 400; ++trial) {
        int64_t n = 1 + rng.below(40), k = 1 + rng.below(12);
        std::vector<std::pair<double, double>> offered;
        for (int64_t i = 0; i < n; ++i) {
            int64_t kind = rng.below(10);
            double v = kind == 0 ? std::nan("") : kind < 4 ? double(rng.below(3)) : double(rng.uniform(-5.0f, 5.0f));
            offered.push_back({v, double(i)});
        }
        if (trial % 2)
            for (int64_t i = n - 1; i > 0; --i) std::swap(offered[size_t(i)], offered[size_t(rng.below(i + 1))]);
        std::vector<double> v(size_t(k), -1.0), idx(size_t(k), -1.0);
        double len = 0;
        for (auto [val, at] : offered) rfk::topk_insert(v.data(), idx.data(), &len, k, val, at);
        std::vector<std::pair<double, double>> want = offered;
        std::stable_sort(want.begin(), want.end(), [](const auto &a, const auto &b) {
            return rfk::better(true, a.first, a.second, b.first, b.second);
        });
        int64_t expect = std::min<int64_t>(n, k);
        bool ok = int64_t(len) == expect;
        for (int64_t q = 0; ok && q < expect; ++q)
            ok = idx[size_t(q)] == want[size_t(q)].second;
        if (!ok) f.add("topk_insert n=" + std::to_string(n) + " k=" + std::to_string(k) + " trial " + std::to_string(trial));
    }
}

void check_all(Failures &f) {
    check_bf16_casts(f);
    for (Gemm g : {Gemm::NtF32, Gemm::NtBf16, Gemm::NtF32Bf16, Gemm::NnF32, Gemm::NnF32Bf16, Gemm::NtF32E4m3, Gemm::NtF32E5m2, Gemm::NtF32F16,
                   Gemm::NtF32AsBf16, Gemm::NnF32AsBf16}) check_float_gemm(g, f);
    check_e4m3_widening(f);
    check_s8_gemm(f);
    check_exp(f);
    check_scalar_exp(f);
    check_scalar_tanh(f);
    check_exp_shift_sum(f);
    check_rows(f);
    check_topk(f);
    check_threads(f);
    check_input_panels(f);
    check_input_a_panels(f);
}

}  // namespace simd_check

#if defined(RFK_SIMD_DRIVER)

int main() {
    simd_check::Failures f;
    simd_check::check_all(f);
    if (f.count) {
        std::printf("%d failures\n%s", f.count, f.text.c_str());
        return 1;
    }
    if (std::strcmp(rfk::tile_unit(), "none") == 0)
        std::printf("ok %s\n", rfk::simd_level());
    else
        std::printf("ok %s+%s\n", rfk::simd_level(), rfk::tile_unit());
    return 0;
}

#else

#include <gtest/gtest.h>

#include "ChildDriver.h"

namespace {

using simd_check::Failures;

TEST(SimdKernels, Bf16Casts) {
    Failures f;
    simd_check::check_bf16_casts(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, FloatGemmsMatchReference) {
    using simd_check::Gemm;
    for (Gemm g : {Gemm::NtF32, Gemm::NtBf16, Gemm::NtF32Bf16, Gemm::NnF32, Gemm::NnF32Bf16, Gemm::NtF32E4m3, Gemm::NtF32E5m2, Gemm::NtF32F16,
                   Gemm::NtF32AsBf16, Gemm::NnF32AsBf16}) {
        Failures f;
        simd_check::check_float_gemm(g, f);
        EXPECT_EQ(f.count, 0) << simd_check::gemm_name(g) << "\n" << f.text;
    }
}

TEST(SimdKernels, NarrowWeightWideningIsExact) {
    Failures f;
    simd_check::check_e4m3_widening(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, Int8GemmIsExact) {
    Failures f;
    simd_check::check_s8_gemm(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, ExpWithinTwoUlp) {
    Failures f;
    simd_check::check_exp(f);
    simd_check::check_scalar_exp(f);
    simd_check::check_exp_shift_sum(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, TanhWithinTwoUlp) {
    Failures f;
    simd_check::check_scalar_tanh(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, TopKInsertion) {
    Failures f;
    simd_check::check_topk(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, RowPrimitives) {
    Failures f;
    simd_check::check_rows(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

TEST(SimdKernels, ConcurrentCallsAgree) {
    Failures f;
    simd_check::check_threads(f);
    EXPECT_EQ(f.count, 0) << f.text;
}

/** This file built as the child driver with the generated kernels' flags: it must print "ok <level>"
 *  (or, with `run_it` false, only compile without warnings). */
void check_compiled_path(const std::vector<std::string> &flags, const std::vector<std::string> &cpu_flags,
                         const std::string &level, bool run_it = true) {
    rf::test::check_child_driver(REDFUSE_SOURCE_DIR "/tests/unit/runtime/simd_kernels_test.cpp",
                                 {"-std=c++17", "-O2", "-Wall", "-Wextra", "-DRFK_SIMD_DRIVER", "-pthread", "-I" REDFUSE_SOURCE_DIR "/src"},
                                 flags, cpu_flags, level, run_it);
}

TEST(SimdKernels, Avx512PathMatchesReference) {
    check_compiled_path({"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mavx512vnni", "-mfma",
                         "-mavx2", "-mf16c"},
                        {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni", "fma", "avx2", "f16c"},
                        "avx512");
}

// Cascade Lake / Ice Lake: VNNI (the int8 kernels, dot and outer-product forms) without AVX512_BF16.
TEST(SimdKernels, Avx512VnniWithoutBf16MatchesReference) {
    check_compiled_path({"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma", "-mavx2", "-mf16c"},
                        {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "fma", "avx2", "f16c"}, "avx512");
}

TEST(SimdKernels, Avx512WithoutBf16OrVnniMatchesReference) {
    check_compiled_path({"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mavx2", "-mf16c"},
                        {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "avx2", "f16c"}, "avx512");
}

const std::vector<std::string> kAvx512Bf16Flags = {"-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16",
                                                   "-mavx512vnni", "-mfma", "-mavx2", "-mf16c"};
const std::vector<std::string> kAvx512Bf16CpuFlags = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
                                                      "avx512_vnni", "fma", "avx2", "f16c"};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string> &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// The AMX tile GEMMs on the software model of the tile instructions: packing, tails, orientations,
// the transposed stores and the dispatch, everything but the instructions, on any AVX512_BF16 CPU.
TEST(SimdKernels, AmxEmulatedPathMatchesReference) {
    check_compiled_path(plus(kAvx512Bf16Flags, {"-DRFK_AMX_EMULATE"}), kAvx512Bf16CpuFlags, "avx512+amx-emulated");
}

// The same source with the real tile instructions: compiled everywhere, run where the CPU has AMX.
TEST(SimdKernels, AmxPathCompiles) {
    check_compiled_path(plus(kAvx512Bf16Flags, {"-mamx-tile", "-mamx-bf16", "-mamx-int8"}), {}, "avx512+amx", false);
}

TEST(SimdKernels, AmxPathMatchesReference) {
    check_compiled_path(plus(kAvx512Bf16Flags, {"-mamx-tile", "-mamx-bf16", "-mamx-int8"}),
                        plus(kAvx512Bf16CpuFlags, {"amx_tile", "amx_bf16", "amx_int8"}), "avx512+amx");
}

TEST(SimdKernels, Avx2PathMatchesReference) {
    check_compiled_path({"-mavx2", "-mfma", "-mf16c"}, {"fma", "avx2", "f16c"}, "avx2");
}

}  // namespace

#endif
