/** \file CudaEmuDevice.cpp
 * The emulated CUDA device of CudaEmuDevice.h: buffers in host memory, modules JIT-compiled with the
 * emulator's prelude (cached like the CPU backend's kernels), launches run by the module's entry point.
 */
#include "CudaEmuDevice.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include "runtime/GpuDevice.h"
#include "runtime/Jit.h"

namespace rf::test {

namespace {

const std::string kEmuDir = std::string(REDFUSE_SOURCE_DIR) + "/tests/unit/runtime";

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

/** Device memory: host memory aligned like cudaMalloc's (256 bytes), so the generated kernels' run-time
 *  alignment tests take the vector path exactly where a GPU would. */
struct EmuBuf : DevBuf {
    explicit EmuBuf(size_t n) : bytes(n), p(static_cast<unsigned char *>(std::aligned_alloc(256, (n + 255) / 256 * 256 + 256))) {}
    /** The caller's "device" memory (host memory standing in for it): not freed here. */
    EmuBuf(void *caller, size_t n) : bytes(n), p(static_cast<unsigned char *>(caller)), owned(false) {}
    ~EmuBuf() override {
        if (owned) std::free(p);
    }
    void write(const void *src, size_t n) override { std::memcpy(p, src, n); }
    void read(void *dst, size_t n) override { std::memcpy(dst, p, n); }
    size_t bytes;
    unsigned char *p;
    bool owned = true;
};

typedef int (*LaunchFn)(const char *, unsigned, unsigned, size_t, void *const *, const size_t *, size_t, const int64_t *, size_t,
                        uint32_t, char *, size_t);

class EmuDevice : public GpuDevice {
public:
    EmuDevice(const GpuModule &m, const CudaEmuOptions &o) : seed_(o.seed), on_set_stream_(o.on_set_stream) {
        std::string source = m.source;
        if (o.mutate_source) o.mutate_source(source);
        std::vector<std::string> kernels;
        for (const GpuLaunch &l : m.launches) kernels.push_back(l.kernel);
        JitOptions jo;
        jo.flags = o.flags;
        jo.flags.push_back("-fvisibility=hidden");  // each module keeps its own emulator state
        jo.flags.push_back("-I" + kEmuDir);
        // The prelude is #included, not pasted: its text goes into the cache key.
        for (const char *h : {"CudaEmu.h", "CudaEmuPtx.h", "CudaEmuKernel.h"}) jo.key_extra += read_file(kEmuDir + "/" + h);
        so_ = jit_compile(emulated_cuda_source(source, kernels), jo);
        launch_ = so_->function<LaunchFn>("rf_emu_launch");
    }
    std::unique_ptr<DevBuf> alloc(size_t bytes) override { return std::make_unique<EmuBuf>(bytes); }
    std::unique_ptr<DevBuf> wrap(void *memory, size_t bytes) override { return std::make_unique<EmuBuf>(memory, bytes); }
    void set_stream(void *stream) override {
        if (on_set_stream_) on_set_stream_(stream);
    }
    void launch(const GpuLaunch &l, int64_t groups, int64_t smem, const std::vector<DevBuf *> &bufs,
                const std::vector<int64_t> &sizes) override {
        std::vector<void *> ptrs;
        std::vector<size_t> bytes;
        for (DevBuf *b : bufs) {
            ptrs.push_back(static_cast<EmuBuf *>(b)->p);
            bytes.push_back(static_cast<EmuBuf *>(b)->bytes);
        }
        if (groups > 0x7fffffff) throw std::runtime_error("CUDA emulator: more blocks than CUDA's grid allows");
        char err[4096] = {0};
        if (launch_(l.kernel.c_str(), static_cast<unsigned>(groups), static_cast<unsigned>(l.threads), static_cast<size_t>(smem),
                    ptrs.data(), bytes.data(), ptrs.size(), sizes.data(), sizes.size(), seed_, err, sizeof err) != 0)
            throw std::runtime_error("CUDA emulator: " + l.kernel + " (" + std::to_string(groups) + " blocks of " +
                                     std::to_string(l.threads) + ", " + std::to_string(smem) + " bytes of shared memory): " + err);
    }
    void sync() override {}
    double time(const std::function<void()> &f) override {
        auto t0 = std::chrono::steady_clock::now();
        f();
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }

private:
    uint32_t seed_;
    std::function<void(void *)> on_set_stream_;
    std::shared_ptr<SharedObject> so_;
    LaunchFn launch_ = nullptr;
};

}  // namespace

std::string emulated_cuda_source(const std::string &cuda_source, const std::vector<std::string> &kernels) {
    // A textual rewrite (acceptable in a test tool): `extern __shared__` names one array per block,
    // which a host function cannot declare; the emulator hands each block its own buffer instead.
    const std::string decl = "extern __shared__ __align__(16) unsigned char rf_smem[];";
    const std::string repl = "unsigned char *const rf_smem = ::cuda_emu::dynamic_smem();";
    std::string src = cuda_source;
    for (size_t at; (at = src.find(decl)) != std::string::npos;) src.replace(at, decl.size(), repl);
    // Vector loads (GpuVectorLoads.cpp) go through a checked load: alignment and bounds.
    for (const char *type : {"float4", "uint4", "uint2"}) {
        const std::string load = std::string("*(const ") + type + " *)(", checked = std::string("::cuda_emu::vector_load<") + type + ">(";
        for (size_t at; (at = src.find(load)) != std::string::npos;) src.replace(at, load.size(), checked);
    }
    if (src.find("__shared__") != std::string::npos)
        throw std::runtime_error("CUDA emulator: a __shared__ declaration other than rf_smem's: " +
                                 src.substr(src.find("__shared__"), 80));
    std::ostringstream os;
    os << "#include \"CudaEmuKernel.h\"\n" << src << "\n";
    os << "extern \"C\" __attribute__((visibility(\"default\"))) int rf_emu_launch(const char *k_, unsigned g_, unsigned t_, "
          "size_t s_, void *const *b_, const size_t *bb_, size_t nb_, const int64_t *z_, size_t nz_, uint32_t seed_, char *e_, size_t ne_) {\n";
    std::set<std::string> seen;
    for (const std::string &k : kernels)
        if (seen.insert(k).second)
            os << "    if (std::strcmp(k_, \"" << k << "\") == 0) return ::cuda_emu::run_kernel(&" << k
               << ", g_, t_, s_, b_, bb_, nb_, z_, nz_, seed_, e_, ne_);\n";
    os << "    std::snprintf(e_, ne_, \"no kernel %s in the module\", k_);\n    return 1;\n}\n";
    return os.str();
}

ScopedCudaEmulation::ScopedCudaEmulation(CudaEmuOptions o) {
    auto d = std::make_shared<CudaDeviceOverride>();
    d->name = "CUDA emulator (host fibers)";
    d->workers = 8;
    // An H200's limits as compile_gpu derives them: min(opt-in per block, half an SM - 1 KiB).
    d->shared_limit = std::min<int64_t>(232448, 233472 / 2 - 1024);
    d->build = [o](const GpuModule &m) -> std::shared_ptr<GpuDevice> { return std::make_shared<EmuDevice>(m, o); };
    set_cuda_device_override(d);
}

ScopedCudaEmulation::~ScopedCudaEmulation() { set_cuda_device_override(nullptr); }

}  // namespace rf::test
