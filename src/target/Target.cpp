/** \file Target.cpp
 * Target kinds by name, the GPU models used without a device, and a target's description.
 */
#include "target/Target.h"

#include <algorithm>
#include <sstream>

#include "support/Error.h"

namespace rf {

namespace {
constexpr TargetKind kAllKinds[] = {TargetKind::Interp, TargetKind::InterpF32, TargetKind::Cpu, TargetKind::Cuda,
                                    TargetKind::OpenCL};
}  // namespace

const char *to_string(TargetKind kind) {
    switch (kind) {
    case TargetKind::Interp: return "interp";
    case TargetKind::InterpF32: return "interp-f32";
    case TargetKind::Cpu: return "cpu";
    case TargetKind::Cuda: return "cuda";
    case TargetKind::OpenCL: return "opencl";
    }
    return "?";
}

TargetKind parse_target_kind(const std::string &name) {
    std::string valid;
    for (TargetKind k : kAllKinds) {
        if (name == to_string(k)) return k;
        valid += std::string(valid.empty() ? "" : ", ") + to_string(k);
    }
    throw UserError({}, "unknown target '" + name + "' (valid: " + valid + ")");
}

bool is_gpu(TargetKind kind) { return kind == TargetKind::Cuda || kind == TargetKind::OpenCL; }
bool is_interpreter(TargetKind kind) { return kind == TargetKind::Interp || kind == TargetKind::InterpF32; }

int Target::workers() const {
    if (is_gpu(kind)) return std::max(1, gpu.workers);
    return static_cast<int>(std::max(1u, cpu.usable_cpus ? cpu.usable_cpus : cpu.logical_cpus));
}

GpuSpec gpu_model(TargetKind kind, const std::string &arch) {
    GpuSpec g;
    if (kind == TargetKind::Cuda) {
        // An H100/H200: 132 SMs, 228 KiB of shared memory per SM. Two work-groups per SM (one waits
        // on memory while the other computes), each within half the SM less the 1 KiB CUDA reserves
        // per block: what a build on such a device fits the schedule to.
        g.name = "H100/H200-class model";
        g.arch = arch.empty() ? "sm_90a" : arch;
        g.compute_units = 132;
        g.workers = 2 * g.compute_units;
        g.shared_memory_bytes = 228 * 1024 / 2 - 1024;
    } else {
        g.name = "OpenCL model";
        g.compute_units = 8;
        g.workers = 8;
    }
    return g;
}

std::string Target::describe() const {
    std::ostringstream os;
    os << "target: " << to_string(kind) << "\n";
    if (is_gpu(kind)) {
        os << "gpu: " << gpu.name << (gpu.from_device ? "" : " (no device: a model)");
        if (!gpu.arch.empty()) os << ", " << gpu.arch;
        os << ", " << gpu.compute_units << " compute units, " << gpu.workers << " workers, shared memory per work-group ";
        os << (gpu.shared_memory_bytes > 0 ? std::to_string(gpu.shared_memory_bytes >> 10) + " KiB" : std::string("not limited")) << "\n";
    } else {
        os << to_string(cpu);
    }
    return os.str();
}

}  // namespace rf
