/** \file CpuFeatures.cpp
 * ISA levels of a CPU description, limiting it to a level, its compiler flags and its text form.
 */
#include "target/CpuFeatures.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "support/Error.h"

namespace rf {

IsaLevel best_isa(const CpuFeatures &f) {
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx2 && f.fma) return IsaLevel::Avx512;
    if (f.avx2 && f.fma) return IsaLevel::Avx2;
    return IsaLevel::Baseline;
}

const char *to_string(IsaLevel level) {
    switch (level) {
    case IsaLevel::Baseline: return "baseline";
    case IsaLevel::Avx2: return "avx2";
    case IsaLevel::Avx512: return "avx512";
    }
    return "?";
}

IsaLevel parse_isa_level(const std::string &name) {
    for (IsaLevel l : {IsaLevel::Baseline, IsaLevel::Avx2, IsaLevel::Avx512})
        if (name == to_string(l)) return l;
    throw UserError({}, "unknown ISA level '" + name + "' (expected baseline, avx2 or avx512)");
}

CpuFeatures limit_isa(CpuFeatures f, IsaLevel level) {
    level = std::min(level, best_isa(f));
    if (level < IsaLevel::Avx512) {
        f.avx512f = f.avx512dq = f.avx512cd = f.avx512bw = f.avx512vl = false;
        f.avx512_vnni = f.avx512_bf16 = f.avx512_fp16 = false;
        f.amx_tile = f.amx_bf16 = f.amx_int8 = false;
    }
    if (level < IsaLevel::Avx2) f.avx = f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
    return f;
}

std::vector<std::string> march_flags(const CpuFeatures &f) {
    IsaLevel level = best_isa(f);
    std::vector<std::string> out;
    if (level == IsaLevel::Baseline) return out;
    out = {"-mavx2", "-mfma"};
    if (f.f16c) out.push_back("-mf16c");
    if (f.bmi2) out.push_back("-mbmi2");
    if (f.avx_vnni) out.push_back("-mavxvnni");
    if (level == IsaLevel::Avx2) return out;
    out.insert(out.end(), {"-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl"});
    if (f.avx512cd) out.push_back("-mavx512cd");
    if (f.avx512_vnni) out.push_back("-mavx512vnni");
    if (f.avx512_bf16) out.push_back("-mavx512bf16");
    // No -mavx512fp16: no kernel uses it yet, and GCC < 12 rejects it.
    if (f.amx_tile) out.push_back("-mamx-tile");
    if (f.amx_bf16) out.push_back("-mamx-bf16");
    if (f.amx_int8) out.push_back("-mamx-int8");
    return out;
}

std::string to_string(const CpuFeatures &f) {
    std::ostringstream os;
    os << "cpu: " << (f.brand.empty() ? "unknown" : f.brand);
    if (!f.vendor.empty()) os << " (" << f.vendor << ")";
    os << "\nisa: " << to_string(best_isa(f)) << ";";
    const std::pair<const char *, bool> flags[] = {
        {"sse4.2", f.sse42},          {"avx", f.avx},           {"avx2", f.avx2},
        {"fma", f.fma},               {"f16c", f.f16c},         {"bmi2", f.bmi2},
        {"avx512f", f.avx512f},       {"avx512dq", f.avx512dq}, {"avx512cd", f.avx512cd},
        {"avx512bw", f.avx512bw},     {"avx512vl", f.avx512vl}, {"avx512_vnni", f.avx512_vnni},
        {"avx512_bf16", f.avx512_bf16}, {"avx512_fp16", f.avx512_fp16}, {"avx_vnni", f.avx_vnni},
        {"amx_tile", f.amx_tile},     {"amx_bf16", f.amx_bf16}, {"amx_int8", f.amx_int8}};
    for (const auto &[name, on] : flags)
        if (on) os << " " << name;
    os << "\nos state: avx " << (f.os_avx ? "yes" : "no") << ", avx512 " << (f.os_avx512 ? "yes" : "no")
       << ", amx " << (f.os_amx ? "yes" : "no");
    os << "\ncores: " << f.usable_cpus << " usable of " << f.logical_cpus << " logical, ";
    if (f.physical_cores) os << f.physical_cores << " physical";
    else os << "physical unknown";
    auto kib = [](int64_t b) { return b > 0 ? std::to_string(b >> 10) + " KiB" : std::string("unknown"); };
    os << "\ncaches: L1d " << kib(f.l1d_bytes) << ", L2 " << kib(f.l2_bytes) << ", L3 " << kib(f.l3_bytes)
       << "\n";
    return os.str();
}

}  // namespace rf
