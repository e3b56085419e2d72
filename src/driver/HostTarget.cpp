/** \file HostTarget.cpp
 * Targets from the host's CPU and devices, or from models.
 */
#include "driver/HostTarget.h"

#include "runtime/GpuBackend.h"
#include "runtime/HostCpu.h"
#include "support/Error.h"

namespace rf {

Target make_target(const TargetRequest &r) {
    Target t;
    t.kind = r.kind;
    t.cpu = host_cpu();
    if (!r.isa.empty()) {
        if (r.kind != TargetKind::Cpu) throw UserError({}, "an ISA level applies to the cpu target only");
        t.cpu = limit_isa(t.cpu, parse_isa_level(r.isa));
    }
    if (!r.arch.empty()) {
        if (r.kind != TargetKind::Cuda) throw UserError({}, "--arch applies to the cuda target only");
        if (r.arch.rfind("sm_", 0) != 0 || r.arch.size() < 5)
            throw UserError({}, "--arch expects a CUDA architecture such as sm_80 or sm_90a, got '" + r.arch + "'");
        t.gpu = gpu_model(r.kind, r.arch);
        return t;
    }
    if (is_gpu(r.kind)) {
        std::optional<GpuSpec> device = gpu_device_spec(r.kind);
        t.gpu = device ? *device : gpu_model(r.kind);
    }
    return t;
}

}  // namespace rf
