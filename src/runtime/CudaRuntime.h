/** \file CudaRuntime.h
 * The CUDA runtime layer: NVRTC compiles to cached cubins, the driver API (dlopened, never linked) loads and launches them.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rf::cuda {

/** What `ptxas -v` says about one kernel. */
struct PtxasReport {
    int registers = 0;
    int64_t shared_bytes = 0, stack_bytes = 0, spill_stores = 0, spill_loads = 0;
    /** The sum over all constant banks (cmem[N]) that ptxas lists; ptxas 13 often lists none. */
    int64_t constant_bytes = 0;
    int barriers = 0;
};

struct CompiledModule {
    std::string arch;  // "sm_90a"
    std::vector<char> cubin;
    std::string log;  // the NVRTC log (ptxas -v lines)
    /** By kernel name as ptxas prints it: the plain name for extern "C", else the mangled one. */
    std::map<std::string, PtxasReport> kernels;
    double compile_ms = 0;
    bool from_cache = false;
};

/** Parses the `ptxas info` lines of an NVRTC log into per-entry-function reports. */
std::map<std::string, PtxasReport> parse_ptxas_log(const std::string &log);

/** "" when NVRTC can be loaded, else why not. Never throws. */
std::string nvrtc_unavailable_reason();

/** The NVRTC version as major * 1000 + minor * 10 (13.0 -> 13000), 0 when NVRTC is missing. */
int nvrtc_version();

/** The include directory passed to NVRTC ("" if none was found): NVRTC 13 has no built-in
 *  cuda_fp16.h / cuda_bf16.h / cuda_fp8.h, so they come from $CUDA_HOME/include,
 *  /usr/local/cuda/include, or the include folder next to the loaded libnvrtc. */
std::string nvrtc_include_dir();

/** Compiles CUDA C++ (C++17, kernels written with __global__) to a cubin for `arch` ("sm_80",
 *  "sm_90a", ...) with `--ptxas-options=-v` plus `options`. UserError when NVRTC is missing; a
 *  compile failure is an InternalError quoting the first 40 log lines and the path of a saved copy
 *  of the source. Cached under `cache_dir` (empty: default_cache_dir()/cuda), keyed by the SHA-256
 *  of source, arch, options, include dir and NVRTC version; a hit sets from_cache and returns the
 *  stored log and report. Safe to call from several threads and processes. */
CompiledModule compile(const std::string &source, const std::string &arch,
                       const std::vector<std::string> &options = {}, const std::string &cache_dir = "");

/** The architectures NVRTC supports (nvrtcGetSupportedArchs), e.g. {75, 80, ...}; empty when
 *  NVRTC is missing. */
std::vector<int> supported_archs();

/** "" when a CUDA driver and at least one device are usable, else "no CUDA driver/device: <why>"
 *  (library not found, cuInit failed with its error name, the toolkit's stub library, no device).
 *  $REDFUSE_LIBCUDA names the driver library instead of "libcuda.so.1". Never throws. */
std::string driver_unavailable_reason();

/** What driver_unavailable_reason() would say for the driver library at `path`, probed in
 *  isolation: the library is dlopened privately, initialised, and closed again, and the process's
 *  driver state is left alone. Never throws. */
std::string probe_driver(const std::string &path);

struct DeviceInfo {
    std::string name;
    int ordinal = 0;
    int cc_major = 0, cc_minor = 0, sms = 0;
    int64_t smem_per_block_optin = 0, smem_per_sm = 0, global_mem = 0, l2_bytes = 0;
    int clock_khz = 0, mem_clock_khz = 0, bus_width_bits = 0, max_threads_per_block = 0, regs_per_sm = 0;
    int driver_version = 0;  // cuDriverGetVersion: 13000 for CUDA 13.0
};

/** Device 0 ($REDFUSE_CUDA_DEVICE=n picks another); retains its primary context and makes it
 *  current on the calling thread. UserError "no CUDA driver/device: <why>" when unavailable. */
const DeviceInfo &device();

/** "sm_90a" for cc 9.0, "sm_100a" for 10.0, else "sm_XY" (arch-specific features need the "a"). */
std::string device_arch();

/** Device memory (cuMemAlloc). Copies are synchronous and ordered on the legacy default stream. */
class Buffer {
public:
    explicit Buffer(size_t bytes);
    ~Buffer();
    Buffer(Buffer &&o) noexcept;
    Buffer &operator=(Buffer &&o) noexcept;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;

    /** Copies `bytes` (at most bytes()) from host memory to the start of the buffer. */
    void write(const void *src, size_t bytes);
    /** Copies `bytes` (at most bytes()) to host memory; waits for earlier default-stream work. */
    void read(void *dst, size_t bytes) const;
    void zero();
    size_t bytes() const { return bytes_; }
    uint64_t ptr() const { return ptr_; }  // CUdeviceptr

private:
    uint64_t ptr_ = 0;
    size_t bytes_ = 0;
};

/** One kernel argument by value; the driver reads as many bytes as the kernel's parameter has
 *  (little-endian, so i64 also serves an `int` parameter with a value that fits). */
struct KernelArg {
    static KernelArg buffer(const Buffer &b) { return ptr(b.ptr()); }
    static KernelArg i64(int64_t v) {
        KernelArg a;
        a.value.i = v;
        return a;
    }
    static KernelArg i32(int32_t v) { return i64(v); }
    static KernelArg f32(float v) {
        KernelArg a;
        a.value.f = v;
        return a;
    }
    static KernelArg ptr(uint64_t devptr) {
        KernelArg a;
        a.value.u = devptr;
        return a;
    }
    union {
        int64_t i;
        uint64_t u;
        float f;
    } value{0};
};

/** A loaded cubin (cuModuleLoadData); non-copyable. */
class Module {
public:
    explicit Module(const CompiledModule &m);
    ~Module();
    Module(const Module &) = delete;
    Module &operator=(const Module &) = delete;

    /** Launches kernel `name` on the default stream (or the one from set_stream) with a 1-D grid
     *  and block and `dynamic_smem` bytes; above 48 KiB it first raises the kernel's
     *  MAX_DYNAMIC_SHARED_SIZE_BYTES. InternalError with the CUresult name and the kernel name on
     *  failure. Asynchronous: faults surface at synchronize(). */
    void launch(const std::string &name, unsigned grid, unsigned block, size_t dynamic_smem,
                const std::vector<KernelArg> &args);
    /** A CUstream handle for later launches; 0 is the legacy default stream. */
    void set_stream(uint64_t stream) { stream_ = stream; }
    const std::string &arch() const { return arch_; }

private:
    void *function(const std::string &name);  // CUfunction, cached
    void *module_ = nullptr;                  // CUmodule
    std::string arch_;
    uint64_t stream_ = 0;
    std::mutex mu_;
    std::map<std::string, std::pair<void *, size_t>> functions_;  // name -> (CUfunction, smem limit set)
};

/** cuCtxSynchronize; InternalError naming the error on an asynchronous fault (which leaves the
 *  context unusable: the process must restart to use the GPU again). */
void synchronize();

/** A timing event (cuEventCreate with default flags). */
class Event {
public:
    Event();
    ~Event();
    Event(const Event &) = delete;
    Event &operator=(const Event &) = delete;
    /** Records on `stream` (0: the legacy default stream). */
    void record(uint64_t stream = 0);
    /** Milliseconds between two recorded events (waits for `end`). */
    static float elapsed_ms(const Event &start, const Event &end);

private:
    void *event_ = nullptr;  // CUevent
};

/** Overwrites a 256 MiB device buffer (allocated once) so the next kernel starts with a cold L2. */
void flush_l2();

/** The name of a CUresult ("CUDA_ERROR_NO_DEVICE"); "CUresult N" for an unknown code. */
std::string cu_error_name(int code);

}  // namespace rf::cuda
