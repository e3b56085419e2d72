/** \file host_memory_test.cpp
 * The huge-page advice on host buffers (runtime/HostMemory.h): which part of a buffer it covers,
 * which buffers get none, and that a CPU Kernel gives it to its outputs unless Options says not to.
 */
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "driver/Environment.h"
#include "driver/HostTarget.h"
#include "driver/Kernel.h"
#include "runtime/HostMemory.h"
#include "support/Error.h"

namespace rf {
namespace {

bool thp_in_kernel() { return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled"); }

/** The VmFlags of the mapping that holds address a (/proc/self/smaps), or "" when none does. */
std::string vm_flags_at(const void *a) {
    std::ifstream f("/proc/self/smaps");
    std::string line;
    bool inside = false;
    uintptr_t x = reinterpret_cast<uintptr_t>(a);
    while (std::getline(f, line)) {
        unsigned long lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
            inside = x >= lo && x < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0) return line;
    }
    return "";
}

bool advised(const void *a) { return vm_flags_at(a).find(" hg") != std::string::npos; }

/** An anonymous mapping, unmapped at the end of the scope. */
struct Mapping {
    explicit Mapping(size_t n) : bytes(n) {
        void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        data = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
    }
    ~Mapping() {
        if (data) munmap(data, bytes);
    }
    size_t bytes;
    char *data;
};

constexpr uintptr_t kHuge = uintptr_t(2) << 20;
char *next_huge(char *p) { return reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1)); }

TEST(HostMemory, AdvisesTheAlignedInteriorOfLargeBuffersOnly) {
    if (!thp_in_kernel()) GTEST_SKIP() << "no transparent huge pages in this kernel";
    Mapping m(24u << 20);
    ASSERT_NE(m.data, nullptr);
    char *begin = next_huge(m.data) + 4096;  // not aligned: the advice starts at the next 2 MiB boundary
    advise_huge_pages(begin, 12u << 20);
    EXPECT_FALSE(advised(begin)) << "the part before the first 2 MiB boundary: " << vm_flags_at(begin);
    EXPECT_TRUE(advised(next_huge(begin))) << vm_flags_at(next_huge(begin));
    EXPECT_TRUE(advised(next_huge(begin) + (8u << 20) - 1));
    EXPECT_FALSE(advised(begin + (12u << 20))) << "past the buffer's end";

    Mapping small(8u << 20);
    ASSERT_NE(small.data, nullptr);
    advise_huge_pages(next_huge(small.data), kHugePageAdviceBytes - 1);
    EXPECT_FALSE(advised(next_huge(small.data))) << "a buffer under 4 MiB gets no advice";
    advise_huge_pages(nullptr, 1u << 30);  // nothing to advise, no crash
}

TEST(HostMemory, CpuKernelsAdviseTheirLargeOutputsUnlessTold) {
    if (!thp_in_kernel()) GTEST_SKIP() << "no transparent huge pages in this kernel";
    const int64_t R = 1024, C = 2048;  // an 8 MiB f32 output
    std::string spec = std::string(REDFUSE_SOURCE_DIR) + "/examples/softmax.rf";
    std::vector<float> x(size_t(R * C));
    for (size_t i = 0; i < x.size(); i++) x[i] = float(i % 97) * 0.01f;
    for (bool on : {true, false}) {
        Options o;
        o.huge_page_outputs = on;
        Kernel k = compile(spec, make_target(TargetKind::Cpu), o);
        Mapping y(size_t(R * C) * sizeof(float) + kHuge);
        ASSERT_NE(y.data, nullptr);
        float *out = reinterpret_cast<float *>(next_huge(y.data));
        k({{x.data(), DType::f32, {R, C}}}, {{out, DType::f32, {R, C}}});
        EXPECT_EQ(advised(out), on) << vm_flags_at(out);
        double row = 0;
        for (int64_t c = 0; c < C; c++) row += out[c];
        EXPECT_NEAR(row, 1.0, 1e-4);
    }
}

TEST(HostMemory, TheEnvironmentTurnsTheAdviceOffOrIsAnError) {
    EXPECT_TRUE(Options{}.huge_page_outputs);
    setenv("REDFUSE_HUGE_PAGES", "0", 1);
    EXPECT_FALSE(with_environment(Options{}).huge_page_outputs);
    setenv("REDFUSE_HUGE_PAGES", "1", 1);
    EXPECT_TRUE(with_environment(Options{}).huge_page_outputs);
    setenv("REDFUSE_HUGE_PAGES", "yes", 1);
    try {
        with_environment(Options{});
        ADD_FAILURE() << "REDFUSE_HUGE_PAGES=yes was accepted";
    } catch (const UserError &e) {
        EXPECT_NE(std::string(e.what()).find("REDFUSE_HUGE_PAGES: expected 0 or 1, got 'yes'"), std::string::npos) << e.what();
    }
    unsetenv("REDFUSE_HUGE_PAGES");
}

}  // namespace
}  // namespace rf
