/** \file SymCache.cpp
 * Validation of the per-thread symbolic memo tables against the current arena.
 */
#include "sym/SymCache.h"

#include <atomic>
#include <cstdint>
#include <cstring>

namespace rf::sym {

namespace {
struct State {
    Arena *arena = nullptr;
    Expr sentinel = nullptr;
    double sentinel_value = 0;
    int depth = 0;
    SymCache cache;
};

thread_local State tls_state;

/** A NaN whose payload is unique to this thread: a constant no expression ever contains. Interning
 *  it tells whether this thread already marked the current arena (the node exists) or not (the
 *  arena grows by one node), which distinguishes a new arena that reuses a dead arena's address. */
double make_sentinel_value() {
    static std::atomic<uint64_t> counter{1};
    uint64_t bits = 0x7ff8000000000000ULL | (0x5eedULL << 32) | (counter.fetch_add(1) & 0xffffffffULL);
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

void validate(State &st) {
    if (st.sentinel_value == 0) st.sentinel_value = make_sentinel_value();
    Arena &arena = current_arena();
    size_t before = arena.size();
    Expr s = make_const(st.sentinel_value);
    bool fresh = arena.size() != before;
    if (&arena != st.arena || fresh || s != st.sentinel) {
        st.cache.clear();
        st.arena = &arena;
        st.sentinel = s;
    }
}
}  // namespace

SymEntry::SymEntry() {
    if (tls_state.depth++ == 0) {
        try {
            validate(tls_state);
        } catch (...) {
            tls_state.depth--;
            throw;
        }
    }
}

SymEntry::~SymEntry() { tls_state.depth--; }

SymCache &sym_cache() { return tls_state.cache; }

void reset_sym_cache() { tls_state.cache.clear(); }

}  // namespace rf::sym
