/** \file TileIR.h
 * The tile IR: loop nests over rows, segments and tiles of the cascade axis whose statements hold
 * scalar expressions (ir/Expr.h). It sits between the fusion plan and the backends: lowering writes
 * every derived update, merge and epilogue as explicit statements, passes rewrite them (GEMM
 * recognition, hoisting), and each backend prints the same tree (C++ for the CPU, later OpenCL/CUDA).
 *
 * Statements are small immutable nodes shared by pointer; the schedule knobs are data (Schedule),
 * never separate code paths.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuse/Strategy.h"
#include "ir/DType.h"
#include "ir/Expr.h"

namespace rf::tile {

/** Which members take the rows of a block as SIMD lanes (CPU only, LowerLanes.cpp). */
enum class RowLanes : uint8_t {
    None,
    All,   ///< every member that can: a column reduction (inputs contiguous along the row, strided
           ///< along the axis), or rows shorter than a vector
    TopK,  ///< the top-k lists only: rows of 16-256, where a vector loop along the row pays but the
           ///< list's sorted insertion mispredicts a branch per listed element
};

/** The schedule of one kernel, as data. The lowering reads it; `tune` searches it. */
struct Schedule {
    Strategy strategy = Strategy::Incremental;  ///< single_pass, incremental, multi_segment, onchip_multipass, multi_pass, literal
    int64_t tile = 256;       ///< elements of the cascade axis per tile
    int64_t row_block = 1;    ///< rows (of the innermost row variable) handled together: the GEMM M
    int64_t segments = 1;     ///< splits of the cascade axis, merged with the derived merge
    int threads = 0;          ///< worker threads (0: every usable CPU)
    std::string fusion_level = "row";  ///< where running states live: row (CPU); thread/warp/block (GPU)
    /** The rows of a block are the SIMD lanes of the per-tile update: for each axis position, one
     *  vector step over the block's rows. */
    RowLanes row_lanes = RowLanes::None;
    /** The CPU's next-tile prefetches (PrefetchNextTiles.cpp) ask for at most this many bytes of a
     *  tile, its head; 0: the whole tile. A code-generation hint, not printed with the schedule. */
    int64_t prefetch_bytes = 0;
    /** The CPU's row copies (CopyRow) use non-temporal stores when the kernel's inputs and output
     *  together exceed this many bytes: the output's lines would leave the caches before anyone read
     *  them, and the stores skip reading them for ownership. A code-generation hint. */
    int64_t stream_bytes = int64_t{24} << 20;
};

/** How a loop runs. Parallel loops are distributed over workers; Simd loops are vector loops whose
 *  Accum statements are reductions. Independent loops (rows of a block, free indices of a state)
 *  touch disjoint elements in every iteration: the CPU runs them in order, the GPU printer may
 *  spread them over the threads of a work-group (it checks that no scalar outside is written).
 *  Lanes loops are Independent loops the CPU runs as vector loops with the values in float64, as
 *  a row-at-a-time loop has them (a Simd loop computes in the kernel's compute type); no Accum. */
enum class LoopKind : uint8_t { Serial, Parallel, Simd, Independent, Lanes };

/** Storage class of a local: State, a running state, kept in float64 (they are few and long-lived);
 *  LaneState, a running state kept in the compute type, one element per row of the block (rows as SIMD
 *  lanes, whose updates compute in that type: LowerLanes.cpp); Tile, a value of the compute type
 *  (float32 by default); Index, an integer position; Int8, quantized tile values for int8 GEMMs. */
enum class LocalClass : uint8_t { State, Tile, Index, Int8, LaneState };

/** When a Prefetch's lines are asked for: all at once where it stands; one by one between the
 *  streamed stores of the row copy that follows in the same sweep (rfk::RowStream::prefetch_next); or
 *  a few per block of the blocked-sum vector loop that follows (rfk::SweepPrefetch; all at once before
 *  that loop when it takes another form). */
enum class PrefetchWhen : uint8_t { AtOnce, DuringCopy, DuringSweep };

enum class StmtKind : uint8_t {
    Block,       ///< children in order
    For,         ///< var in [begin, end) step 1; children = body; `loop` says how it runs
    If,          ///< cond; children = then; else_body
    Decl,        ///< local `name` of class `cls` with `dims` (empty: scalar), every element = value
    Assign,      ///< target = value (target: a Var for scalars, a Load of a local for arrays)
    Accum,       ///< target op= value with op Sum/Prod/Max/Min (inside a Simd loop: a reduction)
    ArgSelect,   ///< (target, target2) = (value, index) when better under op (NaN first, lower index on ties)
    TopKInsert,  ///< insert (value, index) into the sorted list `name` (slots at args[0], count at args2[0]) of capacity k
    PolyShift,   ///< move the shift-form state `name`[α] from reference `args` to reference `args2`
    Gemm,        ///< C (+)= alpha · A · B or A · Bᵀ over tiles (see GemmInfo)
    Store,       ///< global tensor element target = value, rounded to the tensor's dtype
    CopyRow,     ///< f32 or bf16 output elements target[0..end) = value[0..end) (· scale when set) (a float local or a 1-D f32 temporary; rounded); streamed past the caches
                 ///< (non-temporal stores) when the whole output is larger than the caches
    Prefetch,    ///< a hint: input elements target[0..end) are read soon (CPU: into L2); no effect on values
    FinishCopies,  ///< the deferred row copies (CopyRow::deferred) whose source lies below the local element target are done now
    Comment,     ///< text (already sanitized) kept in dumps and generated code
};

struct GemmInfo {
    // C[i][j] (+)= alpha · Σ_k A[i][k] · (transB ? B[j][k] : B[k][j]); each operand is a base element
    // (a Load whose indices are at i = j = k = 0) plus element strides per axis.
    Expr M, N, K;                       ///< extents
    Expr a_base, b_base, c_base;        ///< Loads at the origin
    Expr a_si, a_sk, b_sj, b_sk, c_si;  ///< strides (elements); C is contiguous along j
    Expr alpha;
    bool trans_b = true;
    bool accumulate = false;
    /** When set (with accumulate): the GEMM accumulates only where this condition holds and stores
     *  C = alpha A·Bᵀ elsewhere, C then being all zeros (FirstGemmStores.cpp; the CPU's NT form). */
    Expr accumulate_if = nullptr;
    /** A is stored transposed (its k rows contiguous along i: a row-reduced member's tile, whose
     *  rows are the sum's terms); only the CPU's accumulating A·B form takes it. */
    bool a_transposed() const { return a_si->is_const(1) && !a_sk->is_const(1); }
};

struct Stmt;
using StmtP = std::shared_ptr<const Stmt>;

struct Stmt {
    StmtKind kind = StmtKind::Block;
    LoopKind loop = LoopKind::Serial;
    LocalClass cls = LocalClass::Tile;
    ReduceOp op = ReduceOp::Sum;
    std::string name;               ///< Decl / TopKInsert / PolyShift: the local; Comment: the text
    Expr var = nullptr, begin = nullptr, end = nullptr;  ///< For
    Expr cond = nullptr;            ///< If
    Expr target = nullptr, target2 = nullptr;  ///< Assign / Accum / ArgSelect / Store
    Expr value = nullptr, index = nullptr;     ///< right-hand sides
    Expr scale = nullptr;           ///< CopyRow: each value times this (compute type) before rounding; null: none
    Expr k = nullptr;               ///< TopKInsert capacity
    std::vector<Expr> dims;         ///< Decl
    std::vector<Expr> args, args2;  ///< PolyShift: old and new reference points
    std::vector<std::vector<int>> alphas;  ///< PolyShift multi-indices
    std::shared_ptr<const GemmInfo> gemm;
    std::vector<StmtP> body, else_body;
    /** Prefetch: when its lines are asked for (PrefetchWhen). */
    PrefetchWhen when = PrefetchWhen::AtOnce;
    /** CopyRow: may be done later, by the worker's next FinishCopies that reaches its source (or its
     *  end), its source left unchanged until then (DeferRowCopies.cpp). */
    bool deferred = false;
};

// ---- Builders (the only way passes create statements).
StmtP block(std::vector<StmtP> body);
StmtP for_loop(Expr var, Expr begin, Expr end, std::vector<StmtP> body, LoopKind loop = LoopKind::Serial);
StmtP if_then(Expr cond, std::vector<StmtP> then_body, std::vector<StmtP> else_body = {});
StmtP decl(const std::string &name, LocalClass cls, std::vector<Expr> dims, Expr init);
StmtP assign(Expr target, Expr value);
StmtP accum(ReduceOp op, Expr target, Expr value);
StmtP arg_select(ReduceOp op, Expr value_target, Expr index_target, Expr value, Expr index);
/** Inserts into the list whose slots start at `offset` (elements) of locals list_v / list_i, count list_n[count_index]. */
StmtP topk_insert(const std::string &list, Expr offset, Expr count_index, Expr k, ReduceOp op, Expr value, Expr index);
StmtP poly_shift(const std::string &state, std::vector<std::vector<int>> alphas, std::vector<Expr> from, std::vector<Expr> to);
StmtP gemm(GemmInfo info);
StmtP store(Expr target, Expr value);
/** target: a Load of an f32 output at the row's first element; source: a Load of a local array;
 *  scale (optional): a scalar each value is multiplied by, in the compute type, before rounding. */
StmtP copy_row(Expr target, Expr source, Expr count, Expr scale = nullptr, bool deferred = false);
/** at: a Load of an input at the first element of a run of `count` consecutive elements;
 *  when: all at once, or spread over the row copy or the sweep that follows (Stmt::when). */
StmtP prefetch(Expr at, Expr count, PrefetchWhen when = PrefetchWhen::AtOnce);
/** below: a Load of a local array at an element: the deferred row copies from sources below it are done. */
StmtP finish_copies(Expr below);
StmtP comment(const std::string &text);
/** A copy of s with new children. */
StmtP with_body(const StmtP &s, std::vector<StmtP> body, std::vector<StmtP> else_body = {});

/** s with its own expressions (not its children's) rewritten by f; s itself when f changes none
 *  (StmtMutator::mutate_own). */
StmtP map_own_exprs(const StmtP &s, const std::function<Expr(Expr)> &f);
/** Rewrites every expression of s (and below) with f, and every local name (declarations, loop
 *  variables, top-k lists, shift states) with rename. The default of both is the identity. Built on
 *  StmtMutator (StmtVisitor.h): unchanged subtrees keep their pointers. */
StmtP mutate(const StmtP &s, const std::function<Expr(Expr)> &f, const std::function<std::string(const std::string &)> &rename);
/** Renames the locals of s (Var and Load nodes whose names start with '$'). */
StmtP rename_locals(const StmtP &s, const std::function<std::string(const std::string &)> &rename);

/** A global buffer of a kernel: an input, an output, or a float64 temporary between kernels. */
struct Buffer {
    enum class Role : uint8_t { Input, Output, Temp };
    std::string name;     ///< the tensor's name in the spec (printers sanitize it)
    Role role = Role::Input;
    DType dtype = DType::f32;  ///< element type in memory (Temp: f64)
    std::vector<Expr> dims;    ///< extents over size variables
};

/** One kernel: a loop nest over the global buffers, all sizes run-time arguments. */
struct Kernel {
    std::string name;    ///< a C identifier chosen by the lowering (never user text)
    std::string what;    ///< one line for dumps: which members / definitions it computes
    Schedule schedule;
    StmtP body;
};

/** Everything a spec compiles to: buffers shared by kernels run in order. */
struct Module {
    std::vector<Buffer> buffers;           ///< inputs (spec order), outputs (spec order), temporaries
    std::vector<std::string> sizes;        ///< size names in spec order: the run-time arguments
    std::vector<Kernel> kernels;           ///< in execution order
    DType compute = DType::f32;            ///< the compute type of tile values
    const Buffer *find(const std::string &name) const;
};

/** `--emit tile`: a stable, indented text form of a module. */
std::string to_string(const Module &m);
std::string to_string(const StmtP &s, int indent = 0);

/** Checks structural invariants (every local declared before use and once per scope, loop
 *  variables bound, loads of known buffers with the right rank, Accum in scope of its target, ...).
 *  Throws InternalError naming the kernel and the statement. Run after every pass in debug builds
 *  and always in tests. */
void verify(const Module &m);

/** True in debug builds, which verify after every pass (release builds: when the driver is asked,
 *  Options::verify_each_pass). */
bool verify_each_pass();

}  // namespace rf::tile
