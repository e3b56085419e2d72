/** \file localize_block_temps_test.cpp
 * The CPU tile pass localize-temps (src/tile/LocalizeBlockTemps.cpp): attention's and softmax's
 * float64 temporaries (m, l, O.sum) become arrays of the row block; an output of the same name as a
 * temporary keeps its store; a temporary read at another block's rows, outside the parallel loop, or
 * by a second kernel stays a buffer; the results agree with the reference at partial row blocks and
 * with the literal recompute taken (fully masked rows); the GPU lowerings keep their temporaries.
 */
#include <gtest/gtest.h>

#include <string>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

std::filesystem::path example(const std::string &name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / name; }
std::filesystem::path test_spec(const std::string &name) { return std::filesystem::path(REDFUSE_SOURCE_DIR) / "tests" / "specs" / name; }

Module lowered(const std::filesystem::path &spec, TargetKind target, const Options &o = {}) {
    auto c = analyze_source(test::read_text(spec), spec.filename().string(), make_target(target), o);
    return generate(*c).module;
}

int temporaries(const Module &m) {
    int n = 0;
    for (const Buffer &b : m.buffers) n += b.role == Buffer::Role::Temp;
    return n;
}

bool contains(const std::string &text, const std::string &what) { return text.find(what) != std::string::npos; }

/** A kernel over R rows in blocks of 4 that stores T[rbase + rr] and then reads T[read_row]. */
Module block_kernel(Expr read_row, bool read_outside = false) {
    Module m;
    m.sizes = {"R"};
    Expr R = make_size("R");
    m.buffers.push_back({"X", Buffer::Role::Input, DType::f32, {R}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {R}});
    m.buffers.push_back({"T", Buffer::Role::Temp, DType::f64, {R}});
    Expr rbase = make_index("$rbase"), nbv = make_index("$nbv"), rr = make_index("$rr"), row = make_index("$row");
    auto X = [](Expr i) { return make_load("X", {i}, DType::f32, SType::Real); };
    auto Y = [](Expr i) { return make_load("Y", {i}, DType::f32, SType::Real); };
    auto T = [](Expr i) { return make_load("T", {i}, DType::f64, SType::Real); };
    std::vector<StmtP> body = {
        decl("$rbase", LocalClass::Index, {}, make_mul(row, int_c(4))),
        decl("$nbv", LocalClass::Index, {}, make_min(int_c(4), make_sub(R, rbase))),
        for_loop(rr, int_c(0), nbv, {store(T(make_add(rbase, rr)), make_mul(X(make_add(rbase, rr)), real_c(2)))}, LoopKind::Independent),
        for_loop(rr, int_c(0), nbv, {store(Y(make_add(rbase, rr)), T(read_row))}, LoopKind::Independent),
    };
    tile::Kernel k;
    k.name = "k0";
    StmtP par = for_loop(row, int_c(0), make_idiv(make_add(R, int_c(3)), int_c(4)), body, LoopKind::Parallel);
    k.body = read_outside ? block({par, store(Y(int_c(0)), T(int_c(0)))}) : par;
    m.kernels.push_back(k);
    return m;
}

}  // namespace

TEST(LocalizeBlockTemps, AttentionKeepsItsRowValuesInArraysOfTheBlock) {
    ArenaScope arena;
    for (const char *name : {"attention.rf", "attention_gqa.rf", "decode_gqa.rf", "mla_decode.rf", "softmax.rf"}) {
        Module m = lowered(example(name), TargetKind::Cpu);
        std::string t = to_string(m);
        EXPECT_EQ(temporaries(m), 0) << name << "\n" << t;
        EXPECT_TRUE(contains(t, "state $blk0[")) << name << "\n" << t;
        EXPECT_FALSE(contains(t, "store m[")) << name << "\n" << t;
    }
    // The GPU lowerings keep them (the pass is CPU only).
    EXPECT_GT(temporaries(lowered(example("attention.rf"), TargetKind::OpenCL)), 0);
}

TEST(LocalizeBlockTemps, AnOutputOfTheSameNameKeepsItsStore) {
    ArenaScope arena;
    std::string t = to_string(lowered(test_spec("masked_entropy.rf"), TargetKind::Cpu));
    EXPECT_TRUE(contains(t, "store s[$rbase + $rr] = $blk")) << t;
    EXPECT_TRUE(contains(t, "store t[$rbase + $rr] = $blk")) << t;
}

TEST(LocalizeBlockTemps, OnlyReadsOfTheBlocksOwnRowsInsideTheParallelLoop) {
    ArenaScope arena;
    Expr own = make_add(make_index("$rbase"), make_index("$rr"));
    Module ok = localize_block_temps(block_kernel(own));
    EXPECT_NO_THROW(verify(ok));
    EXPECT_EQ(ok.find("T"), nullptr) << to_string(ok);
    EXPECT_TRUE(contains(to_string(ok), "$blk0[$rr] = X[$rbase + $rr] * 2")) << to_string(ok);
    // Another block's row, a row that is no loop variable, a read after the parallel loop: kept.
    for (Module m : {block_kernel(make_add(own, int_c(1))), block_kernel(make_index("$rbase")), block_kernel(own, true)}) {
        Module r = localize_block_temps(m);
        EXPECT_NE(r.find("T"), nullptr) << to_string(r);
        EXPECT_FALSE(contains(to_string(r), "$blk")) << to_string(r);
    }
}

TEST(LocalizeBlockTemps, TemporariesOfSeveralKernelsStay) {
    ArenaScope arena;
    Options o;
    o.unfused = true;
    EXPECT_GT(temporaries(lowered(example("attention.rf"), TargetKind::Cpu, o)), 0);
}

TEST(LocalizeBlockTemps, AgreeWithTheReferenceAtPartialBlocksAndMaskedRows) {
    // M past a row block (partial last block); the sliding window and causal masks; fully masked rows
    // of masked_entropy take the literal recompute that reads the localized m.
    RunOptions o;
    o.sizes = {{"M", 131}, {"N", 77}};
    test::check_run(example("attention.rf"), test::read_text(example("attention.rf")), o, "cpu", {1, 2});
    o.sizes = {{"N", 150}};
    test::check_run(example("attention_causal.rf"), test::read_text(example("attention_causal.rf")), o, "cpu", {3});
    RunOptions e;
    test::check_run(test_spec("masked_entropy.rf"), test::read_text(test_spec("masked_entropy.rf")), e, "cpu", {1});
}
