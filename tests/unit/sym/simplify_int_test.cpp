/** \file simplify_int_test.cpp
 * Index arithmetic: random Int expressions keep their exact integer value, stay Int-typed and
 * never acquire a Pow; and the memo of the simplifier follows the current arena.
 */
#include <gtest/gtest.h>

#include <chrono>

#include "sym/Derivative.h"
#include "sym/Expand.h"
#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

Expr gen_int(RandomExpr &g, const std::vector<Expr> &vars, int depth) {
    if (depth <= 0 || g.pick(10) < 2) {
        if (g.pick(3) == 0) return I(static_cast<int64_t>(g.pick(9)) - 3);
        return vars[g.pick(vars.size())];
    }
    static const int64_t divisors[] = {1, 2, 3, 4, 8, -2};
    Expr a = gen_int(g, vars, depth - 1);
    switch (g.pick(7)) {
    case 0: return make_add(a, gen_int(g, vars, depth - 1));
    case 1: return make_sub(a, gen_int(g, vars, depth - 1));
    case 2: return make_mul(a, gen_int(g, vars, depth - 1));
    case 3: return make_idiv(a, I(divisors[g.pick(6)]));
    case 4: return make_mod(a, I(divisors[g.pick(6)]));
    case 5: return make_neg(a);
    default: return make_add(make_mul(I(static_cast<int64_t>(g.pick(5)) + 1), a), I(static_cast<int64_t>(g.pick(7))));
    }
}

TEST(SimplifyInt, RandomIndexArithmeticIsExact) {
    ArenaScope scope;
    std::vector<Expr> vars{make_index("i"), make_index("j"), make_index("k")};
    RandomExpr g(31337, vars);
    for (int n = 0; n < 3000; n++) {
        Expr e = gen_int(g, vars, 1 + static_cast<int>(g.pick(5)));
        Expr s = simplify(e);
        ASSERT_EQ(s->stype, SType::Int) << to_string(e) << " -> " << to_string(s);
        ASSERT_FALSE(any_of(s, [](Expr k) { return k->kind == Kind::Pow || k->stype == SType::Real; }))
            << to_string(e) << " -> " << to_string(s);
        for (int p = 0; p < 5; p++) {
            std::map<Expr, double> val;
            for (Expr v : vars) val[v] = static_cast<double>(g.pick(60));  // index vars are >= 0
            ASSERT_EQ(eval_at(e, val), eval_at(s, val))
                << to_string(e) << " -> " << to_string(s) << " at i=" << val[vars[0]] << " j=" << val[vars[1]]
                << " k=" << val[vars[2]];
        }
        clear_simplify_cache();
        ASSERT_EQ(simplify(s), s) << to_string(e) << " -> " << to_string(s);
    }
}

TEST(SimplifyInt, LoadIndicesAreSimplified) {
    ArenaScope scope;
    Expr h = make_index("h"), G = make_size("G"), j = make_index("j");
    Expr K = make_load("K", {make_idiv(h, G), make_sub(make_add(j, I(1)), I(1))}, DType::bf16, SType::Real);
    EXPECT_EQ(to_string(simplify(K)), "K[h / G, j]");
}

TEST(SimplifyCache, FollowsTheCurrentArena) {
    // The same construction in successive arenas (likely at the same address) must give nodes of
    // the current arena, never stale nodes from a dead one.
    for (int round = 0; round < 5; round++) {
        ArenaScope scope;
        Expr x = sym("x");
        Expr e = make_add(x, x);
        Expr s = simplify(e);
        EXPECT_EQ(s, make_mul(C(2), x));
        EXPECT_EQ(to_string(s), "2 * x");
        EXPECT_EQ(derivative(make_pow(x, C(2)), x), s);
        {
            ArenaScope inner;
            Expr y = sym("y");
            EXPECT_EQ(simplify(make_sub(y, y)), make_const(0));
        }
        EXPECT_EQ(simplify(e), s);  // back in the outer arena
    }
}

TEST(SimplifyCache, TypicalCallIsFast) {
    ArenaScope scope;
    std::vector<Expr> atoms{sym("x"), sym("y"), sym("z")};
    RandomExpr gen(5, atoms);
    std::vector<Expr> exprs;
    for (int n = 0; n < 400; n++) exprs.push_back(gen.gen(5));
    auto t0 = std::chrono::steady_clock::now();
    for (Expr e : exprs) simplify(e);
    auto t1 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 10; rep++)
        for (Expr e : exprs) simplify(e);  // memoized
    auto t2 = std::chrono::steady_clock::now();
    double cold_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / exprs.size();
    double warm_us = std::chrono::duration<double, std::micro>(t2 - t1).count() / (10.0 * exprs.size());
    // Generous bounds (Debug builds, shared machines): well under a millisecond per call.
    EXPECT_LT(cold_us, 1000) << "cold " << cold_us << " us/call";
    EXPECT_LT(warm_us, 50) << "warm " << warm_us << " us/call";
    RecordProperty("cold_us_per_call", std::to_string(cold_us));
    RecordProperty("warm_us_per_call", std::to_string(warm_us));
}

}  // namespace
