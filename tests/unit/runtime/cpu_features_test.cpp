/** \file cpu_features_test.cpp
 * CPU detection: internal consistency, agreement with /proc/cpuinfo, the -m flags per ISA level, and
 * intrinsics of every detected extension compiled with march_flags by the JIT and run.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "TempDir.h"
#include "runtime/HostCpu.h"
#include "runtime/Jit.h"
#include "support/Error.h"

using namespace rf;

namespace {

bool has(const std::vector<std::string> &v, const std::string &s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

/** The "flags" line of /proc/cpuinfo as a set; empty when unavailable. */
std::set<std::string> proc_cpuinfo_flags() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream is(line.substr(line.find(':') + 1));
        std::set<std::string> out;
        for (std::string w; is >> w;) out.insert(w);
        return out;
    }
    return {};
}

/** Compiles `source` with `flags`, calls `extern "C" int check()` and returns its result. */
int jit_check(const std::string &source, std::vector<std::string> flags) {
    test::TempDir dir;
    JitOptions opts;
    opts.cache_dir = dir.path();
    opts.flags = std::move(flags);
    opts.flags.push_back("-O2");
    auto so = jit_compile(source, opts);
    return so->function<int (*)()>("check")();
}

}  // namespace

TEST(CpuFeatures, Consistent) {
    const CpuFeatures &f = host_cpu();
    std::cout << to_string(f);
    EXPECT_GE(f.logical_cpus, 1u);
    EXPECT_GE(f.usable_cpus, 1u);
    EXPECT_TRUE(!f.physical_cores || f.physical_cores <= f.usable_cpus);
    // Every sub-extension needs its base, and the base needs the OS state.
    EXPECT_TRUE(!f.avx || f.os_avx);
    EXPECT_TRUE(!(f.avx2 || f.fma || f.f16c) || f.avx);
    EXPECT_TRUE(!f.avx512f || f.os_avx512);
    for (bool sub : {f.avx512dq, f.avx512cd, f.avx512bw, f.avx512vl, f.avx512_vnni, f.avx512_bf16, f.avx512_fp16})
        EXPECT_TRUE(!sub || f.avx512f);
    EXPECT_TRUE(!(f.amx_tile || f.amx_bf16 || f.amx_int8) || f.os_amx);
    EXPECT_TRUE(!(f.amx_bf16 || f.amx_int8) || f.amx_tile);
    // True of every CPU shipped so far (not architectural): AVX-512 parts have AVX2 and FMA.
    EXPECT_TRUE(!f.avx512f || (f.avx2 && f.fma));
    EXPECT_TRUE(!f.x86 || !f.vendor.empty());
    // Plausible cache sizes where known.
    EXPECT_TRUE(!f.l1d_bytes || (f.l1d_bytes >= 4096 && f.l1d_bytes <= (4 << 20))) << f.l1d_bytes;
    EXPECT_TRUE(!f.l1d_bytes || !f.l2_bytes || f.l2_bytes > f.l1d_bytes);
    EXPECT_EQ(&host_cpu(), &f);  // detected once
}

TEST(CpuFeatures, AgreesWithProcCpuinfo) {
    std::set<std::string> flags = proc_cpuinfo_flags();
    const CpuFeatures &f = host_cpu();
    if (flags.empty() || !f.x86) GTEST_SKIP() << "no x86 /proc/cpuinfo";
    // Linux lists an extension only when it also enabled its state, which is what we report.
    const std::pair<const char *, bool> checks[] = {
        {"avx", f.avx},           {"avx2", f.avx2},           {"fma", f.fma},
        {"f16c", f.f16c},         {"bmi2", f.bmi2},           {"avx512f", f.avx512f},
        {"avx512dq", f.avx512dq}, {"avx512cd", f.avx512cd},   {"avx512bw", f.avx512bw},
        {"avx512vl", f.avx512vl}, {"avx512_vnni", f.avx512_vnni}, {"avx512_bf16", f.avx512_bf16},
        {"avx512_fp16", f.avx512_fp16}, {"avx_vnni", f.avx_vnni}, {"amx_tile", f.amx_tile},
        {"amx_bf16", f.amx_bf16}, {"amx_int8", f.amx_int8}};
    for (const auto &[name, ours] : checks) EXPECT_EQ(flags.count(name) == 1, ours) << name;
}

TEST(CpuFeatures, ToStringListsEveryPresentFlag) {
    const CpuFeatures &f = host_cpu();
    std::string s = to_string(f);
    EXPECT_NE(s.find(std::string("isa: ") + to_string(best_isa(f))), std::string::npos) << s;
    // The words of the "isa:" line.
    std::set<std::string> listed;
    std::istringstream isa_line(s.substr(s.find("isa: "), s.find('\n', s.find("isa: ")) - s.find("isa: ")));
    for (std::string w; isa_line >> w;) listed.insert(w);
    const std::pair<const char *, bool> checks[] = {
        {"avx2", f.avx2},         {"fma", f.fma},           {"avx512f", f.avx512f},
        {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl}, {"avx512_vnni", f.avx512_vnni},
        {"avx512_bf16", f.avx512_bf16}, {"avx_vnni", f.avx_vnni}, {"amx_tile", f.amx_tile}};
    for (const auto &[name, on] : checks) EXPECT_EQ(listed.count(name) == 1, on) << name << " in\n" << s;
    EXPECT_NE(s.find("cores: "), std::string::npos);
    EXPECT_NE(s.find("caches: L1d "), std::string::npos);
}

TEST(CpuFeatures, MarchFlagsPerLevel) {
    CpuFeatures f;  // synthetic: exercises every level whatever the host is
    f.x86 = f.os_avx = f.avx = f.avx2 = f.fma = f.f16c = true;
    EXPECT_EQ(best_isa(f), IsaLevel::Avx2);
    EXPECT_EQ(march_flags(f), (std::vector<std::string>{"-mavx2", "-mfma", "-mf16c"}));
    f.os_avx512 = f.avx512f = f.avx512bw = f.avx512vl = true;
    EXPECT_EQ(best_isa(f), IsaLevel::Avx2);  // no DQ: not the Skylake-SP set
    f.avx512dq = f.avx512_bf16 = f.avx512_vnni = true;
    EXPECT_EQ(best_isa(f), IsaLevel::Avx512);
    std::vector<std::string> m = march_flags(f);
    for (const char *flag : {"-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
                             "-mavx512bf16", "-mavx512vnni"})
        EXPECT_TRUE(has(m, flag)) << flag;
    EXPECT_FALSE(has(m, "-mamx-tile"));
    CpuFeatures two = limit_isa(f, IsaLevel::Avx2);
    EXPECT_EQ(best_isa(two), IsaLevel::Avx2);
    EXPECT_FALSE(has(march_flags(two), "-mavx512f"));
    EXPECT_TRUE(march_flags(limit_isa(f, IsaLevel::Baseline)).empty());
    EXPECT_TRUE(march_flags(CpuFeatures{}).empty());
    for (IsaLevel l : {IsaLevel::Baseline, IsaLevel::Avx2, IsaLevel::Avx512})
        EXPECT_EQ(parse_isa_level(to_string(l)), l);
    EXPECT_THROW(parse_isa_level("sse9"), UserError);
}

TEST(CpuFeatures, MarchFlagsCompileAvx2Intrinsics) {
    CpuFeatures f = limit_isa(host_cpu(), IsaLevel::Avx2);
    if (best_isa(f) < IsaLevel::Avx2) GTEST_SKIP() << "no AVX2 + FMA";
    // The AVX2 level's flags alone must be enough, even on an AVX-512 host.
    EXPECT_EQ(jit_check(R"(
#include <immintrin.h>
extern "C" int check() {
    volatile float in = 2.0f;
    __m256 a = _mm256_set1_ps(in), b = _mm256_set1_ps(3.0f), c = _mm256_set1_ps(1.0f);
    float out[8];
    _mm256_storeu_ps(out, _mm256_fmadd_ps(a, b, c));
    return out[7] == 7.0f;
})",
                        march_flags(f)),
              1);
}

TEST(CpuFeatures, MarchFlagsCompileAvx512Intrinsics) {
    const CpuFeatures &f = host_cpu();
    if (best_isa(f) < IsaLevel::Avx512) GTEST_SKIP() << "no AVX-512";
    EXPECT_EQ(jit_check(R"(
#include <immintrin.h>
extern "C" int check() {
    volatile float in = 1.5f;
    __m512 a = _mm512_set1_ps(in);
    __mmask16 m = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_GT_OQ);
    __m512i w = _mm512_set1_epi16(3);  // AVX512BW: 32 lanes of 16 bits
    int bw = _mm512_reduce_add_epi32(_mm512_madd_epi16(w, w));  // 16 lanes of 3*3+3*3
    return _mm512_reduce_add_ps(a) == 24.0f && m == 0xffff && bw == 16 * 18;
})",
                        march_flags(f)),
              1);
}

TEST(CpuFeatures, MarchFlagsCompileAvx512VnniIntrinsics) {
    const CpuFeatures &f = host_cpu();
    if (best_isa(f) < IsaLevel::Avx512 || !f.avx512_vnni) GTEST_SKIP() << "no AVX512-VNNI";
    // u8 x s8 dot products of 4 accumulated into i32: the int8 GEMM micro-kernel's instruction.
    EXPECT_EQ(jit_check(R"(
#include <immintrin.h>
extern "C" int check() {
    volatile int in = 200;
    __m512i u = _mm512_set1_epi8((char)in), s = _mm512_set1_epi8(-3), acc = _mm512_set1_epi32(10);
    __m512i r = _mm512_dpbusd_epi32(acc, u, s);
    return _mm512_reduce_add_epi32(r) == 16 * (10 + 4 * 200 * -3);
})",
                        march_flags(f)),
              1);
}

TEST(CpuFeatures, MarchFlagsCompileAvx512Bf16Intrinsics) {
    const CpuFeatures &f = host_cpu();
    if (best_isa(f) < IsaLevel::Avx512 || !f.avx512_bf16) GTEST_SKIP() << "no AVX512-BF16";
    EXPECT_EQ(jit_check(R"(
#include <immintrin.h>
extern "C" int check() {
    volatile float in = 1.5f;
    __m512 a = _mm512_set1_ps(in), b = _mm512_set1_ps(2.0f);
    __m512bh ab = _mm512_cvtne2ps_pbh(a, a), bb = _mm512_cvtne2ps_pbh(b, b);
    __m512 r = _mm512_dpbf16_ps(_mm512_setzero_ps(), ab, bb);  // pairs: 1.5*2 + 1.5*2 per lane
    return _mm512_reduce_add_ps(r) == 16 * 6.0f;
})",
                        march_flags(f)),
              1);
}

TEST(CpuFeatures, MarchFlagsCompileAvxVnniIntrinsics) {
    const CpuFeatures &f = host_cpu();
    if (best_isa(f) < IsaLevel::Avx2 || !f.avx_vnni) GTEST_SKIP() << "no AVX-VNNI";
    EXPECT_EQ(jit_check(R"(
#include <immintrin.h>
extern "C" int check() {
    volatile int in = 7;
    __m256i u = _mm256_set1_epi8((char)in), s = _mm256_set1_epi8(2);
    __m256i r = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
    int out[8];
    _mm256_storeu_si256((__m256i *)out, r);
    return out[0] == 56 && out[7] == 56;
})",
                        march_flags(limit_isa(f, IsaLevel::Avx2))),
              1);
}

TEST(CpuFeatures, AmxPermissionAndIntrinsicsCompile) {
    const CpuFeatures &f = host_cpu();
    if (!f.amx_tile) {
        EXPECT_FALSE(request_amx_permission());
        GTEST_SKIP() << "no AMX";
    }
    EXPECT_TRUE(request_amx_permission());
    EXPECT_TRUE(request_amx_permission());  // idempotent
    // Compiled and linked only: running tile code is the GEMM micro-kernel tests' business.
    test::TempDir dir;
    JitOptions opts;
    opts.cache_dir = dir.path();
    opts.flags = march_flags(f);
    auto so = jit_compile(R"(
#include <immintrin.h>
extern "C" void tile_release() { _tile_release(); }
)",
                          opts);
    EXPECT_NE(so->symbol("tile_release"), nullptr);
}
