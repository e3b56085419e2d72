/** \file BenchGpu.cpp
 * `redfuse bench --target cuda|opencl`: the fused kernels and the unfused plan timed on the device,
 * against the floor of the bytes that must move at the device's nominal memory bandwidth.
 */
#include <algorithm>
#include <sstream>

#include "driver/Bench.h"
#include "interp/Inputs.h"
#include "interp/Npy.h"
#include "runtime/CudaRuntime.h"
#include "runtime/GpuBackend.h"
#include "runtime/OpenCLRuntime.h"

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

GpuOptions gpu_options(const BenchOptions &o, bool unfused) {
    GpuOptions g;
    g.target = o.target;
    g.threads = o.gpu_threads;
    g.fusion_level = o.fusion_level;
    g.unfused = unfused || o.strategy == "unfused";
    g.tensor_cores = o.tensor_cores;
    g.tile = o.tile;
    g.segments = o.segments;
    g.row_block = o.row_block;
    if (o.strategy != "unfused") g.strategy = o.strategy;
    return g;
}

}  // namespace

BenchReport bench_gpu(const Compilation &c, const BenchOptions &o) {
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.sizes);
    PlanOptions po = plan_options_for("gpu");
    po.sizes = &sizes;
    Plan plan = make_plan(p, po);
    plan.program = &p;
    std::map<std::string, Tensor> inputs = o.load_dir.empty() ? make_random_inputs(p, sizes, o.seed) : load_dir(o.load_dir, p, sizes);
    WorkloadCost cost = workload_cost(p, sizes);

    auto prog = compile_gpu(plan, sizes, gpu_options(o, false));
    GpuBuffers bufs(*prog, p, sizes, inputs);
    GpuTiming tf = time_gpu(bufs, o.budget_s, o.min_reps);

    // The floor: the device's nominal memory bandwidth (CUDA: 2 x memory clock x bus width).
    double bandwidth_gbs = 0;
    std::string device = prog->device_name;
    if (o.target == "cuda") {
        const cuda::DeviceInfo &d = cuda::device();
        bandwidth_gbs = 2.0 * d.mem_clock_khz * 1e3 * (d.bus_width_bits / 8.0) / 1e9;
    }
    nlohmann::json j;
    j["spec"] = c.file;
    j["target"] = o.target;
    j["device"] = device;
    j["sizes"] = sizes;
    j["time_ms"] = tf.median_ms;
    j["min_ms"] = tf.min_ms;
    j["reps"] = tf.reps;
    j["timing"] = o.target == "cuda" ? "CUDA events, L2 flushed before each run" : "host clock around a finished queue";
    std::string strategy;
    for (const tile::Kernel &k : prog->gpu.module.kernels) strategy += (strategy.empty() ? "" : "+") + k.schedule.strategy;
    j["strategy"] = strategy;
    j["launches"] = prog->gpu.launches.size();
    j["bytes"] = cost.bytes;
    j["flops"] = cost.flops;
    j["gbps"] = cost.bytes / (tf.median_ms * 1e-3) / 1e9;
    j["gflops"] = cost.flops / (tf.median_ms * 1e-3) / 1e9;
    j["tflops"] = cost.flops / (tf.median_ms * 1e-3) / 1e12;
    j["compile_ms"] = prog->compile_ms;
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(4);
    text << c.file << " on " << o.target << " (" << device << ") at";
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
        auto un = compile_gpu(plan, sizes, gpu_options(o, true));
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

}  // namespace rf
