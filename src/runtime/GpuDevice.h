/** \file GpuDevice.h
 * The device side of the GPU backends behind one small interface (buffers, launches, waiting,
 * timing): OpenCL and CUDA in GpuBackend.cpp, and a hook through which a test supplies its own
 * device for target "cuda" (the host emulator of tests/unit/runtime/CudaEmuDevice.h).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/Error.h"

#include "codegen/CodeGen_GPU.h"

namespace rf {

/** One device buffer. */
struct DevBuf {
    virtual ~DevBuf() = default;
    virtual void write(const void *src, size_t bytes) = 0;
    virtual void read(void *dst, size_t bytes) = 0;
};

/** One device with a built module: buffers, launches, waiting, timing. */
class GpuDevice {
public:
    virtual ~GpuDevice() = default;
    virtual std::unique_ptr<DevBuf> alloc(size_t bytes) = 0;
    /** `groups` work-groups of l.threads, `smem` bytes of dynamic shared memory; arguments: `bufs`
     *  in module order, then `sizes` (GpuLaunch's calling convention). */
    virtual void launch(const GpuLaunch &l, int64_t groups, int64_t smem, const std::vector<DevBuf *> &bufs,
                        const std::vector<int64_t> &sizes) = 0;
    virtual void sync() = 0;
    /** A buffer over caller-owned device memory (not freed with the DevBuf); UserError where the
     *  device cannot address the caller's memory (OpenCL). */
    virtual std::unique_ptr<DevBuf> wrap(void *device_memory, size_t bytes);
    /** The stream later launches are queued on (CUDA: a CUstream; nullptr: the default stream). */
    virtual void set_stream(void *stream) { (void)stream; }
    /** Device milliseconds of f() (which enqueues work). */
    virtual double time(const std::function<void()> &f) = 0;
    virtual void flush_caches() {}
};

/** What replaces the CUDA driver and NVRTC for target "cuda" when installed: the device's name, the
 *  work-groups that fill it (sizes the segment split), the shared memory a work-group may use (the
 *  schedule is fitted to it), and the device built from a generated module (after the source hooks). */
struct CudaDeviceOverride {
    std::string name;
    int workers = 8;
    int64_t shared_limit = 48 * 1024;
    std::function<std::shared_ptr<GpuDevice>(const GpuModule &)> build;
};

/** Installs `o` for every later GPU build (build_gpu_program) and device query (gpu_device_spec) with target "cuda" (nullptr: the real driver again).
 *  A test hook: set it before compiling, not while another thread compiles. */
void set_cuda_device_override(std::shared_ptr<const CudaDeviceOverride> o);

}  // namespace rf
