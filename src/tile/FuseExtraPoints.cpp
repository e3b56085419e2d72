/** \file FuseExtraPoints.cpp
 * The tile pass that sweeps a member's few extra points (c[s, a] over a = 0..2) in one vector loop
 * with one reduction per point, instead of one vector loop per point, where the points are adjacent
 * in memory (an input stored point-innermost, P[s, n, a]).
 */
#include <set>
#include <string>
#include <vector>

#include "tile/LoopFacts.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* The lowering sweeps a member with extra points (indices it keeps that are neither the row nor the
 * reduced axis) as
 *
 *     for x in [0, K) independent:  pre(x);  for j in [b, e) simd: { t_i(x) op= v_i(x, j) };  post(x)
 *
 * where pre declares the scalar tile locals t_i (and others the loop reads) and post folds them into
 * the state. When an input of v is stored with x innermost and j outside it (P[s, j, x]), each of
 * the K vector loops loads every line of the row's P to use a third of it (K = 3), and rebuilds its
 * lanes with permutes: moment of inertia's centroid, three loops of two permutes, a blend and three
 * arithmetic operations per 8 values (AVX2). Rule:
 *
 *     pre(0) .. pre(K-1);  for j in [b, e) simd: { t_i(x := 0) op= v_i(0, j); ..; t_i(K-1) op= .. };
 *     post(0) .. post(K-1)
 *
 * with the locals declared in the body renamed per copy. Precondition: K a constant in [2, 4] (a
 * reduction's accumulators per point stay in registers); the loop Independent (its iterations touch
 * disjoint elements, so every pre may run before every loop and every post after: iteration x's
 * statements keep their order); the body's one vector loop holds only reductions into scalar locals
 * the body declares, with no loop inside; pre and post hold no loop or GEMM; an input load of the
 * vector loop has x as its last index and j in an earlier one. Each reduction adds the same terms
 * as its own loop did; how the vector loop splits them over lanes and partial sums is the compiler's,
 * as in any vector loop, so a sum's last bits may differ. A term the points share (the pooling
 * weight exp(x − m) of c[s, a] = Σ_n exp(x − m)·P[s, n, a]) is computed once a step instead of once a
 * loop. CPU only: the GPU printers spread an independent loop over threads. */

constexpr int64_t kMaxPoints = 4;

bool is_local(const Expr &n) { return !n->name.empty() && n->name[0] == '$'; }

/** An input load of the loop's values whose last index is x and an earlier one reads the loop's j. */
bool reads_points_innermost(const StmtP &simd, const Expr &x) {
    bool found = false;
    for (const StmtP &c : simd->body)
        visit(c->value, [&](Expr n) {
            if (found || n->kind != Kind::Load || is_local(n) || n->args.size() < 2) return;
            if (n->args.back() != x) return;
            for (size_t i = 0; i + 1 < n->args.size(); i++) found = found || mentions(n->args[i], simd->var->name);
        });
    return found;
}

/** The names of the scalar locals `body` declares at its top level. */
std::set<std::string> declared_scalars(const std::vector<StmtP> &body) {
    std::set<std::string> out;
    for (const StmtP &s : body)
        if (s->kind == StmtKind::Decl && s->dims.empty()) out.insert(s->name);
    return out;
}

/** The position of the body's one vector loop when the loop `s` matches the rule; -1 otherwise. */
int fusable_at(const StmtP &s) {
    if (s->kind != StmtKind::For || s->loop != LoopKind::Independent) return -1;
    if (!s->begin->is_const(0) || !s->end->is_const() || s->end->value < 2 || s->end->value > kMaxPoints) return -1;
    int at = -1;
    for (size_t i = 0; i < s->body.size(); i++) {
        const StmtP &c = s->body[i];
        bool vector_loop = c->kind == StmtKind::For && c->loop == LoopKind::Simd;
        if (vector_loop) {
            if (at >= 0) return -1;
            at = static_cast<int>(i);
        } else if (any_stmt(c, [](const StmtP &n) { return n->kind == StmtKind::For || n->kind == StmtKind::Gemm; })) {
            return -1;
        }
    }
    if (at < 0) return -1;
    const StmtP &simd = s->body[static_cast<size_t>(at)];
    std::set<std::string> scalars = declared_scalars(std::vector<StmtP>(s->body.begin(), s->body.begin() + at));
    for (const StmtP &c : simd->body)
        if (c->kind != StmtKind::Accum || c->target->kind != Kind::Var || !scalars.count(c->target->name)) return -1;
    return reads_points_innermost(simd, s->var) ? at : -1;
}

/** Statement s of iteration x = point: the loop variable replaced by the constant, the locals the
 *  body declares renamed for this copy. */
StmtP copy_for_point(const StmtP &s, const Expr &x, int64_t point, const std::set<std::string> &locals) {
    StmtP fixed = mutate(s, [&](Expr e) { return substitute(e, x, make_int(point)); },
                         [](const std::string &n) { return n; });
    return rename_locals(fixed, [&](const std::string &n) {
        return locals.count(n) ? n + "p" + std::to_string(point) : n;
    });
}

/** The locals `body` declares (at any depth). */
std::set<std::string> declared_in(const std::vector<StmtP> &body) {
    std::set<std::string> out;
    for_each_stmt(block(body), [&](const StmtP &s) {
        if (s->kind == StmtKind::Decl) out.insert(s->name);
    });
    return out;
}

/** The loop fused (the rule above), or nothing when a renamed local would take a name the kernel
 *  already uses. */
StmtP fuse(const StmtP &loop, size_t at, const std::set<std::string> &kernel_names) {
    const int64_t points = static_cast<int64_t>(loop->end->value);
    const std::set<std::string> locals = declared_in(loop->body);
    for (const std::string &n : locals)
        for (int64_t p = 0; p < points; p++)
            if (kernel_names.count(n + "p" + std::to_string(p))) return nullptr;
    const StmtP &simd = loop->body[at];
    std::vector<StmtP> pre, reductions, post;
    for (int64_t p = 0; p < points; p++) {
        for (size_t i = 0; i < at; i++) pre.push_back(copy_for_point(loop->body[i], loop->var, p, locals));
        for (const StmtP &c : simd->body) reductions.push_back(copy_for_point(c, loop->var, p, locals));
        for (size_t i = at + 1; i < loop->body.size(); i++) post.push_back(copy_for_point(loop->body[i], loop->var, p, locals));
    }
    std::vector<StmtP> out = std::move(pre);
    out.push_back(with_body(simd, std::move(reductions)));
    out.insert(out.end(), post.begin(), post.end());
    return block(std::move(out));
}

}  // namespace

Module fuse_extra_points(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        std::set<std::string> names;
        loop_facts::written_in(k.body, names);
        k.body = rewrite_bottom_up(k.body, [&](const StmtP &s) -> StmtP {
            int at = fusable_at(s);
            StmtP fused = at < 0 ? nullptr : fuse(s, static_cast<size_t>(at), names);
            return fused ? fused : s;
        });
    }
    return m;
}

}  // namespace rf::tile
