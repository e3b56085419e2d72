/** \file PrefetchNextTiles.cpp
 * The CPU tile pass that asks for the next tile of a GEMM operand read from memory while the current
 * tile is computed, in kernels of few rows per block (decode attention), whose tile GEMMs wait on
 * memory rather than on arithmetic.
 */
#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "ir/DType.h"
#include "tile/LoopFacts.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* Rule: in a kernel of at most 16 rows a block, a tile loop
 *   for $t: $tb = ...; $te = min($tb + T, hi); ...  gemm ... B[i_1, ..., $tb, 0, ..., 0] ...
 * whose tile GEMM reads an input B from the tile's first row — $tb in one index, every later index 0,
 * the GEMM reading whole rows of the later dimensions (B's other extent, K for A·Bᵀ and N for A·B,
 * is their product P) — begins with
 *   if $te < hi: prefetch B[i_1, ..., $te, 0, ..., 0][0, (min($te + T, hi) - $te) · P)
 * the next tile's rows, one contiguous run. Precondition: none for the values (a hint); the guard
 * and the run's length keep it inside B's rows that the next tile reads. Why: at M ≤ 16 a tile GEMM
 * does at most 2M operations per element it loads, far under any CPU's arithmetic per byte of memory
 * bandwidth, and the hardware prefetchers do not run a whole tile ahead: decode attention with GQA
 * (B = 4, Hq = 32, Hkv = 8, N = 8192, D = 128, bf16, AMX Xeon, emitted kernel in a C++ driver) 8.2 ->
 * 6.6-7.1 ms. Blocks of more rows reuse each tile across their rows and are bound by arithmetic:
 * they are left alone. Where a burst of prefetches stalls the core (AMD Zen 4: Pipeline.cpp's
 * lower_options), the run is cut to its first Schedule::prefetch_bytes:
 *   prefetch B[...][0, min((min($te + T, hi) - $te) · P, cap / sizeof(B)))
 * and the hardware prefetchers, started on the run, carry on. */

/** The tile loop's bounds: $tb and $te and the T and hi of `$te = min($tb + T, hi)`. */
struct TileBounds {
    Expr tb, te, step, hi;
};

std::optional<TileBounds> tile_bounds(const StmtP &loop) {
    if (loop->body.size() < 2) return std::nullopt;
    const StmtP &b = loop->body[0], &e = loop->body[1];
    for (const StmtP &d : {b, e})
        if (d->kind != StmtKind::Decl || !d->dims.empty() || d->cls != LocalClass::Index || !d->value) return std::nullopt;
    Expr tb = local_var(b->name, SType::Int), v = e->value;
    if (v->kind != Kind::Min || v->args.size() != 2 || v->args[0]->kind != Kind::Add) return std::nullopt;
    Expr sum = v->args[0];
    if (sum->args.size() != 2 || sum->args[0]->kind != Kind::Var || sum->args[0]->name != b->name) return std::nullopt;
    return TileBounds{tb, local_var(e->name, SType::Int), sum->args[1], v->args[1]};
}

/** The prefetch of the next tile of g's B, when B is an input read from the tile's first row at an
 *  address the tile loop's head can compute (no local bound inside the loop but $tb: a GEMM per row
 *  of the block, inside the loop over its rows $rr, reads B at a row the head does not know): its
 *  first cap_bytes (Schedule::prefetch_bytes; 0: all of it). */
StmtP next_tile(const Module &m, const GemmInfo &g, const TileBounds &t, int64_t cap_bytes,
                const std::set<std::string> &bound_inside) {
    Expr b = g.b_base;
    const Buffer *buf = m.find(b->name);
    if (!buf || buf->role != Buffer::Role::Input || b->args.size() != buf->dims.size()) return nullptr;
    for (Expr a : b->args)
        if (!loop_facts::invariant(a, bound_inside)) return nullptr;
    size_t at = b->args.size();
    for (size_t i = 0; i < b->args.size(); i++)
        if (b->args[i]->kind == Kind::Var && b->args[i]->name == t.tb->name) at = i;
    if (at == b->args.size()) return nullptr;
    Expr rest = int_c(1);
    for (size_t i = at + 1; i < b->args.size(); i++) {
        if (!b->args[i]->is_const(0)) return nullptr;
        rest = make_mul(rest, buf->dims[i]);
    }
    if (!loop_facts::same_value(rest, g.trans_b ? g.K : g.N)) return nullptr;  // whole rows: the tile is one run
    std::vector<Expr> args = b->args;
    args[at] = t.te;
    Expr rows = make_sub(make_min(make_add(t.te, t.step), t.hi), t.te), run = make_mul(rows, rest);
    if (cap_bytes > 0) run = make_min(run, int_c(std::max<int64_t>(1, cap_bytes / dtype_bytes(b->dtype))));
    return if_then(make_cmp(CmpOp::LT, t.te, t.hi), {prefetch(make_load(b->name, args, b->dtype, b->stype), run)});
}

/** The tile loop with the prefetches of its GEMMs' next tiles after $tb and $te, or itself. */
class NextTiles : public StmtMutator {
public:
    NextTiles(const Module &m, int64_t cap_bytes) : m_(m), cap_bytes_(cap_bytes) {}

    StmtP mutate_for(const StmtP &s) override {
        if (!loop_facts::is_tile_loop(s)) return mutate_default(s);
        auto t = tile_bounds(s);
        if (!t) return s;
        std::set<std::string> seen, bound_inside;
        for (const StmtP &c : s->body) loop_facts::written_in(c, bound_inside);
        bound_inside.erase(t->tb->name);
        std::vector<StmtP> hints;
        for_each_stmt(s, [&](const StmtP &c) {
            if (c->kind != StmtKind::Gemm || seen.count(c->gemm->b_base->name)) return;
            if (StmtP p = next_tile(m_, *c->gemm, *t, cap_bytes_, bound_inside)) {
                seen.insert(c->gemm->b_base->name);
                hints.push_back(p);
            }
        });
        if (hints.empty()) return s;
        std::vector<StmtP> body(s->body.begin(), s->body.begin() + 2);
        body.insert(body.end(), hints.begin(), hints.end());
        body.insert(body.end(), s->body.begin() + 2, s->body.end());
        return with_body(s, body);
    }

private:
    const Module &m_;
    int64_t cap_bytes_;
};

}  // namespace

Module prefetch_next_tiles(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels)
        if (k.schedule.row_block <= 16) k.body = NextTiles(m, k.schedule.prefetch_bytes).mutate(k.body);
    return m;
}

}  // namespace rf::tile
