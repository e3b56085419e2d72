/** \file Environment.cpp
 * Reads every environment variable redfuse knows into data (RuntimeSettings, Options); the rest of
 * the library is configured only by what it is passed.
 */
#include "driver/Environment.h"

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "support/Error.h"

namespace rf {

namespace {
std::string env(const char *name) {
    const char *v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

std::vector<std::string> split(const std::string &s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, sep);)
        if (!item.empty()) out.push_back(item);
    return out;
}
}  // namespace

RuntimeSettings runtime_settings_from_environment() {
    RuntimeSettings s;
    s.cxx = env("CXX");
    s.cache_dir = env("REDFUSE_CACHE_DIR");
    if (s.cache_dir.empty()) {
        std::string xdg = env("XDG_CACHE_HOME"), home = env("HOME");
        if (!xdg.empty() && xdg[0] == '/') s.cache_dir = xdg + "/redfuse";
        else if (!home.empty()) s.cache_dir = home + "/.cache/redfuse";
        else s.cache_dir_error = "no JIT cache directory: set REDFUSE_CACHE_DIR, XDG_CACHE_HOME or HOME";
    }
    if (std::string t = env("TMPDIR"); !t.empty()) s.tmpdir = t;
    s.cuda_home = env("CUDA_HOME");
    s.libcuda = env("REDFUSE_LIBCUDA");
    s.cuda_device = env("REDFUSE_CUDA_DEVICE");
    s.opencl_library = env("REDFUSE_OPENCL_LIBRARY");
    s.opencl_device = env("REDFUSE_OPENCL_DEVICE");
    s.gpu_source_dump = env("REDFUSE_GPU_SOURCE_DUMP");
    s.gpu_source_override = env("REDFUSE_GPU_SOURCE_OVERRIDE");
    return s;
}

Options with_environment(Options o) {
    auto named = [](const char *var, auto &&parse) {
        try {
            return parse();
        } catch (const UserError &e) {
            throw UserError({}, std::string(var) + ": " + e.what());
        }
    };
    if (std::string d = env("REDFUSE_DUMP"); !d.empty())
        for (const DumpRequest &r : named("REDFUSE_DUMP", [&] { return parse_dump_list(d); }))
            if (!o.wants_dump(r)) o.dumps.push_back(r);
    if (std::string p = env("REDFUSE_TILE_PASSES"); !p.empty()) {
        if (p == "1") o.tile_passes.reset();
        else if (p == "0") o.tile_passes = std::vector<std::string>{};
        else o.tile_passes = named("REDFUSE_TILE_PASSES", [&] { return parse_tile_pass_list(p); });
    }
    if (env("REDFUSE_VERIFY") == "1") o.verify_each_pass = true;
    if (std::string h = env("REDFUSE_HUGE_PAGES"); !h.empty()) {
        if (h != "0" && h != "1") throw UserError({}, "REDFUSE_HUGE_PAGES: expected 0 or 1, got '" + h + "'");
        o.huge_page_outputs = h == "1";
    }
    for (const std::string &w : split(env("REDFUSE_JIT_FLAGS"), ' ')) o.jit_extra_flags.push_back(w);
    return o;
}

void install_environment_once() {
    static std::once_flag once;
    std::call_once(once, [] { install_runtime_settings(runtime_settings_from_environment()); });
}

}  // namespace rf
