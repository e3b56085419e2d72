/** \file CudaEmuDevice.h
 * An emulated CUDA device for tests: generated CUDA modules compiled by the host C++ compiler over
 * the emulator of CudaEmu.h and run block by block on the CPU, installed for target "cuda" through
 * rf::set_cuda_device_override, so that the pipeline, GpuBuffers and run_compiled work unchanged.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rf::test {

struct CudaEmuOptions {
    uint32_t seed = 1;  ///< the order in which threads released by a barrier resume (a seeded shuffle)
    /** Host compiler flags of the emulated modules: -O1 compiles a module in a few seconds and runs
     *  the small test sizes fast enough; -O0 -g for debugging a kernel under gdb. */
    std::vector<std::string> flags{"-O1"};
    /** Applied to each generated source before it is compiled: the tests' injected mistakes. */
    std::function<void(std::string &)> mutate_source;
    /** Called with each stream launches are queued on (the Kernel's device-memory path). */
    std::function<void(void *)> on_set_stream;
};

/** Installs the emulated device for target "cuda" while alive (H200-like limits: 227 KiB of shared
 *  memory a block, at most half an SM's per work-group, 8 workers for the segment split). Launch
 *  failures (deadlocks, divergent barriers, warp collectives with missing lanes, shared-memory races
 *  or misaligned accesses of the GEMM's PTX primitives) throw std::runtime_error from the launch. */
class ScopedCudaEmulation {
public:
    explicit ScopedCudaEmulation(CudaEmuOptions o = {});
    ~ScopedCudaEmulation();
    ScopedCudaEmulation(const ScopedCudaEmulation &) = delete;
    ScopedCudaEmulation &operator=(const ScopedCudaEmulation &) = delete;
};

/** The source CudaEmuDevice compiles for a generated CUDA module: the prelude include, the module's
 *  source with its dynamic shared memory declaration rewritten, and the launch entry point. */
std::string emulated_cuda_source(const std::string &cuda_source, const std::vector<std::string> &kernels);

}  // namespace rf::test
