/** \file expr_test.cpp
 * Hash-consing, printing and dtype rounding of the core IR.
 */
#include <gtest/gtest.h>

#include <cmath>

#include "ir/Expr.h"

using namespace rf;

TEST(Expr, HashConsingMakesEqualTreesPointerEqual) {
    ArenaScope scope;
    Expr a = make_add(make_index("i"), make_int(1));
    Expr b = make_add(make_index("i"), make_int(1));
    EXPECT_EQ(a, b);
    EXPECT_NE(a, make_add(make_index("j"), make_int(1)));
}

TEST(Expr, PrinterUsesSpecSyntax) {
    ArenaScope scope;
    Expr x = make_load("X", {make_index("r"), make_index("c")}, DType::f32, SType::Real);
    Expr m = make_load("m", {make_index("r")}, DType::f64, SType::Real);
    EXPECT_EQ(to_string(make_call(Func::exp, make_sub(x, m))), "exp(X[r, c] - m[r])");
    EXPECT_EQ(to_string(make_mul(make_const(2), make_add(x, m))), "2 * (X[r, c] + m[r])");
    EXPECT_EQ(to_string(make_mul(x, make_pow(m, make_const(-1)))), "X[r, c] / m[r]");
    EXPECT_EQ(to_string(make_add(x, make_mul(make_const(-1), m))), "X[r, c] - m[r]");
    Expr red = make_reduce(ReduceOp::Sum, {make_index("c")}, {make_size("C")}, x);
    EXPECT_EQ(to_string(red), "sum(c: X[r, c])");
}

TEST(DType, RoundToNearestEvenWithSaturation) {
    EXPECT_EQ(round_to_dtype(1000.0, DType::f8e4m3), 448.0);
    EXPECT_EQ(round_to_dtype(-1e9, DType::f8e4m3), -448.0);
    EXPECT_EQ(round_to_dtype(2.5, DType::i8), 2.0);
    EXPECT_EQ(round_to_dtype(3.5, DType::i8), 4.0);
    EXPECT_EQ(round_to_dtype(300.0, DType::i8), 127.0);
    EXPECT_EQ(round_to_dtype(1.0 + 1.0 / 256, DType::bf16), 1.0);            // tie -> even
    EXPECT_EQ(round_to_dtype(1.0 + 3.0 / 256, DType::bf16), 1.0 + 4.0 / 256);  // tie -> even (up)
    EXPECT_EQ(round_to_dtype(70000.0, DType::f16), 65504.0);
    EXPECT_TRUE(std::isinf(round_to_dtype(-INFINITY, DType::bf16)));
    EXPECT_EQ(round_to_dtype(-INFINITY, DType::f8e4m3), -448.0);
    EXPECT_EQ(round_to_dtype(0.1, DType::f32), static_cast<double>(0.1f));
    // e4m3 subnormals: quantum 2^-9.
    EXPECT_EQ(round_to_dtype(std::ldexp(1.0, -9) * 1.4, DType::f8e4m3), std::ldexp(1.0, -9));
}
