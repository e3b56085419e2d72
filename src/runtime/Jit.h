/** \file Jit.h
 * Compiles generated C++ with the system compiler into a cached shared object and loads it.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace rf {

struct JitOptions {
    /** The compiler command; empty means $CXX, else "c++", looked up on PATH. Split on whitespace
     *  (no shell quoting), so CXX="ccache g++" works. */
    std::string compiler;
    /** Extra flags, e.g. {"-O3", "-fopenmp"} plus march_flags(host_cpu()). "-std=c++17 -shared -fPIC"
     *  come first, so a flag here can override them. Use explicit -m flags rather than -march=native:
     *  the cache key sees the flags, not what "native" meant on the machine that filled the cache. */
    std::vector<std::string> flags;
    /** Empty means default_cache_dir(). Created if missing. */
    std::string cache_dir;
    /** Keep `<key>.cpp` next to the object (it is kept on a compile error regardless). */
    bool keep_source = true;
    /** Mixed into the cache key: e.g. the text of headers the source #includes, whose changes the
     *  source hash alone would not see. */
    std::string key_extra;
};

/** An open dlopen handle (RTLD_NOW | RTLD_LOCAL), closed on destruction. */
class SharedObject {
public:
    /** dlopens `path`; InternalError naming the file and dlerror() on failure. */
    static std::shared_ptr<SharedObject> open(const std::string &path, bool from_cache = false);
    ~SharedObject();
    SharedObject(const SharedObject &) = delete;
    SharedObject &operator=(const SharedObject &) = delete;

    /** The address of `name`; InternalError naming the file and the symbol if it is missing. */
    void *symbol(const std::string &name) const;
    /** `symbol` cast to a function pointer type: `so->function<double (*)(double, double)>("add")`. */
    template <typename Fn>
    Fn function(const std::string &name) const {
        return reinterpret_cast<Fn>(symbol(name));
    }
    const std::string &path() const { return path_; }
    /** True when jit_compile found a valid entry and did not run the compiler. */
    bool from_cache() const { return from_cache_; }

private:
    SharedObject(void *handle, std::string path, bool from_cache)
        : handle_(handle), path_(std::move(path)), from_cache_(from_cache) {}
    void *handle_;
    std::string path_;
    bool from_cache_;
};

/** Returns the object for `source`, from the cache when a verified entry exists, else compiled now.
 *  A compiler failure is an InternalError (generated code must compile) naming the kept source and
 *  the compiler log and quoting the first diagnostics; a missing compiler or an unusable cache
 *  directory is a UserError (the environment, not redfuse, is wrong). Safe to call concurrently from
 *  threads and processes sharing a cache directory. */
std::shared_ptr<SharedObject> jit_compile(const std::string &source, const JitOptions &opts = {});

/** The first line of `compiler --version`, cached per process. UserError if it cannot be run. */
std::string compiler_identity(const std::string &compiler);

/** $REDFUSE_CACHE_DIR, else $XDG_CACHE_HOME/redfuse, else $HOME/.cache/redfuse (empty variables
 *  count as unset; the XDG spec also ignores a relative XDG_CACHE_HOME). */
std::string default_cache_dir();

/** The cache key (64 hex digits) jit_compile uses for `source` under `opts`. */
std::string jit_cache_key(const std::string &source, const JitOptions &opts);

}  // namespace rf
