/** \file Pipeline.cpp
 * The pipeline: each stage is one call here, in order, with its dump. See docs/design.md
 * ("The pipeline") for the stages' folders and files.
 */
#include "driver/Pipeline.h"
#include "driver/Compiler.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "codegen/CodeGen_CPU.h"
#include "driver/Environment.h"
#include "driver/Report.h"
#include "fuse/Graph.h"
#include "fuse/SplitRates.h"
#include "ir/Eval.h"
#include "runtime/CpuBackend.h"
#include "runtime/GpuBackend.h"
#include "spec/Check.h"
#include "spec/Parser.h"
#include "tile/Lower.h"
#include "tile/Passes.h"

namespace rf {

namespace {

std::ostream &dump_stream(const Options &o) { return o.dump_stream ? *o.dump_stream : std::cerr; }

void dump(const Options &o, const DumpRequest &d, const std::function<std::string()> &text) {
    if (o.wants_dump(d)) dump_stream(o) << text();
}

/** The sizes the plan and schedule are chosen for: the options' over the spec's defaults (a size
 *  with neither is left out: the cost model then works without it). */
SizeBinding planning_sizes(const Program &p, const Options &o) {
    if (!o.sizes.empty()) return bind_sizes(p, o.sizes);
    SizeBinding sizes;
    for (const SizeDecl &s : p.sizes)
        if (s.default_value) sizes[s.name] = *s.default_value;
    return sizes;
}

/** A pass runs when it completes the lowering (GEMM recognition), or when Options::tile_passes
 *  lists it (all when unset), and for float states only where states are float (the GPU lowering);
 *  never skip-masked on OpenCL (below). */
bool pass_selected(const Options &o, const tile::TilePassInfo &p, bool float_states, TargetKind target) {
    if (p.float_states_only && !float_states) return false;
    if (p.cpu_only && float_states) return false;
    // OpenCL keeps one masked body for every tile: skip-masked's `if (full) unmasked else masked`
    // puts work-group barriers inside a branch that the whole work-group takes (legal OpenCL), and
    // PoCL, the OpenCL this project runs on, miscompiled that branch: a top-k over a causal mask
    // inserted nothing on row 0 (scripts/fuzz_specs.py seed 1205 #91; the same source with the
    // condition folded to a constant was right). CUDA keeps the pass.
    if (p.id == tile::TilePass::SkipMasked && target == TargetKind::OpenCL) return false;
    if (p.always || !o.tile_passes) return true;
    return std::find(o.tile_passes->begin(), o.tile_passes->end(), p.name) != o.tile_passes->end();
}

void verify_if_asked(const tile::Module &m, const Options &o) {
    if (o.verify_each_pass || tile::verify_each_pass()) tile::verify(m);
}

/** A CPU worker's fast memory for the plan's on-chip passes and their row blocks: half of L2 (room
 *  for the other operands); 0 when the target does not say. */
int64_t cpu_fast_memory_bytes(const Target &t) { return t.kind == TargetKind::Cpu && t.cpu.l2_bytes > 0 ? t.cpu.l2_bytes / 2 : 0; }

tile::LowerOptions lower_options(const Compilation &c, const Options &o) {
    tile::LowerOptions lo;
    lo.sizes = c.sizes;
    lo.schedules = o.schedules;
    lo.unfused = o.unfused;
    lo.threads = is_gpu(c.target.kind) ? c.target.workers() : o.threads;
    lo.workers = c.target.workers();
    lo.force_tile = o.tile;
    lo.force_segments = o.segments;
    lo.force_row_block = o.row_block;
    lo.force_strategy = o.strategy;
    lo.float_states = is_gpu(c.target.kind);  // GPU states are float: tile GEMMs may accumulate into them
    lo.row_lanes = c.target.kind == TargetKind::Cpu;
    lo.bf16_row_outputs = c.target.kind == TargetKind::Cpu;
    lo.epilogue_row_buffer = c.target.kind == TargetKind::Cpu;
    lo.row_reduced_members = c.target.kind == TargetKind::Cpu;
    lo.gemm_column_split = c.target.kind == TargetKind::Cpu;
    // Query rows per block of an attention-like chain. The tile GEMMs pack K and V (into tile panels
    // with AMX) once per row block, so taller blocks pack less per row: 128 rows measured 7-11% faster
    // than 64 on an AMX Xeon, 2 threads (bf16 and f32, causal or not, L = 2048, D = 128; 256 adds
    // 1-3% and halves the blocks the threads share).
    if (c.target.kind == TargetKind::Cpu) {
        lo.attention_row_block = c.target.cpu.amx_bf16 ? 128 : 64;
        lo.attention_row_block_dense_bf16 = 128;  // see DefaultSchedule.cpp
    }
    lo.fast_memory_bytes = cpu_fast_memory_bytes(c.target);
    // The next tile of decode's K and V, asked for ahead (PrefetchNextTiles.cpp): the whole tile on
    // Intel (AMX Xeon, decode GQA B = 4, Hq = 32, N = 8192, D = 128: 8.2 -> 6.6-7.1 ms); its first 8 KiB
    // on AMD, where a burst of one prefetch per line of a 64 KiB tile stalls the core until the lines
    // arrive (Zen 4, same case, `redfuse bench` alternated: whole tile 7.7-8.7 ms, none 7.0-7.4, the
    // first 8 KiB 6.6-7.3; 4 KiB and 16 KiB no better) and the hardware prefetchers carry the rest.
    if (c.target.kind == TargetKind::Cpu && c.target.cpu.vendor == "AuthenticAMD") lo.tile_prefetch_bytes = 8192;
    if (c.target.kind == TargetKind::Cpu) lo.tile_row_pad = 16;  // rows on cache lines (PassLowering::row_stride)
    // Row outputs stream past the caches once a call's inputs and output outgrow 3/4 of the last-level
    // cache (the rest holds everything else; 24 MiB where its size is unknown): f32 softmax R = 4096,
    // C = 1024 (16 + 16 MiB, AMD Zen 4 with a 32 MiB L3, `redfuse bench` alternated) 1.13-1.20 ->
    // 0.90-0.98 ms; the rule before (the output alone above 24 MiB) left it to the caches, which read
    // each output line for ownership before writing it.
    if (c.target.kind == TargetKind::Cpu && c.target.cpu.l3_bytes > 0) lo.stream_bytes = c.target.cpu.l3_bytes / 4 * 3;
    return lo;
}

/** lower to tile IR → each tile pass, with the dumps. */
tile::Module lower_and_optimize(const Compilation &c, const Options &o) {
    tile::LowerOptions lo = lower_options(c, o);
    tile::Module m = tile::lower_without_passes(c.plan, lo);                         // lower to tile IR
    verify_if_asked(m, o);
    dump(o, {Stage::TileLower, ""}, [&] { return tile::to_string(m); });
    for (const tile::TilePassInfo &p : tile::tile_passes()) {                       // each tile pass
        if (!pass_selected(o, p, lo.float_states, c.target.kind)) continue;
        m = p.run(m);
        verify_if_asked(m, o);
        dump(o, {Stage::TilePass, p.name}, [&] { return tile::to_string(m); });
    }
    dump(o, {Stage::Tile, ""}, [&] { return tile::to_string(m); });
    return m;
}

GpuCodegenOptions gpu_codegen_options(const Compilation &c, const Options &o) {
    GpuCodegenOptions go;
    go.dialect = c.target.kind == TargetKind::Cuda ? Dialect::Cuda : Dialect::OpenCL;
    go.threads = o.gpu_threads > 0 ? o.gpu_threads : (c.target.kind == TargetKind::Cuda ? 128 : 64);
    go.sizes = c.sizes;
    go.tensor_cores = o.tensor_cores;
    go.fusion_level = o.fusion_level;
    for (const ChainPlan &ch : c.plan.chains) {
        double n = 1;
        for (Expr e : ch.axis_extents) n *= static_cast<double>(eval_int(e, c.sizes));
        go.longest_axis = std::max(go.longest_axis, n);
    }
    return go;
}

double largest_shared_bytes(const GpuModule &g, const SizeBinding &sizes) {
    double worst = 0;
    for (const GpuLaunch &l : g.launches) worst = std::max(worst, static_cast<double>(eval_int(l.shared_bytes, sizes)));
    return worst;
}

/** GPU: print, and while a work-group needs more shared memory than the target has, halve the row
 *  block and the tile in turn (the schedule knobs, as a user would with --row-block / --tile). */
Generated generate_gpu_fitted(const Compilation &c, Options o) {
    const int64_t limit = c.target.gpu.shared_memory_bytes;
    for (int attempt = 0;; attempt++) {
        Generated g;
        g.module = lower_and_optimize(c, o);
        g.gpu = generate_gpu(g.module, gpu_codegen_options(c, o));                    // print
        g.source = g.gpu.source;
        double worst = largest_shared_bytes(g.gpu, c.sizes);
        if (limit <= 0 || worst <= static_cast<double>(limit)) return g;
        int64_t rb = 1, tile = 1;
        for (const tile::Kernel &k : g.module.kernels) {
            rb = std::max(rb, k.schedule.row_block);
            tile = std::max(tile, k.schedule.tile);
        }
        if (attempt >= 12 || (rb <= 1 && tile <= 32))
            throw UserError({}, "the kernels need " + std::to_string(static_cast<long long>(worst)) +
                                    " bytes of shared memory per work-group at these sizes; the device has " +
                                    std::to_string(static_cast<long long>(limit)));
        if (rb > 1 && (attempt % 2 == 0 || tile <= 32)) o.row_block = std::max<int64_t>(1, rb / 2);
        else o.tile = std::max<int64_t>(32, tile / 2);
    }
}

}  // namespace

PlanOptions plan_options(const Target &target, const Options &o) {
    // The defaults model an H100/H200-class GPU (132 workers, 48 KiB of fast memory each): every GPU
    // target, and the interpreters (whose plans are those `analyze` reports by default).
    PlanOptions po;
    po.approx = o.approx;
    if (target.kind == TargetKind::Cpu) {
        po.parallel_units = target.workers();
        if (int64_t fast = cpu_fast_memory_bytes(target)) po.fast_memory_bytes = fast;
    }
    return po;
}

std::unique_ptr<Compilation> analyze_source(const std::string &source, const std::string &file, const Target &target,
                                            const Options &options) {
    install_environment_once();
    auto c = std::make_unique<Compilation>();
    c->file = file;
    c->source = source;
    c->target = target;
    c->options = with_environment(options);
    const Options &o = c->options;
    auto t0 = std::chrono::steady_clock::now();
    spec::ParsedSpec parsed = spec::parse_statements(source);                      // parse
    c->checked = spec::check_program(parsed.stmts, parsed.end, file);              // check and lower to IR
    dump(o, {Stage::Ir, ""}, [&] { return to_string(c->checked); });
    RateSplitResult split = split_sums_by_rate(c->checked);                        // split sums by rate
    c->program = std::move(split.program);
    c->rate_splits = std::move(split.splits);
    dump(o, {Stage::IrRates, ""}, [&] { return to_string(c->program); });
    dump(o, {Stage::Graph, ""}, [&] { return to_string(dependence_graph(c->program), c->program); });  // analyze
    c->sizes = planning_sizes(c->program, o);
    PlanOptions po = plan_options(target, o);
    po.sizes = &c->sizes;
    c->plan = make_plan(c->program, po);                                           // plan
    c->plan.program = &c->program;
    dump(o, {Stage::Plan, ""}, [&] { return plan_dump(*c); });
    c->analyze_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return c;
}

std::unique_ptr<Compilation> analyze_file(const std::string &path, const Target &target, const Options &options) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError({}, "cannot read spec file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return analyze_source(ss.str(), path, target, options);
}

CpuCodegenOptions cpu_codegen_options(const Options &o) {
    CpuCodegenOptions cg;
    cg.bf16_tile_products = o.bf16_tile_products;
    cg.half_accuracy_exp2 = o.half_accuracy_exp2;
    return cg;
}

Generated generate(const Compilation &c, const Options &o) {
    RF_INTERNAL_ASSERT(!is_interpreter(c.target.kind)) << "nothing to generate for target " << to_string(c.target.kind);
    if (is_gpu(c.target.kind)) {
        Generated g = generate_gpu_fitted(c, o);
        dump(o, {c.target.kind == TargetKind::Cuda ? Stage::Cuda : Stage::OpenCL, ""}, [&] { return g.source; });
        return g;
    }
    Generated g;
    g.module = lower_and_optimize(c, o);
    g.source = generate_cpu(g.module, cpu_codegen_options(o));                      // print
    dump(o, {Stage::Cpp, ""}, [&] { return g.source; });
    return g;
}

std::unique_ptr<CpuProgram> build_cpu(Generated g, const Compilation &c, const Options &o) {
    RF_INTERNAL_ASSERT(c.target.kind == TargetKind::Cpu) << "build_cpu for target " << to_string(c.target.kind);
    CpuBuildOptions bo;
    bo.flags = cpu_jit_flags(c.target.cpu, o.jit_extra_flags);
    bo.cache_dir = o.cache_dir;
    return build_cpu_program(std::move(g.module), std::move(g.source), bo);       // build
}

std::unique_ptr<GpuProgram> build_gpu(Generated g, const Compilation &c, const Options &o) {
    RF_INTERNAL_ASSERT(is_gpu(c.target.kind)) << "build_gpu for target " << to_string(c.target.kind);
    GpuBuildOptions bo;
    bo.kind = c.target.kind;
    bo.arch = c.target.gpu.arch;
    bo.cache_dir = o.cache_dir;
    return build_gpu_program(std::move(g.gpu), bo);                                 // build
}

Target analysis_target() {
    Target t;
    t.kind = TargetKind::Cuda;
    t.gpu = gpu_model(TargetKind::Cuda);
    return t;
}

std::unique_ptr<Compilation> compile_source(const std::string &source, const std::string &file, const Options &o) {
    return analyze_source(source, file, analysis_target(), o);
}

std::unique_ptr<Compilation> compile_file(const std::string &path, const Options &o) {
    return analyze_file(path, analysis_target(), o);
}

}  // namespace rf
