/** \file Run.h
 * The `run` command: compile for a target, execute on random (or loaded) inputs, check every output
 * against the float64 reference interpreter, report (text and JSON: docs/cli.md, "run --json").
 */
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "driver/Kernel.h"
#include "interp/Inputs.h"
#include "interp/Tensor.h"

namespace rf {

class CpuBuffers;

struct RunOptions {
    TargetKind target = TargetKind::Interp;
    std::map<std::string, int64_t> sizes;  ///< the sizes to run at (defaults from the spec)
    uint64_t seed = 1;    ///< of the random inputs and of the interpreter's random tiling
    bool check = false;   ///< compare every output with the float64 reference
    bool f32 = false;     ///< interp: round every operation to float32 (target interp-f32)
    std::string save_dir, load_dir;
    InputDistribution dist = InputDistribution::Normal;
    double scale = 1.0;
    bool approx = false;  ///< run the approximate incremental plan through rounding casts
    int threads = 0;      ///< cpu: worker threads (0: all)
    bool unfused = false; ///< cpu/gpu: the in-house unfused plan instead of the fused one
    int64_t tile = 0, segments = 0, row_block = 0;  ///< cpu/gpu: schedule knobs forced on every chain (0: default)
    int gpu_threads = 0;  ///< opencl/cuda: work-group size (0: the backend's default)
    FusionLevel fusion_level = FusionLevel::Auto;  ///< opencl/cuda
    bool no_tensor_cores = false;  ///< cuda: SIMT GEMMs only
    bool exact_products = false;   ///< cpu: no bf16 rounding of float tiles in tile GEMMs
    std::string arch;     ///< cuda: compile for this architecture (sm_XX)

    /** The compilation's options for these run options (the plan is made for the run's sizes). */
    Options compile_options() const;
};

struct RunReport {
    bool ok = true;
    nlohmann::json json;
    std::string text;
};

/** The inputs of a run: loaded from o.load_dir, or random (seed, distribution, scale). */
std::map<std::string, Tensor> run_inputs(const Program &p, const SizeBinding &sizes, const RunOptions &o);

/** Views of a CpuBuffers' storage: the inputs and the outputs, in spec order. */
std::pair<std::vector<TensorView>, std::vector<TensorView>> buffer_views(CpuBuffers &bufs, const Program &p);

/** execute → check → report, on a built kernel at o.sizes. */
RunReport run_kernel(const Kernel &k, const RunOptions &o);

/** Compiles `spec` (a path or the text) for o.target, then run_kernel. */
RunReport run_spec(const std::string &spec, const RunOptions &o);
/** The same for an analyzed compilation's source (tests: a compilation made once, run on several
 *  targets and schedules; each run compiles for its own target through the pipeline). */
RunReport run_compiled(const Compilation &c, const RunOptions &o);

}  // namespace rf
