/** \file cli_test.cpp
 * The command line end to end (docs/cli.md): `analyze --json` prints the contract's fields, `run
 * --target interp --check` passes on every example with no --size, --save/--load round-trip through
 * .npy files, and bad specs or bad usage give the documented messages and exit statuses.
 */
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace {

struct Result {
    int status;
    std::string out;
};

Result sh(const std::string &args) {
    std::string cmd = std::string(REDFUSE_BINARY) + " " + args + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

/** The standard output of a shell command (stderr dropped), whatever its status. */
std::string stdout_of(const std::string &cmd) {
    FILE *p = popen((cmd + " 2>/dev/null").c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    pclose(p);
    return out;
}

std::string ex(const std::string &name) { return std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf"; }

std::string temp_spec(const std::string &text) {
    static int counter = 0;
    auto path = std::filesystem::temp_directory_path() / ("redfuse_cli_" + std::to_string(getpid()) + "_" +
                                                          std::to_string(counter++) + ".rf");
    std::ofstream(path) << text;
    return path.string();
}

}  // namespace

TEST(Cli, AnalyzeJsonHasTheContractFields) {
    Result r = sh("analyze " + ex("attention") + " --json");
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.contains("chains"));
    ASSERT_TRUE(j.contains("not_fused"));
    auto &c = j["chains"][0];
    for (const char *k : {"axes", "members", "fused", "strategy", "members_detail"}) EXPECT_TRUE(c.contains(k)) << k;
    EXPECT_EQ(c["members"], nlohmann::json({"m", "l", "O.sum"}));
    for (auto &m : c["members_detail"]) {
        for (const char *k : {"name", "op", "relation", "exact", "update", "merge"}) EXPECT_TRUE(m.contains(k)) << k;
        if (m["relation"] == "multiplicative") {
            EXPECT_TRUE(m.contains("G"));
            EXPECT_TRUE(m.contains("H"));
        }
    }
}

TEST(Cli, AnalyzeTextShowsFormulasAndReasons) {
    Result r = sh("analyze " + ex("softmax"));
    ASSERT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("H = exp(-m[r])"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("merge:"), std::string::npos);
    Result n = sh("analyze " + ex("nofuse_max_after_mean"));
    EXPECT_EQ(n.status, 0);
    EXPECT_NE(n.out.find("not fused"), std::string::npos) << n.out;
    EXPECT_NE(n.out.find("counterexample"), std::string::npos) << n.out;
}

TEST(Cli, RunCheckPassesOnEveryExampleWithoutSizes) {
    for (const auto &e : std::filesystem::directory_iterator(std::string(REDFUSE_SOURCE_DIR) + "/examples")) {
        if (e.path().extension() != ".rf") continue;
        Result r = sh("run " + e.path().string() + " --target interp --check --json");
        EXPECT_EQ(r.status, 0) << e.path() << "\n" << r.out;
        if (r.status == 0) {
            auto j = nlohmann::json::parse(r.out);
            EXPECT_TRUE(j["ok"].get<bool>());
            EXPECT_TRUE(j.contains("time_ms"));
            for (auto &[name, o] : j["outputs"].items()) {
                EXPECT_TRUE(o.contains("max_abs_err")) << name;
                EXPECT_TRUE(o.contains("max_rel_err")) << name;
            }
        }
    }
}

TEST(Cli, RunAtOtherSizesAndInFloat32) {
    EXPECT_EQ(sh("run " + ex("attention_causal") + " --target interp --check --size N=7 --seed 3").status, 0);
    EXPECT_EQ(sh("run " + ex("variance") + " --target interp-f32 --check --size C=101").status, 0);
}

TEST(Cli, SaveAndLoadRoundTrip) {
    auto dir = std::filesystem::temp_directory_path() / ("redfuse_npy_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    Result a = sh("run " + ex("moe_routing") + " --target interp --check --save " + dir.string());
    ASSERT_EQ(a.status, 0) << a.out;
    for (const char *f : {"X.npy", "W.npy", "I.npy"}) EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
    Result b = sh("run " + ex("moe_routing") + " --target interp --check --json --load " + dir.string());
    ASSERT_EQ(b.status, 0) << b.out;
    std::filesystem::remove_all(dir);
}

TEST(Cli, ErrorsHaveLocationsAndStatuses) {
    std::string bad = temp_spec("size R = 3\ninput X[R] : f32\ny[r] = sum(c: X[r])\noutput y\n");
    Result r = sh("analyze " + bad);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find(bad + ":3:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("error:"), std::string::npos);
    EXPECT_NE(r.out.find("^"), std::string::npos);
    EXPECT_EQ(sh("analyze /nonexistent/file.rf").status, 1);
    EXPECT_EQ(sh("frobnicate").status, 2);
    EXPECT_EQ(sh("run " + ex("softmax") + " --size R=banana").status, 2);
    EXPECT_EQ(sh("run " + ex("softmax") + " --size R=0").status, 1);
    EXPECT_EQ(sh("run " + ex("softmax") + " --target cuda").status, 1);
    EXPECT_EQ(sh("analyze --help").status, 0);
    EXPECT_EQ(sh("run --help").status, 0);
}

TEST(Cli, StrategyFollowsTheMachineModel) {
    // One decode row cannot fill the machine on either model: the axis is split into segments.
    for (const char *target : {"gpu", "cpu"}) {
        Result r = sh("analyze " + ex("decode_gqa") + " --json --target " + target + " --size B=1,Hq=1,Hkv=1,N=8192,D=128");
        ASSERT_EQ(r.status, 0) << r.out;
        EXPECT_EQ(nlohmann::json::parse(r.out)["chains"][0]["strategy"], "multi_segment") << target;
    }
    // 128 decode rows fill a 2-core CPU but not a 132-SM GPU.
    Result gpu = sh("analyze " + ex("decode_gqa") + " --json --size B=4,Hq=32,Hkv=8,N=8192,D=128");
    EXPECT_EQ(nlohmann::json::parse(gpu.out)["chains"][0]["strategy"], "multi_segment");
    EXPECT_EQ(sh("analyze " + ex("softmax") + " --target tpu").status, 2);
}

TEST(Cli, RunOnTheCpuBackendWithSaveAndLoad) {
    auto dir = std::filesystem::temp_directory_path() / ("redfuse_cpu_npy_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    Result a = sh("run " + ex("moe_routing") + " --target cpu --check --save " + dir.string());
    ASSERT_EQ(a.status, 0) << a.out;
    EXPECT_NE(a.out.find("generated C++"), std::string::npos) << a.out;
    Result b = sh("run " + ex("moe_routing") + " --target cpu --check --json --load " + dir.string() + " --threads 1");
    ASSERT_EQ(b.status, 0) << b.out;
    auto j = nlohmann::json::parse(b.out);
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_TRUE(j["outputs"]["I"]["exact"].get<bool>());
    std::filesystem::remove_all(dir);
    EXPECT_EQ(sh("run " + ex("softmax") + " --target cpu --check --segments 3 --tile 5").status, 0);
    EXPECT_EQ(sh("run " + ex("softmax") + " --target cpu --tile 0").status, 2);
}

TEST(Cli, BenchPrintsTheHookFields) {
    Result r = sh("bench " + ex("softmax") + " --target cpu --size R=64,C=512 --json --budget 0.05");
    ASSERT_EQ(r.status, 0) << r.out;
    auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    for (const char *k : {"time_ms", "unfused_time_ms", "strategy", "reps", "gbps", "gflops", "fraction_of_floor", "machine", "peak_unit"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j["time_ms"].get<double>(), 0);
    Result help = sh("bench --help");
    for (const char *flag : {"--threads", "--strategy", "--load"}) EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
    EXPECT_EQ(sh("bench " + ex("softmax") + " --strategy sideways").status, 2);
}

TEST(Cli, TuneKeepsItsResultAndBenchUsesIt) {
    auto cache = std::filesystem::temp_directory_path() / ("redfuse_tune_" + std::to_string(getpid()));
    std::string env = "REDFUSE_CACHE_DIR=" + cache.string() + " ";
    std::string cmd = std::string(REDFUSE_BINARY) + " tune " + ex("variance") + " --size R=16,C=300 --json --budget 0.01";
    auto run = [&](const std::string &c) { return stdout_of(env + c); };
    auto a = nlohmann::json::parse(run(cmd));
    EXPECT_FALSE(a.contains("cached"));
    EXPECT_GE(a["tried"].size(), 5u);
    auto b = nlohmann::json::parse(run(cmd));
    EXPECT_TRUE(b.contains("cached"));
    EXPECT_EQ(a["best"], b["best"]);
    auto bench = nlohmann::json::parse(run(std::string(REDFUSE_BINARY) + " bench " + ex("variance") +
                                           " --size R=16,C=300 --json --budget 0.01 --no-unfused"));
    EXPECT_TRUE(bench.contains("tuned"));
    std::filesystem::remove_all(cache);
}

TEST(Cli, GpuTargets) {
    // CUDA where there is no driver: a clear user error, exit status 1, never a crash.
    bool has_driver = std::filesystem::exists("/dev/nvidia0") || std::filesystem::exists("/dev/nvidiactl");
    if (!has_driver) {
        Result r = sh("run " + ex("softmax") + " --target cuda --check");
        EXPECT_EQ(r.status, 1) << r.out;
        EXPECT_NE(r.out.find("no CUDA driver/device"), std::string::npos) << r.out;
        Result b = sh("bench " + ex("softmax") + " --target cuda --budget 0.01");
        EXPECT_EQ(b.status, 1) << b.out;
        EXPECT_NE(b.out.find("no CUDA driver/device"), std::string::npos) << b.out;
    }
    // The GPU sources print without a device; emit writes the source and its launch description.
    Result cu = sh("analyze " + ex("attention") + " --emit cuda");
    ASSERT_EQ(cu.status, 0) << cu.out.substr(0, 2000);
    EXPECT_NE(cu.out.find("__global__ void __launch_bounds__"), std::string::npos);
    Result cl = sh("analyze " + ex("softmax") + " --emit opencl");
    ASSERT_EQ(cl.status, 0);
    EXPECT_NE(cl.out.find("__kernel __attribute__((reqd_work_group_size("), std::string::npos);
    auto dir = std::filesystem::temp_directory_path() / ("redfuse_emit_gpu_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    Result e = sh("emit " + ex("decode_gqa") + " --target opencl -o " + dir.string() + " --name dec");
    ASSERT_EQ(e.status, 0) << e.out;
    std::ifstream launch(dir / "dec.launch.json");
    auto j = nlohmann::json::parse(launch);
    EXPECT_EQ(j["source"], "dec.cl");
    ASSERT_FALSE(j["launches"].empty());
    EXPECT_TRUE(j["launches"][0].contains("work_groups"));
    // Launch shapes are plain C over the size parameters, with the kernel source's helpers (a host
    // program copies them): no C++ names.
    for (const auto &l : j["launches"])
        for (const char *k : {"work_groups", "shared_bytes"}) {
            std::string expr = l[k].get<std::string>();
            EXPECT_EQ(expr.find("::"), std::string::npos) << expr;
        }
    EXPECT_TRUE(std::filesystem::exists(dir / "dec.cl"));
    std::filesystem::remove_all(dir);
    // Usage errors: a work-group size that is not a power of two, an unknown fusion level.
    EXPECT_EQ(sh("run " + ex("softmax") + " --target opencl --threads 48").status, 2);
    EXPECT_EQ(sh("run " + ex("softmax") + " --target opencl --fusion-level lane").status, 2);
    EXPECT_EQ(sh("run " + ex("softmax") + " --target opencl --fusion-level warp --check").status, 0);
    if (!has_driver) { EXPECT_EQ(sh("tune " + ex("softmax") + " --target cuda").status, 1); }
}

TEST(Cli, RunOnOpenCL) {
    Result probe = sh("run " + ex("logsumexp") + " --target opencl --check --json --size R=3,C=1001 --segments 4 --threads 32");
    if (probe.status == 1 && probe.out.find("no OpenCL") != std::string::npos) GTEST_SKIP() << probe.out;
    ASSERT_EQ(probe.status, 0) << probe.out;
    auto j = nlohmann::json::parse(probe.out.substr(probe.out.find('{')));
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_EQ(j["target"], "opencl");
    Result b = sh("bench " + ex("softmax") + " --target opencl --size R=8,C=300 --json --budget 0.01");
    ASSERT_EQ(b.status, 0) << b.out;
    auto jb = nlohmann::json::parse(b.out.substr(b.out.find('{')));
    for (const char *k : {"time_ms", "unfused_time_ms", "strategy", "gbps", "launches"}) EXPECT_TRUE(jb.contains(k)) << k;
}

TEST(Cli, TuneOnOpenCLKeepsItsResultAndBenchUsesIt) {
    Result probe = sh("run " + ex("softmax") + " --target opencl");
    if (probe.status == 1 && probe.out.find("no OpenCL") != std::string::npos) GTEST_SKIP() << probe.out;
    auto cache = std::filesystem::temp_directory_path() / ("redfuse_gputune_" + std::to_string(getpid()));
    std::string env = "REDFUSE_CACHE_DIR=" + cache.string() + " ";
    std::string args = ex("logsumexp") + " --target opencl --size R=300,C=40 --json --budget 0.01";
    auto run = [&](const std::string &c) { return stdout_of(env + c); };
    auto t1 = nlohmann::json::parse(run(std::string(REDFUSE_BINARY) + " tune " + args));
    EXPECT_FALSE(t1.contains("cached"));
    EXPECT_GE(t1["tried"].size(), 8u);
    EXPECT_TRUE(t1["best"].contains("level"));
    auto t2 = nlohmann::json::parse(run(std::string(REDFUSE_BINARY) + " tune " + args));
    EXPECT_TRUE(t2.contains("cached"));
    EXPECT_EQ(t1["best"], t2["best"]);
    auto b = nlohmann::json::parse(run(std::string(REDFUSE_BINARY) + " bench " + args + " --no-unfused"));
    EXPECT_TRUE(b.contains("tuned"));
    EXPECT_EQ(b["fusion_level"], t1["best"]["level"]);
    std::filesystem::remove_all(cache);
}

TEST(Cli, StagesAreDumpedByNameAndTheDumpIsWhatRunBuilds) {
    // --emit STAGE prints one stage; REDFUSE_DUMP prints them on stderr during any command.
    Result lowered = sh("analyze " + ex("attention") + " --emit tile:lowered");
    Result exp2 = sh("analyze " + ex("attention") + " --emit tile:after-exp2");
    ASSERT_EQ(lowered.status, 0) << lowered.out;
    ASSERT_EQ(exp2.status, 0) << exp2.out;
    EXPECT_EQ(lowered.out.find("exp2("), std::string::npos);
    EXPECT_NE(exp2.out.find("exp2("), std::string::npos);
    Result bad = sh("analyze " + ex("attention") + " --emit tile:after-nothing");
    EXPECT_EQ(bad.status, 2);
    EXPECT_NE(bad.out.find("tile:after-hoist"), std::string::npos) << "the error lists the stages: " << bad.out;
    Result wrong_target = sh("analyze " + ex("softmax") + " --emit cpp --target cuda");
    EXPECT_EQ(wrong_target.status, 2) << wrong_target.out;
    // The C++ that `run --target cpu` builds is what `analyze --emit cpp` shows, at the same sizes.
    std::string sizes = " --size R=300,C=5000";
    std::string shown = stdout_of(std::string(REDFUSE_BINARY) + " analyze " + ex("softmax") + " --emit cpp" + sizes);
    std::string dump_cmd = "REDFUSE_DUMP=cpp " + std::string(REDFUSE_BINARY) + " run " + ex("softmax") + " --target cpu" + sizes + " 2>&1 >/dev/null";
    std::string dumped;
    {
        FILE *p = popen(dump_cmd.c_str(), "r");
        std::array<char, 4096> buf;
        size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) dumped.append(buf.data(), n);
        pclose(p);
    }
    EXPECT_FALSE(shown.empty());
    EXPECT_EQ(shown, dumped);
    Result env_bad = sh("analyze " + ex("softmax") + " >/dev/null; REDFUSE_DUMP=nonsense " + std::string(REDFUSE_BINARY) + " analyze " + ex("softmax"));
    EXPECT_NE(env_bad.out.find("REDFUSE_DUMP: unknown stage 'nonsense'"), std::string::npos) << env_bad.out;
    EXPECT_EQ(sh("analyze " + ex("softmax") + " --emit cuda --arch sm_80").status, 0);
    EXPECT_EQ(sh("analyze " + ex("softmax") + " --emit cuda --arch 80").status, 1);
}

TEST(Cli, SizesTooLargeForMemoryAreAUserErrorWithTheNumbers) {
    // 1.6e11 elements (3.8 TB of buffers): more than any machine has. Refused before anything is allocated (an
    // allocation failure would be an internal error), exit 1, with the bytes needed and available.
    Result r = sh("run " + ex("softmax") + " --target cpu --size R=400000,C=400000");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("for the run's buffers"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("of memory is available"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

TEST(Cli, EmitForAGpuWithoutSizesSaysWhatToPass) {
    // GPU kernels are shaped by the sizes (launch grids, tiles): without defaults or --size, emit
    // names the size to pass (exit 1, as for every unbound size) instead of an internal error.
    std::string spec = temp_spec("size R, C\ninput X[R, C] : f32\nm[r] = max(c: X[r,c])\n"
                                 "s[r] = sum(c: exp(X[r,c] - m[r]))\nY[r,c] = exp(X[r,c] - m[r]) / s[r]\noutput Y : f32\n");
    auto dir = std::filesystem::temp_directory_path() / ("redfuse_emit_nosizes_" + std::to_string(getpid()));
    for (const char *target : {"cuda", "opencl"}) {
        Result r = sh("emit " + spec + " --target " + target + " -o " + dir.string());
        EXPECT_EQ(r.status, 1) << target << ": " << r.out;
        EXPECT_NE(r.out.find("pass --size"), std::string::npos) << target << ": " << r.out;
        EXPECT_EQ(r.out.find("internal error"), std::string::npos) << target << ": " << r.out;
    }
    std::filesystem::remove_all(dir);
}

TEST(Cli, SizesTooLargeForMemoryOnTheGpuTargetsAreAUserError) {
    // Issue 15: the same refusal as on the CPU for opencl and cuda (their host buffers are checked before
    // the device is asked for any): 4e9 elements, 96 GB of buffers, sizes whose kernels fit the work-group
    // (R = C = 400000 is refused earlier, for its shared memory). Without a runtime: that message, exit 1.
    for (const char *target : {"opencl", "cuda"}) {
        Result r = sh("run " + ex("softmax") + " --target " + target + " --size R=4000000,C=1000");
        EXPECT_EQ(r.status, 1) << target << ": " << r.out;
        bool refused = r.out.find("for the run's buffers") != std::string::npos;
        bool no_runtime = r.out.find("no OpenCL") != std::string::npos || r.out.find("no CUDA driver") != std::string::npos;
        EXPECT_TRUE(refused || no_runtime) << target << ": " << r.out;
        EXPECT_EQ(r.out.find("internal error"), std::string::npos) << target << ": " << r.out;
    }
}

TEST(Cli, TheRateSplitShowsInAnalyzeAndInItsOwnDump) {
    // symmetric_kl.rf: J's terms have two exponential rates; J is split into J.rate0 + J.rate1.
    Result r = sh("analyze " + ex("symmetric_kl"));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("split by exponential rate: J = J.rate0 + J.rate1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("J.rate0: rate -1 on mx[r]"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("J.rate1 = sum: exp-polynomial"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("not fused"), std::string::npos) << r.out;
    Result j = sh("analyze " + ex("symmetric_kl") + " --json");
    ASSERT_EQ(j.status, 0) << j.out;
    auto c = nlohmann::json::parse(j.out)["chains"][0];
    EXPECT_EQ(c["members"], nlohmann::json({"mx", "sx", "my", "sy", "J.rate0", "J.rate1"}));
    EXPECT_EQ(c["passes"], 1);
    EXPECT_EQ(c["rate_splits"][0]["parts"], nlohmann::json({"J.rate0", "J.rate1"}));
    EXPECT_FALSE(nlohmann::json::parse(sh("analyze " + ex("softmax") + " --json").out)["chains"][0].contains("rate_splits"));
    // --emit ir is the checked program; --emit ir:rates the program the plan is made from.
    std::string ir = stdout_of(std::string(REDFUSE_BINARY) + " analyze " + ex("symmetric_kl") + " --emit ir");
    std::string rates = stdout_of(std::string(REDFUSE_BINARY) + " analyze " + ex("symmetric_kl") + " --emit ir:rates");
    EXPECT_EQ(ir.find("J.rate0"), std::string::npos) << ir;
    EXPECT_NE(ir.find("J[r:R] = sum(c: "), std::string::npos) << ir;
    EXPECT_NE(rates.find("J.rate0[r:R] = sum(c: "), std::string::npos) << rates;
    EXPECT_NE(rates.find("J[r:R] = J.rate0[r] + J.rate1[r]"), std::string::npos) << rates;
    EXPECT_EQ(stdout_of(std::string(REDFUSE_BINARY) + " analyze " + ex("softmax") + " --emit ir:rates"),
              stdout_of(std::string(REDFUSE_BINARY) + " analyze " + ex("softmax") + " --emit ir"));
    // Every command works on the rewritten program.
    EXPECT_EQ(sh("run " + ex("symmetric_kl") + " --target cpu --check --size R=3,C=5000 --scale 50").status, 0);
    EXPECT_EQ(sh("partial " + ex("symmetric_kl")).status, 0);
    EXPECT_EQ(sh("grad " + ex("symmetric_kl")).status, 0);
}

TEST(Cli, GradCheckComparesWithFiniteDifferences) {
    auto ok = sh("grad " + ex("attention_causal") + " --check --size B=1,H=2,N=7,D=3 --seed 4");
    EXPECT_EQ(ok.status, 0) << ok.out;
    EXPECT_NE(ok.out.find("dK: 10 point(s) against central differences"), std::string::npos) << ok.out;
    EXPECT_NE(ok.out.find("check: ok"), std::string::npos) << ok.out;
    auto st = sh("grad " + ex("quant_gemm_int8") + " --check --straight-through");
    EXPECT_EQ(st.status, 0) << st.out;  // the program without its rounding, whose derivative it stands for
    EXPECT_EQ(sh("grad " + ex("quant_gemm_int8") + " --check").status, 1);  // rounding refused, exit 1
}

TEST(Cli, EmitAndAnalyzeBuildWhatRunBuildsWithTheSameScheduleFlags) {
    // The generated kernels of a C++ text: from the first kernel function to the C ABI (analyze
    // --emit cpp pastes the headers in front, emit writes them as files of their own).
    auto kernels = [](const std::string &text) {
        size_t b = text.find("static void k0_"), e = text.find("extern \"C\"", b);
        return b == std::string::npos || e == std::string::npos ? std::string() : text.substr(b, e - b);
    };
    const std::string bin = std::string(REDFUSE_BINARY) + " ", spec = ex("attention"), sizes = " --size B=1,H=2,M=64,N=256,D=64";
    const std::string flags = " --row-block 32 --tile 128 --exact-products";
    std::string shown = kernels(stdout_of(bin + "analyze " + spec + " --emit cpp" + sizes + flags));
    ASSERT_FALSE(shown.empty());
    // run builds it (its REDFUSE_DUMP on stderr), emit writes it.
    std::string dumped;
    {
        FILE *p = popen(("REDFUSE_DUMP=cpp " + bin + "run " + spec + " --target cpu" + sizes + flags + " 2>&1 >/dev/null").c_str(), "r");
        std::array<char, 4096> buf;
        size_t n;
        while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) dumped.append(buf.data(), n);
        pclose(p);
    }
    EXPECT_TRUE(kernels(dumped) == shown) << "run builds other kernels than analyze --emit cpp shows";
    auto dir = std::filesystem::temp_directory_path() / ("redfuse_emit_flags_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    Result e = sh("emit " + spec + " -o " + dir.string() + sizes + flags);
    ASSERT_EQ(e.status, 0) << e.out;
    std::ifstream f(dir / "redfuse.cpp");
    std::string emitted((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(kernels(emitted) == shown) << "emit writes other kernels than analyze --emit cpp shows";
    std::filesystem::remove_all(dir);
    // Each flag is taken: bf16 attention's P·V rounds P to bf16 and its exp pass takes the degree-4
    // exp2 unless --exact-products; the row block and the tile change the loops.
    std::string plain = kernels(stdout_of(bin + "analyze " + spec + " --emit cpp" + sizes));
    EXPECT_NE(plain.find("_as_bf16"), std::string::npos);
    EXPECT_NE(plain.find("Exp2Accuracy::Half"), std::string::npos);
    std::string exact = kernels(stdout_of(bin + "analyze " + spec + " --emit cpp" + sizes + " --exact-products"));
    EXPECT_EQ(exact.find("_as_bf16"), std::string::npos);
    EXPECT_EQ(exact.find("Exp2Accuracy::Half"), std::string::npos);
    EXPECT_FALSE(kernels(stdout_of(bin + "analyze " + spec + " --emit cpp" + sizes + " --row-block 32")) == plain);
    EXPECT_FALSE(kernels(stdout_of(bin + "analyze " + spec + " --emit cpp" + sizes + " --tile 128")) == plain);
    // The same ranges everywhere: out of range is a usage error (exit 2) naming the flag.
    for (const std::string &cmd : {"analyze " + spec + " --emit cpp", "emit " + spec + " -o " + dir.string(), "bench " + spec, "run " + spec})
        for (const char *bad : {" --row-block 0", " --tile -3", " --segments 5000"}) {
            Result r = sh(cmd + bad);
            EXPECT_EQ(r.status, 2) << cmd << bad << ": " << r.out;
            EXPECT_NE(r.out.find(std::string(bad).substr(1, std::string(bad).find(' ', 1) - 1)), std::string::npos) << r.out;
        }
    EXPECT_FALSE(std::filesystem::exists(dir));
}
