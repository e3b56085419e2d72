/** \file redfuse.cpp
 * The command-line tool: a thin shell over the library (docs/cli.md). Exit status 0 on success, 1 for
 * a bad spec or a failed check, 2 for usage errors, 3 for internal errors (compiler bugs).
 */
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

#include "driver/Bench.h"
#include "driver/Compiler.h"
#include "fuse/Graph.h"
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

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"redfuse: fuses cascades of dependent reductions into single-pass kernels"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every command");

    std::string spec;
    bool json = false, approx = false, check = false, f32 = false;
    std::vector<std::string> size_items;
    std::string emit_stage, target = "interp", save_dir, load_dir, dist = "normal", out_file;
    uint64_t seed = 1;
    double scale = 1.0;
    int threads = 0;
    bool unfused = false;
    int64_t tile = 0, segments = 0, row_block = 0;
    bool no_tensor_cores = false;
    std::string fusion_level = "auto";

    auto *analyze = app.add_subcommand("analyze", "Prove which reductions fuse and show the derived algorithm");
    analyze->add_option("SPEC", spec, "Spec file (.rf)")->required();
    analyze->add_flag("--json", json, "Print one JSON object (docs/cli.md)");
    analyze->add_option("--size", size_items, "Sizes for the cost model: N=V,M=W");
    analyze->add_option("--emit", emit_stage, "Dump a stage instead: ir | graph | plan | tile | cpp | opencl | cuda")
        ->check(CLI::IsMember({"ir", "graph", "plan", "tile", "cpp", "opencl", "cuda"}));
    analyze->add_flag("--approx", approx, "Fuse through rounding casts with the running value (inexact)");
    std::string model_target = "gpu";
    analyze->add_option("--target", model_target, "Machine model for the strategy: gpu (default) | cpu (this host)")
        ->check(CLI::IsMember({"gpu", "cpu", "cuda", "opencl"}));

    auto *run = app.add_subcommand("run", "Run a spec on random or saved inputs");
    run->add_option("SPEC", spec, "Spec file (.rf)")->required();
    run->add_option("--target", target, "cpu | cuda | opencl | interp | interp-f32")
        ->check(CLI::IsMember({"cpu", "cuda", "opencl", "interp", "interp-f32"}));
    run->add_option("--threads", threads, "cpu: worker threads (default: all); cuda/opencl: work-group size (a power of two, 32..1024)");
    run->add_flag("--unfused", unfused, "cpu/cuda/opencl: run the unfused plan (one kernel per definition)");
    run->add_flag("--no-tensor-cores", no_tensor_cores, "cuda: tile GEMMs on the SIMT path only");
    run->add_option("--fusion-level", fusion_level, "cuda/opencl: where running states live: auto (default) | block | warp | thread")
        ->check(CLI::IsMember({"auto", "block", "warp", "thread"}));
    run->add_option("--row-block", row_block, "cpu: rows handled together (the M of tile GEMMs)")->check(CLI::Range(int64_t(1), int64_t(4096)));
    run->add_option("--tile", tile, "cpu: tile length along the cascade axis (default: chosen)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    run->add_option("--segments", segments, "cpu: split the cascade axis into this many segments, merged with the derived merge")
        ->check(CLI::Range(int64_t(1), int64_t(4096)));
    run->add_option("--size", size_items, "Sizes: N=V,M=W (defaults from the spec)");
    run->add_flag("--check", check, "Compare every output with the float64 reference interpreter");
    run->add_option("--seed", seed, "Seed of the random inputs and of the random tiling");
    run->add_option("--save", save_dir, "Write inputs and outputs as NumPy .npy files into DIR");
    run->add_option("--load", load_dir, "Read the inputs from .npy files in DIR");
    run->add_flag("--json", json, "Print one JSON object");
    run->add_flag("--f32", f32, "Run the plan interpreter in float32");
    run->add_option("--dist", dist, "Input distribution: normal | uniform | positive");
    run->add_option("--scale", scale, "Multiply random inputs by this (large values test exp overflow)");
    run->add_flag("--approx", approx, "Run the approximate incremental plan through rounding casts; --check reports its error");

    std::string emit_name = "redfuse", strategy;
    double budget = 1.0;
    bool no_unfused = false, retune = false, no_tuned = false;
    auto *emit = app.add_subcommand("emit", "Write the generated kernels as standalone C++ with a C ABI");
    emit->add_option("SPEC", spec, "Spec file (.rf)")->required();
    emit->add_option("--target", target, "cpu | cuda | opencl")->check(CLI::IsMember({"cpu", "cuda", "opencl"}));
    emit->add_option("--size", size_items, "Sizes the schedule is chosen for (the code accepts any)");
    emit->add_option("-o", out_file, "Output directory")->required();
    emit->add_option("--name", emit_name, "Prefix of the exported C symbols and of the file names");
    emit->add_flag("--approx", approx, "Fuse through rounding casts (inexact)");

    auto *bench = app.add_subcommand("bench", "Time the fused kernel and the unfused plan against this machine's limits");
    auto *tune = app.add_subcommand("tune", "Search tile sizes, segments and strategy; keep the best in the cache");
    for (CLI::App *sub : {bench, tune}) {
        sub->add_option("SPEC", spec, "Spec file (.rf)")->required();
        sub->add_option("--target", target, "cpu | cuda | opencl")->check(CLI::IsMember({"cpu", "cuda", "opencl"}));
        sub->add_option("--size", size_items, "Sizes: N=V,M=W (defaults from the spec)");
        sub->add_flag("--json", json, "Print one JSON object");
        sub->add_option("--threads", threads, "Worker threads (default: all)");
        sub->add_option("--seed", seed, "Seed of the random inputs");
        sub->add_option("--budget", budget, "Seconds of timing per variant (default 1)");
    }
    bench->add_option("--strategy", strategy, "Force a strategy: unfused | multi_pass | onchip_multipass | multi_segment")
        ->check(CLI::IsMember({"unfused", "multi_pass", "onchip_multipass", "multi_segment", "single_pass", "incremental"}));
    bench->add_option("--load", load_dir, "Read the inputs from .npy files in DIR");
    bench->add_option("--fusion-level", fusion_level, "cuda/opencl: auto (default) | block | warp | thread")->check(CLI::IsMember({"auto", "block", "warp", "thread"}));
    bench->add_option("--tile", tile, "Tile length along the cascade axis");
    bench->add_option("--segments", segments, "Segments of the cascade axis");
    bench->add_option("--row-block", row_block, "Rows handled together (the M of tile GEMMs)");
    bench->add_flag("--no-unfused", no_unfused, "Do not time the unfused plan");
    bench->add_flag("--no-tuned", no_tuned, "Ignore a cached `tune` result");
    tune->add_flag("--retune", retune, "Ignore a cached result and search again");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }

    try {
        rf::ArenaScope arena;
        rf::CompileOptions co;
        co.approx = approx;
        if (app.got_subcommand("analyze")) co.target = model_target;
        co.sizes = parse_sizes(size_items);
        try {
            auto c = rf::compile_file(spec, co);
            if (app.got_subcommand("analyze")) {
                if (emit_stage == "ir") std::cout << rf::to_string(c->program);
                else if (emit_stage == "graph") std::cout << rf::to_string(rf::dependence_graph(c->program), c->program);
                else if (emit_stage == "plan") std::cout << rf::plan_dump(*c);
                else if (emit_stage == "tile" || emit_stage == "cpp" || emit_stage == "opencl" || emit_stage == "cuda") std::cout << rf::backend_dump(*c, emit_stage);
                else if (json) std::cout << rf::analysis_json(*c).dump(2) << "\n";
                else std::cout << rf::analysis_text(*c);
                return 0;
            }
            if (app.got_subcommand("emit")) {
                std::vector<std::string> files =
                    target == "cuda" || target == "opencl" ? rf::emit_gpu(*c, out_file, emit_name, target) : rf::emit_cpu(*c, out_file, emit_name) ;
                for (const std::string &f : files) std::cout << "wrote " << f << "\n";
                return 0;
            }
            if (app.got_subcommand("bench") || app.got_subcommand("tune")) {
                rf::BenchOptions bo;
                bo.sizes = co.sizes;
                bo.threads = threads;
                bo.strategy = strategy;
                bo.load_dir = load_dir;
                bo.seed = seed;
                bo.budget_s = budget;
                bo.unfused_too = !no_unfused;
                bo.use_tuned = !no_tuned;
                bo.tile = tile;
                bo.segments = segments;
                bo.row_block = row_block;
                bo.target = target == "cuda" || target == "opencl" ? target : "cpu";
                if (target == "cuda" || target == "opencl") {
                    if (threads != 0 && (threads < 32 || threads > 1024 || (threads & (threads - 1)) != 0))
                        throw UsageError("--threads for " + target + " is the work-group size: a power of two from 32 to 1024");
                    bo.gpu_threads = threads;
                    bo.fusion_level = fusion_level;
                    bo.threads = 0;
                }
                rf::BenchReport r;
                if (app.got_subcommand("tune")) {
                    rf::TuneOptions to;
                    to.bench = bo;
                    to.retune = retune;
                    to.progress = [](const std::string &line) { std::cerr << line << std::endl; };
                    r = rf::tune_compiled(*c, to);
                } else {
                    r = rf::bench_compiled(*c, bo);
                }
                if (json) std::cout << r.json.dump(2) << "\n";
                else std::cout << r.text;
                return 0;
            }
            rf::RunOptions ro;
            ro.target = target;
            ro.sizes = co.sizes;
            ro.seed = seed;
            ro.check = check;
            ro.f32 = f32;
            ro.save_dir = save_dir;
            ro.load_dir = load_dir;
            ro.dist = dist;
            ro.scale = scale;
            ro.approx = approx;
            ro.threads = threads;
            ro.unfused = unfused;
            ro.tile = tile;
            ro.segments = segments;
            ro.row_block = row_block;
            if (target == "cuda" || target == "opencl") {
                if (threads != 0 && (threads < 32 || threads > 1024 || (threads & (threads - 1)) != 0))
                    throw UsageError("--threads for " + target + " is the work-group size: a power of two from 32 to 1024");
                ro.gpu_threads = threads;
                ro.fusion_level = fusion_level;
                ro.threads = 0;
            }
            ro.no_tensor_cores = no_tensor_cores;
            rf::RunReport r = rf::run_compiled(*c, ro);
            if (json) std::cout << r.json.dump(2) << "\n";
            else std::cout << r.text;
            return r.ok ? 0 : 1;
        } catch (const rf::UserError &e) {
            std::cerr << rf::format_user_error(e, spec, read_source_for_errors(spec));
            return 1;
        }
    } catch (const UsageError &e) {
        std::cerr << "redfuse: " << e.what() << "\n";
        return 2;
    } catch (const rf::InternalError &e) {
        std::cerr << "redfuse: internal error (a bug in redfuse, not in your spec): " << e.what() << "\n";
        return 3;
    } catch (const std::exception &e) {
        std::cerr << "redfuse: internal error: " << e.what() << "\n";
        return 3;
    }
}
