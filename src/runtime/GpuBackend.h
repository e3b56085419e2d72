/** \file GpuBackend.h
 * The GPU backends' build and run: a printed module (OpenCL C or CUDA C++, one mapping,
 * CodeGen_GPU.h) → built by the OpenCL driver (PoCL in CI) or NVRTC → launched on device buffers;
 * and what the device is (GpuSpec), for the driver's Target. The module comes finished from the
 * driver's pipeline (driver/Pipeline.h).
 */
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/CodeGen_GPU.h"
#include "fuse/Plan.h"
#include "interp/Tensor.h"
#include "target/Target.h"

namespace rf {

struct GpuBuildOptions {
    TargetKind kind = TargetKind::OpenCL;  ///< Cuda or OpenCL
    std::string arch;               ///< CUDA: sm_XX to compile for (empty: the device's)
    std::string cache_dir;          ///< CUDA cubin cache (empty: the default)
};

/** NVRTC options of generated CUDA: --prec-div=false (division within 2 ulp, as FlashAttention's
 *  reciprocal-multiply; the IEEE slow path made ptxas spill in small kernels) and -lineinfo. */
std::vector<std::string> cuda_compile_options();

/** The device a GPU target kind would run on (the test hook's for CUDA when one is installed):
 *  its name, architecture, compute units, the work-groups that fill it (CUDA: 2 per SM; OpenCL: 4
 *  per compute unit on GPUs, 8 on CPUs) and the shared memory one work-group may use (CUDA: the
 *  per-block opt-in maximum, at most half an SM less 1 KiB, so two work-groups share an SM).
 *  Nothing when the kind has no usable device here; `why` says why. */
std::optional<GpuSpec> gpu_device_spec(TargetKind kind, std::string *why = nullptr);

class GpuDevice;  // the OpenCL or CUDA side (GpuDevice.h, GpuBackend.cpp)

struct GpuProgram {
    GpuModule gpu;
    std::shared_ptr<GpuDevice> device;
    std::string device_name;
    double compile_ms = 0;
    bool from_cache = false;
    std::string log;  ///< the CUDA compiler's ptxas report (empty for OpenCL)
    ~GpuProgram();
};

/** Builds a printed module for the kind's device (after the source hooks of RuntimeSettings).
 *  UserError when there is no device ("no CUDA driver/device: ...", "no OpenCL platform/device: ..."). */
std::unique_ptr<GpuProgram> build_gpu_program(GpuModule module, const GpuBuildOptions &o);

/** One user buffer, dense, in its storage format (inputs, then outputs): host or device memory. */
struct BufferRef {
    void *data = nullptr;
    size_t bytes = 0;
};

/** Runs every launch of `prog` at `sizes` (size_values: the sizes in spec order) on copies of host
 *  buffers: inputs are copied to the device, outputs back; temporaries are allocated per call. */
void run_gpu_on_host(const GpuProgram &prog, const SizeBinding &sizes, const std::vector<int64_t> &size_values,
                     const std::vector<BufferRef> &user);

/** Runs every launch of `prog` directly on the caller's device memory (`user`: device pointers, in
 *  the same order), queued on `stream` (CUDA: a CUstream; nullptr: the default stream) and not
 *  waited for, except when the module has temporaries (allocated per call and freed on return:
 *  the launches are waited for first). UserError for a device without caller memory (OpenCL). */
void run_gpu_on_device(const GpuProgram &prog, const SizeBinding &sizes, const std::vector<int64_t> &size_values,
                       const std::vector<BufferRef> &user, void *stream);

/** Device copies of a run's inputs, outputs and temporaries. */
class GpuBuffers {
public:
    GpuBuffers(const GpuProgram &prog, const Program &p, const SizeBinding &sizes, const std::map<std::string, Tensor> &inputs);
    ~GpuBuffers();
    /** Writes the poison pattern (NaN, or the most negative integer) into every output. */
    void poison();
    /** Enqueues every launch of the program (asynchronous on CUDA; call sync() to wait). */
    void run();
    void sync();
    /** Device milliseconds of `reps` runs, timed with device events (CUDA) or host clocks around a
     *  finished queue (OpenCL); returns the median over `reps`, one run each. */
    std::vector<double> time_runs(int reps);
    /** Evicts the inputs from the device's last-level cache (CUDA: 256 MiB written; OpenCL: nothing). */
    void flush_caches();
    std::map<std::string, Tensor> outputs();
    int64_t bytes() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace rf
