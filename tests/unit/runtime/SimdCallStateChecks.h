/** \file SimdCallStateChecks.h
 * Checks of the state the tile GEMMs keep between calls (simd_kernels_test.cpp includes this after the
 * kernel headers): per-thread scratch under two threads, and the panels kept from kernel inputs
 * within one input_epoch (AMX's, f32's on every level, and bf16 inputs' widened panels without a bf16 unit).
 */
#pragma once

#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "SimdCheckSupport.h"

namespace simd_check {

/** Two threads running packed GEMMs at once (each with its own thread_local scratch) match one thread. */
void check_threads(Failures &f) {
    const int64_t M = 40, N = 96, K = 300;
    std::vector<float> A(size_t(M * K)), B(size_t(N * K));
    Rng rng(77);
    for (float &v : A) v = rng.uniform(-1, 1);
    for (float &v : B) v = rng.uniform(-1, 1);
    std::vector<float> want(size_t(M * N));
    rfk::gemm_nt_f32(M, N, K, 1.0f, A.data(), K, B.data(), K, want.data(), N, false);
    bool same[2] = {true, true};
    auto worker = [&](int t) {
        std::vector<float> C(size_t(M * N));
        for (int rep = 0; rep < 30; ++rep) {
            rfk::gemm_nt_f32(M, N - 16 * t, K, 1.0f, A.data(), K, B.data(), K, C.data(), N, false);
            for (int64_t i = 0; i < M; ++i)
                same[t] = same[t] && std::memcmp(&C[size_t(i * N)], &want[size_t(i * N)], size_t(N - 16 * t) * 4) == 0;
        }
    };
    std::thread other(worker, 1);
    worker(0);
    other.join();
    if (!same[0] || !same[1]) f.add(std::string("gemm_nt_f32 (") + rfk::simd_level() + ") differs when two threads run it at once");
}

/** The *_input_b / *_input_v GEMMs (B or V a kernel input, whose panels a thread keeps within one
 *  input_epoch; A marked an input too, as attention's query block) equal the plain GEMMs: on a first call, on a repeated call
 *  (panels reused), and after the operands changed in place and the epoch moved on, as each generated
 *  kernel entry moves it. */
void check_input_panels(Failures &f) {
    const int64_t M = 64, N = 96, K = 128;
    Rng rng(91);
    std::vector<uint16_t> A(size_t((M + 3) * K)), B(size_t(N * K));
    std::vector<float> P(size_t(M * N)), Af(size_t(M * K)), Bf(size_t(N * K));
    for (float &v : P) v = rng.uniform(0, 1);
    for (float &v : Af) v = rng.uniform(-1, 1);
    auto fill_inputs = [&] {
        for (uint16_t &v : A) v = rfk::f32_to_bf16(rng.uniform(-1, 1));
        for (uint16_t &v : B) v = rfk::f32_to_bf16(rng.uniform(-1, 1));
        for (float &v : Bf) v = rng.uniform(-1, 1);
    };
    auto compare = [&](const char *what) {
        // bf16 (panels kept by AMX, and widened to f32 without a bf16 unit), overwriting and
        // accumulating, on all of B and on its last N - 5 rows (another operand: a tile of the same
        // input at another offset), at M rows and at 8 (decode's query heads: not kept for bf16); QK^T
        // with A an input too, also 3 rows on (another operand).
        for (int64_t rows : {M, int64_t{8}})
            for (int64_t skip : {int64_t{0}, int64_t{5}})
                for (bool acc : {false, true}) {
                    const std::string where = std::string(what) + " (M=" + std::to_string(rows) + ", skip " + std::to_string(skip) + ")";
                    std::vector<float> want(size_t(rows * N), 0.25f), got(size_t(rows * N), 0.25f);
                    rfk::gemm_nt_bf16(rows, N - skip, K, 0.5f, A.data(), K, B.data() + skip * K, K, want.data(), N, acc);
                    rfk::gemm_nt_bf16_input_b(rows, N - skip, K, 0.5f, A.data(), K, B.data() + skip * K, K, got.data(), N, acc);
                    if (std::memcmp(want.data(), got.data(), want.size() * 4) != 0) f.add("gemm_nt_bf16_input_b differs " + where);
                    for (int64_t a_off : {int64_t{0}, int64_t{3}}) {
                        const uint16_t *a = A.data() + a_off * K;
                        std::vector<float> w(size_t(rows * N), 0.25f), g(size_t(rows * N), 0.25f);
                        rfk::gemm_nt_bf16(rows, N - skip, K, 0.5f, a, K, B.data() + skip * K, K, w.data(), N, acc);
                        rfk::gemm_nt_bf16_input_b(rows, N - skip, K, 0.5f, a, K, B.data() + skip * K, K, g.data(), N, acc, true);
                        if (std::memcmp(w.data(), g.data(), w.size() * 4) != 0)
                            f.add("gemm_nt_bf16_input_b with A an input differs " + where + " (A " + std::to_string(a_off) + " rows on)");
                    }
                    // P·V with V = B read as N - skip rows of K columns (acc: a second, accumulating call).
                    std::vector<float> want_pv(size_t(rows * K), 0.5f), got_pv(size_t(rows * K), 0.5f);
                    for (int rep = 0; rep < (acc ? 2 : 1); ++rep) {
                        rfk::gemm_nn_acc_f32_as_bf16(rows, K, N - skip, P.data(), N, B.data() + skip * K, K, want_pv.data(), K);
                        rfk::gemm_nn_acc_f32_as_bf16_input_v(rows, K, N - skip, P.data(), N, B.data() + skip * K, K, got_pv.data(), K);
                    }
                    if (std::memcmp(want_pv.data(), got_pv.data(), want_pv.size() * 4) != 0)
                        f.add("gemm_nn_acc_f32_as_bf16_input_v differs " + where);
                }
        // f32 (panels kept on every SIMD level), overwriting and accumulating, on all of B and on
        // its last N - 5 rows (another operand: a tile of the same input at another offset).
        for (int64_t skip : {int64_t{0}, int64_t{5}})
            for (bool acc : {false, true}) {
                std::vector<float> w(size_t(M * N), 0.25f), g(size_t(M * N), 0.25f);
                rfk::gemm_nt_f32(M, N - skip, K, 0.5f, Af.data(), K, Bf.data() + skip * K, K, w.data(), N, acc);
                rfk::gemm_nt_f32_input_b(M, N - skip, K, 0.5f, Af.data(), K, Bf.data() + skip * K, K, g.data(), N, acc);
                if (std::memcmp(w.data(), g.data(), w.size() * 4) != 0) f.add(std::string("gemm_nt_f32_input_b differs ") + what);
                // P·V with V = Bf read as N - skip rows of K columns (acc: a second, accumulating call).
                std::vector<float> wv(size_t(M * K), 0.5f), gv(size_t(M * K), 0.5f);
                for (int rep = 0; rep < (acc ? 2 : 1); ++rep) {
                    rfk::gemm_nn_acc_f32(M, K, N - skip, P.data(), N, Bf.data() + skip * K, K, wv.data(), K);
                    rfk::gemm_nn_acc_f32_input_v(M, K, N - skip, P.data(), N, Bf.data() + skip * K, K, gv.data(), K);
                }
                if (std::memcmp(wv.data(), gv.data(), wv.size() * 4) != 0) f.add(std::string("gemm_nn_acc_f32_input_v differs ") + what);
            }
    };
    fill_inputs();
    rfk::input_epoch.fetch_add(1);
    compare("on the first call");
    compare("on a repeated call");
    fill_inputs();
    rfk::input_epoch.fetch_add(1);
    compare("after A and B changed in place and the epoch moved on");
}

/** gemm_nt_bf16 with A a kernel input (`a_input`: the B-in-place form keeps A's pair panels within one
 *  input_epoch) equals the plain call: first call, a second call on the same A with another B (panels
 *  reused), the same input at another row offset (another operand), and A changed in place after the
 *  epoch moved on. Shapes of that form: 32-row panels (M = 64, odd K) and 16-row ones over two row blocks
 *  (M = 130 > kBInPlaceMC). */
void check_input_a_panels(Failures &f) {
    Rng rng(93);
    for (auto [M, N, K] : {std::array<int64_t, 3>{64, 160, 515}, std::array<int64_t, 3>{130, 272, 515}}) {
        const int64_t rows = M + 3;
        std::vector<uint16_t> A(size_t(rows * K)), B(size_t(N * K)), B2(size_t(N * K));
        auto fill = [&](std::vector<uint16_t> &v) {
            for (uint16_t &x : v) x = rfk::f32_to_bf16(rng.uniform(-1, 1));
        };
        auto compare = [&](const std::string &what, const uint16_t *a, const std::vector<uint16_t> &b, bool input_b) {
            std::vector<float> want(size_t(M * N), 0.5f), got(size_t(M * N), 0.5f);
            rfk::gemm_nt_bf16(M, N, K, 0.75f, a, K, b.data(), K, want.data(), N, true);
            if (input_b) rfk::gemm_nt_bf16_input_b(M, N, K, 0.75f, a, K, b.data(), K, got.data(), N, true, true);
            else rfk::gemm_nt_bf16(M, N, K, 0.75f, a, K, b.data(), K, got.data(), N, true, true);
            if (std::memcmp(want.data(), got.data(), want.size() * 4) != 0)
                f.add("gemm_nt_bf16 with A an input differs " + what + " (M=" + std::to_string(M) + ")");
        };
        fill(A), fill(B), fill(B2);
        rfk::input_epoch.fetch_add(1);
        compare("on the first call", A.data(), B, false);
        compare("on a call with another B", A.data(), B2, true);
        compare("on the same input 3 rows on", A.data() + 3 * K, B, false);
        fill(A);
        rfk::input_epoch.fetch_add(1);
        compare("after A changed in place and the epoch moved on", A.data(), B, true);
    }
}

}  // namespace simd_check
