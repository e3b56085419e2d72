/** \file CpuFeatures.h
 * What a CPU can run (ISA extensions the OS has enabled, cores, caches), as data, and the compiler
 * flags that target exactly that. Detecting the host is runtime/HostCpu.h: the compiler's stages
 * only ever see a description they were given (target/Target.h).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rf {

/** An ISA extension flag is true only when the CPU reports it AND the OS saves its register state
 *  (XCR0), i.e. when code using it would actually run. AMX additionally needs a per-process Linux
 *  permission: see request_amx_permission(). */
struct CpuFeatures {
    bool x86 = false;  ///< false on other architectures: every ISA flag below is then false
    std::string vendor;  ///< "GenuineIntel", "AuthenticAMD", ...
    std::string brand;   ///< e.g. "AMD EPYC 9B45 ..."; empty when unknown

    // XCR0: which register state the OS saves on a context switch.
    bool os_avx = false;     ///< YMM state
    bool os_avx512 = false;  ///< opmask + ZMM state
    bool os_amx = false;     ///< tile config + tile data state

    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
    bool avx512f = false, avx512dq = false, avx512cd = false, avx512bw = false, avx512vl = false;
    bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
    bool avx_vnni = false;  ///< the VEX-encoded VNNI of AVX2-only CPUs (Alder Lake) and of Zen 5
    bool amx_tile = false, amx_bf16 = false, amx_int8 = false;

    unsigned logical_cpus = 0;    ///< std::thread::hardware_concurrency()
    unsigned usable_cpus = 0;     ///< CPUs in this process's affinity mask (taskset, cgroups cpusets)
    unsigned physical_cores = 0;  ///< distinct (package, core) pairs among the usable CPUs; 0 if unknown

    int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  ///< per cache instance, as cpu0 sees it; 0 if unknown
};

/** The ISA levels generated code is specialised for. */
enum class IsaLevel { Baseline, Avx2, Avx512 };

/** One line per group: ISA flags present, OS state, cores, caches. */
std::string to_string(const CpuFeatures &f);

/** Avx512 when avx512f/bw/vl/dq are all usable (the set Skylake-SP and later share), else Avx2 when
 *  avx2 and fma are, else Baseline. */
IsaLevel best_isa(const CpuFeatures &f);
const char *to_string(IsaLevel level);
/** "baseline", "avx2" or "avx512"; UserError otherwise. */
IsaLevel parse_isa_level(const std::string &name);

/** A copy of `f` with every feature above `level` cleared: how a test or a user (e.g. a
 *  REDFUSE_CPU_ISA setting) gets the AVX2 kernel on an AVX-512 machine. */
CpuFeatures limit_isa(CpuFeatures f, IsaLevel level);

/** The -m flags for what `f` can run at its best_isa level, e.g. {"-mavx2", "-mfma", "-mf16c",
 *  "-mbmi2", "-mavx512f", ..., "-mavx512bf16", "-mavx512vnni", "-mamx-tile", ...}; empty for Baseline
 *  and on non-x86 hosts. Explicit flags rather than -march=native so that the JIT cache key, which
 *  hashes the flags, changes when the cache directory is shared with a different machine. */
std::vector<std::string> march_flags(const CpuFeatures &f);

}  // namespace rf
