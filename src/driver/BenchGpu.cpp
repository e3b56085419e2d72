/** \file BenchGpu.cpp
 * `redfuse bench --target cuda|opencl`: the fused kernels and the unfused plan timed on the device,
 * against the floor of the bytes that must move at the device's nominal memory bandwidth.
 */
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "driver/Bench.h"
#include "interp/Inputs.h"
#include "interp/Compare.h"
#include "interp/Npy.h"
#include "runtime/CudaRuntime.h"
#include "runtime/GpuBackend.h"
#include "runtime/OpenCLRuntime.h"
#include "runtime/Jit.h"
#include "runtime/Sha256.h"
#include "support/Error.h"

namespace rf {

namespace {

struct GpuTiming {
    double median_ms = 0, min_ms = 0;
    int reps = 0;
};

/** Device time of one run at a time, each after evicting the inputs from L2 (the inputs of a
 *  decode step are not in cache either); at least min_reps runs and budget_s of device time. */
GpuTiming time_gpu(GpuBuffers &bufs, double budget_s, int min_reps) {
    bufs.run();  // warm-up: module load, first-launch costs
    bufs.sync();
    std::vector<double> ms;
    double total = 0;
    while (static_cast<int>(ms.size()) < min_reps || total < budget_s * 1e3) {
        bufs.flush_caches();
        double t = bufs.time_runs(1)[0];
        ms.push_back(t);
        total += t + 0.05;  // count launch overheads so tiny kernels end too
        if (ms.size() >= 2000) break;
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], ms.front(), static_cast<int>(ms.size())};
}

/** One point of the GPU schedule space `tune` searches. */
struct GpuVariant {
    std::string level = "block";
    int threads = 0;
    int64_t tile = 0, row_block = 0;
    std::string label() const {
        std::ostringstream s;
        s << "level=" << level << " wg=" << (threads ? std::to_string(threads) : "auto") << " tile=" << (tile ? std::to_string(tile) : "auto")
          << " row_block=" << (row_block ? std::to_string(row_block) : "auto");
        return s.str();
    }
    nlohmann::json to_json() const { return {{"level", level}, {"threads", threads}, {"tile", tile}, {"row_block", row_block}, {"label", label()}}; }
};

std::filesystem::path gpu_tune_path(const Compilation &c, const SizeBinding &sizes, const std::string &target, const std::string &device) {
    std::ostringstream k;
    k << c.source << "|target=" << target << "|device=" << device;
    for (auto &[n, v] : sizes) k << "|" << n << "=" << v;
    return std::filesystem::path(default_cache_dir()) / "tune" / ("gpu-" + sha256_hex(k.str()).substr(0, 24) + ".json");
}

std::string device_name(TargetKind kind) { return kind == TargetKind::Cuda ? cuda::device().name : ocl::device().name; }

/** The compilation's options with the bench's GPU schedule knobs. */
Options gpu_options(const Compilation &c, const BenchOptions &o, bool unfused) {
    Options g = c.options;
    g.gpu_threads = o.gpu_threads;
    g.fusion_level = o.fusion_level;
    g.unfused = unfused || o.unfused;
    g.tensor_cores = o.tensor_cores;
    g.tile = o.tile;
    g.segments = o.segments;
    g.row_block = o.row_block;
    g.strategy = o.strategy;
    return g;
}

/** generate → build, for one set of options. */
std::unique_ptr<GpuProgram> build_with(const Compilation &c, const Options &g) { return build_gpu(generate(c, g), c, g); }


/** The bench's options, or where none are forced and `tune` kept a result for this spec, device
 *  and sizes, that result (its path in `tuned_from`). */
Options tuned_gpu_options(const Compilation &c, const BenchOptions &o, const SizeBinding &sizes, std::string &tuned_from) {
    Options fused = gpu_options(c, o, false);
    if (!o.use_tuned || o.strategy || o.unfused || o.tile || o.segments || o.row_block || o.gpu_threads || o.fusion_level != FusionLevel::Auto)
        return fused;
    std::filesystem::path tp = gpu_tune_path(c, sizes, to_string(c.target.kind), device_name(c.target.kind));
    std::ifstream in(tp);
    if (!in) return fused;
    try {
        nlohmann::json t = nlohmann::json::parse(in).at("best");
        fused.fusion_level = parse_fusion_level(t.at("level"));
        fused.gpu_threads = t.at("threads");
        fused.tile = t.at("tile");
        fused.row_block = t.at("row_block");
        tuned_from = tp.string();
        return fused;
    } catch (const std::exception &) {
        return gpu_options(c, o, false);  // an unreadable entry: the bench's own options
    }
}

}  // namespace

BenchReport bench_gpu(const Compilation &c, const BenchOptions &o) {
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.sizes);
    const std::string target = to_string(c.target.kind);
    std::map<std::string, Tensor> inputs = o.load_dir.empty() ? make_random_inputs(p, sizes, o.seed) : load_dir(o.load_dir, p, sizes);
    WorkloadCost cost = workload_cost(p, sizes);

    std::string tuned_from;
    Options fused = tuned_gpu_options(c, o, sizes, tuned_from);
    auto prog = build_with(c, fused);
    GpuBuffers bufs(*prog, p, sizes, inputs);
    GpuTiming tf = time_gpu(bufs, o.budget_s, o.min_reps);

    // The floor: the device's nominal memory bandwidth (CUDA: 2 x memory clock x bus width).
    double bandwidth_gbs = 0;
    std::string device = prog->device_name;
    if (c.target.kind == TargetKind::Cuda) {
        const cuda::DeviceInfo &d = cuda::device();
        bandwidth_gbs = 2.0 * d.mem_clock_khz * 1e3 * (d.bus_width_bits / 8.0) / 1e9;
    }
    nlohmann::json j;
    j["spec"] = c.file;
    j["target"] = target;
    j["device"] = device;
    j["sizes"] = sizes;
    j["time_ms"] = tf.median_ms;
    j["min_ms"] = tf.min_ms;
    j["reps"] = tf.reps;
    j["timing"] = c.target.kind == TargetKind::Cuda ? "CUDA events, L2 flushed before each run" : "host clock around a finished queue";
    std::string strategy;
    for (const tile::Kernel &k : prog->gpu.module.kernels) strategy += (strategy.empty() ? "" : "+") + std::string(to_string(k.schedule.strategy));
    j["strategy"] = strategy;
    j["launches"] = prog->gpu.launches.size();
    j["fusion_level"] = to_string(fused.fusion_level);
    if (!tuned_from.empty()) j["tuned"] = tuned_from;
    j["bytes"] = cost.bytes;
    j["flops"] = cost.flops;
    j["gbps"] = cost.bytes / (tf.median_ms * 1e-3) / 1e9;
    j["gflops"] = cost.flops / (tf.median_ms * 1e-3) / 1e9;
    j["tflops"] = cost.flops / (tf.median_ms * 1e-3) / 1e12;
    j["compile_ms"] = prog->compile_ms;
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(4);
    text << c.file << " on " << target << " (" << device << ") at";
    for (auto &[n, v] : sizes) text << " " << n << "=" << v;
    text << "\n";
    text << "  fused   " << tf.median_ms << " ms  " << j["gbps"].get<double>() << " GB/s  " << j["tflops"].get<double>() << " TFLOP/s  ["
         << strategy << "; " << prog->gpu.launches.size() << " launches]\n";
    if (bandwidth_gbs > 0) {
        double floor_ms = cost.bytes / (bandwidth_gbs * 1e9) * 1e3;
        j["nominal_bandwidth_gbs"] = bandwidth_gbs;
        j["floor_ms"] = floor_ms;
        j["fraction_of_bandwidth"] = j["gbps"].get<double>() / bandwidth_gbs;
        text << "  memory floor " << floor_ms << " ms at the nominal " << bandwidth_gbs << " GB/s: " << 100 * floor_ms / tf.median_ms
             << "% of it\n";
    }
    if (o.unfused_too) {
        auto un = build_with(c, gpu_options(c, o, true));
        GpuBuffers ub(*un, p, sizes, inputs);
        GpuTiming tu = time_gpu(ub, o.budget_s, o.min_reps);
        j["unfused_time_ms"] = tu.median_ms;
        j["unfused"] = {{"time_ms", tu.median_ms}, {"reps", tu.reps}, {"launches", un->gpu.launches.size()}};
        j["speedup_vs_unfused"] = tu.median_ms / tf.median_ms;
        text << "  unfused " << tu.median_ms << " ms  (" << un->gpu.launches.size() << " launches)  fused is " << tu.median_ms / tf.median_ms
             << "x faster\n";
    }
    return {j, text.str()};
}

std::string outputs_disagree(const Program &p, const std::map<std::string, Tensor> &out, const std::map<std::string, Tensor> &reference) {
    std::string disagree;
    for (const OutputDecl &d : p.outputs) {
        bool exact = is_int(d.dtype);
        CompareResult r = compare(out.at(d.name), reference.at(d.name), exact ? 0 : 4 * tolerance(d.dtype, true, 1 << 16), exact);
        if (!r.ok) disagree += " " + d.name;
    }
    return disagree;
}

BenchReport tune_gpu(const Compilation &c, const TuneOptions &o) {
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.bench.sizes);
    const std::string target = to_string(c.target.kind);
    std::filesystem::path path = gpu_tune_path(c, sizes, target, device_name(c.target.kind));
    if (!o.retune)
        if (std::optional<BenchReport> r = cached_tuning(path)) return *r;
    std::map<std::string, Tensor> inputs = make_random_inputs(p, sizes, o.bench.seed);
    // Where states live (block / warp / thread), the work-group size, and the tile and row block of
    // the lowering; every variant runs the same inputs.
    std::vector<GpuVariant> variants;
    for (int wg : {64, 128, 256})
        for (auto [tile, rb] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {64, 16}, {128, 64}}) variants.push_back({"block", wg, tile, rb});
    for (int wg : {64, 128}) variants.push_back({"warp", wg, 0, 0});  // OpenCL: work-groups of 32 either way
    for (int wg : {64, 128}) variants.push_back({"thread", wg, 0, 0});
    nlohmann::json tried = nlohmann::json::array();
    double best = 1e300;
    GpuVariant best_v;
    std::map<std::string, Tensor> reference;
    for (const GpuVariant &v : variants) {
        BenchOptions bo = o.bench;
        bo.gpu_threads = v.threads;
        bo.tile = v.tile;
        bo.row_block = v.row_block;
        bo.fusion_level = parse_fusion_level(v.level);
        double ms;
        try {
            auto prog = build_with(c, gpu_options(c, bo, false));
            GpuBuffers bufs(*prog, p, sizes, inputs);
            // A variant is kept only if it computes what the first one did (a fast wrong kernel
            // must never become the tuned default): same outputs within the dtype's tolerance,
            // indices exactly.
            bufs.poison();
            bufs.run();
            std::map<std::string, Tensor> out = bufs.outputs();
            if (reference.empty()) reference = out;
            std::string disagree = outputs_disagree(p, out, reference);
            if (!disagree.empty()) {
                tried.push_back({{"label", v.label()}, {"error", "outputs differ from the first variant's:" + disagree}});
                continue;
            }
            ms = time_gpu(bufs, std::min(o.bench.budget_s, 0.3), 3).median_ms;
        } catch (const UserError &e) {  // e.g. shared memory the device does not have
            tried.push_back({{"label", v.label()}, {"error", e.what()}});
            continue;
        }
        tried.push_back({{"label", v.label()}, {"time_ms", ms}});
        if (o.progress) {
            std::ostringstream line;
            line << "  " << v.label() << ": " << ms << " ms" << (ms < best ? "  (best so far)" : "");
            o.progress(line.str());
        }
        if (ms < best) {
            best = ms;
            best_v = v;
        }
    }
    if (best == 1e300) throw UserError({}, "no GPU schedule variant could run at these sizes");
    nlohmann::json j;
    j["spec"] = c.file;
    j["target"] = target;
    j["sizes"] = sizes;
    j["tried"] = tried;
    j["best"] = best_v.to_json();
    j["best"]["time_ms"] = best;
    save_tuning(path, j);
    return {j, "best: " + best_v.label() + " (" + std::to_string(best) + " ms), saved to " + path.string() + "\n"};
}

}  // namespace rf
