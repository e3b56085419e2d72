/** \file kernel_threads_test.cpp
 * A CPU kernel starts its worker threads once: a call whose rows fill one row block (a weight GEMM at
 * M = 16), whose tile GEMM splits its columns over the threads, starts no thread of its own.
 *
 * pthread_create is interposed here (the test executable's definition comes first in the lookup of
 * libgomp's call) and counts the threads started while a call runs.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "driver/Compiler.h"
#include "driver/Kernel.h"

namespace {
std::atomic<int> g_threads_started{0};
}

extern "C" int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    using Create = int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    static Create real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
    g_threads_started.fetch_add(1);
    return real(thread, attr, start, arg);
}

namespace rf {
namespace {

std::string example(const std::string &name) { return std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf"; }

TEST(KernelThreads, OneRowBlockGemmStartsNoThreadPerCall) {
    ArenaScope arena;
    Options o;
    o.threads = 2;  // the split needs two workers, whatever this machine has
    const int64_t M = 16, N = 1024, K = 4096;  // one row block; M·N·K = 2^26, over the split threshold
    o.sizes = {{"M", M}, {"N", N}, {"K", K}};  // the schedule: one 16-row block, K in one tile
    Kernel k = compile(example("quant_gemm_int8"), make_target(TargetKind::Cpu), o);
    std::vector<uint16_t> a(size_t(M * K));
    std::vector<int8_t> w(size_t(N * K));
    std::vector<float> sw(size_t(N), 0.01f);
    std::vector<uint16_t> c(size_t(M * N), 0), first(size_t(M * N), 0);
    for (size_t i = 0; i < a.size(); i++) a[i] = uint16_t(0x3f80 + i % 61);  // bf16 1.0 .. ~1.5
    for (size_t i = 0; i < w.size(); i++) w[i] = int8_t(int(i % 251) - 125);
    auto call = [&](std::vector<uint16_t> &out) {
        k({{a.data(), DType::bf16, {M, K}}, {w.data(), DType::i8, {N, K}}, {sw.data(), DType::f32, {N}}},
          {{out.data(), DType::bf16, {M, N}}});
    };
    call(first);  // the first call may start the OpenMP pool
    // With the GEMM inside even an inactive parallel region, its column split was a nested team that
    // libgomp started with new threads on every call (one per call and extra worker).
    g_threads_started = 0;
    for (int i = 0; i < 3; i++) call(c);
    EXPECT_EQ(g_threads_started.load(), 0);
    EXPECT_EQ(std::memcmp(c.data(), first.data(), c.size() * 2), 0);
    bool any_nonzero = false;
    for (uint16_t v : c) any_nonzero = any_nonzero || (v & 0x7fff) != 0;
    EXPECT_TRUE(any_nonzero);
}

}  // namespace
}  // namespace rf
