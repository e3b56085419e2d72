/** \file HostTarget.h
 * Making a Target: from the host (its CPU, its CUDA or OpenCL device), or from a model for
 * cross-compilation (`emit --target cuda --arch sm_90a` on a machine without a GPU). The only place
 * that asks the host what it is for a compilation.
 */
#pragma once

#include <string>

#include "target/Target.h"

namespace rf {

struct TargetRequest {
    TargetKind kind = TargetKind::Cpu;
    /** CUDA: compile for this architecture (sm_XX) with the H100/H200-class model, without asking
     *  for a device. Empty: the device's, or the model's sm_90a when there is no device. */
    std::string arch;
    /** CPU: limit the instruction set to "baseline", "avx2" or "avx512" (empty: the host's best). */
    std::string isa;
};

/** The target for `r` on this host: a CPU kind gets the host CPU's description; a GPU kind the
 *  device's (GpuSpec::from_device) when there is one, else the model. */
Target make_target(const TargetRequest &r);
inline Target make_target(TargetKind kind) { return make_target(TargetRequest{kind, "", ""}); }

}  // namespace rf
