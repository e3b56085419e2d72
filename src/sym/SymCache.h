/** \file SymCache.h
 * Per-thread, per-arena memo tables of the symbolic engine (simplified forms, default-fact
 * intervals), reset automatically when the current arena changes. Internal to src/sym.
 */
#pragma once

#include <unordered_map>

#include "ir/Expr.h"
#include "sym/Sign.h"

namespace rf::sym {

struct SymCache {
    std::unordered_map<Expr, Expr> simplified;    ///< node -> canonical form (canonical nodes map to themselves)
    std::unordered_map<Expr, Interval> intervals;  ///< node -> interval under the default (empty) facts
    std::unordered_map<Expr, Expr> expanded;       ///< node -> expand(node)
    void clear() {
        simplified.clear();
        intervals.clear();
        expanded.clear();
    }
};

/** Marks a public entry point of the engine. The outermost entry on a thread checks that the
 *  cache still belongs to current_arena() (an arena destroyed and another created at the same
 *  address is detected too) and resets it otherwise; nested entries cost nothing. */
class SymEntry {
public:
    SymEntry();
    ~SymEntry();
    SymEntry(const SymEntry &) = delete;
    SymEntry &operator=(const SymEntry &) = delete;
};

/** The calling thread's cache; only valid inside a SymEntry. */
SymCache &sym_cache();

/** Drops every memo entry of the calling thread (tests use it to re-derive results from scratch). */
void reset_sym_cache();

}  // namespace rf::sym
