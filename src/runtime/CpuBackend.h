/** \file CpuBackend.h
 * The CPU backend's build and run: a printed module → JIT-compiled shared object, and the buffers it
 * runs on (conversion to and from the declared storage types, outputs poisoned before each run).
 * The module comes finished from the driver's pipeline (driver/Pipeline.h).
 */
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuse/Plan.h"
#include "interp/Tensor.h"
#include "runtime/Jit.h"
#include "target/CpuFeatures.h"
#include "tile/TileIR.h"

namespace rf {

struct CpuBuildOptions {
    std::vector<std::string> flags;  ///< the compiler flags (cpu_jit_flags)
    std::string cache_dir;           ///< JIT cache (empty: the default)
};

using CpuEntry = int (*)(const int64_t *, void *const *, int);

struct CpuProgram {
    tile::Module module;
    std::string source;
    std::shared_ptr<SharedObject> object;
    CpuEntry entry = nullptr;
    double compile_ms = 0;   ///< wall time of lowering + code generation + JIT (0 work if cached)
    bool from_cache = false;
    std::vector<std::string> flags;
};

/** Keeps the OpenMP runtime loaded for the life of the process: its worker threads outlive every
 *  kernel, and unloading it with the last kernel's shared object would pull their code away. Call
 *  before running any JIT-compiled code that uses OpenMP. */
void pin_openmp_runtime();

/** The compiler flags of generated kernels for `cpu` (what it can run, at its best ISA level), -O3,
 *  or -O1 with the sanitizers of a sanitized build (kernel_sanitizer_flags), then `extra`
 *  (REDFUSE_JIT_FLAGS, e.g. "-g -O0"; part of the cache key like every flag). */
std::vector<std::string> cpu_jit_flags(const CpuFeatures &cpu, const std::vector<std::string> &extra = {});

/** The sanitizer flags cpu_jit_flags adds: AddressSanitizer + UBSan when the library itself is built
 *  with them (CMake -DREDFUSE_SANITIZE=ON defines REDFUSE_SANITIZE), none otherwise. */
std::vector<std::string> kernel_sanitizer_flags();

/** Compiles a printed module (the JIT cache first). The kernels accept any sizes. */
std::unique_ptr<CpuProgram> build_cpu_program(tile::Module module, std::string source, const CpuBuildOptions &o);

/** Inputs and outputs in their storage formats, ready for repeated runs (benchmarks). */
class CpuBuffers {
public:
    CpuBuffers(const Program &p, const SizeBinding &sizes, const std::map<std::string, Tensor> &inputs);
    /** Fills every output with a poison pattern (NaN, or the most negative integer). */
    void poison();
    /** Runs the program once; InternalError when the kernel reports a failure. */
    void run(const CpuProgram &prog, int threads);
    std::map<std::string, Tensor> outputs() const;
    int64_t bytes() const;
    /** The user buffers in ABI order (inputs, then outputs) as bytes in their storage formats, and
     *  the sizes in spec order: the host side of the GPU backends' copies. */
    size_t count() const { return storage_.size(); }
    DType dtype_of(size_t i) const { return dtypes_[i]; }
    const std::vector<int64_t> &shape_of(size_t i) const { return shapes_[i]; }
    unsigned char *data(size_t i) { return storage_[i].data(); }
    size_t bytes_of(size_t i) const { return storage_[i].size(); }
    const std::vector<int64_t> &size_values() const { return sizes_; }

private:
    const Program &p_;
    std::vector<int64_t> sizes_;
    std::vector<std::vector<unsigned char>> storage_;
    std::vector<DType> dtypes_;
    std::vector<std::vector<int64_t>> shapes_;
    std::vector<std::string> names_;
    std::vector<bool> is_output_;
};

/** Encodes doubles into a dtype's storage bytes (the rounding of rf::round_to_dtype) and back. */
void encode_storage(const std::vector<double> &v, DType t, unsigned char *out);
std::vector<double> decode_storage(const unsigned char *in, int64_t n, DType t);

}  // namespace rf
