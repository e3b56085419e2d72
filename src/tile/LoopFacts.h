/** \file LoopFacts.h
 * Internal to src/tile: what the tile passes (FoldExp2.cpp, HoistInvariants.cpp, CoalesceTileArrays.cpp,
 * GemmIntoState.cpp, ForwardBlockTemps.cpp, LocalizeBlockTemps.cpp, ...) need to know about
 * statements and loops: the names they mention, write or declare, whether an expression is invariant
 * in a loop, whether evaluating an expression early can trap, whether a loop runs at least once, and
 * a rewrite that knows the loops around each statement.
 */
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tile/TileIR.h"

namespace rf::tile::loop_facts {

/** Every name that s (a statement and everything below it) declares or writes: loop variables,
 *  declared locals, targets of assignments, accumulations and selections, top-k lists, shift states,
 *  GEMM outputs, and buffers it stores or copies into. */
void written_in(const StmtP &s, std::set<std::string> &out);

/** True when an expression of s itself (not of its children) mentions `name` (a Var or Load). */
bool mentions_own(const StmtP &s, const std::string &name);

/** True when an expression of s or of any statement below it mentions `name`. */
bool mentions_anywhere(const StmtP &s, const std::string &name);

/** True when e reads none of `written` (no Var or Load of those names) and holds no nested
 *  reduction (its axes are binders the passes do not reason about). */
bool invariant(Expr e, const std::set<std::string> &written);

/** A kernel constant: built from constants and sizes only (no locals, no loads), without a nested
 *  reduction. Its value is the same everywhere in a kernel. */
bool kernel_constant(Expr e);

/** True when a and b simplify to the same expression (the same value wherever both are read). */
bool same_value(Expr a, Expr b);

/** True when evaluating e cannot trap whatever the values: every integer division or modulo is by a
 *  non-zero constant (the evaluator defines x / 0 on integers as an error, the CPU raises SIGFPE).
 *  Real division, square roots, logarithms and casts do not trap (IEEE: inf or NaN). */
bool cannot_trap(Expr e);

/** A tile loop over the cascade axis as the lowering names it: `$tile`, or a pass's `$pK_tile`
 *  (LowerPass.cpp tiles: its body starts with the index locals $tb and $te). */
bool is_tile_loop(const StmtP &s);

/** True when e reads memory (a Load of a local array or a buffer). */
bool reads_memory(Expr e);

/** A local name `prefix` + N not in `taken` (N counting up from `next`), added to `taken`: the name a
 *  pass gives a local it introduces. */
std::string fresh_name(const std::string &prefix, std::set<std::string> &taken, int &next);

/** Index locals whose value is known where the walk stands: name -> value, for locals declared
 *  once and never assigned (`$tb`, `$te`), and the ranges of the loops around. */
struct Facts {
    std::map<std::string, Expr> index_values;
    std::map<std::string, std::pair<Expr, Expr>> loop_ranges;  ///< loop variable -> [begin, end)
};

/** True when the loop [begin, end) provably runs at least once: constant bounds with begin < end,
 *  or a tile of the cascade axis as the lowering declares it (LowerPass.cpp `tiles`):
 *      for t in [0, (hi - lo + T - 1) / T):  tb = lo + t * T;  te = min(tb + T, hi);  for j in [tb, te)
 *  where t < ⌊(hi − lo + T − 1) / T⌋ gives t·T ≤ hi − lo − 1, so tb < hi, and te = min(tb + T, hi) > tb;
 *  or the rows of a block, [0, nbv) with nbv = min(B, E − rbase), rbase = row·B, row < (E + B − 1) / B. */
bool runs_at_least_once(Expr begin, Expr end, const Facts &facts);

/** b when index = b + x (x alone: 0) with b not reading x: the first element of a run that x walks
 *  one element at a time; null otherwise. */
Expr offset_beside(Expr index, Expr x);

/** The locals a kernel body declares, by name: arrays (declared with dimensions) by class, and
 *  scalar tile locals. A name declared twice with different classes or shapes is in neither. */
struct DeclaredLocals {
    std::map<std::string, LocalClass> arrays;
    std::set<std::string> tile_scalars;
};
DeclaredLocals declared_locals(const StmtP &body);

/** A loop around a statement: its variable and range. */
struct LoopRange {
    Expr var, begin, end;
};

/** The loop of `var` among loops (innermost last), when it starts at 0. */
std::optional<LoopRange> loop_from_zero(const std::vector<LoopRange> &loops, Expr var);

/** s rebuilt top-down: each statement's own part by own(stmt, the loops around it and the stmt
 *  itself when it is a loop), its children below that (a statement without children is replaced by
 *  what own returns, which may be a block). */
using OwnRewrite = std::function<StmtP(const StmtP &, const std::vector<LoopRange> &)>;
StmtP rewrite_with_loops(const StmtP &s, const OwnRewrite &own);

}  // namespace rf::tile::loop_facts
