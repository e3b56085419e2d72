/** \file ExampleRuns.h
 * Shared by the stage tests that run specs end to end with --check (CPU, OpenCL on PoCL, the CUDA
 * emulator): one description of a run's options for failure messages, and one checked run.
 */
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>

#include "driver/Compiler.h"
#include "driver/Run.h"
#include "interp/Npy.h"
#include "runtime/TempDir.h"

namespace rf::test {

/** Sizes and every schedule knob of a run, for failure messages. */
inline std::string describe(const RunOptions &o) {
    std::ostringstream s;
    for (auto &[n, v] : o.sizes) s << n << "=" << v << " ";
    s << "tile=" << o.tile << " segments=" << o.segments << " row_block=" << o.row_block;
    if (o.target != TargetKind::Cpu) s << " wg=" << o.gpu_threads << " level=" << to_string(o.fusion_level);
    s << (o.unfused ? " unfused" : "") << (o.no_tensor_cores ? " no-tensor-cores" : "");
    return s.str();
}

/** Runs `source` (named `path` in messages) on `target` with --check, once per seed; a failed check,
 *  or any exception (an emulator's deadlock or race report), fails the test. moment_of_inertia needs
 *  positive masses. REDFUSE_TEST_TIMES=1 prints each run's wall time. */
inline void check_run(const std::filesystem::path &path, const std::string &source, RunOptions o, const std::string &target,
                      std::initializer_list<uint64_t> seeds) {
    ArenaScope arena;
    auto c = compile_source(source, path.string(), {});
    o.target = parse_target_kind(target);
    o.check = true;
    if (path.stem() == "moment_of_inertia") o.dist = InputDistribution::Positive;
    for (uint64_t seed : seeds) {
        o.seed = seed;
        auto t0 = std::chrono::steady_clock::now();
        try {
            RunReport r = run_compiled(*c, o);
            EXPECT_TRUE(r.ok) << path.filename() << " " << describe(o) << " seed " << seed << "\n" << r.text;
        } catch (const std::exception &e) {
            ADD_FAILURE() << path.filename() << " " << describe(o) << " seed " << seed << ": " << e.what();
        }
        if (std::getenv("REDFUSE_TEST_TIMES"))
            std::fprintf(stderr, "%s %s: %.2f s\n", path.stem().c_str(), describe(o).c_str(),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
}

/** check_run on `inputs` (planted NaN, infinities, masked rows) instead of random ones: they are saved
 *  to a temporary folder that the run loads (o.load_dir). */
inline void check_run_on_inputs(const std::filesystem::path &path, const std::string &source,
                                const std::map<std::string, Tensor> &inputs, RunOptions o, const std::string &target,
                                std::initializer_list<uint64_t> seeds = {1}) {
    TempDir dir;
    save_dir(dir.path(), inputs);
    o.load_dir = dir.path();
    check_run(path, source, o, target, seeds);
}

}  // namespace rf::test
