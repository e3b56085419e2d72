/** \file cuda_runtime_test.cpp
 * The CUDA runtime layer: NVRTC cubins and ptxas reports, the cubin cache, driver absence and the
 * stub library, and (on a machine with a GPU) buffers, launches, events and inline-PTX kernels.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <numeric>
#include <vector>

#include "TempDir.h"
#include "runtime/CudaRuntime.h"
#include "support/Error.h"

using namespace rf;
namespace fs = std::filesystem;

namespace {

const char *kStub = "/usr/local/cuda/lib64/stubs/libcuda.so";

// Every kernel runs on sm_80 and later; the layouts are those of the PTX ISA fragment figures.
const char *kSource = R"(
#include <cuda_bf16.h>

// (a) C[16x8] = A[16x16] * B[16x8]: A row-major, B stored n-major (sB[n][k], i.e. ".col"), C row-major.
extern "C" __global__ void mma_bf16(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C) {
    __shared__ __align__(16) __nv_bfloat16 sA[16 * 16];
    __shared__ __align__(16) __nv_bfloat16 sB[8 * 16];
    const int t = threadIdx.x;
    for (int i = t; i < 16 * 16; i += 32) sA[i] = A[i];
    for (int i = t; i < 8 * 16; i += 32) sB[i] = B[i];
    __syncthreads();
    // x4: lanes 0-7 address rows 0-7 / cols 0-7 (a0), 8-15 rows 8-15 (a1), 16-23 cols 8-15 (a2), 24-31 (a3).
    unsigned pa = (unsigned)__cvta_generic_to_shared(&sA[(t % 16) * 16 + (t / 16) * 8]);
    // x2: lanes 0-7 address n = 0-7 at k = 0 (b0), lanes 8-15 at k = 8 (b1).
    unsigned pb = (unsigned)__cvta_generic_to_shared(&sB[(t % 8) * 16 + ((t / 8) % 2) * 8]);
    unsigned a0, a1, a2, a3, b0, b1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(pa));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(pb));
    float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    const int row = t / 4, col = (t % 4) * 2;
    C[row * 8 + col] = c0;
    C[row * 8 + col + 1] = c1;
    C[(row + 8) * 8 + col] = c2;
    C[(row + 8) * 8 + col + 1] = c3;
}

// (b) out[i] = 2 * in[i], staged through shared memory by cp.async (blockDim.x <= 256).
extern "C" __global__ void copy_async(const float4 *in, float4 *out, long long n) {
    __shared__ __align__(16) float4 tile[256];
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned dst = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(in + i) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    if (i < n) {
        float4 v = tile[threadIdx.x];
        out[i] = make_float4(2.f * v.x, 2.f * v.y, 2.f * v.z, 2.f * v.w);
    }
}

// (c) out[blockIdx.x] = the block's share of sum(x) (blockDim.x a multiple of 32).
extern "C" __global__ void block_sum(const float *x, float *out, long long n) {
    __shared__ float warp_sums[32];
    float s = 0.f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        s += x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) out[blockIdx.x] = s;
    }
}

// Scalar arguments of three sizes: out[i] = scale * (i + offset).
extern "C" __global__ void fill(float *out, long long n, float scale, int offset) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scale * (float)(i + offset);
}

// Dynamic shared memory beyond 48 KiB: out[i] = n_floats - 1 - i, read back through shared memory.
extern "C" __global__ void big_smem(float *out, int n_floats) {
    extern __shared__ float dyn[];
    for (int i = threadIdx.x; i < n_floats; i += blockDim.x) dyn[i] = (float)i;
    __syncthreads();
    for (int i = threadIdx.x; i < n_floats; i += blockDim.x) out[i] = dyn[n_floats - 1 - i];
}
)";

const char *kBadPtx = R"(
extern "C" __global__ void bad(float *c) {
    float d = 0.f;
    unsigned a = 0, b = 0;
    asm volatile("mma.sync.aligned.m16n8k99.row.col.f32.bf16.bf16.f32 {%0,%0,%0,%0}, {%1,%1,%1,%1}, {%2,%2}, "
                 "{%0,%0,%0,%0};\n" : "+f"(d) : "r"(a), "r"(b));
    c[0] = d;
}
)";

const std::vector<std::string> kKernels = {"mma_bf16", "copy_async", "block_sum", "fill", "big_smem"};

#define SKIP_WITHOUT_NVRTC()                                                   \
    do {                                                                       \
        if (std::string why = cuda::nvrtc_unavailable_reason(); !why.empty()) { \
            GTEST_SKIP() << why;                                               \
        }                                                                      \
    } while (0)

#define SKIP_WITHOUT_DEVICE()                                                   \
    do {                                                                        \
        if (std::string why = cuda::driver_unavailable_reason(); !why.empty()) { \
            GTEST_SKIP() << why;                                                \
        }                                                                       \
    } while (0)

bool is_elf(const std::vector<char> &b) { return b.size() > 4 && std::memcmp(b.data(), "\x7f" "ELF", 4) == 0; }

/** The path after "saved at " in a compile error (the kept source), "" if none. */
std::string saved_source(const std::string &msg) {
    size_t at = msg.find("saved at ");
    return at == std::string::npos ? "" : msg.substr(at + 9, msg.find('\n', at) - at - 9);
}

uint16_t to_bf16(float f) {  // exact for the small integers used here
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
}

}  // namespace

// ---- ptxas log parsing (no CUDA needed) ------------------------------------------------------------

TEST(CudaPtxasLog, ParsesEntriesAndIgnoresDeviceFunctions) {
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'k1' for 'sm_90a'\n"
        "ptxas info    : Function properties for k1\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 8 registers, used 0 barriers\n"
        "ptxas info    : Compile time = 1.969 ms\n"
        "ptxas info    : Compiling entry function 'k0' for 'sm_80'\n"
        "ptxas info    : Function properties for k0\n"
        "    608 bytes stack frame, 640 bytes spill stores, 688 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 256 bytes cumulative stack size, 2304 bytes smem, "
        "400 bytes cmem[0], 8 bytes cmem[2]\n"
        "ptxas info    : Function properties for _Z6helperf\n"
        "ptxas         .     16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n";
    auto r = cuda::parse_ptxas_log(log);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r["k1"].registers, 8);
    EXPECT_EQ(r["k1"].barriers, 0);
    EXPECT_EQ(r["k1"].shared_bytes, 0);
    const cuda::PtxasReport &k0 = r["k0"];
    EXPECT_EQ(k0.registers, 255);
    EXPECT_EQ(k0.barriers, 1);
    EXPECT_EQ(k0.shared_bytes, 2304);
    EXPECT_EQ(k0.constant_bytes, 408);
    EXPECT_EQ(k0.stack_bytes, 608);
    EXPECT_EQ(k0.spill_stores, 640);
    EXPECT_EQ(k0.spill_loads, 688);
    EXPECT_TRUE(cuda::parse_ptxas_log("").empty());
    EXPECT_TRUE(cuda::parse_ptxas_log("garbage\nUsed registers\n'\n").empty());
}

// ---- NVRTC ---------------------------------------------------------------------------------------

TEST(NvrtcCompile, SupportedArchsIncludeAmpereAndHopper) {
    SKIP_WITHOUT_NVRTC();
    std::vector<int> archs = cuda::supported_archs();
    EXPECT_NE(std::find(archs.begin(), archs.end(), 80), archs.end());
    EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
    EXPECT_GE(cuda::nvrtc_version(), 11010);
}

TEST(NvrtcCompile, InlinePtxKernelsToCubinWithReports) {
    SKIP_WITHOUT_NVRTC();
    test::TempDir cache;
    for (const char *arch : {"sm_80", "sm_90a"}) {
        SCOPED_TRACE(arch);
        cuda::CompiledModule m = cuda::compile(kSource, arch, {}, cache.path());
        std::cout << "[ nvrtc    ] " << arch << ": " << m.compile_ms << " ms, cubin " << m.cubin.size() << " B\n";
        EXPECT_EQ(m.arch, arch);
        EXPECT_FALSE(m.from_cache);
        EXPECT_TRUE(is_elf(m.cubin));
        EXPECT_GT(m.compile_ms, 0);
        EXPECT_NE(m.log.find("ptxas"), std::string::npos) << m.log;
        for (const std::string &k : kKernels) {
            SCOPED_TRACE(k);
            ASSERT_TRUE(m.kernels.count(k)) << m.log;
            const cuda::PtxasReport &r = m.kernels.at(k);
            EXPECT_GT(r.registers, 0);
            EXPECT_EQ(r.spill_stores, 0);
            EXPECT_EQ(r.spill_loads, 0);
        }
        EXPECT_EQ(m.kernels.at("mma_bf16").shared_bytes, (16 * 16 + 8 * 16) * 2);
        EXPECT_EQ(m.kernels.at("copy_async").shared_bytes, 256 * 16);
        EXPECT_GE(m.kernels.at("block_sum").barriers, 1);
    }
}

TEST(NvrtcCompile, InvalidPtxIsAnInternalErrorNamingPtxas) {
    SKIP_WITHOUT_NVRTC();
    test::TempDir cache;
    try {
        cuda::compile(kBadPtx, "sm_90a", {}, cache.path());
        FAIL() << "expected InternalError";
    } catch (const InternalError &e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("ptxas"), std::string::npos) << msg;
        EXPECT_NE(msg.find("m16n8k99"), std::string::npos) << msg;
        std::string path = saved_source(msg);
        ASSERT_FALSE(path.empty()) << msg;
        std::ifstream saved(path);
        std::string text((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
        EXPECT_EQ(text, kBadPtx);
        std::remove(path.c_str());
    }
    // Nothing is cached for a failed compile.
    EXPECT_TRUE(fs::is_empty(cache.path()));
}

TEST(NvrtcCompile, RejectsVirtualArchAndBadOptions) {
    SKIP_WITHOUT_NVRTC();
    test::TempDir cache;
    EXPECT_THROW(cuda::compile(kSource, "compute_90a", {}, cache.path()), UserError);
    try {
        cuda::compile(kSource, "sm_80", {"--no-such-option"}, cache.path());
        FAIL() << "expected InternalError";
    } catch (const InternalError &e) {
        EXPECT_NE(std::string(e.what()).find("--no-such-option"), std::string::npos) << e.what();
        std::remove(saved_source(e.what()).c_str());
    }
}

TEST(NvrtcCompile, HalfBf16Fp8HeadersResolve) {
    SKIP_WITHOUT_NVRTC();
    test::TempDir cache;
    const char *src = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n"
                      "extern \"C\" __global__ void conv(float *o, const __half *h, const __nv_bfloat16 *b,\n"
                      "                                  const __nv_fp8_e4m3 *f) {\n"
                      "    o[0] = __half2float(h[0]) + __bfloat162float(b[0]) + float(f[0]);\n}\n";
    std::cout << "[ nvrtc    ] include dir: '" << cuda::nvrtc_include_dir() << "'\n";
    cuda::CompiledModule m = cuda::compile(src, "sm_90a", {}, cache.path());
    EXPECT_TRUE(m.kernels.count("conv"));
}

TEST(NvrtcCache, SecondCompileIsAHitWithTheSameReport) {
    SKIP_WITHOUT_NVRTC();
    test::TempDir cache;
    cuda::CompiledModule a = cuda::compile(kSource, "sm_90a", {"-DVARIANT=1"}, cache.path());
    cuda::CompiledModule b = cuda::compile(kSource, "sm_90a", {"-DVARIANT=1"}, cache.path());
    std::cout << "[ nvrtc    ] miss " << a.compile_ms << " ms, hit " << b.compile_ms << " ms\n";
    EXPECT_FALSE(a.from_cache);
    EXPECT_TRUE(b.from_cache);
    EXPECT_EQ(a.cubin, b.cubin);
    EXPECT_EQ(a.log, b.log);
    ASSERT_EQ(a.kernels.size(), b.kernels.size());
    for (const auto &[name, r] : a.kernels) {
        const cuda::PtxasReport &s = b.kernels.at(name);
        EXPECT_EQ(r.registers, s.registers) << name;
        EXPECT_EQ(r.shared_bytes, s.shared_bytes) << name;
        EXPECT_EQ(r.spill_stores, s.spill_stores) << name;
    }
    // Other options, another arch: other keys.
    EXPECT_FALSE(cuda::compile(kSource, "sm_90a", {"-DVARIANT=2"}, cache.path()).from_cache);
    EXPECT_FALSE(cuda::compile(kSource, "sm_80", {"-DVARIANT=1"}, cache.path()).from_cache);

    // A corrupted cubin fails its stamp and is rebuilt, never returned.
    for (const auto &e : fs::directory_iterator(cache.path()))
        if (e.path().extension() == ".cubin") std::ofstream(e.path(), std::ios::binary | std::ios::app) << "x";
    cuda::CompiledModule c = cuda::compile(kSource, "sm_90a", {"-DVARIANT=1"}, cache.path());
    EXPECT_FALSE(c.from_cache);
    EXPECT_EQ(c.cubin, a.cubin);
    EXPECT_TRUE(cuda::compile(kSource, "sm_90a", {"-DVARIANT=1"}, cache.path()).from_cache);
    for (const auto &e : fs::directory_iterator(cache.path()))
        EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

// ---- the driver without a GPU ---------------------------------------------------------------------

TEST(CudaDriver, UnavailableDriverIsReportedAndDeviceThrows) {
    std::string why = cuda::driver_unavailable_reason();
    if (why.empty()) GTEST_SKIP() << "a CUDA device is usable here";
    EXPECT_NE(why.find("no CUDA driver/device"), std::string::npos) << why;
    try {
        cuda::device();
        FAIL() << "expected UserError";
    } catch (const UserError &e) {
        EXPECT_EQ(std::string(e.what()), why);
    }
    EXPECT_THROW(cuda::device_arch(), UserError);
    EXPECT_THROW(cuda::Buffer(16), UserError);
    EXPECT_THROW(cuda::synchronize(), UserError);
}

TEST(CudaDriver, ProbeReportsStubAndMissingLibraries) {
    const std::string before = cuda::driver_unavailable_reason();
    std::string missing = cuda::probe_driver("/nonexistent/libcuda.so.1");
    EXPECT_NE(missing.find("no CUDA driver/device: /nonexistent/libcuda.so.1 not found"), std::string::npos)
        << missing;
    if (!fs::exists(kStub)) GTEST_SKIP() << kStub << " is not installed";
    std::string stub = cuda::probe_driver(kStub);
    EXPECT_NE(stub.find("no CUDA driver/device: cuInit failed: CUDA_ERROR_STUB_LIBRARY"), std::string::npos) << stub;
    EXPECT_NE(stub.find("stub library"), std::string::npos) << stub;
    // The probe leaves the process's own driver state alone.
    EXPECT_EQ(cuda::driver_unavailable_reason(), before);
}

// Run by EnvOverrideSelectsTheLibrary in a fresh process, so that REDFUSE_LIBCUDA is read first.
TEST(CudaDriverChild, ReportReason) {
    if (!std::getenv("REDFUSE_CUDA_TEST_CHILD")) GTEST_SKIP() << "only run as a child process";
    std::cout << "REASON<<" << cuda::driver_unavailable_reason() << ">>\n";
    try {
        cuda::device();
        std::cout << "DEVICE-OK\n";
    } catch (const UserError &e) {
        std::cout << "USER-ERROR<<" << e.what() << ">>\n";
    }
}

TEST(CudaDriver, EnvOverrideSelectsTheLibrary) {
    if (!fs::exists(kStub)) GTEST_SKIP() << kStub << " is not installed";
    std::string self = fs::read_symlink("/proc/self/exe").string();
    std::string cmd = "REDFUSE_CUDA_TEST_CHILD=1 REDFUSE_LIBCUDA='" + std::string(kStub) + "' '" + self +
                      "' --gtest_filter=CudaDriverChild.ReportReason 2>&1";
    FILE *p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << out;
    std::string expect = "no CUDA driver/device: cuInit failed: CUDA_ERROR_STUB_LIBRARY";
    EXPECT_NE(out.find("REASON<<" + expect), std::string::npos) << out;
    EXPECT_NE(out.find("USER-ERROR<<" + expect), std::string::npos) << out;
}

// ---- on a GPU ------------------------------------------------------------------------------------

class CudaDevice : public ::testing::Test {
protected:
    void SetUp() override {
        SKIP_WITHOUT_DEVICE();
        SKIP_WITHOUT_NVRTC();
    }
    cuda::Module &module() {
        if (!module_)
            module_ = std::make_unique<cuda::Module>(cuda::compile(kSource, cuda::device_arch(), {}, cache_.path()));
        return *module_;
    }
    test::TempDir cache_;
    std::unique_ptr<cuda::Module> module_;
};

TEST_F(CudaDevice, InfoIsPlausible) {
    const cuda::DeviceInfo &d = cuda::device();
    std::cout << "[ device   ] " << d.name << " cc " << d.cc_major << "." << d.cc_minor << ", " << d.sms << " SMs, "
              << (d.global_mem >> 20) << " MiB, L2 " << (d.l2_bytes >> 20) << " MiB, smem opt-in "
              << d.smem_per_block_optin << ", driver " << d.driver_version << ", arch " << cuda::device_arch() << "\n";
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.cc_major, 7);
    EXPECT_GT(d.sms, 0);
    EXPECT_GT(d.global_mem, 0);
    EXPECT_GT(d.l2_bytes, 0);
    EXPECT_GE(d.smem_per_block_optin, 48 * 1024);
    EXPECT_GE(d.max_threads_per_block, 1024);
    EXPECT_GT(d.regs_per_sm, 0);
    EXPECT_EQ(cuda::device_arch().rfind("sm_", 0), 0u);
    if (d.cc_major == 9 && d.cc_minor == 0) {
        EXPECT_EQ(cuda::device_arch(), "sm_90a");
    }
}

TEST_F(CudaDevice, BufferRoundTripZeroAndMove) {
    const size_t n = (1 << 20) + 3;
    std::vector<uint8_t> host(n), back(n, 0xEE);
    for (size_t i = 0; i < n; i++) host[i] = static_cast<uint8_t>(i * 131 + 7);
    cuda::Buffer b(n);
    EXPECT_EQ(b.bytes(), n);
    EXPECT_NE(b.ptr(), 0u);
    b.write(host.data(), n);
    b.read(back.data(), n);
    EXPECT_EQ(host, back);
    cuda::Buffer moved(std::move(b));
    EXPECT_EQ(b.ptr(), 0u);
    moved.zero();
    moved.read(back.data(), n);
    EXPECT_EQ(std::count(back.begin(), back.end(), 0), static_cast<long>(n));
    cuda::Buffer empty(0);
    EXPECT_EQ(empty.ptr(), 0u);
    EXPECT_THROW(moved.write(host.data(), n + 1), InternalError);
}

TEST_F(CudaDevice, LaunchWritesAKnownPatternAndEventsTimeIt) {
    const int64_t n = 1000003;
    cuda::Buffer out(n * sizeof(float));
    cuda::Module &m = module();  // compiled and loaded before the timed region
    cuda::Event start, end;
    start.record();
    m.launch("fill", static_cast<unsigned>((n + 255) / 256), 256, 0,
                    {cuda::KernelArg::buffer(out), cuda::KernelArg::i64(n), cuda::KernelArg::f32(0.5f),
                     cuda::KernelArg::i32(-7)});
    end.record();
    float ms = cuda::Event::elapsed_ms(start, end);
    cuda::synchronize();
    std::cout << "[ device   ] fill of " << n << " floats: " << ms << " ms\n";
    EXPECT_GE(ms, 0.f);
    std::vector<float> host(n);
    out.read(host.data(), n * sizeof(float));
    for (int64_t i = 0; i < n; i += 9973) ASSERT_EQ(host[i], 0.5f * static_cast<float>(i - 7)) << i;
    EXPECT_EQ(host[n - 1], 0.5f * static_cast<float>(n - 1 - 7));
    cuda::flush_l2();
    cuda::synchronize();
}

TEST_F(CudaDevice, MmaBf16WithLdmatrixIsExact) {
    std::vector<uint16_t> a(16 * 16), b(8 * 16);  // b is n-major: b[n * 16 + k] = B[k][n]
    std::vector<float> fa(16 * 16), fb(16 * 8);
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) {
            fa[i * 16 + k] = static_cast<float>((i * 3 + k) % 5 - 2);  // small integers: exact in bf16
            a[i * 16 + k] = to_bf16(fa[i * 16 + k]);
        }
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 8; j++) {
            fb[k * 8 + j] = static_cast<float>((k + 2 * j) % 3 - 1);
            b[j * 16 + k] = to_bf16(fb[k * 8 + j]);
        }
    cuda::Buffer da(a.size() * 2), db(b.size() * 2), dc(16 * 8 * 4);
    da.write(a.data(), a.size() * 2);
    db.write(b.data(), b.size() * 2);
    module().launch("mma_bf16", 1, 32, 0,
                    {cuda::KernelArg::buffer(da), cuda::KernelArg::buffer(db), cuda::KernelArg::buffer(dc)});
    cuda::synchronize();
    std::vector<float> c(16 * 8);
    dc.read(c.data(), c.size() * 4);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float ref = 0;
            for (int k = 0; k < 16; k++) ref += fa[i * 16 + k] * fb[k * 8 + j];
            ASSERT_EQ(c[i * 8 + j], ref) << "C[" << i << "][" << j << "]";
        }
}

TEST_F(CudaDevice, CpAsyncCopyAndBlockSum) {
    const int64_t n4 = 10000, n = n4 * 4;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; i++) x[i] = static_cast<float>(i % 17) - 8.f;
    cuda::Buffer in(n * 4), out(n * 4), sums(64 * 4);
    in.write(x.data(), n * 4);
    module().launch("copy_async", static_cast<unsigned>((n4 + 255) / 256), 256, 0,
                    {cuda::KernelArg::buffer(in), cuda::KernelArg::buffer(out), cuda::KernelArg::i64(n4)});
    module().launch("block_sum", 64, 256, 0,
                    {cuda::KernelArg::buffer(in), cuda::KernelArg::buffer(sums), cuda::KernelArg::i64(n)});
    cuda::synchronize();
    std::vector<float> y(n), s(64);
    out.read(y.data(), n * 4);
    sums.read(s.data(), 64 * 4);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(y[i], 2.f * x[i]) << i;
    // Integers summed in float: exact in any order while partial sums stay below 2^24.
    EXPECT_EQ(std::accumulate(s.begin(), s.end(), 0.0), std::accumulate(x.begin(), x.end(), 0.0));
}

TEST_F(CudaDevice, DynamicSharedMemoryAbove48KiB) {
    const int n_floats = 100 * 1024 / 4;
    if (cuda::device().smem_per_block_optin < n_floats * 4) GTEST_SKIP() << "device opt-in limit too small";
    cuda::Buffer out(n_floats * 4);
    module().launch("big_smem", 1, 256, n_floats * 4, {cuda::KernelArg::buffer(out), cuda::KernelArg::i32(n_floats)});
    cuda::synchronize();
    std::vector<float> h(n_floats);
    out.read(h.data(), h.size() * 4);
    for (int i = 0; i < n_floats; i++) ASSERT_EQ(h[i], static_cast<float>(n_floats - 1 - i)) << i;
}

TEST_F(CudaDevice, LaunchErrorsNameTheKernelAndTheError) {
    try {
        module().launch("no_such_kernel", 1, 32, 0, {});
        FAIL() << "expected InternalError";
    } catch (const InternalError &e) {
        EXPECT_NE(std::string(e.what()).find("no_such_kernel"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_NOT_FOUND"), std::string::npos) << e.what();
    }
    cuda::Buffer out(4);
    try {  // more threads per block than any device allows: rejected at launch, not sticky
        module().launch("fill", 1, 4096, 0,
                        {cuda::KernelArg::buffer(out), cuda::KernelArg::i64(1), cuda::KernelArg::f32(1.f),
                         cuda::KernelArg::i32(0)});
        FAIL() << "expected InternalError";
    } catch (const InternalError &e) {
        EXPECT_NE(std::string(e.what()).find("'fill'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_"), std::string::npos) << e.what();
    }
    cuda::synchronize();  // the context is still healthy
}
