/** \file Options.h
 * Every knob of a compilation, as one value passed down from the driver: what the plan and schedule
 * are chosen for, schedule overrides, GPU code generation choices, which stages to dump, which tile
 * passes to run, and the JIT's settings. Choices are enums parsed once at the edge (the command line,
 * the environment, the Python layer), with errors that list the valid values.
 */
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/CodeGen_GPU.h"
#include "fuse/Strategy.h"
#include "tile/TileIR.h"

namespace rf {


/** The stages of the pipeline that can be dumped (`analyze --emit STAGE`, REDFUSE_DUMP=STAGE,...). */
enum class Stage : uint8_t {
    Ir,         ///< the checked program (ir/Program.h)
    IrRates,    ///< the program after the rate split ("ir:rates"; the same as ir when no sum is split)
    Graph,      ///< the dependence graph of its reductions
    Plan,       ///< chains, passes, members and their derived parts
    TileLower,  ///< the tile IR as lowered, before any pass ("tile:lowered")
    TilePass,   ///< the tile IR after one named pass ("tile:after-NAME")
    Tile,       ///< the tile IR after every pass: what is printed ("tile")
    Cpp,        ///< the generated C++
    OpenCL,     ///< the generated OpenCL C
    Cuda,       ///< the generated CUDA C++
};

/** One requested dump: a stage, and for Stage::TilePass the pass's name. */
struct DumpRequest {
    Stage stage = Stage::Plan;
    std::string pass;
    bool operator==(const DumpRequest &o) const { return stage == o.stage && pass == o.pass; }
};

/** "ir", "ir:rates", "graph", "plan", "tile:lowered", "tile:after-exp2", "tile", "cpp", "opencl", "cuda".
 *  UserError listing the valid names (and the tile passes' names) otherwise. */
DumpRequest parse_dump(const std::string &name);
std::string to_string(const DumpRequest &d);
/** A comma-separated list of dumps. */
std::vector<DumpRequest> parse_dump_list(const std::string &list);
/** Every valid dump name, in pipeline order (for help texts and errors). */
std::vector<std::string> dump_names();

/** The tile passes' names in the order the pipeline runs them (tile/Passes.h). */
std::vector<std::string> tile_pass_names();
/** A comma-separated list of tile pass names; UserError listing the valid ones otherwise. */
std::vector<std::string> parse_tile_pass_list(const std::string &list);

struct Options {
    // ---- What the plan and the schedule are chosen for.
    /** Sizes the cost model and the schedule are chosen for (default: the spec's defaults). The
     *  built kernels accept any sizes at run time. */
    std::map<std::string, int64_t> sizes;
    /** Fuse through rounding casts with the running value (inexact; `run --check` reports its error). */
    bool approx = false;

    // ---- Schedule overrides (0 / empty: the planner's choice).
    bool unfused = false;          ///< one literal kernel per definition: the in-house unfused baseline
    std::optional<Strategy> strategy;  ///< forced strategy for every chain (multi_pass, onchip_multipass, multi_segment, ...)
    int64_t tile = 0, segments = 0, row_block = 0;
    std::map<int, tile::Schedule> schedules;  ///< per-chain schedules (from `tune`)
    /** CPU worker threads the schedule plans for and the kernels run with (0: the target's usable CPUs). */
    int threads = 0;

    /** Interpreter targets: the seed of the random tiles, segments and merge trees. */
    uint64_t interp_seed = 1;

    // ---- GPU code generation.
    int gpu_threads = 0;           ///< work-group size (0: 128 for CUDA, 64 for OpenCL)
    FusionLevel fusion_level = FusionLevel::Auto;
    bool tensor_cores = true;      ///< CUDA: mma.sync for 16/8-bit tile GEMMs
    /** CPU: in modules whose outputs are bf16 or fp8, float tiles met by bf16 operands in tile GEMMs
     *  are rounded to bf16 for the bf16 unit (CpuCodegenOptions::bf16_tile_products); false: exact. */
    bool bf16_tile_products = true;
    /** CPU: in modules whose outputs are bf16, f16 or fp8, the row exp2 primitives use a degree-4
     *  polynomial (CpuCodegenOptions::half_accuracy_exp2); false: <= 1 ulp. `--exact-products`
     *  clears both. */
    bool half_accuracy_exp2 = true;

    // ---- The tile passes and checks.
    /** Which optional tile passes run, by name (tile/Passes.h); nullopt: all of them, in order.
     *  GEMM recognition completes the lowering and always runs. */
    std::optional<std::vector<std::string>> tile_passes;
    /** Verify the tile IR after lowering and after every pass (always on in debug builds). */
    bool verify_each_pass = false;

    // ---- Dumps: written to `dump_stream` (stderr when null) as each stage finishes.
    std::vector<DumpRequest> dumps;
    std::ostream *dump_stream = nullptr;

    // ---- Running (CPU).
    /** Before a call, ask for transparent huge pages on output buffers of 4 MiB or more
     *  (runtime/HostMemory.h: a fresh output's page faults cost more than a memory-bound kernel). */
    bool huge_page_outputs = true;

    // ---- The JIT (CPU) and the cubin cache (CUDA).
    std::vector<std::string> jit_extra_flags;  ///< appended to the generated kernels' compiler flags
    std::string cache_dir;         ///< JIT and cubin cache (empty: the default)

    bool wants_dump(const DumpRequest &d) const;
};

}  // namespace rf
