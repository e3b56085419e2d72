/** \file TileIR.cpp
 * Builders of tile IR statements and the `--emit tile` printer.
 */
#include "tile/TileIR.h"

#include <cstdlib>
#include <sstream>

#include "support/Error.h"
#include "tile/StmtVisitor.h"

namespace rf::tile {

namespace {
std::shared_ptr<Stmt> make(StmtKind k) {
    auto s = std::make_shared<Stmt>();
    s->kind = k;
    return s;
}
}  // namespace

StmtP block(std::vector<StmtP> body) {
    auto s = make(StmtKind::Block);
    s->body = std::move(body);
    return s;
}

StmtP for_loop(Expr var, Expr begin, Expr end, std::vector<StmtP> body, LoopKind loop) {
    RF_INTERNAL_ASSERT(var && var->kind == Kind::Var && var->stype == SType::Int) << "loop variable must be an Int Var";
    auto s = make(StmtKind::For);
    s->var = var;
    s->begin = begin;
    s->end = end;
    s->loop = loop;
    s->body = std::move(body);
    return s;
}

StmtP if_then(Expr cond, std::vector<StmtP> then_body, std::vector<StmtP> else_body) {
    RF_INTERNAL_ASSERT(cond && cond->stype == SType::Bool) << "if condition must be Bool";
    auto s = make(StmtKind::If);
    s->cond = cond;
    s->body = std::move(then_body);
    s->else_body = std::move(else_body);
    return s;
}

StmtP decl(const std::string &name, LocalClass cls, std::vector<Expr> dims, Expr init) {
    RF_INTERNAL_ASSERT(!name.empty() && name[0] == '$') << "local names start with '$': " << name;
    auto s = make(StmtKind::Decl);
    s->name = name;
    s->cls = cls;
    s->dims = std::move(dims);
    s->value = init;
    return s;
}

StmtP assign(Expr target, Expr value) {
    auto s = make(StmtKind::Assign);
    s->target = target;
    s->value = value;
    return s;
}

StmtP accum(ReduceOp op, Expr target, Expr value) {
    RF_INTERNAL_ASSERT(op == ReduceOp::Sum || op == ReduceOp::Prod || op == ReduceOp::Max || op == ReduceOp::Min)
        << "accumulate with " << reduce_name(op);
    auto s = make(StmtKind::Accum);
    s->op = op;
    s->target = target;
    s->value = value;
    return s;
}

StmtP arg_select(ReduceOp op, Expr value_target, Expr index_target, Expr value, Expr index) {
    auto s = make(StmtKind::ArgSelect);
    s->op = op;
    s->target = value_target;
    s->target2 = index_target;
    s->value = value;
    s->index = index;
    return s;
}

StmtP topk_insert(const std::string &list, Expr offset, Expr count_index, Expr k, ReduceOp op, Expr value, Expr index) {
    auto s = make(StmtKind::TopKInsert);
    s->args = {offset};
    s->args2 = {count_index};
    s->name = list;
    s->k = k;
    s->op = op;
    s->value = value;
    s->index = index;
    return s;
}

StmtP poly_shift(const std::string &state, std::vector<std::vector<int>> alphas, std::vector<Expr> from,
                 std::vector<Expr> to) {
    auto s = make(StmtKind::PolyShift);
    s->name = state;
    s->alphas = std::move(alphas);
    s->args = std::move(from);
    s->args2 = std::move(to);
    return s;
}

StmtP gemm(GemmInfo info) {
    auto s = make(StmtKind::Gemm);
    s->gemm = std::make_shared<GemmInfo>(std::move(info));
    return s;
}

StmtP store(Expr target, Expr value) {
    RF_INTERNAL_ASSERT(target && target->kind == Kind::Load) << "store target must be a Load";
    auto s = make(StmtKind::Store);
    s->target = target;
    s->value = value;
    return s;
}

StmtP copy_row(Expr target, Expr source, Expr count, Expr scale, bool deferred) {
    RF_INTERNAL_ASSERT(target && target->kind == Kind::Load && source && source->kind == Kind::Load) << "copy of loads";
    auto s = make(StmtKind::CopyRow);
    s->target = target;
    s->value = source;
    s->end = count;
    s->scale = scale;
    s->deferred = deferred;
    return s;
}

StmtP finish_copies(Expr below) {
    RF_INTERNAL_ASSERT(below && below->kind == Kind::Load) << "finish copies below a load";
    auto s = make(StmtKind::FinishCopies);
    s->target = below;
    return s;
}

StmtP prefetch(Expr at, Expr count, PrefetchWhen when) {
    RF_INTERNAL_ASSERT(at && at->kind == Kind::Load) << "prefetch of a load";
    auto s = make(StmtKind::Prefetch);
    s->target = at;
    s->end = count;
    s->when = when;
    return s;
}

StmtP comment(const std::string &text) {
    auto s = make(StmtKind::Comment);
    s->name = text;
    return s;
}

StmtP with_body(const StmtP &s, std::vector<StmtP> body, std::vector<StmtP> else_body) {
    auto c = std::make_shared<Stmt>(*s);
    c->body = std::move(body);
    c->else_body = std::move(else_body);
    return c;
}

namespace {

/** The mutator behind map_own_exprs and mutate: f on every own expression, rename on every local
 *  name, children only when `deep`. */
class FunctionMutator : public StmtMutator {
public:
    FunctionMutator(const std::function<Expr(Expr)> &f, const std::function<std::string(const std::string &)> *rename, bool deep)
        : f_(f), rename_(rename), deep_(deep) {}
    StmtP mutate(const StmtP &s) override { return deep_ ? mutate_default(s) : mutate_own(s); }
    Expr mutate_expr(const Expr &e) override { return f_(e); }
    std::string mutate_name(const std::string &n) override { return rename_ ? (*rename_)(n) : n; }

private:
    const std::function<Expr(Expr)> &f_;
    const std::function<std::string(const std::string &)> *rename_;
    bool deep_;
};

}  // namespace

StmtP map_own_exprs(const StmtP &s, const std::function<Expr(Expr)> &f) { return FunctionMutator(f, nullptr, false).mutate(s); }

StmtP mutate(const StmtP &s, const std::function<Expr(Expr)> &f,
             const std::function<std::string(const std::string &)> &rename) {
    return FunctionMutator(f, &rename, true).mutate(s);
}

StmtP rename_locals(const StmtP &s, const std::function<std::string(const std::string &)> &rename) {
    std::function<Expr(Expr)> go = [&](Expr e) {
        return substitute(e, [&](Expr n) -> Expr {
            if ((n->kind != Kind::Var && n->kind != Kind::Load) || n->name.empty() || n->name[0] != '$') return nullptr;
            if (n->kind == Kind::Var) return make_var(rename(n->name), n->role, n->stype);
            std::vector<Expr> args;
            for (Expr a : n->args) args.push_back(go(a));
            return make_load(rename(n->name), args, n->dtype, n->stype);
        });
    };
    return mutate(s, go, rename);
}

const Buffer *Module::find(const std::string &name) const {
    for (const Buffer &b : buffers)
        if (b.name == name) return &b;
    return nullptr;
}

bool verify_each_pass() {
#ifndef NDEBUG
    return true;
#else
    return false;
#endif
}

// ---- Printer.

namespace {

const char *loop_name(LoopKind k) {
    switch (k) {
    case LoopKind::Serial: return "serial";
    case LoopKind::Parallel: return "parallel";
    case LoopKind::Independent: return "independent";
    case LoopKind::Lanes: return "lanes";
    default: return "simd";
    }
}

const char *class_name(LocalClass c) {
    switch (c) {
    case LocalClass::State: return "state";
    case LocalClass::Tile: return "tile";
    case LocalClass::Int8: return "int8";
    case LocalClass::LaneState: return "lane_state";
    default: return "index";
    }
}

const char *role_name(Buffer::Role r) {
    switch (r) {
    case Buffer::Role::Input: return "input";
    case Buffer::Role::Output: return "output";
    default: return "temp";
    }
}

std::string list(const std::vector<Expr> &v) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + rf::to_string(v[i]);
    return s;
}

/** The `--emit tile` text: one line per statement, children indented one level (two spaces). */
class Printer : public StmtVisitor {
public:
    Printer(std::ostringstream &os, int indent) : os_(os), indent_(indent) {}

    void visit_block(const StmtP &s) override { visit_list(s->body); }
    void visit_for(const StmtP &s) override {
        pad() << "for " << s->var->name << " in [" << rf::to_string(s->begin) << ", " << rf::to_string(s->end) << ") "
              << loop_name(s->loop) << ":\n";
        nested(s->body);
    }
    void visit_if(const StmtP &s) override {
        pad() << "if " << rf::to_string(s->cond) << ":\n";
        nested(s->body);
        if (!s->else_body.empty()) {
            pad() << "else:\n";
            nested(s->else_body);
        }
    }
    void visit_decl(const StmtP &s) override {
        pad() << class_name(s->cls) << " " << s->name;
        if (!s->dims.empty()) os_ << "[" << list(s->dims) << "]";
        if (s->value) os_ << " = " << rf::to_string(s->value);
        os_ << "\n";
    }
    void visit_assign(const StmtP &s) override { pad() << rf::to_string(s->target) << " = " << rf::to_string(s->value) << "\n"; }
    void visit_accum(const StmtP &s) override {
        pad() << rf::to_string(s->target) << " " << reduce_name(s->op) << "= " << rf::to_string(s->value) << "\n";
    }
    void visit_arg_select(const StmtP &s) override {
        pad() << "(" << rf::to_string(s->target) << ", " << rf::to_string(s->target2) << ") " << reduce_name(s->op) << "= ("
              << rf::to_string(s->value) << ", " << rf::to_string(s->index) << ")\n";
    }
    void visit_topk_insert(const StmtP &s) override {
        pad() << s->name << "@" << rf::to_string(s->args[0]) << " topk[" << rf::to_string(s->k) << "] <- (" << rf::to_string(s->value)
              << ", " << rf::to_string(s->index) << ")\n";
    }
    void visit_poly_shift(const StmtP &s) override {
        pad() << "shift " << s->name << " (" << s->alphas.size() << " moments) from (" << list(s->args) << ") to (" << list(s->args2)
              << ")\n";
    }
    void visit_gemm(const StmtP &s) override {
        const GemmInfo &g = *s->gemm;
        pad() << "gemm " << rf::to_string(g.c_base) << " " << (g.accumulate ? "+=" : "=") << " " << rf::to_string(g.alpha) << " * "
              << rf::to_string(g.a_base) << (g.a_transposed() ? "^T" : "") << " x " << rf::to_string(g.b_base) << (g.trans_b ? "^T" : "") << "  [M=" << rf::to_string(g.M)
              << " N=" << rf::to_string(g.N) << " K=" << rf::to_string(g.K) << "]"
              << (g.accumulate_if ? "  (+= if " + rf::to_string(g.accumulate_if) + ", else =)" : std::string()) << "\n";
    }
    void visit_store(const StmtP &s) override { pad() << "store " << rf::to_string(s->target) << " = " << rf::to_string(s->value) << "\n"; }
    void visit_copy_row(const StmtP &s) override {
        pad() << "copy " << rf::to_string(s->target) << "[0, " << rf::to_string(s->end) << ") = " << rf::to_string(s->value) << "..."
              << (s->scale ? " * " + rf::to_string(s->scale) : "") << (s->deferred ? " (deferred)" : "") << "\n";
    }
    void visit_finish_copies(const StmtP &s) override { pad() << "finish deferred copies from below " << rf::to_string(s->target) << "\n"; }
    void visit_prefetch(const StmtP &s) override {
        pad() << "prefetch " << rf::to_string(s->target) << "[0, " << rf::to_string(s->end) << ")" << (s->when == PrefetchWhen::DuringCopy ? " during the row copy" : s->when == PrefetchWhen::DuringSweep ? " during the sweep" : "")
              << "\n";
    }
    void visit_comment(const StmtP &s) override { pad() << "# " << s->name << "\n"; }

private:
    std::ostringstream &pad() {
        os_ << std::string(static_cast<size_t>(indent_) * 2, ' ');
        return os_;
    }
    void nested(const std::vector<StmtP> &list) {
        indent_++;
        visit_list(list);
        indent_--;
    }

    std::ostringstream &os_;
    int indent_;
};

void print(std::ostringstream &os, const StmtP &s, int indent) { Printer(os, indent).visit(s); }

}  // namespace

std::string to_string(const StmtP &s, int indent) {
    std::ostringstream os;
    print(os, s, indent);
    return os.str();
}

std::string to_string(const Module &m) {
    std::ostringstream os;
    os << "module compute=" << dtype_name(m.compute) << " sizes(";
    for (size_t i = 0; i < m.sizes.size(); i++) os << (i ? ", " : "") << m.sizes[i];
    os << ")\n";
    for (const Buffer &b : m.buffers)
        os << "  buffer " << b.name << " : " << dtype_name(b.dtype) << "[" << list(b.dims) << "] " << role_name(b.role)
           << "\n";
    for (const Kernel &k : m.kernels) {
        const Schedule &s = k.schedule;
        os << "kernel " << k.name << "  # " << k.what << "\n  schedule strategy=" << to_string(s.strategy) << " tile=" << s.tile
           << " row_block=" << s.row_block << " segments=" << s.segments << " threads=" << s.threads
           << " level=" << s.fusion_level << (s.row_lanes == RowLanes::All ? " row_lanes" : s.row_lanes == RowLanes::TopK ? " row_lanes=topk" : "") << "\n";
        print(os, k.body, 1);
    }
    return os.str();
}

}  // namespace rf::tile
