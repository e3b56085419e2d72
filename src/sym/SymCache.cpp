/** \file SymCache.cpp
 * Where the symbolic engine finds its memo tables: in the current arena, never in a thread-global.
 *
 * Design. The tables map node addresses to results, so they are only right for the arena that made
 * those nodes. They used to live in a thread-local keyed by the arena's address, which forced a
 * sentinel node to tell a new arena from a dead one at the same address. Now the arena owns them
 * (Arena::thread_memo): they are created on the first engine entry in that arena and destroyed with
 * it, so a later arena, wherever it is allocated, starts with empty tables by construction.
 *
 * Threads. Arenas of an ArenaScope are used by the thread that made them; the default arena is shared
 * by every thread without a scope. thread_memo therefore keeps one SymCache per thread and arena,
 * and only its thread reads or writes it (the lookup itself is under the arena's lock). The outermost
 * SymEntry of a thread looks the tables up once; nested entries reuse that pointer.
 */
#include "sym/SymCache.h"

#include "support/Error.h"

namespace rf::sym {

namespace {
struct EntryState {
    int depth = 0;              ///< SymEntry nesting on this thread
    SymCache *cache = nullptr;  ///< the current arena's tables while depth > 0
};

thread_local EntryState tls_entry;

std::unique_ptr<ArenaMemo> make_sym_cache() { return std::make_unique<SymCache>(); }

SymCache &cache_of(Arena &arena) {
    ArenaMemo &memo = arena.thread_memo(&make_sym_cache);
    // The factory identifies the memo's type: every memo made by make_sym_cache is a SymCache.
    return static_cast<SymCache &>(memo);
}
}  // namespace

SymEntry::SymEntry() {
    if (tls_entry.depth == 0) tls_entry.cache = &cache_of(current_arena());
    tls_entry.depth++;
}

SymEntry::~SymEntry() {
    if (--tls_entry.depth == 0) tls_entry.cache = nullptr;
}

SymCache &sym_cache() {
    RF_INTERNAL_ASSERT(tls_entry.cache) << "the symbolic memo tables are used outside a SymEntry";
    return *tls_entry.cache;
}

void reset_sym_cache() {
    if (tls_entry.cache) tls_entry.cache->clear();
    else cache_of(current_arena()).clear();
}

}  // namespace rf::sym
