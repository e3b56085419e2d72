/** \file opencl_runtime_test.cpp
 * The OpenCL runtime: device info, a __local tree sum and scale checked bit-exactly against the CPU, scalar
 * arguments, build and launch errors, empty buffers, concurrent launches, and the "OpenCL absent" paths
 * (run in a child process, since the loaded library is process-wide state).
 */
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "runtime/OpenCLRuntime.h"
#include "support/Error.h"

using namespace rf;
using namespace rf::ocl;

namespace {

const char *kOptions = "-cl-std=CL1.2";

// Each work-group sums its slice of x with a __local tree (written to partial[group]) and writes y = x * scale.
const char *kSumScale = R"CL(
__kernel void sum_scale(__global const float *x, __global float *partial, __global float *y, long n,
                        float scale, __local float *tmp) {
    size_t lid = get_local_id(0), gid = get_global_id(0);
    float v = gid < n ? x[gid] : 0.0f;
    if (gid < n) y[gid] = v * scale;
    tmp[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) tmp[lid] += tmp[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = tmp[0];
}

__kernel void echo(__global long *out_l, __global float *out_f, long a, float b, int c) {
    out_l[0] = a;
    out_l[1] = c;
    out_f[0] = b;
    out_f[1] = b * 2.0f;
}

__kernel void nothing(__global float *x, long n) {
    if (get_global_id(0) < n) x[0] = 1.0f;
}
)CL";

class OpenCLRuntime : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why = unavailable_reason();
        if (!why.empty()) GTEST_SKIP() << "OpenCL unavailable: " << why;
    }
};

/** The CPU twin of sum_scale's tree, in float and in the same order, so the comparison can be exact. */
std::vector<float> cpu_tree_sums(const std::vector<float> &x, size_t local) {
    std::vector<float> sums;
    for (size_t g = 0; g * local < x.size(); g++) {
        std::vector<float> tmp(local, 0.0f);
        for (size_t i = 0; i < local && g * local + i < x.size(); i++) tmp[i] = x[g * local + i];
        for (size_t s = local / 2; s > 0; s >>= 1)
            for (size_t i = 0; i < s; i++) tmp[i] += tmp[i + s];
        sums.push_back(tmp[0]);
    }
    return sums;
}

void check_sum_scale(Program &p, size_t n, size_t local, float scale) {
    std::mt19937 rng(static_cast<unsigned>(n * 31 + local));
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<float> x(n);
    for (float &v : x) v = dist(rng);
    const size_t groups = (n + local - 1) / local;
    Buffer bx(n * sizeof(float)), bpartial(groups * sizeof(float)), by(n * sizeof(float));
    bx.write(x.data(), n * sizeof(float));
    p.launch("sum_scale", groups, local,
             {KernelArg::buffer(bx), KernelArg::buffer(bpartial), KernelArg::buffer(by),
              KernelArg::i64(static_cast<int64_t>(n)), KernelArg::f32(scale), KernelArg::local(local * sizeof(float))});
    std::vector<float> partial(groups), y(n);
    bpartial.read(partial.data(), groups * sizeof(float));
    by.read(y.data(), n * sizeof(float));
    std::vector<float> want = cpu_tree_sums(x, local);
    ASSERT_EQ(want.size(), groups);
    for (size_t g = 0; g < groups; g++)
        EXPECT_EQ(partial[g], want[g]) << "n " << n << " local " << local << " group " << g;
    for (size_t i = 0; i < n; i++) ASSERT_EQ(y[i], x[i] * scale) << "n " << n << " i " << i;
}

}  // namespace

TEST_F(OpenCLRuntime, DeviceInfoIsSane) {
    const DeviceInfo &d = device();
    EXPECT_FALSE(d.platform.empty());
    EXPECT_FALSE(d.name.empty());
    EXPECT_NE(d.version.find("OpenCL"), std::string::npos) << d.version;
    EXPECT_NE(d.c_version.find("OpenCL C"), std::string::npos) << d.c_version;
    EXPECT_GE(d.max_work_group_size, 1u);
    EXPECT_GE(d.local_mem_bytes, 16u * 1024);  // the OpenCL 1.2 minimum for a full-profile device
    EXPECT_GE(d.global_mem_bytes, d.max_alloc_bytes);
    EXPECT_GT(d.max_alloc_bytes, 0u);
    EXPECT_GE(d.compute_units, 1);
    EXPECT_EQ(&device(), &d);  // one process-wide device
    std::cout << "device: '" << d.name << "' on '" << d.platform << "', " << d.version << ", " << d.c_version
              << ", " << d.compute_units << " CUs, max wg " << d.max_work_group_size << ", local "
              << d.local_mem_bytes << " B, fp64 " << d.fp64 << ", gpu " << d.gpu << "\n";
}

TEST_F(OpenCLRuntime, LocalTreeSumAndScaleMatchCpuExactly) {
    Program p(kSumScale, kOptions);
    EXPECT_GT(p.build_ms(), 0.0);
    std::cout << "build: " << p.build_ms() << " ms\n";
    check_sum_scale(p, 1000, 64, 0.7f);
    check_sum_scale(p, 1, 64, -2.5f);
    check_sum_scale(p, 4097, 128, 1.0f / 3.0f);
    check_sum_scale(p, 64, 64, 3.0f);
    EXPECT_LE(p.max_local("sum_scale"), device().max_work_group_size);
    EXPECT_GE(p.max_local("sum_scale"), 64u);
    EXPECT_GT(take_device_ms(), 0.0);
    EXPECT_EQ(take_device_ms(), 0.0);  // nothing launched since
}

TEST_F(OpenCLRuntime, ScalarArguments) {
    Program p(kSumScale, kOptions);
    for (int64_t a : {int64_t{0x123456789ABCDEF}, int64_t{-5'000'000'000}, INT64_MIN}) {
        Buffer bl(2 * sizeof(int64_t)), bf(2 * sizeof(float));
        p.launch("echo", 1, 1,
                 {KernelArg::buffer(bl), KernelArg::buffer(bf), KernelArg::i64(a), KernelArg::f32(1.25e-3f),
                  KernelArg::i32(-7)});
        int64_t l[2];
        float f[2];
        bl.read(l, sizeof l);
        bf.read(f, sizeof f);
        EXPECT_EQ(l[0], a);
        EXPECT_EQ(l[1], -7);
        EXPECT_EQ(f[0], 1.25e-3f);
        EXPECT_EQ(f[1], 2.5e-3f);
    }
    finish();
}

TEST_F(OpenCLRuntime, BuildErrorHasLogAndSavedSource) {
    const std::string bad = "__kernel void bad(__global float *x) { x[0] = undefined_thing_42; }\n";
    try {
        Program p(bad, kOptions);
        FAIL() << "the build succeeded";
    } catch (const InternalError &e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << msg;
        EXPECT_NE(msg.find("undefined_thing_42"), std::string::npos) << msg;  // quoted from the build log
        std::smatch m;
        ASSERT_TRUE(std::regex_search(msg, m, std::regex("source saved to (\\S+\\.cl)"))) << msg;
        std::ifstream in(m[1].str());
        std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        EXPECT_EQ(saved, bad);
        std::filesystem::remove(m[1].str());
        std::filesystem::remove(std::filesystem::path(m[1].str()).replace_extension(".log"));
    }
}

TEST_F(OpenCLRuntime, LaunchErrorsNameKernelAndCode) {
    Program p(kSumScale, kOptions);
    Buffer b(16);
    try {
        p.launch("no_such_kernel", 1, 1, {});
        FAIL() << "launch succeeded";
    } catch (const InternalError &e) {
        EXPECT_NE(std::string(e.what()).find("no_such_kernel"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CL_INVALID_KERNEL_NAME"), std::string::npos) << e.what();
    }
    // Too few arguments: caught before OpenCL could reuse stale ones from an earlier launch.
    EXPECT_THROW(p.launch("nothing", 1, 1, {KernelArg::buffer(b)}), InternalError);
    try {
        size_t too_big = device().max_work_group_size * 2;
        p.launch("nothing", 1, too_big, {KernelArg::buffer(b), KernelArg::i64(0)});
        FAIL() << "launch succeeded";
    } catch (const InternalError &e) {
        EXPECT_NE(std::string(e.what()).find("CL_INVALID_WORK_GROUP_SIZE"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'nothing'"), std::string::npos) << e.what();
    }
    // Wrong kinds: a scalar for a buffer would crash PoCL inside clSetKernelArg; caught before it.
    try {
        p.launch("nothing", 1, 1, {KernelArg::i64(3), KernelArg::i64(0)});
        FAIL() << "launch succeeded";
    } catch (const InternalError &e) {
        EXPECT_NE(std::string(e.what()).find("argument 0 must be buffer, got i64"), std::string::npos) << e.what();
    }
    EXPECT_THROW(p.launch("nothing", 1, 1, {KernelArg::buffer(b), KernelArg::buffer(b)}), InternalError);
    EXPECT_THROW(p.launch("nothing", 1, 1, {KernelArg::buffer(b), KernelArg::f64(0)}), InternalError);
    EXPECT_THROW(p.launch("sum_scale", 1, 1,
                          {KernelArg::buffer(b), KernelArg::buffer(b), KernelArg::buffer(b), KernelArg::i64(0),
                           KernelArg::f32(0), KernelArg::buffer(b)}),
                 InternalError);
    EXPECT_EQ(error_name(-54), "CL_INVALID_WORK_GROUP_SIZE");
    EXPECT_EQ(error_name(0), "CL_SUCCESS");
    EXPECT_EQ(error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
    EXPECT_EQ(error_name(-25), "CL_UNKNOWN_ERROR(-25)");
    EXPECT_EQ(error_name(7), "CL_UNKNOWN_ERROR(7)");
}

TEST_F(OpenCLRuntime, EmptyAndMovedBuffers) {
    Buffer empty(0);
    EXPECT_EQ(empty.bytes(), 0u);
    EXPECT_NE(empty.handle(), nullptr);
    empty.write(nullptr, 0);
    empty.read(nullptr, 0);
    Program p(kSumScale, kOptions);
    p.launch("nothing", 1, 1, {KernelArg::buffer(empty), KernelArg::i64(0)});
    p.launch("nothing", 0, 64, {KernelArg::buffer(empty), KernelArg::i64(0)});  // no work-groups: nothing enqueued
    finish();

    float v[3] = {1, 2, 3};
    Buffer a(sizeof v);
    a.write(v, sizeof v);
    Buffer b(std::move(a));
    EXPECT_EQ(a.handle(), nullptr);
    EXPECT_EQ(b.bytes(), sizeof v);
    Buffer c(4);
    c = std::move(b);
    float out[3] = {};
    c.read(out, sizeof out);
    EXPECT_EQ(out[2], 3.0f);
    EXPECT_THROW(c.write(v, sizeof v + 1), InternalError);
}

TEST_F(OpenCLRuntime, ConcurrentLaunchesOnOneProgram) {
    Program p(kSumScale, kOptions);
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; t++)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 20; i++) {
                const size_t n = 100 + 37 * t + i;
                std::vector<float> x(n, static_cast<float>(t + 1)), y(n);
                Buffer bx(n * 4), bp(n * 4), by(n * 4);
                bx.write(x.data(), n * 4);
                p.launch("sum_scale", (n + 31) / 32, 32,
                         {KernelArg::buffer(bx), KernelArg::buffer(bp), KernelArg::buffer(by),
                          KernelArg::i64(static_cast<int64_t>(n)), KernelArg::f32(2.0f), KernelArg::local(32 * 4)});
                by.read(y.data(), n * 4);
                for (float v : y) failures[t] += v != 2.0f * static_cast<float>(t + 1);
            }
        });
    for (auto &th : threads) th.join();
    for (int t = 0; t < 4; t++) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST(OpenCLProbe, ProbeLibrary) {
    EXPECT_EQ(probe_library("/nonexistent.so"), "/nonexistent.so not found");
    EXPECT_NE(probe_library("libc.so.6").find("lacks clGetPlatformIDs"), std::string::npos);
    if (unavailable_reason().empty() && std::getenv("REDFUSE_OPENCL_LIBRARY") == nullptr) {
        EXPECT_EQ(probe_library("libOpenCL.so.1"), "");
    }
}

// Runs in a child (see run_child): the environment there decides what OpenCL looks like.
TEST(OpenCLChild, ReasonFromEnvironment) {
    const char *expect = std::getenv("REDFUSE_TEST_EXPECT_REASON");
    if (!expect) GTEST_SKIP() << "only run by OpenCLAbsent.* in a child process";
    EXPECT_NE(unavailable_reason().find(expect), std::string::npos) << unavailable_reason();
    try {
        device();
        FAIL() << "device() did not throw";
    } catch (const UserError &e) {
        EXPECT_NE(std::string(e.what()).find("no OpenCL platform/device: "), std::string::npos) << e.what();
    }
    EXPECT_THROW(Buffer(4), UserError);
    EXPECT_THROW(Program("", kOptions), UserError);
}

namespace {

/** Re-runs this binary on OpenCLChild.ReasonFromEnvironment with `env` added; true when that test passed. */
bool run_child(const std::vector<std::string> &env, std::string &output) {
    std::vector<std::string> vars = env;
    for (char **e = environ; *e; e++) vars.emplace_back(*e);  // ours come first, so they win
    std::vector<char *> envp;
    for (auto &v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string filter = "--gtest_filter=OpenCLChild.ReasonFromEnvironment";
    char *argv[] = {self.data(), filter.data(), nullptr};
    int fds[2];
    if (pipe(fds) != 0) return false;
    pid_t pid = fork();
    if (pid == 0) {  // only async-signal-safe calls until exec
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execve(argv[0], argv, envp.data());
        _exit(127);
    }
    close(fds[1]);
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) output.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && output.find("[  PASSED  ] 1 test") != std::string::npos;
}

}  // namespace

TEST(OpenCLAbsent, MissingLibraryMakesItUnavailable) {
    std::string out;
    EXPECT_TRUE(run_child({"REDFUSE_OPENCL_LIBRARY=/nonexistent.so",
                           "REDFUSE_TEST_EXPECT_REASON=/nonexistent.so not found"},
                          out))
        << out;
}

TEST(OpenCLAbsent, UnknownDeviceNameMakesItUnavailable) {
    if (!unavailable_reason().empty()) GTEST_SKIP() << "OpenCL unavailable: " << unavailable_reason();
    std::string out;
    EXPECT_TRUE(run_child({"REDFUSE_OPENCL_DEVICE=no-such-device-xyz",
                           "REDFUSE_TEST_EXPECT_REASON=no OpenCL device matching REDFUSE_OPENCL_DEVICE='no-such-"},
                          out))
        << out;
}
