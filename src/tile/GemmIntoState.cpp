/** \file GemmIntoState.cpp
 * The tile pass (GPU lowering only) that lets a member's tile GEMM accumulate straight into its
 * running state instead of into a zeroed tile array that a loop then adds to the state.
 */
#include <set>

#include "tile/GemmSites.h"
#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* The lowering writes a GEMM member's update (LowerGemm.cpp, member_gemm) as
 *     tile $g[n] = 0
 *     gemm $g[c] += F x W ...                  (one GEMM, or the GQA choice between a block GEMM
 *                                               and one GEMM per row: every GEMM into $g)
 *     for $rr ...: ... for x ...: { acc[i] sum= $g[i]; ... }   (and the row's tags and flags)
 * so acc[i] ← acc[i] + (0 + Σ_k F·W). With states in the GEMM's own type (float: every GPU
 * state; the CPU keeps states in double, so it does not run this pass) the GEMM can add into acc
 * directly, acc[i] ← acc[i] + Σ_k F·W: the same sum, added to acc in the GEMM's accumulators instead
 * of after it (a different but equally accurate rounding order). The zeroing of $g (a tile array
 * as large as the state), its stores, and the loop's reads of $g and read-modify-writes of acc go:
 * on a GPU one pass over shared memory per tile fewer, and $g's shared memory.
 * Preconditions, each checked: the site's shape (GemmSites.h, gemm_site: $g declared right before
 * the GEMM statement and mentioned nowhere else in the list but there and in one accumulation
 * `A[i] sum= $g[i]` inside the statement right after), A a declared state array, and that statement
 * reads A nowhere else (it would now see the sum already added). Not checked here but by
 * construction: the GEMM writes exactly the elements the loop accumulates (member_gemm's layout,
 * M = rows, N = X, c_si = X over acc's rr·X + x), so no element of acc outside them is touched. */

/** Redirects in every list of statements, the outer list first. */
class GemmIntoState : public StmtMutator {
public:
    explicit GemmIntoState(const std::set<std::string> &states) : states_(states) {}
    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override {
        std::vector<StmtP> list = in;
        for (size_t i = 0; i < list.size(); i++) {
            auto site = gemm_site(list, i);
            if (!site || !states_.count(site->acc)) continue;
            // Nothing else in the loop may read the state: it would now see the GEMM's sum already added.
            if (reads_state_beside_sum(list, i, *site)) continue;
            accumulate_site_into_state(list, i, *site);
        }
        return StmtMutator::mutate_list(list);
    }

private:
    const std::set<std::string> &states_;
};

}  // namespace

Module accumulate_gemms_into_states(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        std::set<std::string> states;
        for_each_stmt(k.body, [&](const StmtP &s) {
            if (s->kind == StmtKind::Decl && s->cls == LocalClass::State && !s->dims.empty()) states.insert(s->name);
        });
        k.body = GemmIntoState(states).mutate(k.body);
    }
    return m;
}

}  // namespace rf::tile
