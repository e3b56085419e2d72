/** \file DeferRowCopies.cpp
 * The CPU tile pass that lets a row's output copies from a kept tile array (softmax's y = e · (1/s)
 * streamed out of the exp pass's terms) run during the next row's pass that refills the array, tile by
 * tile, instead of after the row: the row's stores then overlap the next row's arithmetic.
 */
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

/* Rule. In a kernel of one-row blocks and one segment, take a local tile array T of the parallel row
 * loop's body that is written only inside one tile loop L of that body (a pass over the row: `for $t:
 * $tb = ..., $te = ...`), each write at element j of a vector loop over [$tb, $te) (the row-in-block
 * index, 0 here, times the row length dropped), and read by row copies (`copy Out[...] = T[b]... · r`)
 * after L. Then:
 *
 *     every such copy is marked deferred, and L's body begins (after $tb, $te) with
 *     finish deferred copies from below T[$te]
 *
 * The worker's copier (rfk::RowStream) holds a deferred copy (its destination, its source in T, the
 * scale's value) instead of doing it; `finish` does the part whose source lies below T[$te], and the
 * end of the worker's rows (flush) the rest. Precondition for the values: a held copy reads T only
 * where T still holds the row it was made for. The next writes to T are the next row's, in L, each at
 * an element j < $te of the tile being computed, after that tile's `finish` did every held element
 * below T[$te]: so each element is copied before it is overwritten. The scale is read when the copy is
 * held. Nothing reads the output (row copies write outputs nobody reads). The copies are the same copies
 * of the same values, so the output's bits do not change. Why: the row's phases ran one after another
 * — the exp pass computing from the caches with the memory idle, then the copy streaming the row out
 * with the cores idle; deferred, the copy's streamed stores run between the next row's tiles (f32
 * softmax [4096, 8192] on AMD Zen 4: see docs/tile-ir.md "Deferred row copies"). */

/** The body's local tile arrays by name (declared with dimensions, class Tile, without a value: a
 *  declaration's value would be stored at every iteration, over the held copies' source; the CPU
 *  printer allocates every array below the row loop once per worker, before its copier). */
std::set<std::string> tile_arrays(const std::vector<StmtP> &body) {
    std::set<std::string> out;
    for (const StmtP &s : body)
        if (s->kind == StmtKind::Decl && s->cls == LocalClass::Tile && !s->dims.empty() && !s->value) out.insert(s->name);
    return out;
}

/** Whether `index` is element j of a vector loop over [tb, te) once every row-in-block variable (a loop
 *  over [0, $nbv)) is 0: j itself, or (row · length) + j. */
bool element_of_tile(Expr index, const std::vector<LoopRange> &loops, Expr tb, Expr te) {
    Expr at = substitute(index, [&](Expr n) -> Expr {
        if (n->kind != Kind::Var) return nullptr;
        for (const LoopRange &l : loops)
            if (l.var->name == n->name && l.begin->is_const(0) && l.end->kind == Kind::Var && l.end->name == "$nbv") return int_c(0);
        return nullptr;
    });
    at = simplify(at);
    if (at->kind != Kind::Var) return false;
    for (const LoopRange &l : loops)
        if (l.var->name == at->name) return same_value(l.begin, tb) && same_value(l.end, te);
    return false;
}

/** Whether every write to T below `s` is an element of the tile (element_of_tile), and there is one. */
bool writes_only_the_tile(const StmtP &loop, const std::string &T, Expr tb, Expr te) {
    bool ok = true, any = false;
    rewrite_with_loops(loop, [&](const StmtP &s, const std::vector<LoopRange> &loops) {
        if (s->target && s->target->kind == Kind::Load && s->target->name == T &&
            (s->kind == StmtKind::Assign || s->kind == StmtKind::Accum || s->kind == StmtKind::ArgSelect)) {
            any = true;
            ok = ok && s->target->args.size() == 1 && element_of_tile(s->target->args[0], loops, tb, te);
        }
        if (s->kind == StmtKind::TopKInsert || s->kind == StmtKind::Gemm || s->kind == StmtKind::PolyShift) {
            std::set<std::string> w;
            written_in(s, w);
            ok = ok && !w.count(T);
        }
        return s;
    });
    return ok && any;
}

/** The row loop's body with T's copies deferred and the finishing statement in L, or unchanged. Only
 *  copies into f32 outputs: a bf16 output's copy writes half the bytes, its kernel is compute-bound,
 *  and deferred it was 5-8% slower (bf16 softmax R = 4096, C = 1024-8192, AMD Zen 4). */
std::vector<StmtP> deferred(const Module &m, const std::vector<StmtP> &body, const std::string &T) {
    // The one tile loop that writes T, and nothing else writes it.
    int at = -1;
    for (size_t i = 0; i < body.size(); i++) {
        std::set<std::string> w;
        written_in(body[i], w);
        if (!w.count(T) || body[i]->kind == StmtKind::Decl) continue;
        if (at >= 0 || !is_tile_loop(body[i])) return body;
        at = static_cast<int>(i);
    }
    if (at < 0) return body;
    const StmtP &L = body[static_cast<size_t>(at)];
    if (L->body.size() < 2) return body;
    const Expr tb = local_var(L->body[0]->name, SType::Int), te = local_var(L->body[1]->name, SType::Int);
    if (!writes_only_the_tile(L, T, tb, te)) return body;
    // Copies from T after L: deferred. Nothing before L reads T (it would see the previous row's).
    bool any = false;
    std::vector<StmtP> out(body.begin(), body.begin() + at + 1);
    for (size_t i = 0; i < static_cast<size_t>(at); i++)
        if (body[i]->kind != StmtKind::Decl && mentions_anywhere(body[i], T)) return body;
    for (size_t i = static_cast<size_t>(at) + 1; i < body.size(); i++)
        out.push_back(rewrite_bottom_up(body[i], [&](const StmtP &s) {
            if (s->kind != StmtKind::CopyRow || s->deferred || s->value->name != T) return s;
            const Buffer *out = m.find(s->target->name);
            if (!out || out->dtype != DType::f32) return s;
            any = true;
            return copy_row(s->target, s->value, s->end, s->scale, true);
        }));
    if (!any) return body;
    std::vector<StmtP> lb(L->body.begin(), L->body.begin() + 2);
    lb.push_back(finish_copies(make_load(T, {te}, DType::f32, SType::Real)));
    lb.insert(lb.end(), L->body.begin() + 2, L->body.end());
    out[static_cast<size_t>(at)] = with_body(L, lb);
    return out;
}

}  // namespace

Module defer_row_copies(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        if (k.schedule.row_block != 1 || k.schedule.segments != 1) continue;
        // The lists of statements in the parallel row loop (its body, a pass's block) that declare T.
        k.body = rewrite_bottom_up(k.body, [&](const StmtP &s) {
            if (s->kind != StmtKind::For || s->loop != LoopKind::Parallel) return s;
            return rewrite_bottom_up(s, [&](const StmtP &c) {
                if (c->kind != StmtKind::Block && !(c->kind == StmtKind::For && c->loop == LoopKind::Parallel)) return c;
                std::vector<StmtP> body = c->body;
                for (const std::string &T : tile_arrays(body)) body = deferred(m, body, T);
                return body == c->body ? c : with_body(c, body);
            });
        });
    }
    return m;
}

}  // namespace rf::tile
