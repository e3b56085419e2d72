/** \file Pipeline.h
 * The compiler, top to bottom, in one place (Pipeline.cpp): parse → check and lower to IR → analyze
 * → plan → lower to tile IR → each tile pass → print for the target → build. Every stage can be
 * dumped by name (Options::dumps: `--emit STAGE`, REDFUSE_DUMP=plan,tile:after-exp2). The backends
 * receive a finished tile module and only print, build and launch it; nothing below the driver
 * plans, lowers or asks the host anything.
 */
#pragma once

#include <memory>
#include <string>

#include "codegen/CodeGen_CPU.h"
#include "codegen/CodeGen_GPU.h"
#include "driver/Options.h"
#include "fuse/Plan.h"
#include "fuse/SplitRates.h"
#include "ir/Program.h"
#include "target/Target.h"
#include "tile/TileIR.h"

namespace rf {

struct CpuProgram;
struct GpuProgram;

/** The front half's result: the checked program and its plan, for one target and its options. */
struct Compilation {
    std::string file, source;
    Target target;
    Options options;   ///< with the environment applied (driver/Environment.h)
    Program checked;   ///< the program as checked and lowered (`--emit ir`); the reference of `run --check`
    Program program;   ///< checked, then rewritten before planning (the rate split, fuse/SplitRates.h)
    std::vector<RateSplit> rate_splits;  ///< the sums the rate split replaced, in definition order
    Plan plan;
    SizeBinding sizes; ///< the sizes the plan and schedule were chosen for (Options::sizes over the spec's defaults)
    double analyze_ms = 0;
};

/** The back half's result before building: the tile module after every pass and its source. */
struct Generated {
    tile::Module module;  ///< what was printed
    std::string source;   ///< C++ (CPU), OpenCL C or CUDA C++
    GpuModule gpu;        ///< GPU kinds: the module, its source and its launches (as printed)
};

/** parse → check and lower to IR → analyze → plan, for `target` (whose machine feeds the cost
 *  model). UserError for a bad spec, located. `file` names the source in messages. */
std::unique_ptr<Compilation> analyze_source(const std::string &source, const std::string &file, const Target &target,
                                            const Options &options);
/** analyze_source on a file's text; UserError when it cannot be read. */
std::unique_ptr<Compilation> analyze_file(const std::string &path, const Target &target, const Options &options);

/** lower to tile IR → each tile pass → print, for the compilation's target, with the schedule
 *  knobs of `schedule` (the compilation's own options, or variants of them: bench's unfused plan,
 *  tune's candidates). GPU targets: the row block and tile are halved until every kernel fits the
 *  target's shared memory. Interpreter targets have nothing to generate (InternalError). */
Generated generate(const Compilation &c, const Options &schedule);
/** The CPU printer's options that `Options` sets (bf16 tile products). */
CpuCodegenOptions cpu_codegen_options(const Options &o);
inline Generated generate(const Compilation &c) { return generate(c, c.options); }

/** build: the JIT (CPU) or the device's compiler (CUDA: NVRTC; OpenCL: the driver). */
std::unique_ptr<CpuProgram> build_cpu(Generated g, const Compilation &c, const Options &o);
std::unique_ptr<GpuProgram> build_gpu(Generated g, const Compilation &c, const Options &o);

/** The machine model of the cost model, from the target. */
PlanOptions plan_options(const Target &target, const Options &o);

}  // namespace rf
