/** \file kernel_test.cpp
 * The library API (driver/Kernel.h): compile once, call at many sizes on caller-owned memory;
 * sizes bound from shapes with located errors; strided views; concurrent calls; every target kind
 * through the same object; and the dumps showing exactly what is built.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "interp/Reference.h"
#include "runtime/OpenCLRuntime.h"

namespace rf {
namespace {

std::string example(const std::string &name) { return std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf"; }

const char *kAttentionF32 =
    "size B, H, M, N, D\ninput Q[B, H, M, D] : f32\ninput K[B, H, N, D] : f32\ninput V[B, H, N, D] : f32\n"
    "S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d])\nm[b,h,i] = max(j: S[b,h,i,j])\n"
    "l[b,h,i] = sum(j: exp(S[b,h,i,j] - m[b,h,i]))\n"
    "O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]\noutput O : f32\n";

std::vector<float> random_floats(size_t n, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::normal_distribution<float> d(0.f, 2.f);
    std::vector<float> v(n);
    for (float &x : v) x = d(g);
    return v;
}

/** Softmax of each row in double: the reference for the f32 example. */
std::vector<double> softmax_rows(const std::vector<float> &x, int64_t R, int64_t C) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < R; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++) m = std::max(m, double(x[r * C + c]));
        for (int64_t c = 0; c < C; c++) s += std::exp(double(x[r * C + c]) - m);
        for (int64_t c = 0; c < C; c++) y[r * C + c] = std::exp(double(x[r * C + c]) - m) / s;
    }
    return y;
}

double max_abs_diff(const std::vector<float> &a, const std::vector<double> &b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); i++) d = std::max(d, std::fabs(double(a[i]) - b[i]));
    return std::isnan(d) ? INFINITY : d;
}

double softmax_error(const Kernel &k, int64_t R, int64_t C, uint64_t seed) {
    std::vector<float> x = random_floats(size_t(R * C), seed), y(size_t(R * C), NAN);
    k({{x.data(), DType::f32, {R, C}}}, {{y.data(), DType::f32, {R, C}}});
    return max_abs_diff(y, softmax_rows(x, R, C));
}

TEST(Kernel, OneBuildServesEverySize) {
    ArenaScope arena;
    Kernel k = compile(example("softmax"), make_target(TargetKind::Cpu));
    int64_t builds = kernel_builds();
    for (auto [R, C] : std::vector<std::pair<int64_t, int64_t>>{{7, 37}, {1, 1}, {13, 1000}, {3, 4099}})
        EXPECT_LT(softmax_error(k, R, C, uint64_t(R * C)), 1e-5) << R << "x" << C;
    EXPECT_EQ(kernel_builds(), builds) << "a new size rebuilt the kernel";
}

TEST(Kernel, BindingsOfRecentSizesAreReusedAndStillChecked) {
    // The kernel keeps the bindings of its 16 most recent sizes: cycling through more than that
    // (misses, evictions, hits) gives the right answer every time, and a cached binding does not
    // excuse an output buffer of the wrong extent.
    ArenaScope arena;
    Kernel k = compile(example("softmax"), make_target(TargetKind::Cpu));
    for (int round = 0; round < 3; round++)
        for (int64_t C = 1; C <= 20; C++) EXPECT_LT(softmax_error(k, 3, C * 7, uint64_t(C + round)), 1e-5) << C;
    std::vector<float> x(3 * 14, 1.f), y(3 * 15);
    try {
        k({{x.data(), DType::f32, {3, 14}}}, {{y.data(), DType::f32, {3, 15}}});
        FAIL() << "an output of the wrong extent was accepted";
    } catch (const ArgumentError &e) {
        EXPECT_NE(std::string(e.what()).find("output 'Y' dimension 1 (size C) is 15, but input 'X' dimension 1 gives C = 14"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_EQ(k.output_shapes({{x.data(), DType::f32, {3, 14}}}), (std::vector<std::vector<int64_t>>{{3, 14}}));
}

TEST(Kernel, KnowsItsInputsAndOutputs) {
    ArenaScope arena;
    Kernel k = compile(example("attention"), make_target(TargetKind::Interp));
    ASSERT_EQ(k.inputs().size(), 3u);
    EXPECT_EQ(k.inputs()[0].name, "Q");
    EXPECT_EQ(k.inputs()[0].shape, (std::vector<std::string>{"B", "H", "M", "D"}));
    ASSERT_EQ(k.outputs().size(), 1u);
    EXPECT_EQ(k.outputs()[0].name, "O");
    EXPECT_EQ(k.size_names(), (std::vector<std::string>{"B", "H", "M", "N", "D"}));
    EXPECT_TRUE(k.analysis().contains("chains"));
    EXPECT_NE(k.explain().find("multiplicative"), std::string::npos);
}

ArgumentError::Kind error_kind(const std::function<void()> &f, std::string &message) {
    try {
        f();
    } catch (const ArgumentError &e) {
        message = e.what();
        return e.kind();
    }
    ADD_FAILURE() << "no ArgumentError";
    return ArgumentError::Kind::Count;
}

TEST(Kernel, MismatchedBuffersAreArgumentErrorsNamingInputDimensionAndSize) {
    ArenaScope arena;
    Kernel k = compile(kAttentionF32, make_target(TargetKind::Interp));
    const int64_t B = 1, H = 2, M = 5, N = 7, D = 4;
    std::vector<float> q(B * H * M * D, 1), kk(B * H * N * D, 1), v(B * H * N * D, 1), o(B * H * M * D);
    std::vector<uint16_t> q16(q.size());
    auto view = [](std::vector<float> &x, std::vector<int64_t> s) { return TensorView{x.data(), DType::f32, s}; };
    std::string msg;
    // K's last dimension disagrees with Q's: D is bound by Q first.
    EXPECT_EQ(error_kind([&] { k({view(q, {B, H, M, D}), view(kk, {B, H, N, D + 1}), view(v, {B, H, N, D})}, {view(o, {B, H, M, D})}); }, msg),
              ArgumentError::Kind::Shape);
    EXPECT_NE(msg.find("input 'K' dimension 3 (size D) is 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input 'Q' dimension 3 gives D = 4"), std::string::npos) << msg;
    // The output's shape disagrees with the sizes the inputs bind.
    EXPECT_EQ(error_kind([&] { k({view(q, {B, H, M, D}), view(kk, {B, H, N, D}), view(v, {B, H, N, D})}, {view(o, {B, H, M + 1, D})}); }, msg),
              ArgumentError::Kind::Shape);
    EXPECT_NE(msg.find("'O' dimension 2 (size M)"), std::string::npos) << msg;
    // Rank.
    EXPECT_EQ(error_kind([&] { k({view(q, {B, H, M}), view(kk, {B, H, N, D}), view(v, {B, H, N, D})}, {view(o, {B, H, M, D})}); }, msg),
              ArgumentError::Kind::Shape);
    EXPECT_NE(msg.find("input 'Q' has 3 dimensions"), std::string::npos) << msg;
    // Dtype: the spec declares f32.
    EXPECT_EQ(error_kind([&] { k({{q16.data(), DType::bf16, {B, H, M, D}}, view(kk, {B, H, N, D}), view(v, {B, H, N, D})}, {view(o, {B, H, M, D})}); }, msg),
              ArgumentError::Kind::Dtype);
    EXPECT_NE(msg.find("input 'Q' has dtype bf16; the spec declares f32"), std::string::npos) << msg;
    // Count.
    EXPECT_EQ(error_kind([&] { k({view(q, {B, H, M, D})}, {view(o, {B, H, M, D})}); }, msg), ArgumentError::Kind::Count);
    EXPECT_NE(msg.find("takes 3 inputs, got 1"), std::string::npos) << msg;
    // A zero extent.
    EXPECT_EQ(error_kind([&] { k({view(q, {B, H, 0, D}), view(kk, {B, H, N, D}), view(v, {B, H, N, D})}, {view(o, {B, H, 0, D})}); }, msg),
              ArgumentError::Kind::Shape);
    // A null pointer.
    EXPECT_EQ(error_kind([&] { k({{nullptr, DType::f32, {B, H, M, D}}, view(kk, {B, H, N, D}), view(v, {B, H, N, D})}, {view(o, {B, H, M, D})}); }, msg),
              ArgumentError::Kind::Device);
}

TEST(Kernel, DerivedDimensionsAreCheckedAfterBinding) {
    // GQA: K has Hk = H / G heads; a K with the wrong head count is refused naming it.
    ArenaScope arena;
    Kernel k = compile("size B, H, G, N, D\ninput Q[B, H, D] : f32\ninput K[B, H / G, N, D] : f32\n"
                       "s[b,h,j] = sum(d: Q[b,h,d] * K[b,h/G,j,d])\nm[b,h] = max(j: s[b,h,j])\noutput m\n",
                       make_target(TargetKind::Interp));
    std::vector<float> q(1 * 4 * 3, 1), kk(1 * 2 * 5 * 3, 1), m(4);
    std::string msg;
    // G is no buffer's extent and has no default.
    EXPECT_EQ(error_kind([&] { k({{q.data(), DType::f32, {1, 4, 3}}, {kk.data(), DType::f32, {1, 2, 5, 3}}}, {{m.data(), DType::f32, {1, 4}}}); }, msg),
              ArgumentError::Kind::Shape);
    EXPECT_NE(msg.find("size 'G'"), std::string::npos) << msg;
}

TEST(Kernel, StridedViewsGiveTheSameResultAsDenseOnes) {
    ArenaScope arena;
    Kernel k = compile(example("softmax"), make_target(TargetKind::Cpu));
    const int64_t R = 9, C = 33;
    // X stored transposed (C x R): the view [R, C] has strides {1, R}. Y written into every other
    // column of an R x 2C array.
    std::vector<float> xt = random_floats(size_t(R * C), 5), x(size_t(R * C)), y(size_t(R * 2 * C), -7.f);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) x[r * C + c] = xt[c * R + r];
    k({{xt.data(), DType::f32, {R, C}, {1, R}}}, {{y.data(), DType::f32, {R, C}, {2 * C, 2}}});
    std::vector<double> want = softmax_rows(x, R, C);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            EXPECT_NEAR(y[r * 2 * C + 2 * c], want[r * C + c], 1e-5);
            EXPECT_EQ(y[r * 2 * C + 2 * c + 1], -7.f) << "a gap of the strided output was written";
        }
}

TEST(Kernel, ConcurrentCallsFromTwoThreads) {
    // Each call's result, computed alone first, then again by two threads calling the same kernel
    // at once: bit for bit the same (a call's work split does not depend on other calls).
    ArenaScope arena;
    Kernel k = compile(example("softmax"), make_target(TargetKind::Cpu));
    struct Call {
        int64_t R, C;
        std::vector<float> x, alone, together;
    };
    std::vector<Call> calls;
    for (int i = 0; i < 24; i++) {
        Call c{5 + i % 7, 200 + 37 * i, {}, {}, {}};
        c.x = random_floats(size_t(c.R * c.C), uint64_t(i));
        c.alone.assign(c.x.size(), NAN);
        c.together.assign(c.x.size(), NAN);
        k({{c.x.data(), DType::f32, {c.R, c.C}}}, {{c.alone.data(), DType::f32, {c.R, c.C}}});
        EXPECT_LT(max_abs_diff(c.alone, softmax_rows(c.x, c.R, c.C)), 1e-5);
        calls.push_back(std::move(c));
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; t++)
        threads.emplace_back([&, t] {
            for (size_t i = size_t(t); i < calls.size(); i += 2) {
                Call &c = calls[i];
                k({{c.x.data(), DType::f32, {c.R, c.C}}}, {{c.together.data(), DType::f32, {c.R, c.C}}});
            }
        });
    for (auto &th : threads) th.join();
    for (const Call &c : calls) EXPECT_EQ(std::memcmp(c.alone.data(), c.together.data(), c.x.size() * 4), 0) << c.R << "x" << c.C;
}

TEST(Kernel, PreparedCallsMatchCheckedCalls) {
    // A call prepared once on shapes and strides, then run at new addresses, gives what a checked
    // call gives: dense inputs on the CPU go straight to the entry, strided ones and the
    // interpreter through the checked call; the outputs have the bound shapes; bad inputs fail at
    // prepare with the checked call's error.
    ArenaScope arena;
    for (TargetKind kind : {TargetKind::Cpu, TargetKind::Interp}) {
        Kernel k = compile(example("softmax"), make_target(kind));
        const int64_t R = 6, C = 41;
        std::vector<float> first(size_t(R * C), 0.f);  // prepared on one buffer, run on others
        Kernel::Prepared dense = k.prepare({{first.data(), DType::f32, {R, C}}});
        Kernel::Prepared strided = k.prepare({{first.data(), DType::f32, {R, C}, {1, R}}});
        EXPECT_EQ(dense.output_shapes(), (std::vector<std::vector<int64_t>>{{R, C}}));
        // With the default options (huge-page advice on): until 2026-12-04 that advice kept every
        // prepared call off the direct entry.
        EXPECT_EQ(dense.direct(), kind == TargetKind::Cpu);
        EXPECT_FALSE(strided.direct());
        for (uint64_t seed = 0; seed < 3; seed++) {
            std::vector<float> x = random_floats(size_t(R * C), seed), xt(x.size()), y(x.size(), NAN), yt(x.size(), NAN), want(x.size(), NAN);
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) xt[c * R + r] = x[r * C + c];
            k({{x.data(), DType::f32, {R, C}}}, {{want.data(), DType::f32, {R, C}}});
            const void *dense_buffers[] = {x.data(), y.data()}, *strided_buffers[] = {xt.data(), yt.data()};
            k.run(dense, dense_buffers);
            k.run(strided, strided_buffers);
            EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0) << to_string(kind) << " seed " << seed;
            EXPECT_EQ(std::memcmp(yt.data(), want.data(), yt.size() * 4), 0) << to_string(kind) << " seed " << seed;
        }
        std::string message;
        EXPECT_EQ(error_kind([&] { k.prepare({{first.data(), DType::bf16, {R, C}}}); }, message), ArgumentError::Kind::Dtype) << message;
        EXPECT_EQ(error_kind([&] { k.prepare({{nullptr, DType::f32, {R, C}}}); }, message), ArgumentError::Kind::Device) << message;
        EXPECT_EQ(error_kind([&] { k.prepare({}); }, message), ArgumentError::Kind::Count) << message;
    }
}

TEST(Kernel, EveryTargetKindThroughTheSameObject) {
    ArenaScope arena;
    std::vector<TargetKind> kinds{TargetKind::Interp, TargetKind::InterpF32, TargetKind::Cpu};
    if (ocl::unavailable_reason().empty()) kinds.push_back(TargetKind::OpenCL);
    for (TargetKind kind : kinds) {
        Kernel k = compile(example("softmax"), make_target(kind));
        EXPECT_LT(softmax_error(k, 6, 300, 3), 1e-5) << to_string(kind);
        EXPECT_EQ(k.source().empty(), is_interpreter(kind)) << to_string(kind);
    }
}

TEST(Kernel, TheDumpIsWhatIsBuilt) {
    // analyze --emit cpp|opencl|tile shows exactly what a Kernel (run, bench, emit) builds for the
    // same target and sizes.
    ArenaScope arena;
    Options o;
    o.sizes = {{"B", 1}, {"Hq", 8}, {"Hkv", 2}, {"N", 5000}, {"D", 64}};
    std::vector<TargetKind> kinds{TargetKind::Cpu};
    if (ocl::unavailable_reason().empty()) kinds.push_back(TargetKind::OpenCL);
    for (TargetKind kind : kinds) {
        Target t = make_target(kind);
        Kernel k = compile(example("decode_gqa"), t, o);
        auto c = analyze_file(example("decode_gqa"), t, o);
        EXPECT_EQ(backend_dump(*c, kind == TargetKind::Cpu ? Stage::Cpp : Stage::OpenCL), k.source()) << to_string(kind);
        EXPECT_EQ(backend_dump(*c, Stage::Tile), tile::to_string(k.module())) << to_string(kind);
    }
}

TEST(Kernel, SpecTextOrPath) {
    ArenaScope arena;
    std::string text = "size R = 3, C = 5\ninput X[R, C] : f32\nm[r] = max(c: X[r,c])\noutput m\n";
    Kernel k = compile(text, make_target(TargetKind::Cpu));
    std::vector<float> x = random_floats(15, 1), m(3);
    k({{x.data(), DType::f32, {3, 5}}}, {{m.data(), DType::f32, {3}}});
    for (int r = 0; r < 3; r++) EXPECT_EQ(m[r], *std::max_element(x.begin() + 5 * r, x.begin() + 5 * r + 5));
    EXPECT_THROW(compile("no/such/file.rf", make_target(TargetKind::Cpu)), UserError);
    try {
        compile("size R\ninput X[R] : f32\nY[r] = X[r] +\noutput Y\n", make_target(TargetKind::Cpu));
        ADD_FAILURE() << "a bad spec compiled";
    } catch (const UserError &e) {
        EXPECT_EQ(e.loc().line, 3);
    }
}

TEST(Pipeline, EveryStageAndTilePassCanBeDumpedByName) {
    ArenaScope arena;
    Options o;
    std::ostringstream out;
    o.dump_stream = &out;
    for (const std::string &name : dump_names()) o.dumps.push_back(parse_dump(name));
    auto c = analyze_file(example("attention"), make_target(TargetKind::Cpu), o);
    generate(*c);
    std::string text = out.str();
    EXPECT_NE(text.find("chain [m, l, O.sum]"), std::string::npos) << text;  // plan
    // Each pass's dump is the module after it: exp2 turns exp into exp2.
    std::ostringstream lowered, after_exp2;
    Options a = c->options;
    a.dumps = {parse_dump("tile:lowered")};
    a.dump_stream = &lowered;
    generate(*c, a);
    a.dumps = {parse_dump("tile:after-exp2")};
    a.dump_stream = &after_exp2;
    generate(*c, a);
    EXPECT_EQ(lowered.str().find("exp2("), std::string::npos);
    EXPECT_NE(after_exp2.str().find("exp2("), std::string::npos);
    // A pass turned off is not run (and not dumped).
    std::ostringstream none;
    a.tile_passes = std::vector<std::string>{};
    a.dump_stream = &none;
    generate(*c, a);
    EXPECT_EQ(none.str(), "");
    try {
        parse_dump("tile:after-nothing");
        ADD_FAILURE();
    } catch (const UserError &e) {
        EXPECT_NE(std::string(e.what()).find("tile:after-hoist"), std::string::npos) << "the error lists the valid stages";
    }
}

TEST(Target, TheScheduleComesFromTheTargetNotTheHost) {
    // A described CPU of 7 cores: the forced multi-segment split is 2 x 7 segments, whatever this
    // machine has.
    ArenaScope arena;
    Target t = make_target(TargetKind::Cpu);
    t.cpu.usable_cpus = 7;
    Options o;
    o.strategy = Strategy::MultiSegment;
    auto c = analyze_file(example("softmax"), t, o);
    Generated g = generate(*c);
    ASSERT_FALSE(g.module.kernels.empty());
    EXPECT_EQ(g.module.kernels[0].schedule.segments, 14);
}

TEST(Target, CrossCompilingForAnArchNeedsNoDevice) {
    Target t = make_target(TargetRequest{TargetKind::Cuda, "sm_80", ""});
    EXPECT_FALSE(t.gpu.from_device);
    EXPECT_EQ(t.gpu.arch, "sm_80");
    EXPECT_EQ(t.gpu.workers, 264);
    EXPECT_THROW(make_target(TargetRequest{TargetKind::Cuda, "80", ""}), UserError);
    EXPECT_THROW(make_target(TargetRequest{TargetKind::Cpu, "sm_80", ""}), UserError);
    EXPECT_THROW(parse_target_kind("gpu"), UserError);
    EXPECT_EQ(parse_target_kind("interp-f32"), TargetKind::InterpF32);
}

}  // namespace
}  // namespace rf

namespace rf {
namespace {

TEST(Kernel, OwnsItsArenaAndOutlivesTheCallersScopes) {
    // Compiled inside a scope that ends, called from another thread with no scope at all.
    std::unique_ptr<Kernel> k;
    {
        ArenaScope scope;
        k = std::make_unique<Kernel>(compile(example("softmax"), make_target(TargetKind::Cpu)));
    }
    double err = 0;
    std::thread t([&] { err = softmax_error(*k, 4, 77, 9); });
    t.join();
    EXPECT_LT(err, 1e-5);
}

TEST(Kernel, ItsTextsAreBuiltInItsOwnArena) {
    // analysis() and explain() build expressions (the δ atoms restored to member loads). Made in the
    // caller's arena, they were nodes whose children the kernel's arena frees with the kernel: the
    // next interning of an equal node there read freed memory (Python: `compile(f).analysis` over
    // the examples in a loop crashed in rf::substitute).
    ArenaScope scope;
    auto k = std::make_unique<Kernel>(compile(example("softmax_entropy"), make_target(TargetKind::Interp)));
    size_t before = current_arena().size();
    EXPECT_TRUE(k->analysis().contains("chains"));
    EXPECT_FALSE(k->explain().empty());
    EXPECT_EQ(current_arena().size(), before) << "the kernel's texts interned nodes in the caller's arena";
}

}  // namespace
}  // namespace rf
