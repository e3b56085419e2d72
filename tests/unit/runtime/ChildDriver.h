/** \file ChildDriver.h
 * Builds a test's own source again as a child program with other compiler flags (the -m flags of one
 * of the generated kernels' ISA paths), runs it and checks that it prints "ok <level>": the simd
 * micro-kernel and exp2_row tests check every code path the host CPU can run this way.
 */
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "TempDir.h"

extern char **environ;

namespace rf::test {

/** Whether /proc/cpuinfo's flags list every one of `needed`. */
inline bool host_has_cpu_flags(const std::vector<std::string> &needed) {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        std::vector<std::string> have;
        for (std::string w; words >> w;) have.push_back(w);
        for (const std::string &n : needed)
            if (std::find(have.begin(), have.end(), n) == have.end()) return false;
        return true;
    }
    return false;
}

/** Runs argv (looked up on PATH, no shell) with stdout and stderr to `log`; the exit status, -1 if it
 *  could not start. */
inline int run_program(const std::vector<std::string> &argv, const std::string &log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char *> args;
    for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return -1;
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

inline std::string slurp(const std::string &path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/** Compiles `source` (a path under the source tree) with `base_flags` then `flags`, checks that it
 *  compiles without warnings and, with `run_it`, that it prints exactly "ok <level>\n"; skips when the
 *  host CPU lacks `cpu_flags` (only when it is to run) or there is no c++ on PATH. */
inline void check_child_driver(const std::string &source, const std::vector<std::string> &base_flags,
                               const std::vector<std::string> &flags, const std::vector<std::string> &cpu_flags,
                               const std::string &level, bool run_it = true) {
    if (run_it && !host_has_cpu_flags(cpu_flags)) GTEST_SKIP() << "the host CPU lacks the flags for the " << level << " path";
    TempDir dir;
    std::string exe = dir.path() + "/driver", log = dir.path() + "/log.txt";
    std::vector<std::string> argv = {"c++"};
    argv.insert(argv.end(), base_flags.begin(), base_flags.end());
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {source, "-o", exe});
    int rc = run_program(argv, log);
    if (rc == -1) GTEST_SKIP() << "no c++ on PATH";
    ASSERT_EQ(rc, 0) << "compiling the driver failed:\n" << slurp(log);
    std::string compile_log = slurp(log);
    EXPECT_EQ(compile_log.find("warning"), std::string::npos) << compile_log;
    if (!run_it) return;
    rc = run_program({exe}, log);
    std::string out = slurp(log);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out, "ok " + level + "\n");
}

}  // namespace rf::test
