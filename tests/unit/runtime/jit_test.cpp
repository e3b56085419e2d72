/** \file jit_test.cpp
 * The JIT cache: compile and call, cache hits, keys, concurrent processes and threads, corrupt
 * entries rebuilt, compiler errors naming the kept source, no shell, SHA-256 test vectors, and the
 * sanitizers of a sanitized build passed on to the generated kernels.
 */
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "TempDir.h"
#include "driver/Environment.h"
#include "runtime/CpuBackend.h"
#include "runtime/RuntimeSettings.h"
#include "runtime/Jit.h"
#include "runtime/Sha256.h"
#include "support/Error.h"

using namespace rf;
namespace fs = std::filesystem;

namespace {

const char *kAdd = "extern \"C\" double add(double a, double b) { return a + b; }\n";
using AddFn = double (*)(double, double);

class Jit : public ::testing::Test {
protected:
    Jit() { opts.cache_dir = dir.path(); }

    /** Names of the files in the cache directory, sorted. */
    std::vector<std::string> entries() const {
        std::vector<std::string> out;
        for (const auto &e : fs::directory_iterator(dir.path())) out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }
    std::vector<std::string> entry_set(const std::string &key, std::vector<std::string> exts) const {
        std::vector<std::string> out;
        for (const std::string &e : exts) out.push_back(key + e);
        std::sort(out.begin(), out.end());
        return out;
    }

    test::TempDir dir;
    JitOptions opts;
};

double call_add(const std::shared_ptr<SharedObject> &so, double a, double b) {
    return so->function<AddFn>("add")(a, b);
}

/** Restores an environment variable on scope exit. */
class EnvGuard {
public:
    explicit EnvGuard(const char *name) : name_(name) {
        if (const char *v = std::getenv(name)) old_ = v;
    }
    ~EnvGuard() {
        if (old_) ::setenv(name_, old_->c_str(), 1);
        else ::unsetenv(name_);
    }
    void set(const char *value) {
        if (value) ::setenv(name_, value, 1);
        else ::unsetenv(name_);
    }

private:
    const char *name_;
    std::optional<std::string> old_;
};

}  // namespace

TEST_F(Jit, CompilesAndCalls) {
    auto so = jit_compile(kAdd, opts);
    EXPECT_FALSE(so->from_cache());
    EXPECT_EQ(call_add(so, 2.5, 4.0), 6.5);
    std::string key = jit_cache_key(kAdd, opts);
    EXPECT_EQ(key.size(), 64u);
    EXPECT_EQ(so->path(), dir.path() + "/" + key + ".so");
    // The entry is the object, its stamp and the kept source; no temporaries, no log on success.
    EXPECT_EQ(entries(), entry_set(key, {".cpp", ".ok", ".so"}));
    std::ifstream src(dir.path() + "/" + key + ".cpp");
    std::string text((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, kAdd);
}

TEST_F(Jit, SecondCompileIsACacheHit) {
    auto a = jit_compile(kAdd, opts);
    auto b = jit_compile(kAdd, opts);
    EXPECT_FALSE(a->from_cache());
    EXPECT_TRUE(b->from_cache());
    EXPECT_EQ(a->path(), b->path());
    a.reset();  // the cached handle must stand on its own
    EXPECT_EQ(call_add(b, 1, 2), 3);
}

TEST_F(Jit, KeyCoversFlagsSourceAndExtra) {
    JitOptions o1 = opts, o2 = opts;
    o1.flags = {"-O1"};
    o2.flags = {"-O2"};
    EXPECT_NE(jit_cache_key(kAdd, o1), jit_cache_key(kAdd, o2));
    EXPECT_EQ(jit_cache_key(kAdd, o1), jit_cache_key(kAdd, o1));
    EXPECT_NE(jit_cache_key(kAdd, o1), jit_cache_key(std::string(kAdd) + "\n", o1));
    JitOptions o3 = o1;
    o3.key_extra = "header v2";
    EXPECT_NE(jit_cache_key(kAdd, o1), jit_cache_key(kAdd, o3));
    // Flag boundaries matter: {"-O", "2"} is not {"-O2"}.
    JitOptions o4 = opts;
    o4.flags = {"-O", "2"};
    EXPECT_NE(jit_cache_key(kAdd, o2), jit_cache_key(kAdd, o4));

    auto a = jit_compile(kAdd, o1);
    auto b = jit_compile(kAdd, o2);
    EXPECT_FALSE(b->from_cache());
    EXPECT_NE(a->path(), b->path());
    EXPECT_EQ(call_add(b, 1, 1), 2);
}

TEST_F(Jit, ConcurrentProcessesShareOneEntry) {
    constexpr int kChildren = 6;
    // Children block on a pipe until all exist, so their compilations really overlap.
    int gate[2];
    ASSERT_EQ(::pipe(gate), 0);
    std::vector<pid_t> pids;
    for (int i = 0; i < kChildren; i++) {
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::close(gate[1]);
            char c;
            while (::read(gate[0], &c, 1) > 0) {
            }
            int code = 0;
            try {
                auto so = jit_compile(kAdd, opts);
                code = call_add(so, 1, 2) == 3 ? 0 : 1;
            } catch (...) {
                code = 2;
            }
            ::_exit(code);  // not exit(): the child must not run the test framework's atexit work
        }
        pids.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);
    for (pid_t pid : pids) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    }
    std::string key = jit_cache_key(kAdd, opts);
    EXPECT_EQ(entries(), entry_set(key, {".cpp", ".ok", ".so"}));
    auto so = jit_compile(kAdd, opts);
    EXPECT_TRUE(so->from_cache());  // whichever rename won, its stamp matches
    EXPECT_EQ(call_add(so, 3, 4), 7);
}

TEST_F(Jit, ConcurrentThreads) {
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int i = 0; i < 4; i++)
        threads.emplace_back([&, i] {
            try {
                ok[i] = call_add(jit_compile(kAdd, opts), 2, 2) == 4;
            } catch (...) {
            }
        });
    for (auto &t : threads) t.join();
    EXPECT_EQ(ok, std::vector<int>(4, 1));
    EXPECT_EQ(entries(), entry_set(jit_cache_key(kAdd, opts), {".cpp", ".ok", ".so"}));
}

namespace {

/** Fills the cache, damages the entry with `damage`, and checks the next compile rebuilds it (not a
 *  cache hit, works) and that the one after is a cache hit again. */
void expect_rebuilt(const JitOptions &opts, const std::function<void(const std::string &base)> &damage) {
    std::string base = opts.cache_dir + "/" + jit_cache_key(kAdd, opts);
    {
        auto so = jit_compile(kAdd, opts);
        EXPECT_EQ(call_add(so, 1, 1), 2);
    }  // released, so the damaged file is not still mapped by this process
    damage(base);
    auto rebuilt = jit_compile(kAdd, opts);
    EXPECT_FALSE(rebuilt->from_cache());
    EXPECT_EQ(call_add(rebuilt, 5, 6), 11);
    rebuilt.reset();
    auto again = jit_compile(kAdd, opts);
    EXPECT_TRUE(again->from_cache());
    EXPECT_EQ(call_add(again, 5, 6), 11);
}

std::string slurp(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_F(Jit, TruncatedObjectIsRebuilt) {
    expect_rebuilt(opts, [](const std::string &base) {
        auto size = fs::file_size(base + ".so");
        fs::resize_file(base + ".so", size / 2);
    });
}

TEST_F(Jit, CorruptedByteIsRebuilt) {
    expect_rebuilt(opts, [](const std::string &base) {
        std::string bytes = slurp(base + ".so");
        bytes[bytes.size() / 2] ^= 0x5a;
        std::ofstream(base + ".so", std::ios::binary | std::ios::trunc) << bytes;
    });
}

TEST_F(Jit, MissingStampIsRebuilt) {
    expect_rebuilt(opts, [](const std::string &base) { fs::remove(base + ".ok"); });
}

TEST_F(Jit, GarbledStampIsRebuilt) {
    expect_rebuilt(opts, [](const std::string &base) { std::ofstream(base + ".ok") << "size 1\nsha256 00\n"; });
}

TEST_F(Jit, MissingObjectIsRebuilt) {
    expect_rebuilt(opts, [](const std::string &base) { fs::remove(base + ".so"); });
}

TEST_F(Jit, UnloadableObjectWithValidStampIsRebuilt) {
    // An object that matches its stamp but that dlopen refuses (here: not ELF at all).
    expect_rebuilt(opts, [](const std::string &base) {
        std::string garbage = "not an ELF file";
        std::ofstream(base + ".so", std::ios::binary | std::ios::trunc) << garbage;
        // The stamp format of Jit.cpp, reproduced so the stamp says this garbage is intact.
        std::ofstream(base + ".ok", std::ios::trunc)
            << "redfuse-jit-v1\nsize " << garbage.size() << "\nsha256 " << sha256_hex(garbage) << "\n";
    });
}

TEST_F(Jit, CompilerErrorNamesKeptSource) {
    const std::string bad = "extern \"C\" int broken( { return undeclared_name; }\n";
    std::string key = jit_cache_key(bad, opts);
    for (bool keep : {true, false}) {
        fs::remove_all(dir.path());
        opts.keep_source = keep;
        try {
            jit_compile(bad, opts);
            FAIL() << "expected an InternalError";
        } catch (const InternalError &e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find(dir.path() + "/" + key + ".cpp"), std::string::npos) << msg;
            EXPECT_NE(msg.find(dir.path() + "/" + key + ".log"), std::string::npos) << msg;
            EXPECT_NE(msg.find("error"), std::string::npos) << msg;  // the compiler's own diagnostics
        }
        // The source is kept even with keep_source = false; nothing loadable is left behind.
        EXPECT_EQ(entries(), entry_set(key, {".cpp", ".log"})) << "keep_source " << keep;
        EXPECT_EQ(slurp(dir.path() + "/" + key + ".cpp"), bad);
    }
}

TEST_F(Jit, KeepSourceFalseLeavesOnlyTheObject) {
    opts.keep_source = false;
    auto so = jit_compile(kAdd, opts);
    EXPECT_EQ(call_add(so, 1, 2), 3);
    EXPECT_EQ(entries(), entry_set(jit_cache_key(kAdd, opts), {".ok", ".so"}));
}

TEST_F(Jit, MissingSymbolNamesTheFile) {
    auto so = jit_compile(kAdd, opts);
    try {
        so->symbol("no_such_kernel");
        FAIL() << "expected an InternalError";
    } catch (const InternalError &e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("no_such_kernel"), std::string::npos) << msg;
        EXPECT_NE(msg.find(so->path()), std::string::npos) << msg;
    }
}

TEST_F(Jit, FlagsAreNeverSeenByAShell) {
    // Through a shell this would create a file; as one argv element it is just an unused macro.
    std::string marker = dir.path() + "/shell-ran";
    opts.flags = {"-DUNUSED=$(touch " + marker + ")", "-DALSO_UNUSED=`touch " + marker + "`;"};
    auto so = jit_compile(kAdd, opts);
    EXPECT_EQ(call_add(so, 1, 2), 3);
    EXPECT_FALSE(fs::exists(marker));
}

TEST_F(Jit, CompilerCommandIsSplitIntoWords) {
    // Like CXX="ccache g++": a wrapper word, then the compiler.
    opts.compiler = "env c++";
    auto so = jit_compile(kAdd, opts);
    EXPECT_EQ(call_add(so, 1, 2), 3);
    EXPECT_FALSE(compiler_identity("env c++").empty());
}

TEST_F(Jit, MissingCompilerIsAUserError) {
    opts.compiler = "/nonexistent/redfuse-no-such-compiler";
    EXPECT_THROW(jit_compile(kAdd, opts), UserError);
    EXPECT_THROW(compiler_identity(opts.compiler), UserError);
}

TEST(JitIdentity, FirstLineOfVersionCachedPerProcess) {
    std::string id = compiler_identity("");
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(id.find('\n'), std::string::npos);
    EXPECT_EQ(compiler_identity(""), id);
}

TEST(JitCacheDir, EnvironmentPrecedence) {
    // The environment is read by the driver (driver/Environment.cpp) into the runtime's settings;
    // default_cache_dir() answers from the settings installed.
    EnvGuard rf_dir("REDFUSE_CACHE_DIR"), xdg("XDG_CACHE_HOME"), home("HOME");
    RuntimeSettings before = runtime_settings();
    auto cache_dir_now = [] {
        install_runtime_settings(runtime_settings_from_environment());
        return default_cache_dir();
    };
    rf_dir.set("/r/cache");
    xdg.set("/x");
    home.set("/h");
    EXPECT_EQ(cache_dir_now(), "/r/cache");
    rf_dir.set("");  // empty counts as unset
    EXPECT_EQ(cache_dir_now(), "/x/redfuse");
    xdg.set("relative/dir");  // the XDG spec says to ignore a relative path
    EXPECT_EQ(cache_dir_now(), "/h/.cache/redfuse");
    xdg.set(nullptr);
    EXPECT_EQ(cache_dir_now(), "/h/.cache/redfuse");
    home.set(nullptr);
    EXPECT_THROW(cache_dir_now(), UserError);
    install_runtime_settings(before);
}

TEST_F(Jit, UnusableCacheDirIsAUserError) {
    std::string file = dir.path() + "/a-file";
    std::ofstream(file) << "x";
    opts.cache_dir = file + "/sub";
    EXPECT_THROW(jit_compile(kAdd, opts), UserError);
}

TEST(Sha256, Fips180Vectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShot) {
    std::string text;
    for (int i = 0; i < 300; i++) text += static_cast<char>(i * 7 + 3);
    for (size_t split : {0, 1, 55, 56, 63, 64, 65, 128, 200, 300}) {
        Sha256 h;
        h.update(std::string_view(text).substr(0, split));
        h.update(std::string_view(text).substr(split));
        EXPECT_EQ(h.hex(), sha256_hex(text)) << split;
    }
}

TEST(CpuJitFlags, SanitizedBuildsCompileTheKernelsWithTheSanitizers) {
    // scripts/test.sh's second pass (-DREDFUSE_SANITIZE=ON) checks the generated kernels too: their
    // flags carry the sanitizers, which makes them part of the cache key (no plain entry is reused).
    std::vector<std::string> flags = cpu_jit_flags(CpuFeatures{});
    bool sanitized = std::find(flags.begin(), flags.end(), "-fsanitize=address,undefined") != flags.end();
    auto has = [&](const char *f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
#ifdef REDFUSE_SANITIZE
    EXPECT_TRUE(sanitized);
    EXPECT_TRUE(has("-O1") && !has("-O3"));  // sanitized kernels compile ~3.5x faster at -O1
#else
    EXPECT_FALSE(sanitized);
    EXPECT_TRUE(kernel_sanitizer_flags().empty());
    EXPECT_TRUE(has("-O3") && !has("-O1"));
#endif
    JitOptions plain, with;
    plain.flags = {"-O3"};
    with.flags = {"-O3", "-fsanitize=address,undefined"};
    EXPECT_NE(jit_cache_key(kAdd, plain), jit_cache_key(kAdd, with));
}

#ifdef REDFUSE_SANITIZE
TEST_F(Jit, SanitizedKernelReportsAnOutOfBoundsWrite) {
    // A generated kernel's overflow is caught inside the kernel (ASan instruments the JIT-compiled
    // code; without the flags the write would go unnoticed in uninstrumented code).
    // Built and loaded in the death test's child only: a sanitized module that is loaded and closed
    // leaves ASan's bookkeeping for it behind, which LeakSanitizer reports at the parent's exit.
    const char *poke = "extern \"C\" void poke(int *p, int n) { p[n] = 1; }\n";
    JitOptions o = opts;
    o.flags = cpu_jit_flags(CpuFeatures{});
    EXPECT_DEATH(
        {
            auto so = jit_compile(poke, o);
            auto fn = so->function<void (*)(int *, int)>("poke");
            std::vector<int> v(4);
            fn(v.data(), static_cast<int>(v.size()));
        },
        "heap-buffer-overflow");
}
#endif
