/** \file Compiler.h
 * The pipeline, top to bottom: read → parse and check → IR → analyze and plan → (backends, later
 * issues). Each stage can be dumped (`--emit ir|plan`, or REDFUSE_DUMP=ir,plan in the environment).
 * Also the analysis report (text and JSON) and the `run` command's checking logic.
 */
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuse/Plan.h"
#include "interp/Tensor.h"
#include "ir/Program.h"

namespace rf {

struct Compilation {
    std::string file, source;
    Program program;
    Plan plan;
    SizeBinding sizes;  ///< the sizes the plan was made for (--size over the spec's defaults)
    double analyze_ms = 0;
};

struct CompileOptions {
    bool approx = false;
    /** Machine model of the cost model: "gpu" (an H100/H200-class GPU: 132 workers, 48 KiB of
     *  fast memory per worker) or "cpu" (this host: its cores and its L2 per core). */
    std::string target = "gpu";
    std::map<std::string, int64_t> sizes;  ///< for the cost model (and `run`)
};

/** The cost model's machine for a target name (cpu: this host; gpu, cuda, opencl: a GPU model). */
PlanOptions plan_options_for(const std::string &target);

/** Reads and compiles a spec file. UserError for bad specs or unreadable files. */
std::unique_ptr<Compilation> compile_file(const std::string &path, const CompileOptions &opts);
std::unique_ptr<Compilation> compile_source(const std::string &source, const std::string &file, const CompileOptions &opts);

/** The `analyze` report. */
nlohmann::json analysis_json(const Compilation &c);
std::string analysis_text(const Compilation &c);
/** The `--emit plan` dump: passes, members and their derived parts. */
std::string plan_dump(const Compilation &c);
/** The output directory of `emit`: created on construction; every file written is recorded.
 *  UserError when the directory or a file cannot be written. */
class EmitDir {
public:
    explicit EmitDir(const std::string &dir);
    void write(const std::string &file, const std::string &text);
    std::vector<std::string> written;

private:
    std::string dir_;
};

/** `emit --target cpu -o DIR`: writes DIR/NAME.h (the C ABI), DIR/NAME.cpp and DIR/redfuse_cpu.h;
 *  returns the paths written. */
std::vector<std::string> emit_cpu(const Compilation &c, const std::string &dir, const std::string &name);

/** `emit --target opencl|cuda -o DIR`: writes DIR/NAME.cl or NAME.cu and DIR/NAME.launch.json (the
 *  kernels in launch order with work-group counts and shared memory as C expressions of the sizes). */
std::vector<std::string> emit_gpu(const Compilation &c, const std::string &dir, const std::string &name, const std::string &target);

/** `--emit tile` (the tile IR module) or `--emit cpp` (the generated C++) at the compilation's sizes. */
std::string backend_dump(const Compilation &c, const std::string &stage);

struct RunOptions {
    std::string target = "interp";
    std::map<std::string, int64_t> sizes;
    uint64_t seed = 1;
    bool check = false;
    bool f32 = false;
    std::string save_dir, load_dir;
    std::string dist = "normal";
    double scale = 1.0;
    bool approx = false;  ///< run the approximate incremental plan through rounding casts (docs/design.md §3)
    int threads = 0;      ///< cpu: worker threads (0: all)
    bool unfused = false; ///< cpu: run the in-house unfused plan instead of the fused one
    int64_t tile = 0, segments = 0, row_block = 0;  ///< cpu/gpu: schedule knobs forced on every chain (0: default)
    int gpu_threads = 0;        ///< opencl/cuda: work-group size (0: the backend's default)
    std::string fusion_level = "auto";  ///< opencl/cuda: auto | block | thread
    bool no_tensor_cores = false;  ///< cuda: SIMT GEMMs only
};

struct RunReport {
    bool ok = true;
    nlohmann::json json;
    std::string text;
};

/** Runs the compiled spec on random (or loaded) inputs with the plan interpreter and, when asked,
 *  compares every output with the float64 reference interpreter. */
RunReport run_compiled(const Compilation &c, const RunOptions &opts);

}  // namespace rf
