/** \file SymCache.h
 * The symbolic engine's memo tables (simplified forms, default-fact intervals, expansions), owned
 * by the expression arena whose nodes they map. Internal to src/sym.
 */
#pragma once

#include <unordered_map>

#include "ir/Expr.h"
#include "sym/Sign.h"

namespace rf::sym {

/** One thread's memo tables for one arena (an ArenaMemo: the arena owns and destroys it). */
struct SymCache : ArenaMemo {
    std::unordered_map<Expr, Expr> simplified;    ///< node -> canonical form (canonical nodes map to themselves)
    std::unordered_map<Expr, Interval> intervals;  ///< node -> interval under the default (empty) facts
    std::unordered_map<Expr, Expr> expanded;       ///< node -> expand(node)
    void clear() {
        simplified.clear();
        intervals.clear();
        expanded.clear();
    }
};

/** Marks a public entry point of the engine. The outermost entry on a thread looks up the tables
 *  of current_arena() (made on first use) for the calls nested inside it; nested entries cost
 *  nothing. */
class SymEntry {
public:
    SymEntry();
    ~SymEntry();
    SymEntry(const SymEntry &) = delete;
    SymEntry &operator=(const SymEntry &) = delete;
};

/** The calling thread's tables for the current arena; only valid inside a SymEntry. */
SymCache &sym_cache();

/** Drops every memo entry of the calling thread for the current arena (tests use it to re-derive
 *  results from scratch). */
void reset_sym_cache();

}  // namespace rf::sym
