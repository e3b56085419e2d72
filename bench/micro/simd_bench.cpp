// simd_bench: achieved GFLOP/s (GOP/s, GB/s) of the redfuse_simd.h primitives per kernel and shape, on one
// core (or one independent copy per thread with --threads), against this core's measured FMA/dot peaks.
//
// Build: g++ -std=c++17 -O3 -march=native -fopenmp bench/micro/simd_bench.cpp -o simd_bench
//        (add -DRFK_BENCH_LIBMVEC ... -lmvec for a row with glibc's vector expf, for comparison)
// Usage: simd_bench [--threads N] [--seconds S]   (see bench/micro/README.md)
//
// Each case runs on the same inputs again and again (operands stay in cache, as attention tiles do) in
// batches of about 20 ms; the best batch counts. FLOPs are 2*M*N*K for the GEMMs (useful work: padding
// and packing are not counted), 2 per element-pair for the peaks; GB/s counts bytes read + written once.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../src/runtime/kernels/redfuse_simd.h"
#include "../../src/runtime/kernels/redfuse_simd_gemm.h"
#include "../../src/runtime/kernels/redfuse_simd_gemm_nn.h"
#include "../../src/runtime/kernels/redfuse_simd_int8.h"
#include "../../src/runtime/kernels/redfuse_simd_bf16.h"
#include "../../src/runtime/kernels/redfuse_simd_amx.h"

// GCC 12's false positive on _mm512_undefined_* inside AVX-512 reductions (see redfuse_simd.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(RFK_BENCH_LIBMVEC) && defined(__AVX512F__)
// glibc's libmvec exp, for comparison only: build with -DRFK_BENCH_LIBMVEC ... -lmvec.
extern "C" __m512 _ZGVeN16v_expf(__m512);
#endif

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int g_threads = 1;
double g_seconds = 0.3;

/** Best seconds per call of fn, each thread calling its own copy (made by `make`) at the same time. The
 *  master thread calibrates the batch size and decides when to stop, so every thread takes the same path
 *  through the barriers. */
double time_per_call(const std::function<std::function<void()>()> &make) {
    std::vector<std::function<void()>> fns;
    for (int t = 0; t < g_threads; ++t) fns.push_back(make());
    fns[0]();  // warm-up: scratch, caches
    long reps = 0;
    double t0 = now();
    while (now() - t0 < 0.005) fns[0](), ++reps;
    const long batch = std::max(1L, long(double(reps) * 0.02 / (now() - t0)));
    double best = 1e30, start = now();
    bool done = false;
#pragma omp parallel num_threads(g_threads)
    {
        std::function<void()> &fn = fns[size_t(omp_get_thread_num())];
        fn();
        for (;;) {
#pragma omp barrier
#pragma omp master
            done = now() - start >= g_seconds;
#pragma omp barrier
            if (done) break;
            double b0 = now();
            for (long r = 0; r < batch; ++r) fn();
#pragma omp barrier
#pragma omp master
            best = std::min(best, (now() - b0) / double(batch));
        }
    }
    return best;
}

/** Aggregate rate in G per second of `work` done by every thread in `seconds` per call. */
double rate(double work, double seconds) { return g_threads * work / seconds * 1e-9; }

float *floats(size_t n, float lo, float hi, unsigned seed) {
    float *p = static_cast<float *>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64));
    srand(seed);
    for (size_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * float(rand()) / float(RAND_MAX);
    return p;
}
uint16_t *bf16s(size_t n, unsigned seed) {
    float *f = floats(n, -1, 1, seed);
    uint16_t *p = static_cast<uint16_t *>(std::aligned_alloc(64, (n * 2 + 63) / 64 * 64));
    for (size_t i = 0; i < n; ++i) p[i] = rfk::f32_to_bf16(f[i]);
    std::free(f);
    return p;
}
int8_t *int8s(size_t n, unsigned seed) {
    int8_t *p = static_cast<int8_t *>(std::aligned_alloc(64, (n + 63) / 64 * 64));
    srand(seed);
    for (size_t i = 0; i < n; ++i) p[i] = int8_t(rand() % 256 - 128);
    return p;
}

// ---- per-core peaks, measured the way bench/machine/machine_limits.cpp does (12 independent chains) ----
#if defined(__AVX512F__)
template <int kWhich>  // 0: f32 FMA, 1: bf16 dot, 2: int8 dot
void peak_loop() {
    volatile int seed = 1;
    __m512 x = _mm512_set1_ps(0.999f * float(seed)), y = _mm512_set1_ps(1e-3f);
    __m512i xi = _mm512_set1_epi32(0x01010101 * seed), yi = _mm512_set1_epi32(0x02020202);
    __m512 a[12];
    __m512i ai[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i)), ai[i] = _mm512_set1_epi32(i);
    for (int it = 0; it < 4096; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) {
            if constexpr (kWhich == 0) a[i] = _mm512_fmadd_ps(a[i], x, y);
#if defined(__AVX512BF16__)
            if constexpr (kWhich == 1) a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)xi, (__m512bh)yi);
#endif
#if defined(__AVX512VNNI__)
            if constexpr (kWhich == 2) ai[i] = _mm512_dpbusd_epi32(ai[i], xi, yi);
#endif
        }
    }
    float sink = 0;
    for (int i = 0; i < 12; ++i) sink += _mm512_reduce_add_ps(a[i]) + float(_mm512_reduce_add_epi32(ai[i]));
    volatile float keep = sink;
    (void)keep;
}
#endif

double peak(int which) {
#if defined(__AVX512F__)
    const double ops_per_instr[] = {32, 64, 128};
    void (*loops[])() = {peak_loop<0>, peak_loop<1>, peak_loop<2>};
    auto make = [&]() -> std::function<void()> { return loops[which]; };
    return rate(4096.0 * 12 * ops_per_instr[which], time_per_call(make));
#else
    (void)which;
    return 0;
#endif
}

struct Row {
    std::string kernel, shape, unit;
    double rate, peak;
};
std::vector<Row> rows;

void report(const std::string &kernel, const std::string &shape, double rate, const char *unit, double peak_rate) {
    rows.push_back({kernel, shape, unit, rate, peak_rate});
    if (peak_rate > 0)
        std::printf("%-22s %-22s %9.1f %-7s %5.0f%%\n", kernel.c_str(), shape.c_str(), rate, unit, 100 * rate / peak_rate);
    else
        std::printf("%-22s %-22s %9.1f %-7s\n", kernel.c_str(), shape.c_str(), rate, unit);
    std::fflush(stdout);
}

std::string mnk(int64_t M, int64_t N, int64_t K) {
    return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

enum class Nt { F32, Bf16, F32Bf16, F32AsBf16 };

void bench_nt(Nt kind, int64_t M, int64_t N, int64_t K, double peak_rate) {
    auto make = [=]() -> std::function<void()> {
        float *A = floats(size_t(M * K), -1, 1, 1), *B = floats(size_t(N * K), -1, 1, 2), *C = floats(size_t(M * N), 0, 0, 3);
        uint16_t *Ah = bf16s(size_t(M * K), 4), *Bh = bf16s(size_t(N * K), 5);
        return [=]() {
            if (kind == Nt::F32) rfk::gemm_nt_f32(M, N, K, 0.125f, A, K, B, K, C, N, false);
            if (kind == Nt::Bf16) rfk::gemm_nt_bf16(M, N, K, 0.125f, Ah, K, Bh, K, C, N, false);
            if (kind == Nt::F32Bf16) rfk::gemm_nt_f32_bf16(M, N, K, 0.125f, A, K, Bh, K, C, N, false);
            if (kind == Nt::F32AsBf16) rfk::gemm_nt_f32_as_bf16(M, N, K, 0.125f, A, K, Bh, K, C, N, false);
        };
    };
    const char *names[] = {"gemm_nt_f32", "gemm_nt_bf16", "gemm_nt_f32_bf16", "gemm_nt_f32_as_bf16"};
    report(names[int(kind)], mnk(M, N, K), rate(2.0 * M * N * K, time_per_call(make)), "GFLOP/s", peak_rate);
}

enum class Nn { F32, F32Bf16, F32AsBf16 };

void bench_nn(Nn kind, int64_t M, int64_t N, int64_t K, double peak_rate) {
    auto make = [=]() -> std::function<void()> {
        float *P = floats(size_t(M * K), 0, 1, 1), *V = floats(size_t(K * N), -1, 1, 2), *C = floats(size_t(M * N), 0, 0, 3);
        uint16_t *Vh = bf16s(size_t(K * N), 5);
        return [=]() {
            if (kind == Nn::F32Bf16) rfk::gemm_nn_acc_f32_bf16(M, N, K, P, K, Vh, N, C, N);
            if (kind == Nn::F32AsBf16) rfk::gemm_nn_acc_f32_as_bf16(M, N, K, P, K, Vh, N, C, N);
            if (kind == Nn::F32) rfk::gemm_nn_acc_f32(M, N, K, P, K, V, N, C, N);
        };
    };
    const char *names[] = {"gemm_nn_acc_f32", "gemm_nn_acc_f32_bf16", "gemm_nn_acc_f32_as_bf16"};
    report(names[int(kind)], mnk(M, N, K), rate(2.0 * M * N * K, time_per_call(make)), "GFLOP/s", peak_rate);
}

void bench_s8(int64_t M, int64_t N, int64_t K, double peak_rate) {
    auto make = [=]() -> std::function<void()> {
        int8_t *A = int8s(size_t(M * K), 1), *B = int8s(size_t(N * K), 2);
        int32_t *C = static_cast<int32_t *>(std::aligned_alloc(64, size_t((M * N * 4 + 63) / 64 * 64)));
        return [=]() { rfk::gemm_nt_s8s8_s32(M, N, K, A, K, B, K, C, N, false); };
    };
    report("gemm_nt_s8s8_s32", mnk(M, N, K), rate(2.0 * M * N * K, time_per_call(make)), "GOP/s", peak_rate);
}

void bench_rows(int64_t n) {
    std::string shape = "n=" + std::to_string(n);
    auto run = [&](const char *name, double bytes_per_elem, std::function<void(float *, float *)> op) {
        auto make = [=]() -> std::function<void()> {
            float *x = floats(size_t(n), -20, 5, 7), *y = floats(size_t(n), 0, 0, 8);
            return [=]() { op(x, y); };
        };
        report(name, shape, rate(bytes_per_elem * double(n), time_per_call(make)), "GB/s", 0);
    };
    volatile float sink = 0;
    run("exp_shift_sum_f32", 8, [&](float *x, float *y) { sink = rfk::exp_shift_sum_f32(x, n, 0.125f, 1.0f, y); });
    run("exp_f32", 8, [&](float *x, float *y) { rfk::exp_f32(x, n, y); });
#if defined(RFK_BENCH_LIBMVEC) && defined(__AVX512F__)
    run("exp (glibc libmvec)", 8, [&](float *x, float *y) {
            for (int64_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _ZGVeN16v_expf(_mm512_loadu_ps(x + i)));
        });
#endif
    run("max_f32", 4, [&](float *x, float *) { sink = rfk::max_f32(x, n, -1e30f); });
    run("sum_f32", 4, [&](float *x, float *) { sink = rfk::sum_f32(x, n); });
    run("scale_f32", 8, [&](float *x, float *) { rfk::scale_f32(x, n, 1.0000001f); });
}

}  // namespace

int main(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) g_threads = std::atoi(argv[++i]);
        else if (a == "--seconds" && i + 1 < argc) g_seconds = std::atof(argv[++i]);
        else {
            std::fprintf(stderr, "usage: simd_bench [--threads N] [--seconds S]\n");
            return 2;
        }
    }
    double pf32 = peak(0), pbf16 = 0, ps8 = 0;
#if defined(__AVX512BF16__)
    pbf16 = peak(1);
#endif
#if defined(__AVX512VNNI__)
    ps8 = peak(2);
#endif
    std::printf("redfuse_simd.h path: %s, tile unit: %s, %d thread(s), each on its own copy of the operands\n", rfk::simd_level(),
                rfk::tile_unit(), g_threads);
    std::printf("peaks (same threads): f32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s, int8 dot %.0f GOP/s\n\n", pf32, pbf16, ps8);
    std::printf("%-22s %-22s %17s %6s\n", "kernel", "shape", "rate", "%peak");

    for (int64_t K : {64, 128})
        for (int64_t N : {64, 128, 256}) bench_nt(Nt::F32, 64, N, K, pf32);
    bench_nt(Nt::F32, 128, 256, 128, pf32);
    bench_nt(Nt::F32, 256, 256, 256, pf32);
    for (int64_t M : {1, 4, 8, 16}) bench_nt(Nt::F32, M, 1024, 128, pf32);
    for (int64_t K : {64, 128, 256}) bench_nn(Nn::F32, 64, 128, K, pf32);
    bench_nn(Nn::F32, 128, 64, 256, pf32);
    bench_nn(Nn::F32, 128, 128, 256, pf32);
    for (int64_t M : {1, 4}) bench_nn(Nn::F32, M, 128, 1024, pf32);

    for (int64_t K : {64, 128})
        for (int64_t N : {64, 128, 256}) bench_nt(Nt::Bf16, 64, N, K, pbf16 > 0 ? pbf16 : pf32);
    bench_nt(Nt::Bf16, 256, 256, 256, pbf16 > 0 ? pbf16 : pf32);
    for (int64_t M : {1, 4}) bench_nt(Nt::Bf16, M, 1024, 128, pbf16 > 0 ? pbf16 : pf32);
    for (int64_t N : {64, 256}) bench_nt(Nt::F32Bf16, 64, N, 128, pf32);
    bench_nt(Nt::F32Bf16, 4, 4096, 1024, pf32);
    for (int64_t K : {64, 256}) bench_nn(Nn::F32Bf16, 64, 128, K, pf32);
    bench_nn(Nn::F32Bf16, 4, 128, 1024, pf32);
    // Float tiles rounded to bf16 (attention's P·V, RMSNorm->GEMM's X*g): against the bf16 peak.
    double pb = pbf16 > 0 ? pbf16 : pf32;
    for (int64_t N : {64, 128}) bench_nn(Nn::F32AsBf16, 32, N, 256, pb);
    bench_nn(Nn::F32AsBf16, 64, 128, 256, pb);
    bench_nt(Nt::F32AsBf16, 32, 256, 64, pb);
    bench_nt(Nt::F32AsBf16, 128, 4096, 4096, pb);
    bench_nt(Nt::Bf16, 128, 4096, 4096, pb);

    for (int64_t M : {16, 64}) bench_s8(M, 256, 4096, ps8);
    bench_s8(1, 256, 4096, ps8);
    bench_s8(128, 4096, 4096, ps8);

    bench_rows(8192);
    return 0;
}
