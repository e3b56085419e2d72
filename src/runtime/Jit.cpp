/** \file Jit.cpp
 * The JIT cache of Jit.h: compiler runs without a shell, atomic renames, and integrity stamps.
 *
 * A cache entry for key K (SHA-256 of the compiler identity, the command, the flags and the source)
 * is `K.so`, `K.cpp` (kept source), and `K.ok`, a stamp holding the size and SHA-256 of `K.so`.
 * Every file is written under a name unique to this process and call, then rename(2)d into place,
 * so a reader sees either no file or a complete one, whatever other processes are doing. The stamp
 * is written after the object, and an object is loaded only when it matches its stamp: a truncated
 * or corrupted object (a crash, a full disk, a stray write, no fsync before a power cut) fails the
 * check and is rebuilt, never loaded. Two processes racing on one key both compile and both rename;
 * the last rename wins, and since both objects come from the same input that is harmless. If two
 * such builds ever differed byte for byte, the stamp of one could end up next to the object of the
 * other: the next reader then rebuilds once, which costs time, never correctness.
 */
#include "runtime/Jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/RuntimeSettings.h"
#include "runtime/Sha256.h"
#include "support/Error.h"

extern char **environ;

namespace rf {

namespace fs = std::filesystem;

namespace {

// Changing what an entry means (stamp format, fixed flags) must change every key.
constexpr const char *kKeyVersion = "redfuse-jit-v1";
const std::vector<std::string> kFixedFlags = {"-std=c++17", "-shared", "-fPIC"};
constexpr int kDiagnosticLines = 20;

std::vector<std::string> split_words(const std::string &s) {
    std::vector<std::string> out;
    std::istringstream is(s);
    for (std::string w; is >> w;) out.push_back(w);
    return out;
}

std::vector<std::string> compiler_command(const std::string &compiler) {
    std::string c = compiler;
    if (c.empty()) c = runtime_settings().cxx;
    if (c.empty()) c = "c++";
    std::vector<std::string> words = split_words(c);
    if (words.empty()) throw UserError({}, "the C++ compiler command is blank (JitOptions::compiler or $CXX)");
    return words;
}

std::string join(const std::vector<std::string> &words) {
    std::string out;
    for (const std::string &w : words) out += (out.empty() ? "" : " ") + w;
    return out;
}

// Unique per process (pid) and per call within it (counter), hence per thread as well.
std::string temp_suffix() {
    static std::atomic<uint64_t> counter{0};
    return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

/** Removes a temporary file on scope exit unless it was renamed away. */
struct TempFile {
    std::string path;
    explicit TempFile(std::string p) : path(std::move(p)) {}
    ~TempFile() {
        if (!path.empty()) ::unlink(path.c_str());
    }
    void rename_to(const std::string &dest) {
        if (::rename(path.c_str(), dest.c_str()) != 0)
            throw UserError({}, "cannot rename " + path + " to " + dest + ": " + std::strerror(errno));
        path.clear();
    }
};

void write_file(const std::string &path, const std::string &content) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(content.data(), static_cast<std::streamsize>(content.size()));
    f.close();
    if (!f) throw UserError({}, "cannot write " + path + ": " + std::strerror(errno));
}

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream os;
    os << f.rdbuf();
    return os.str();
}

/** Runs argv[0] (found on PATH) with stdin from /dev/null and stdout+stderr going to `log_path`, or
 *  into `*capture` when log_path is empty. Returns the exit status, 128 + signal if it was killed,
 *  or -1 with `spawn_errno` set when it could not be started. No shell ever sees the arguments. */
int run_process(const std::vector<std::string> &argv, const std::string &log_path, std::string *capture,
                int &spawn_errno) {
    std::vector<char *> cargv;
    for (const std::string &a : argv) cargv.push_back(const_cast<char *>(a.c_str()));
    cargv.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    int pipe_fd[2] = {-1, -1};
    if (!log_path.empty()) {
        posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    } else {
        // O_CLOEXEC so children spawned concurrently by other threads do not hold the write end open.
        if (::pipe2(pipe_fd, O_CLOEXEC) != 0) {
            spawn_errno = errno;
            posix_spawn_file_actions_destroy(&fa);
            return -1;
        }
        posix_spawn_file_actions_adddup2(&fa, pipe_fd[1], 1);
        posix_spawn_file_actions_adddup2(&fa, pipe_fd[1], 2);
    }
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (pipe_fd[1] >= 0) ::close(pipe_fd[1]);
    if (rc != 0) {
        if (pipe_fd[0] >= 0) ::close(pipe_fd[0]);
        spawn_errno = rc;
        return -1;
    }
    if (pipe_fd[0] >= 0) {
        char buf[4096];
        for (;;) {
            ssize_t n = ::read(pipe_fd[0], buf, sizeof buf);
            if (n > 0) {
                capture->append(buf, static_cast<size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                break;
            }
        }
        ::close(pipe_fd[0]);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            spawn_errno = errno;
            return -1;
        }
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

std::string first_lines(const std::string &text, int n) {
    std::string out;
    std::istringstream is(text);
    int i = 0;
    std::string line;
    for (; i < n && std::getline(is, line); i++) out += "  " + line + "\n";
    if (std::getline(is, line)) out += "  ...\n";
    return out;
}

std::string stamp_text(uint64_t size, const std::string &hex) {
    return std::string(kKeyVersion) + "\nsize " + std::to_string(size) + "\nsha256 " + hex + "\n";
}

/** True when `so` exists and matches the size and hash recorded in `stamp`. */
bool entry_valid(const std::string &so, const std::string &stamp) {
    std::string recorded = read_file(stamp);
    if (recorded.empty()) return false;
    std::string hex;
    uint64_t size = 0;
    if (!sha256_file(so, hex, size)) return false;
    return recorded == stamp_text(size, hex);
}

void ensure_dir(const std::string &dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw UserError({}, "cannot create the JIT cache directory " + dir + ": " +
                                (ec ? ec.message() : std::string("not a directory")));
}

}  // namespace

// ---- SharedObject ---------------------------------------------------------------------------------

std::shared_ptr<SharedObject> SharedObject::open(const std::string &path, bool from_cache) {
    // RTLD_NOW: an unresolved symbol fails here, not at the first call; RTLD_LOCAL: kernels do not
    // leak symbols into each other or into the host.
    void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = ::dlerror();
        internal_error("cannot load " + path + ": " + (err ? err : "dlopen failed"), __FILE__, __LINE__);
    }
    return std::shared_ptr<SharedObject>(new SharedObject(h, path, from_cache));
}

SharedObject::~SharedObject() {
    if (handle_) ::dlclose(handle_);
}

void *SharedObject::symbol(const std::string &name) const {
    ::dlerror();
    void *p = ::dlsym(handle_, name.c_str());
    if (!p) {
        const char *err = ::dlerror();
        internal_error("symbol '" + name + "' not found in " + path_ + (err ? std::string(": ") + err : ""),
                       __FILE__, __LINE__);
    }
    return p;
}

// ---- compiler and cache ---------------------------------------------------------------------------

std::string compiler_identity(const std::string &compiler) {
    static std::mutex mu;
    static std::map<std::string, std::string> cache;
    std::vector<std::string> argv = compiler_command(compiler);
    std::string cmd = join(argv);
    {
        std::lock_guard<std::mutex> lock(mu);
        auto it = cache.find(cmd);
        if (it != cache.end()) return it->second;
    }
    argv.push_back("--version");
    std::string out;
    int err = 0;
    int rc = run_process(argv, "", &out, err);
    if (rc < 0)
        throw UserError({}, "cannot run the C++ compiler '" + cmd + "': " + std::strerror(err) +
                                " (set CXX or JitOptions::compiler)");
    std::string first = out.substr(0, out.find('\n'));
    if (rc != 0 || first.empty())
        throw UserError({}, "'" + cmd + " --version' failed (exit status " + std::to_string(rc) + "): " + first);
    std::lock_guard<std::mutex> lock(mu);
    cache[cmd] = first;
    return first;
}

std::string default_cache_dir() {
    const RuntimeSettings &s = runtime_settings();
    if (s.cache_dir.empty()) throw UserError({}, s.cache_dir_error.empty() ? "no JIT cache directory" : s.cache_dir_error);
    return s.cache_dir;
}

std::string jit_cache_key(const std::string &source, const JitOptions &opts) {
    std::vector<std::string> cmd = compiler_command(opts.compiler);
    Sha256 h;
    // Length-prefixed fields: no two different inputs concatenate to the same byte stream.
    auto field = [&h](const std::string &s) {
        h.update(std::to_string(s.size()) + ":");
        h.update(s);
    };
    field(kKeyVersion);
    field(compiler_identity(opts.compiler));
    for (const std::string &w : cmd) field(w);
    field("flags");
    for (const std::string &f : kFixedFlags) field(f);
    for (const std::string &f : opts.flags) field(f);
    field("extra");
    field(opts.key_extra);
    field("source");
    field(source);
    return h.hex();
}

std::shared_ptr<SharedObject> jit_compile(const std::string &source, const JitOptions &opts) {
    const std::string dir = opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir;
    ensure_dir(dir);
    const std::string key = jit_cache_key(source, opts);
    const std::string base = dir + "/" + key;
    const std::string so_path = base + ".so", src_path = base + ".cpp", ok_path = base + ".ok",
                      log_path = base + ".log";

    if (entry_valid(so_path, ok_path)) {
        try {
            return SharedObject::open(so_path, /*from_cache=*/true);
        } catch (const InternalError &) {
            // A verified object that does not load (e.g. a library it needs was removed): rebuild.
        }
    }

    // Temporaries keep their extension: the compiler driver picks the language by it.
    const std::string tmp_base = base + temp_suffix();
    TempFile tmp_src(tmp_base + ".cpp"), tmp_so(tmp_base + ".so"), tmp_log(tmp_base + ".log"),
        tmp_ok(tmp_base + ".ok");
    write_file(tmp_src.path, source);
    // Compile the source under its final name when it is kept, so diagnostics and the object's
    // file symbol name it; the rename is atomic, so a concurrent writer of the same key is harmless.
    std::string compiled_src = tmp_src.path;
    if (opts.keep_source) {
        tmp_src.rename_to(src_path);
        compiled_src = src_path;
    }

    std::vector<std::string> argv = compiler_command(opts.compiler);
    argv.insert(argv.end(), kFixedFlags.begin(), kFixedFlags.end());
    argv.insert(argv.end(), opts.flags.begin(), opts.flags.end());
    argv.insert(argv.end(), {"-o", tmp_so.path, compiled_src});
    int err = 0;
    int rc = run_process(argv, tmp_log.path, nullptr, err);
    if (rc < 0)
        throw UserError({}, "cannot run the C++ compiler '" + argv[0] + "': " + std::strerror(err) +
                                " (set CXX or JitOptions::compiler)");
    if (rc != 0) {
        std::string diagnostics = read_file(tmp_log.path);
        if (!opts.keep_source) tmp_src.rename_to(src_path);  // an error always keeps the source
        tmp_log.rename_to(log_path);
        std::ostringstream msg;
        msg << "the C++ compiler rejected generated code (exit status " << rc << "); source kept at "
            << src_path << ", full log at " << log_path << "\n  command: " << join(argv)
            << "\n  first diagnostics:\n"
            << first_lines(diagnostics, kDiagnosticLines);
        internal_error(msg.str(), __FILE__, __LINE__);
    }

    std::string hex;
    uint64_t size = 0;
    if (!sha256_file(tmp_so.path, hex, size) || size == 0)
        internal_error("the C++ compiler reported success but wrote no object " + tmp_so.path + " (log: " +
                           read_file(tmp_log.path) + ")",
                       __FILE__, __LINE__);
    tmp_so.rename_to(so_path);
    write_file(tmp_ok.path, stamp_text(size, hex));
    tmp_ok.rename_to(ok_path);
    return SharedObject::open(so_path, /*from_cache=*/false);
}

}  // namespace rf
