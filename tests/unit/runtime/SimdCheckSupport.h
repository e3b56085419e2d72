/** \file SimdCheckSupport.h
 * What the checks of simd_kernels_test.cpp share: a failure log, buffers that end at an inaccessible
 * page (a read past the end crashes), a deterministic RNG and GEMM shapes' descriptions. Included by
 * that file in its gtest build and in its child-driver builds (so: no gtest, no redfuse headers but
 * the kernel texts it includes first).
 */
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

namespace simd_check {

#if defined(RFK_SIMD_DRIVER)
constexpr bool kThorough = true;  // -O2 child process: the full shape set and a denser exp scan
#else
constexpr bool kThorough = false;  // may run at -O0 under sanitizers
#endif


const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
const double kEps = std::ldexp(1.0, -24);

/** Failure messages, the first few kept in full. */
struct Failures {
    int count = 0;
    std::string text;
    void add(const std::string &what) {
        if (++count <= 12) text += what + "\n";
    }
};

/** A buffer of n elements that ends exactly at a PROT_NONE page. */
template <typename T>
class Guarded {
public:
    explicit Guarded(size_t n) {
        size_t page = size_t(sysconf(_SC_PAGESIZE)), bytes = n * sizeof(T);
        size_t data_pages = (bytes + page - 1) / page;
        len_ = (data_pages + 1) * page;
        void *base = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) std::abort();
        base_ = static_cast<char *>(base);
        mprotect(base_ + data_pages * page, page, PROT_NONE);
        data_ = reinterpret_cast<T *>(base_ + data_pages * page - bytes);
    }
    ~Guarded() { munmap(base_, len_); }
    Guarded(const Guarded &) = delete;
    Guarded &operator=(const Guarded &) = delete;
    T *data() { return data_; }
    T &operator[](size_t i) { return data_[i]; }

private:
    char *base_;
    size_t len_;
    T *data_;
};

/** splitmix64: deterministic and fast at -O0. */
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) * 0x1p-24f; }
    int64_t below(int64_t n) { return int64_t(next() % uint64_t(n)); }
};

std::string describe(const char *fn, int64_t M, int64_t N, int64_t K, bool acc) {
    std::ostringstream s;
    s << fn << " M=" << M << " N=" << N << " K=" << K << " accumulate=" << acc << " (" << rfk::simd_level() << ")";
    return s.str();
}

struct Shape {
    int64_t M, N, K;
};

}  // namespace simd_check
