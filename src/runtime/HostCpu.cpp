/** \file HostCpu.cpp
 * CPU feature detection with cpuid and xgetbv (GCC's <cpuid.h>), core counts from the affinity
 * mask and sysfs, cache sizes from sysfs with sysconf as the fallback.
 */
#include "runtime/HostCpu.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define RF_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "support/Error.h"

namespace rf {

namespace {

#ifdef RF_X86
struct Regs {
    unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
    Regs r;
    __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
    return r;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

uint64_t xgetbv0() {
    unsigned lo = 0, hi = 0;
    // Inline asm rather than _xgetbv() so this file needs no -mxsave; called only when cpuid says OSXSAVE.
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}

void detect_isa(CpuFeatures &f) {
    f.x86 = true;
    unsigned max_leaf = __get_cpuid_max(0, nullptr);
    Regs v = cpuid(0, 0);
    char vendor[13] = {};
    std::memcpy(vendor, &v.b, 4);
    std::memcpy(vendor + 4, &v.d, 4);
    std::memcpy(vendor + 8, &v.c, 4);
    f.vendor = vendor;
    if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
        char brand[49] = {};
        for (unsigned i = 0; i < 3; i++) {
            Regs r = cpuid(0x80000002 + i, 0);
            std::memcpy(brand + 16 * i, &r, 16);
        }
        f.brand = brand;
        size_t b = f.brand.find_first_not_of(' '), e = f.brand.find_last_not_of(' ');
        f.brand = b == std::string::npos ? "" : f.brand.substr(b, e - b + 1);
    }
    if (max_leaf < 1) return;
    Regs l1 = cpuid(1, 0);
    bool osxsave = bit(l1.c, 27);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    f.os_avx = (xcr0 & 0x6) == 0x6;                         // SSE + AVX state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;        // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);       // XTILECFG + XTILEDATA
    f.sse42 = bit(l1.c, 20);
    f.avx = f.os_avx && bit(l1.c, 28);
    f.fma = f.avx && bit(l1.c, 12);
    f.f16c = f.avx && bit(l1.c, 29);
    if (max_leaf < 7) return;
    Regs l7 = cpuid(7, 0);
    f.bmi2 = bit(l7.b, 8);
    f.avx2 = f.avx && bit(l7.b, 5);
    f.avx512f = f.os_avx512 && bit(l7.b, 16);
    f.avx512dq = f.avx512f && bit(l7.b, 17);
    f.avx512cd = f.avx512f && bit(l7.b, 28);
    f.avx512bw = f.avx512f && bit(l7.b, 30);
    f.avx512vl = f.avx512f && bit(l7.b, 31);
    f.avx512_vnni = f.avx512f && bit(l7.c, 11);
    f.avx512_fp16 = f.avx512f && bit(l7.d, 23);
    f.amx_bf16 = f.os_amx && bit(l7.d, 22);
    f.amx_tile = f.os_amx && bit(l7.d, 24);
    f.amx_int8 = f.os_amx && bit(l7.d, 25);
    if (l7.a >= 1) {  // subleaf 1 exists
        Regs l71 = cpuid(7, 1);
        f.avx_vnni = f.avx && bit(l71.a, 4);
        f.avx512_bf16 = f.avx512f && bit(l71.a, 5);
    }
}
#endif

std::string read_line(const std::string &path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// sysfs writes cache sizes as "48K", "2048K" or "32M".
int64_t parse_size(const std::string &s) {
    if (s.empty()) return 0;
    size_t pos = 0;
    int64_t v = 0;
    try {
        v = std::stoll(s, &pos);
    } catch (...) {
        return 0;
    }
    char unit = pos < s.size() ? s[pos] : ' ';
    if (unit == 'K') v <<= 10;
    if (unit == 'M') v <<= 20;
    if (unit == 'G') v <<= 30;
    return v;
}

void detect_caches(CpuFeatures &f) {
    for (int i = 0; i < 16; i++) {
        std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::string level = read_line(dir + "level");
        if (level.empty()) break;
        std::string type = read_line(dir + "type");
        int64_t size = parse_size(read_line(dir + "size"));
        if (level == "1" && type == "Data") f.l1d_bytes = size;
        if (level == "2" && type != "Instruction") f.l2_bytes = size;
        if (level == "3" && type != "Instruction") f.l3_bytes = size;
    }
#ifdef _SC_LEVEL1_DCACHE_SIZE
    // glibc answers from cpuid; sysfs can be missing in containers.
    if (f.l1d_bytes <= 0) f.l1d_bytes = std::max<long>(0, ::sysconf(_SC_LEVEL1_DCACHE_SIZE));
    if (f.l2_bytes <= 0) f.l2_bytes = std::max<long>(0, ::sysconf(_SC_LEVEL2_CACHE_SIZE));
    if (f.l3_bytes <= 0) f.l3_bytes = std::max<long>(0, ::sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
}

void detect_cores(CpuFeatures &f) {
    f.logical_cpus = std::thread::hardware_concurrency();
    std::vector<int> cpus;
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
#endif
    f.usable_cpus = cpus.empty() ? f.logical_cpus : static_cast<unsigned>(cpus.size());
    std::set<std::pair<std::string, std::string>> cores;
    for (int c : cpus) {
        std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
        std::string core = read_line(dir + "core_id");
        if (core.empty()) return;  // no topology (container without sysfs): unknown, not a guess
        cores.emplace(read_line(dir + "physical_package_id"), core);
    }
    f.physical_cores = static_cast<unsigned>(cores.size());
}

}  // namespace

CpuFeatures detect_cpu_features() {
    CpuFeatures f;
#ifdef RF_X86
    detect_isa(f);
#endif
    detect_cores(f);
    detect_caches(f);
    return f;
}

const CpuFeatures &host_cpu() {
    static const CpuFeatures f = detect_cpu_features();
    return f;
}

bool request_amx_permission() {
#if defined(RF_X86) && defined(__linux__) && defined(SYS_arch_prctl)
    // Constants from <asm/prctl.h> and the XSAVE feature numbering; spelled out for older headers.
    constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (!host_cpu().amx_tile) return false;
    static const bool granted = [&] {
        if (::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
        unsigned long mask = 0;
        if (::syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
        return ((mask >> kXfeatureXtiledata) & 1ul) != 0;
    }();
    return granted;
#else
    return false;
#endif
}

}  // namespace rf
