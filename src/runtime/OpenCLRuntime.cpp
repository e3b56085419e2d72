/** \file OpenCLRuntime.cpp
 * The OpenCL runtime of OpenCLRuntime.h: the few OpenCL 1.2 entry points it needs, declared here and bound with dlsym.
 */
#include "runtime/OpenCLRuntime.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/RuntimeSettings.h"
#include "runtime/Sha256.h"
#include "support/Error.h"

namespace rf::ocl {
namespace {

// The OpenCL 1.2 C API subset, declared here rather than taken from <CL/cl.h>: redfuse must build where the
// headers are absent, and never links -lOpenCL so it also runs where the library is absent.
using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bitfield = cl_ulong;
using cl_bool = cl_uint;
using cl_info = cl_uint;  // every *_info enum of the API is a cl_uint
using cl_context_properties = intptr_t;
using cl_platform_id = struct OpaquePlatform *;  // the handles: distinct opaque pointer types
using cl_device_id = struct OpaqueDevice *;
using cl_context = struct OpaqueContext *;
using cl_command_queue = struct OpaqueQueue *;
using cl_mem = struct OpaqueMem *;
using cl_program = struct OpaqueProgram *;
using cl_kernel = struct OpaqueKernel *;
using cl_event = struct OpaqueEvent *;

// -1001 is what the ICD loader returns when no driver is installed.
constexpr cl_int CL_SUCCESS = 0, CL_PLATFORM_NOT_FOUND_KHR = -1001;
constexpr cl_bool CL_TRUE = 1;
constexpr cl_bitfield CL_DEVICE_TYPE_GPU = 1 << 2, CL_DEVICE_TYPE_ALL = 0xFFFFFFFF, CL_QUEUE_PROFILING_ENABLE = 1 << 1,
                      CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_context_properties CL_CONTEXT_PLATFORM = 0x1084;
constexpr cl_info CL_PLATFORM_NAME = 0x0902, CL_DEVICE_TYPE = 0x1000, CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002,
                  CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004, CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1010,
                  CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F, CL_DEVICE_LOCAL_MEM_SIZE = 0x1023, CL_DEVICE_NAME = 0x102B,
                  CL_DEVICE_VERSION = 0x102F, CL_DEVICE_EXTENSIONS = 0x1030, CL_DEVICE_OPENCL_C_VERSION = 0x103D;
constexpr cl_info CL_PROGRAM_BUILD_LOG = 0x1183, CL_KERNEL_NUM_ARGS = 0x1191, CL_KERNEL_ARG_ADDRESS_QUALIFIER = 0x1196,
                  CL_KERNEL_ARG_TYPE_NAME = 0x1198, CL_KERNEL_WORK_GROUP_SIZE = 0x11B0,
                  CL_PROFILING_COMMAND_START = 0x1282, CL_PROFILING_COMMAND_END = 0x1283;
constexpr cl_uint CL_KERNEL_ARG_ADDRESS_LOCAL = 0x119C, CL_KERNEL_ARG_ADDRESS_PRIVATE = 0x119E;

// X(name, signature) for every function bound with dlsym.
#define RF_OCL_FUNCTIONS(X)                                                                                     \
    X(clGetPlatformIDs, cl_int (*)(cl_uint, cl_platform_id *, cl_uint *))                                       \
    X(clGetPlatformInfo, cl_int (*)(cl_platform_id, cl_info, size_t, void *, size_t *))                         \
    X(clGetDeviceIDs, cl_int (*)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id *, cl_uint *))              \
    X(clGetDeviceInfo, cl_int (*)(cl_device_id, cl_info, size_t, void *, size_t *))                             \
    X(clCreateContext, cl_context (*)(const cl_context_properties *, cl_uint, const cl_device_id *,             \
                                      void (*)(const char *, const void *, size_t, void *), void *, cl_int *))  \
    X(clCreateCommandQueue, cl_command_queue (*)(cl_context, cl_device_id, cl_bitfield, cl_int *))              \
    X(clCreateProgramWithSource, cl_program (*)(cl_context, cl_uint, const char **, const size_t *, cl_int *))  \
    X(clBuildProgram, cl_int (*)(cl_program, cl_uint, const cl_device_id *, const char *,                       \
                                 void (*)(cl_program, void *), void *))                                         \
    X(clGetProgramBuildInfo, cl_int (*)(cl_program, cl_device_id, cl_info, size_t, void *, size_t *))           \
    X(clCreateKernel, cl_kernel (*)(cl_program, const char *, cl_int *))                                        \
    X(clGetKernelInfo, cl_int (*)(cl_kernel, cl_info, size_t, void *, size_t *))                                \
    X(clGetKernelArgInfo, cl_int (*)(cl_kernel, cl_uint, cl_info, size_t, void *, size_t *))                    \
    X(clGetKernelWorkGroupInfo, cl_int (*)(cl_kernel, cl_device_id, cl_info, size_t, void *, size_t *))         \
    X(clSetKernelArg, cl_int (*)(cl_kernel, cl_uint, size_t, const void *))                                     \
    X(clEnqueueNDRangeKernel, cl_int (*)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,  \
                                         const size_t *, cl_uint, const cl_event *, cl_event *))                \
    X(clCreateBuffer, cl_mem (*)(cl_context, cl_bitfield, size_t, void *, cl_int *))                            \
    X(clEnqueueWriteBuffer, cl_int (*)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *,        \
                                       cl_uint, const cl_event *, cl_event *))                                  \
    X(clEnqueueReadBuffer, cl_int (*)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint,       \
                                      const cl_event *, cl_event *))                                            \
    X(clFinish, cl_int (*)(cl_command_queue))                                                                   \
    X(clGetEventProfilingInfo, cl_int (*)(cl_event, cl_info, size_t, void *, size_t *))                         \
    X(clReleaseEvent, cl_int (*)(cl_event))                                                                     \
    X(clReleaseKernel, cl_int (*)(cl_kernel))                                                                   \
    X(clReleaseProgram, cl_int (*)(cl_program))                                                                 \
    X(clReleaseMemObject, cl_int (*)(cl_mem))

struct Api {
#define RF_OCL_MEMBER(name, type) \
    using name##_t = type;        \
    name##_t name = nullptr;
    RF_OCL_FUNCTIONS(RF_OCL_MEMBER)
#undef RF_OCL_MEMBER
};

/** dlopens `path` and binds every function into `api`; "" or why not. On success `handle` stays open. */
std::string bind(const std::string &path, Api &api, void *&handle) {
    dlerror();
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *err = dlerror();
        std::string why = err ? err : "dlopen failed";
        if (why.find("No such file") != std::string::npos) return path + " not found";
        return "cannot load " + path + ": " + why;
    }
#define RF_OCL_BIND(name, type)                                                     \
    if (!(api.name = reinterpret_cast<Api::name##_t>(dlsym(handle, #name)))) {      \
        dlclose(handle);                                                            \
        handle = nullptr;                                                           \
        return path + " lacks " #name " (not an OpenCL 1.2 library)";               \
    }
    RF_OCL_FUNCTIONS(RF_OCL_BIND)
#undef RF_OCL_BIND
    return "";
}

/** The process-wide OpenCL state. Leaked on purpose: releasing the context or dlclosing the library from a
 *  static destructor may run after the driver's own teardown at exit; the OS reclaims everything anyway. */
struct State {
    Api api;
    std::string reason;  // "" when usable
    DeviceInfo info;
    cl_device_id device = nullptr;
    cl_context context = nullptr;
    cl_command_queue queue = nullptr;
    std::mutex events_mu;
    std::vector<cl_event> events;  // profiling events of launches not yet counted by take_device_ms
    double folded_ms = 0;          // device time of events already released (see record_event)
};

/** A string query: `get` is clGetDeviceInfo or clGetPlatformInfo. */
template <typename Get, typename Handle>
std::string info_string(Get get, Handle h, cl_info what) {
    size_t n = 0;
    if (get(h, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
    std::string s(n, '\0');
    if (get(h, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
    return s;
}

template <typename T>
T info_value(const Api &api, cl_device_id dev, cl_info what) {
    T v{};
    api.clGetDeviceInfo(dev, what, sizeof v, &v, nullptr);
    return v;
}

/** Loads the library, picks the device, creates the context and queue; "" or why not. */
std::string init(State &s) {
    void *handle = nullptr;
    const std::string forced = runtime_settings().opencl_library;
    if (!forced.empty()) {
        if (std::string why = bind(forced.c_str(), s.api, handle); !why.empty()) return why;
    } else if (std::string why = bind("libOpenCL.so.1", s.api, handle); !why.empty()) {
        // The unversioned name exists only with the -dev package; try it before giving the first reason.
        if (!bind("libOpenCL.so", s.api, handle).empty()) return why;
    }
    const Api &api = s.api;
    cl_uint np = 0;
    cl_int err = api.clGetPlatformIDs(0, nullptr, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0)) return "no OpenCL platform";
    if (err != CL_SUCCESS) return "clGetPlatformIDs failed: " + error_name(err);
    std::vector<cl_platform_id> platforms(np);
    if ((err = api.clGetPlatformIDs(np, platforms.data(), nullptr)) != CL_SUCCESS)
        return "clGetPlatformIDs failed: " + error_name(err);

    struct Candidate { cl_platform_id platform; cl_device_id device; std::string name; bool gpu; };
    std::vector<Candidate> all;
    for (cl_platform_id p : platforms) {
        cl_uint nd = 0;
        if (api.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
        std::vector<cl_device_id> devs(nd);
        if (api.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr) != CL_SUCCESS) continue;
        for (cl_device_id d : devs)
            all.push_back({p, d, info_string(api.clGetDeviceInfo, d, CL_DEVICE_NAME),
                           (info_value<cl_bitfield>(api, d, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU) != 0});
    }
    if (all.empty()) return "no OpenCL device";
    const Candidate *pick = &all.front();
    if (const std::string want = runtime_settings().opencl_device; !want.empty()) {
        auto it = std::find_if(all.begin(), all.end(),
                               [&](const Candidate &c) { return c.name.find(want) != std::string::npos; });
        if (it == all.end()) {
            std::string names;
            for (const Candidate &c : all) names += (names.empty() ? "" : ", ") + ("'" + c.name + "'");
            return "no OpenCL device matching REDFUSE_OPENCL_DEVICE='" + want + "' (devices: " +
                   names + ")";
        }
        pick = &*it;
    } else if (auto it = std::find_if(all.begin(), all.end(), [](const Candidate &c) { return c.gpu; });
               it != all.end()) {
        pick = &*it;
    }

    cl_device_id d = pick->device;
    DeviceInfo &info = s.info;
    info.platform = info_string(api.clGetPlatformInfo, pick->platform, CL_PLATFORM_NAME);
    info.name = pick->name;
    info.gpu = pick->gpu;
    info.version = info_string(api.clGetDeviceInfo, d, CL_DEVICE_VERSION);
    info.c_version = info_string(api.clGetDeviceInfo, d, CL_DEVICE_OPENCL_C_VERSION);
    info.max_work_group_size = info_value<size_t>(api, d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    info.local_mem_bytes = info_value<cl_ulong>(api, d, CL_DEVICE_LOCAL_MEM_SIZE);
    info.global_mem_bytes = info_value<cl_ulong>(api, d, CL_DEVICE_GLOBAL_MEM_SIZE);
    info.max_alloc_bytes = info_value<cl_ulong>(api, d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    info.compute_units = static_cast<int>(info_value<cl_uint>(api, d, CL_DEVICE_MAX_COMPUTE_UNITS));
    // Extensions are space-separated; pad so a name that merely starts with cl_khr_fp64 does not count.
    const std::string extensions = " " + info_string(api.clGetDeviceInfo, d, CL_DEVICE_EXTENSIONS) + " ";
    info.fp64 = extensions.find(" cl_khr_fp64 ") != std::string::npos;

    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                           reinterpret_cast<cl_context_properties>(pick->platform), 0};
    s.context = api.clCreateContext(props, 1, &d, nullptr, nullptr, &err);
    if (err != CL_SUCCESS) return "clCreateContext failed on '" + info.name + "': " + error_name(err);
    s.queue = api.clCreateCommandQueue(s.context, d, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) return "clCreateCommandQueue failed on '" + info.name + "': " + error_name(err);
    s.device = d;
    return "";
}

State &state() {
    // A function-local static: C++ guarantees one thread initializes it while the others wait.
    static State *s = [] {
        auto *st = new State;
        try {
            st->reason = init(*st);
        } catch (const std::exception &e) {
            st->reason = std::string("OpenCL initialization failed: ") + e.what();
        }
        return st;
    }();
    return *s;
}

/** The state, or the UserError device() documents. */
State &ready() {
    State &s = state();
    if (!s.reason.empty()) throw UserError({}, "no OpenCL platform/device: " + s.reason);
    return s;
}

[[noreturn]] void fail(const std::string &what, cl_int err) {
    internal_error(what + " failed: " + error_name(err), __FILE__, __LINE__);
}

/** Sums END - START of `events` in ms and releases them; the caller has waited for them. */
double drain(State &s, std::vector<cl_event> &events) {
    double ms = 0;
    cl_int first_err = CL_SUCCESS;
    for (cl_event e : events) {
        cl_ulong t0 = 0, t1 = 0;
        cl_int err = s.api.clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr);
        if (!err) err = s.api.clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr);
        if (err == CL_SUCCESS) ms += static_cast<double>(t1 - t0) * 1e-6;
        else if (first_err == CL_SUCCESS) first_err = err;
        s.api.clReleaseEvent(e);
    }
    events.clear();
    if (first_err != CL_SUCCESS) fail("clGetEventProfilingInfo", first_err);  // a benchmark must not read 0 ms
    return ms;
}

void record_event(State &s, cl_event e) {
    std::lock_guard<std::mutex> lock(s.events_mu);
    s.events.push_back(e);
    // Bound the held events when nobody calls take_device_ms (a loop of launches would otherwise grow
    // without end); folding costs one wait per 4096 launches.
    if (s.events.size() >= 4096) {
        s.api.clFinish(s.queue);
        s.folded_ms += drain(s, s.events);
    }
}

std::string first_lines(const std::string &text, size_t max_lines) {
    std::istringstream in(text);
    std::string line, out;
    size_t total = 0;
    for (; std::getline(in, line); total++)
        if (total < max_lines) out += "  " + line + "\n";
    if (total > max_lines) out += "  ... (" + std::to_string(total - max_lines) + " more lines)\n";
    return out;
}

std::string temp_dir() {
    std::error_code ec;
    std::filesystem::path p = std::filesystem::temp_directory_path(ec);
    return ec ? "/tmp" : p.string();
}

bool write_file(const std::string &path, const std::string &text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    return static_cast<bool>(out);
}

}  // namespace

std::string unavailable_reason() {
    try {
        return state().reason;
    } catch (...) {  // only allocation can throw here; the contract is "never throws"
        return "OpenCL initialization failed";
    }
}

std::string probe_library(const std::string &path) {
    try {
        Api api;
        void *handle = nullptr;
        std::string why = bind(path, api, handle);
        if (handle) dlclose(handle);
        return why;
    } catch (...) {
        return "cannot probe " + path;
    }
}

std::string error_name(int32_t code) {
    static const char *const kNames[] = {  // index = -code, for 0..-72
        "CL_SUCCESS", "CL_DEVICE_NOT_FOUND", "CL_DEVICE_NOT_AVAILABLE", "CL_COMPILER_NOT_AVAILABLE",
        "CL_MEM_OBJECT_ALLOCATION_FAILURE", "CL_OUT_OF_RESOURCES", "CL_OUT_OF_HOST_MEMORY",
        "CL_PROFILING_INFO_NOT_AVAILABLE", "CL_MEM_COPY_OVERLAP", "CL_IMAGE_FORMAT_MISMATCH",
        "CL_IMAGE_FORMAT_NOT_SUPPORTED", "CL_BUILD_PROGRAM_FAILURE", "CL_MAP_FAILURE",
        "CL_MISALIGNED_SUB_BUFFER_OFFSET", "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
        "CL_COMPILE_PROGRAM_FAILURE", "CL_LINKER_NOT_AVAILABLE", "CL_LINK_PROGRAM_FAILURE",
        "CL_DEVICE_PARTITION_FAILED", "CL_KERNEL_ARG_INFO_NOT_AVAILABLE", nullptr, nullptr, nullptr, nullptr,
        nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, "CL_INVALID_VALUE", "CL_INVALID_DEVICE_TYPE",
        "CL_INVALID_PLATFORM", "CL_INVALID_DEVICE", "CL_INVALID_CONTEXT", "CL_INVALID_QUEUE_PROPERTIES",
        "CL_INVALID_COMMAND_QUEUE", "CL_INVALID_HOST_PTR", "CL_INVALID_MEM_OBJECT",
        "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR", "CL_INVALID_IMAGE_SIZE", "CL_INVALID_SAMPLER", "CL_INVALID_BINARY",
        "CL_INVALID_BUILD_OPTIONS", "CL_INVALID_PROGRAM", "CL_INVALID_PROGRAM_EXECUTABLE",
        "CL_INVALID_KERNEL_NAME", "CL_INVALID_KERNEL_DEFINITION", "CL_INVALID_KERNEL", "CL_INVALID_ARG_INDEX",
        "CL_INVALID_ARG_VALUE", "CL_INVALID_ARG_SIZE", "CL_INVALID_KERNEL_ARGS", "CL_INVALID_WORK_DIMENSION",
        "CL_INVALID_WORK_GROUP_SIZE", "CL_INVALID_WORK_ITEM_SIZE", "CL_INVALID_GLOBAL_OFFSET",
        "CL_INVALID_EVENT_WAIT_LIST", "CL_INVALID_EVENT", "CL_INVALID_OPERATION", "CL_INVALID_GL_OBJECT",
        "CL_INVALID_BUFFER_SIZE", "CL_INVALID_MIP_LEVEL", "CL_INVALID_GLOBAL_WORK_SIZE", "CL_INVALID_PROPERTY",
        "CL_INVALID_IMAGE_DESCRIPTOR", "CL_INVALID_COMPILER_OPTIONS", "CL_INVALID_LINKER_OPTIONS",
        "CL_INVALID_DEVICE_PARTITION_COUNT", "CL_INVALID_PIPE_SIZE", "CL_INVALID_DEVICE_QUEUE",
        "CL_INVALID_SPEC_ID", "CL_MAX_SIZE_RESTRICTION_EXCEEDED"};
    if (code <= 0 && -static_cast<int64_t>(code) < static_cast<int64_t>(std::size(kNames)) && kNames[-code])
        return kNames[-code];
    switch (code) {  // the extension codes a loader or driver may return
    case -1000: return "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR";
    case CL_PLATFORM_NOT_FOUND_KHR: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL_UNKNOWN_ERROR(" + std::to_string(code) + ")";
    }
}

const DeviceInfo &device() { return ready().info; }

void finish() {
    State &s = ready();
    if (cl_int err = s.api.clFinish(s.queue); err != CL_SUCCESS) fail("clFinish", err);
}

double take_device_ms() {
    State &s = ready();
    std::lock_guard<std::mutex> lock(s.events_mu);
    if (cl_int err = s.api.clFinish(s.queue); err != CL_SUCCESS) fail("clFinish", err);
    double ms = s.folded_ms + drain(s, s.events);
    s.folded_ms = 0;
    return ms;
}

// --- Buffer ---

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
    State &s = ready();
    cl_int err = CL_SUCCESS;
    mem_ = s.api.clCreateBuffer(s.context, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &err);
    if (err != CL_SUCCESS)
        throw UserError({}, "cannot allocate an OpenCL buffer of " + std::to_string(bytes) + " bytes on '" +
                                s.info.name + "': " + error_name(err) + " (largest buffer " +
                                std::to_string(s.info.max_alloc_bytes) + " bytes, global memory " +
                                std::to_string(s.info.global_mem_bytes) + " bytes)");
}

Buffer::~Buffer() {
    if (mem_) state().api.clReleaseMemObject(static_cast<cl_mem>(mem_));
}

Buffer::Buffer(Buffer &&other) noexcept : mem_(other.mem_), bytes_(other.bytes_) {
    other.mem_ = nullptr;
    other.bytes_ = 0;
}

Buffer &Buffer::operator=(Buffer &&other) noexcept {
    std::swap(mem_, other.mem_);  // other's destructor releases what this held
    std::swap(bytes_, other.bytes_);
    return *this;
}

void Buffer::write(const void *src, size_t bytes) {
    RF_INTERNAL_ASSERT(mem_ && bytes <= bytes_) << "Buffer::write of " << bytes << " bytes into " << bytes_;
    if (bytes == 0) return;  // OpenCL rejects empty transfers with CL_INVALID_VALUE
    State &s = state();
    auto mem = static_cast<cl_mem>(mem_);
    if (cl_int err = s.api.clEnqueueWriteBuffer(s.queue, mem, CL_TRUE, 0, bytes, src, 0, nullptr, nullptr))
        fail("clEnqueueWriteBuffer (" + std::to_string(bytes) + " bytes)", err);
}

void Buffer::read(void *dst, size_t bytes) const {
    RF_INTERNAL_ASSERT(mem_ && bytes <= bytes_) << "Buffer::read of " << bytes << " bytes from " << bytes_;
    if (bytes == 0) return;
    State &s = state();
    auto mem = static_cast<cl_mem>(mem_);
    if (cl_int err = s.api.clEnqueueReadBuffer(s.queue, mem, CL_TRUE, 0, bytes, dst, 0, nullptr, nullptr))
        fail("clEnqueueReadBuffer (" + std::to_string(bytes) + " bytes)", err);
}

// --- KernelArg ---

template <typename T>
static KernelArg by_value(KernelArg::Kind kind, T v) {
    static_assert(sizeof(T) <= sizeof(KernelArg::value));
    KernelArg a;
    a.kind = kind;
    a.size = sizeof(T);
    std::memcpy(a.value, &v, sizeof(T));
    return a;
}

// clSetKernelArg takes a pointer to the cl_mem for a buffer.
KernelArg KernelArg::buffer(const Buffer &b) { return by_value(Kind::Buffer, b.handle()); }
KernelArg KernelArg::i32(int32_t v) { return by_value(Kind::I32, v); }
KernelArg KernelArg::i64(int64_t v) { return by_value(Kind::I64, v); }
KernelArg KernelArg::f32(float v) { return by_value(Kind::F32, v); }
KernelArg KernelArg::f64(double v) { return by_value(Kind::F64, v); }
KernelArg KernelArg::local(size_t bytes) {
    KernelArg a;
    a.kind = Kind::Local;
    a.size = bytes;
    return a;
}

// --- Program ---

Program::Program(const std::string &source, const std::string &user_options) {
    State &s = ready();
    // PoCL reports parameter types (which launch() checks) only when asked; other drivers accept the flag too.
    const std::string options = user_options + " -cl-kernel-arg-info";
    const char *text = source.c_str();
    size_t len = source.size();
    cl_int err = CL_SUCCESS;
    cl_program p = s.api.clCreateProgramWithSource(s.context, 1, &text, &len, &err);
    if (err != CL_SUCCESS) fail("clCreateProgramWithSource", err);
    auto t0 = std::chrono::steady_clock::now();
    err = s.api.clBuildProgram(p, 1, &s.device, options.c_str(), nullptr, nullptr);
    build_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (err == CL_SUCCESS) {
        program_ = p;
        return;
    }
    auto get_build_info = [&](cl_program prog, cl_info what, size_t n, void *v, size_t *ret) {
        return s.api.clGetProgramBuildInfo(prog, s.device, what, n, v, ret);
    };
    const std::string log = info_string(get_build_info, p, CL_PROGRAM_BUILD_LOG);
    s.api.clReleaseProgram(p);
    // Generated code must build, so this is redfuse's bug: keep the source where the log's line numbers apply.
    std::string base = temp_dir() + "/redfuse-ocl-" + sha256_hex(options + '\n' + source).substr(0, 16);
    bool saved = write_file(base + ".cl", source) &&
                 write_file(base + ".log", "options: " + options + "\n" + log);
    std::ostringstream msg;
    msg << "OpenCL program build failed: " << error_name(err) << " on '" << s.info.name << "' with options '"
        << options << "'; " << (saved ? "source saved to " + base + ".cl, full log " + base + ".log"
                                      : "could not save the source to " + base + ".cl")
        << "\nbuild log:\n"
        << first_lines(log, 40);
    internal_error(msg.str(), __FILE__, __LINE__);
}

Program::~Program() {
    State &s = state();
    for (auto &[name, k] : kernels_) s.api.clReleaseKernel(static_cast<cl_kernel>(k.handle));
    if (program_) s.api.clReleaseProgram(static_cast<cl_program>(program_));
}

const Program::Kernel &Program::kernel(const std::string &name) {
    if (auto it = kernels_.find(name); it != kernels_.end()) return it->second;
    State &s = state();
    cl_int err = CL_SUCCESS;
    cl_kernel k = s.api.clCreateKernel(static_cast<cl_program>(program_), name.c_str(), &err);
    if (err != CL_SUCCESS) fail("OpenCL kernel '" + name + "': clCreateKernel", err);
    cl_uint num_args = 0;
    if ((err = s.api.clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof num_args, &num_args, nullptr)) != CL_SUCCESS) {
        s.api.clReleaseKernel(k);
        fail("OpenCL kernel '" + name + "': clGetKernelInfo(CL_KERNEL_NUM_ARGS)", err);
    }
    // What each parameter needs, from the arg info OpenCL 1.2 may give (drivers can demand -cl-kernel-arg-info).
    using Kind = KernelArg::Kind;
    std::vector<int8_t> kinds;
    for (cl_uint i = 0; i < num_args; i++) {
        cl_uint q = 0;
        char type[64] = {};
        if (s.api.clGetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof q, &q, nullptr) != CL_SUCCESS ||
            s.api.clGetKernelArgInfo(k, i, CL_KERNEL_ARG_TYPE_NAME, sizeof type - 1, type, nullptr) != CL_SUCCESS) {
            kinds.clear();
            break;
        }
        const std::string t = type;
        const Kind kind = q == CL_KERNEL_ARG_ADDRESS_LOCAL       ? Kind::Local
                          : q != CL_KERNEL_ARG_ADDRESS_PRIVATE   ? Kind::Buffer  // __global or __constant
                          : t == "int" || t == "uint"            ? Kind::I32
                          : t == "long" || t == "ulong"          ? Kind::I64
                          : t == "float"                         ? Kind::F32
                          : t == "double"                        ? Kind::F64
                                                                 : Kind(-1);  // a typedef or vector: unchecked
        kinds.push_back(static_cast<int8_t>(kind));
    }
    return kernels_.emplace(name, Kernel{k, num_args, std::move(kinds)}).first->second;
}

void Program::launch(const std::string &name, size_t groups, size_t local, const std::vector<KernelArg> &args) {
    State &s = state();
    std::lock_guard<std::mutex> lock(mu_);
    const Kernel &k = kernel(name);
    auto handle = static_cast<cl_kernel>(k.handle);
    // The kernel object keeps arguments from earlier launches, so a short list would silently reuse stale ones.
    RF_INTERNAL_ASSERT(args.size() == k.num_args)
        << "OpenCL kernel '" << name << "' takes " << k.num_args << " arguments, got " << args.size();
    static const char *const kKind[] = {"buffer", "i32", "i64", "f32", "f64", "local"};
    for (size_t i = 0; i < args.size(); i++) {
        const KernelArg &a = args[i];
        const auto kind = static_cast<int8_t>(a.kind);
        RF_INTERNAL_ASSERT(k.kinds.empty() || k.kinds[i] < 0 || k.kinds[i] == kind)
            << "OpenCL kernel '" << name << "' argument " << i << " must be " << kKind[k.kinds[i]] << ", got "
            << kKind[kind];
        const bool local = a.kind == KernelArg::Kind::Local;
        cl_int err = s.api.clSetKernelArg(handle, static_cast<cl_uint>(i), a.size, local ? nullptr : a.value);
        if (err != CL_SUCCESS)
            fail("OpenCL kernel '" + name + "': clSetKernelArg(" + std::to_string(i) + ", " + kKind[kind] + ", " +
                     std::to_string(a.size) + " bytes)",
                 err);
    }
    if (groups == 0) return;  // an empty NDRange is an error in OpenCL 1.2, but nothing to do here
    RF_INTERNAL_ASSERT(local == 0 || groups <= SIZE_MAX / local) << "NDRange overflow: " << groups << " x " << local;
    const size_t global = groups * local;
    cl_event ev = nullptr;
    cl_int err = s.api.clEnqueueNDRangeKernel(s.queue, handle, 1, nullptr, &global, &local, 0, nullptr, &ev);
    if (err != CL_SUCCESS)
        fail("OpenCL kernel '" + name + "': clEnqueueNDRangeKernel(groups " + std::to_string(groups) + ", local " +
                 std::to_string(local) + ")",
             err);
    record_event(s, ev);
}

size_t Program::max_local(const std::string &name) {
    State &s = state();
    std::lock_guard<std::mutex> lock(mu_);
    size_t v = 0;
    cl_int err = s.api.clGetKernelWorkGroupInfo(static_cast<cl_kernel>(kernel(name).handle), s.device,
                                                CL_KERNEL_WORK_GROUP_SIZE, sizeof v, &v, nullptr);
    if (err != CL_SUCCESS) fail("OpenCL kernel '" + name + "': clGetKernelWorkGroupInfo", err);
    return v;
}

}  // namespace rf::ocl
