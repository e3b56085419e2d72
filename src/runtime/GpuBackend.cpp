/** \file GpuBackend.cpp
 * The GPU backends (GpuBackend.h): lowering options for GPUs, the OpenCL and CUDA device sides
 * behind one small interface, and the run-time evaluation of launch shapes.
 */
#include "runtime/GpuBackend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ir/Eval.h"
#include "runtime/CpuBackend.h"
#include "runtime/CudaRuntime.h"
#include "runtime/GpuDevice.h"
#include "runtime/OpenCLRuntime.h"
#include "support/Error.h"

namespace rf {

namespace {

// ---- OpenCL.
struct OclBuf : DevBuf {
    explicit OclBuf(size_t n) : b(n) {}
    void write(const void *src, size_t bytes) override { b.write(src, bytes); }
    void read(void *dst, size_t bytes) override { b.read(dst, bytes); }
    ocl::Buffer b;
};

class OclDevice : public GpuDevice {
public:
    explicit OclDevice(const std::string &source) : prog_(source, "-cl-std=CL1.2") {}
    std::unique_ptr<DevBuf> alloc(size_t bytes) override { return std::make_unique<OclBuf>(bytes); }
    void launch(const GpuLaunch &l, int64_t groups, int64_t smem, const std::vector<DevBuf *> &bufs,
                const std::vector<int64_t> &sizes) override {
        std::vector<ocl::KernelArg> args;
        for (DevBuf *b : bufs) args.push_back(ocl::KernelArg::buffer(static_cast<OclBuf *>(b)->b));
        for (int64_t s : sizes) args.push_back(ocl::KernelArg::i64(s));
        args.push_back(ocl::KernelArg::local(static_cast<size_t>(std::max<int64_t>(smem, 16))));
        prog_.launch(l.kernel, static_cast<size_t>(groups), static_cast<size_t>(l.threads), args);
    }
    void sync() override { ocl::finish(); }
    double time(const std::function<void()> &f) override {
        ocl::finish();
        auto t0 = std::chrono::steady_clock::now();
        f();
        ocl::finish();
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    double build_ms() const { return prog_.build_ms(); }

private:
    ocl::Program prog_;
};

// ---- CUDA.
struct CudaBuf : DevBuf {
    explicit CudaBuf(size_t n) : b(n) {}
    void write(const void *src, size_t bytes) override { b.write(src, bytes); }
    void read(void *dst, size_t bytes) override { b.read(dst, bytes); }
    cuda::Buffer b;
};

class CudaDevice : public GpuDevice {
public:
    explicit CudaDevice(const cuda::CompiledModule &m) : mod_(m) {}
    std::unique_ptr<DevBuf> alloc(size_t bytes) override { return std::make_unique<CudaBuf>(bytes); }
    void launch(const GpuLaunch &l, int64_t groups, int64_t smem, const std::vector<DevBuf *> &bufs,
                const std::vector<int64_t> &sizes) override {
        std::vector<cuda::KernelArg> args;
        for (DevBuf *b : bufs) args.push_back(cuda::KernelArg::buffer(static_cast<CudaBuf *>(b)->b));
        for (int64_t s : sizes) args.push_back(cuda::KernelArg::i64(s));
        if (groups > 0x7fffffff) throw UserError({}, "a launch needs " + std::to_string(groups) + " blocks: more than CUDA's grid allows");
        mod_.launch(l.kernel, static_cast<unsigned>(groups), static_cast<unsigned>(l.threads), static_cast<size_t>(smem), args);
    }
    void sync() override { cuda::synchronize(); }
    void flush_caches() override { cuda::flush_l2(); }
    double time(const std::function<void()> &f) override {
        cuda::Event a, b;
        a.record();
        f();
        b.record();
        return cuda::Event::elapsed_ms(a, b);
    }

private:
    cuda::Module mod_;
};

double eval_sizes(Expr e, const SizeBinding &sizes) {
    EvalEnv env;
    env.var_value = [&](Expr v) -> double {
        auto it = sizes.find(v->name);
        RF_INTERNAL_ASSERT(it != sizes.end()) << "launch shape uses " << v->name << ", not a size";
        return static_cast<double>(it->second);
    };
    return Evaluator(env).eval(e);
}

std::string read_text(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError({}, "cannot read REDFUSE_GPU_SOURCE_OVERRIDE file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/** Developers' hooks, for either target: REDFUSE_GPU_SOURCE_DUMP=file writes the generated source
 *  that is about to be built; REDFUSE_GPU_SOURCE_OVERRIDE=file builds a hand-edited copy instead
 *  (printf debugging); the launches and buffers stay those of the generated module. */
void apply_source_hooks(std::string &source) {
    if (const char *dump = std::getenv("REDFUSE_GPU_SOURCE_DUMP"); dump && *dump) std::ofstream(dump) << source;
    if (const char *alt = std::getenv("REDFUSE_GPU_SOURCE_OVERRIDE"); alt && *alt) source = read_text(alt);
}

int default_threads(const std::string &target) { return target == "cuda" ? 128 : 64; }

std::shared_ptr<const CudaDeviceOverride> &cuda_override() {
    static std::shared_ptr<const CudaDeviceOverride> o;
    return o;
}

}  // namespace

GpuProgram::~GpuProgram() = default;

void set_cuda_device_override(std::shared_ptr<const CudaDeviceOverride> o) { cuda_override() = std::move(o); }

std::vector<std::string> cuda_compile_options() { return {"--prec-div=false", "-lineinfo"}; }

GpuModule generate_gpu_module(const Plan &plan, const SizeBinding &sizes, const GpuOptions &o) {
    if (o.target != "opencl" && o.target != "cuda") throw UserError({}, "unknown GPU target '" + o.target + "' (opencl, cuda)");
    tile::LowerOptions lo;
    lo.sizes = sizes;
    lo.schedules = o.schedules;
    lo.unfused = o.unfused;
    // The segment split fills the device's work-groups, not CPU threads.
    lo.threads = o.workers > 0 ? o.workers : (o.target == "cuda" ? 264 : 8);
    lo.force_tile = o.tile;
    lo.force_segments = o.segments;
    lo.force_row_block = o.row_block;
    lo.force_strategy = o.strategy;
    lo.float_states = true;  // GPU states are float (docs/design.md §4): tile GEMMs accumulate into them
    tile::Module m = tile::lower_plan(plan, lo);
    if (tile::verify_each_pass()) tile::verify(m);
    GpuCodegenOptions go;
    go.dialect = o.target == "cuda" ? Dialect::Cuda : Dialect::OpenCL;
    go.threads = o.threads > 0 ? o.threads : default_threads(o.target);
    go.sizes = sizes;
    go.tensor_cores = o.tensor_cores;
    if (o.fusion_level != "block" && o.fusion_level != "warp" && o.fusion_level != "thread" && o.fusion_level != "auto")
        throw UserError({}, "unknown fusion level '" + o.fusion_level + "' (auto, block, warp, thread)");
    go.fusion_level = o.fusion_level;
    for (const ChainPlan &c : plan.chains) {
        double n = 1;
        for (Expr e : c.axis_extents) n *= eval_sizes(e, sizes);
        go.longest_axis = std::max(go.longest_axis, n);
    }
    return generate_gpu(m, go);
}

/** The module with the largest row block and tile (up to the plan's) whose work-groups fit in
 *  `limit` bytes of shared memory at `sizes`: halves them in turn until they fit. */
GpuModule fit_shared_memory(const Plan &plan, const SizeBinding &sizes, GpuOptions o, int64_t limit) {
    for (int attempt = 0;; attempt++) {
        GpuModule g = generate_gpu_module(plan, sizes, o);
        double worst = 0;
        for (const GpuLaunch &l : g.launches) worst = std::max(worst, eval_sizes(l.shared_bytes, sizes));
        if (worst <= static_cast<double>(limit)) return g;
        int64_t rb = 1, tile = 1;
        for (const tile::Kernel &k : g.module.kernels) {
            rb = std::max(rb, k.schedule.row_block);
            tile = std::max(tile, k.schedule.tile);
        }
        if (attempt >= 12 || (rb <= 1 && tile <= 32))
            throw UserError({}, "the kernels need " + std::to_string(static_cast<long long>(worst)) + " bytes of shared memory per work-group at these sizes; the device has " +
                                    std::to_string(static_cast<long long>(limit)));
        if (rb > 1 && (attempt % 2 == 0 || tile <= 32)) o.row_block = std::max<int64_t>(1, rb / 2);
        else o.tile = std::max<int64_t>(32, tile / 2);
    }
}

std::unique_ptr<GpuProgram> compile_gpu(const Plan &plan, const SizeBinding &sizes, const GpuOptions &o) {
    auto t0 = std::chrono::steady_clock::now();
    auto prog = std::make_unique<GpuProgram>();
    GpuOptions opts = o;
    if (o.target == "cuda" && cuda_override()) {
        // A test's device (the host emulator): no driver, no NVRTC; the same fitting and hooks.
        const CudaDeviceOverride &d = *cuda_override();
        if (opts.workers == 0) opts.workers = d.workers;
        prog->device_name = d.name;
        prog->gpu = fit_shared_memory(plan, sizes, opts, d.shared_limit);
        apply_source_hooks(prog->gpu.source);
        prog->device = d.build(prog->gpu);
    } else if (o.target == "cuda") {
        const cuda::DeviceInfo &d = cuda::device();  // UserError "no CUDA driver/device: ..." without one
        if (opts.workers == 0) opts.workers = 2 * d.sms;
        prog->device_name = d.name;
        // Two work-groups per SM at least (one waits on memory while the other computes), within
        // the per-block opt-in maximum.
        int64_t limit = d.smem_per_block_optin > 0 ? d.smem_per_block_optin : 48 * 1024;
        if (d.smem_per_sm > 0) limit = std::min(limit, d.smem_per_sm / 2 - 1024);
        prog->gpu = fit_shared_memory(plan, sizes, opts, limit);
        apply_source_hooks(prog->gpu.source);
        cuda::CompiledModule cm = cuda::compile(prog->gpu.source, o.arch.empty() ? cuda::device_arch() : o.arch, cuda_compile_options(), o.cache_dir);
        prog->from_cache = cm.from_cache;
        prog->log = cm.log;
        prog->device = std::make_shared<CudaDevice>(cm);
    } else {
        const ocl::DeviceInfo &d = ocl::device();  // UserError "no OpenCL platform/device: ..." without one
        if (opts.workers == 0) opts.workers = d.gpu ? 4 * d.compute_units : 8;
        prog->device_name = d.name;
        prog->gpu = fit_shared_memory(plan, sizes, opts, static_cast<int64_t>(d.local_mem_bytes));
        apply_source_hooks(prog->gpu.source);
        prog->device = std::make_shared<OclDevice>(prog->gpu.source);
    }
    prog->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return prog;
}

struct GpuBuffers::Impl {
    const GpuProgram &prog;
    SizeBinding sizes;
    CpuBuffers host;
    std::vector<std::unique_ptr<DevBuf>> dev;  // every module buffer, in module order
    std::vector<int> user_of;                   // module buffer -> host buffer (or -1: a temporary)
    std::vector<int64_t> size_values;
    Impl(const GpuProgram &p, const Program &prog_ir, const SizeBinding &s, const std::map<std::string, Tensor> &inputs)
        : prog(p), sizes(s), host(prog_ir, s, inputs) {}
};

GpuBuffers::GpuBuffers(const GpuProgram &prog, const Program &p, const SizeBinding &sizes, const std::map<std::string, Tensor> &inputs)
    : impl_(std::make_unique<Impl>(prog, p, sizes, inputs)) {
    Impl &I = *impl_;
    I.size_values = I.host.size_values();
    const tile::Module &m = prog.gpu.module;
    // Module buffers: user buffers in ABI order (inputs then outputs, as CpuBuffers holds them).
    size_t user = 0;
    for (const tile::Buffer &b : m.buffers) {
        if (b.role == tile::Buffer::Role::Temp) {
            double n = 1;
            for (Expr d : b.dims) n *= eval_sizes(d, sizes);
            I.dev.push_back(prog.device->alloc(static_cast<size_t>(std::max(1.0, n)) * 4));
            I.user_of.push_back(-1);
            continue;
        }
        RF_INTERNAL_ASSERT(user < I.host.count()) << "module buffers do not match the program's inputs and outputs";
        I.dev.push_back(prog.device->alloc(I.host.bytes_of(user)));
        I.dev.back()->write(I.host.data(user), I.host.bytes_of(user));
        I.user_of.push_back(static_cast<int>(user++));
    }
}

GpuBuffers::~GpuBuffers() = default;

void GpuBuffers::poison() {
    Impl &I = *impl_;
    I.host.poison();
    const tile::Module &m = I.prog.gpu.module;
    for (size_t i = 0; i < m.buffers.size(); i++)
        if (m.buffers[i].role == tile::Buffer::Role::Output) I.dev[i]->write(I.host.data(I.user_of[i]), I.host.bytes_of(I.user_of[i]));
}

void GpuBuffers::run() {
    Impl &I = *impl_;
    std::vector<DevBuf *> bufs;
    for (auto &d : I.dev) bufs.push_back(d.get());
    for (const GpuLaunch &l : I.prog.gpu.launches) {
        double groups = eval_sizes(l.groups, I.sizes);
        if (groups < 1) continue;
        int64_t smem = static_cast<int64_t>(eval_sizes(l.shared_bytes, I.sizes));
        I.prog.device->launch(l, static_cast<int64_t>(groups), smem, bufs, I.size_values);
    }
}

void GpuBuffers::sync() { impl_->prog.device->sync(); }

void GpuBuffers::flush_caches() { impl_->prog.device->flush_caches(); }

std::vector<double> GpuBuffers::time_runs(int reps) {
    std::vector<double> t;
    for (int r = 0; r < reps; r++) t.push_back(impl_->prog.device->time([&] { run(); }));
    return t;
}

std::map<std::string, Tensor> GpuBuffers::outputs() {
    Impl &I = *impl_;
    sync();
    const tile::Module &m = I.prog.gpu.module;
    for (size_t i = 0; i < m.buffers.size(); i++)
        if (m.buffers[i].role == tile::Buffer::Role::Output) I.dev[i]->read(I.host.data(I.user_of[i]), I.host.bytes_of(I.user_of[i]));
    return I.host.outputs();
}

int64_t GpuBuffers::bytes() const { return impl_->host.bytes(); }

}  // namespace rf
