/** \file scale_row_copies_test.cpp
 * The CPU tile pass scale-copies (src/tile/ScaleRowCopies.cpp): an epilogue chunk's loop
 * $ep[x - lo] = $t[b + x] · r followed by the row copy of $ep becomes one copy of $t scaled by r, at
 * the end of each path of the statement before the copy — kept as it is for another loop body, a
 * float64 multiplier, or a guard that is not lo < hi; softmax's epilogue takes it, and its outputs
 * are bit for bit those of the kernel without the pass (special values included).
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "../SoftmaxRows.h"
#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr x() { return make_index("$x"); }
Expr lo() { return local_var("$lo", SType::Int); }
Expr hi() { return local_var("$hi", SType::Int); }
Expr r() { return local_var("$r"); }
Expr term(Expr i) { return local_at("$t", make_add(int_c(100), i)); }

/** The chunk loop $ep[x - lo] = value over [lo, hi). */
StmtP chunk_loop(Expr value) { return for_loop(x(), lo(), hi(), {assign(local_at("$ep", make_sub(x(), lo())), value)}, LoopKind::Simd); }

StmtP row_copy() {
    return copy_row(make_load("Y", {int_c(0), lo()}, DType::f64, SType::Real), local_at("$ep", int_c(0)), make_sub(hi(), lo()));
}

/** A kernel declaring $t, $ep, $r (of class r_cls) and $lo, $hi, then `before`, the row copy and
 *  `after` (when given). */
Module kernel(StmtP before, LocalClass r_cls = LocalClass::Tile, StmtP after = nullptr) {
    Module m;
    m.sizes = {"C"};
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::bf16, {int_c(1), make_size("C")}});
    std::vector<StmtP> body{decl("$t", LocalClass::Tile, {int_c(4096)}, real_c(1)), decl("$ep", LocalClass::Tile, {int_c(2048)}, nullptr),
                            decl("$lo", LocalClass::Index, {}, int_c(0)), decl("$hi", LocalClass::Index, {}, make_min(int_c(2048), make_size("C"))),
                            decl("$r", r_cls, {}, real_c(0.5)), std::move(before), row_copy()};
    if (after) body.push_back(after);
    tile::Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$row"), int_c(0), int_c(1), body, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

const char *kScaled = "copy Y[0, $lo][0, $hi - $lo) = $t[100 + $lo]... * $r";
const char *kPlain = "copy Y[0, $lo][0, $hi - $lo) = $ep[0]...";

}  // namespace

TEST(ScaleRowCopies, TableOfEpilogues) {
    struct Case {
        const char *what;
        std::function<Module()> make;
        int scaled, plain;  // copies of each form afterwards
    };
    std::vector<Case> cases = {
        {"the loop itself: one scaled copy", [] { return kernel(chunk_loop(make_mul(term(x()), r()))); }, 1, 0},
        {"r first: the same", [] { return kernel(chunk_loop(make_mul(r(), term(x())))); }, 1, 0},
        {"if/else (finite-invariants' versions): scaled in the fast branch, the other keeps loop and copy",
         [] { return kernel(if_then(make_cmp(CmpOp::GT, r(), real_c(0)), {chunk_loop(make_mul(term(x()), r()))}, {chunk_loop(make_div(term(x()), r()))})); },
         1, 1},
        {"under if lo < hi without else: the copy moves in", [] { return kernel(if_then(make_cmp(CmpOp::LT, lo(), hi()), {chunk_loop(make_mul(term(x()), r()))})); }, 1, 0},
        {"under another guard without else: kept (the copy must run when it fails)",
         [] { return kernel(if_then(make_cmp(CmpOp::GT, r(), real_c(0)), {chunk_loop(make_mul(term(x()), r()))})); }, 0, 1},
        {"a float64 multiplier: kept", [] { return kernel(chunk_loop(make_mul(term(x()), r())), LocalClass::State); }, 0, 1},
        {"a sum, not a product: kept", [] { return kernel(chunk_loop(make_add(term(x()), r()))); }, 0, 1},
        {"three factors: kept", [] { return kernel(chunk_loop(make_mul(make_mul(term(x()), r()), r()))); }, 0, 1},
        {"the term not walked by x: kept", [] { return kernel(chunk_loop(make_mul(term(int_c(3)), r()))); }, 0, 1},
        {"$ep read after its copy: kept (the fused path would leave it unfilled)",
         [] {
             return kernel(chunk_loop(make_mul(term(x()), r())), LocalClass::Tile, assign(local_at("$t", int_c(0)), local_at("$ep", int_c(1))));
         },
         0, 1},
        {"a second statement in the loop: kept",
         [] {
             return kernel(for_loop(x(), lo(), hi(),
                                    {assign(local_at("$ep", make_sub(x(), lo())), make_mul(term(x()), r())), assign(local_at("$t", x()), real_c(0))},
                                    LoopKind::Simd));
         },
         0, 1},
    };
    for (const Case &c : cases) {
        ArenaScope a;
        Module m = c.make();
        ASSERT_NO_THROW(verify(m)) << c.what;
        Module out = scale_row_copies(m);
        EXPECT_NO_THROW(verify(out)) << c.what;
        std::string t = to_string(out);
        EXPECT_EQ(test::count_of(t, kScaled), static_cast<size_t>(c.scaled)) << c.what << "\n" << t;
        EXPECT_EQ(test::count_of(t, kPlain), static_cast<size_t>(c.plain)) << c.what << "\n" << t;
        if (c.scaled == 0) {
            EXPECT_EQ(t, to_string(m)) << c.what;
        }
    }
}


TEST(ScaleRowCopies, SoftmaxOutputsAreBitForBitThoseWithoutThePass) {
    ArenaScope arena;
    std::vector<std::string> without;
    for (const TilePassInfo &p : tile_passes())
        if (p.id != TilePass::ScaleCopies) without.push_back(p.name);
    for (const char *dtype : {"f32", "bf16"})
        for (int64_t C : {int64_t{300}, int64_t{2048}, int64_t{5000}}) {
            SCOPED_TRACE(std::string(dtype) + " C=" + std::to_string(C));
            const int64_t R = 9;
            std::string spec = test::softmax_spec(dtype);
            Options on, off;
            on.sizes = off.sizes = {{"R", R}, {"C", C}};
            off.tile_passes = without;
            auto c = analyze_source(spec, "softmax.rf", make_target(TargetKind::Cpu), on);
            std::string text = tile::to_string(generate(*c).module);
            EXPECT_EQ(test::count_of(text, "... * $r"), 1u) << text;
            rf::Kernel k_on = rf::compile(spec, make_target(TargetKind::Cpu), on);
            rf::Kernel k_off = rf::compile(spec, make_target(TargetKind::Cpu), off);
            std::vector<float> xs = test::softmax_rows(R, C);
            bool bf16 = std::string(dtype) == "bf16";
            const DType dt = bf16 ? DType::bf16 : DType::f32;
            std::vector<uint16_t> xb(xs.size());
            for (size_t i = 0; i < xs.size(); i++) {
                uint32_t u;
                std::memcpy(&u, &xs[i], 4);
                xb[i] = static_cast<uint16_t>(u >> 16);
            }
            const void *in = bf16 ? static_cast<const void *>(xb.data()) : static_cast<const void *>(xs.data());
            const size_t bytes = xs.size() * (bf16 ? 2 : 4);
            std::vector<unsigned char> y_on(bytes, 0xAB), y_off(bytes, 0xCD);
            k_on({{const_cast<void *>(in), dt, {R, C}}}, {{y_on.data(), dt, {R, C}}});
            k_off({{const_cast<void *>(in), dt, {R, C}}}, {{y_off.data(), dt, {R, C}}});
            EXPECT_EQ(std::memcmp(y_on.data(), y_off.data(), bytes), 0);
        }
    // The GPU lowering keeps its plain copies.
    auto g = analyze_source(test::softmax_spec("bf16"), "softmax.rf", make_target(TargetKind::Cuda), {});
    EXPECT_EQ(test::count_of(tile::to_string(generate(*g).module), "... * $"), 0u);
}
