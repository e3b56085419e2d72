/** \file stmt_visitor_test.cpp
 * StmtVisitor and StmtMutator: the visitor's defaults reach every kind, else branches included; an
 * identity mutation returns the same pointers; a rewrite deep inside an else branch rebuilds only the
 * path from the root to it; the passes table lists the passes in order.
 */
#include <gtest/gtest.h>

#include <map>

#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr X(Expr i) { return make_load("X", {i}, DType::f32, SType::Real); }
Expr Y(Expr i) { return make_load("Y", {i}, DType::f32, SType::Real); }
Expr loc(const std::string &n, Expr i) { return make_load(n, {i}, DType::f64, SType::Real); }

/** A tree holding every statement kind, the If's else branch holding a For, a Decl and a Store. */
struct Tree {
    StmtP store_in_else, loop_in_else, the_if, the_then_assign, root;
    Tree() {
        Expr i = make_index("$i"), j = make_index("$j"), N = make_size("N");
        GemmInfo g;
        g.M = g.N = g.K = int_c(4);
        g.a_base = X(int_c(0));
        g.b_base = X(int_c(0));
        g.c_base = loc("$t", int_c(0));
        g.a_si = g.a_sk = g.b_sj = g.b_sk = g.c_si = int_c(1);
        g.alpha = real_c(1);
        store_in_else = store(Y(j), loc("$t", j));
        loop_in_else = for_loop(j, int_c(0), N, {decl("$u", LocalClass::Tile, {}, X(j)), store_in_else});
        the_then_assign = assign(loc("$t", i), X(i));
        the_if = if_then(make_cmp(CmpOp::LT, i, int_c(2)), {the_then_assign, accum(ReduceOp::Sum, loc("$s", int_c(0)), X(i))},
                         {loop_in_else});
        StmtP sel = arg_select(ReduceOp::ArgMax, loc("$m", int_c(0)), loc("$mi", int_c(0)), X(i), make_cast(DType::f64, i));
        StmtP topk = topk_insert("$l", int_c(0), int_c(0), int_c(3), ReduceOp::Max, X(i), i);
        StmtP shift = poly_shift("$p", {{0}, {1}}, {real_c(0)}, {X(i)});
        root = block({comment("every kind"), decl("$t", LocalClass::Tile, {N}, nullptr), decl("$s", LocalClass::State, {int_c(1)}, real_c(0)),
                      for_loop(i, int_c(0), N, {the_if, sel, topk, shift}, LoopKind::Serial), gemm(g),
                      copy_row(Y(int_c(0)), loc("$t", int_c(0)), N)});
    }
};

/** Counts the statements of each kind and the expressions the defaults hand to visit_expr. */
struct Counter : StmtVisitor {
    std::map<StmtKind, int> kinds;
    int exprs = 0;
    void visit(const StmtP &s) override {
        kinds[s->kind]++;
        StmtVisitor::visit(s);
    }
    void visit_expr(const Expr &) override { exprs++; }
};

TEST(StmtVisitor, DefaultsReachEveryKindAndTheElseBranch) {
    Tree t;
    Counter c;
    c.visit(t.root);
    for (StmtKind k : {StmtKind::Block, StmtKind::For, StmtKind::If, StmtKind::Decl, StmtKind::Assign, StmtKind::Accum,
                       StmtKind::ArgSelect, StmtKind::TopKInsert, StmtKind::PolyShift, StmtKind::Gemm, StmtKind::Store,
                       StmtKind::CopyRow, StmtKind::Comment})
        EXPECT_GE(c.kinds[k], 1) << "kind " << static_cast<int>(k);
    EXPECT_EQ(c.kinds[StmtKind::For], 2);    // one of them in the else branch
    EXPECT_EQ(c.kinds[StmtKind::Decl], 3);   // $t, $s and $u (else branch)
    EXPECT_EQ(c.kinds[StmtKind::Store], 1);  // only in the else branch
    EXPECT_GT(c.exprs, 20);
}

TEST(StmtVisitor, AnOverrideThatSkipsChildrenStopsTheWalk) {
    struct NoIfs : Counter {
        void visit_if(const StmtP &) override {}
    } c;
    Tree t;
    c.visit(t.root);
    EXPECT_EQ(c.kinds[StmtKind::If], 1);
    EXPECT_EQ(c.kinds[StmtKind::Store], 0);
    EXPECT_EQ(c.kinds[StmtKind::Assign], 0);
}

TEST(StmtVisitor, WalksStopAtTheFirstHit) {
    Tree t;
    int seen = 0;
    EXPECT_TRUE(any_stmt(t.root, [&](const StmtP &s) {
        seen++;
        return s->kind == StmtKind::For;
    }));
    EXPECT_EQ(seen, 5);  // the block, its comment, two decls, then the loop
    int all = 0;
    for_each_stmt(t.root, [&](const StmtP &) { all++; });
    EXPECT_EQ(all, 16);
    EXPECT_FALSE(any_stmt(t.root, [](const StmtP &s) { return s->kind == StmtKind::Assign && s->target->name == "$none"; }));
}

TEST(StmtMutator, IdentityReturnsTheSamePointer) {
    Tree t;
    StmtMutator id;
    EXPECT_EQ(id.mutate(t.root), t.root);
    EXPECT_EQ(map_own_exprs(t.the_if, [](Expr e) { return e; }), t.the_if);
    EXPECT_EQ(mutate(t.root, [](Expr e) { return e; }, [](const std::string &n) { return n; }), t.root);
    EXPECT_EQ(rename_locals(t.root, [](const std::string &n) { return n == "$absent" ? "$other" : n; }), t.root);
}

TEST(StmtMutator, ADeepRewriteInAnElseBranchRebuildsOnlyThePath) {
    Tree t;
    // Store Y[j] = $t[j]  →  Store Y[j] = 2 · $t[j], only that statement.
    struct Double : StmtMutator {
        StmtP mutate_store(const StmtP &s) override { return store(s->target, make_mul(real_c(2), s->value)); }
    } d;
    StmtP r = d.mutate(t.root);
    ASSERT_NE(r, t.root);
    // The path root → for → if → (else) for → store is new; every sibling is the same pointer.
    for (size_t q = 0; q < r->body.size(); q++) {
        if (q != 3) {
            EXPECT_EQ(r->body[q], t.root->body[q]) << q;
        }
    }
    const StmtP &loop = r->body[3], &old_loop = t.root->body[3];
    ASSERT_NE(loop, old_loop);
    for (size_t q = 1; q < loop->body.size(); q++) EXPECT_EQ(loop->body[q], old_loop->body[q]) << q;
    const StmtP &the_if = loop->body[0];
    ASSERT_NE(the_if, t.the_if);
    EXPECT_EQ(the_if->cond, t.the_if->cond);
    ASSERT_EQ(the_if->body.size(), 2u);
    EXPECT_EQ(the_if->body[0], t.the_then_assign);
    EXPECT_EQ(the_if->body[1], t.the_if->body[1]);
    ASSERT_EQ(the_if->else_body.size(), 1u);
    const StmtP &inner = the_if->else_body[0];
    ASSERT_NE(inner, t.loop_in_else);
    EXPECT_EQ(inner->body[0], t.loop_in_else->body[0]);  // the decl of $u
    EXPECT_NE(inner->body[1], t.store_in_else);
    EXPECT_EQ(inner->body[1]->value->kind, Kind::Mul);
    // The original is untouched.
    EXPECT_EQ(t.store_in_else->value->kind, Kind::Load);
}

TEST(StmtMutator, ExpressionAndNameHooksRebuildOnlyWhatChanged) {
    Tree t;
    StmtP r = rename_locals(t.root, [](const std::string &n) { return n == "$u" ? "$w" : n; });
    ASSERT_NE(r, t.root);
    EXPECT_EQ(r->body[0], t.root->body[0]);
    const StmtP &inner = r->body[3]->body[0]->else_body[0];
    EXPECT_EQ(inner->body[0]->name, "$w");
    EXPECT_EQ(inner->body[1], t.store_in_else);
    EXPECT_EQ(r->body[3]->body[0]->body[0], t.the_then_assign);
}

TEST(StmtMutator, BottomUpRewriteSeesRebuiltChildren) {
    Tree t;
    int ifs_with_new_else = 0;
    StmtP r = rewrite_bottom_up(t.root, [&](const StmtP &s) -> StmtP {
        if (s->kind == StmtKind::Store) return comment("a store was here");
        if (s->kind == StmtKind::If && s->else_body[0]->body[1]->kind == StmtKind::Comment) ifs_with_new_else++;
        return s;
    });
    EXPECT_EQ(ifs_with_new_else, 1);
    EXPECT_EQ(r->body[3]->body[0]->else_body[0]->body[1]->kind, StmtKind::Comment);
}

TEST(TilePasses, TableListsThePassesInOrder) {
    const auto &p = tile_passes();
    ASSERT_EQ(p.size(), 21u);
    const char *names[] = {"gemm", "exp2", "hoist", "invariant-sums", "extra-points", "fold-flags", "gemm-sums", "forward-temps", "localize-temps", "coalesce",
                           "gemm-state", "skip-masked", "finite-invariants", "element-lanes", "row-copies", "scale-copies", "defer-copies", "prefetch",
                           "prefetch-tiles", "first-gemm-stores", "literal-terms"};
    for (size_t i = 0; i < p.size(); i++) EXPECT_STREQ(p[i].name, names[i]);
    EXPECT_EQ(p[0].id, TilePass::Gemm);
    EXPECT_TRUE(p[0].always);
    EXPECT_EQ(p[1].id, TilePass::Exp2);
    EXPECT_EQ(p[3].id, TilePass::InvariantSums);
    EXPECT_EQ(p[4].id, TilePass::ExtraPoints);
    EXPECT_EQ(p[5].id, TilePass::FoldFlags);
    EXPECT_EQ(p[6].id, TilePass::GemmSums);
    EXPECT_EQ(p[7].id, TilePass::ForwardTemps);
    EXPECT_EQ(p[8].id, TilePass::LocalizeTemps);
    EXPECT_EQ(p[10].id, TilePass::GemmState);
    EXPECT_EQ(p[11].id, TilePass::SkipMasked);
    EXPECT_EQ(p[15].id, TilePass::ScaleCopies);
    EXPECT_EQ(p[16].id, TilePass::DeferCopies);
    EXPECT_EQ(p[19].id, TilePass::FirstGemmStores);
    EXPECT_EQ(p[20].id, TilePass::LiteralTerms);
    EXPECT_TRUE(p[10].float_states_only);
    // The CPU-only passes: the invariant sums, the extra points, the flags, GEMM sums and temporaries of
    // double states, the finite copies, the row copies (plain, scaled and deferred), the prefetches of
    // the next rows and tiles, the GEMMs that store their first tile, and the literal recomputes' tables.
    for (size_t i = 0; i < p.size(); i++)
        EXPECT_EQ(p[i].cpu_only, (i >= 3 && i <= 8) || (i >= 12 && i <= 20)) << p[i].name;
    for (size_t i = 0; i < p.size(); i++) EXPECT_EQ(p[i].float_states_only, i == 10) << p[i].name;
    for (size_t i = 1; i < p.size(); i++) EXPECT_FALSE(p[i].always) << p[i].name;
    for (const TilePassInfo &i : p) EXPECT_NE(i.run, nullptr);
}

}  // namespace
