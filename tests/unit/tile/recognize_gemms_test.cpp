/** \file recognize_gemms_test.cpp
 * The recognize_gemms pass, as a table: which dot-product loops over a block of rows become GEMMs
 * (one block GEMM, per-row GEMVs, the GQA choice between the two) and which stay loops (every
 * precondition of RecognizeGemms.cpp refused once).
 */
#include <gtest/gtest.h>

#include <functional>

#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

using namespace rf;
using namespace rf::tile;

namespace {

Expr D() { return make_size("D"); }
Expr rr() { return make_index("$rr"); }
Expr jj() { return make_index("$jj0"); }
Expr d() { return make_index("d"); }
Expr rbase() { return local_var("$rbase", SType::Int); }
Expr tb() { return local_var("$tb", SType::Int); }
Expr te() { return local_var("$te", SType::Int); }
Expr row() { return make_add(rbase(), rr()); }
Expr load(const std::string &t, std::vector<Expr> idx, DType dt = DType::f32) { return make_load(t, std::move(idx), dt, SType::Real); }
Expr dot(Expr a, Expr b) { return make_reduce(ReduceOp::Sum, {d()}, {D()}, make_mul(a, b)); }

Expr Q() { return load("Q", {row(), d()}); }
Expr K() { return load("K", {jj(), d()}); }

/** The lowering's prologue nest: rows of the block, a simd loop over the tile, one assignment. */
StmtP nest(Expr v, Expr index = nullptr) {
    if (!index) index = make_add(make_mul(rr(), int_c(264)), make_sub(jj(), tb()));
    StmtP inner = for_loop(jj(), tb(), te(), {assign(local_at("$pro0", index), v)}, LoopKind::Simd);
    return for_loop(rr(), int_c(0), local_var("$nbv", SType::Int), {inner}, LoopKind::Independent);
}

/** A kernel declaring $nbv = min(nb, N − $rbase) (nb = 0: no declaration) before the nest. */
Module module_with(StmtP nest_stmt, int64_t nb = 4) {
    Module m;
    m.sizes = {"N", "L", "D", "G"};
    m.buffers.push_back({"Q", Buffer::Role::Input, DType::f32, {make_size("N"), D()}});
    m.buffers.push_back({"K", Buffer::Role::Input, DType::f32, {make_size("L"), D()}});
    m.buffers.push_back({"Kh", Buffer::Role::Input, DType::f32, {make_size("N"), make_size("L"), D()}});
    m.buffers.push_back({"Kt", Buffer::Role::Input, DType::f32, {D(), make_size("L")}});
    m.buffers.push_back({"Qb", Buffer::Role::Input, DType::bf16, {make_size("N"), D()}});
    m.buffers.push_back({"Kb", Buffer::Role::Input, DType::bf16, {make_size("L"), D()}});
    std::vector<StmtP> body;
    if (nb > 0) body.push_back(decl("$nbv", LocalClass::Index, {}, make_min(int_c(nb), make_sub(make_size("N"), rbase()))));
    body.push_back(nest_stmt);
    Kernel k;
    k.name = "k0";
    k.body = block(body);
    m.kernels.push_back(k);
    return m;
}

/** The shape of a statement: its kind, and its children's shapes. */
std::string shape(const StmtP &s) {
    static const char *names[] = {"block", "for", "if", "decl", "assign", "accum", "argsel", "topk", "shift", "gemm", "store", "copy", "comment"};
    std::string out = names[static_cast<int>(s->kind)];
    if (s->body.empty() && s->else_body.empty()) return out;
    out += "(";
    for (size_t i = 0; i < s->body.size(); i++) out += (i ? " " : "") + shape(s->body[i]);
    if (!s->else_body.empty()) {
        out += " |";
        for (const StmtP &c : s->else_body) out += " " + shape(c);
    }
    return out + ")";
}

struct Case {
    const char *what;
    std::function<Module()> make;
    const char *after;  ///< the shape of the statement after the $nbv declaration
};

TEST(RecognizeGemms, Table) {
    const std::string loop = "for(for(assign))";
    const Case cases[] = {
        // Recognized.
        {"Q·Kᵀ over the block", [] { return module_with(nest(dot(Q(), K()))); }, "gemm"},
        {"operands in either order", [] { return module_with(nest(dot(K(), Q()))); }, "gemm"},
        {"a scale invariant in j and rr", [] { return module_with(nest(make_mul(dot(Q(), K()), make_size("G")))); }, "gemm"},
        {"f32 times a widened bf16 operand", [] { return module_with(nest(dot(Q(), make_cast(DType::f32, load("Kb", {jj(), d()}, DType::bf16))))); }, "gemm"},
        {"B per row: one GEMV per row", [] { return module_with(nest(dot(Q(), load("Kh", {row(), jj(), d()})))); }, "for(gemm)"},
        {"B per GQA group: block GEMM or GEMVs",
         [] { return module_with(nest(dot(Q(), load("Kh", {make_idiv(row(), make_size("G")), jj(), d()})))); }, "if(gemm | for(gemm))"},
        {"B per GQA group, one row per block",
         [] { return module_with(nest(dot(Q(), load("Kh", {make_idiv(row(), make_size("G")), jj(), d()}))), 1); }, "for(gemm)"},
        // Refused: each precondition once.
        {"scale depends on j", [] { return module_with(nest(make_mul(dot(Q(), K()), load("K", {jj(), int_c(0)})))); }, nullptr},
        {"scale depends on the row", [] { return module_with(nest(make_mul(dot(Q(), K()), load("Q", {row(), int_c(0)})))); }, nullptr},
        {"not a sum", [] { return module_with(nest(make_reduce(ReduceOp::Max, {d()}, {D()}, make_mul(Q(), K())))); }, nullptr},
        {"three factors", [] { return module_with(nest(make_reduce(ReduceOp::Sum, {d()}, {D()}, make_mul({Q(), K(), Q()})))); }, nullptr},
        {"a local operand", [] { return module_with(nest(dot(Q(), load("$x", {jj(), d()}, DType::f64)))); }, nullptr},
        {"d not the last index of B", [] { return module_with(nest(dot(Q(), load("Kt", {d(), jj()})))); }, nullptr},
        {"j in no index of either", [] { return module_with(nest(dot(Q(), load("K", {int_c(0), d()})))); }, nullptr},
        {"bf16 times f32 (no such kernel)", [] { return module_with(nest(dot(load("Qb", {row(), d()}, DType::bf16), K()))); }, nullptr},
        {"target not rr·S + (j − tb)", [] { return module_with(nest(dot(Q(), K()), make_add(make_mul(rr(), int_c(264)), jj()))); }, nullptr},
        {"no row block declared", [] { return module_with(nest(dot(Q(), K())), 0); }, nullptr},
    };
    for (const Case &c : cases) {
        Module in = c.make();
        Module out = recognize_gemms(in);
        const StmtP &s = out.kernels[0].body->body.back();
        std::string want = c.after ? c.after : loop;
        EXPECT_EQ(shape(s), want) << c.what << "\n" << to_string(out);
        if (!c.after) {
            EXPECT_EQ(out.kernels[0].body, in.kernels[0].body) << c.what << ": a refused nest stays the same pointer";
        }
    }
}

TEST(RecognizeGemms, BlockGemmOperands) {
    Module out = recognize_gemms(module_with(nest(make_mul(dot(Q(), K()), make_size("G")))));
    const StmtP &s = out.kernels[0].body->body.back();
    ASSERT_EQ(s->kind, StmtKind::Gemm);
    const GemmInfo &g = *s->gemm;
    EXPECT_EQ(g.M, local_var("$nbv", SType::Int));
    EXPECT_EQ(g.N, make_sub(te(), tb()));
    EXPECT_EQ(g.K, D());
    EXPECT_EQ(g.a_base, load("Q", {rbase(), int_c(0)}));
    EXPECT_EQ(g.b_base, load("K", {tb(), int_c(0)}));
    EXPECT_EQ(g.c_base, local_at("$pro0", int_c(0)));
    EXPECT_EQ(g.a_si, D());
    EXPECT_EQ(g.b_sj, D());
    EXPECT_TRUE(g.a_sk->is_const(1) && g.b_sk->is_const(1));
    EXPECT_TRUE(g.c_si->is_const(264));
    EXPECT_EQ(g.alpha, make_size("G"));
    EXPECT_TRUE(g.trans_b);
    EXPECT_FALSE(g.accumulate);
}

TEST(RecognizeGemms, PerRowGemvKeepsTheRowsIndices) {
    Expr B = load("Kh", {row(), jj(), d()});
    Module out = recognize_gemms(module_with(nest(dot(Q(), B))));
    const StmtP &rows = out.kernels[0].body->body.back();
    ASSERT_EQ(shape(rows), "for(gemm)");
    const GemmInfo &g = *rows->body[0]->gemm;
    EXPECT_TRUE(g.M->is_const(1));
    EXPECT_EQ(g.a_base, load("Q", {row(), int_c(0)}));
    EXPECT_EQ(g.b_base, load("Kh", {row(), tb(), int_c(0)}));
    EXPECT_EQ(g.c_base, local_at("$pro0", make_mul(rr(), int_c(264))));
    EXPECT_TRUE(g.a_si->is_const(0));
}

}  // namespace

namespace {

/** The on-chip multi-pass rows rename each pass's locals apart ($rr → $p1_rr, ...; LowerPass.cpp
 *  lower_onchip_rows) after the lowering: recognizing the renamed nest gives the renamed GEMM. */
TEST(RecognizeGemms, CommutesWithTheOnChipRenaming) {
    auto rename = [](const std::string &n) { return n == "$rbase" || n == "$nbv" ? n : "$p1_" + n.substr(1); };
    std::vector<Expr> Bs = {K(), load("Kh", {row(), jj(), d()}), load("Kh", {make_idiv(row(), make_size("G")), jj(), d()})};
    for (Expr B : Bs) {
        Module m = module_with(nest(dot(Q(), B)));
        Module renamed = m;
        renamed.kernels[0].body = rename_locals(m.kernels[0].body, rename);
        Module a = recognize_gemms(renamed), b = recognize_gemms(m);
        b.kernels[0].body = rename_locals(b.kernels[0].body, rename);
        EXPECT_EQ(to_string(a), to_string(b)) << to_string(B);
        EXPECT_NE(to_string(a).find("gemm $p1_pro0"), std::string::npos) << to_string(a);
    }
}

}  // namespace
