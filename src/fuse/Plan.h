/** \file Plan.h
 * The fusion plan: cascades found in the dependence graph, the passes each cascade needs, the
 * per-member derivations executed in each pass, the strategy chosen and why.
 */
#pragma once

#include <set>
#include <string>
#include <vector>

#include "fuse/Member.h"
#include "fuse/Strategy.h"
#include "ir/Program.h"

namespace rf {

struct PassPlan {
    std::vector<std::string> members;     ///< in chain order
    std::vector<MemberAnalysis> members_exec;  ///< derivation executed in this pass (relative to it)
};

/** Why a member of a chain moved to a later pass than its dependences alone require. */
enum class SplitReason : uint8_t {
    Unfusible,  ///< it fits no fusible form against the earlier members of its pass
    OffRow,     ///< it reads an earlier member outside its own row (another row, or along the axis)
    Rounding,   ///< it fits only up to rounding and --approx was not given
};

struct ChainPlan {
    std::vector<std::string> axes;     ///< reduction axis names (of the first member)
    std::vector<Expr> axis_extents;
    size_t n_row = 0;                  ///< leading definition vars shared by every member (the row)
    std::vector<std::string> members;  ///< every member in definition order
    std::vector<MemberAnalysis> verdicts;  ///< each member against the earlier members of its pass
    std::vector<int> pass_of;
    std::vector<PassPlan> passes;
    std::vector<std::string> prologue;  ///< reductions over other axes read per tile (QKᵀ)
    std::vector<std::string> epilogue;  ///< element-wise outputs computed from the final states
    bool fused = false;
    Strategy strategy = Strategy::Incremental;  ///< single_pass, incremental, multi_segment, onchip_multipass, multi_pass, exact_prepass
    std::string strategy_reason;
    int segments = 1;
    std::string note;
    std::set<SplitReason> split_reasons;  ///< why members moved to later passes
};

struct NotFused {
    std::string name, reason, counterexample;
};

struct Plan {
    const Program *program = nullptr;
    std::vector<ChainPlan> chains;  ///< in execution order
    std::vector<NotFused> not_fused;
};

struct PlanOptions {
    bool approx = false;            ///< fuse through rounding casts (the paper's incremental quantization)
    int parallel_units = 132;       ///< workers the cost model fills (default: an H100/H200-class GPU)
    int64_t fast_memory_bytes = 48 * 1024;  ///< per-worker fast memory for on-chip multi-pass
    const SizeBinding *sizes = nullptr;     ///< known sizes for the cost model (defaults when null)
};

Plan make_plan(const Program &p, const PlanOptions &opts = {});

/** Human-readable formulas of a member's derivation (docs/cli.md: G, H, update, merge). */
struct MemberText {
    std::string G, H, phi, init, update, merge, epilogue, deferred;
    std::vector<std::string> basis;
    std::vector<std::string> matrix;  ///< shift forms: S_β(ref) in terms of S_α(ref_old), one line per β
};
MemberText describe_member(const MemberAnalysis &m);

}  // namespace rf
