/** \file PrefetchNextRows.cpp
 * The CPU tile pass that asks for the next row's inputs while a row is swept for the last time (a
 * chain that sweeps each row in several passes reads the row from memory in the first and from the
 * caches in the later ones, where the memory would otherwise be idle), or, in a row swept once whose
 * tiles are swept twice, for the next tile before a tile's last sweep.
 */
#include <set>
#include <string>
#include <utility>

#include "tile/LoopFacts.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* Rule: in a kernel of one-row blocks (row_block = 1) whose parallel row loop sweeps the row two or
 * more times — tile loops (`for $t: $tb = ..., $te = ...`, one per pass over the row) and the
 * epilogue's chunk loops (`for $ec: $e0 = ..., $e1 = ...`, LowerMerge.cpp chunked_row_output) — the
 * last sweep after the first that reads the row's inputs begins with
 *   if $rbase + 1 < R_B: prefetch B[$rbase + 1, lo, 0, ...][0, (hi - lo) * P)  ([lo, hi): the sweep's range)
 * for every input B it loads as B[$rbase + $rr, j, ...], j a variable (the element of the range), B of
 * two or more dimensions, P the product of those after the second (an element's run of values: a
 * point's 3 coordinates; 1 for a matrix). Precondition: none for the values — a prefetch is a hint that changes no value, and the
 * guard keeps its address inside B. Why: the first sweep (softmax's max, LayerNorm's moments) waits
 * on the row's lines from memory while the later ones compute from the caches; during the last, the
 * next row's lines, in the same order, arrive in L2 (bf16 softmax R = 4096, C = 8192, AMX Xeon:
 * 8.1 -> 6.9-7.1 ms; f32 softmax C = 1024 1.03 -> 0.91 ms, C = 8192 11.2-12.2 -> 9.0-9.6 ms;
 * `redfuse bench` with the pass on and off). The next row is the next iteration's on this thread (the
 * row loop's chunks are consecutive rows); at a chunk's end it is another thread's, and the prefetch
 * only warms a line that thread reads. When the sweep ends with a row copy (an epilogue chunk), the
 * prefetches are marked DuringCopy: the worker's row copier asks for their lines one by one between
 * its streamed stores instead of in a burst before the chunk's work (f32 LayerNorm [4096, 8192] on an
 * AVX2 AMD EPYC Zen 3: see docs/tile-ir.md). */

/** Whether the sweep ends with a row copy of its own (an epilogue chunk: LowerMerge.cpp chunked_row_output). */
bool copies_row(const StmtP &sweep) { return !sweep->body.empty() && sweep->body.back()->kind == StmtKind::CopyRow; }

/** A tile loop, or an epilogue chunk loop ($ecN, $pK_ecN: LowerMerge.cpp chunked_row_output). */
bool is_sweep(const StmtP &s) {
    if (loop_facts::is_tile_loop(s)) return true;
    if (s->kind != StmtKind::For) return false;
    const std::string &v = s->var->name;
    const size_t at = v.rfind("ec");
    if (at == std::string::npos || at == 0 || (v[at - 1] != '$' && v[at - 1] != '_') || at + 2 >= v.size()) return false;
    return v.find_first_not_of("0123456789", at + 2) == std::string::npos;
}

/** The sweep's range [lo, hi): its first two statements, the index locals both kinds declare first. */
std::pair<Expr, Expr> sweep_range(const StmtP &loop) {
    if (loop->body.size() < 2) return {nullptr, nullptr};
    Expr b[2];
    for (int i = 0; i < 2; i++) {
        const StmtP &c = loop->body[static_cast<size_t>(i)];
        if (c->kind != StmtKind::Decl || !c->dims.empty() || c->cls != LocalClass::Index) return {nullptr, nullptr};
        b[i] = local_var(c->name, SType::Int);
    }
    return {b[0], b[1]};
}

/** Whether the row index reads $rbase: `$rbase + $rr` (the block's first row plus the row in it). */
bool row_of_block(Expr row) {
    bool rbase = false;
    visit(row, [&](Expr n) { rbase = rbase || (n->kind == Kind::Var && n->name == "$rbase"); });
    return rbase && row->kind == Kind::Add;
}

/** The inputs statement `s` reads by row and element (B[$rbase + $rr, j, ...]: two or more dimensions,
 *  j a variable; the later indices pick within the element's run, e.g. a point's coordinate): one load each. */
std::vector<Expr> row_element_loads(const Module &m, const StmtP &s) {
    std::vector<Expr> out;
    std::set<std::string> seen;
    for_each_stmt(s, [&](const StmtP &c) {
        for (Expr e : {c->value, c->index, c->cond, c->target}) {
            if (!e) continue;
            visit(e, [&](Expr n) {
                if (n->kind != Kind::Load || n->args.size() < 2 || seen.count(n->name)) return;
                const Buffer *b = m.find(n->name);
                if (!b || b->role != Buffer::Role::Input || b->dims.size() < 2 || b->dims.size() != n->args.size()) return;
                if (!row_of_block(n->args[0]) || n->args[1]->kind != Kind::Var) return;
                seen.insert(n->name);
                out.push_back(n);
            });
        }
    });
    return out;
}

/** B[row, col, 0, ...]: the first value of element `col` of `row` of the input `load` reads. */
Expr element_start(Expr load, Expr row, Expr col) {
    std::vector<Expr> at(load->args.size(), int_c(0));
    at[0] = row;
    at[1] = col;
    return make_load(load->name, at, load->dtype, load->stype);
}

/** The values of `count` consecutive elements of B (each the run of B's dimensions after the second). */
Expr element_values(const Buffer &b, Expr count) {
    std::vector<Expr> factors{count};
    factors.insert(factors.end(), b.dims.begin() + 2, b.dims.end());
    return make_mul(factors);
}

/** Prefetches of the next row of each input the loop reads by row and element. */
std::vector<StmtP> next_row_prefetches(const Module &m, const StmtP &loop, Expr tb, Expr te, PrefetchWhen when) {
    std::vector<StmtP> out;
    const Expr next = make_add(local_var("$rbase", SType::Int), int_c(1));
    for (Expr n : row_element_loads(m, loop)) {
        const Buffer &b = *m.find(n->name);
        StmtP p = prefetch(element_start(n, next, tb), element_values(b, make_sub(te, tb)), when);
        out.push_back(if_then(make_cmp(CmpOp::LT, next, b.dims[0]), {p}));
    }
    return out;
}

/** The tile loop `loop` replaced by `by` (pointers compared: the statement itself, wherever it is). */
class ReplaceLoop : public StmtMutator {
public:
    ReplaceLoop(const StmtP &loop, const StmtP &by) : loop_(loop), by_(by) {}
    StmtP mutate_for(const StmtP &s) override { return s == loop_ ? by_ : mutate_default(s); }

private:
    StmtP loop_, by_;
};

/* Rule 2 (a tile swept twice): in such a kernel whose row loop sweeps the row once (one tile loop),
 * where the tile loop's body sweeps each tile in two or more member loops that read the same input
 * B[$rbase + $rr, j] (variance: Σ (x − ref), then its shifted moments), the last of those loops is
 * preceded by
 *   if $te + ($te - $tb) <= C_B: prefetch B[$rbase, $te, 0, ...][0, ($te - $tb) * P]              (the next tile)
 *   else if $te == C_B and $rbase + 1 < R_B: prefetch B[$rbase + 1, 0, 0, ...][0, ($te - $tb) * P] (the next row's)
 * Precondition: none for the values (a hint; the guards keep the addresses inside B). Why: the first
 * member loop waits on the tile's lines from memory, the later ones compute from L1 while nothing asks
 * for the next tile (perf of variance [4096, 8192] on an AVX2 AMD Zen 3: 56% of the samples on the
 * first loop's loads, ~20% in the second loop). The emitted kernel with it by hand: 8-12% faster
 * (bench/results/2026-12-07d-zen3-full/NOTE.md). The prefetches are marked DuringSweep: a member loop
 * printed as blocked sums asks for the range's lines a few per block, where a burst before it filled the
 * miss queue while the loop computed from L1 (variance [4096, 8192], AMD Zen 4, emitted kernels
 * alternated: 4.92 -> 4.40 and 5.12 -> 4.37 ms medians; bench/results/2026-12-07i-zen4-full/NOTE.md). */

/** Rule 2 on the row's one tile loop: `loop` with the next tile's prefetches before its last member
 *  loop that reads an input an earlier one read, or nullptr when no such pair exists. */
StmtP with_next_tile_prefetches(const Module &m, const StmtP &loop) {
    auto [tb, te] = sweep_range(loop);
    if (!tb) return nullptr;
    for (size_t i = loop->body.size(); i-- > 2;) {
        std::vector<Expr> again;
        std::set<std::string> earlier;
        for (size_t k = 2; k < i; k++)
            for (Expr l : row_element_loads(m, loop->body[k])) earlier.insert(l->name);
        for (Expr l : row_element_loads(m, loop->body[i]))
            if (earlier.count(l->name)) again.push_back(l);
        if (again.empty()) continue;
        const Expr rbase = local_var("$rbase", SType::Int), len = make_sub(te, tb);
        std::vector<StmtP> body(loop->body.begin(), loop->body.begin() + static_cast<std::ptrdiff_t>(i));
        for (Expr l : again) {
            const Buffer *b = m.find(l->name);
            const Expr values = element_values(*b, len);
            StmtP same_row = prefetch(element_start(l, rbase, te), values, PrefetchWhen::DuringSweep);
            StmtP next_row = prefetch(element_start(l, make_add(rbase, int_c(1)), int_c(0)), values, PrefetchWhen::DuringSweep);
            Expr last_tile = make_and(make_cmp(CmpOp::EQ, te, b->dims[1]), make_cmp(CmpOp::LT, make_add(rbase, int_c(1)), b->dims[0]));
            body.push_back(if_then(make_cmp(CmpOp::LE, make_add(te, len), b->dims[1]), {same_row}, {if_then(last_tile, {next_row})}));
        }
        body.insert(body.end(), loop->body.begin() + static_cast<std::ptrdiff_t>(i), loop->body.end());
        return with_body(loop, body);
    }
    return nullptr;
}

StmtP with_prefetches(const Module &m, const StmtP &row_loop) {
    std::vector<StmtP> sweeps;
    for_each_stmt(row_loop, [&](const StmtP &s) {
        if (is_sweep(s)) sweeps.push_back(s);
    });
    if (sweeps.size() == 1 && loop_facts::is_tile_loop(sweeps[0])) {
        StmtP by = with_next_tile_prefetches(m, sweeps[0]);
        return by ? ReplaceLoop(sweeps[0], by).mutate(row_loop) : row_loop;
    }
    if (sweeps.size() < 2) return row_loop;
    // The last sweep that reads the row's inputs (softmax's epilogue reads only its kept terms).
    for (size_t i = sweeps.size(); i-- > 1;) {
        const StmtP &loop = sweeps[i];
        auto [lo, hi] = sweep_range(loop);
        if (!lo) continue;
        std::vector<StmtP> hints = next_row_prefetches(m, loop, lo, hi, copies_row(loop) ? PrefetchWhen::DuringCopy : PrefetchWhen::AtOnce);
        if (hints.empty()) continue;
        // After the range's two declarations, before the sweep's work.
        std::vector<StmtP> body(loop->body.begin(), loop->body.begin() + 2);
        body.insert(body.end(), hints.begin(), hints.end());
        body.insert(body.end(), loop->body.begin() + 2, loop->body.end());
        return ReplaceLoop(loop, with_body(loop, body)).mutate(row_loop);
    }
    return row_loop;
}

}  // namespace

Module prefetch_next_rows(const Module &in) {
    Module m = in;
    struct RowLoops : StmtMutator {
        const Module &m;
        explicit RowLoops(const Module &m) : m(m) {}
        StmtP mutate_for(const StmtP &s) override { return s->loop == LoopKind::Parallel ? with_prefetches(m, s) : mutate_default(s); }
    };
    for (Kernel &k : m.kernels)
        if (k.schedule.row_block == 1) k.body = RowLoops(m).mutate(k.body);
    return m;
}

}  // namespace rf::tile
