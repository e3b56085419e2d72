/** \file sym_cache_test.cpp
 * The symbolic memo tables belong to their arena: a new arena, even one at a dead arena's address
 * whose nodes reuse the dead nodes' addresses, never sees the old results.
 */
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <thread>

#include "sym/Sign.h"
#include "sym/Simplify.h"
#include "SymTestUtil.h"

using namespace rf;
using namespace rf::symtest;

namespace {

TEST(SymCache, ArenaAtTheSameAddressStartsWithEmptyTables) {
    // One storage for every arena: each ArenaScope (and its Arena) lives where the previous one did.
    // Rounds alternate between two bodies of the same shape, v + v and v · v (and exp(v), log(v)),
    // so the allocator hands out dead nodes' addresses: tables keyed by address that outlived their
    // arena would answer 2·v for a square, or "positive" for a logarithm.
    std::optional<ArenaScope> scope;
    const Arena *arena_address = nullptr;
    std::set<const void *> seen;
    int reused = 0;
    for (int round = 0; round < 32; round++) {
        scope.emplace();
        if (round == 0) arena_address = &scope->arena();
        ASSERT_EQ(&scope->arena(), arena_address);
        bool square = round % 2 == 1;
        Expr v = sym("v" + std::to_string(round));
        Expr e = square ? make_mul(v, v) : make_add(v, v);
        Expr f = call(square ? Func::log : Func::exp, v);
        reused += !seen.insert(e).second;
        reused += !seen.insert(f).second;
        Expr s = simplify(e);
        ASSERT_TRUE(mentions(s, v->name)) << to_string(s);
        if (square) {
            EXPECT_EQ(s->kind, Kind::Pow) << to_string(s);
            EXPECT_FALSE(is_nonnegative(f)) << to_string(f);
        } else {
            EXPECT_EQ(s->kind, Kind::Mul) << to_string(s);
            EXPECT_TRUE(is_positive(f)) << to_string(f);
        }
        scope.reset();
    }
    GTEST_LOG_(INFO) << reused << " node addresses of a dead arena were reused by a later one";
}

TEST(SymCache, ThreadsSharingTheDefaultArenaKeepTheirOwnTables) {
    // Without an ArenaScope every thread interns into the default arena; each has its own tables.
    auto work = [](const std::string &name, int &wrong) {
        for (int i = 0; i < 200; i++) {
            Expr v = sym(name + std::to_string(i % 7));
            Expr r = simplify(make_add(make_mul(C(3), v), make_mul(C(-3), v)));
            if (!r->is_const(0)) wrong++;
            if (!is_positive(call(Func::exp, v))) wrong++;
        }
    };
    int wrong_a = 0, wrong_b = 0;
    std::thread a(work, "a", std::ref(wrong_a)), b(work, "b", std::ref(wrong_b));
    a.join();
    b.join();
    EXPECT_EQ(wrong_a, 0);
    EXPECT_EQ(wrong_b, 0);
}

TEST(SymCache, ClearingTheTablesKeepsResults) {
    ArenaScope scope;
    Expr x = sym("x");
    Expr e = make_sub(make_mul(x, x), make_mul(x, x));
    Expr before = simplify(e);
    clear_simplify_cache();
    EXPECT_EQ(simplify(e), before);
    EXPECT_TRUE(before->is_const(0)) << to_string(before);
}

}  // namespace
