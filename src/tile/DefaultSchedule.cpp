/** \file DefaultSchedule.cpp
 * The default schedule of a chain (Lower.h default_schedule): its tile, row block, segments and
 * strategy at the planning sizes and for the machine, with the size facts it is chosen from.
 */
#include <algorithm>
#include <optional>
#include <set>

#include "support/Error.h"
#include "tile/Lower.h"
#include "tile/LowerPass.h"

namespace rf::tile {


/** A chain of independent sums whose reads along the axis are all contiguous in the innermost row
 *  variable and strided along the axis: dg[c] = Σ_m X[m,c]·dY[m,c]·rs[m] (RMSNorm's weight
 *  gradient). Its rows as SIMD lanes read whole cache lines; one row at a time reads one element
 *  per line. */
bool column_chain(const ChainPlan &c, const Program &p) {
    if (!c.prologue.empty() || c.n_row == 0 || c.passes.size() != 1 || c.axes.empty()) return false;
    bool strided = false;
    for (size_t k = 0; k < c.members.size(); k++) {
        const TensorDef *d = p.find_def(c.members[k]);
        const MemberAnalysis &a = c.passes[0].members_exec[k];
        if (!d || d->is_topk() || d->vars.size() != c.n_row || a.relation != Relation::Independent || a.op != ReduceOp::Sum)
            return false;
        Expr inner = d->vars[c.n_row - 1];
        bool ok = true;
        visit(d->body, [&](Expr n) {
            if (n->kind != Kind::Load || !ok) return;
            bool along = false;
            for (size_t i = 0; i < d->body->num_axes(); i++) along = along || mentions(n, d->body->axis(i)->name);
            if (!along) return;
            // Along the axis and the row: the row's innermost variable must be the last
            // (contiguous) index. Along the axis only (RMSNorm's r[m]) is one value for every lane.
            if (!mentions(n, inner->name)) return;
            ok = n->args.back() == inner;
            strided = true;
        });
        if (!ok) return false;
    }
    return strided;
}

/** Rows shorter than this take every member as lanes: a vector loop along the row (16 floats per
 *  AVX-512 step) never runs its body. */
constexpr int64_t kShortRow = 16;
/** Rows up to this long take their top-k lists as lanes, while the row's compare-and-swap steps
 *  (length x K) stay within kLaneTopKSteps. */
constexpr int64_t kLaneTopKRow = 256;
constexpr int64_t kLaneTopKSteps = 2048;

/** Each member of each pass one the lanes can update (PassLowering::lanes): one value per row (no
 *  extra points), a plain sum, a max or min, a multiplicative sum, or a top-k list of up to 16. */
bool lane_members(const ChainPlan &c, const Program &p, int64_t &max_k) {
    max_k = 0;
    for (const PassPlan &pass : c.passes)
        for (size_t k = 0; k < pass.members.size(); k++) {
            const TensorDef *d = p.find_def(pass.members[k]);
            const MemberAnalysis &a = pass.members_exec[k];
            if (!d || d->vars.size() != c.n_row + (d->is_topk() ? 1 : 0)) return false;
            if (d->is_topk()) {
                Expr K = d->extents.back();
                if (!K->is_const() || K->value > 16) return false;
                max_k = std::max(max_k, static_cast<int64_t>(K->value));
                continue;
            }
            bool ok = false;
            switch (a.relation) {
            case Relation::Independent: ok = a.op == ReduceOp::Sum || a.op == ReduceOp::Max || a.op == ReduceOp::Min; break;
            case Relation::Multiplicative: ok = a.op == ReduceOp::Sum && a.H_def && a.H_def->is_const(1); break;
            case Relation::Additive: case Relation::Monotone: ok = a.op == ReduceOp::Max || a.op == ReduceOp::Min; break;
            default: break;
            }
            if (!ok) return false;
        }
    return true;
}

/** The product of extents at the bound sizes; nullopt when one of them names an unbound size. */
std::optional<int64_t> known_product(const std::vector<Expr> &extents, const SizeBinding &sizes) {
    int64_t product = 1;
    for (Expr e : extents) {
        bool known = true;
        visit(e, [&](Expr n) {
            if (n->kind == Kind::Var && n->role == VarRole::Size && !sizes.count(n->name)) known = false;
        });
        if (!known) return std::nullopt;
        product *= eval_int(e, sizes);
    }
    return product;
}

/** A member with at least 1024 points per row beyond the chain's row (a GEMM's output columns),
 *  at the sizes the schedule is chosen for. */
bool wide_extra_points(const ChainPlan &c, const Program &p, const SizeBinding &sizes) {
    for (const std::string &n : c.members) {
        const TensorDef *d = p.find_def(n);
        if (!d || d->is_topk() || d->vars.size() <= c.n_row) continue;
        std::optional<int64_t> points = known_product({d->extents.begin() + c.n_row, d->extents.end()}, sizes);
        if (!points) return false;
        if (*points >= 1024) return true;
    }
    return false;
}

/** A per-tile prologue whose own reduction (the GEMM's K) has at least 512 terms at the sizes the
 *  schedule is chosen for. */
bool deep_prologue(const ChainPlan &c, const Program &p, const SizeBinding &sizes) {
    for (const std::string &n : c.prologue) {
        const TensorDef *d = p.find_def(n);
        if (!d) continue;
        Expr red = nullptr;
        visit(d->body, [&](Expr e) {
            if (!red && e->kind == Kind::Reduce) red = e;
        });
        if (!red) continue;
        std::optional<int64_t> depth = known_product(red->extents, sizes);
        if (!depth) return false;
        if (*depth >= 512) return true;
    }
    return false;
}

/** Whether every input the chain's definitions (members and prologue) read is bf16 and none of them
 *  holds a `select` (a mask: causal or sliding-window attention, whose row blocks differ in work). */
bool dense_bf16_chain(const ChainPlan &c, const Program &p) {
    std::vector<std::string> defs(c.members.begin(), c.members.end());
    defs.insert(defs.end(), c.prologue.begin(), c.prologue.end());
    bool dense = true;
    for (const std::string &n : defs) {
        const TensorDef *d = p.find_def(n);
        if (!d) return false;
        visit(d->body, [&](Expr e) {
            if (e->kind == Kind::Select) dense = false;
            if (e->kind != Kind::Load) return;
            for (const InputDecl &in : p.inputs)
                if (in.name == e->name && in.dtype != DType::bf16) dense = false;
        });
    }
    return dense;
}

/** Bytes of input one row of the chain reads: each input its members load at an index that names a
 *  row variable, spread evenly over the chain's `rows`. Inputs read alike by every row (LayerNorm's
 *  gamma, a GEMM's weights) are not per row and not counted. Nothing when a size is unknown. */
std::optional<int64_t> input_bytes_per_row(const ChainPlan &c, const Program &p, const SizeBinding &sizes, int64_t rows) {
    std::set<std::string> loaded;
    for (const std::string &n : c.members) {
        const TensorDef *d = p.find_def(n);
        if (!d || d->vars.size() < c.n_row) continue;
        visit(d->body, [&](Expr e) {
            if (e->kind != Kind::Load) return;
            for (Expr a : e->args)
                for (size_t i = 0; i < c.n_row; i++)
                    if (mentions(a, d->vars[i]->name)) loaded.insert(e->name);
        });
    }
    int64_t bytes = 0;
    for (const InputDecl &in : p.inputs) {
        if (!loaded.count(in.name)) continue;
        std::optional<int64_t> n = known_product(in.dims, sizes);
        if (!n) return std::nullopt;
        bytes += *n * dtype_bytes(in.dtype);
    }
    return bytes / std::max<int64_t>(rows, 1);
}

Schedule default_schedule(const ChainPlan &c, const Program &p, const LowerOptions &o) {
    const SizeBinding &sizes = o.sizes;
    const int threads = o.threads, target_workers = o.workers;
    const bool row_lanes = o.row_lanes;
    const int64_t attention_row_block = o.attention_row_block;
    Schedule s;
    s.strategy = c.strategy;
    s.threads = threads;
    s.prefetch_bytes = o.tile_prefetch_bytes;
    s.stream_bytes = o.stream_bytes;
    s.segments = c.strategy == Strategy::MultiSegment ? std::max(1, c.segments) : 1;
    // A tile of the axis: long enough to amortize the per-tile rescale, short enough that the
    // tile's values (and a per-tile prologue) stay in L1.
    s.tile = 512;
    // A polynomial member re-centres its moments once per tile (estimate, binomial shift): longer
    // tiles amortize it (measured, 2 threads: moment of inertia 256 x 65536 18.2 ms at 512, 12.7 at
    // 2048; variance 4096 x 8192 3.72 -> 3.40 ms).
    for (const MemberAnalysis &v : c.verdicts)
        if (is_shift_form(v.relation)) s.tile = 2048;
    // Chains with tile contractions (a per-tile prologue like QKᵀ, or members with an extra axis like
    // the attention output) run as GEMMs over a block of rows: 32 rows x 256 keys keeps the score
    // tile (32 KiB) in L1/L2 and amortizes each K/V tile over the block (measured: 1 thread,
    // L = 512, D = 64: 21 ms at 1 x 64, 4.1 ms at 32 x 256).
    bool extra_axis = false;
    for (const std::string &n : c.members)
        if (const TensorDef *d = p.find_def(n); d && d->vars.size() > c.n_row + (d->is_topk() ? 1 : 0)) extra_axis = true;
    bool contraction = !c.prologue.empty() || extra_axis;
    if (contraction) {
        s.tile = 256;
        s.row_block = 32;
        // Attention-shaped (QKᵀ, then P·V): each K and V tile is packed per row block, so on the CPU
        // 64 rows halve that packing and lengthen the GEMMs' M (measured, 2 threads, AMD Zen 4,
        // B = 1, H = 8, N = 2048: bf16 D = 128 70-78 -> 64-67 ms, causal 47-50 -> 44-47, f32 D = 128
        // 70-73 -> 65-68, causal D = 64 32-34 -> 30-31; bf16 M = N = 512, D = 64 2.9-3.2 -> 2.8 ms;
        // linear + cross-entropy's logits alone, D = 64, were 4% slower with 64, so it keeps 32).
        if (!c.prologue.empty() && extra_axis) s.row_block = attention_row_block;
        // Without a mask and with every operand bf16 (products on the bf16 unit), 128 rows measured
        // 2-4% faster than 64 on AMD Zen 4 without AMX (2 threads, B = 1, H = 8, `redfuse bench`
        // alternated: L = 2048 D = 128 48.6 -> 46.8 ms, D = 64 27.3 -> 26.4; L = 512 D = 128 3.02 ->
        // 2.93, D = 64 1.71 -> 1.68); f32 even or slower (L = 512 D = 128 5.57 -> 5.83), causal slower
        // at L = 512 (D = 64 1.04 -> 1.13: fewer, unequal blocks for the threads).
        if (!c.prologue.empty() && extra_axis && o.attention_row_block_dense_bf16 > s.row_block && dense_bf16_chain(c, p))
            s.row_block = o.attention_row_block_dense_bf16;
        // Rows that share an operand in groups (GQA: query heads h with K[b, h / G, ...]) are blocked
        // by the group, so the shared K/V tile is read once per group.
        bool known_sizes = true;
        for (const SizeDecl &d : p.sizes) known_sizes = known_sizes && sizes.count(d.name);
        std::vector<std::string> defs(c.members.begin(), c.members.end());
        defs.insert(defs.end(), c.prologue.begin(), c.prologue.end());
        for (const std::string &n : defs) {
            const TensorDef *d = p.find_def(n);
            if (!d || d->vars.size() < c.n_row || c.n_row == 0 || !known_sizes) continue;
            Expr inner = d->vars[c.n_row - 1];
            visit(d->body, [&](Expr e) {
                if (e->kind != Kind::IDiv || e->args[0] != inner) return;
                int64_t g = eval_int(e->args[1], sizes);
                if (g >= 2 && g <= 64) s.row_block = g;
            });
        }
    }
    if (contraction && deep_prologue(c, p, sizes)) {
        // A prologue GEMM with a deep contraction (linear + cross-entropy's logits H·Wᵀ over D = 2048):
        // each tile of W (tile x D) is packed per row block and streamed from memory per row block, so
        // 128 rows amortize it 4x better than 32 (the logits tile, 128 x 256 floats, stays in L2).
        s.row_block = 128;
    }
    bool weight_gemm = false;
    if (contraction && wide_extra_points(c, p, sizes)) {
        // A weight GEMM (RMSNorm->GEMM's Y[m, n], quantization->GEMM): thousands of output columns per
        // row, so the state of a row block is rows x N and the GEMM's B is a whole weight matrix. One
        // tile of the axis (up to 4096) makes it one GEMM call per row block with the K loop inside the
        // micro-kernel (accumulators in registers, not a rows x N state re-read per tile), and 128 rows
        // amortize each packed weight panel (measured, 2 threads, M = 2048, N = K = 4096: bf16
        // 345 -> 275 ms, int8 (M = 4096) 695 -> 311 ms).
        std::optional<int64_t> axis = known_product(c.axis_extents, sizes);
        s.tile = axis ? std::min<int64_t>(4096, std::max<int64_t>(*axis, 1)) : 4096;
        s.row_block = 128;
        weight_gemm = true;
    }
    std::optional<int64_t> axis_length = known_product(c.axis_extents, sizes);
    int64_t max_k = 0;
    if (row_lanes && !contraction && c.prologue.empty() && c.n_row > 0 && axis_length && lane_members(c, p, max_k) &&
        (*axis_length < kShortRow || (max_k > 0 && *axis_length <= kLaneTopKRow && *axis_length * max_k <= kLaneTopKSteps))) {
        // Short rows (MoE routing over 8-256 experts): 16 rows per block as the lanes, the state of
        // a row block two vectors of doubles. Rows under 16 take every member so (a vector loop along
        // the row would be all set-up and tail); longer ones only their top-k lists, whose sorted
        // insertion per row mispredicts a branch for most listed elements, while the lanes' K
        // compare-and-selects per element have none. Measured, 2 threads, AMD EPYC (Zen 4), T =
        // 16384, per row / lanes: E = 8 top-8 2.26 / 0.79 ms, top-2 1.17 / 0.38; E = 64 top-8
        // 5.93 / 2.67 (the list only; 4.41 with every member); E = 128 top-2 2.93 / 2.32, top-8
        // 6.92 / 4.80; E = 256 top-8 9.31 / 9.01, top-16 13.9 / 17.4 (so E x K <= 2048); max and
        // exp-sum alone, E = 8 0.70 / 0.19, E = 16 0.30 / 0.35, E = 64 0.58 / 1.37 (each lane step
        // gathers X across 16 rows).
        s.row_lanes = *axis_length < kShortRow ? RowLanes::All : RowLanes::TopK;
        s.row_block = 16;
    }
    if (row_lanes && column_chain(c, p)) {
        // 64 rows (columns of the input) per block: 256 bytes of every f32 input row per axis step,
        // four cache lines, as a vector loop (measured, 2 threads: RMSNorm's dW [1024, 4096] 31.6 ms
        // one column at a time).
        s.row_lanes = RowLanes::All;
        s.row_block = 64;
    }
    // Enough work items for every thread: fewer rows per block when rows are few, then segments of
    // the axis (merged with the derived merge) when even single rows do not fill the machine.
    const TensorDef *first = p.find_def(c.members[0]);
    bool known = first && c.n_row > 0;
    for (const SizeDecl &d : p.sizes) known = known && sizes.count(d.name);
    if (known) {
        int workers = threads > 0 ? threads : std::max(1, target_workers);
        int64_t outer = 1, inner = eval_int(first->extents[c.n_row - 1], sizes), axis = 1;
        for (size_t i = 0; i + 1 < c.n_row; i++) outer *= eval_int(first->extents[i], sizes);
        for (Expr e : c.axis_extents) axis *= eval_int(e, sizes);
        // On-chip passes re-read the block's rows after the first pass: the block must stay in fast
        // memory, or each later pass reads memory again. A chain shaped like a contraction (a member
        // with an extra axis, moment of inertia's c[s, a]) takes 32 rows above; with 1 MiB of input
        // per row (w and P of 65536 points) that is 32 MiB per block (measured, 2 threads, AMD Zen 4,
        // S = 256, N = 65536: 27.5 ms at 32 rows, 17.5 at 1; the unfused plan 25).
        // Weight GEMMs keep their measured 128 rows: what they re-read is the weight, blocked there.
        if (s.strategy == Strategy::OnchipMultipass && o.fast_memory_bytes > 0 && !weight_gemm)
            if (std::optional<int64_t> row = input_bytes_per_row(c, p, sizes, outer * inner); row && *row > 0)
                s.row_block = std::clamp<int64_t>(o.fast_memory_bytes / *row, 1, s.row_block);
        bool one_block = weight_gemm && outer == 1 && inner <= s.row_block;
        if (one_block) {
            // Rows that fit one block (M = 16 decode rows) stay one block, rounded up to 16: its
            // GEMMs split their columns over the threads (redfuse_simd_gemm.h, split_columns), so
            // the weight is read once instead of once per half-block, and the GEMM keeps 16 rows
            // (measured, 2 threads, M = 16, N = K = 4096: bf16 3.25 -> 2.7 ms, int8 1.84 -> 1.53 ms).
            s.row_block = std::max<int64_t>(16, (inner + 15) / 16 * 16);
            if (o.gemm_column_split && s.strategy == Strategy::MultiSegment && c.fused) {
                // Fewer rows than 4 per worker made the planner split the axis into segments, but the
                // GEMM's columns already give every thread its share, and each segment's state is
                // rows x N values (a tag and a flag beside each) written out and merged: RMSNorm->GEMM
                // M = 1, N = 8192, K = 4096 bf16, 2 threads, AMD Zen 4: 7.2-7.8 ms in 8 segments,
                // 1.3-1.6 as one online pass (M = 4: 3.6-3.9 in 2 segments, 1.8).
                s.strategy = Strategy::Incremental;
                s.segments = 1;
            }
        }
        while (!one_block && s.row_block > 4 && outer * ((inner + s.row_block - 1) / s.row_block) < workers) s.row_block /= 2;
        int64_t blocks = outer * ((inner + s.row_block - 1) / s.row_block);
        if (s.segments <= 1 && blocks < workers && axis >= 4 * s.tile * workers) {
            s.segments = (workers + blocks - 1) / blocks;
            s.strategy = Strategy::MultiSegment;
        }
    }
    return s;
}

}  // namespace rf::tile
