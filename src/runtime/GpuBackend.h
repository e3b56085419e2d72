/** \file GpuBackend.h
 * The GPU backends end to end: plan → tile IR → OpenCL C or CUDA C++ (one mapping, CodeGen_GPU.h) →
 * built by the OpenCL driver (PoCL in CI) or NVRTC → launched on device buffers.
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
#include "tile/Lower.h"

namespace rf {

struct GpuOptions {
    std::string target = "opencl";  ///< opencl | cuda
    int threads = 0;                ///< work-group size (0: 128 for CUDA, 64 for OpenCL)
    int workers = 0;                ///< work-groups that fill the device, for the segment split (0: from the device)
    bool unfused = false;
    bool tensor_cores = true;       ///< CUDA: mma.sync for 16/8-bit tile GEMMs
    std::string arch;               ///< CUDA: sm_XX to compile for (empty: the device's)
    std::map<int, tile::Schedule> schedules;
    int64_t tile = 0, segments = 0, row_block = 0;
    std::optional<Strategy> strategy;  ///< force a strategy on every chain (see tile::LowerOptions)
    std::string cache_dir;          ///< CUDA cubin cache (empty: the default)
    std::string fusion_level = "auto";  ///< auto | block | warp | thread (see GpuCodegenOptions)
};

/** NVRTC options of generated CUDA: --prec-div=false (division within 2 ulp, as FlashAttention's
 *  reciprocal-multiply; the IEEE slow path made ptxas spill in small kernels) and -lineinfo. */
std::vector<std::string> cuda_compile_options();

/** The GPU module of a plan at `sizes` (lowering + printing; needs no device: emit, CI cubins). */
GpuModule generate_gpu_module(const Plan &plan, const SizeBinding &sizes, const GpuOptions &o);

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

/** Lowers, prints and builds for the target's device. UserError when the target has no device
 *  ("no CUDA driver/device: ...", "no OpenCL platform/device: ..."). */
std::unique_ptr<GpuProgram> compile_gpu(const Plan &plan, const SizeBinding &sizes, const GpuOptions &o);

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
