/** \file FirstGemmStores.cpp
 * The CPU tile pass that lets a tile GEMM store its first tile into a zeroed float tile instead of
 * adding it: the micro-kernels then write C without reading it back (a 128-row block of N = 4096
 * floats is 2 MiB, more than L2), and the tile's zero fill shrinks to the part that GEMM leaves alone.
 */
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sym/Simplify.h"
#include "tile/LoopFacts.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* Rule:  tile C[n] = 0;  S...;  for t in [b, e) serial: { P...;  gemm C[c0] += alpha · A × Bᵀ;  Q... }
 *   ⇒   the same, the GEMM accumulating only where t ≠ b: on the loop's first iteration it stores
 *        C = alpha · A·Bᵀ.
 * Preconditions: C is a tile array (the compute type, float) declared with the constant 0; no
 * statement of S or P mentions C, and the GEMM's operands are not C, so C is all zeros when the GEMM
 * first runs; the GEMM is a statement of the loop's own body (it runs on every iteration, t = b
 * first: the loop is serial), b is invariant in the loop (t ≠ b means "not the first iteration" on
 * every iteration); it is the NT form (trans_b, A not transposed), whose micro-kernels take
 * `accumulate` as a run-time argument; alpha is a positive constant.
 * Why the values are the same: each element the GEMM writes is 0 + alpha·p when accumulating, alpha·p
 * when storing. The sum p starts at +0 in every micro-kernel (and in int32 for int8 operands) and
 * round-to-nearest never turns +0 plus anything into −0, so p ≠ −0, hence alpha·p ≠ −0 for alpha > 0,
 * and +0 + x = x for every other x (inf and NaN included); fused or not, the rounding of alpha·p is
 * the only one. Elements the GEMM does not write keep their 0 either way; later iterations add.
 * Where: the weight GEMMs of RMSNorm→GEMM and the int8 / fp8 quantized GEMMs (K in one tile: every
 * call stores; linear + cross-entropy's logits GEMM stores already); measured in docs/tile-ir.md. */

/* Rule (the fill, after the rule above):
 *   tile C[D] = 0;  S...;  for t in [b, e) serial: { ...; gemm C[0] (+= if t ≠ b, else =) alpha · A × Bᵀ [M, N], ldc = N; ... }
 *   ⇒   tile C[D];  for q in [select(b < e, M·N, 0), D): C[q] = 0;  S...;  the loop
 * (max(M·N, 0) in place of M·N: a GEMM of no rows writes nothing.)
 * Preconditions: C has one dimension; the GEMM writes C from its first element with rows N apart (c_si
 * = N; storing, a tile GEMM sets every element of its M x N, which attention's score GEMMs, never
 * zeroed, rely on too, so its M rows of N are the prefix [0, M·N)); M, N, b and e read nothing that S declares or
 * writes, and M and N nothing the loop writes, so their values at the fill are those of the GEMM's
 * first run. Why the values are the same: when the loop runs (b < e) its first iteration stores every
 * element of [0, M·N) before anything reads C (the first rule's preconditions: nothing in S, nor in
 * the loop before the GEMM, mentions C), so the zeros there were never read; the rest of C keeps its
 * zeros; when it does not run, the whole tile is filled as before. A prefix longer than D (a GEMM
 * writing past its tile) leaves the fill empty. Where: every first-stored weight GEMM (RMSNorm→GEMM,
 * the quantized GEMMs: 256 KiB of zeros per call at M = 16, N = 4096, and 2 MiB per 128-row block). */

bool positive_constant(Expr e) { return e->is_const() && e->value > 0; }

/** The GEMM into `acc` that the rule lets store on the loop's first iteration: the first statement of
 *  the loop's body mentioning acc, when it is such a GEMM. */
std::optional<size_t> first_gemm_into(const StmtP &loop, const std::string &acc) {
    for (size_t i = 0; i < loop->body.size(); ++i) {
        const StmtP &s = loop->body[i];
        if (!mentions_anywhere(s, acc)) continue;
        if (s->kind != StmtKind::Gemm) return std::nullopt;
        const GemmInfo &g = *s->gemm;
        bool fits = g.accumulate && !g.accumulate_if && g.trans_b && !g.a_transposed() && g.c_base->name == acc &&
                    g.a_base->name != acc && g.b_base->name != acc && positive_constant(g.alpha);
        return fits ? std::optional<size_t>(i) : std::nullopt;
    }
    return std::nullopt;
}

/** A loop whose first GEMM into a tile now stores its first tile, and that GEMM. */
struct StoredFirst {
    StmtP loop;
    GemmInfo gemm;
};

/** `loop`, the first statement after the declaration of `acc` to mention it, rewritten when its first
 *  GEMM into acc may store; none when nothing changes. */
std::optional<StoredFirst> store_first_tile(const StmtP &loop, const std::string &acc) {
    if (loop->kind != StmtKind::For || loop->loop != LoopKind::Serial) return std::nullopt;
    std::set<std::string> written;
    written_in(loop, written);
    if (!invariant(loop->begin, written)) return std::nullopt;
    auto g = first_gemm_into(loop, acc);
    if (!g) return std::nullopt;
    GemmInfo info = *loop->body[*g]->gemm;
    info.accumulate_if = make_cmp(CmpOp::NE, loop->var, loop->begin);
    std::vector<StmtP> body = loop->body;
    body[*g] = gemm(info);
    return StoredFirst{with_body(loop, std::move(body), loop->else_body), info};
}

/** The fill of `acc` (declared by `d`, one dimension) that the second rule leaves, given the statements
 *  `between` the declaration and `loop`, whose first GEMM into acc, `info`, now stores; null when a
 *  precondition fails. */
StmtP shrunk_fill(const Stmt &d, const std::vector<StmtP> &between, const StmtP &loop, const GemmInfo &info) {
    if (d.dims.size() != 1) return nullptr;
    if (info.c_base->args.size() != 1 || !simplify(info.c_base->args[0])->is_const(0) || !same_value(info.c_si, info.N)) return nullptr;
    std::set<std::string> before, in_loop;
    for (const StmtP &s : between) written_in(s, before);
    written_in(loop, in_loop);
    for (Expr e : {info.M, info.N, loop->begin, loop->end})
        if (!invariant(e, before)) return nullptr;
    if (!invariant(info.M, in_loop) || !invariant(info.N, in_loop)) return nullptr;
    Expr q = make_index(d.name + "_fill");
    Expr from = simplify(make_select(make_cmp(CmpOp::LT, loop->begin, loop->end), make_max(make_mul(info.M, info.N), int_c(0)), int_c(0)));
    return for_loop(q, from, d.dims[0], {assign(local_at(d.name, q), real_c(0))});
}

class FirstGemmStores : public StmtMutator {
public:
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &list) override {
        std::vector<StmtP> out = StmtMutator::mutate_list(list);
        for (size_t d = 0; d < out.size(); ++d) {
            const StmtP &s = out[d];
            if (s->kind != StmtKind::Decl || s->cls != LocalClass::Tile || s->dims.empty() || !s->value || !s->value->is_const(0))
                continue;
            for (size_t i = d + 1; i < out.size(); ++i)
                if (mentions_anywhere(out[i], s->name)) {
                    std::optional<StoredFirst> stored = store_first_tile(out[i], s->name);
                    if (!stored) break;
                    out[i] = stored->loop;
                    std::vector<StmtP> between(out.begin() + static_cast<std::ptrdiff_t>(d) + 1, out.begin() + static_cast<std::ptrdiff_t>(i));
                    if (StmtP fill = shrunk_fill(*s, between, stored->loop, stored->gemm)) {
                        StmtP bare = decl(s->name, s->cls, s->dims, nullptr);
                        out[d] = bare;
                        out.insert(out.begin() + static_cast<std::ptrdiff_t>(d) + 1, fill);
                    }
                    break;
                }
        }
        return out;
    }
};

}  // namespace

Module store_first_gemm_tiles(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = FirstGemmStores().mutate(k.body);
    return m;
}

}  // namespace rf::tile
