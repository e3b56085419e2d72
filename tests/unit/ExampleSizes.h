/** \file ExampleSizes.h
 * Shared by the stage tests that run every example: the example files, and size sets derived from
 * a spec's defaults (all ones, primes, 2v+1) keeping only the changes the spec accepts.
 */
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ir/Program.h"
#include "support/Error.h"

namespace rf::test {

inline std::string read_text(const std::filesystem::path &p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

/** How many times `what` occurs in `text` (tile IR and generated source checks). */
inline size_t count_of(const std::string &text, const std::string &what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
    return n;
}

inline std::vector<std::filesystem::path> example_paths() {
    std::vector<std::filesystem::path> out;
    for (const auto &e : std::filesystem::directory_iterator(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples"))
        if (e.path().extension() == ".rf") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

inline bool sizes_accepted(const Program &p, const std::map<std::string, int64_t> &s) {
    try {
        bind_sizes(p, s);
        return true;
    } catch (const UserError &) {
        return false;
    }
}

inline int64_t next_prime(int64_t n) {
    for (int64_t c = std::max<int64_t>(n + 1, 2);; c++) {
        bool prime = true;
        for (int64_t d = 2; d * d <= c; d++)
            if (c % d == 0) prime = false;
        if (prime) return c;
    }
}

/** Greedily moves each size to the value `f` proposes, keeping only changes the spec accepts. */
inline std::map<std::string, int64_t> size_variant(const Program &p, const std::function<int64_t(int64_t)> &f) {
    std::map<std::string, int64_t> s;
    for (const SizeDecl &d : p.sizes) s[d.name] = *d.default_value;
    for (const SizeDecl &d : p.sizes) {
        auto trial = s;
        trial[d.name] = f(s[d.name]);
        if (sizes_accepted(p, trial)) s = trial;
    }
    return s;
}

}  // namespace rf::test
