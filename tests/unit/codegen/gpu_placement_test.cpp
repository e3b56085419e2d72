/** \file gpu_placement_test.cpp
 * Where the GPU mapping puts locals and statements (GpuPlacement.h): which states become register
 * copies in every thread, which stay in shared memory and why; and the shape of the warp level's
 * CUDA (shuffle reductions, per-warp slots, no work-group barrier).
 */
#include <gtest/gtest.h>

#include "codegen/GpuPlacement.h"
#include "driver/Compiler.h"
#include "../GenerateFor.h"
#include "runtime/GpuBackend.h"
#include "support/Error.h"
#include "tile/TileIR.h"

#include "../ExampleSizes.h"

using namespace rf;
using namespace rf::tile;
using rf::gpu_mapping::Placement;

namespace {

Expr idx(const std::string &n) { return make_var(n, VarRole::Index, SType::Int); }
Expr local(const std::string &n) { return make_var(n, VarRole::Index, SType::Real); }
Expr elem(const std::string &n, Expr i) { return make_load(n, {i}, DType::f32, SType::Real); }
Expr input(Expr j) { return make_load("X", {j}, DType::f32, SType::Real); }

struct Fixture {
    Kernel k;
    GpuCodegenOptions o;
    Placement place{k, o};
};

}  // namespace

TEST(GpuPlacement, ScalarStatesUpdatedByEveryThreadAreRegisters) {
    // m = -inf; t = max over a spread loop (a tree: every thread reads the result); m = max(m, t).
    Fixture f;
    Expr j = idx("$j");
    std::vector<StmtP> body = {decl("$m", LocalClass::State, {}, make_const(-INFINITY)), decl("$t", LocalClass::Tile, {}, make_const(-INFINITY)),
                               for_loop(j, make_int(0), make_size("C"), {accum(ReduceOp::Max, local("$t"), input(j))}, LoopKind::Simd),
                               assign(local("$m"), make_max(local("$m"), local("$t")))};
    f.place.replicate(body);
    EXPECT_TRUE(f.place.replicated("$m"));
    EXPECT_TRUE(f.place.replicated("$t"));
    EXPECT_TRUE(f.place.coop(body[2]));
    EXPECT_TRUE(f.place.replicable(body[3]));
}

TEST(GpuPlacement, WhatOneThreadWritesStaysShared) {
    Fixture f;
    Expr j = idx("$j");
    // $a is written together with a store (one thread runs that statement): shared. $b is an
    // array element written inside a spread loop (each thread its own elements): shared. $c has a
    // run-time size: shared. $d is written by a statement that also writes the shared $a: shared.
    std::vector<StmtP> body = {
        decl("$a", LocalClass::State, {}, make_const(0)),
        decl("$b", LocalClass::Tile, {make_int(8)}, make_const(0)),
        decl("$c", LocalClass::State, {make_size("D")}, make_const(0)),
        decl("$d", LocalClass::State, {}, make_const(0)),
        if_then(make_cmp(CmpOp::GT, local("$a"), make_const(0)), {assign(local("$a"), make_const(1)), store(input(make_int(0)), make_const(2))}),
        for_loop(j, make_int(0), make_int(8), {assign(elem("$b", j), input(j))}, LoopKind::Simd),
        block({assign(local("$d"), make_const(3)), assign(local("$a"), local("$d"))}),
    };
    f.place.replicate(body);
    EXPECT_FALSE(f.place.replicated("$a"));
    EXPECT_FALSE(f.place.replicated("$b"));
    EXPECT_FALSE(f.place.replicated("$c"));
    EXPECT_FALSE(f.place.replicated("$d"));
    EXPECT_FALSE(f.place.replicable(body[4]));
    EXPECT_TRUE(f.place.coop(body[1]));  // a shared array's initialisation is spread
}

TEST(GpuPlacement, GemmOperandsStayShared) {
    Fixture f;
    GemmInfo g;
    g.M = g.N = g.K = make_int(4);
    g.a_base = elem("$qa", make_int(0));
    g.b_base = make_load("X", {make_int(0)}, DType::f32, SType::Real);
    g.c_base = elem("$qc", make_int(0));
    g.a_si = g.a_sk = g.b_sj = g.b_sk = g.c_si = make_int(1);
    g.alpha = make_const(1);
    std::vector<StmtP> body = {decl("$qa", LocalClass::Tile, {make_int(16)}, make_const(0)), decl("$qc", LocalClass::Tile, {make_int(16)}, make_const(0)),
                               gemm(g)};
    f.place.replicate(body);
    EXPECT_FALSE(f.place.replicated("$qa"));
    EXPECT_FALSE(f.place.replicated("$qc"));
}

TEST(GpuPlacement, WarpLevelCudaUsesShufflesAndWarpBarriersOnly) {
    ArenaScope arena;
    auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples/softmax.rf";
    std::string text = test::read_text(path);
    Options go;
    go.fusion_level = FusionLevel::Warp;
    go.gpu_threads = 128;
    GpuModule warp = test::generate_gpu_for(text, path.string(), TargetKind::Cuda, go);
    ASSERT_EQ(warp.launches.size(), 1u);
    const std::string &src = warp.source.substr(warp.source.find("__global__ void __launch_bounds__"));
    EXPECT_GT(test::count_of(src, "__shfl_xor_sync"), 0u);
    EXPECT_EQ(test::count_of(src, "RF_BARRIER()"), 0u) << "a warp never waits for the work-group";
    EXPECT_NE(src.find("(RF_LID >> 5) * ("), std::string::npos) << "each warp its own shared slots";
    EXPECT_EQ(warp.launches[0].threads, 128);  // 4 rows per work-group of 128
    go.fusion_level = FusionLevel::Block;
    GpuModule block = test::generate_gpu_for(text, path.string(), TargetKind::Cuda, go);
    const std::string &bsrc = block.source.substr(block.source.find("__global__ void __launch_bounds__"));
    EXPECT_GT(test::count_of(bsrc, "RF_BARRIER()"), 0u);
    // Softmax's running states, tags and tile partials are all registers: the only shared slot is
    // the reduction scratch.
    EXPECT_EQ(test::count_of(bsrc, "RF_SHARED "), 2u) << bsrc;  // rf_red's declaration: "RF_SHARED float *rf_red = (RF_SHARED float *)"
    // OpenCL has no sub-groups: the warp is a work-group of 32.
    go.fusion_level = FusionLevel::Warp;
    GpuModule ocl = test::generate_gpu_for(text, path.string(), TargetKind::OpenCL, go);
    EXPECT_EQ(ocl.launches[0].threads, 32);
}

TEST(GpuPlacement, RowReductionsGetAGroupOfThreadsPerRow) {
    // Attention's row maximum: t = -inf; for j simd: t max= S[rr, j]; m[rr] = max(m[rr], t).
    Fixture f;
    Expr j = idx("$j"), rr = idx("$rr");
    Expr S = make_load("$S", {make_add(make_mul(rr, make_int(264)), j)}, DType::f32, SType::Real);
    StmtP scale = decl("$h", LocalClass::Tile, {}, make_const(2));
    StmtP t = decl("$t", LocalClass::Tile, {}, make_const(-INFINITY));
    StmtP loop = for_loop(j, make_int(0), make_int(256), {accum(ReduceOp::Max, local("$t"), make_mul(S, local("$h")))}, LoopKind::Simd);
    StmtP update = assign(elem("$m", rr), make_max(elem("$m", rr), local("$t")));
    bool reduction = false;
    EXPECT_EQ(f.place.row_group({scale, t, loop, update}, reduction), 2);
    EXPECT_TRUE(reduction);
    // A prefix statement writing only the prefix's scalars runs in every thread of the group.
    StmtP rescale = assign(local("$h"), make_const(3));
    EXPECT_TRUE(f.place.group_replicable(rescale, {"$h"}));
    EXPECT_EQ(f.place.row_group({scale, rescale, t, loop, update}, reduction), 3);
    // The first thread's prefix statement writes what the loop reads: not a row group.
    StmtP writes_scores = assign(make_load("$S", {make_int(0)}, DType::f32, SType::Real), make_const(1));
    EXPECT_FALSE(f.place.group_replicable(writes_scores, {"$h"}));
    EXPECT_EQ(f.place.row_group({scale, writes_scores, t, loop, update}, reduction), -1);
    // Element-wise iterations (attention's D output columns): a row group without a reduction.
    StmtP storing = for_loop(j, make_int(0), make_int(256), {store(input(j), S)}, LoopKind::Simd);
    EXPECT_EQ(f.place.row_group({scale, storing, update}, reduction), 1);
    EXPECT_FALSE(reduction);
    // Two loops, or a reduction into a scalar the prefix does not declare.
    EXPECT_EQ(f.place.row_group({t, loop, loop}, reduction), -1);
    EXPECT_EQ(f.place.row_group({loop, update}, reduction), -1);
}

TEST(GpuPlacement, AttentionRowMaxAndSumAreGroupReductions) {
    ArenaScope arena;
    auto path = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples/attention.rf";
    Options go;
    go.sizes = {{"B", 1}, {"H", 2}, {"M", 256}, {"N", 512}, {"D", 64}};
    go.gpu_threads = 128;
    GpuModule g = test::generate_gpu_for(test::read_text(path), path.string(), TargetKind::Cuda, go);
    // Two row reductions (max, sum), each combined within groups of lanes by shuffles; the output
    // columns' rescale and accumulation spread over the groups too (a round loop each).
    std::string k = g.source.substr(g.source.find("__global__ void __launch_bounds__"));
    EXPECT_EQ(test::count_of(k, "for (int o_ = "), 2u) << k;
    EXPECT_GE(test::count_of(k, "for (int64_t r_"), 4u) << k;
}
