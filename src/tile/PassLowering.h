/** \file PassLowering.h
 * Internal to src/tile: the class that lowers one chain pass (LowerPass.cpp: state, expressions,
 * per-tile updates, kernel shapes; LowerGemm.cpp: member GEMMs and shared factors; LowerMerge.cpp:
 * segment merges, finalization and the per-row epilogue).
 */
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/Eval.h"
#include "support/Error.h"
#include "tile/GemmOperands.h"
#include "tile/LowerPass.h"

namespace rf::tile::lowering {

/** select(|v| < inf, v, 0): v where it is finite, else 0 (NaN included: NaN < inf is false). The
 *  clamp is idempotent — its result is always finite, so clamping it again changes nothing — and a
 *  value that already is one is returned as it is (δ of a running maximum is clamped when read and
 *  again as a δ: one clamp instead of select(abs(select(abs(a) < inf, a, 0)) < inf, select(...), 0)). */
inline bool is_clamp(Expr v) {
    return v->kind == Kind::Select && v->args[2]->is_const(0) && v->args[0] == is_finite(v->args[1]);
}
inline Expr sanitize(Expr v) { return is_clamp(v) ? v : make_select(is_finite(v), v, real_c(0)); }
inline Expr any(const std::vector<Expr> &c) {
    if (c.empty()) return make_bool(false);
    Expr r = c[0];
    for (size_t i = 1; i < c.size(); i++) r = make_or(r, c[i]);
    return r;
}
inline Expr add_i(Expr a, Expr b) { return make_add(a, b); }
inline Expr mul_i(Expr a, Expr b) { return make_mul(a, b); }

enum class Form { SumShift, Select, ArgSelect, TopK, Prod, Mult, Poly };

struct MemberInfo {
    int k = 0;
    const TensorDef *def = nullptr;
    const MemberAnalysis *a = nullptr;
    std::vector<Expr> extra_vars, extra_ext;  ///< the def's vars after the row (without a top-k axis)
    Expr X = nullptr;                         ///< number of extra points
    Form form = Form::SumShift;
    ReduceOp op = ReduceOp::Sum;              ///< the operation performed on state values
    bool sel = false;                         ///< additive / monotone: selection over Gsel
    Expr K = nullptr;                         ///< top-k capacity
    size_t nd = 0;                            ///< number of δ atoms
};

/** Lowers one chain pass; see LowerPass.h for the entry points that use it. */
class PassLowering {
public:
    explicit PassLowering(const PassContext &ctx) : ctx_(ctx), p_(*ctx.program), c_(*ctx.chain) {}

    PassKernel run();

    void prepare();

private:
    // ---- Members and their state.
    MemberInfo info(int k);

    static std::string field(const std::string &P, int k, const char *f) { return P + std::to_string(k) + f; }
    static Expr rr() { return make_index("$rr"); }
    /** Elements between the rows of a block's tile arrays (scores, prologue values, GEMM outputs):
     *  the tile length, padded when it is a multiple of 32 of at least 64 (a power of two: rows
     *  4 KiB apart would share L1 sets). By 8 on a GPU, so that consecutive rows start 8 banks
     *  apart (stride ≡ 8 mod 32: the tensor-core GEMM's C fragments of a half-warp's 4 rows then hit
     *  different banks instead of the same 8). By 16 on the CPU: with the worker arrays on 64-byte
     *  boundaries (rfk::LocalArray) every row then starts on a cache line, so the tile GEMMs' row
     *  stores and loads and the rows' vector loops never split a line (bf16 attention L = 2048 on
     *  the AMX Xeon: 13.4 ms with rows 264 floats apart, 12.7 with 272). The pad counts 32-bit words:
     *  int8 arrays (quantized GEMM operands) take 4 bytes per word of it, their rows rounded up to
     *  whole cache lines, so that they too start on a line and 4 KiB-strided rows cannot meet in
     *  L1's sets (int8 dot GEMM, A 16 rows x 4096 bytes, one AMD Zen 4 core: 305 GOP/s with rows
     *  4112 bytes apart on odd 16-byte offsets, 392 with 4096, 425 with 4160). */
    int64_t row_stride(bool int8 = false) const {
        int64_t t = ctx_.schedule.tile;
        if (t < 64 || t % 32 != 0) return t;
        return int8 ? (t + 63) / 64 * 64 + 4 * ctx_.tile_row_pad : t + ctx_.tile_row_pad;
    }
    /** row_stride of the shared GEMM operand array `name`. */
    int64_t shared_stride(const std::string &name) const { return row_stride(int8_arrays_.count(name) > 0); }
    /** The state slot of extra point x of the current row of the block. */
    Expr sl(const MemberInfo &m, Expr x) { return nb_ == 1 ? x : add_i(mul_i(rr(), m.X), x); }
    /** for $rr in [0, $nbv): body — one row of the block at a time. */
    /** The loop over the block's rows: independent unless its rows share a buffer (then Serial). */
    StmtP rows_of_block(std::vector<StmtP> body, LoopKind kind = LoopKind::Independent) {
        return for_loop(rr(), int_c(0), local_var("$nbv", SType::Int), std::move(body), kind);
    }
    Expr acc(const std::string &P, const MemberInfo &m, Expr x) { return local_at(field(P, m.k, "_acc"), sl(m, x)); }
    Expr idx(const std::string &P, const MemberInfo &m, Expr x) { return local_at(field(P, m.k, "_idx"), sl(m, x)); }
    /** The slot of x's seen flag and tags: one per row for a row-flagged member (row_flagged_). */
    Expr flag_slot(const MemberInfo &m, Expr x) {
        if (!row_flagged_.count(m.k)) return sl(m, x);
        return nb_ == 1 ? int_c(0) : rr();
    }
    Expr seen(const std::string &P, const MemberInfo &m, Expr x) { return local_at(field(P, m.k, "_seen"), flag_slot(m, x)); }
    Expr tag(const std::string &P, const MemberInfo &m, Expr x, size_t i);
    Expr count(const std::string &P) { return local_var(P + "_n", SType::Int); }
    Expr seen_b(const std::string &P, const MemberInfo &m, Expr x) { return make_cmp(CmpOp::NE, seen(P, m, x), real_c(0)); }

    /** (local name, element count) of every field of a state instance, in a fixed order. */
    std::vector<std::pair<std::string, Expr>> fields(const std::string &P);

    double acc_init(const MemberInfo &m);

    void init_state(std::vector<StmtP> &out, const std::string &P);

    // ---- Expression translation.
    /** How loads of pass members are read: from the running state P (optionally as estimates of
     *  the final value, optionally with non-finite values replaced by 0), or from the buffers. */
    struct Mode {
        std::string P;  ///< empty: final values from the buffers
        bool estimate = false, sanitize = false;
    };

    /** Binds a member's own variables: row vars, extra vars (from the flat extra index x) and, when
     *  j is given, the reduction axes (from the flat axis index j). */
    Expr bind(Expr e, const MemberInfo &m, Expr x, Expr j, const Mode &mode);

    Expr translate(Expr e, const std::map<std::string, Expr> &vars, Expr j, const Mode &mode);

    std::string prologue_local(const std::string &def);

    /** δ of member m at x, from the running state P (or the final values when P is empty). */
    std::vector<Expr> deltas(const MemberInfo &m, Expr x, const Mode &mode);
    /** The earlier members' values that m's δ expressions read, bound like deltas (the tile body read
     *  them sanitized: a non-finite one as 0). */
    std::vector<Expr> delta_inputs(const MemberInfo &m, Expr x, const Mode &mode);

    Expr with_deltas(Expr e, const MemberInfo &m, const std::vector<Expr> &now, const std::vector<Expr> &old);

    Expr alpha(const MemberInfo &m, Expr x, const std::vector<Expr> &now, const std::vector<Expr> &old, const Mode &mode);

    std::vector<Expr> tags(const std::string &P, const MemberInfo &m, Expr x);

    Expr differs(const std::vector<Expr> &a, const std::vector<Expr> &b);

    /** Σ_α Π_i (c'_i - c_i)^α_i S_α: the shift-form state's value at a new reference point. */
    Expr poly_value(const std::string &P, const MemberInfo &m, Expr x, const std::vector<Expr> &now);

    /** The value member m would have if the axis ended now (PlanInterp's member_value/finalize). */
    Expr current_value(const MemberInfo &m, Expr x, const Mode &mode);

    /** The value of member m at x from the state P, its own dependencies read as `raw` says (running
     *  values of this pass, or the final values in the buffers): PlanInterp's finalize. */
    Expr value_of(const std::string &P, const MemberInfo &m, Expr x, const Mode &raw);

    Expr apply_phi(const MemberInfo &m, Expr x, Expr u, const Mode &mode);

    // ---- Loops.
    /** for x in [0, X): body(x) */
    StmtP over_extra(const MemberInfo &m, const std::function<std::vector<StmtP>(Expr)> &body);

    Expr jvar() { return make_index("$jj" + std::to_string(uid_++)); }
    // ---- Rows as SIMD lanes (LowerLanes.cpp).
    /** Member m's per-tile update takes the block's rows as SIMD lanes (Schedule::row_lanes). */
    bool lanes(const MemberInfo &m) const;
    /** The class of state field `name` of P: State (float64), or LaneState (the compute type) for a
     *  lane top-k list's values and count and a lane max, min or plain sum's running value. */
    LocalClass field_class(const std::string &P, const std::string &name) const;
    /** Lane top-k lists back to the row-major slots (rr·K + q) after the last tile, for the lists
     *  whose outputs finalize writes a row at a time (not lane_list_outputs). */
    std::vector<StmtP> lists_to_rows(const std::string &P);
    /** Top-k member m's outputs are written from its lane list by a vector loop over the block's rows
     *  per slot, after the rows' finalization: its list is in lanes and no later member reads them. */
    bool lane_list_outputs(const MemberInfo &m) const;
    /** The output value of top-k member m's list entry at `slot` (of extra point x): φ of the listed
     *  key, read where finalization reads the members φ uses. */
    Expr listed_output(const std::string &P, const MemberInfo &m, Expr x, Expr slot);
    /** for q in [0, K): for $rr in [0, $nbv) as one vector loop: the outputs of slot q of m's list. */
    StmtP lane_list_stores(const std::string &P, const MemberInfo &m);
    /** What a selection member selects over: Gsel (the body as written, where it is), else the body. */
    Expr selection_body(const MemberInfo &m) const;
    /** The value a top-k list ranks for term v: -v for a bottom-k of a decreasing φ. */
    Expr topk_key(const MemberInfo &m, Expr v) const;
    /** for $rr in [0, $nbv) as one vector loop: body. */
    StmtP over_lanes(std::vector<StmtP> body);
    std::vector<StmtP> lanes_member(const std::string &P, const MemberInfo &m, const Mode &run);
    std::vector<StmtP> lanes_update(const std::string &P, const MemberInfo &m, Expr body_expr, const Mode &run);
    std::vector<StmtP> lanes_select(const std::string &P, const MemberInfo &m, const Mode &run);
    std::vector<StmtP> lanes_mult(const std::string &P, const MemberInfo &m);
    std::vector<StmtP> lanes_topk(const std::string &P, const MemberInfo &m, const Mode &run);
    /** A shifted sum's first tile: its reference (the first term, or 0 for a masked body), acc = 0. */
    StmtP shift_reference(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, const Mode &run);
    /** A plain sum's term v as its loop adds it: v − ref when the sum shifts (sum_shifts_terms), else v. */
    Expr shifted_term(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, Expr v);

    // ---- Member GEMMs (the operand helpers are GemmOperands.h's, over this pass's row block).
    gemm_operands::Rows block_rows() const;
    int dim_of(Expr load, Expr v) const;
    Expr group_divisor(Expr e) const;
    Expr grouped(Expr e, Expr G) const;
    StmtP when_grouped(Expr G, StmtP block, StmtP rows) const;
    /** The element stride of dimension d of a global buffer: the product of the later extents. */
    Expr stride(Expr load, int d) const;
    static Expr gemm_operand(Expr e);
    Expr at_origin(Expr load, const std::map<Expr, Expr> &to) const;

    struct MemberGemm {
        Expr F = nullptr;  ///< the factor shared by every extra point (over $rr, $jh)
        Expr W = nullptr;  ///< the load that carries the extra axis
        int w_x = -1, w_j = -1;
        bool nn = true;    ///< W[j][x] (x contiguous) rather than W[x][j]
        bool int8 = false; ///< F is an i8-rounded value and W an i8 load: exact int32 GEMM
        bool per_row = false;  ///< W depends on the row (GQA decode's V[b, hq / G, j, e]): a GEMV per row
    };

    static Expr strip_widening(Expr e);

    static Expr jh() { return make_index("$jh"); }
    static Expr xg() { return make_index("$xg"); }

    /** The term of a member as the update loop sums it, over $rr and $jh (for sharing). */
    Expr term_of(const std::string &P, const MemberInfo &m, Expr x);

    /** Recognizes Σ_j F(j)·W(j, x) over one axis and one extra variable. */
    std::optional<MemberGemm> gemm_form(const std::string &P, const MemberInfo &m);

    void plan_gemms(const std::string &P);

    /** A member without extra axes whose term is some GEMM's shared factor (l = Σ exp(S - m)). */
    Expr shared_term(const std::string &P, const MemberInfo &m);

    Expr shared_at(Expr F);

    /** Computes the tile array of a shared factor once, before its first use. */
    bool materialize(Expr F, std::vector<StmtP> &out);

    /** The rescale of a multiplicative member at x before new terms are added; δ locals into d. */
    /** δ of a multiplicative member once per row when it does not depend on the extra point
     *  (δ = -m for every output column of attention): declared into `out` before the loop over x,
     *  and used by rescale/after_terms instead of recomputing it per column. */
    void hoist_deltas(const std::string &P, const MemberInfo &m, std::vector<StmtP> &out);

    std::vector<StmtP> rescale(const std::string &P, const MemberInfo &m, Expr x, std::vector<Expr> &d);
    /** The GEMM path's rescale with one factor per row (LowerGemm.cpp); false when it does not apply. */
    bool row_rescale(const std::string &P, const MemberInfo &m, std::vector<StmtP> &out);

    /** Groups the multiplicative sums of this pass whose δ does not depend on their extra point and
     *  whose α(δ, τ) is one function of (δ, τ): every such member sets its tags to the same δ and its
     *  seen flag after every tile and merge, from the same initial values, so their tags stay equal
     *  and one factor α(δ, τ) per row and tile serves all of them (attention's l and O: one exp per
     *  row and tile instead of two). A group of one member with one extra point is left alone. */
    void plan_shared_rescales(const std::string &P);
    /** δ at the extra point and α(δ, τ) with placeholders for δ and τ, when a multiplicative sum's δ
     *  and α do not depend on its extra point (empty otherwise): the grouping key of
     *  plan_shared_rescales. */
    std::vector<Expr> rescale_key(const std::string &P, const MemberInfo &m);
    /** The loop computing the factor of m's group into its tile array, when m is the group's first
     *  member (emitted just before it, after the members its δ reads have been updated). */
    std::vector<StmtP> shared_rescale_factor(const std::string &P, const MemberInfo &m);

    std::vector<StmtP> after_terms(const std::string &P, const MemberInfo &m, Expr x, const std::vector<Expr> &d);

    /** A member summing a shared tile array (no shift: the terms are the array's values). */
    std::vector<StmtP> shared_update(const std::string &P, const MemberInfo &m, Expr x, Expr F);

    /** acc[rr][x] += Σ_j F[rr][j] · W(j, x) as one GEMM over the block and the tile. */
    std::vector<StmtP> member_gemm(const std::string &P, const MemberInfo &m, const MemberGemm &g);

    /** Companion sums (LowerCompanions.cpp): which multiplicative members get their tile sum from a
     *  later shift-form member's loop. */
    void plan_companions(const std::string &P);
    /** After t's loop: acc_s += κ·(t's tile sum of the moment s accompanies), for each companion s. */
    std::vector<StmtP> companion_updates(const std::string &P, const MemberInfo &t, Expr x, const std::vector<std::string> &tile_sums);

    // ---- Row-reduced members (LowerRowReduced.cpp).
    struct RowReducedGemm {
        Expr F = nullptr;  ///< the factor over ($rr, $jh), a tile array shared with the members
        Expr W = nullptr;  ///< the input load over ($rr, $xg)
        int w_k = -1;      ///< W's dimension indexed by the block's row
    };
    std::optional<RowReducedGemm> row_reduced_form(const RowReducedMember &r);
    /** Each row-reduced member's GEMM form, its factor registered as a shared tile array. */
    void plan_row_reduced();
    /** The flat index into r's layout with each var at the value of its host slot (at_slot) and the
     *  extra var at `extra`. */
    Expr row_reduced_index(const RowReducedMember &r, const std::function<Expr(size_t slot)> &at_slot, Expr extra);
    /** After the members: each row-reduced member's partial sums += the tile's terms. */
    std::vector<StmtP> row_reduced_updates();
    /** The kernel of a host chain: outer rows owning their partial sums, or worker copies. */
    PassKernel row_reduced_kernel();
    /** The parallel loop adding r's worker copies of its partial sums into its buffer. */
    StmtP worker_copies_added(const RowReducedMember &r);
    std::vector<RowReducedGemm> row_reduced_gemm_;

    // ---- Per-tile update (PlanInterp::update).
    std::vector<StmtP> update_tile(const std::string &P);

    StmtP shift_at(const std::string &P, const MemberInfo &m, Expr x, std::vector<Expr> from, std::vector<Expr> to);

    /** Independent members (sum, product, max/min, arg-selection, top-k) and selections over Gsel. */
    std::vector<StmtP> plain_update(const std::string &P, const MemberInfo &m, Expr x, Expr body_expr, const Mode &run);

    /** s = s·α(δ, tag) + Σ U(x, δ): the multiplicative update with PlanInterp's guards. */
    std::vector<StmtP> mult_update(const std::string &P, const MemberInfo &m, Expr x, const Mode &san);

    // ---- Merge B into A (PlanInterp::merge), member by member in order.
    std::vector<StmtP> merge(const std::string &A, const std::string &B);

    // ---- Finalize and store (PlanInterp::write_outputs).
    std::vector<StmtP> finalize(const std::string &P);
    /** Top-k member m (a selection over G) where a row's δ is not finite: the list of F itself, stored
     *  over the outputs of the list of G. */
    StmtP literal_topk(const MemberInfo &m);
    /** Whether δ of member m at x, or a member value δ reads, is not finite (read from the buffers). */
    Expr topk_delta_not_finite(const MemberInfo &m, Expr x);

    Expr final_value(const std::string &P, const MemberInfo &m, Expr x) { return value_of(P, m, x, Mode{}); }

    // ---- Epilogue: element-wise definitions of this row.
    std::vector<StmtP> epilogue();
    /** A row output of definition d (value v at element x) in chunks of kEpilogueChunk values, each
     *  copied out as it is done (CPU, LowerOptions::epilogue_row_buffer, one axis past the rows). */
    void chunked_row_output(const TensorDef *d, Expr x, Expr v, std::vector<StmtP> &out);
    static constexpr int64_t kEpilogueChunk = 2048;

    // ---- Kernel shapes.
    std::vector<StmtP> row_decls(Expr flat_row);

    /** Tiles of [lo, hi) with the update of state P. */
    StmtP tiles(const std::string &P, Expr lo, Expr hi);

    PassKernel single_segment();

public:
    /** One row of a single-segment pass (row variables already declared by the caller). */
    std::vector<StmtP> row_statements();
    std::vector<StmtP> row_decls_public(Expr flat_row) { return row_decls(flat_row); }
    Expr rows() const { return product(block_ext_); }

private:

    PassKernel multi_segment();

    const PassContext &ctx_;
    const Program &p_;
    const ChainPlan &c_;
    std::vector<MemberInfo> members_;
    std::map<std::string, int> names_;
    std::vector<Expr> row_ext_, block_ext_, row_vars_, axis_ext_;
    int64_t nb_ = 1;
    Expr L_ = nullptr;
    std::map<std::string, std::string> prologue_ids_;
    std::map<int, MemberGemm> gemm_of_;
    std::map<int, std::vector<Expr>> hoisted_;  ///< member -> δ locals declared once per row
    std::map<int, std::string> rescale_factor_;  ///< member -> the tile array of its group's factor
    /** Members whose extra points' seen flags and tags are one per row: multiplicative sums with
     *  more than one extra point (or a size's worth) whose δ and α do not depend on it. Every point
     *  of such a member is rescaled by one factor per row computed before the loop over the points
     *  (plan_shared_rescales), gets the same δ as its tag and is seen after every tile and merge,
     *  so one flag and one tag per row hold what X of them held: the state shrinks from 3X to X + 2
     *  values per row, and the writes of flags and tags move out of the loops over the points. */
    std::set<int> row_flagged_;
    std::map<int, int> companion_into_;  ///< multiplicative member -> the shift-form member whose loop sums its terms
    std::map<int, std::vector<std::pair<size_t, int>>> companion_sums_;  ///< shift-form member -> (moment, member)
    std::map<int, int> rescale_first_;           ///< first member of a group -> the member whose tags it reads
    std::vector<StmtP> epilogue_arrays_;  ///< row buffers of streamed epilogue outputs
    std::set<std::string> int8_arrays_;
    std::map<Expr, std::pair<std::string, bool>> shared_;  ///< factor -> (tile array, computed yet)
    int uid_ = 0;
};

}  // namespace rf::tile::lowering
