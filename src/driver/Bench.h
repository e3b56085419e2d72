/** \file Bench.h
 * `redfuse bench` and `redfuse tune`: time the fused kernel and the unfused plan on the same
 * inputs, report achieved GB/s and GFLOP/s as fractions of this machine's measured limits, and
 * search the schedule knobs (results cached next to the JIT cache).
 */
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "driver/Compiler.h"
#include "interp/Tensor.h"

namespace rf {

struct MachineLimits {
    double bandwidth_gbs = 0;  ///< STREAM-add style, all threads
    double fp32_gflops = 0;    ///< vector FMA peak, all threads
    double bf16_gflops = 0;    ///< vdpbf16ps peak, all threads (0: no AVX512_BF16)
    double int8_gops = 0;      ///< vpdpbusd peak, all threads (0: no AVX512_VNNI)
    double amx_bf16_gflops = 0;  ///< AMX tdpbf16ps peak, all threads (0: no AMX, or Linux refused the tiles)
    double amx_int8_gops = 0;    ///< AMX tdpbssd peak, all threads (0: likewise)
    int threads = 0;
    std::string source;        ///< "measured" or "cached: PATH"
};

/** Measures (once per cache directory, CPU and thread count; kept as JSON) the machine's memory
 *  bandwidth and its FP32 FMA, bf16 dot, int8 dot and AMX bf16 / int8 tile peaks with JIT-compiled
 *  probes (compiled for `cpu`, the host). */
MachineLimits machine_limits(const CpuFeatures &cpu, int threads, bool remeasure = false);

/** The fastest unit a module's tile GEMMs run on: int8 (i8 × i8), bf16 (bf16 × bf16, or a float
 *  tile rounded to bf16 when `bf16_tile_products`: CpuCodegenOptions), else fp32. */
enum class GemmUnit { Fp32, Bf16, Int8 };
GemmUnit gemm_unit(const tile::Module &m, bool bf16_tile_products);

/** The compute peak a floor uses for GEMMs in `unit`'s dtype: the fastest unit the machine has for
 *  it — "amx_bf16" / "amx_int8" (tiles), "bf16" / "int8" (AVX-512 dot products) — and never below
 *  "fp32" (the FMA peak). A floor at a slower unit than the machine has is no floor (issue 13). */
struct FloorPeak {
    double gflops = 0;
    std::string unit;
};
FloorPeak floor_peak(const MachineLimits &m, GemmUnit unit);

/** Bytes a workload must move (every input read once, every output written once) and FLOPs of
 *  its definitions as written (each reduction term's operations times its domain). */
struct WorkloadCost {
    double bytes = 0, flops = 0;
};
WorkloadCost workload_cost(const Program &p, const SizeBinding &sizes);

struct BenchOptions {
    std::map<std::string, int64_t> sizes;
    int threads = 0;
    std::optional<Strategy> strategy;  ///< none: the plan's (or the tuned one); else multi_pass, onchip_multipass, ...
    bool unfused = false;     ///< `--strategy unfused`: the unfused plan is the variant timed as fused
    std::string load_dir;
    uint64_t seed = 1;
    double budget_s = 1.0;    ///< time per measured variant (at least min_reps runs)
    int min_reps = 5;
    bool unfused_too = true;  ///< also time the unfused plan
    bool use_tuned = true;    ///< apply a cached `tune` result when one exists
    int64_t tile = 0, segments = 0, row_block = 0;
    int gpu_threads = 0;         ///< opencl/cuda: work-group size (0: the backend's default)
    FusionLevel fusion_level = FusionLevel::Auto;  ///< opencl/cuda
    bool tensor_cores = true;    ///< cuda
};

/** The bench JSON (see bench/README.md for the fields the harness reads) and a text table. */
struct BenchReport {
    nlohmann::json json;
    std::string text;
};
/** `c` is analyzed for the bench's target (cpu, cuda or opencl) at the bench's sizes. */
BenchReport bench_compiled(const std::shared_ptr<const Compilation> &c, const BenchOptions &o);
/** bench on a GPU target (BenchGpu.cpp): device-timed runs (CUDA events; the L2 flushed before
 *  each), the nominal memory bandwidth of the device as the floor. */
BenchReport bench_gpu(const Compilation &c, const BenchOptions &o);

struct TuneOptions {
    BenchOptions bench;
    bool retune = false;  ///< ignore a cached result
    std::function<void(const std::string &)> progress;  ///< one line per tried variant
};
BenchReport tune_compiled(const std::shared_ptr<const Compilation> &c, const TuneOptions &o);
/** tune on a GPU target: fusion level x work-group size x tile/row block, device-timed; the best is
 *  kept in the cache and used by `bench --target` on the same device and sizes. */
BenchReport tune_gpu(const Compilation &c, const TuneOptions &o);
/** The outputs of `out` that differ from `reference` beyond 4x the dtype's tolerance (indices:
 *  exactly), as " name name ..."; empty when they agree. tune_gpu keeps only variants whose outputs
 *  agree with the first variant's: a fast wrong kernel never becomes the tuned default. */
std::string outputs_disagree(const Program &p, const std::map<std::string, Tensor> &out, const std::map<std::string, Tensor> &reference);

/** A cached `tune` result at path (marked "cached"), or nothing when there is none or it is unreadable. */
std::optional<BenchReport> cached_tuning(const std::filesystem::path &path);
/** Writes a `tune` result atomically and records where in j["saved"]. */
void save_tuning(const std::filesystem::path &path, nlohmann::json &j);

}  // namespace rf
