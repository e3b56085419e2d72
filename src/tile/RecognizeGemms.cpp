/** \file RecognizeGemms.cpp
 * The tile pass that turns the lowering's dot-product loops over a block of rows (attention's QKᵀ
 * prologue tile) into GEMM statements.
 */
#include <algorithm>

#include "support/Error.h"
#include "tile/GemmOperands.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace gemm_operands;

/* The lowering writes a prologue tile (a definition over the rows and the cascade axis, computed
 * one tile at a time: LowerPass.cpp, update_tile) as
 *     for rr in [0, $nbv) independent:                 (the rows of the block, row = $rbase + rr)
 *       for j in [tb, te) simd:                        (the tile of the cascade axis)
 *         P[rr·S + (j − tb)] = v                       (S: the tile array's row stride)
 * Math: when v = α · Σ_{d<K} A(rr, d) · B(j, d), with A and B global loads indexed by d last, the loop
 * computes, for i = rr < $nbv and n = j − tb < te − tb,
 *     C[i][n] = α · Σ_k A[i][k] · B[n][k],   C[i][n] = P[i·S + n]
 * which is GemmInfo's C = α · A · Bᵀ with M = $nbv, N = te − tb, K = the reduction's extent; A's
 * origin is A at d = 0 and row $rbase (a_si: the stride of A's row dimension; 0 when A does not
 * depend on the row: every row reads the same vector), B's origin is B at d = 0, j = tb (b_sj: the
 * stride of B's j dimension), a_sk = b_sk = 1 (d is the last index of each), c_si = S.
 * Preconditions, each checked (anything else is left a loop, which computes the same values):
 *   - v is a single-axis Sum of exactly two factors, optionally times an α that mentions neither j
 *     nor rr; each factor is a global f32 or bf16 load, possibly widened to f32/f64 (exact);
 *   - one factor (A) does not mention j; d is the last index of both, j occurs in exactly one index
 *     of B, the row in at most one index of A and only as $rbase + rr (dim_of, GemmOperands.h);
 *   - not bf16 · f32 (no such kernel).
 * Per row: when B depends on the row (GQA decode: K[b, (rbase + rr) / G, j, d]) the product is one
 * GEMV per row, M = 1, inside the rows loop, A's and B's indices as they are (A's d index must not
 * mention rr). When B's row enters only as floor((rbase + rr) / G), and the block has nb > 1 rows,
 * the pass also writes the block GEMM with B at floor(rbase / G), chosen at run time when G % nb = 0:
 * $rbase is a multiple of nb, so with G = c·nb every row rbase + i (i < nb) has floor((rbase + i)/G)
 * = floor(rbase / G) — the whole block shares B's slice.
 * The GEMM computes the sum in another order than the loop (blocked, fused multiply-adds): the
 * same value up to rounding, as every reduction of the language may be reordered.
 * nb is read off the block's declaration $nbv = min(nb, rows − $rbase) (1 without row variables);
 * the names rr, tb and te are taken from the loops, so a renamed copy (on-chip multi-pass rows,
 * $p<i>_rr) is recognized the same way. */

/** The tile array's row stride S when idx = rr·S + (j − tb) (as the lowering builds it), else 0. */
int64_t row_stride_of(Expr idx, Expr rr, Expr j, Expr tb) {
    if (idx->kind != Kind::Add || idx->args.size() != 2) return 0;
    Expr m = idx->args[0];
    if (m->kind != Kind::Mul || m->args.size() != 2 || m->args[0] != rr || !m->args[1]->is_const()) return 0;
    double v = m->args[1]->value;
    if (v < 1 || v != static_cast<double>(static_cast<int64_t>(v))) return 0;
    auto S = static_cast<int64_t>(v);
    if (idx != make_add(make_mul(rr, int_c(S)), make_sub(j, tb))) return 0;
    return S;
}

/** The rows per block a `$nbv` declaration gives: min(nb, ...) or the constant 1; 0 if neither. */
int64_t rows_per_block(const StmtP &d) {
    Expr v = d->value;
    if (!v) return 0;
    if (v->is_const(1)) return 1;
    if (v->kind == Kind::Min && v->args[0]->is_const() && v->args[0]->value >= 1) return static_cast<int64_t>(v->args[0]->value);
    return 0;
}

/** One prologue loop nest, as the file comment writes it. */
struct Prologue {
    StmtP rows_loop;   ///< for rr in [0, $nbv) independent
    Expr rr, j, tb, te;
    std::string local;  ///< P
    int64_t S = 0;
    Expr v;
};

/** The loop nest s as a prologue, or false when it has another shape. */
bool prologue_shape(const StmtP &s, Prologue &p) {
    if (s->kind != StmtKind::For || s->loop != LoopKind::Independent || s->body.size() != 1 || !s->begin->is_const(0) ||
        s->end->kind != Kind::Var || s->end->name != "$nbv")
        return false;
    const StmtP &in = s->body[0];
    if (in->kind != StmtKind::For || in->loop != LoopKind::Simd || in->body.size() != 1 || in->begin->kind != Kind::Var ||
        in->end->kind != Kind::Var)
        return false;
    const StmtP &a = in->body[0];
    if (a->kind != StmtKind::Assign || a->target->kind != Kind::Load || a->target->args.size() != 1 || a->target->name.empty() ||
        a->target->name[0] != '$')
        return false;
    p = {s, s->var, in->var, in->begin, in->end, a->target->name, 0, a->value};
    p.S = row_stride_of(a->target->args[0], p.rr, p.j, p.tb);
    return p.S > 0;
}

/** The GEMM (or per-row GEMVs, with the GQA block choice) for p, or null when a precondition fails. */
StmtP prologue_gemm(const Prologue &p, const Rows &r, const Module &m) {
    Expr alpha = real_c(1), red = p.v, j = p.j;
    if (p.v->kind == Kind::Mul) {
        red = nullptr;
        std::vector<Expr> rest;
        for (Expr a : p.v->args) {
            if (a->kind == Kind::Reduce && !red) red = a;
            else rest.push_back(a);
        }
        if (!red) return nullptr;
        alpha = rest.size() == 1 ? rest[0] : make_mul(rest);
        if (mentions(alpha, j->name) || mentions(alpha, r.rr->name)) return nullptr;
    }
    if (red->kind != Kind::Reduce || red->rop != ReduceOp::Sum || red->num_axes() != 1) return nullptr;
    Expr body = red->body(), d = red->axis(0);
    if (body->kind != Kind::Mul || body->args.size() != 2) return nullptr;
    Expr A = operand(body->args[0]), B = operand(body->args[1]);
    if (!A || !B) return nullptr;
    if (mentions(A, j->name)) std::swap(A, B);
    if (mentions(A, j->name)) return nullptr;
    const Buffer *abuf = m.find(A->name), *bbuf = m.find(B->name);
    RF_INTERNAL_ASSERT(abuf && bbuf) << "recognize_gemms: load of an unknown buffer";
    bool per_row = mentions(B, r.rr->name);
    int ak = dim_of(A, d, r), bk = dim_of(B, d, r), bj = dim_of(B, j, r), ar = per_row ? -1 : dim_of(A, r.rr, r);
    if (per_row && (mentions(A->args[static_cast<size_t>(std::max(ak, 0))], r.rr->name) || bk < 0)) return nullptr;
    if (ak != static_cast<int>(A->args.size()) - 1 || bk != static_cast<int>(B->args.size()) - 1 || bj < 0 || ar == -2) return nullptr;
    if (A->dtype == DType::bf16 && B->dtype == DType::f32) return nullptr;  // no such kernel
    GemmInfo g;
    g.M = per_row ? int_c(1) : local_var("$nbv", SType::Int);
    g.N = make_sub(p.te, p.tb);
    g.K = red->extents[0];
    if (per_row) {
        // Row rr's operands as they are (their indices already hold $rbase + rr).
        g.a_base = substitute(A, d, int_c(0));
        g.b_base = substitute(substitute(B, d, int_c(0)), j, p.tb);
        g.c_base = local_at(p.local, make_mul(r.rr, int_c(p.S)));
    } else {
        g.a_base = at_origin(A, {{d, int_c(0)}, {r.rr, int_c(0)}}, r);
        g.b_base = at_origin(B, {{d, int_c(0)}, {j, p.tb}}, r);
        g.c_base = local_at(p.local, int_c(0));
    }
    g.a_si = ar >= 0 ? stride(abuf->dims, ar) : int_c(0);
    g.a_sk = int_c(1);
    g.b_sj = stride(bbuf->dims, bj);
    g.b_sk = int_c(1);
    g.c_si = int_c(p.S);
    g.alpha = alpha;
    g.trans_b = true;
    g.accumulate = false;
    if (!per_row) return gemm(g);
    StmtP rows = with_body(p.rows_loop, {gemm(g)});
    Expr G = group_divisor(B, r);
    int ar_block = dim_of(A, r.rr, r);
    if (!G || r.nb == 1 || ar_block == -2) return rows;
    GemmInfo gb = g;
    gb.M = local_var("$nbv", SType::Int);
    gb.a_base = at_origin(A, {{d, int_c(0)}, {r.rr, int_c(0)}}, r);
    gb.a_si = ar_block >= 0 ? stride(abuf->dims, ar_block) : int_c(0);
    gb.b_base = at_origin(grouped(B, G, r), {{d, int_c(0)}, {j, p.tb}}, r);
    gb.c_base = local_at(p.local, int_c(0));
    return when_grouped(G, r, gemm(gb), rows);
}

/** Replaces every prologue loop nest whose preconditions hold; tracks the row block from $nbv. */
class GemmRecognizer : public StmtMutator {
public:
    explicit GemmRecognizer(const Module &m) : m_(m) {}

    StmtP mutate_decl(const StmtP &s) override {
        if (s->name == "$nbv") nb_ = rows_per_block(s);
        return s;
    }

    StmtP mutate_for(const StmtP &s) override {
        Prologue p;
        if (nb_ > 0 && prologue_shape(s, p)) {
            Expr rbase = local_var("$rbase", SType::Int);
            if (StmtP g = prologue_gemm(p, Rows{p.rr, rbase, make_add(rbase, p.rr), nb_}, m_)) return g;
        }
        return mutate_default(s);
    }

private:
    const Module &m_;
    int64_t nb_ = 0;  ///< rows per block of the latest $nbv declaration (0: none seen, or not understood)
};

}  // namespace

Module recognize_gemms(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = GemmRecognizer(in).mutate(k.body);
    return m;
}

}  // namespace rf::tile
