/** \file FoldConstantFlags.cpp
 * The tile pass that replaces a branch on a flag the lowering proved constant (a member's `$lit`
 * "recompute literally" flag that no statement ever sets) by the branch it always takes.
 */
#include <map>
#include <optional>
#include <set>
#include <string>

#include "ir/Eval.h"
#include "tile/Passes.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {

/* The merge lowering (LowerMerge.cpp) declares, per member, `index $litK = select(deps, 1, 0)` and
 * later branches `if $litK != 0: <recompute the row literally> else: <finalize the state>`. When
 * nothing in the chain can force a literal recompute, deps is the constant `false` and no statement
 * assigns $litK: the condition is the same constant on every row, and only the else branch can run.
 * Folding it leaves one store per element of the member's temporary, which later passes
 * (forward-block-temps) reason about.
 * Rule: for `if c: T else: E`, when c reads no memory and every variable of c is an index local
 * declared once with a constant value and never assigned, c is evaluated once (the language's
 * semantics, ir/Eval.h) and the statement becomes T (c ≠ 0) or E (c = 0), as a block (its
 * declarations keep their scope). */

/** Index locals declared once with a value that reads nothing but constants, and never assigned. */
std::map<std::string, double> constant_indices(const StmtP &body) {
    std::map<std::string, Expr> declared;
    std::set<std::string> twice, assigned;
    for_each_stmt(body, [&](const StmtP &s) {
        if (s->kind == StmtKind::Decl && s->cls == LocalClass::Index && s->dims.empty()) {
            if (declared.count(s->name)) twice.insert(s->name);
            declared[s->name] = s->value;
        }
        if (s->kind == StmtKind::Assign && s->target->kind == Kind::Var) assigned.insert(s->target->name);
        if (s->kind == StmtKind::For) assigned.insert(s->var->name);
    });
    std::map<std::string, double> out;
    for (const auto &[name, v] : declared) {
        if (!v || twice.count(name) || assigned.count(name)) continue;
        bool literal = !any_of(v, [](Expr n) { return n->kind == Kind::Var || n->kind == Kind::Load || n->kind == Kind::Reduce; });
        if (literal) out[name] = Evaluator(EvalEnv{}).eval(v);
    }
    return out;
}

/** The value of c when it reads only the constants `known`; nothing otherwise. */
std::optional<double> constant_condition(Expr c, const std::map<std::string, double> &known) {
    bool closed = !any_of(c, [&](Expr n) {
        return n->kind == Kind::Load || n->kind == Kind::Reduce || (n->kind == Kind::Var && !known.count(n->name));
    });
    if (!closed) return std::nullopt;
    EvalEnv env;
    env.var_value = [&](Expr v) { return known.at(v->name); };
    return Evaluator(env).eval(c);
}

}  // namespace

Module fold_constant_flags(const Module &in) {
    Module m = in;
    for (Kernel &k : m.kernels) {
        std::map<std::string, double> known = constant_indices(k.body);
        if (known.empty()) continue;
        k.body = rewrite_bottom_up(k.body, [&](const StmtP &s) -> StmtP {
            if (s->kind != StmtKind::If) return s;
            std::optional<double> c = constant_condition(s->cond, known);
            if (!c) return s;
            return block(*c != 0 ? s->body : s->else_body);
        });
    }
    return m;
}

}  // namespace rf::tile
