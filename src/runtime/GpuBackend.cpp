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
#include "runtime/RuntimeSettings.h"
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
/** Device memory by address: owned (cuMemAlloc) or the caller's. */
struct CudaMem : DevBuf {
    virtual uint64_t address() const = 0;
};
struct CudaBuf : CudaMem {
    explicit CudaBuf(size_t n) : b(n) {}
    void write(const void *src, size_t bytes) override { b.write(src, bytes); }
    void read(void *dst, size_t bytes) override { b.read(dst, bytes); }
    uint64_t address() const override { return b.ptr(); }
    cuda::Buffer b;
};
struct CudaView : CudaMem {
    explicit CudaView(uint64_t p) : ptr(p) {}
    void write(const void *, size_t) override { throw InternalError("a caller's device buffer is not copied to"); }
    void read(void *, size_t) override { throw InternalError("a caller's device buffer is not copied from"); }
    uint64_t address() const override { return ptr; }
    uint64_t ptr;
};

class CudaDevice : public GpuDevice {
public:
    explicit CudaDevice(const cuda::CompiledModule &m) : mod_(m) {}
    std::unique_ptr<DevBuf> alloc(size_t bytes) override { return std::make_unique<CudaBuf>(bytes); }
    void launch(const GpuLaunch &l, int64_t groups, int64_t smem, const std::vector<DevBuf *> &bufs,
                const std::vector<int64_t> &sizes) override {
        std::vector<cuda::KernelArg> args;
        for (DevBuf *b : bufs) args.push_back(cuda::KernelArg::ptr(static_cast<CudaMem *>(b)->address()));
        for (int64_t s : sizes) args.push_back(cuda::KernelArg::i64(s));
        if (groups > 0x7fffffff) throw UserError({}, "a launch needs " + std::to_string(groups) + " blocks: more than CUDA's grid allows");
        mod_.launch(l.kernel, static_cast<unsigned>(groups), static_cast<unsigned>(l.threads), static_cast<size_t>(smem), args);
    }
    void sync() override { cuda::synchronize(); }
    std::unique_ptr<DevBuf> wrap(void *device_memory, size_t) override {
        return std::make_unique<CudaView>(reinterpret_cast<uint64_t>(device_memory));
    }
    void set_stream(void *stream) override { mod_.set_stream(reinterpret_cast<uint64_t>(stream)); }
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

/** Developers' hooks, for either target (RuntimeSettings): gpu_source_dump writes the generated
 *  source that is about to be built; gpu_source_override builds a hand-edited copy instead (printf
 *  debugging); the launches and buffers stay those of the generated module. */
void apply_source_hooks(std::string &source) {
    const RuntimeSettings &s = runtime_settings();
    if (!s.gpu_source_dump.empty()) std::ofstream(s.gpu_source_dump) << source;
    if (!s.gpu_source_override.empty()) source = read_text(s.gpu_source_override);
}

std::shared_ptr<const CudaDeviceOverride> &cuda_override() {
    static std::shared_ptr<const CudaDeviceOverride> o;
    return o;
}

GpuSpec cuda_spec() {
    GpuSpec g;
    if (const auto &o = cuda_override()) {
        g.name = o->name;
        g.arch = "sm_90a";
        g.workers = o->workers;
        g.compute_units = std::max(1, o->workers / 2);
        g.shared_memory_bytes = o->shared_limit;
        g.from_device = true;
        return g;
    }
    const cuda::DeviceInfo &d = cuda::device();  // UserError "no CUDA driver/device: ..." without one
    g.name = d.name;
    g.arch = cuda::device_arch();
    g.compute_units = d.sms;
    g.workers = 2 * d.sms;
    // Two work-groups per SM at least (one waits on memory while the other computes), within the
    // per-block opt-in maximum.
    g.shared_memory_bytes = d.smem_per_block_optin > 0 ? d.smem_per_block_optin : 48 * 1024;
    if (d.smem_per_sm > 0) g.shared_memory_bytes = std::min<int64_t>(g.shared_memory_bytes, d.smem_per_sm / 2 - 1024);
    g.from_device = true;
    return g;
}

GpuSpec opencl_spec() {
    const ocl::DeviceInfo &d = ocl::device();  // UserError "no OpenCL platform/device: ..." without one
    GpuSpec g;
    g.name = d.name;
    g.compute_units = static_cast<int>(d.compute_units);
    g.workers = d.gpu ? 4 * static_cast<int>(d.compute_units) : 8;
    g.shared_memory_bytes = static_cast<int64_t>(d.local_mem_bytes);
    g.from_device = true;
    return g;
}

}  // namespace

GpuProgram::~GpuProgram() = default;

std::unique_ptr<DevBuf> GpuDevice::wrap(void *, size_t) {
    throw UserError({}, "this device cannot use the caller's device memory; pass host buffers");
}

void set_cuda_device_override(std::shared_ptr<const CudaDeviceOverride> o) { cuda_override() = std::move(o); }

std::vector<std::string> cuda_compile_options() { return {"--prec-div=false", "-lineinfo"}; }

std::optional<GpuSpec> gpu_device_spec(TargetKind kind, std::string *why) {
    try {
        if (kind == TargetKind::Cuda) return cuda_spec();
        if (kind == TargetKind::OpenCL) return opencl_spec();
    } catch (const UserError &e) {
        if (why) *why = e.what();
        return std::nullopt;
    }
    if (why) *why = std::string("target ") + to_string(kind) + " is not a GPU";
    return std::nullopt;
}

std::unique_ptr<GpuProgram> build_gpu_program(GpuModule module, const GpuBuildOptions &o) {
    auto t0 = std::chrono::steady_clock::now();
    auto prog = std::make_unique<GpuProgram>();
    prog->gpu = std::move(module);
    apply_source_hooks(prog->gpu.source);
    if (o.kind == TargetKind::Cuda && cuda_override()) {
        // A test's device (the host emulator): no driver, no NVRTC.
        prog->device_name = cuda_override()->name;
        prog->device = cuda_override()->build(prog->gpu);
    } else if (o.kind == TargetKind::Cuda) {
        prog->device_name = cuda::device().name;  // UserError "no CUDA driver/device: ..." without one
        cuda::CompiledModule cm = cuda::compile(prog->gpu.source, o.arch.empty() ? cuda::device_arch() : o.arch,
                                                cuda_compile_options(), o.cache_dir);
        prog->from_cache = cm.from_cache;
        prog->log = cm.log;
        prog->device = std::make_shared<CudaDevice>(cm);
    } else {
        RF_INTERNAL_ASSERT(o.kind == TargetKind::OpenCL) << "build_gpu_program for target " << to_string(o.kind);
        prog->device_name = ocl::device().name;  // UserError "no OpenCL platform/device: ..." without one
        prog->device = std::make_shared<OclDevice>(prog->gpu.source);
    }
    prog->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return prog;
}

namespace {
void launch_all(const GpuProgram &prog, const SizeBinding &sizes, const std::vector<int64_t> &size_values,
                const std::vector<std::unique_ptr<DevBuf>> &dev) {
    std::vector<DevBuf *> bufs;
    for (auto &d : dev) bufs.push_back(d.get());
    for (const GpuLaunch &l : prog.gpu.launches) {
        double groups = eval_sizes(l.groups, sizes);
        if (groups < 1) continue;
        prog.device->launch(l, static_cast<int64_t>(groups), static_cast<int64_t>(eval_sizes(l.shared_bytes, sizes)), bufs,
                            size_values);
    }
}

std::unique_ptr<DevBuf> temporary(const GpuProgram &prog, const tile::Buffer &b, const SizeBinding &sizes) {
    double n = 1;
    for (Expr d : b.dims) n *= eval_sizes(d, sizes);
    return prog.device->alloc(static_cast<size_t>(std::max(1.0, n)) * 4);
}
}  // namespace

void run_gpu_on_device(const GpuProgram &prog, const SizeBinding &sizes, const std::vector<int64_t> &size_values,
                       const std::vector<BufferRef> &user, void *stream) {
    const tile::Module &m = prog.gpu.module;
    std::vector<std::unique_ptr<DevBuf>> dev;
    bool temporaries = false;
    size_t next = 0;
    for (const tile::Buffer &b : m.buffers) {
        if (b.role == tile::Buffer::Role::Temp) {
            dev.push_back(temporary(prog, b, sizes));
            temporaries = true;
            continue;
        }
        RF_INTERNAL_ASSERT(next < user.size()) << "module buffers do not match the kernel's inputs and outputs";
        dev.push_back(prog.device->wrap(user[next].data, user[next].bytes));
        next++;
    }
    prog.device->set_stream(stream);
    launch_all(prog, sizes, size_values, dev);
    // The temporaries are freed on return: the launches that use them must have finished.
    if (temporaries) prog.device->sync();
    prog.device->set_stream(nullptr);
}

void run_gpu_on_host(const GpuProgram &prog, const SizeBinding &sizes, const std::vector<int64_t> &size_values,
                     const std::vector<BufferRef> &user) {
    const tile::Module &m = prog.gpu.module;
    std::vector<std::unique_ptr<DevBuf>> dev;
    std::vector<int> user_of;
    size_t next = 0;
    for (const tile::Buffer &b : m.buffers) {
        if (b.role == tile::Buffer::Role::Temp) {
            dev.push_back(temporary(prog, b, sizes));
            user_of.push_back(-1);
            continue;
        }
        RF_INTERNAL_ASSERT(next < user.size()) << "module buffers do not match the kernel's inputs and outputs";
        const BufferRef &h = user[next];
        dev.push_back(prog.device->alloc(std::max<size_t>(h.bytes, 1)));
        // Outputs too: an element the kernel does not write keeps the caller's value (a poisoned
        // output stays poisoned, so a check finds it).
        if (h.bytes) dev.back()->write(h.data, h.bytes);
        user_of.push_back(static_cast<int>(next++));
    }
    launch_all(prog, sizes, size_values, dev);
    prog.device->sync();
    for (size_t i = 0; i < m.buffers.size(); i++)
        if (m.buffers[i].role == tile::Buffer::Role::Output && user[user_of[i]].bytes)
            dev[i]->read(user[user_of[i]].data, user[user_of[i]].bytes);
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
            I.dev.push_back(temporary(prog, b, sizes));
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
    launch_all(I.prog, I.sizes, I.size_values, I.dev);
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
