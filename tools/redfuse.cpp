/** \file redfuse.cpp
 * The command-line tool: a thin shell over the library (docs/cli.md). One function per command;
 * choices are parsed into enums here, at the edge. Exit status 0 on success, 1 for a bad spec or a
 * failed check, 2 for usage errors, 3 for internal errors (compiler bugs).
 */
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <new>
#include <sstream>

#include "driver/Bench.h"
#include "driver/Compiler.h"
#include "driver/Run.h"
#include "fuse/Graph.h"
#include "grad/Check.h"
#include "grad/Grad.h"
#include "shard/Partial.h"
#include "spec/Frontend.h"
#include "support/Error.h"

namespace {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::map<std::string, int64_t> parse_sizes(const std::vector<std::string> &items) {
    std::map<std::string, int64_t> out;
    for (const std::string &group : items) {
        std::stringstream ss(group);
        std::string item;
        while (std::getline(ss, item, ',')) {
            if (item.empty()) continue;
            size_t eq = item.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
                throw UsageError("--size expects NAME=VALUE[,NAME=VALUE...], got '" + item + "'");
            std::string name = item.substr(0, eq), value = item.substr(eq + 1);
            try {
                size_t used = 0;
                long long v = std::stoll(value, &used);
                if (used != value.size()) throw std::invalid_argument("trailing");
                out[name] = v;
            } catch (const std::exception &) {
                throw UsageError("--size " + name + ": '" + value + "' is not an integer");
            }
        }
    }
    return out;
}

std::string read_source_for_errors(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    if (in) ss << in.rdbuf();
    return ss.str();
}

/** Every command-line value, as parsed by CLI11 (strings for choices, checked against their lists). */
struct Args {
    std::string spec, emit_stage, target, model_target = "gpu", save_dir, load_dir, dist = "normal", out_file,
        emit_name = "redfuse", strategy, fusion_level = "auto", arch, forward_out, axis;
    std::vector<std::string> size_items, wrt_items;
    bool json = false, approx = false, check = false, f32 = false, unfused = false, no_tensor_cores = false, exact_products = false,
         no_unfused = false, retune = false, no_tuned = false, straight_through = false;
    uint64_t seed = 1;
    double scale = 1.0, budget = 1.0;
    int threads = 0;
    int64_t tile = 0, segments = 0, row_block = 0;
};

int gpu_work_group(const std::string &target, int threads) {
    if (threads != 0 && (threads < 32 || threads > 1024 || (threads & (threads - 1)) != 0))
        throw UsageError("--threads for " + target + " is the work-group size: a power of two from 32 to 1024");
    return threads;
}

rf::InputDistribution parse_dist(const std::string &d) {
    if (d == "normal") return rf::InputDistribution::Normal;
    if (d == "uniform") return rf::InputDistribution::Uniform;
    if (d == "positive") return rf::InputDistribution::Positive;
    if (d == "ties") return rf::InputDistribution::Ties;
    throw UsageError("unknown input distribution '" + d + "' (normal, uniform, positive, ties)");
}

/** The schedule knobs every command that builds kernels takes (run, emit, bench, analyze's back-half
 *  stages), with the same ranges: what `emit` writes and `analyze --emit cpp` shows is what `run`
 *  and `bench` build with the same flags. */
void add_schedule_options(CLI::App *cmd, Args &a) {
    cmd->add_option("--row-block", a.row_block, "cpu: rows handled together (the M of tile GEMMs)")->check(CLI::Range(int64_t(1), int64_t(4096)));
    cmd->add_option("--tile", a.tile, "Tile length along the cascade axis (default: chosen)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--segments", a.segments, "Split the cascade axis into this many segments, merged with the derived merge")
        ->check(CLI::Range(int64_t(1), int64_t(4096)));
}

/** The compile options of the flags `analyze` and `emit` share with `run`. */
rf::Options build_options(const Args &a) {
    rf::Options o;
    o.sizes = parse_sizes(a.size_items);
    o.approx = a.approx;
    o.bf16_tile_products = !a.exact_products;
    o.half_accuracy_exp2 = !a.exact_products;
    o.tile = a.tile;
    o.segments = a.segments;
    o.row_block = a.row_block;
    return o;
}

// ---- analyze

/** The target of `analyze`: the back-half stages need their own (cpp: cpu; cuda; opencl); tile
 *  and the report use --target (gpu: the GPU model of the cost model, the default). */
rf::Target analyze_target(const Args &a, const std::optional<rf::DumpRequest> &stage) {
    bool back_half = stage && stage->stage >= rf::Stage::TileLower;
    if (a.model_target == "gpu") {
        if (!back_half) return rf::analysis_target();
        return rf::make_target(rf::TargetRequest{rf::target_of_stage(stage->stage, rf::TargetKind::Cpu), a.arch, ""});
    }
    rf::TargetKind kind = rf::parse_target_kind(a.model_target);
    if (back_half && rf::target_of_stage(stage->stage, kind) != kind)
        throw UsageError("--emit " + rf::to_string(*stage) + " needs --target " + rf::to_string(rf::target_of_stage(stage->stage, kind)));
    return rf::make_target(rf::TargetRequest{kind, a.arch, ""});
}

/** The text of one stage: the front half's from the compilation; the tile passes' through the
 *  pipeline's own dumps (so what is shown is what is built). */
std::string stage_text(const rf::Compilation &c, const rf::DumpRequest &d) {
    switch (d.stage) {
    case rf::Stage::Ir: return rf::to_string(c.checked);
    case rf::Stage::IrRates: return rf::to_string(c.program);
    case rf::Stage::Graph: return rf::to_string(rf::dependence_graph(c.program), c.program);
    case rf::Stage::Plan: return rf::plan_dump(c);
    case rf::Stage::TileLower: case rf::Stage::TilePass: {
        rf::Options o = c.options;
        std::ostringstream out;
        o.dumps = {d};
        o.dump_stream = &out;
        rf::generate(c, o);
        if (out.str().empty()) throw UsageError("the tile pass '" + d.pass + "' does not run for target " + rf::to_string(c.target.kind));
        return out.str();
    }
    default: return rf::backend_dump(c, d.stage);
    }
}

int cmd_analyze(const Args &a) {
    std::optional<rf::DumpRequest> stage;
    if (!a.emit_stage.empty()) {
        try {
            stage = rf::parse_dump(a.emit_stage);
        } catch (const rf::UserError &e) {
            throw UsageError(std::string("--emit: ") + e.what());
        }
    }
    auto c = rf::analyze_file(a.spec, analyze_target(a, stage), build_options(a));
    if (stage) std::cout << stage_text(*c, *stage);
    else if (a.json) std::cout << rf::analysis_json(*c).dump(2) << "\n";
    else std::cout << rf::analysis_text(*c);
    return 0;
}

// ---- grad

/** `OUT.rf` -> `OUT.forward.rf`: where the forward-with-residuals goes next to the backward. */
std::string default_forward_path(const std::string &out) {
    std::string base = out.size() > 3 && out.compare(out.size() - 3, 3, ".rf") == 0 ? out.substr(0, out.size() - 3) : out;
    return base + ".forward.rf";
}

void write_text(const std::string &path, const std::string &text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) throw UsageError("cannot write '" + path + "'");
}

/** `grad --check`: the backward of the spec (widened to f64) against central finite differences
 *  of its reference; exit 1 when a gradient disagrees (docs/cli.md). */
int check_grad(const Args &a, const rf::Program &forward, const rf::GradOptions &o) {
    rf::Program p = rf::widened_to_f64(o.straight_through ? rf::without_rounding(forward) : forward);
    rf::GradResult g = rf::derive_backward(p, o);
    rf::SizeBinding sizes = rf::bind_sizes(p, parse_sizes(a.size_items));
    rf::GradCheckReport r = rf::check_against_finite_differences(p, g, sizes, a.seed, 10);
    for (const rf::GradientCheck &c : r.gradients) {
        std::cout << "  " << c.gradient << ": " << c.checked << " point(s) against central differences ("
                  << c.skipped << " skipped: not differentiable there), max_abs_err " << c.max_abs_err
                  << " (tolerance " << rf::GradCheckReport::kTolerance * c.scale << ")";
        if (c.worst >= 0 && !c.ok) std::cout << " at element " << c.worst;
        std::cout << (c.ok ? "  ok" : "  FAILED") << "\n";
    }
    if (!r.forward_finite) std::cout << "  (an output of the forward is not finite at these inputs: nothing to compare)\n";
    std::cout << "check: " << (r.ok ? "ok" : "FAILED") << "\n";
    return r.ok ? 0 : 1;
}

int cmd_grad(const Args &a) {
    std::ifstream in(a.spec, std::ios::binary);
    if (!in) throw rf::UserError({}, "cannot read the spec file");
    std::ostringstream ss;
    ss << in.rdbuf();
    rf::Program forward = rf::parse_program(ss.str(), a.spec);
    rf::GradOptions o;
    o.straight_through = a.straight_through;
    for (const std::string &group : a.wrt_items) {
        std::stringstream items(group);
        std::string item;
        while (std::getline(items, item, ','))
            if (!item.empty()) o.wrt.push_back(item);
    }
    if (a.check) return check_grad(a, forward, o);
    rf::GradResult g = rf::derive_backward(forward, o);
    std::string forward_path = !a.forward_out.empty() ? a.forward_out : a.out_file.empty() ? "" : default_forward_path(a.out_file);
    if (a.out_file.empty()) std::cout << g.backward_spec;
    else write_text(a.out_file, g.backward_spec);
    if (!forward_path.empty()) write_text(forward_path, g.forward_spec);
    return 0;
}

// ---- partial

int cmd_partial(const Args &a) {
    rf::Options o;
    o.sizes = parse_sizes(a.size_items);
    o.approx = a.approx;
    auto c = rf::analyze_file(a.spec, rf::make_target(rf::TargetRequest{rf::TargetKind::Interp, "", ""}), o);
    rf::PartialProgram pp = rf::derive_partial(*c, a.axis);
    std::string text = a.json ? pp.layout().dump(2) + "\n" : pp.spec;
    if (a.out_file.empty()) std::cout << text;
    else write_text(a.out_file, text);
    return 0;
}

// ---- run, emit, bench, tune

int cmd_run(const Args &a) {
    rf::RunOptions ro;
    ro.target = rf::parse_target_kind(a.target);
    ro.sizes = parse_sizes(a.size_items);
    ro.seed = a.seed;
    ro.check = a.check;
    ro.f32 = a.f32;
    ro.save_dir = a.save_dir;
    ro.load_dir = a.load_dir;
    ro.dist = parse_dist(a.dist);
    ro.scale = a.scale;
    ro.approx = a.approx;
    ro.unfused = a.unfused;
    ro.tile = a.tile;
    ro.segments = a.segments;
    ro.row_block = a.row_block;
    ro.no_tensor_cores = a.no_tensor_cores;
    ro.exact_products = a.exact_products;
    ro.arch = a.arch;
    if (rf::is_gpu(ro.target)) {
        ro.gpu_threads = gpu_work_group(a.target, a.threads);
        ro.fusion_level = rf::parse_fusion_level(a.fusion_level);
    } else {
        ro.threads = a.threads;
    }
    rf::RunReport r = rf::run_spec(a.spec, ro);
    if (a.json) std::cout << r.json.dump(2) << "\n";
    else std::cout << r.text;
    return r.ok ? 0 : 1;
}

int cmd_emit(const Args &a) {
    std::string target = a.target.empty() ? "cpu" : a.target;
    rf::Options o = build_options(a);
    o.unfused = a.unfused;
    if (!a.strategy.empty()) o.strategy = rf::parse_strategy(a.strategy);
    if (rf::is_gpu(rf::parse_target_kind(target))) {
        o.gpu_threads = gpu_work_group(target, a.threads);
        o.fusion_level = rf::parse_fusion_level(a.fusion_level);
    } else {
        o.threads = a.threads;
    }
    auto c = rf::analyze_file(a.spec, rf::make_target(rf::TargetRequest{rf::parse_target_kind(target), a.arch, ""}), o);
    std::vector<std::string> files = rf::is_gpu(c->target.kind) ? rf::emit_gpu(*c, a.out_file, a.emit_name)
                                                                 : rf::emit_cpu(*c, a.out_file, a.emit_name);
    for (const std::string &f : files) std::cout << "wrote " << f << "\n";
    return 0;
}

rf::BenchOptions bench_options(const Args &a, rf::TargetKind kind) {
    rf::BenchOptions bo;
    bo.sizes = parse_sizes(a.size_items);
    bo.threads = a.threads;
    // --strategy unfused is a bench variant, not a strategy of the plan.
    if (a.strategy == "unfused") bo.unfused = true;
    else if (!a.strategy.empty()) bo.strategy = rf::parse_strategy(a.strategy);
    bo.load_dir = a.load_dir;
    bo.seed = a.seed;
    bo.budget_s = a.budget;
    bo.unfused_too = !a.no_unfused;
    bo.use_tuned = !a.no_tuned;
    bo.tile = a.tile;
    bo.segments = a.segments;
    bo.row_block = a.row_block;
    if (rf::is_gpu(kind)) {
        bo.gpu_threads = gpu_work_group(rf::to_string(kind), a.threads);
        bo.fusion_level = rf::parse_fusion_level(a.fusion_level);
        bo.threads = 0;
    }
    return bo;
}

int cmd_bench_or_tune(const Args &a, bool tune) {
    rf::TargetKind kind = rf::parse_target_kind(a.target.empty() ? "cpu" : a.target);
    if (rf::is_interpreter(kind)) throw UsageError("bench and tune time generated code: --target cpu, cuda or opencl");
    rf::BenchOptions bo = bench_options(a, kind);
    rf::Options o;
    o.sizes = bo.sizes;
    o.bf16_tile_products = !a.exact_products;
    o.half_accuracy_exp2 = !a.exact_products;
    std::shared_ptr<const rf::Compilation> c = rf::analyze_file(a.spec, rf::make_target(rf::TargetRequest{kind, a.arch, ""}), o);
    rf::BenchReport r;
    if (tune) {
        rf::TuneOptions to;
        to.bench = bo;
        to.retune = a.retune;
        to.progress = [](const std::string &line) { std::cerr << line << std::endl; };
        r = rf::tune_compiled(c, to);
    } else {
        r = rf::bench_compiled(c, bo);
    }
    if (a.json) std::cout << r.json.dump(2) << "\n";
    else std::cout << r.text;
    return 0;
}

// ---- the command line

const char *const kExactProductsHelp =
    "cpu: keep tile GEMM products exact f32 and row exp2 within 1 ulp (default with bf16/fp8 outputs: float "
    "tiles met by bf16 operands are rounded to bf16 for the bf16 unit; with bf16/f16/fp8 outputs: a degree-4 exp2)";

void add_analyze(CLI::App &app, Args &a) {
    auto *cmd = app.add_subcommand("analyze", "Prove which reductions fuse and show the derived algorithm");
    cmd->add_option("SPEC", a.spec, "Spec file (.rf)")->required();
    cmd->add_flag("--json", a.json, "Print one JSON object (docs/cli.md)");
    cmd->add_option("--size", a.size_items, "Sizes for the cost model and the schedule: N=V,M=W");
    std::string stages;
    for (const std::string &s : rf::dump_names()) stages += (stages.empty() ? "" : " | ") + s;
    cmd->add_option("--emit", a.emit_stage, "Dump a stage instead: " + stages);
    cmd->add_flag("--approx", a.approx, "Fuse through rounding casts with the running value (inexact)");
    cmd->add_option("--target", a.model_target, "Machine: gpu (the cost model's GPU, default) | cpu (this host) | cuda | opencl")
        ->check(CLI::IsMember({"gpu", "cpu", "cuda", "opencl"}));
    cmd->add_option("--arch", a.arch, "cuda: the architecture to generate for (sm_80, sm_90a, ...) without a device");
    cmd->add_flag("--exact-products", a.exact_products, kExactProductsHelp);
    add_schedule_options(cmd, a);
}

void add_run(CLI::App &app, Args &a) {
    auto *run = app.add_subcommand("run", "Run a spec on random or saved inputs");
    run->add_option("SPEC", a.spec, "Spec file (.rf)")->required();
    run->add_option("--target", a.target, "cpu | cuda | opencl | interp | interp-f32")
        ->check(CLI::IsMember({"cpu", "cuda", "opencl", "interp", "interp-f32"}));
    run->add_option("--threads", a.threads, "cpu: worker threads (default: all); cuda/opencl: work-group size (a power of two, 32..1024)");
    run->add_flag("--unfused", a.unfused, "cpu/cuda/opencl: run the unfused plan (one kernel per definition)");
    run->add_flag("--no-tensor-cores", a.no_tensor_cores, "cuda: tile GEMMs on the SIMT path only");
    run->add_flag("--exact-products", a.exact_products, kExactProductsHelp);
    run->add_option("--fusion-level", a.fusion_level, "cuda/opencl: where running states live: auto (default) | block | warp | thread")
        ->check(CLI::IsMember({"auto", "block", "warp", "thread"}));
    add_schedule_options(run, a);
    run->add_option("--size", a.size_items, "Sizes: N=V,M=W (defaults from the spec)");
    run->add_flag("--check", a.check, "Compare every output with the float64 reference interpreter");
    run->add_option("--seed", a.seed, "Seed of the random inputs and of the random tiling");
    run->add_option("--save", a.save_dir, "Write inputs and outputs as NumPy .npy files into DIR");
    run->add_option("--load", a.load_dir, "Read the inputs from .npy files in DIR");
    run->add_flag("--json", a.json, "Print one JSON object");
    run->add_flag("--f32", a.f32, "Run the plan interpreter in float32");
    run->add_option("--dist", a.dist, "Input distribution: normal | uniform | positive | ties");
    run->add_option("--scale", a.scale, "Multiply random inputs by this (large values test exp overflow)");
    run->add_flag("--approx", a.approx, "Run the approximate incremental plan through rounding casts; --check reports its error");
    run->add_option("--arch", a.arch, "cuda: compile for this architecture (sm_XX) instead of the device's");
}

void add_emit(CLI::App &app, Args &a) {
    auto *emit = app.add_subcommand("emit", "Write the generated kernels as standalone sources (C ABI / launch description)");
    emit->add_option("SPEC", a.spec, "Spec file (.rf)")->required();
    emit->add_option("--target", a.target, "cpu (default) | cuda | opencl")->check(CLI::IsMember({"cpu", "cuda", "opencl"}));
    emit->add_option("--size", a.size_items, "Sizes the schedule is chosen for (the code accepts any)");
    emit->add_option("-o", a.out_file, "Output directory")->required();
    emit->add_option("--name", a.emit_name, "Prefix of the exported C symbols and of the file names");
    emit->add_flag("--approx", a.approx, "Fuse through rounding casts (inexact)");
    emit->add_flag("--exact-products", a.exact_products, kExactProductsHelp);
    emit->add_option("--arch", a.arch, "cuda: generate for this architecture (sm_XX) without asking for a device");
    emit->add_option("--threads", a.threads, "cpu: worker threads the schedule is planned for (default: all; the code takes its count at run time); "
                                             "cuda/opencl: work-group size");
    emit->add_flag("--unfused", a.unfused, "Write the unfused plan (one kernel per definition)");
    emit->add_option("--strategy", a.strategy, "Force a strategy on every chain: multi_pass | onchip_multipass | multi_segment | single_pass | incremental")
        ->check(CLI::IsMember({"multi_pass", "onchip_multipass", "multi_segment", "single_pass", "incremental"}));
    emit->add_option("--fusion-level", a.fusion_level, "cuda/opencl: where running states live: auto (default) | block | warp | thread")
        ->check(CLI::IsMember({"auto", "block", "warp", "thread"}));
    add_schedule_options(emit, a);
}

void add_bench_and_tune(CLI::App &app, Args &a) {
    auto *bench = app.add_subcommand("bench", "Time the fused kernel and the unfused plan against this machine's limits");
    auto *tune = app.add_subcommand("tune", "Search tile sizes, segments and strategy; keep the best in the cache");
    for (CLI::App *sub : {bench, tune}) {
        sub->add_option("SPEC", a.spec, "Spec file (.rf)")->required();
        sub->add_option("--target", a.target, "cpu (default) | cuda | opencl")->check(CLI::IsMember({"cpu", "cuda", "opencl"}));
        sub->add_option("--size", a.size_items, "Sizes: N=V,M=W (defaults from the spec)");
        sub->add_flag("--json", a.json, "Print one JSON object");
        sub->add_option("--threads", a.threads, "Worker threads (default: all)");
        sub->add_option("--seed", a.seed, "Seed of the random inputs");
        sub->add_option("--budget", a.budget, "Seconds of timing per variant (default 1)");
        sub->add_flag("--exact-products", a.exact_products, kExactProductsHelp);
    }
    bench->add_option("--strategy", a.strategy, "Force a strategy: unfused | multi_pass | onchip_multipass | multi_segment")
        ->check(CLI::IsMember({"unfused", "multi_pass", "onchip_multipass", "multi_segment", "single_pass", "incremental"}));
    bench->add_option("--load", a.load_dir, "Read the inputs from .npy files in DIR");
    bench->add_option("--fusion-level", a.fusion_level, "cuda/opencl: auto (default) | block | warp | thread")
        ->check(CLI::IsMember({"auto", "block", "warp", "thread"}));
    add_schedule_options(bench, a);
    bench->add_flag("--no-unfused", a.no_unfused, "Do not time the unfused plan");
    bench->add_flag("--no-tuned", a.no_tuned, "Ignore a cached `tune` result");
    tune->add_flag("--retune", a.retune, "Ignore a cached result and search again");
}

void add_grad(CLI::App &app, Args &a) {
    auto *cmd = app.add_subcommand("grad", "Derive the backward pass as a spec (and the forward with its residuals)");
    cmd->add_option("SPEC", a.spec, "Spec file (.rf)")->required();
    cmd->add_option("--wrt", a.wrt_items, "Inputs to differentiate: A,B (default: every float input)");
    cmd->add_option("-o", a.out_file, "Write the backward spec here (default: stdout)");
    cmd->add_option("--forward-out", a.forward_out, "Write the forward-with-residuals spec here (default with -o OUT.rf: OUT.forward.rf)");
    cmd->add_flag("--straight-through", a.straight_through, "Differentiate rounding casts and round() as the identity");
    cmd->add_flag("--check", a.check, "Check the backward against central finite differences (float64 reference) instead of printing it");
    cmd->add_option("--size", a.size_items, "With --check: size binding NAME=VALUE (repeatable; default: the spec's)");
    cmd->add_option("--seed", a.seed, "With --check: seed of the random inputs, adjoints and points");
}

void add_partial(CLI::App &app, Args &a) {
    auto *cmd = app.add_subcommand("partial", "Print the partial program of a chain over one shard of its axis (docs/sharding.md)");
    cmd->add_option("SPEC", a.spec, "Spec file (.rf)")->required();
    cmd->add_option("--axis", a.axis, "The reduction axis to split (default: the chain's only axis)");
    cmd->add_option("--size", a.size_items, "Size binding NAME=VALUE (repeatable)");
    cmd->add_flag("--approx", a.approx, "Fuse through rounding casts");
    cmd->add_flag("--json", a.json, "Print the state layout as JSON instead of the spec");
    cmd->add_option("-o", a.out_file, "Write here (default: stdout)");
}

int dispatch(const CLI::App &app, const Args &a) {
    if (app.got_subcommand("grad")) return cmd_grad(a);
    if (app.got_subcommand("partial")) return cmd_partial(a);
    if (app.got_subcommand("analyze")) return cmd_analyze(a);
    if (app.got_subcommand("emit")) return cmd_emit(a);
    if (app.got_subcommand("bench")) return cmd_bench_or_tune(a, false);
    if (app.got_subcommand("tune")) return cmd_bench_or_tune(a, true);
    Args run = a;
    if (run.target.empty()) run.target = "interp";
    return cmd_run(run);
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"redfuse: fuses cascades of dependent reductions into single-pass kernels"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every command");
    Args a;
    add_analyze(app, a);
    add_run(app, a);
    add_emit(app, a);
    add_bench_and_tune(app, a);
    add_grad(app, a);
    add_partial(app, a);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    try {
        rf::ArenaScope arena;
        rf::install_environment_once();
        try {
            return dispatch(app, a);
        } catch (const rf::UserError &e) {
            std::cerr << rf::format_user_error(e, a.spec, read_source_for_errors(a.spec));
            return 1;
        }
    } catch (const UsageError &e) {
        std::cerr << "redfuse: " << e.what() << "\n";
        return 2;
    } catch (const rf::InternalError &e) {
        std::cerr << "redfuse: internal error (a bug in redfuse, not in your spec): " << e.what() << "\n";
        return 3;
    } catch (const std::bad_alloc &) {
        // The sizes asked for more memory than there is (run checks its own buffers first; this is
        // the kernel's temporaries or the compiler's working set): the user's to change, not a bug.
        std::cerr << "redfuse: out of memory (an allocation failed): these sizes need more memory than this machine has\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "redfuse: internal error: " << e.what() << "\n";
        return 3;
    }
}
