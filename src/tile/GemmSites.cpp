/** \file GemmSites.cpp
 * The GEMM sites both GEMM-into-state passes rewrite (GemmSites.h): finding them and redirecting
 * their GEMMs into the state.
 */
#include "tile/GemmSites.h"

#include "tile/LoopFacts.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

using namespace loop_facts;

namespace {

/** The array A of `A[e] sum= tmp[e]` (same e, tmp not in e) when s is one. */
std::optional<std::string> sum_of_tile(const StmtP &s, const std::string &tmp) {
    if (s->kind != StmtKind::Accum || s->op != ReduceOp::Sum || s->target->kind != Kind::Load || s->value->kind != Kind::Load ||
        s->value->name != tmp || s->target->args != s->value->args || mentions(s->target, tmp))
        return std::nullopt;
    return s->target->name;
}

/** True when every statement under s that mentions tmp is a GEMM writing tmp (and reading it in no
 *  operand) and together they define tmp as the sum of their products: accumulating GEMMs need tmp
 *  declared 0; an overwriting GEMM must be the only one (a second GEMM overwriting the same elements
 *  would drop the first's product from tmp, but not from the state once both accumulate into it). */
bool only_gemms_into(const StmtP &s, const std::string &tmp, bool declared_zero) {
    int gemms = 0;
    bool overwrites = false;
    bool other = any_stmt(s, [&](const StmtP &c) {
        if (c->kind != StmtKind::Gemm) return mentions_own(c, tmp);
        gemms++;
        const GemmInfo &g = *c->gemm;
        overwrites |= !g.accumulate;
        bool defines = !g.accumulate || declared_zero;
        return !(defines && g.c_base->kind == Kind::Load && g.c_base->name == tmp && !mentions(g.a_base, tmp) &&
                 !mentions(g.b_base, tmp));
    });
    return gemms > 0 && !other && (!overwrites || gemms == 1);
}

/** Every GEMM under s accumulates into acc instead of its tile (same index expressions). */
StmtP redirect_gemms(const StmtP &s, const std::string &acc) {
    return rewrite_bottom_up(s, [&](const StmtP &c) -> StmtP {
        if (c->kind != StmtKind::Gemm) return c;
        auto g = std::make_shared<GemmInfo>(*c->gemm);
        g->c_base = make_load(acc, g->c_base->args, g->c_base->dtype, g->c_base->stype);
        g->accumulate = true;
        auto r = std::make_shared<Stmt>(*c);
        r->gemm = g;
        return r;
    });
}

}  // namespace

std::optional<GemmSite> gemm_site(const std::vector<StmtP> &list, size_t i) {
    if (i + 2 >= list.size()) return std::nullopt;
    const Stmt &d = *list[i];
    if (d.kind != StmtKind::Decl || d.cls != LocalClass::Tile || d.dims.empty()) return std::nullopt;
    if (d.value && !d.value->is_const(0)) return std::nullopt;
    const std::string &tmp = d.name;
    if (!only_gemms_into(list[i + 1], tmp, d.value != nullptr)) return std::nullopt;
    std::optional<std::string> acc;
    int sums = 0;
    bool other = false;
    for_each_stmt(list[i + 2], [&](const StmtP &c) {
        if (auto a = sum_of_tile(c, tmp)) {
            acc = a;
            sums++;
        } else if (mentions_own(c, tmp)) {
            other = true;
        }
    });
    if (!acc || sums != 1 || other) return std::nullopt;
    for (size_t q = 0; q < list.size(); q++)
        if (q != i && q != i + 1 && q != i + 2 && mentions_anywhere(list[q], tmp)) return std::nullopt;
    return GemmSite{tmp, *acc};
}

std::optional<StmtP> without_gemm_sum(const StmtP &s, const std::string &tmp) {
    auto gone = [&](const StmtP &c) { return sum_of_tile(c, tmp) || (c->kind == StmtKind::For && c->body.empty()); };
    StmtP rest = drop_stmts(s, gone);
    if (gone(rest)) return std::nullopt;
    return rest;
}

bool reads_state_beside_sum(const std::vector<StmtP> &list, size_t i, const GemmSite &site) {
    auto rest = without_gemm_sum(list[i + 2], site.tmp);
    return rest && mentions_anywhere(*rest, site.acc);
}

void accumulate_site_into_state(std::vector<StmtP> &list, size_t i, const GemmSite &site) {
    list[i + 1] = redirect_gemms(list[i + 1], site.acc);
    if (auto rest = without_gemm_sum(list[i + 2], site.tmp)) list[i + 2] = *rest;
    else list.erase(list.begin() + static_cast<std::ptrdiff_t>(i + 2));
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
}

}  // namespace rf::tile
