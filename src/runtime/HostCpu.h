/** \file HostCpu.h
 * Detection of the CPU this process runs on (cpuid, xgetbv, the affinity mask, sysfs) and the Linux
 * permission AMX needs. Only the driver (to make a Target) and the runtime (to run kernels) call it.
 */
#pragma once

#include "target/CpuFeatures.h"

namespace rf {

/** The host, detected once (thread-safe). */
const CpuFeatures &host_cpu();

/** Detects now, without the cache of host_cpu(). */
CpuFeatures detect_cpu_features();

/** Asks Linux for permission to use AMX tile data in this process (arch_prctl ARCH_REQ_XCOMP_PERM);
 *  true when granted or already granted, false when the CPU or kernel has no AMX. Must be called
 *  before the first AMX instruction, or that instruction faults. Idempotent. */
bool request_amx_permission();

}  // namespace rf
