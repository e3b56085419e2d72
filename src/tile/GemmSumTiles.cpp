/** \file GemmSumTiles.cpp
 * The CPU tile pass that keeps a sum fed by tile GEMMs in a float tile the GEMMs accumulate into,
 * instead of a float64 state: a plain sum (RMSNorm→GEMM's Σ_k X·g·W, a quantized GEMM's Σ_k q·Wq)
 * without the "seen" flag and unused reference point beside it, a rescaled one (attention's
 * Σ_j exp(S − m)·V) with them.
 */
#include <map>
#include <optional>
#include <set>

#include "tile/GemmSites.h"
#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

using namespace loop_facts;

/* A shifted sum (LowerPass.cpp, Form::SumShift) keeps acc, seen and a reference point tag and is
 * read as  value = select(seen ≠ 0, acc + n·tag, 0). A member whose update is a tile GEMM
 * (LowerGemm.cpp, member_gemm) never sets a reference point: its GEMM sums the raw terms, so
 *     tile $g[..];  gemm $g = F x W;  for rr, x: { acc[i] sum= $g[i]; seen[i] = 1 }
 * and tag keeps its initial 0. Two rewrites, each with its precondition checked on the kernel:
 *  (1) flags: when tag is a state declared 0 and never written, seen a state declared 0 and only
 *      ever assigned 1, and acc a state declared 0 whose every write is `acc[e] sum= v` beside a
 *      `seen[e] = 1` in the same statement list, then acc[i] ≠ 0 implies seen[i] = 1 (acc moved off
 *      its initial 0 only by a sum that set the flag), so
 *          select(seen[i] ≠ 0, acc[i] + n·tag[j], 0) = select(seen[i] ≠ 0, acc[i], 0) = acc[i],
 *      and seen and tag, no longer read, go with their writes (three N×rows float64 arrays
 *      initialized per row block: 12 MiB for N = 4096 and 128 rows).
 *  (2) storage: when every write of acc is then `acc[e] sum= $g[e]` right after the GEMMs into $g
 *      (the GemmIntoState pattern: $g declared right before the statement of GEMMs, mentioned
 *      nowhere else but in that one accumulation), and acc is read only by statements after the
 *      one holding its writes, the GEMMs accumulate straight into acc, now a tile array in the
 *      compute type declared 0: acc ← acc + Σ_k F·W per tile of the axis. The GEMM already sums
 *      each tile in float32; only the sum over tiles (K / tile of them, one for K ≤ 4096) moves
 *      from float64 to float32. The per-tile copy loop, $g, and the float64 state go.
 *  (3) rescaled storage: a multiplicative member fed by tile GEMMs (attention's Σ_j exp(S − m)·V)
 *      keeps acc with its seen flag and reference point (the finalize reads them), and each tile
 *      of the axis first rescales it by the factor its members share, acc[e] ← acc[e]·r (under
 *      `if acc[e] ≠ 0`: 0·inf would be NaN), then adds the GEMM's tile:
 *          acc ← acc·r + Σ_k F·W.
 *      When every write of acc is such a rescale (r not reading acc) or a GEMM site's sum, and the
 *      statement after each site reads acc nowhere but in its sum, acc becomes a tile in the compute
 *      type and the GEMMs accumulate into it: the same operations in the same order, the state's
 *      running value rounded to float32 after each rescale and tile instead of float64 (as
 *      FlashAttention keeps its output accumulator). Per tile of 128 rows × D = 128, the zeroing of
 *      the GEMM's tile, its float64 sum into acc, and half the rescale's bytes go.
 * The CPU keeps states in float64 (LocalClass::State), which is why this pass is CPU only: the GPU
 * lowering has float states and GemmIntoState. */

struct Writes {
    std::vector<StmtP> stmts;  ///< every statement that writes the local
};

/** The local each statement writes (targets, GEMM outputs, shift states, top-k lists). */
std::map<std::string, Writes> local_writes(const StmtP &body) {
    std::map<std::string, Writes> w;
    for_each_stmt(body, [&](const StmtP &s) {
        if (s->kind == StmtKind::Decl || s->kind == StmtKind::For) return;
        std::set<std::string> names;
        written_in(with_body(s, {}, {}), names);
        for (const std::string &n : names) w[n].stmts.push_back(s);
    });
    return w;
}

/** Declarations of multi-element locals, by name (only names declared once). */
std::map<std::string, StmtP> array_decls(const StmtP &body) {
    std::map<std::string, StmtP> d;
    std::set<std::string> twice;
    for_each_stmt(body, [&](const StmtP &s) {
        if (s->kind != StmtKind::Decl || s->dims.empty()) return;
        if (d.count(s->name)) twice.insert(s->name);
        d[s->name] = s;
    });
    for (const std::string &n : twice) d.erase(n);
    return d;
}

bool declared_zero_state(const std::map<std::string, StmtP> &decls, const std::string &n) {
    auto it = decls.find(n);
    return it != decls.end() && it->second->cls == LocalClass::State && it->second->value && it->second->value->is_const(0);
}

/** Every write of `acc` is `acc[e] sum= v` with a sibling `seen[e] = 1` in the same list. */
bool sums_flag_seen(const StmtP &body, const std::string &acc, const std::string &seen, size_t writes) {
    size_t paired = 0;
    for_each_stmt(body, [&](const StmtP &s) {
        for (const std::vector<StmtP> *list : {&s->body, &s->else_body})
            for (const StmtP &c : *list) {
                if (c->kind != StmtKind::Accum || c->op != ReduceOp::Sum || c->target->kind != Kind::Load || c->target->name != acc)
                    continue;
                for (const StmtP &f : *list)
                    if (f->kind == StmtKind::Assign && f->target->kind == Kind::Load && f->target->name == seen &&
                        f->target->args == c->target->args && f->value->is_const(1)) {
                        paired++;
                        break;
                    }
            }
    });
    return paired == writes;
}

/** The parts of select(seen[i] ≠ 0, acc[i] + n·tag[j], 0), when e has that shape. */
struct FlaggedSum {
    Expr acc, seen;
    std::string tag;
};

std::optional<FlaggedSum> flagged_sum(Expr e) {
    if (e->kind != Kind::Select || !e->args[2]->is_const(0)) return std::nullopt;
    Expr c = e->args[0], v = e->args[1];
    if (c->kind != Kind::Cmp || c->cmp != CmpOp::NE || c->args[0]->kind != Kind::Load || !c->args[1]->is_const(0)) return std::nullopt;
    if (v->kind != Kind::Add || v->args.size() != 2 || v->args[0]->kind != Kind::Load) return std::nullopt;
    Expr t = v->args[1];
    if (t->kind != Kind::Mul || t->args.size() != 2 || t->args[1]->kind != Kind::Load) return std::nullopt;
    if (c->args[0]->args != v->args[0]->args) return std::nullopt;
    return FlaggedSum{v->args[0], c->args[0], t->args[1]->name};
}

/** Rewrite (1): flagged sums whose flags carry nothing read as their acc; seen and tag go. */
StmtP drop_unused_flags(const StmtP &body) {
    std::map<std::string, StmtP> decls = array_decls(body);
    std::map<std::string, Writes> writes = local_writes(body);
    auto qualifies = [&](const FlaggedSum &f) {
        const std::string &acc = f.acc->name, &seen = f.seen->name;
        if (!declared_zero_state(decls, acc) || !declared_zero_state(decls, seen) || !declared_zero_state(decls, f.tag)) return false;
        if (writes.count(f.tag)) return false;
        for (const StmtP &s : writes[seen].stmts)
            if (s->kind != StmtKind::Assign || !s->value->is_const(1) || s->target->name != seen) return false;
        return sums_flag_seen(body, acc, seen, writes[acc].stmts.size());
    };
    std::set<std::string> dropped;
    auto read_as_acc = [&](Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            auto f = flagged_sum(n);
            if (!f || !qualifies(*f)) return nullptr;
            dropped.insert(f->seen->name);
            dropped.insert(f->tag);
            return f->acc;
        });
    };
    StmtP out = rewrite_bottom_up(body, [&](const StmtP &s) { return map_own_exprs(s, read_as_acc); });
    if (dropped.empty()) return body;
    // The flags are gone from every value; keep them where anything else still reads them.
    std::set<std::string> still_read;
    for_each_stmt(out, [&](const StmtP &s) {
        for (const std::string &n : dropped) {
            bool writes_n = (s->kind == StmtKind::Assign && s->target->kind == Kind::Load && s->target->name == n) ||
                            (s->kind == StmtKind::Decl && s->name == n);
            if (!writes_n && mentions_own(s, n)) still_read.insert(n);
        }
    });
    return drop_stmts(out, [&](const StmtP &c) {
        std::string n = c->kind == StmtKind::Decl ? c->name
                      : c->kind == StmtKind::Assign && c->target->kind == Kind::Load ? c->target->name : std::string();
        return dropped.count(n) && !still_read.count(n);
    });
}

/** Every GEMM site in the body, by the state it feeds. */
std::map<std::string, int> gemm_sites(const StmtP &body) {
    std::map<std::string, int> n;
    for_each_stmt(body, [&](const StmtP &s) {
        for (const std::vector<StmtP> *l : {&s->body, &s->else_body})
            for (size_t i = 0; i < l->size(); i++)
                if (auto g = gemm_site(*l, i)) n[g->acc]++;
    });
    return n;
}

/** True when, in the list declaring acc, one statement holds every write of acc and mentions it
 *  nowhere else, and every other statement mentioning acc comes after it. */
bool read_after_its_writes(const StmtP &body, const std::string &acc, size_t writes) {
    bool ok = false;
    for_each_stmt(body, [&](const StmtP &s) {
        for (const std::vector<StmtP> *l : {&s->body, &s->else_body}) {
            size_t at = l->size();
            for (size_t q = 0; q < l->size(); q++)
                if ((*l)[q]->kind == StmtKind::Decl && (*l)[q]->name == acc) at = q;
            if (at == l->size()) continue;
            size_t first = l->size();
            for (size_t q = at + 1; q < l->size() && first == l->size(); q++)
                if (mentions_anywhere((*l)[q], acc)) first = q;
            if (first == l->size()) continue;
            size_t mentioned = 0;
            for_each_stmt((*l)[first], [&](const StmtP &c) { mentioned += mentions_own(c, acc) ? 1 : 0; });
            ok = mentioned == writes;
        }
    });
    return ok;
}

/** Rewrite (2) at the sites of the states in `into`: GEMMs accumulate into the state, now a tile. */
class GemmIntoTile : public StmtMutator {
public:
    explicit GemmIntoTile(const std::set<std::string> &into) : into_(into) {}

    StmtP mutate_decl(const StmtP &s) override {
        if (!into_.count(s->name)) return mutate_default(s);
        return decl(s->name, LocalClass::Tile, s->dims, make_const(0));
    }

    std::vector<StmtP> mutate_list(const std::vector<StmtP> &in) override {
        std::vector<StmtP> list = in;
        for (size_t i = 0; i < list.size(); i++)
            if (auto site = gemm_site(list, i); site && into_.count(site->acc)) accumulate_site_into_state(list, i, *site);
        return StmtMutator::mutate_list(list);
    }

private:
    const std::set<std::string> &into_;
};

/** True when s is `acc[e] = acc[e] · r` (either order) with r not reading acc: a rescale. */
bool rescales(const StmtP &s, const std::string &acc) {
    if (s->kind != StmtKind::Assign || s->target->kind != Kind::Load || s->target->name != acc) return false;
    Expr v = s->value;
    if (v->kind != Kind::Mul || v->args.size() != 2) return false;
    for (int self = 0; self < 2; self++)
        if (v->args[self] == s->target && !mentions(v->args[1 - self], acc)) return true;
    return false;
}

/** True when the statement after some GEMM site of acc reads acc besides its sum (the GEMMs would
 *  add into acc before that read). */
bool read_beside_its_sum(const StmtP &body, const std::string &acc) {
    bool read = false;
    for_each_stmt(body, [&](const StmtP &s) {
        for (const std::vector<StmtP> *l : {&s->body, &s->else_body})
            for (size_t i = 0; i < l->size(); i++)
                if (auto g = gemm_site(*l, i); g && g->acc == acc && reads_state_beside_sum(*l, i, *g)) read = true;
    });
    return read;
}

/** Rewrite (2), and (3) for rescaled sums: the states whose every write is a GEMM site's sum, read
 *  only after them; or whose every write is a GEMM site's sum or a rescale acc[e] = acc[e] · r. */
StmtP gemm_sums_into_tiles(const StmtP &body) {
    std::map<std::string, StmtP> decls = array_decls(body);
    std::map<std::string, Writes> writes = local_writes(body);
    std::set<std::string> into;
    for (const auto &[acc, n] : gemm_sites(body)) {
        if (!declared_zero_state(decls, acc)) continue;
        const std::vector<StmtP> &ws = writes[acc].stmts;
        size_t w = ws.size(), scaled = 0;
        if (static_cast<size_t>(n) == w && read_after_its_writes(body, acc, w)) into.insert(acc);
        for (const StmtP &s : ws) scaled += rescales(s, acc) ? 1 : 0;
        if (scaled > 0 && static_cast<size_t>(n) + scaled == w && !read_beside_its_sum(body, acc)) into.insert(acc);
    }
    if (into.empty()) return body;
    return GemmIntoTile(into).mutate(body);
}

}  // namespace

Module keep_gemm_sums_in_tiles(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) k.body = gemm_sums_into_tiles(drop_unused_flags(k.body));
    return m;
}

}  // namespace rf::tile
