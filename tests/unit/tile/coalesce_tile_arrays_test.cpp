/** \file coalesce_tile_arrays_test.cpp
 * The tile pass that lets a tile array reuse a dead one's storage (src/tile/CoalesceTileArrays.cpp):
 * a table of tile-loop bodies — coalesced when one array is dead before the other's first use, or
 * rewritten element by element with an injective index (the attention exp tile); kept apart when
 * the old array is read after the new one is written, when the index may repeat (stride shorter than
 * the tile, a missing loop variable, a per-iteration offset), when the rewrite writes twice, or when
 * the extents differ — and every
 * attention and decode keeps one score tile instead of two.
 */
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "driver/Compiler.h"
#include "tile/Lower.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr X(Expr j) { return make_load("X", {j}, DType::f32, SType::Real); }
Expr Y(Expr j) { return make_load("Y", {j}, DType::f32, SType::Real); }
Expr tb() { return local_var("$tb", SType::Int); }
Expr te() { return local_var("$te", SType::Int); }
Expr rr() { return make_index("$rr"); }
Expr jh() { return make_index("$jh"); }
/** rr · stride + jh − tb: a row of a block's tile array. */
Expr at(int64_t stride, Expr row = rr()) { return make_add(make_mul(row, int_c(stride)), make_sub(jh(), tb())); }
StmtP arr(const char *n, int64_t size = 8448) { return decl(n, LocalClass::Tile, {int_c(size)}, nullptr); }
/** for rr in [0, 32): for jh in [tb, te) simd: body */
StmtP rows(std::vector<StmtP> body) {
    return for_loop(rr(), int_c(0), int_c(32), {for_loop(jh(), tb(), te(), std::move(body), LoopKind::Simd)}, LoopKind::Independent);
}
StmtP fill(const char *n, Expr i) { return rows({assign(local_at(n, i), X(jh()))}); }
StmtP use(const char *n, Expr i) { return rows({store(Y(jh()), local_at(n, i))}); }

/** for $tile in [0, (C + 255) / 256): tb, te = the tile; body — over X[C] and Y[C]. */
Module kernel(std::vector<StmtP> body) {
    Module m;
    m.sizes = {"C"};
    Expr C = make_size("C");
    m.buffers.push_back({"X", Buffer::Role::Input, DType::f32, {C}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {C}});
    std::vector<StmtP> tile{decl("$tb", LocalClass::Index, {}, make_mul(make_index("$tile"), int_c(256))),
                            decl("$te", LocalClass::Index, {}, make_min(make_add(tb(), int_c(256)), C))};
    for (StmtP &s : body) tile.push_back(s);
    Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$row"), int_c(0), int_c(1),
                      {for_loop(make_index("$tile"), int_c(0), make_idiv(make_add(C, int_c(255)), int_c(256)), tile)}, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

/** Tile arrays (what coalescing shares; the float64 state arrays of other passes are not counted). */
int arrays(const StmtP &s) {
    int n = s->kind == StmtKind::Decl && !s->dims.empty() && s->cls != LocalClass::State;
    for (const StmtP &c : s->body) n += arrays(c);
    for (const StmtP &c : s->else_body) n += arrays(c);
    return n;
}

struct Case {
    const char *what;
    std::function<std::vector<StmtP>()> body;
    int arrays_after;
};

std::vector<Case> cases() {
    return {
        {"dead before the first use: shared", [] { return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(264)), use("$a", at(264)), fill("$b", at(264)), use("$b", at(264))}; }, 1},
        {"element-wise rewrite, stride 264 over a tile of 256: in place",
         [] { return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(264)), rows({assign(local_at("$b", at(264)), make_call(Func::exp2, local_at("$a", at(264))))}), use("$b", at(264))}; }, 1},
        {"stride 256 over a tile of 256 is still injective",
         [=] { return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(256)), rows({assign(local_at("$b", at(256)), make_call(Func::exp2, local_at("$a", at(256))))}), use("$b", at(256))}; }, 1},
        {"the old array read after the new one is written: apart",
         [] { return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(264)), fill("$b", at(264)), use("$a", at(264)), use("$b", at(264))}; }, 2},
        {"stride 200 over a tile of 256: rows overlap, apart",
         [=] { return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(200)), rows({assign(local_at("$b", at(200)), make_call(Func::exp2, local_at("$a", at(200))))}), use("$b", at(200))}; }, 2},
        {"reads another element of the old array: apart",
         [=] {
             Expr other = make_add(at(264), int_c(1));
             return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(264)), rows({assign(local_at("$b", at(264)), local_at("$a", other))}), use("$b", at(264))};
         }, 2},
        {"the row variable missing from the index: every row writes one element, apart",
         [=] { return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", make_sub(jh(), tb())), rows({assign(local_at("$b", make_sub(jh(), tb())), make_call(Func::exp2, local_at("$a", make_sub(jh(), tb()))))}), use("$b", make_sub(jh(), tb()))}; }, 2},
        {"two rewriting loops in one statement: apart (the second reads what the first overwrote)",
         [] {
             Expr r1 = make_call(Func::exp2, local_at("$a", at(264))), r2 = make_call(Func::sqrt, local_at("$a", at(264)));
             return std::vector<StmtP>{arr("$a"), arr("$b"), fill("$a", at(264)),
                                       block({rows({assign(local_at("$b", at(264)), r1)}), rows({assign(local_at("$b", at(264)), r2)})}),
                                       use("$b", at(264))};
         }, 2},
        {"different extents: apart", [] { return std::vector<StmtP>{arr("$a"), arr("$b", 4096), fill("$a", at(264)), use("$a", at(264)), fill("$b", at(128)), use("$b", at(128))}; }, 2},
        {"an initialized array keeps its own storage", [] {
             return std::vector<StmtP>{arr("$a"), decl("$b", LocalClass::Tile, {int_c(8448)}, real_c(0)), fill("$a", at(264)), use("$a", at(264)), use("$b", at(264))};
         }, 2},
    };
}

}  // namespace

TEST(CoalesceTileArrays, TableOfTileBodies) {
    for (const Case &c : cases()) {
        ArenaScope a;
        Module m = kernel(c.body());
        ASSERT_NO_THROW(verify(m)) << c.what;
        m = coalesce_tile_arrays(m);
        EXPECT_NO_THROW(verify(m)) << c.what;
        EXPECT_EQ(arrays(m.kernels[0].body), c.arrays_after) << c.what << "\n" << to_string(m);
    }
}

TEST(CoalesceTileArrays, AttentionAndDecodeKeepOneScoreTile) {
    for (const char *name : {"attention", "attention_causal", "attention_softcap", "decode_gqa", "mla_decode"}) {
        ArenaScope a;
        auto c = compile_file(std::string(REDFUSE_SOURCE_DIR) + "/examples/" + name + ".rf", {});
        for (int64_t seg : {0, 4}) {
            LowerOptions lo;
            lo.force_segments = seg;
            lo.passes = false;
            // The CPU's passes in their order, with and without coalescing: compare like with like.
            Module plain = lower_plan(c->plan, lo), opt = plain;
            for (const TilePassInfo &p : tile_passes()) {
                if (p.always || p.float_states_only) continue;
                if (p.id != TilePass::Coalesce) plain = p.run(plain);
                opt = p.run(opt);
            }
            ASSERT_NO_THROW(verify(opt)) << name;
            int before = 0, after = 0;
            for (const Kernel &k : plain.kernels) before += arrays(k.body);
            for (const Kernel &k : opt.kernels) after += arrays(k.body);
            EXPECT_EQ(after, before - 1) << name << " segments " << seg << "\n" << to_string(opt);
        }
    }
}
