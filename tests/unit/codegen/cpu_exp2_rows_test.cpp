/** \file cpu_exp2_rows_test.cpp
 * The exp2 of float vector loops staged through rfk::exp2_row (CpuKernelPrinter.cpp print_staged_exp2):
 * a loop accumulating into locals computes its exp2 arguments into a stack array per strip of 1024
 * and calls the row primitive; a loop storing to an output keeps the inline exp2_f. The kernels so
 * built pass the reference check on rows shorter than a vector, across strip boundaries, with results
 * in the denormals, and on rows that are fully masked (-inf), hold +inf or NaN, or mix -inf with
 * finite values (the guarded loop of non-finite row maxima is staged too). A loop whose only statement
 * rewrites a float tile row element by element (attention's exp tile P over its score tile S) is one
 * rfk::exp2_affine_row call when the argument is affine in a tile row, else the argument in place and
 * exp2_row; one whose exp2 reads another element of the array it writes stays inline.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <regex>

#include "../ExampleRuns.h"
#include "../ExampleSizes.h"
#include "SoftmaxSpecs.h"
#include "../runtime/TempDir.h"
#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "interp/Npy.h"
#include "codegen/CodeGen_CPU.h"
#include "tile/LowerPass.h"
#include "tile/TileIR.h"

using namespace rf;

namespace {

using test::softmax_path;
using test::softmax_with;

std::string cpp_for(const std::string &src, std::map<std::string, int64_t> sizes = {}) {
    ArenaScope arena;
    Options o;
    o.sizes = std::move(sizes);
    auto c = analyze_source(src, "softmax.rf", make_target(TargetKind::Cpu), o);
    return generate(*c).source;
}

/** The CPU source of m with one kernel: body in a parallel loop over r in [0, R). */
std::string generate_row_kernel(tile::Module &m, Expr r, const std::vector<tile::StmtP> &body) {
    tile::Kernel k;
    k.name = "k0";
    k.body = tile::for_loop(r, tile::int_c(0), make_size("R"), body, tile::LoopKind::Parallel);
    m.kernels.push_back(k);
    tile::verify(m);
    return generate_cpu(m);
}

/** One vector loop over j in [0, 64) whose only statement is `target op= value`. */
struct RowLoop {
    ReduceOp op;
    const char *target;
    Expr value;
};

/** The CPU source of a row kernel over r in [0, R) with a bf16 input X[R, 64], a float tile row $x[128]
 *  and a scalar $c: the scalar targets of `loops` declared 0, the loops in order, and the targets' sum
 *  stored to Y[r]. */
std::string row_loops_source(const std::vector<RowLoop> &loops) {
    using namespace rf::tile;
    Expr j = make_index("$j"), r = make_index("$r");
    Module m;
    m.sizes = {"R"};
    m.buffers.push_back({"X", Buffer::Role::Input, DType::bf16, {make_size("R"), int_c(64)}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {make_size("R")}});
    std::vector<StmtP> body{decl("$c", LocalClass::Tile, {}, real_c(-1.5)), decl("$x", LocalClass::Tile, {int_c(128)}, real_c(0.5))};
    Expr total = real_c(0);
    for (const RowLoop &l : loops) {
        body.push_back(decl(l.target, LocalClass::Tile, {}, real_c(0)));
        total = make_add(total, local_var(l.target));
    }
    for (const RowLoop &l : loops)
        body.push_back(for_loop(j, int_c(0), int_c(64), {accum(l.op, local_var(l.target), l.value)}, LoopKind::Simd));
    body.push_back(store(make_load("Y", {r}, DType::f32, SType::Real), total));
    return generate_row_kernel(m, r, body);
}

}  // namespace

TEST(CpuExp2Rows, LoopsIntoLocalsAreStagedLoopsIntoOutputsAreNot) {
    // bf16: the exp2 loop sums and writes a float row buffer. Its copy for finite row statistics is one
    // rfk::exp2_row_sum over the bf16 row (argument (x + (-m)) · log2(e), sum offset -h); the copy for
    // non-finite ones (rfk::sub, not a sum) is staged. Both with the degree-4 exp2 of a module whose
    // outputs are all bf16 (CpuOutputPrecision.cpp cpu_half_accuracy_exp2).
    std::string bf16 = cpp_for(softmax_with("bf16", "bf16"));
    EXPECT_NE(bf16.find(" += rfk::exp2_row_sum<rfk::Exp2Accuracy::Half>(&l_p1_rowterm["), std::string::npos) << bf16;
    EXPECT_NE(bf16.find("], &rf_b0["), std::string::npos) << bf16;
    EXPECT_NE(bf16.find("rfk::exp2_row<rfk::Exp2Accuracy::Half>(l_rfx_x0, l_rfx_e - l_rfx_s);"), std::string::npos);
    EXPECT_NE(bf16.find("alignas(64) float l_rfx_x0[1024];"), std::string::npos);
    // f32 too, at rows of 128 values or more: on the CPU its terms go to a float row buffer
    // (LowerPlan.cpp split_for_term_reuse).
    std::string f32 = cpp_for(softmax_with("f32", "f32"), {{"R", 64}, {"C", 1024}});
    EXPECT_NE(f32.find("rfk::exp2_row(l_rfx_x0, l_rfx_e - l_rfx_s);"), std::string::npos);
    // f64: the exp2 loop stores into Y itself (the first touch of its lines), so exp2_f stays inline.
    std::string f64 = cpp_for(softmax_with("f32", "f64"));
    EXPECT_EQ(f64.find("rfk::exp2_row("), std::string::npos);
    EXPECT_NE(f64.find("rfk::exp2_f("), std::string::npos);
}

TEST(CpuExp2Rows, StagedSoftmaxMatchesTheReference) {
    std::string src = softmax_with("bf16", "bf16");
    for (int64_t C : {1, 15, 17, 1023, 1024, 1025, 2500}) {
        RunOptions o;
        o.sizes = {{"R", 5}, {"C", C}};
        test::check_run(softmax_path(), src, o, "cpu", {1});
        o.tile = 4096;  // one vector loop over the whole row: several strips
        test::check_run(softmax_path(), src, o, "cpu", {2});
    }
    // Inputs scaled by 100: exp2 results in the denormals and exact zeros.
    RunOptions wide;
    wide.sizes = {{"R", 9}, {"C", 1100}};
    wide.scale = 100;
    test::check_run(softmax_path(), src, wide, "cpu", {3});
    // An f32 output checked at f32's tolerance: logsumexp's exp2 loop only sums, so it is staged.
    std::filesystem::path lse = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "logsumexp.rf";
    std::string lse_src = test::read_text(lse);
    EXPECT_NE(cpp_for(lse_src).find("rfk::exp2_row("), std::string::npos);
    EXPECT_NE(cpp_for(lse_src).find("rfk::exp2_row_sum((float *)nullptr, &rf_b0["), std::string::npos);
    for (int64_t C : {7, 1025, 3000}) {
        RunOptions o;
        o.sizes = {{"R", 4}, {"C", C}};
        test::check_run(lse, lse_src, o, "cpu", {5});
        o.scale = 100;
        test::check_run(lse, lse_src, o, "cpu", {6});
    }
}

TEST(CpuExp2Rows, MaskedInfiniteAndNaNRows) {
    const double inf = std::numeric_limits<double>::infinity();
    for (const char *dt : {"bf16", "f32"}) {
        SCOPED_TRACE(dt);
        std::string src = softmax_with(dt, "bf16");
        ArenaScope arena;
        auto c = compile_source(src, "softmax.rf", {});
        const int64_t R = 6, C = 1500;
        auto in = make_random_inputs(c->program, bind_sizes(c->program, {{"R", R}, {"C", C}}), 4);
        std::vector<double> &x = in.at("X").data;
        for (int64_t j = 0; j < C; ++j) x[size_t(0 * C + j)] = -inf;  // fully masked: zeros
        x[size_t(1 * C + 700)] = inf;                                  // +inf: NaN there, zeros elsewhere
        x[size_t(2 * C + 1200)] = std::nan("");                       // NaN: a NaN row
        for (int64_t j = 0; j < C; j += 3) x[size_t(3 * C + j)] = -inf;  // masked elements among finite ones
        x[size_t(4 * C + 5)] = round_to_dtype(1e-40, in.at("X").dtype);   // a denormal input
        RunOptions o;
        o.sizes = {{"R", R}, {"C", C}};
        test::check_run_on_inputs(softmax_path(), src, in, o, "cpu", {4});
    }
}

TEST(CpuExp2Rows, InPlaceElementWiseRewritesAreOneRowCallOtherReadsAreNot) {
    ArenaScope arena;
    // Attention's exp tile: $pro0[rr * S + j - tb] = exp2($pro0[rr * S + j - tb] * h + (-m)) in place,
    // one fused call (exp2_affine_row); the copy for a non-finite row maximum (rfk::sub, not affine)
    // writes its argument into the tile and calls exp2_row on it: no staging array either way. The
    // example's output is bf16: both with the degree-4 exp2 (CpuOutputPrecision.cpp cpu_half_accuracy_exp2).
    std::filesystem::path att = std::filesystem::path(REDFUSE_SOURCE_DIR) / "examples" / "attention.rf";
    auto c = analyze_source(test::read_text(att), "attention.rf", make_target(TargetKind::Cpu), {});
    std::string att_src = generate(*c).source;
    EXPECT_NE(att_src.find("rfk::exp2_affine_row<rfk::Exp2Accuracy::Half>(&l_pro0["), std::string::npos) << att_src;
    EXPECT_NE(att_src.find("rfk::exp2_row<rfk::Exp2Accuracy::Half>(&l_pro0["), std::string::npos) << att_src;
    EXPECT_EQ(att_src.find("l_rfx_x0"), std::string::npos) << att_src;
    // By hand: $a[j] = exp2($a[j]) and $c[j] = exp2($c[j] * h + m) are affine rows; $d[j] =
    // exp2(sub($d[j] * h, m)) is written in place then exp2_row'd; $b[j] = exp2($b[j - 1]) reads what
    // the iteration before wrote, which a row call would read before that write: it stays inline, as
    // does $e[j] = exp2($e[j] * $e[0]) (its scale reads the row being written).
    using namespace rf::tile;
    Expr j = make_index("$j");
    Expr h = local_var("$h"), mx = local_var("$mx");
    auto at = [&](const char *a, Expr i) { return local_at(a, i); };
    Module m;
    m.sizes = {"R"};
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {make_size("R")}});
    std::vector<StmtP> body{
        decl(h->name, LocalClass::Tile, {}, real_c(0.5)),
        decl(mx->name, LocalClass::Tile, {}, real_c(-3)),
    };
    Expr sum = real_c(0);
    for (const char *a : {"$a", "$b", "$c", "$d", "$e"}) {
        body.push_back(decl(a, LocalClass::Tile, {int_c(65)}, real_c(1)));
        sum = make_add(sum, at(a, int_c(3)));
    }
    auto exp_loop = [&](const char *a, Expr begin, Expr arg) {
        body.push_back(for_loop(j, begin, int_c(64), {assign(at(a, j), make_call(Func::exp2, arg))}, LoopKind::Simd));
    };
    exp_loop("$a", int_c(0), at("$a", j));
    exp_loop("$b", int_c(1), at("$b", make_sub(j, int_c(1))));
    exp_loop("$c", int_c(0), make_add(make_mul(at("$c", j), h), mx));
    exp_loop("$d", int_c(0), make_sub(make_mul(at("$d", j), h), mx));
    exp_loop("$e", int_c(0), make_mul(at("$e", j), at("$e", int_c(0))));
    body.push_back(store(make_load("Y", {make_index("$r")}, DType::f32, SType::Real), sum));
    std::string src = generate_row_kernel(m, make_index("$r"), body);
    EXPECT_NE(src.find("rfk::exp2_affine_row(&l_a[(int64_t)0], &l_a[(int64_t)0], ((int64_t)64) - ((int64_t)0), 1.0f, 0.0f);"), std::string::npos) << src;
    EXPECT_NE(src.find("rfk::exp2_affine_row(&l_c[(int64_t)0], &l_c[(int64_t)0], ((int64_t)64) - ((int64_t)0), (float)((float)l_h), (float)((float)l_mx));"), std::string::npos) << src;
    EXPECT_NE(src.find("rfk::exp2_row(&l_d[(int64_t)0], ((int64_t)64) - ((int64_t)0));"), std::string::npos) << src;
    EXPECT_EQ(src.find("rfk::exp2_row(l_rfx"), std::string::npos) << src;
    EXPECT_EQ(src.find("&l_b["), std::string::npos) << src;
    EXPECT_EQ(src.find("&l_e["), std::string::npos) << src;
    EXPECT_NE(src.find("rfk::exp2_f("), std::string::npos) << src;
}

TEST(CpuExp2Rows, SumsOfARowsExp2AreOneRowCallOthersAreNot) {
    // By hand, over a float tile row $x (and one float buffer X), j in [0, 64):
    //   $s += exp2(($x[j] + c) · a) + d; $t[j] = exp2(($x[j] + c) · a)   -> exp2_row_sum into $t, sum into $s
    //   $s2 += exp2(X[r, j] · a)                                          -> exp2_row_sum from X, no row kept
    //   $s3 += exp2(($x[j] + c + c) · a)   (a three-term sum)            -> staged: the roundings' order
    //   $s4 += exp2($x[2j] · a)            (not contiguous)              -> staged
    //   $s5 += exp2($x[j] · a) + $t[0]; $t[j] = exp2($x[j] · a)  (the offset reads the row written) -> staged
    ArenaScope arena;
    using namespace rf::tile;
    Expr j = make_index("$j"), r = make_index("$r");
    Expr c = local_var("$c"), a = local_var("$a");
    Module m;
    m.sizes = {"R"};
    m.buffers.push_back({"X", Buffer::Role::Input, DType::f32, {make_size("R"), int_c(64)}});
    m.buffers.push_back({"Y", Buffer::Role::Output, DType::f32, {make_size("R")}});
    std::vector<StmtP> body{decl(c->name, LocalClass::Tile, {}, real_c(-1.5)), decl(a->name, LocalClass::Tile, {}, real_c(1.25)),
                            decl("$x", LocalClass::Tile, {int_c(128)}, real_c(0.5)), decl("$t", LocalClass::Tile, {int_c(64)}, real_c(0))};
    Expr sum = real_c(0);
    for (const char *n : {"$s", "$s2", "$s3", "$s4", "$s5"}) {
        body.push_back(decl(n, LocalClass::Tile, {}, real_c(0)));
        sum = make_add(sum, local_var(n));
    }
    auto x = [&](Expr i) { return local_at("$x", i); };
    auto e2 = [&](Expr arg) { return make_call(Func::exp2, arg); };
    auto simd = [&](std::vector<StmtP> b) { body.push_back(for_loop(j, int_c(0), int_c(64), std::move(b), LoopKind::Simd)); };
    Expr arg = make_mul(make_add(x(j), c), a);
    simd({accum(ReduceOp::Sum, local_var("$s"), make_add(e2(arg), real_c(-0.25))), assign(local_at("$t", j), e2(arg))});
    simd({accum(ReduceOp::Sum, local_var("$s2"), e2(make_mul(make_load("X", {r, j}, DType::f32, SType::Real), a)))});
    simd({accum(ReduceOp::Sum, local_var("$s3"), e2(make_mul(make_add({x(j), c, c}), a)))});
    simd({accum(ReduceOp::Sum, local_var("$s4"), e2(make_mul(x(make_mul(j, int_c(2))), a)))});
    simd({accum(ReduceOp::Sum, local_var("$s5"), make_add(e2(make_mul(x(j), a)), local_at("$t", int_c(0)))),
          assign(local_at("$t", j), e2(make_mul(x(j), a)))});
    body.push_back(store(make_load("Y", {r}, DType::f32, SType::Real), make_add(sum, local_at("$t", int_c(3)))));
    std::string src = generate_row_kernel(m, r, body);
    EXPECT_NE(src.find("l_s += rfk::exp2_row_sum(&l_t[(int64_t)0], &l_x[(int64_t)0], ((int64_t)64) - ((int64_t)0), (float)(((float)l_c)), "
                       "(float)(((float)l_a)), (float)((float)-0.25));"), std::string::npos) << src;
    EXPECT_NE(src.find("l_s2 += rfk::exp2_row_sum((float *)nullptr, &rf_b0["), std::string::npos) << src;
    EXPECT_NE(src.find(", 0.0f, (float)(((float)l_a)), 0.0f);"), std::string::npos) << src;
    // The others keep the staged form: their sums accumulate element by element.
    for (const char *staged : {"l_s3", "l_s4", "l_s5"}) {
        EXPECT_EQ(src.find(std::string(staged) + " += rfk::exp2_row_sum"), std::string::npos) << staged << "\n" << src;
        EXPECT_NE(src.find(std::string(staged) + " += "), std::string::npos) << staged << "\n" << src;
    }
}

TEST(CpuExp2Rows, ASumOfARowIsOneRowCallOthersAreNot) {
    // By hand, j in [0, 64):
    //   $s += $x[j]        -> rfk::row_sum over the float tile row $x
    //   $t += X[r, j]      -> rfk::row_sum over the bf16 buffer's row
    //   $u += $x[2j]       (not contiguous)   -> the omp simd reduction
    //   $v += $x[j] · $c   (scaled)           -> the omp simd reduction
    ArenaScope arena;
    using namespace rf::tile;
    Expr j = make_index("$j"), r = make_index("$r"), c = local_var("$c");
    auto x = [&](Expr i) { return local_at("$x", i); };
    std::string src = row_loops_source({{ReduceOp::Sum, "$s", x(j)},
                                        {ReduceOp::Sum, "$t", make_load("X", {r, j}, DType::bf16, SType::Real)},
                                        {ReduceOp::Sum, "$u", x(make_mul(j, int_c(2)))},
                                        {ReduceOp::Sum, "$v", make_mul(x(j), c)}});
    EXPECT_NE(src.find("l_s += rfk::row_sum(&l_x[(int64_t)0], ((int64_t)64) - ((int64_t)0));"), std::string::npos) << src;
    EXPECT_NE(src.find("l_t += rfk::row_sum(&rf_b0["), std::string::npos) << src;
    for (const char *plain : {"l_u", "l_v"}) {
        EXPECT_EQ(src.find(std::string(plain) + " += rfk::row_sum"), std::string::npos) << plain << "\n" << src;
        EXPECT_NE(src.find("reduction(+:" + std::string(plain) + ")"), std::string::npos) << plain << "\n" << src;
    }
}

TEST(CpuExp2Rows, MaxAndMinOfARowAreOneRowCallOthersAreNot) {
    // By hand, over a float tile row $x (and one bf16 buffer X), j in [0, 64):
    //   $m = max($m, $x[j] · $c)   -> rfk::row_max over $x, scale $c
    //   $n = min($n, X[r, j])      -> rfk::row_min over the bf16 row, scale 1
    //   $p = max($p, $x[2j])       (not contiguous)     -> the flagged omp simd reduction
    //   $q = max($q, $x[j] + $c)   (not a product)      -> the flagged omp simd reduction
    ArenaScope arena;
    using namespace rf::tile;
    Expr j = make_index("$j"), r = make_index("$r"), c = local_var("$c");
    auto x = [&](Expr i) { return local_at("$x", i); };
    std::string src = row_loops_source({{ReduceOp::Max, "$m", make_mul(x(j), c)},
                                        {ReduceOp::Min, "$n", make_load("X", {r, j}, DType::bf16, SType::Real)},
                                        {ReduceOp::Max, "$p", x(make_mul(j, int_c(2)))},
                                        {ReduceOp::Max, "$q", make_add(x(j), c)}});
    EXPECT_NE(src.find("l_m = rfk::row_max(&l_x[(int64_t)0], ((int64_t)64) - ((int64_t)0), (float)(((float)l_c)), l_m);"), std::string::npos) << src;
    EXPECT_NE(src.find("l_n = rfk::row_min(&rf_b0["), std::string::npos) << src;
    EXPECT_NE(src.find(", 1.0f, l_n);"), std::string::npos) << src;
    for (const char *flagged : {"l_p", "l_q"}) {
        EXPECT_EQ(src.find(std::string(flagged) + " = rfk::row_"), std::string::npos) << flagged << "\n" << src;
        EXPECT_NE(src.find("int " + std::string(flagged) + "_nan = 0;"), std::string::npos) << flagged << "\n" << src;
    }
    // The generated bf16 softmax's max pass is one call over its input row.
    EXPECT_NE(cpp_for(softmax_with("bf16", "bf16")).find(" = rfk::row_max(&rf_b0["), std::string::npos);
}
