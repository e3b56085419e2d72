/** \file first_gemm_stores_test.cpp
 * The CPU tile pass first-gemm-stores (src/tile/FirstGemmStores.cpp): a tile GEMM into a zeroed float
 * tile, the first statement of a serial loop to touch it, stores on the loop's first iteration — kept
 * as it is when anything touches the tile before it, when it runs under a branch, for a loop that is
 * not serial, the NN form, a non-positive or non-constant alpha, a tile not declared 0 or a float64
 * state; its zero fill then shrinks to what the GEMM leaves, unless M or N reads a local declared
 * between the declaration and the loop or written in the loop, or C's rows leave gaps; the weight GEMMs
 * of RMSNorm→GEMM and the quantized GEMMs take it, and their outputs are bit for bit those of the
 * kernels without the pass (K in one tile and in two, partial row blocks, special values included).
 */
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../ExampleSizes.h"
#include "driver/Compiler.h"
#include "driver/Kernel.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/TileIR.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr t() { return make_index("$tile"); }

/** gemm $acc[0] += alpha * $f[0] x W[0, 0]^T over M x 8 x K (or W's NN form), C's rows ldc apart. */
StmtP gemm_into(const std::string &acc, Expr alpha, bool trans_b = true, const std::string &a = "$f", Expr M = int_c(4),
                Expr ldc = int_c(8)) {
    Expr K = make_size("K");
    GemmInfo g;
    g.M = M;
    g.N = int_c(8);
    g.K = K;
    g.a_base = local_at(a, int_c(0));
    g.a_si = K;
    g.a_sk = int_c(1);
    g.b_base = make_load("W", {int_c(0), int_c(0)}, DType::f32, SType::Real);
    g.b_sj = trans_b ? K : int_c(1);
    g.b_sk = trans_b ? int_c(1) : int_c(8);
    g.c_base = local_at(acc, int_c(0));
    g.c_si = ldc;
    g.alpha = alpha;
    g.trans_b = trans_b;
    g.accumulate = true;
    return gemm(g);
}

StmtP touch(const std::string &acc) { return assign(local_at(acc, int_c(3)), real_c(2)); }

struct Shape {
    Expr init = real_c(0);
    LocalClass cls = LocalClass::Tile;
    std::vector<StmtP> before;      ///< between the declaration and the loop
    std::vector<StmtP> loop_head;   ///< in the loop, before the GEMM
    StmtP gemm_stmt = nullptr;      ///< default: gemm_into("$acc", 1)
    bool under_if = false;          ///< the GEMM inside an if
    LoopKind loop = LoopKind::Serial;
};

/** $acc[32] = init; before...; for $tile in [0, 3): { loop_head...; gemm }; Y = $acc. */
Module kernel(const Shape &sh) {
    Module m;
    m.sizes = {"K"};
    Expr K = make_size("K");
    m.buffers.push_back({"W", Buffer::Role::Input, DType::f32, {int_c(8), K}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {int_c(32)}});
    StmtP g = sh.gemm_stmt ? sh.gemm_stmt : gemm_into("$acc", real_c(1));
    std::vector<StmtP> loop_body = sh.loop_head;
    loop_body.push_back(sh.under_if ? if_then(make_cmp(CmpOp::LT, t(), int_c(2)), {g}) : g);
    std::vector<StmtP> body{decl("$f", LocalClass::Tile, {make_mul(int_c(4), K)}, real_c(1)), decl("$acc", sh.cls, {int_c(32)}, sh.init)};
    for (const StmtP &s : sh.before) body.push_back(s);
    body.push_back(for_loop(t(), int_c(0), int_c(3), loop_body, sh.loop));
    Expr x = make_index("$x");
    body.push_back(for_loop(x, int_c(0), int_c(32), {store(make_load("Y", {x}, DType::f32, SType::Real), local_at("$acc", x))}));
    tile::Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$row"), int_c(0), int_c(1), body, LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

const char *kStores = "(+= if $tile != 0, else =)";

/** How the pass leaves the tile's zero fill. */
enum class Fill { Whole, Shrunk };

}  // namespace

TEST(FirstGemmStores, TableOfKernels) {
    struct Case {
        const char *what;
        std::function<Shape()> make;
        bool stores;
        Fill fill = Fill::Whole;  ///< Shrunk: the declaration loses its 0 to a fill of what the GEMM leaves
        const char *fill_head = "";  ///< Shrunk: the fill loop's head
    };
    std::vector<Case> cases = {
        {"the GEMM first in the loop: stores on the first tile, writing all 4 x 8 of the tile: no fill",
         [] { return Shape{}; }, true, Fill::Shrunk, "for $acc_fill in [32, 32) serial:"},
        {"a statement between not touching the tile: stores",
         [] {
             Shape s;
             s.before = {decl("$n", LocalClass::Index, {}, int_c(0))};
             s.loop_head = {decl("$tb", LocalClass::Index, {}, make_mul(t(), int_c(4)))};
             return s;
         },
         true, Fill::Shrunk, "for $acc_fill in [32, 32) serial:"},
        {"alpha 0.125: stores", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(0.125));
             return s;
         }, true, Fill::Shrunk, "for $acc_fill in [32, 32) serial:"},
        {"M a size: the fill starts past the GEMM's M x 8 when the loop runs", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(1), true, "$f", make_size("K"));
             return s;
         }, true, Fill::Shrunk, "for $acc_fill in [8 * K, 32) serial:"},
        {"M the row loop's variable (bound before the declaration): shrunk", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(1), true, "$f", make_index("$row"));
             return s;
         }, true, Fill::Shrunk, "for $acc_fill in [8 * $row, 32) serial:"},
        {"M a local declared between the declaration and the loop: whole fill", [] {
             Shape s;
             s.before = {decl("$m", LocalClass::Index, {}, int_c(2))};
             s.gemm_stmt = gemm_into("$acc", real_c(1), true, "$f", make_index("$m"));
             return s;
         }, true},
        {"M a local the loop writes: whole fill", [] {
             Shape s;
             s.loop_head = {decl("$m", LocalClass::Index, {}, int_c(2))};
             s.gemm_stmt = gemm_into("$acc", real_c(1), true, "$f", make_index("$m"));
             return s;
         }, true},
        {"C's rows 16 apart, 8 wide (gaps the GEMM leaves): whole fill", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(1), true, "$f", int_c(2), int_c(16));
             return s;
         }, true},

        {"the tile declared 1: kept", [] {
             Shape s;
             s.init = real_c(1);
             return s;
         }, false},
        {"a float64 state: kept", [] {
             Shape s;
             s.cls = LocalClass::State;
             return s;
         }, false},
        {"written between the declaration and the loop: kept", [] {
             Shape s;
             s.before = {touch("$acc")};
             return s;
         }, false},
        {"written in the loop before the GEMM: kept", [] {
             Shape s;
             s.loop_head = {touch("$acc")};
             return s;
         }, false},
        {"the GEMM under a branch: kept", [] {
             Shape s;
             s.under_if = true;
             return s;
         }, false},
        {"an independent loop: kept", [] {
             Shape s;
             s.loop = LoopKind::Independent;
             return s;
         }, false},
        {"the NN form: kept", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(1), false);
             return s;
         }, false},
        {"alpha -1 (-0 from +0): kept", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(-1));
             return s;
         }, false},
        {"alpha a local: kept", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", local_var("$r"));
             s.before = {decl("$r", LocalClass::Tile, {}, real_c(2))};
             return s;
         }, false},
        {"the tile is also the A operand: kept", [] {
             Shape s;
             s.gemm_stmt = gemm_into("$acc", real_c(1), true, "$acc");
             return s;
         }, false},
    };
    for (const Case &c : cases) {
        ArenaScope a;
        Module m = kernel(c.make());
        ASSERT_NO_THROW(verify(m)) << c.what;
        Module out = store_first_gemm_tiles(m);
        EXPECT_NO_THROW(verify(out)) << c.what;
        std::string text = to_string(out);
        EXPECT_EQ(test::count_of(text, kStores), c.stores ? 1u : 0u) << c.what << "\n" << text;
        EXPECT_EQ(test::count_of(text, "$acc_fill"), c.fill == Fill::Shrunk ? 2u : 0u) << c.what << "\n" << text;
        if (c.fill == Fill::Shrunk) {
            EXPECT_EQ(test::count_of(text, c.fill_head), 1u) << c.what << "\n" << text;
            EXPECT_EQ(test::count_of(text, "$acc[$acc_fill] = 0"), 1u) << c.what << "\n" << text;
        }
        if (!c.stores) {
            EXPECT_EQ(text, to_string(m)) << c.what;
        }
    }
}

namespace {

uint16_t bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
}

/** Random bytes of a tensor of `n` elements of dtype dt, normal values with a few special ones
 *  (bf16: a row of zeros, an inf, a NaN; integer and fp8 weights: their full range). */
std::vector<unsigned char> tensor(DType dt, int64_t n, int64_t row, std::mt19937 &rng) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<unsigned char> b(static_cast<size_t>(n) * static_cast<size_t>(dtype_bytes(dt)));
    if (dt == DType::bf16) {
        auto *p = reinterpret_cast<uint16_t *>(b.data());
        for (int64_t i = 0; i < n; i++) p[i] = bf16_bits(nd(rng));
        if (n > 4 * row) {
            for (int64_t j = 0; j < row; j++) p[row + j] = 0;                               // a zero row
            p[2 * row + 5] = bf16_bits(std::numeric_limits<float>::infinity());             // an inf
            p[3 * row + 1] = bf16_bits(std::numeric_limits<float>::quiet_NaN());            // a NaN
        }
    } else if (dt == DType::f32) {
        auto *p = reinterpret_cast<float *>(b.data());
        for (int64_t i = 0; i < n; i++) p[i] = nd(rng);
    } else {
        std::uniform_int_distribution<int> byte(0, 255);
        for (unsigned char &v : b) v = static_cast<unsigned char>(byte(rng));
        if (dt == DType::f8e4m3)
            for (unsigned char &v : b)
                if ((v & 0x7F) == 0x7F) v = 0x3C;  // no NaN weights: NaN · 0 is not what is compared
    }
    return b;
}

}  // namespace

TEST(FirstGemmStores, WeightGemmOutputsAreBitForBitThoseWithoutThePass) {
    ArenaScope arena;
    std::vector<std::string> without;
    for (const TilePassInfo &p : tile_passes())
        if (p.id != TilePass::FirstGemmStores) without.push_back(p.name);
    struct Run {
        const char *spec;
        int64_t M, N, K, tile, row_block;  // tile, row_block 0: the planner's
    };
    // Blocks of 128 rows and tiles of K = 4096, as for M = 4096: 200 rows are a block of 128 (the int8
    // kernel's store converts, the B-in-place form) and one of 72 (the other forms); K = 5000 two tiles,
    // the second adding to the first.
    for (const Run &r : {Run{"quant_gemm_int8.rf", 200, 300, 600, 4096, 128}, Run{"quant_gemm_int8.rf", 130, 264, 5000, 4096, 128},
                         Run{"quant_gemm_int8.rf", 40, 100, 700, 0, 0}, Run{"rmsnorm_gemm.rf", 200, 300, 5000, 4096, 128},
                         Run{"quant_gemm_fp8.rf", 70, 200, 600, 0, 0}}) {
        SCOPED_TRACE(std::string(r.spec) + " M=" + std::to_string(r.M) + " N=" + std::to_string(r.N) + " K=" + std::to_string(r.K));
        std::string spec = test::read_text(std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / r.spec);
        Options on, off;
        on.sizes = off.sizes = {{"M", r.M}, {"N", r.N}, {"K", r.K}};
        on.tile = off.tile = r.tile;
        on.row_block = off.row_block = r.row_block;
        off.tile_passes = without;
        auto c = analyze_source(spec, r.spec, make_target(TargetKind::Cpu), on);
        EXPECT_EQ(test::count_of(tile::to_string(generate(*c).module), "(+= if $"), 1u);
        rf::Kernel k_on = rf::compile(spec, make_target(TargetKind::Cpu), on);
        rf::Kernel k_off = rf::compile(spec, make_target(TargetKind::Cpu), off);
        std::mt19937 rng(11);
        std::vector<std::vector<unsigned char>> data(k_on.inputs().size());
        std::vector<TensorView> ins;
        for (size_t i = 0; i < data.size(); i++) {
            const TensorInfo &a = k_on.inputs()[i];
            std::vector<int64_t> shape;
            int64_t n = 1;
            for (const std::string &d : a.shape) n *= shape.emplace_back(on.sizes.at(d));  // every dimension a size
            data[i] = tensor(a.dtype, n, shape.back(), rng);
            ins.emplace_back(data[i].data(), a.dtype, shape);
        }
        const size_t bytes = static_cast<size_t>(r.M * r.N * 2);
        std::vector<unsigned char> y_on(bytes, 0xAB), y_off(bytes, 0xCD);
        k_on(ins, {{y_on.data(), DType::bf16, {r.M, r.N}}});
        k_off(ins, {{y_off.data(), DType::bf16, {r.M, r.N}}});
        EXPECT_EQ(std::memcmp(y_on.data(), y_off.data(), bytes), 0);
    }
}
