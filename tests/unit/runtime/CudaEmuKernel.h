/** \file CudaEmuKernel.h
 * The prelude of a generated CUDA module compiled for the host emulator (CudaEmuDevice.cpp puts
 * `#include "CudaEmuKernel.h"` before the module's source): CUDA's keywords as C++, the emulated
 * CUDA of CudaEmu.h in the global namespace, and rf_emu_run, which runs one launch block by block.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "CudaEmu.h"

using namespace cuda_emu;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// The source line goes with each block barrier: threads meeting at different __syncthreads calls
// (a barrier in divergent code) are reported.
#define __syncthreads() ::cuda_emu::sync_block(__LINE__)
// redfuse_cuda_gemm.h then leaves its PTX primitives to CudaEmuPtx.h.
#define RF_GEMM_EMULATE 1

namespace cuda_emu {

/** The block's dynamic shared memory (what `extern __shared__ unsigned char rf_smem[]` names). */
inline unsigned char *dynamic_smem() { return g_block->scratch; }

/** The launch's buffers, for the bounds check of vector loads. */
inline std::vector<std::pair<const unsigned char *, size_t>> g_buffers;

/** A vector load (`*(const float4 *)(p)` in the generated source, rewritten): CUDA faults unless p is
 *  aligned to the vector's size; the whole vector must lie in one buffer or in shared memory. Read
 *  with memcpy, so a reported misalignment does not also crash the host. */
template <class V> V vector_load(const void *p) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    if (reinterpret_cast<uintptr_t>(c) % sizeof(V) != 0)
        g_errors.add("vector load of " + std::to_string(sizeof(V)) + " bytes from a misaligned address (offset " +
                     std::to_string(reinterpret_cast<uintptr_t>(c) % 256) + " mod 256) by thread " + std::to_string(threadIdx.x));
    bool inside = c >= g_block->scratch && c + sizeof(V) <= g_block->scratch + g_block->scratch_bytes;
    for (auto &[b, n] : g_buffers) inside |= c >= b && c + sizeof(V) <= b + n;
    V v{};
    if (!inside) g_errors.add("vector load of " + std::to_string(sizeof(V)) + " bytes outside every buffer by thread " + std::to_string(threadIdx.x));
    else std::memcpy(&v, c, sizeof v);
    return v;
}

template <class P> P kernel_arg(size_t i, void *const *bufs, size_t nbufs, const int64_t *sizes) {
    if constexpr (std::is_pointer_v<P>) return static_cast<P>(i < nbufs ? bufs[i] : nullptr);
    else return static_cast<P>(i >= nbufs ? sizes[i - nbufs] : 0);
}

/** Runs kernel `k` on `grid` blocks of `threads` threads with `smem` bytes of dynamic shared memory;
 *  its arguments are `bufs` (device pointers) then `sizes`. Blocks run one after the other, each
 *  over a fresh shared memory filled with 0xff bytes (NaN as float: a read of what no thread wrote
 *  shows in the outputs). Returns 0, or 1 with the first errors in `err`. */
template <class... A, size_t... I>
void call_kernel(void (*k)(A...), std::index_sequence<I...>, void *const *bufs, size_t nbufs, const int64_t *sizes) {
    k(kernel_arg<A>(I, bufs, nbufs, sizes)...);
}

template <class... A>
int run_kernel(void (*k)(A...), unsigned grid, unsigned threads, size_t smem, void *const *bufs, const size_t *buf_bytes,
               size_t nbufs, const int64_t *sizes, size_t nsizes, uint32_t seed, char *err, size_t err_bytes) {
    std::string report;
    if (sizeof...(A) != nbufs + nsizes) report = "the launch passes a different number of arguments than the kernel takes";
    if (threads == 0 || threads % 32 != 0 || threads > 1024) report = "block size not a multiple of 32 in [32, 1024]";
    g_errors.list.clear();
    g_buffers.clear();
    for (size_t i = 0; i < nbufs; i++) g_buffers.push_back({static_cast<const unsigned char *>(bufs[i]), buf_bytes[i]});
    // 64 canary bytes past the end catch a write beyond the launch's shared memory.
    const size_t kCanary = 64;
    std::vector<unsigned char> shared(smem + kCanary);
    gridDim = Dim{grid, 1, 1};
    for (unsigned b = 0; b < grid && report.empty(); b++) {
        std::memset(shared.data(), 0xff, smem);
        std::memset(shared.data() + smem, 0xa5, kCanary);
        auto call = [&] { call_kernel(k, std::index_sequence_for<A...>{}, bufs, nbufs, sizes); };
        run_fibers(static_cast<int>(threads), Dim{b, 0, 0}, shared.data(), smem, {}, [](void *c) { (*static_cast<decltype(call) *>(c))(); },
                   &call, seed * 7919u + b);
        for (size_t i = smem; i < shared.size(); i++)
            if (shared[i] != 0xa5) {
                g_errors.add("a write past the " + std::to_string(smem) + " bytes of dynamic shared memory");
                break;
            }
        if (!g_errors.list.empty()) {
            report = "block " + std::to_string(b) + " of " + std::to_string(grid) + ":";
            for (const std::string &e : g_errors.list) report += "\n  " + e;
        }
    }
    if (report.empty()) return 0;
    std::snprintf(err, err_bytes, "%s", report.c_str());
    return 1;
}

}  // namespace cuda_emu

/** The signature of the entry point CudaEmuDevice.cpp appends to every module (one switch over its
 *  kernels' names calling run_kernel). */
typedef int (*rf_emu_launch_fn)(const char *kernel, unsigned grid, unsigned threads, size_t smem,
                                           void *const *bufs, const size_t *buf_bytes, size_t nbufs, const int64_t *sizes, size_t nsizes,
                                           uint32_t seed, char *err, size_t err_bytes);
