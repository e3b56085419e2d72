/** \file ScaleRowCopies.cpp
 * The CPU tile pass that folds an epilogue chunk's multiplication by one per-row value into the row
 * copy that follows it: softmax's y = e · (1/s) converted to bf16 while it is stored, instead of a
 * pass writing the products to the chunk's buffer and a copy reading them back.
 */
#include <map>
#include <set>
#include <string>

#include "tile/LoopFacts.h"
#include "tile/LowerPass.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* Rule: for x in [lo, hi) simd: $ep[x - lo] = $t[b + x] · r
 *       copy Out[i, lo][0, hi - lo) = $ep[0]...
 *   ⇒  copy Out[i, lo][0, hi - lo) = $t[b + lo]... · r
 * Preconditions: the loop's body is that one assignment; nothing but row copies reads $ep anywhere in
 * the kernel (the fused path no longer fills it); $t is a float tile array other than $ep and
 * b does not read x; r is a scalar tile local (a float: the product is the float product the
 * assignment computes, and the copy rounds it to the output's type as it rounded $ep's value). The
 * copy then reads $t where it read $ep, which the loop filled with exactly these products.
 * The copy moves into the statement before it, at the end of each of its paths: into both branches
 * of an if/else (the copy ran after either), into the then-branch of an if without else only when
 * that if's condition is lo < hi (when it fails, hi - lo <= 0 and the copy stores nothing); a path
 * that does not end in the loop gets the copy unchanged. Nothing is rewritten unless one path fuses.
 * Where: the finite-invariants versions of softmax's epilogue (if 1/s is normal: e · (1/s), else
 * e / s): bf16 [4096, 4096] on AMD Zen 4, one store and one load of each value fewer. */

class ScaleRowCopies : public StmtMutator {
public:
    ScaleRowCopies(const std::map<std::string, LocalClass> &arrays, const std::set<std::string> &tile_scalars,
                   const std::set<std::string> &read_elsewhere)
        : arrays_(arrays), tile_scalars_(tile_scalars), read_elsewhere_(read_elsewhere) {}

    std::vector<StmtP> mutate_list(const std::vector<StmtP> &list) override {
        std::vector<StmtP> in = StmtMutator::mutate_list(list), out;
        for (size_t i = 0; i < in.size(); ++i) {
            if (i + 1 < in.size() && copy_of_local(in[i + 1])) {
                bool fused = false;
                StmtP placed = place(in[i], in[i + 1], fused);
                if (fused) {
                    out.push_back(placed);
                    ++i;
                    continue;
                }
            }
            out.push_back(in[i]);
        }
        return out;
    }

private:
    /** An unscaled row copy from the start of a float tile array (an epilogue chunk's buffer) that
     *  only row copies read. */
    bool copy_of_local(const StmtP &s) const {
        return s->kind == StmtKind::CopyRow && !s->scale && tile_array(s->value->name) && !read_elsewhere_.count(s->value->name) &&
               s->value->args.size() == 1 && s->value->args[0]->is_const(0);
    }

    bool tile_array(const std::string &name) const {
        auto a = arrays_.find(name);
        return a != arrays_.end() && a->second == LocalClass::Tile;
    }

    /** s followed by copy, as one statement: the copy at the end of each of s's paths (fused where a
     *  path ends in the loop that fills its buffer); `fused` is set when one did. */
    StmtP place(const StmtP &s, const StmtP &copy, bool &fused) const {
        if (StmtP f = fuse(s, copy)) {
            fused = true;
            return f;
        }
        if (s->kind != StmtKind::If || s->body.empty()) return block({s, copy});
        if (s->else_body.empty() && !guards_count(s->cond, copy->end)) return block({s, copy});
        std::vector<StmtP> then_body = place_last(s->body, copy, fused);
        std::vector<StmtP> else_body = s->else_body.empty() ? s->else_body : place_last(s->else_body, copy, fused);
        return with_body(s, std::move(then_body), std::move(else_body));
    }

    std::vector<StmtP> place_last(const std::vector<StmtP> &list, const StmtP &copy, bool &fused) const {
        std::vector<StmtP> out(list.begin(), list.end() - 1);
        StmtP last = place(list.back(), copy, fused);
        if (last->kind == StmtKind::Block) out.insert(out.end(), last->body.begin(), last->body.end());
        else out.push_back(last);
        return out;
    }

    /** cond is lo < hi where count = hi - lo: when it fails, the copy stores nothing. */
    static bool guards_count(Expr cond, Expr count) {
        return cond->kind == Kind::Cmp && cond->cmp == CmpOp::LT && make_sub(cond->args[1], cond->args[0]) == count;
    }

    /** The scaled copy replacing `loop` (the Rule above), or null. */
    StmtP fuse(const StmtP &loop, const StmtP &copy) const {
        if (loop->kind != StmtKind::For || loop->loop != LoopKind::Simd || loop->body.size() != 1) return nullptr;
        const Stmt &a = *loop->body[0];
        Expr x = loop->var, lo = loop->begin;
        if (a.kind != StmtKind::Assign || a.target->kind != Kind::Load || a.target->name != copy->value->name) return nullptr;
        if (a.target->args.size() != 1 || a.target->args[0] != make_sub(x, lo) || copy->end != make_sub(loop->end, lo)) return nullptr;
        Expr v = a.value;
        if (v->kind != Kind::Mul || v->args.size() != 2) return nullptr;
        for (int side = 0; side < 2; side++) {
            Expr term = v->args[static_cast<size_t>(side)], r = v->args[static_cast<size_t>(1 - side)];
            if (r->kind != Kind::Var || !tile_scalars_.count(r->name)) continue;
            if (term->kind != Kind::Load || term->args.size() != 1 || term->name == a.target->name || !tile_array(term->name)) continue;
            Expr base = loop_facts::offset_beside(term->args[0], x);
            if (!base) continue;
            Expr from = make_load(term->name, {make_add(base, lo)}, term->dtype, term->stype);
            return copy_row(copy->target, from, copy->end, r);
        }
        return nullptr;
    }

    const std::map<std::string, LocalClass> &arrays_;
    const std::set<std::string> &tile_scalars_;
    const std::set<std::string> &read_elsewhere_;
};

/** Names of locals that a statement other than a row copy of them reads (an assignment's target is
 *  written, its indices read). */
std::set<std::string> read_outside_row_copies(const StmtP &body) {
    std::set<std::string> out;
    auto loads = [&](Expr e) {
        visit(e, [&](Expr n) {
            if (n->kind == Kind::Load) out.insert(n->name);
        });
    };
    for_each_stmt(body, [&](const StmtP &s) {
        for_each_own_expr(*s, [&](const Expr &e) {
            if (s->kind == StmtKind::CopyRow && e == s->value) {
                for (Expr a : e->args) loads(a);
            } else if ((s->kind == StmtKind::Assign || s->kind == StmtKind::Accum) && e == s->target && e->kind == Kind::Load) {
                for (Expr a : e->args) loads(a);
            } else {
                loads(e);
            }
        });
    });
    return out;
}

}  // namespace

Module scale_row_copies(const Module &in) {
    Module m = in;
    if (m.compute != DType::f32) return m;  // the copies take floats
    for (Kernel &k : m.kernels) {
        // Locals by name; a name declared twice with different classes or shapes is left alone.
        const loop_facts::DeclaredLocals locals = loop_facts::declared_locals(k.body);
        k.body = ScaleRowCopies(locals.arrays, locals.tile_scalars, read_outside_row_copies(k.body)).mutate(k.body);
    }
    return m;
}

}  // namespace rf::tile
