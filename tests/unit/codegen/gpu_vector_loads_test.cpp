/** \file gpu_vector_loads_test.cpp
 * Which loads of a spread vector loop the GPU printer reads V elements at a time
 * (GpuVectorLoads.h), and the text of those loads.
 */
#include <gtest/gtest.h>

#include "codegen/GpuVectorLoads.h"
#include "support/Error.h"

using namespace rf;
using namespace rf::tile;
using namespace rf::gpu_mapping;

namespace {

struct Buffers {
    Buffer x{"X", Buffer::Role::Input, DType::f32, {make_size("R"), make_size("C")}};
    Buffer h{"H", Buffer::Role::Input, DType::bf16, {make_size("R"), make_size("C")}};
    Buffer n{"N", Buffer::Role::Input, DType::i32, {make_size("C")}};
    Buffer y{"Y", Buffer::Role::Output, DType::f32, {make_size("R"), make_size("C")}};
    std::map<std::string, const Buffer *> map{{"X", &x}, {"H", &h}, {"N", &n}, {"Y", &y}};
};

Expr at(const Buffer &b, Expr row, Expr col) {
    return make_load(b.name, {row, col}, b.dtype, b.dtype == DType::i32 ? SType::Int : SType::Real);
}

}  // namespace

TEST(GpuVectorLoads, UnitStrideOperandsOnly) {
    ArenaScope arena;
    Buffers B;
    Expr j = make_var("$j", VarRole::Index, SType::Int), r = make_var("$r", VarRole::Index, SType::Int);
    Expr t = make_var("$t", VarRole::Index, SType::Real);
    Expr contiguous = at(B.x, r, make_add(j, make_int(3)));
    Expr strided = at(B.x, r, make_mul(j, make_int(2)));
    Expr row_moves = at(B.h, j, make_int(0));
    Expr integer = make_load("N", {j}, DType::i32, SType::Int);
    StmtP loop = for_loop(j, make_int(0), make_size("C"),
                          {accum(ReduceOp::Sum, t, make_add({contiguous, strided, row_moves, integer}))}, LoopKind::Simd);
    VectorPlan p = plan_vector_loads(loop, B.map);
    ASSERT_EQ(p.loads.size(), 1u);
    EXPECT_EQ(p.loads[0].load, contiguous);
    EXPECT_EQ(p.width, 4);  // a 4-byte operand: 16 bytes per chunk
}

TEST(GpuVectorLoads, SixteenBitOperandsReadEightAtATime) {
    ArenaScope arena;
    Buffers B;
    Expr j = make_var("$j", VarRole::Index, SType::Int), r = make_var("$r", VarRole::Index, SType::Int);
    StmtP loop = for_loop(j, make_int(0), make_size("C"), {store(at(B.y, r, j), at(B.h, r, j))}, LoopKind::Simd);
    VectorPlan p = plan_vector_loads(loop, B.map);
    ASSERT_EQ(p.loads.size(), 1u);
    EXPECT_EQ(p.width, 8);
    std::string cuda = vector_load_text(Dialect::Cuda, p.loads[0], 8, "h[0]", "d");
    EXPECT_NE(cuda.find("uint4 t_"), std::string::npos) << cuda;
    EXPECT_NE(cuda.find("d[7] = rf_bf16_to_float((uint16_t)(t_.w >> 16))"), std::string::npos) << cuda;
    EXPECT_NE(vector_load_text(Dialect::OpenCL, p.loads[0], 8, "h[0]", "d").find("vload8(0, &h[0])"), std::string::npos);
    EXPECT_EQ(chunk_aligned_text(Dialect::OpenCL, p.loads[0], 8, "h[0]"), "1");
    EXPECT_EQ(chunk_aligned_text(Dialect::Cuda, p.loads[0], 8, "h[0]"), "(((size_t)(&h[0]) & 15) == 0)");
}

TEST(GpuVectorLoads, AStoredBufferOnlyAtTheSameElement) {
    ArenaScope arena;
    Buffers B;
    Expr j = make_var("$j", VarRole::Index, SType::Int), r = make_var("$r", VarRole::Index, SType::Int);
    // Y[j] = Y[j] * 2: each element is read before it is written: vectorized.
    StmtP same = for_loop(j, make_int(0), make_size("C"), {store(at(B.y, r, j), make_mul(at(B.y, r, j), make_const(2)))}, LoopKind::Simd);
    EXPECT_EQ(plan_vector_loads(same, B.map).loads.size(), 1u);
    // Y[j + 1] = Y[j]: a later chunk's element is written: not vectorized.
    StmtP shifted =
        for_loop(j, make_int(0), make_size("C"), {store(at(B.y, r, make_add(j, make_int(1))), at(B.y, r, j))}, LoopKind::Simd);
    VectorPlan p = plan_vector_loads(shifted, B.map);
    EXPECT_TRUE(p.loads.empty());
    EXPECT_EQ(p.width, 0);
}
