/** \file Target.h
 * The machine a compilation is for, as data: its kind (interpreter, CPU, CUDA, OpenCL) and what the
 * planner, the schedule and the printers may know of it (ISA features, cores, caches; GPU
 * architecture, compute units, shared memory). Made once in the driver (driver/HostTarget.h: from
 * the host, from a model for cross-compilation, or from explicit fields) and passed down; no stage
 * below the driver asks the host anything.
 */
#pragma once

#include <cstdint>
#include <string>

#include "target/CpuFeatures.h"

namespace rf {

enum class TargetKind : uint8_t {
    Interp,     ///< the plan interpreter in float64 (checks the algebra, no code generated)
    InterpF32,  ///< the plan interpreter rounding every value to float32
    Cpu,        ///< generated C++ (OpenMP, AVX-512 / AVX2 micro-kernels), JIT-compiled or emitted
    Cuda,       ///< generated CUDA C++ (NVRTC, the driver API)
    OpenCL,     ///< generated OpenCL C (any OpenCL 1.2 device; PoCL on CPUs)
};

/** "interp", "interp-f32", "cpu", "cuda", "opencl". */
const char *to_string(TargetKind kind);
/** The inverse of to_string; UserError listing the valid names otherwise. */
TargetKind parse_target_kind(const std::string &name);
bool is_gpu(TargetKind kind);
bool is_interpreter(TargetKind kind);

/** What the GPU printers and the schedule know of a GPU (or of the model of one). */
struct GpuSpec {
    std::string name;          ///< the device's name, or the model's ("H100/H200-class model")
    std::string arch;          ///< CUDA: the sm_XX to compile for; empty for OpenCL
    int compute_units = 0;     ///< SMs / compute units
    /** Work-groups that fill the device: the segment split of long reduction axes aims at this many. */
    int workers = 0;
    /** Bytes of shared (local) memory one work-group may use: the schedule's row block and tile are
     *  halved until every kernel fits. 0: no limit is known (a model), nothing is fitted. */
    int64_t shared_memory_bytes = 0;
    bool from_device = false;  ///< read off a device (true) or a model (false)
};

struct Target {
    TargetKind kind = TargetKind::Cpu;
    /** Cpu: the CPU the code is for (ISA flags select micro-kernels and compiler flags; cores and the
     *  L2 size feed the cost model and the segment split). Other kinds: the host, unused by stages. */
    CpuFeatures cpu;
    GpuSpec gpu;  ///< Cuda / OpenCL

    /** Workers the schedule plans for: usable CPUs on a CPU, `gpu.workers` on a GPU (>= 1). */
    int workers() const;
    /** Several lines: the kind and what the stages know of the machine. */
    std::string describe() const;
};

/** The model a GPU target has without a device (`emit --target cuda --arch sm_90a` on a machine
 *  without a GPU): an H100/H200-class GPU for CUDA (132 SMs, 2 work-groups per SM, the shared memory
 *  two work-groups of an SM may each use), a generic device of 8 work-groups for OpenCL. */
GpuSpec gpu_model(TargetKind kind, const std::string &arch = "");

}  // namespace rf
