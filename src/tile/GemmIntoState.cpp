/** \file GemmIntoState.cpp
 * The tile pass (GPU lowering only) that lets a member's tile GEMM accumulate straight into its
 * running state instead of into a zeroed tile array that a loop then adds to the state.
 */
#include <optional>
#include <set>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"

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
 * Preconditions, each checked: $g is declared with 0 right before the GEMM statement and mentioned
 * nowhere else in the list but there and in one accumulation `A[i] sum= $g[i]` (same index,
 * A a declared state array) inside the statement right after, which reads A nowhere else (it would
 * now see the sum already added); every GEMM into $g accumulates. Not checked here but by
 * construction: the GEMM writes exactly the elements the loop accumulates (member_gemm's layout,
 * M = rows, N = X, c_si = X over acc's rr·X + x), so no element of acc outside them is touched. */

/** Every GEMM under s writes into `tmp` and accumulates (and s holds nothing else that mentions it). */
bool only_accumulating_gemms(const StmtP &s, const std::string &tmp) {
    if (s->kind == StmtKind::Gemm) {
        const GemmInfo &g = *s->gemm;
        return g.accumulate && g.c_base->kind == Kind::Load && g.c_base->name == tmp && !mentions(g.a_base, tmp) &&
               !mentions(g.b_base, tmp);
    }
    if (mentions_own(s, tmp)) return false;
    for (const StmtP &c : s->body)
        if (!only_accumulating_gemms(c, tmp)) return false;
    for (const StmtP &c : s->else_body)
        if (!only_accumulating_gemms(c, tmp)) return false;
    return true;
}

/** The state array A of the one `A[i] sum= tmp[i]` under s (and no other mention of tmp), or nothing. */
std::optional<std::string> the_accumulation(const StmtP &s, const std::string &tmp, int &found) {
    if (s->kind == StmtKind::Accum && s->op == ReduceOp::Sum && s->value->kind == Kind::Load && s->value->name == tmp) {
        Expr t = s->target;
        if (t->kind != Kind::Load || t->args.size() != 1 || s->value->args.size() != 1 || t->args[0] != s->value->args[0] ||
            mentions(t->args[0], tmp))
            return std::nullopt;
        found++;
        return t->name;
    }
    if (mentions_own(s, tmp)) return std::nullopt;
    std::optional<std::string> acc;
    for (const auto *list : {&s->body, &s->else_body})
        for (const StmtP &c : *list) {
            if (!mentions_anywhere(c, tmp)) continue;
            auto a = the_accumulation(c, tmp, found);
            if (!a) return std::nullopt;
            acc = a;
        }
    return acc;
}

StmtP redirect_gemms(const StmtP &s, const std::string &tmp, const std::string &acc) {
    if (s->kind == StmtKind::Gemm) {
        auto g = std::make_shared<GemmInfo>(*s->gemm);
        g->c_base = make_load(acc, g->c_base->args, g->c_base->dtype, g->c_base->stype);
        auto c = std::make_shared<Stmt>(*s);
        c->gemm = g;
        return c;
    }
    std::vector<StmtP> body, else_body;
    for (const StmtP &c : s->body) body.push_back(redirect_gemms(c, tmp, acc));
    for (const StmtP &c : s->else_body) else_body.push_back(redirect_gemms(c, tmp, acc));
    return with_body(s, body, else_body);
}

/** s without the accumulation from tmp (and without loops left empty by its removal). */
std::optional<StmtP> drop_accumulation(const StmtP &s, const std::string &tmp) {
    if (s->kind == StmtKind::Accum && s->value->kind == Kind::Load && s->value->name == tmp) return std::nullopt;
    std::vector<StmtP> body, else_body;
    for (const StmtP &c : s->body)
        if (auto k = drop_accumulation(c, tmp)) body.push_back(*k);
    for (const StmtP &c : s->else_body)
        if (auto k = drop_accumulation(c, tmp)) else_body.push_back(*k);
    if (s->kind == StmtKind::For && body.empty()) return std::nullopt;
    return with_body(s, body, else_body);
}

std::vector<StmtP> rewrite_list(std::vector<StmtP> list, const std::set<std::string> &states) {
    for (size_t i = 0; i + 2 < list.size(); i++) {
        const Stmt &d = *list[i];
        if (d.kind != StmtKind::Decl || d.cls != LocalClass::Tile || d.dims.empty() || !d.value || !d.value->is_const(0)) continue;
        const std::string tmp = d.name;
        if (!only_accumulating_gemms(list[i + 1], tmp)) continue;
        int found = 0;
        auto acc = the_accumulation(list[i + 2], tmp, found);
        if (!acc || found != 1 || !states.count(*acc)) continue;
        bool elsewhere = false;
        for (size_t q = 0; q < list.size(); q++)
            if (q != i && q != i + 1 && q != i + 2 && mentions_anywhere(list[q], tmp)) elsewhere = true;
        if (elsewhere) continue;
        // Nothing else in the loop may read the state: it would now see the GEMM's sum already added.
        auto rest = drop_accumulation(list[i + 2], tmp);
        if (rest && mentions_anywhere(*rest, *acc)) continue;
        list[i + 1] = redirect_gemms(list[i + 1], tmp, *acc);
        if (rest) list[i + 2] = *rest;
        else list.erase(list.begin() + static_cast<std::ptrdiff_t>(i + 2));
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (StmtP &s : list) {
        if (s->body.empty() && s->else_body.empty()) continue;
        s = with_body(s, rewrite_list(s->body, states), rewrite_list(s->else_body, states));
    }
    return list;
}

void collect_states(const StmtP &s, std::set<std::string> &out) {
    if (s->kind == StmtKind::Decl && s->cls == LocalClass::State && !s->dims.empty()) out.insert(s->name);
    for (const StmtP &c : s->body) collect_states(c, out);
    for (const StmtP &c : s->else_body) collect_states(c, out);
}

}  // namespace

void accumulate_gemms_into_states(Module &m) {
    for (Kernel &k : m.kernels) {
        std::set<std::string> states;
        collect_states(k.body, states);
        k.body = with_body(k.body, rewrite_list(k.body->body, states), rewrite_list(k.body->else_body, states));
    }
}

}  // namespace rf::tile
