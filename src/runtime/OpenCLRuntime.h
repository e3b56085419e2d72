/** \file OpenCLRuntime.h
 * A minimal OpenCL 1.2 runtime (device, buffers, programs, launches) over a libOpenCL loaded with dlopen at first use.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace rf::ocl {

/** "" when OpenCL can be used, else why not ("libOpenCL.so.1 not found", "no OpenCL platform", "no OpenCL
 *  device", ...). $REDFUSE_OPENCL_LIBRARY, when set, is the only library tried (instead of libOpenCL.so.1,
 *  then libOpenCL.so). The answer is computed once per process. Never throws. */
std::string unavailable_reason();

/** "" when `path` can be dlopened and exports every OpenCL function this runtime uses, else why not.
 *  Leaves the process-wide OpenCL state alone (the handle is closed again). Never throws. */
std::string probe_library(const std::string &path);

/** "CL_INVALID_WORK_GROUP_SIZE" for -54 and so on; "CL_UNKNOWN_ERROR(<code>)" for codes it does not know. */
std::string error_name(int32_t code);

struct DeviceInfo {
    std::string platform, name, version, c_version;  // c_version: e.g. "OpenCL C 1.2 PoCL"
    size_t max_work_group_size = 0;
    size_t local_mem_bytes = 0;
    size_t global_mem_bytes = 0;
    size_t max_alloc_bytes = 0;  // the largest single Buffer the device allows
    int compute_units = 0;
    bool gpu = false;
    bool fp64 = false;  // cl_khr_fp64
};

/** The device used: the first GPU if any, else the first device of the first platform that has one;
 *  $REDFUSE_OPENCL_DEVICE=substring picks the first device whose name contains it. Throws
 *  rf::UserError({}, "no OpenCL platform/device: <reason>") when unavailable. The process has one context
 *  and one in-order command queue (profiling enabled) on it, created on first use (thread-safe). */
const DeviceInfo &device();

/** A device buffer (read-write global memory). Non-copyable, movable. */
class Buffer {
public:
    /** `bytes` may be 0 (at least 1 byte is allocated, since OpenCL rejects empty buffers). An allocation
     *  the device refuses is a UserError (the problem is too big for the device). */
    explicit Buffer(size_t bytes);
    ~Buffer();
    Buffer(Buffer &&other) noexcept;
    Buffer &operator=(Buffer &&other) noexcept;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;

    /** Blocking copies from/to host memory, from offset 0; `bytes` must not exceed bytes(). */
    void write(const void *src, size_t bytes);
    void read(void *dst, size_t bytes) const;
    size_t bytes() const { return bytes_; }
    void *handle() const { return mem_; }  // the cl_mem

private:
    void *mem_ = nullptr;
    size_t bytes_ = 0;
};

/** One kernel argument, passed by value to clSetKernelArg. */
struct KernelArg {
    static KernelArg buffer(const Buffer &b);
    static KernelArg i32(int32_t v);  // OpenCL `int`
    static KernelArg i64(int64_t v);  // OpenCL `long`
    static KernelArg f32(float v);
    static KernelArg f64(double v);   // needs fp64
    static KernelArg local(size_t bytes);  // a __local pointer argument of that many bytes

    /** Checked against the kernel's declared parameters where the driver reports them (a cl_mem passed as a
     *  scalar, or the reverse, crashes PoCL inside clSetKernelArg). */
    enum class Kind : int8_t { Buffer, I32, I64, F32, F64, Local } kind = Kind::I32;
    /** The bytes clSetKernelArg gets: `size` bytes at `value`, or (Local) `size` bytes and a null pointer. */
    size_t size = 0;
    alignas(8) unsigned char value[8] = {};
};

/** A built OpenCL program and its kernels. Non-copyable. */
class Program {
public:
    /** Builds `source` with `options` (e.g. "-cl-std=CL1.2") for device(). A build failure is an
     *  rf::InternalError with the OpenCL error name, the first 40 lines of the build log and the paths of
     *  the saved source and full log (redfuse-ocl-<hash>.cl/.log in the temp directory). " -cl-kernel-arg-info"
     *  is appended to `options` so that launch() can check argument kinds. */
    Program(const std::string &source, const std::string &options);
    ~Program();
    Program(const Program &) = delete;
    Program &operator=(const Program &) = delete;

    /** Enqueues kernel `name` over a 1-D NDRange of `groups` work-groups of `local` work-items, with `args`
     *  in order. Returns without waiting. InternalError (the OpenCL error name and the kernel name) on
     *  failure: an unknown name, a wrong argument count, an argument of the wrong kind (where the driver
     *  reports parameter types), a rejected NDRange. Kernel objects are cached per name; thread-safe. */
    void launch(const std::string &name, size_t groups, size_t local, const std::vector<KernelArg> &args);

    /** CL_KERNEL_WORK_GROUP_SIZE: the largest `local` kernel `name` can be launched with on device(),
     *  which may be below device().max_work_group_size (registers, __local use). */
    size_t max_local(const std::string &name);

    /** Wall time of clBuildProgram (PoCL: ~0.5 s cold, ~30 ms from its own kernel cache). */
    double build_ms() const { return build_ms_; }

private:
    struct Kernel {
        void *handle;        // cl_kernel
        unsigned num_args;   // CL_KERNEL_NUM_ARGS, so a wrong argument count is caught before a stale arg is used
        std::vector<int8_t> kinds;  // the KernelArg::Kind each parameter needs, -1 unknown; empty: no arg info
    };
    const Kernel &kernel(const std::string &name);  // created on first use; call with mu_ held

    void *program_ = nullptr;  // cl_program
    double build_ms_ = 0;
    std::mutex mu_;  // clSetKernelArg + enqueue on a shared cl_kernel must not interleave across threads
    std::map<std::string, Kernel> kernels_;
};

/** Waits for everything enqueued (clFinish on the queue). */
void finish();

/** Milliseconds of device time (profiling START..END) of the kernels launched since the last call, in all
 *  Programs; waits for them to finish. For benchmarks. */
double take_device_ms();

}  // namespace rf::ocl
