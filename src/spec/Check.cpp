/** \file Check.cpp
 * Name resolution, typing and extent inference: turns each statement into IR with every rule of
 * docs/language.md enforced, so that later stages can trust the Program without re-checking it.
 */
#include "spec/Check.h"

#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "spec/Limits.h"
#include "spec/Lower.h"

namespace rf::spec {

namespace {

enum class SymKind { Size, Input, Scalar, Def, TopkIndices };

const char *kind_word(SymKind k) {
    switch (k) {
    case SymKind::Size: return "size";
    case SymKind::Input: return "input";
    case SymKind::Scalar: return "scalar";
    case SymKind::Def: return "tensor";
    case SymKind::TopkIndices: return "top-k index tensor";
    }
    return "?";
}

/** A global name: a size, an input, a scalar definition or a tensor definition. */
struct Symbol {
    Symbol(SymKind k, SourceLoc l) : kind(k), loc(l) {}
    SymKind kind;
    SourceLoc loc;
    std::vector<Expr> dims;  // tensors: extents
    DType dtype = DType::f64;
    SType stype = SType::Real;
    // Scalars are lowered once per context; a context where they are invalid keeps the error.
    Expr value = nullptr, index = nullptr;
    std::optional<UserError> value_error;
};

std::string where(SourceLoc l) { return "line " + std::to_string(l.line) + ", column " + std::to_string(l.col); }

bool is_reduction_name(const std::string &n) {
    return n == "sum" || n == "prod" || n == "max" || n == "min" || n == "argmax" || n == "argmin" || n == "topk";
}

std::optional<Func> func_from_name(const std::string &n) {
    static const std::pair<const char *, Func> table[] = {
        {"exp", Func::exp},     {"exp2", Func::exp2},       {"log", Func::log},     {"log2", Func::log2},
        {"sqrt", Func::sqrt},   {"rsqrt", Func::rsqrt},     {"abs", Func::abs},     {"tanh", Func::tanh},
        {"sigmoid", Func::sigmoid}, {"round", Func::round}, {"floor", Func::floor}, {"ceil", Func::ceil}};
    for (auto &[name, f] : table)
        if (n == name) return f;
    return std::nullopt;
}

/** Names of functions, reductions and dtypes: they cannot name tensors, sizes or index variables. */
bool is_reserved(const std::string &n) {
    return is_reduction_name(n) || func_from_name(n) || dtype_from_name(n) || n == "pow" || n == "select";
}

/** An index variable: a left-hand-side variable or a reduction axis, with what we learn of its extent. */
struct Binder {
    std::string name;
    SourceLoc loc;
    Expr explicit_extent = nullptr;  // `e:Dv`
    Expr extent = nullptr;           // from the first direct use
    std::string use_tensor;
    size_t use_dim = 0;
    bool used = false;
    bool is_k_axis = false;  // the new axis of a top-k definition: not usable in the body
    Expr final_extent() const { return explicit_extent ? explicit_extent : extent; }
};

class Checker;

/** Lowers the expressions of one definition; owns the index-variable scope. */
class ExprChecker {
public:
    ExprChecker(Checker &c, std::string def_name, std::string def_name2 = "")
        : c_(c), def_name_(std::move(def_name)), def_name2_(std::move(def_name2)) {}

    /** A value-context expression (the right-hand side of a definition). */
    Expr value(const AstNode &a) { return lower(a, false); }
    /** An integer expression outside any load: a dimension, an extent or K (`what`). When
     *  vars_ok is false, index variables are rejected (extents depend on sizes only). */
    Expr integer(const AstNode &a, const std::string &what, bool vars_ok) {
        // The context is this expression's only: the right-hand side lowered next may use index
        // variables outside loads (`Y[i:N, j:N] = select(j <= i, ...)`).
        std::string saved_what = what_;
        bool saved_vars_ok = vars_ok_;
        what_ = what;
        vars_ok_ = vars_ok;
        Expr e = lower(a, true);
        what_ = saved_what;
        vars_ok_ = saved_vars_ok;
        RF_INTERNAL_ASSERT(e->stype == SType::Int) << "integer context produced a non-Int expression";
        return e;
    }

    /** Checks that `name` may become an index variable here. */
    void check_fresh_var(const std::string &name, SourceLoc loc, const char *role);
    Binder *find_binder(const std::string &name) {
        auto it = scope_.find(name);
        return it == scope_.end() ? nullptr : it->second;
    }
    // No shadowing is allowed, so a name maps to at most one binder at a time.
    void push(Binder *b) { scope_[b->name] = b; }
    void pop(Binder *b) { scope_.erase(b->name); }

private:
    Expr lower(const AstNode &a, bool index);
    Expr lower_name(const AstNode &a, bool index);
    Expr lower_load(const AstNode &a, bool index);
    Expr lower_call(const AstNode &a, bool index);
    Expr lower_reduce(const AstNode &a, ReduceOp op);
    Expr lower_binary(const AstNode &a, bool index);
    Symbol &lookup(const std::string &name, SourceLoc loc);
    [[noreturn]] void not_integer(SourceLoc loc, const std::string &why) {
        throw UserError(loc, what_ + " must be integer arithmetic of " + (vars_ok_ ? "index variables and sizes" : "sizes") +
                                 " (" + why + ")");
    }
    Expr numeric(Expr e, const AstNode &at) {
        if (e->stype == SType::Bool)
            throw UserError(at.loc, "a condition cannot be used as a number; only select(cond, a, b) and "
                                    "and/or/not take conditions");
        return e;
    }
    Expr condition(Expr e, const AstNode &at, const std::string &user) {
        if (e->stype != SType::Bool)
            throw UserError(at.loc, user + " needs a condition (a comparison such as a < b), not a number");
        return e;
    }

    Checker &c_;
    std::string def_name_, def_name2_;
    std::unordered_map<std::string, Binder *> scope_;
    std::string what_ = "an index expression";
    bool vars_ok_ = true;
};

class Checker {
public:
    Checker(const std::string &file) : lowerer_(limits_) { prog_.file = file; }

    Program run(const std::vector<Stmt> &stmts, SourceLoc end) {
        for (const Stmt &s : stmts) {
            if (s.kind == Stmt::Size)
                for (const SizeItem &i : s.sizes) defined_at_.emplace(i.name, i.loc);
            if (s.kind == Stmt::Input) defined_at_.emplace(s.input.name, s.input.loc);
            if (s.kind == Stmt::Def)
                for (const Lhs &l : s.lhs) defined_at_.emplace(l.name, l.loc);
        }
        for (const Stmt &s : stmts) {
            switch (s.kind) {
            case Stmt::Size: check_size(s); break;
            case Stmt::Input: check_input(s); break;
            case Stmt::Output: check_output(s); break;
            case Stmt::Def:
                if (s.lhs.size() == 2) check_topk(s);
                else if (s.lhs[0].has_brackets) check_tensor(s);
                else check_scalar(s);
                break;
            }
            limits_.check_budget(s.loc);
        }
        if (prog_.outputs.empty())
            throw UserError(end, stmts.empty() ? "empty spec: spec has no output (add 'output NAME')"
                                               : "spec has no output (add 'output NAME')");
        prog_.defs = lowerer_.finish(prog_.outputs);
        return std::move(prog_);
    }

    Symbol *find(const std::string &n) {
        auto it = globals_.find(n);
        return it == globals_.end() ? nullptr : &it->second;
    }
    const SourceLoc *defined_later(const std::string &n) const {
        auto it = defined_at_.find(n);
        return it == defined_at_.end() ? nullptr : &it->second;
    }
    IrLimits &limits() { return limits_; }

private:
    void check_fresh_global(const std::string &name, SourceLoc loc) {
        if (is_reserved(name)) throw UserError(loc, "'" + name + "' is a reserved name (a function, reduction or dtype)");
        if (Symbol *s = find(name))
            throw UserError(loc, "'" + name + "' is already defined at line " + std::to_string(s->loc.line) + " (" +
                                     kind_word(s->kind) + ")");
    }

    void check_size(const Stmt &s) {
        for (const SizeItem &i : s.sizes) {
            check_fresh_global(i.name, i.loc);
            globals_.insert_or_assign(i.name, Symbol(SymKind::Size, i.loc));
            prog_.sizes.push_back(SizeDecl{i.name, i.value, i.loc});
        }
    }

    void check_input(const Stmt &s) {
        check_fresh_global(s.input.name, s.input.loc);
        if (s.dims.size() > kMaxRank)
            throw UserError(s.dims[kMaxRank]->loc, "tensors may have at most " + std::to_string(kMaxRank) + " dimensions");
        InputDecl in;
        in.name = s.input.name;
        in.loc = s.input.loc;
        in.dtype = s.dtype.value_or(DType::f32);
        for (const AstPtr &d : s.dims) {
            ExprChecker ec(*this, in.name);
            Expr e = ec.integer(*d, "a dimension", false);
            limits_.check(e, d->loc, "dimension");
            // A constant dimension is checked here; symbolic ones when sizes are bound.
            if (e->is_const() && e->value < 1)
                throw UserError(d->loc, "a dimension must be at least 1, got " + to_string(e));
            in.dims.push_back(e);
        }
        Symbol sym(SymKind::Input, in.loc);
        sym.dims = in.dims;
        sym.dtype = in.dtype;
        sym.stype = SType::Real;  // integer inputs (labels) are data, not indices
        globals_.insert_or_assign(in.name, sym);
        prog_.inputs.push_back(std::move(in));
    }

    void check_output(const Stmt &s) {
        for (const NameRef &n : s.names) {
            Symbol *sym = find(n.name);
            if (!sym) {
                if (const SourceLoc *l = defined_later(n.name))
                    throw UserError(n.loc, "'" + n.name + "' is used before its definition at line " + std::to_string(l->line));
                throw UserError(n.loc, "unknown name '" + n.name + "'");
            }
            if (sym->kind == SymKind::Input)
                throw UserError(n.loc, "'" + n.name + "' is an input; only definitions can be outputs");
            if (sym->kind != SymKind::Def && sym->kind != SymKind::TopkIndices)
                throw UserError(n.loc, "'" + n.name + "' is a " + kind_word(sym->kind) +
                                           "; only tensor definitions can be outputs");
            auto [it, fresh] = output_at_.emplace(n.name, n.loc);
            if (!fresh)
                throw UserError(n.loc, "'" + n.name + "' is already an output (line " + std::to_string(it->second.line) + ")");
            DType dt = s.dtype.value_or(sym->stype == SType::Int ? DType::i32 : DType::f32);
            prog_.outputs.push_back(OutputDecl{n.name, dt, n.loc});
        }
    }

    static bool is_topk_call(const AstNode &a) { return a.kind == AstKind::Call && a.name == "topk"; }

    /** Declares the left-hand-side variables of `l` as binders (fresh, distinct), with their
     *  explicit extents lowered once all of them are in scope (so `e:i` gets a clear error). */
    void declare_lhs(ExprChecker &ec, const Lhs &l, std::vector<std::unique_ptr<Binder>> &out) {
        if (l.vars.size() > kMaxRank)
            throw UserError(l.vars[kMaxRank].loc, "tensors may have at most " + std::to_string(kMaxRank) + " dimensions");
        for (const LhsVar &v : l.vars) {
            for (const auto &b : out)
                if (b->name == v.name)
                    throw UserError(v.loc, "index variable '" + v.name + "' appears twice on the left-hand side");
            ec.check_fresh_var(v.name, v.loc, "index variable");
            auto b = std::make_unique<Binder>();
            b->name = v.name;
            b->loc = v.loc;
            out.push_back(std::move(b));
        }
        for (const auto &b : out) ec.push(b.get());
        for (size_t i = 0; i < l.vars.size(); i++) {
            if (!l.vars[i].extent) continue;
            Expr e = ec.integer(*l.vars[i].extent, "an extent", false);
            limits_.check(e, l.vars[i].extent->loc, "extent");
            out[i]->explicit_extent = e;
        }
    }

    std::vector<Expr> lhs_extents(const std::vector<std::unique_ptr<Binder>> &binders) {
        std::vector<Expr> ext;
        for (const auto &b : binders) {
            Expr e = b->final_extent();
            if (!e)
                throw UserError(b->loc, "cannot infer the extent of '" + b->name + "'; write " + b->name +
                                            ":EXTENT (it never indexes a tensor dimension by itself)");
            ext.push_back(e);
        }
        return ext;
    }

    void add_def(TensorDef def, SymKind kind = SymKind::Def) {
        Symbol sym(kind, def.loc);
        sym.dims = def.extents;
        sym.stype = def.stype;
        globals_.insert_or_assign(def.name, sym);
        lowerer_.add(def);
    }

    void check_tensor(const Stmt &s) {
        const Lhs &l = s.lhs[0];
        check_fresh_global(l.name, l.loc);
        if (is_topk_call(*s.rhs))
            throw UserError(s.rhs->loc, "topk defines two tensors: write '" + l.name + "[..., r], I[..., r] = topk(AXIS, K: expr)'");
        ExprChecker ec(*this, l.name);
        std::vector<std::unique_ptr<Binder>> binders;
        declare_lhs(ec, l, binders);
        Expr body = ec.value(*s.rhs);
        if (body->stype == SType::Bool)
            throw UserError(s.rhs->loc, "the value of '" + l.name + "' is a condition; use select(cond, a, b) to make it a number");
        TensorDef def;
        def.name = l.name;
        for (const auto &b : binders) def.vars.push_back(make_index(b->name));
        def.extents = lhs_extents(binders);
        def.body = body;
        def.stype = body->stype;
        def.loc = l.loc;
        add_def(std::move(def));
    }

    void check_scalar(const Stmt &s) {
        const Lhs &l = s.lhs[0];
        check_fresh_global(l.name, l.loc);
        if (is_topk_call(*s.rhs))
            throw UserError(s.rhs->loc, "topk defines two tensors: write 'W[..., r], I[..., r] = topk(AXIS, K: expr)'");
        Expr value = nullptr, index = nullptr;
        std::optional<UserError> verr;
        try {
            ExprChecker ec(*this, l.name);
            value = ec.value(*s.rhs);
        } catch (const UserError &e) {
            verr = e;
        }
        if (value && any_of(value, [](Expr n) { return n->kind == Kind::Load || n->kind == Kind::Reduce; })) {
            // Reads tensors: a tensor definition with no index variables (a 0-dimensional tensor).
            if (value->stype == SType::Bool)
                throw UserError(s.rhs->loc, "the value of '" + l.name + "' is a condition; use select(cond, a, b) to make it a number");
            TensorDef def;
            def.name = l.name;
            def.body = value;
            def.stype = value->stype;
            def.loc = l.loc;
            add_def(std::move(def));
            return;
        }
        try {
            ExprChecker ec(*this, l.name);
            index = ec.integer(*s.rhs, "an index expression", true);
        } catch (const UserError &) {
        }
        if (!value && !index) throw *verr;
        std::string what = "scalar '" + l.name + "'";
        if (value) limits_.check(value, l.loc, what);
        if (index) limits_.check(index, l.loc, what);
        Symbol sym(SymKind::Scalar, l.loc);
        sym.value = value;
        sym.index = index;
        sym.value_error = verr;
        sym.stype = value ? value->stype : SType::Int;
        globals_.insert_or_assign(l.name, sym);
    }

    void check_topk(const Stmt &s) {
        const Lhs &w = s.lhs[0], &ix = s.lhs[1];
        check_fresh_global(w.name, w.loc);
        check_fresh_global(ix.name, ix.loc);
        if (w.name == ix.name) throw UserError(ix.loc, "the two top-k tensors need different names");
        const AstNode &rhs = *s.rhs;
        if (!is_topk_call(rhs) || !rhs.has_colon)
            throw UserError(rhs.loc, "a definition of two tensors must be 'W[..., r], I[..., r] = topk(AXIS, K: expr)'");
        if (rhs.args.size() != 2)
            throw UserError(rhs.loc, "topk takes one axis and K before ':': topk(AXIS, K: expr)");
        if (w.vars.empty())
            throw UserError(w.loc, "a top-k definition needs the k axis as the last index variable, e.g. " + w.name + "[t, r]");
        if (ix.vars.size() != w.vars.size())
            throw UserError(ix.loc, "both top-k tensors must have the same index variables");
        for (size_t i = 0; i < w.vars.size(); i++) {
            if (ix.vars[i].name != w.vars[i].name)
                throw UserError(ix.vars[i].loc, "both top-k tensors must have the same index variables: expected '" +
                                                    w.vars[i].name + "', found '" + ix.vars[i].name + "'");
        }
        const LhsVar &kvar = w.vars.back();
        for (const Lhs *l : {&w, &ix})
            if (l->vars.back().extent)
                throw UserError(l->vars.back().loc, "the k axis '" + kvar.name + "' gets its extent from topk's K; "
                                                    "do not give it one");
        ExprChecker ec(*this, w.name, ix.name);
        std::vector<std::unique_ptr<Binder>> binders;
        declare_lhs(ec, w, binders);
        for (size_t i = 0; i + 1 < ix.vars.size(); i++) {
            if (!ix.vars[i].extent) continue;
            Expr e = ec.integer(*ix.vars[i].extent, "an extent", false);
            if (e != binders[i]->explicit_extent)
                throw UserError(ix.vars[i].extent->loc, "the extents of '" + ix.vars[i].name + "' differ between '" +
                                                            w.name + "' and '" + ix.name + "'");
        }
        binders.back()->is_k_axis = true;

        const AstNode &axis_ast = *rhs.args[0], &k_ast = *rhs.args[1];
        if (axis_ast.kind != AstKind::Name)
            throw UserError(axis_ast.loc, "the first argument of topk must be the axis name: topk(AXIS, K: expr)");
        Expr k = ec.integer(k_ast, "top-k K", false);
        limits_.check(k, k_ast.loc, "top-k K");
        ec.check_fresh_var(axis_ast.name, axis_ast.loc, "reduction axis");
        Binder axis;
        axis.name = axis_ast.name;
        axis.loc = axis_ast.loc;
        ec.push(&axis);
        Expr body = ec.value(*rhs.body);
        ec.pop(&axis);
        if (body->stype == SType::Bool)
            throw UserError(rhs.body->loc, "a condition cannot be used as a number; only select(cond, a, b) and "
                                           "and/or/not take conditions");
        if (!axis.used) throw UserError(axis.loc, "reduction axis '" + axis.name + "' is not used in the body");
        if (!axis.extent)
            throw UserError(axis.loc, "cannot infer the extent of reduction axis '" + axis.name +
                                          "': it never indexes a tensor dimension by itself");
        // Static checks of K when it is a constant (otherwise bind_sizes checks it).
        std::optional<int64_t> kval = constant(k, k_ast.loc);
        if (kval && *kval < 1) throw UserError(k_ast.loc, "top-k K must be at least 1, got " + std::to_string(*kval));
        if (kval) {
            std::optional<int64_t> ext = constant(axis.extent, k_ast.loc);
            if (ext && *kval > *ext)
                throw UserError(k_ast.loc, "top-k K = " + std::to_string(*kval) + " is larger than the extent " +
                                               std::to_string(*ext) + " of axis '" + axis.name + "'");
        }
        binders.back()->explicit_extent = k;
        TensorDef def;
        def.name = w.name;
        def.index_name = ix.name;
        for (const auto &b : binders) def.vars.push_back(make_index(b->name));
        def.extents = lhs_extents(binders);
        def.body = make_reduce(ReduceOp::TopK, {make_index(axis.name)}, {axis.extent}, body, kval.value_or(0));
        def.stype = SType::Real;
        def.loc = w.loc;
        Symbol isym(SymKind::TopkIndices, ix.loc);
        isym.dims = def.extents;
        isym.stype = SType::Int;
        add_def(std::move(def));
        globals_.insert_or_assign(ix.name, isym);
    }

    /** The value of an expression without variables, or nullopt. */
    static std::optional<int64_t> constant(Expr e, SourceLoc loc) {
        if (any_of(e, [](Expr n) { return n->kind == Kind::Var; })) return std::nullopt;
        try {
            return eval_int(e, {});
        } catch (const UserError &err) {
            throw UserError(loc, err.what());
        }
    }

    Program prog_;
    IrLimits limits_;
    Lowerer lowerer_;
    std::unordered_map<std::string, Symbol> globals_;
    std::unordered_map<std::string, SourceLoc> defined_at_;  // first definition of every global
    std::unordered_map<std::string, SourceLoc> output_at_;
};

// ---------------------------------------------------------------------------------------------
// ExprChecker

void ExprChecker::check_fresh_var(const std::string &name, SourceLoc loc, const char *role) {
    std::string r = role;
    if (is_reserved(name)) throw UserError(loc, "'" + name + "' is a reserved name and cannot be an " + r);
    if (Symbol *s = c_.find(name))
        throw UserError(loc, r + " '" + name + "' collides with the " + kind_word(s->kind) + " '" + name +
                                 "' defined at line " + std::to_string(s->loc.line));
    if (name == def_name_ || name == def_name2_)
        throw UserError(loc, r + " '" + name + "' has the same name as the definition");
    if (Binder *b = find_binder(name))
        throw UserError(loc, r + " '" + name + "' shadows the index variable '" + name + "' bound at " + where(b->loc));
}

Symbol &ExprChecker::lookup(const std::string &name, SourceLoc loc) {
    if (Symbol *s = c_.find(name)) return *s;
    if (name == def_name_ || name == def_name2_) throw UserError(loc, "'" + name + "' is used in its own definition");
    if (const SourceLoc *l = c_.defined_later(name))
        throw UserError(loc, "'" + name + "' is used before its definition at line " + std::to_string(l->line));
    if (is_reserved(name)) throw UserError(loc, "'" + name + "' is a function; call it as " + name + "(...)");
    throw UserError(loc, "unknown name '" + name + "'");
}

Expr ExprChecker::lower(const AstNode &a, bool index) {
    switch (a.kind) {
    case AstKind::Int: return make_int(a.ival);
    case AstKind::Real:
        if (index) not_integer(a.loc, "a real number is not");
        return make_const(a.rval);
    case AstKind::Name: return lower_name(a, index);
    case AstKind::Load: return lower_load(a, index);
    case AstKind::Call: return lower_call(a, index);
    case AstKind::Neg: {
        const AstNode &x = *a.args[0];
        // Fold the sign into literals so `-inf` and `-1` are constants, as printed.
        if (x.kind == AstKind::Int) return make_int(-x.ival);
        if (x.kind == AstKind::Real) {
            if (index) not_integer(x.loc, "a real number is not");
            return make_const(-x.rval);
        }
        return make_neg(numeric(lower(x, index), x));
    }
    case AstKind::Not: {
        if (index) not_integer(a.loc, "'not' gives a condition");
        return make_not(condition(lower(*a.args[0], index), *a.args[0], "'not'"));
    }
    case AstKind::Binary: return lower_binary(a, index);
    }
    RF_INTERNAL_ASSERT(false) << "unknown AST kind";
    return nullptr;
}

Expr ExprChecker::lower_name(const AstNode &a, bool index) {
    if (Binder *b = find_binder(a.name)) {
        if (!vars_ok_)
            throw UserError(a.loc, what_ + " cannot use the index variable '" + a.name + "'; it must depend on sizes only");
        if (b->is_k_axis)
            throw UserError(a.loc, "the top-k axis '" + a.name + "' numbers the results and cannot be used in the body");
        b->used = true;
        return make_index(a.name);
    }
    Symbol &s = lookup(a.name, a.loc);
    switch (s.kind) {
    case SymKind::Size: return make_size(a.name);
    case SymKind::Scalar:
        if (index) {
            if (!s.index) not_integer(a.loc, "the scalar '" + a.name + "' is not");
            return s.index;
        }
        if (!s.value) throw *s.value_error;
        return s.value;
    default:
        if (!s.dims.empty())
            throw UserError(a.loc, "'" + a.name + "' is a tensor with " + std::to_string(s.dims.size()) +
                                       " dimension(s); index it as " + a.name + "[...]");
        if (index) not_integer(a.loc, "it reads the tensor '" + a.name + "'");
        return make_load(a.name, {}, s.dtype, s.stype);
    }
}

Expr ExprChecker::lower_load(const AstNode &a, bool index) {
    if (find_binder(a.name)) throw UserError(a.loc, "'" + a.name + "' is an index variable, not a tensor");
    Symbol &s = lookup(a.name, a.loc);
    if (s.kind == SymKind::Size || s.kind == SymKind::Scalar)
        throw UserError(a.loc, "'" + a.name + "' is a " + kind_word(s.kind) + ", not a tensor");
    if (index) not_integer(a.loc, "it reads the tensor '" + a.name + "'");
    if (a.args.size() != s.dims.size())
        throw UserError(a.loc, "'" + a.name + "' has " + std::to_string(s.dims.size()) + " dimension(s) but " +
                                   std::to_string(a.args.size()) + " index(es) are given");
    std::vector<Expr> idx;
    for (size_t i = 0; i < a.args.size(); i++) {
        const AstNode &ia = *a.args[i];
        what_ = "an index expression";
        vars_ok_ = true;
        Expr e = lower(ia, true);
        RF_INTERNAL_ASSERT(e->stype == SType::Int) << "index context produced a non-Int expression";
        if (ia.kind == AstKind::Name) {
            if (Binder *b = find_binder(ia.name)) {
                // A direct use: the variable alone indexes this dimension, so it fixes the extent.
                if (!b->explicit_extent) {
                    if (!b->extent) {
                        b->extent = s.dims[i];
                        b->use_tensor = a.name;
                        b->use_dim = i + 1;
                    } else if (b->extent != s.dims[i]) {
                        throw UserError(ia.loc, "extent mismatch: '" + ia.name + "' indexes " + b->use_tensor +
                                                    " dimension " + std::to_string(b->use_dim) + " (extent " +
                                                    to_string(b->extent) + ") and " + a.name + " dimension " +
                                                    std::to_string(i + 1) + " (extent " + to_string(s.dims[i]) + ")");
                    }
                }
            }
        }
        idx.push_back(e);
    }
    return make_load(a.name, std::move(idx), s.dtype, s.stype);
}

Expr ExprChecker::lower_call(const AstNode &a, bool index) {
    const std::string &n = a.name;
    if (index) not_integer(a.loc, "it calls '" + n + "'");
    auto arity = [&](size_t k, const char *usage) {
        if (a.has_colon)
            throw UserError(a.loc, "'" + n + "' is not a reduction; only sum, prod, max, min, argmax, argmin and topk "
                                             "take 'AXES:'");
        if (a.args.size() != k)
            throw UserError(a.loc, n + " takes " + std::to_string(k) + (k == 1 ? " argument" : " arguments") + usage +
                                       ", got " + std::to_string(a.args.size()));
    };
    auto arg = [&](size_t i) { return numeric(lower(*a.args[i], false), *a.args[i]); };
    if (n == "topk")
        throw UserError(a.loc, "topk can only be the whole right-hand side of a two-tensor definition "
                               "'W[..., r], I[..., r] = topk(AXIS, K: expr)'");
    if (n == "sum" || n == "prod" || n == "argmax" || n == "argmin" || ((n == "max" || n == "min") && a.has_colon)) {
        if (!a.has_colon) throw UserError(a.loc, n + " needs reduction axes: " + n + "(AXES: expr)");
        ReduceOp op = n == "sum" ? ReduceOp::Sum : n == "prod" ? ReduceOp::Prod : n == "max" ? ReduceOp::Max
                    : n == "min" ? ReduceOp::Min : n == "argmax" ? ReduceOp::ArgMax : ReduceOp::ArgMin;
        return lower_reduce(a, op);
    }
    if (n == "max" || n == "min") {
        arity(2, " (or AXES: expr for a reduction)");
        Expr x = arg(0), y = arg(1);
        return n == "max" ? make_max(x, y) : make_min(x, y);
    }
    if (n == "pow") {
        arity(2, "");
        Expr x = arg(0), y = arg(1);
        return make_pow(x, y);
    }
    if (n == "select") {
        arity(3, " (cond, a, b)");
        Expr c = condition(lower(*a.args[0], false), *a.args[0], "select");
        Expr x = arg(1), y = arg(2);
        return make_select(c, x, y);
    }
    if (auto f = func_from_name(n)) {
        arity(1, "");
        return make_call(*f, arg(0));
    }
    if (auto t = dtype_from_name(n)) {
        arity(1, " (a cast)");
        return make_cast(*t, arg(0));
    }
    if (find_binder(n) || c_.find(n)) throw UserError(a.loc, "'" + n + "' is not a function");
    throw UserError(a.loc, "unknown function '" + n + "'");
}

Expr ExprChecker::lower_reduce(const AstNode &a, ReduceOp op) {
    const char *opname = reduce_name(op);
    if (a.args.empty()) throw UserError(a.loc, std::string(opname) + " needs at least one axis before ':'");
    if ((op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) && a.args.size() != 1)
        throw UserError(a.args[1]->loc, std::string(opname) + " reduces over exactly one axis");
    if (a.args.size() > kMaxRank)
        throw UserError(a.args[kMaxRank]->loc, "a reduction may have at most " + std::to_string(kMaxRank) + " axes");
    std::vector<std::unique_ptr<Binder>> axes;
    for (const AstPtr &x : a.args) {
        if (x->kind != AstKind::Name)
            throw UserError(x->loc, std::string("the axes of ") + opname + " must be plain names (fresh index variables)");
        for (const auto &b : axes)
            if (b->name == x->name) throw UserError(x->loc, "axis '" + x->name + "' is listed twice");
        check_fresh_var(x->name, x->loc, "reduction axis");
        auto b = std::make_unique<Binder>();
        b->name = x->name;
        b->loc = x->loc;
        axes.push_back(std::move(b));
    }
    for (const auto &b : axes) push(b.get());
    Expr body = numeric(lower(*a.body, false), *a.body);
    for (const auto &b : axes) pop(b.get());
    std::vector<Expr> vars, extents;
    for (const auto &b : axes) {
        if (!b->used) throw UserError(b->loc, "reduction axis '" + b->name + "' is not used in the body");
        if (!b->extent)
            throw UserError(b->loc, "cannot infer the extent of reduction axis '" + b->name +
                                        "': it never indexes a tensor dimension by itself");
        vars.push_back(make_index(b->name));
        extents.push_back(b->extent);
    }
    return make_reduce(op, std::move(vars), std::move(extents), body);
}

Expr ExprChecker::lower_binary(const AstNode &a, bool index) {
    const AstNode &l = *a.args[0], &r = *a.args[1];
    switch (a.op) {
    case Tok::Plus: case Tok::Minus: case Tok::Star: {
        Expr x = numeric(lower(l, index), l), y = numeric(lower(r, index), r);
        return a.op == Tok::Plus ? make_add(x, y) : a.op == Tok::Minus ? make_sub(x, y) : make_mul(x, y);
    }
    case Tok::Slash: {
        // The division rule: floor division inside an index, real division everywhere else.
        Expr x = numeric(lower(l, index), l), y = numeric(lower(r, index), r);
        return index ? make_idiv(x, y) : make_div(x, y);
    }
    case Tok::Percent: {
        if (!index) throw UserError(a.loc, "'%' is only allowed in index expressions (inside [...])");
        Expr x = lower(l, index), y = lower(r, index);
        return make_mod(x, y);
    }
    case Tok::Lt: case Tok::Le: case Tok::Gt: case Tok::Ge: case Tok::EqEq: case Tok::Ne: {
        if (index) not_integer(a.loc, "a comparison is not");
        Expr x = numeric(lower(l, false), l), y = numeric(lower(r, false), r);
        CmpOp op = a.op == Tok::Lt ? CmpOp::LT : a.op == Tok::Le ? CmpOp::LE : a.op == Tok::Gt ? CmpOp::GT
                 : a.op == Tok::Ge ? CmpOp::GE : a.op == Tok::EqEq ? CmpOp::EQ : CmpOp::NE;
        return make_cmp(op, x, y);
    }
    case Tok::KwAnd: case Tok::KwOr: {
        const char *w = a.op == Tok::KwAnd ? "'and'" : "'or'";
        if (index) not_integer(a.loc, std::string(w) + " gives a condition");
        Expr x = condition(lower(l, false), l, w), y = condition(lower(r, false), r, w);
        return a.op == Tok::KwAnd ? make_and(x, y) : make_or(x, y);
    }
    default: break;
    }
    RF_INTERNAL_ASSERT(false) << "unknown binary operator";
    return nullptr;
}

}  // namespace

Program check_program(const std::vector<Stmt> &stmts, SourceLoc end, const std::string &file) {
    return Checker(file).run(stmts, end);
}

}  // namespace rf::spec
