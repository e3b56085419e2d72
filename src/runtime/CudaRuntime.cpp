/** \file CudaRuntime.cpp
 * NVRTC and the CUDA driver API through dlopen, so redfuse builds and runs where CUDA is absent.
 *
 * No CUDA header is included: the few prototypes are declared below with the ABI names cuda.h
 * maps to (cuMemAlloc -> cuMemAlloc_v2, ...), handles as void * and results as int (CUresult and
 * nvrtcResult are int-sized enums). Calls use the legacy default stream, never _ptds/_ptsz.
 */
#include "runtime/CudaRuntime.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "runtime/Jit.h"
#include "runtime/RuntimeSettings.h"
#include "runtime/Sha256.h"
#include "support/Error.h"

namespace rf::cuda {

namespace fs = std::filesystem;

namespace {

constexpr const char *kCacheVersion = "redfuse-cuda-v1";  // bump when an entry's meaning changes
constexpr int kLogLines = 40;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CUDA_ERROR_STUB_LIBRARY = 34;
constexpr size_t kStaticSmemLimit = 48 * 1024;  // above this a kernel must opt in (cuFuncSetAttribute)

// ---- error names ----------------------------------------------------------------------------------

// For the stub (its cuGetErrorName returns NULL) and for errors met before the driver is usable.
struct CodeName {
    int code;
    const char *name;
};
constexpr CodeName kCuErrors[] = {
    {0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"}, {4, "CUDA_ERROR_DEINITIALIZED"}, {34, "CUDA_ERROR_STUB_LIBRARY"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER"}, {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"}, {100, "CUDA_ERROR_NO_DEVICE"}, {101, "CUDA_ERROR_INVALID_DEVICE"},
    {200, "CUDA_ERROR_INVALID_IMAGE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"}, {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {218, "CUDA_ERROR_INVALID_PTX"}, {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM"}, {400, "CUDA_ERROR_INVALID_HANDLE"}, {500, "CUDA_ERROR_NOT_FOUND"},
    {600, "CUDA_ERROR_NOT_READY"}, {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"}, {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"}, {710, "CUDA_ERROR_ASSERT"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"}, {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"}, {800, "CUDA_ERROR_NOT_PERMITTED"}, {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY"}, {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}, {999, "CUDA_ERROR_UNKNOWN"}};

// ---- the driver API -------------------------------------------------------------------------------

// field, symbol (the _v2 names cuda.h maps to), type; all required.
#define RF_CU_API(X)                                                                                       \
    X(Init, "cuInit", int (*)(unsigned))                                                                   \
    X(DriverGetVersion, "cuDriverGetVersion", int (*)(int *))                                              \
    X(DeviceGetCount, "cuDeviceGetCount", int (*)(int *))                                                  \
    X(DeviceGet, "cuDeviceGet", int (*)(int *, int))                                                       \
    X(DeviceGetName, "cuDeviceGetName", int (*)(char *, int, int))                                         \
    X(DeviceGetAttribute, "cuDeviceGetAttribute", int (*)(int *, int, int))                                \
    X(DeviceTotalMem, "cuDeviceTotalMem_v2", int (*)(size_t *, int))                                       \
    X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", int (*)(void **, int))                           \
    X(CtxGetCurrent, "cuCtxGetCurrent", int (*)(void **))                                                  \
    X(CtxSetCurrent, "cuCtxSetCurrent", int (*)(void *))                                                   \
    X(CtxSynchronize, "cuCtxSynchronize", int (*)())                                                       \
    X(ModuleLoadData, "cuModuleLoadData", int (*)(void **, const void *))                                  \
    X(ModuleUnload, "cuModuleUnload", int (*)(void *))                                                     \
    X(ModuleGetFunction, "cuModuleGetFunction", int (*)(void **, void *, const char *))                    \
    X(FuncSetAttribute, "cuFuncSetAttribute", int (*)(void *, int, int))                                   \
    X(LaunchKernel, "cuLaunchKernel",                                                                      \
      int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, \
              void **))                                                                                    \
    X(MemAlloc, "cuMemAlloc_v2", int (*)(uint64_t *, size_t))                                              \
    X(MemFree, "cuMemFree_v2", int (*)(uint64_t))                                                          \
    X(MemcpyHtoD, "cuMemcpyHtoD_v2", int (*)(uint64_t, const void *, size_t))                              \
    X(MemcpyDtoH, "cuMemcpyDtoH_v2", int (*)(void *, uint64_t, size_t))                                    \
    X(MemsetD8, "cuMemsetD8_v2", int (*)(uint64_t, unsigned char, size_t))                                 \
    X(EventCreate, "cuEventCreate", int (*)(void **, unsigned))                                            \
    X(EventDestroy, "cuEventDestroy_v2", int (*)(void *))                                                  \
    X(EventRecord, "cuEventRecord", int (*)(void *, void *))                                               \
    X(EventSynchronize, "cuEventSynchronize", int (*)(void *))

#define RF_DECLARE_FIELD(field, symbol, type) std::type_identity_t<type> field = nullptr;

struct DriverApi {
    RF_CU_API(RF_DECLARE_FIELD)
    int (*EventElapsedTime)(float *, void *, void *) = nullptr;  // _v2 where the driver has it
    int (*GetErrorName)(int, const char **) = nullptr;           // optional
};

std::string error_name(const DriverApi *api, int code) {
    if (api && api->GetErrorName) {
        const char *s = nullptr;
        if (api->GetErrorName(code, &s) == 0 && s) return s;
    }
    for (const CodeName &c : kCuErrors)
        if (c.code == code) return c.name;
    return "CUresult " + std::to_string(code);
}

struct DriverState {
    DriverApi api;
    void *handle = nullptr;
    std::string reason;  // "" when usable
    int device_count = 0, version = 0;
};

/** Opens the driver at `path` into `s`; on failure s.reason says why and the library is closed. */
void open_driver(const std::string &path, DriverState &s) {
    auto fail = [&](const std::string &why) {
        s.reason = "no CUDA driver/device: " + why;
        if (s.handle) ::dlclose(s.handle);
        s.handle = nullptr;
    };
    // RTLD_LOCAL: a stub or second driver must not lend its symbols to anything else.
    s.handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!s.handle) {
        const char *e = ::dlerror();
        std::string err = e ? e : "dlopen failed";
        if (err.find("cannot open shared object file") != std::string::npos)
            return fail(path + " not found (" + err + ")");
        return fail("cannot load " + path + ": " + err);
    }
    std::string missing;
    auto sym = [&](auto &fn, const char *name, bool required = true) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(s.handle, name));
        if (!fn && required && missing.empty()) missing = name;
    };
    DriverApi &a = s.api;
#define RF_LOAD_FIELD(field, symbol, type) sym(a.field, symbol);
    RF_CU_API(RF_LOAD_FIELD)
#undef RF_LOAD_FIELD
    // cuda.h 12.8+ maps cuEventElapsedTime to _v2 (same signature); older drivers only have the first.
    sym(a.EventElapsedTime, "cuEventElapsedTime_v2", false);
    if (!a.EventElapsedTime) sym(a.EventElapsedTime, "cuEventElapsedTime");
    sym(a.GetErrorName, "cuGetErrorName", false);
    if (!missing.empty()) return fail(path + " has no " + missing + " (driver too old?)");

    if (int rc = a.Init(0); rc != 0) {
        std::string why = "cuInit failed: " + error_name(&a, rc);
        if (rc == CUDA_ERROR_STUB_LIBRARY)
            why += " (" + path + " is the CUDA toolkit's stub library, not a real driver)";
        return fail(why);
    }
    if (a.DriverGetVersion(&s.version) != 0) s.version = 0;
    if (int rc = a.DeviceGetCount(&s.device_count); rc != 0)
        return fail("cuDeviceGetCount failed: " + error_name(&a, rc));
    if (s.device_count <= 0) return fail("cuDeviceGetCount found no device");
}

const DriverState &driver() {
    static const DriverState state = [] {
        DriverState s;
        std::string path = runtime_settings().libcuda;
        open_driver(path.empty() ? "libcuda.so.1" : path, s);
        return s;
    }();
    return state;
}

struct DeviceState {
    DeviceInfo info;
    void *ctx = nullptr;  // the retained primary context, never released (the driver frees it at exit)
    std::string error;    // the UserError message when unusable
};

const DeviceState &device_state() {
    static const DeviceState state = [] {
        DeviceState d;
        const DriverState &drv = driver();
        if (!drv.reason.empty()) {
            d.error = drv.reason;
            return d;
        }
        const DriverApi &a = drv.api;
        std::string env = runtime_settings().cuda_device;
        int ordinal = 0;
        if (!env.empty()) {
            char *end = nullptr;
            long v = std::strtol(env.c_str(), &end, 10);
            if (*end != '\0' || v < 0 || v >= drv.device_count) {
                d.error = "REDFUSE_CUDA_DEVICE=" + env + " is not a device ordinal (found " +
                          std::to_string(drv.device_count) + " device(s))";
                return d;
            }
            ordinal = static_cast<int>(v);
        }
        auto failed = [&](const char *call, int rc) {
            d.error = std::string("no CUDA driver/device: ") + call + " failed: " + error_name(&a, rc);
        };
        int dev = 0;
        if (int rc = a.DeviceGet(&dev, ordinal); rc != 0) {
            failed("cuDeviceGet", rc);
            return d;
        }
        DeviceInfo &info = d.info;
        info.ordinal = ordinal;
        info.driver_version = drv.version;
        char name[256] = {0};
        if (a.DeviceGetName(name, sizeof name - 1, dev) == 0) info.name = name;
        // CUdevice_attribute values from cuda.h. A failed query leaves 0: these describe the
        // device, they do not gate its use.
        auto attr = [&](int which) {
            int v = 0;
            return a.DeviceGetAttribute(&v, which, dev) == 0 ? v : 0;
        };
        info.cc_major = attr(75);
        info.cc_minor = attr(76);
        info.sms = attr(16);
        info.smem_per_block_optin = attr(97);
        info.smem_per_sm = attr(81);
        info.l2_bytes = attr(38);
        info.clock_khz = attr(13);
        info.mem_clock_khz = attr(36);
        info.bus_width_bits = attr(37);
        info.max_threads_per_block = attr(1);
        info.regs_per_sm = attr(82);
        size_t mem = 0;
        if (a.DeviceTotalMem(&mem, dev) == 0) info.global_mem = static_cast<int64_t>(mem);
        if (info.cc_major == 0) {
            d.error = "no CUDA driver/device: cannot read the compute capability of device " + std::to_string(ordinal);
            return d;
        }
        // The primary context is the one the runtime API and other libraries share; it is not made
        // current by retaining it, hence cuCtxSetCurrent in ensure_current().
        if (int rc = a.DevicePrimaryCtxRetain(&d.ctx, dev); rc != 0) failed("cuDevicePrimaryCtxRetain", rc);
        return d;
    }();
    return state;
}

[[noreturn]] void cu_fail(const std::string &what, int rc) {
    internal_error(what + " failed: " + error_name(&driver().api, rc), __FILE__, __LINE__);
}

/** The driver API with the device's context current on this thread; UserError when unusable. */
const DriverApi &ensure_current() {
    const DeviceState &d = device_state();
    if (!d.error.empty()) throw UserError({}, d.error);
    const DriverApi &a = driver().api;
    // Checked every time, not cached per thread: other code may switch this thread's context.
    void *cur = nullptr;
    if (a.CtxGetCurrent(&cur) != 0 || cur != d.ctx) {
        if (int rc = a.CtxSetCurrent(d.ctx); rc != 0) cu_fail("cuCtxSetCurrent", rc);
    }
    return a;
}

// ---- NVRTC ----------------------------------------------------------------------------------------

struct Nvrtc {
    void *handle = nullptr;
    std::string reason, path, include_dir;
    int major = 0, minor = 0;
#define RF_NVRTC_API(X)                                                                                   \
    X(GetErrorString, "nvrtcGetErrorString", const char *(*)(int))                                         \
    X(Version, "nvrtcVersion", int (*)(int *, int *))                                                      \
    X(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs", int (*)(int *))                                   \
    X(GetSupportedArchs, "nvrtcGetSupportedArchs", int (*)(int *))                                         \
    X(CreateProgram, "nvrtcCreateProgram",                                                                 \
      int (*)(void **, const char *, const char *, int, const char *const *, const char *const *))         \
    X(DestroyProgram, "nvrtcDestroyProgram", int (*)(void **))                                             \
    X(CompileProgram, "nvrtcCompileProgram", int (*)(void *, int, const char *const *))                    \
    X(GetCUBINSize, "nvrtcGetCUBINSize", int (*)(void *, size_t *))                                        \
    X(GetCUBIN, "nvrtcGetCUBIN", int (*)(void *, char *))                                                  \
    X(GetProgramLogSize, "nvrtcGetProgramLogSize", int (*)(void *, size_t *))                              \
    X(GetProgramLog, "nvrtcGetProgramLog", int (*)(void *, char *))
    RF_NVRTC_API(RF_DECLARE_FIELD)

    std::string error(int rc) const {
        const char *s = GetErrorString ? GetErrorString(rc) : nullptr;
        return s ? s : "nvrtcResult " + std::to_string(rc);
    }
};

/** The first directory holding cuda_fp16.h among: next to the library, $CUDA_HOME, /usr/local/cuda. */
std::string find_include_dir(const std::string &lib_path) {
    std::vector<fs::path> dirs;
    if (!lib_path.empty()) dirs.push_back(fs::path(lib_path).parent_path().parent_path() / "include");
    if (std::string home = runtime_settings().cuda_home; !home.empty()) dirs.push_back(fs::path(home) / "include");
    dirs.push_back("/usr/local/cuda/include");
    for (const fs::path &d : dirs) {
        std::error_code ec;
        if (fs::exists(d / "cuda_fp16.h", ec)) {
            fs::path c = fs::canonical(d, ec);  // canonical, so the cache key is the same via any symlink
            return ec ? d.string() : c.string();
        }
    }
    return "";
}

const Nvrtc &nvrtc() {
    static const Nvrtc state = [] {
        Nvrtc n;
        std::vector<std::string> candidates, names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        candidates = names;
        for (std::string dir : {runtime_settings().cuda_home, std::string("/usr/local/cuda")})
            if (!dir.empty())
                for (const std::string &name : names) candidates.push_back(dir + "/lib64/" + name);
        std::string first_error;
        for (const std::string &c : candidates) {
            n.handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (n.handle) break;
            const char *e = ::dlerror();
            if (first_error.empty() && e) first_error = e;
        }
        if (!n.handle) {
            std::string tried;
            for (const std::string &c : candidates) tried += (tried.empty() ? "" : ", ") + c;
            n.reason = "NVRTC not found: tried " + tried + " (" + first_error + ")";
            return n;
        }
        std::string missing;
        auto sym = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(n.handle, name));
            if (!fn && missing.empty()) missing = name;
        };
#define RF_LOAD_FIELD(field, symbol, type) sym(n.field, symbol);
        RF_NVRTC_API(RF_LOAD_FIELD)
#undef RF_LOAD_FIELD
        Dl_info info{};
        if (n.Version && ::dladdr(reinterpret_cast<void *>(n.Version), &info) && info.dli_fname)
            n.path = info.dli_fname;
        if (!missing.empty()) {
            n.reason = "NVRTC at " + n.path + " has no " + missing + " (too old: cubin output needs 11.1+)";
            ::dlclose(n.handle);
            n.handle = nullptr;
            return n;
        }
        if (n.Version(&n.major, &n.minor) != 0) n.major = n.minor = 0;
        n.include_dir = find_include_dir(n.path);
        return n;
    }();
    return state;
}

std::string first_lines(const std::string &text, int n) {
    std::istringstream is(text);
    std::string out, line;
    for (int i = 0; i < n && std::getline(is, line); i++) out += "  " + line + "\n";
    if (std::getline(is, line)) out += "  ...\n";
    return out;
}

std::string read_file(const std::string &path, bool &ok) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream os;
    os << f.rdbuf();
    ok = static_cast<bool>(f);
    return os.str();
}

/** Writes `content` to a name unique to this process and call, then renames it onto `path`, so
 *  readers in other processes see either no file or a complete one. */
void write_atomically(const std::string &path, const std::string &content) {
    static std::atomic<uint64_t> counter{0};
    std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    f.close();
    if (!f || ::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw UserError({}, "cannot write the CUDA cache entry " + path + ": " + std::strerror(err));
    }
}

// The stamp records both payloads, so a torn or stale pair is never trusted.
std::string stamp_text(const std::string &cubin, const std::string &log) {
    return std::string(kCacheVersion) + "\ncubin " + std::to_string(cubin.size()) + " " + sha256_hex(cubin) +
           "\nlog " + std::to_string(log.size()) + " " + sha256_hex(log) + "\n";
}

/** Saves the source of a failed compile where the user can find it; "" if even that fails. */
std::string save_failed_source(const std::string &source) {
    std::string base = runtime_settings().tmpdir;
    std::string tmpl = (base.empty() ? std::string("/tmp") : base) + "/redfuse-nvrtc-XXXXXX.cu";
    int fd = ::mkstemps(tmpl.data(), 3);
    if (fd < 0) return "";
    size_t off = 0;
    while (off < source.size()) {
        ssize_t n = ::write(fd, source.data() + off, source.size() - off);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
    }
    ::close(fd);
    return tmpl;
}

int64_t number_before(const std::string &line, size_t pos) {
    size_t b = pos;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(line[b - 1]))) b--;
    return b < pos ? std::stoll(line.substr(b, pos - b)) : 0;
}

/** The integer right before the first `suffix` in `line` (0 when absent). */
int64_t field(const std::string &line, const char *suffix) {
    size_t p = line.find(suffix);
    return p == std::string::npos ? 0 : number_before(line, p);
}

}  // namespace

// ---- public: NVRTC --------------------------------------------------------------------------------

std::map<std::string, PtxasReport> parse_ptxas_log(const std::string &log) {
    std::map<std::string, PtxasReport> out;
    std::string entry, props;  // the entry being compiled; the function whose properties follow
    std::istringstream is(log);
    for (std::string line; std::getline(is, line);) {
        if (size_t p = line.find("Compiling entry function '"); p != std::string::npos) {
            size_t b = p + std::strlen("Compiling entry function '"), e = line.find('\'', b);
            entry = line.substr(b, e == std::string::npos ? std::string::npos : e - b);
            out[entry];
            props.clear();
        } else if (size_t p = line.find("Function properties for "); p != std::string::npos) {
            props = line.substr(p + std::strlen("Function properties for "));
            while (!props.empty() && std::isspace(static_cast<unsigned char>(props.back()))) props.pop_back();
        } else if (line.find("bytes stack frame") != std::string::npos) {
            // Non-entry (noinline) device functions have properties too; only entries are reported.
            auto it = out.find(props);
            if (it == out.end()) continue;
            it->second.stack_bytes = field(line, " bytes stack frame");
            it->second.spill_stores = field(line, " bytes spill stores");
            it->second.spill_loads = field(line, " bytes spill loads");
        } else if (line.find("Used ") != std::string::npos && line.find(" registers") != std::string::npos &&
                   !entry.empty()) {
            PtxasReport &r = out[entry];
            r.registers = static_cast<int>(field(line, " registers"));
            r.barriers = static_cast<int>(field(line, " barriers"));
            r.shared_bytes = field(line, " bytes smem");
            r.constant_bytes = 0;
            for (size_t p = line.find(" bytes cmem["); p != std::string::npos; p = line.find(" bytes cmem[", p + 1))
                r.constant_bytes += number_before(line, p);
        }
    }
    return out;
}

std::string nvrtc_unavailable_reason() {
    try {
        return nvrtc().reason;
    } catch (const std::exception &e) {
        return std::string("NVRTC not usable: ") + e.what();
    }
}

int nvrtc_version() {
    const Nvrtc &n = nvrtc();
    return n.reason.empty() ? n.major * 1000 + n.minor * 10 : 0;
}

std::string nvrtc_include_dir() { return nvrtc().include_dir; }

std::vector<int> supported_archs() {
    const Nvrtc &n = nvrtc();
    if (!n.reason.empty()) return {};
    int count = 0;
    if (n.GetNumSupportedArchs(&count) != 0 || count <= 0) return {};
    std::vector<int> archs(static_cast<size_t>(count));
    if (n.GetSupportedArchs(archs.data()) != 0) return {};
    return archs;
}

CompiledModule compile(const std::string &source, const std::string &arch, const std::vector<std::string> &options,
                       const std::string &cache_dir) {
    const Nvrtc &n = nvrtc();
    if (!n.reason.empty()) throw UserError({}, n.reason);
    // A virtual architecture would give PTX, which ptxas never checks: inline PTX errors would
    // surface only at load time on the GPU.
    if (arch.rfind("sm_", 0) != 0)
        throw UserError({}, "CUDA target '" + arch + "' is not a real architecture (want sm_XY, e.g. sm_90a)");
    std::vector<std::string> opts = {"--gpu-architecture=" + arch, "-std=c++17", "--ptxas-options=-v"};
    if (!n.include_dir.empty()) opts.push_back("--include-path=" + n.include_dir);
    opts.insert(opts.end(), options.begin(), options.end());

    Sha256 h;
    auto key_field = [&h](const std::string &s) {  // length-prefixed: no two inputs collide by concatenation
        h.update(std::to_string(s.size()) + ":");
        h.update(s);
    };
    key_field(kCacheVersion);
    key_field(std::to_string(n.major) + "." + std::to_string(n.minor));
    key_field(arch);
    for (const std::string &o : opts) key_field(o);
    key_field("source");
    key_field(source);
    const std::string dir = cache_dir.empty() ? default_cache_dir() + "/cuda" : cache_dir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw UserError({}, "cannot create the CUDA cache directory " + dir + ": " +
                                (ec ? ec.message() : std::string("not a directory")));
    const std::string base = dir + "/" + h.hex();

    CompiledModule m;
    m.arch = arch;
    auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&t0] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    {
        bool ok_c = false, ok_l = false, ok_s = false;
        std::string cubin = read_file(base + ".cubin", ok_c), log = read_file(base + ".log", ok_l),
                    stamp = read_file(base + ".ok", ok_s);
        // Hashing what was read (not the files again) means what we return is what was verified.
        if (ok_c && ok_l && ok_s && !cubin.empty() && stamp == stamp_text(cubin, log)) {
            m.cubin.assign(cubin.begin(), cubin.end());
            m.log = std::move(log);
            m.kernels = parse_ptxas_log(m.log);
            m.from_cache = true;
            m.compile_ms = elapsed();
            return m;
        }
    }

    void *prog = nullptr;
    if (int rc = n.CreateProgram(&prog, source.c_str(), "redfuse_kernel.cu", 0, nullptr, nullptr); rc != 0)
        internal_error("nvrtcCreateProgram failed: " + n.error(rc), __FILE__, __LINE__);
    struct Guard {
        const Nvrtc &n;
        void *&p;
        ~Guard() { n.DestroyProgram(&p); }
    } guard{n, prog};
    std::vector<const char *> copts;
    for (const std::string &o : opts) copts.push_back(o.c_str());
    int rc = n.CompileProgram(prog, static_cast<int>(copts.size()), copts.data());
    size_t log_size = 0;
    if (n.GetProgramLogSize(prog, &log_size) == 0 && log_size > 0) {
        std::string log(log_size, '\0');
        if (n.GetProgramLog(prog, log.data()) == 0) m.log = log.c_str();  // drop the terminating NUL
    }
    if (rc != 0) {
        std::string saved = save_failed_source(source), all;
        for (const std::string &o : opts) all += " " + o;
        internal_error("NVRTC rejected generated CUDA code for " + arch + " (" + n.error(rc) + "); source " +
                           (saved.empty() ? std::string("could not be saved") : "saved at " + saved) +
                           "\n  options:" + all + "\n  log:\n" + first_lines(m.log, kLogLines),
                       __FILE__, __LINE__);
    }
    size_t cubin_size = 0;
    if (int r = n.GetCUBINSize(prog, &cubin_size); r != 0 || cubin_size == 0)
        internal_error("NVRTC compiled for " + arch + " but gave no cubin: " + n.error(r), __FILE__, __LINE__);
    m.cubin.resize(cubin_size);
    if (int r = n.GetCUBIN(prog, m.cubin.data()); r != 0)
        internal_error("nvrtcGetCUBIN failed: " + n.error(r), __FILE__, __LINE__);
    m.compile_ms = elapsed();
    m.kernels = parse_ptxas_log(m.log);

    // Payloads first, stamp last: a reader trusts the pair only once the stamp matching both is in place.
    std::string cubin(m.cubin.begin(), m.cubin.end());
    write_atomically(base + ".cubin", cubin);
    write_atomically(base + ".log", m.log);
    write_atomically(base + ".ok", stamp_text(cubin, m.log));
    return m;
}

// ---- public: driver -------------------------------------------------------------------------------

std::string driver_unavailable_reason() {
    try {
        return driver().reason;
    } catch (const std::exception &e) {
        return std::string("no CUDA driver/device: ") + e.what();
    }
}

std::string probe_driver(const std::string &path) {
    try {
        DriverState s;
        open_driver(path, s);
        if (s.handle) ::dlclose(s.handle);  // closed so a stub's SONAME cannot shadow the real driver
        return s.reason;
    } catch (const std::exception &e) {
        return std::string("no CUDA driver/device: ") + e.what();
    }
}

std::string cu_error_name(int code) {
    const DriverState &d = driver();
    return error_name(d.reason.empty() ? &d.api : nullptr, code);
}

const DeviceInfo &device() {
    ensure_current();
    return device_state().info;
}

std::string device_arch() {
    const DeviceInfo &d = device();
    std::string arch = "sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor);
    // wgmma/setmaxnreg (9.0) and tcgen05 (10.0) exist only in the arch-specific "a" targets.
    if ((d.cc_major == 9 || d.cc_major == 10) && d.cc_minor == 0) arch += "a";
    return arch;
}

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
    const DriverApi &a = ensure_current();
    if (bytes == 0) return;  // cuMemAlloc rejects 0 bytes; an empty buffer is the null pointer
    if (int rc = a.MemAlloc(&ptr_, bytes); rc != 0) cu_fail("cuMemAlloc of " + std::to_string(bytes) + " bytes", rc);
}

Buffer::~Buffer() {
    if (!ptr_) return;
    try {
        ensure_current().MemFree(ptr_);
    } catch (...) {  // a destructor cannot report; the memory goes with the context at exit
    }
}

Buffer::Buffer(Buffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0, o.bytes_ = 0; }

Buffer &Buffer::operator=(Buffer &&o) noexcept {
    if (this != &o) {
        Buffer old(std::move(*this));  // frees our memory at the end of this scope
        ptr_ = o.ptr_, bytes_ = o.bytes_;
        o.ptr_ = 0, o.bytes_ = 0;
    }
    return *this;
}

void Buffer::write(const void *src, size_t bytes) {
    RF_INTERNAL_ASSERT(bytes <= bytes_) << "Buffer::write of " << bytes << " bytes into " << bytes_;
    if (bytes == 0) return;
    // From pageable memory: returns once `src` has been staged, so the caller may reuse it at once;
    // the copy is ordered before later default-stream work.
    if (int rc = ensure_current().MemcpyHtoD(ptr_, src, bytes); rc != 0) cu_fail("cuMemcpyHtoD", rc);
}

void Buffer::read(void *dst, size_t bytes) const {
    RF_INTERNAL_ASSERT(bytes <= bytes_) << "Buffer::read of " << bytes << " bytes from " << bytes_;
    if (bytes == 0) return;
    // To pageable memory: returns once the copy is complete, after earlier default-stream work.
    if (int rc = ensure_current().MemcpyDtoH(dst, ptr_, bytes); rc != 0) cu_fail("cuMemcpyDtoH", rc);
}

void Buffer::zero() {
    if (bytes_ == 0) return;
    if (int rc = ensure_current().MemsetD8(ptr_, 0, bytes_); rc != 0) cu_fail("cuMemsetD8", rc);
}

Module::Module(const CompiledModule &m) : arch_(m.arch) {
    const DriverApi &a = ensure_current();
    RF_INTERNAL_ASSERT(!m.cubin.empty()) << "Module from an empty cubin";
    if (int rc = a.ModuleLoadData(&module_, m.cubin.data()); rc != 0)
        cu_fail("cuModuleLoadData (cubin for " + m.arch + ", device is " + device_arch() + ")", rc);
}

Module::~Module() {
    if (!module_) return;
    try {
        ensure_current().ModuleUnload(module_);
    } catch (...) {
    }
}

void *Module::function(const std::string &name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = functions_.find(name);
    if (it != functions_.end()) return it->second.first;
    void *f = nullptr;
    if (int rc = driver().api.ModuleGetFunction(&f, module_, name.c_str()); rc != 0)
        cu_fail("cuModuleGetFunction('" + name + "')", rc);
    functions_[name] = {f, kStaticSmemLimit};
    return f;
}

void Module::launch(const std::string &name, unsigned grid, unsigned block, size_t dynamic_smem,
                    const std::vector<KernelArg> &args) {
    const DriverApi &a = ensure_current();
    void *f = function(name);
    std::string what = "launch of kernel '" + name + "' (grid " + std::to_string(grid) + ", block " +
                       std::to_string(block) + ", " + std::to_string(dynamic_smem) + " bytes dynamic smem)";
    if (dynamic_smem > UINT_MAX) internal_error(what + ": dynamic shared memory too large", __FILE__, __LINE__);
    if (dynamic_smem > kStaticSmemLimit) {
        std::lock_guard<std::mutex> lock(mu_);
        size_t &limit = functions_[name].second;
        if (dynamic_smem > limit) {
            // The opt-in limit is per function and persists, so it is raised only when it grows.
            if (int rc = a.FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            static_cast<int>(dynamic_smem));
                rc != 0)
                cu_fail(what + ": cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES; device opt-in limit " +
                            std::to_string(device().smem_per_block_optin) + ")",
                        rc);
            limit = dynamic_smem;
        }
    }
    // Each entry points at the argument's value; the driver copies the values during the call and
    // takes their sizes from the kernel image.
    std::vector<void *> params;
    for (const KernelArg &arg : args) params.push_back(const_cast<void *>(static_cast<const void *>(&arg.value)));
    int rc = a.LaunchKernel(f, grid, 1, 1, block, 1, 1, static_cast<unsigned>(dynamic_smem),
                            reinterpret_cast<void *>(stream_), params.empty() ? nullptr : params.data(), nullptr);
    if (rc != 0) cu_fail(what, rc);
}

void synchronize() {
    if (int rc = ensure_current().CtxSynchronize(); rc != 0)
        internal_error("cuCtxSynchronize reported an asynchronous CUDA error: " + error_name(&driver().api, rc) +
                           " (a kernel faulted; the CUDA context is now unusable in this process)",
                       __FILE__, __LINE__);
}

Event::Event() {
    if (int rc = ensure_current().EventCreate(&event_, 0 /* CU_EVENT_DEFAULT: timing enabled */); rc != 0)
        cu_fail("cuEventCreate", rc);
}

Event::~Event() {
    if (!event_) return;
    try {
        ensure_current().EventDestroy(event_);
    } catch (...) {
    }
}

void Event::record(uint64_t stream) {
    if (int rc = ensure_current().EventRecord(event_, reinterpret_cast<void *>(stream)); rc != 0)
        cu_fail("cuEventRecord", rc);
}

float Event::elapsed_ms(const Event &start, const Event &end) {
    const DriverApi &a = ensure_current();
    // Without the wait, an unfinished `end` would give CUDA_ERROR_NOT_READY.
    if (int rc = a.EventSynchronize(end.event_); rc != 0) cu_fail("cuEventSynchronize", rc);
    float ms = 0;
    if (int rc = a.EventElapsedTime(&ms, start.event_, end.event_); rc != 0) cu_fail("cuEventElapsedTime", rc);
    return ms;
}

void flush_l2() {
    static std::mutex mu;
    static Buffer *scratch = nullptr;  // never freed: no device call during static destruction
    static unsigned char value = 0;
    std::lock_guard<std::mutex> lock(mu);
    if (!scratch) scratch = new Buffer(size_t{256} << 20);  // several times any L2 (H200: 50 MiB)
    // A different byte each time, so no layer can skip the writes as redundant.
    if (int rc = ensure_current().MemsetD8(scratch->ptr(), ++value, scratch->bytes()); rc != 0)
        cu_fail("cuMemsetD8 (L2 flush)", rc);
}

}  // namespace rf::cuda
