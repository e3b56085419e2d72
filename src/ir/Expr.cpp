/** \file Expr.cpp
 * Interning of expression nodes, the constructors, the canonical order and traversal helpers.
 */
#include "ir/Expr.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "support/Error.h"

namespace rf {

const char *func_name(Func f) {
    switch (f) {
    case Func::exp: return "exp";
    case Func::exp2: return "exp2";
    case Func::log: return "log";
    case Func::log2: return "log2";
    case Func::sqrt: return "sqrt";
    case Func::rsqrt: return "rsqrt";
    case Func::abs: return "abs";
    case Func::tanh: return "tanh";
    case Func::sigmoid: return "sigmoid";
    case Func::round: return "round";
    case Func::floor: return "floor";
    case Func::ceil: return "ceil";
    }
    return "?";
}

const char *cmp_name(CmpOp c) {
    switch (c) {
    case CmpOp::LT: return "<";
    case CmpOp::LE: return "<=";
    case CmpOp::GT: return ">";
    case CmpOp::GE: return ">=";
    case CmpOp::EQ: return "==";
    case CmpOp::NE: return "!=";
    }
    return "?";
}

const char *reduce_name(ReduceOp r) {
    switch (r) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::ArgMax: return "argmax";
    case ReduceOp::ArgMin: return "argmin";
    case ReduceOp::TopK: return "topk";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// Interning

namespace {
size_t hash_combine(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

size_t hash_node(const Node &n) {
    size_t h = std::hash<int>()(static_cast<int>(n.kind));
    h = hash_combine(h, static_cast<size_t>(n.stype));
    h = hash_combine(h, static_cast<size_t>(n.func));
    h = hash_combine(h, static_cast<size_t>(n.cmp));
    h = hash_combine(h, static_cast<size_t>(n.rop));
    h = hash_combine(h, static_cast<size_t>(n.role));
    h = hash_combine(h, static_cast<size_t>(n.dtype));
    h = hash_combine(h, std::hash<int64_t>()(n.k));
    uint64_t bits;
    double v = n.value == 0 ? 0.0 : n.value;  // -0 and +0 intern together only if both are 0.0 bits
    std::memcpy(&bits, &n.value, sizeof bits);
    (void)v;
    h = hash_combine(h, std::hash<uint64_t>()(bits));
    h = hash_combine(h, std::hash<std::string>()(n.name));
    for (Expr a : n.args) h = hash_combine(h, a->hash);
    for (Expr a : n.extents) h = hash_combine(h, a->hash);
    return h;
}

bool same_node(const Node &a, const Node &b) {
    if (a.kind != b.kind || a.stype != b.stype || a.func != b.func || a.cmp != b.cmp || a.rop != b.rop ||
        a.role != b.role || a.dtype != b.dtype || a.k != b.k || a.name != b.name || a.args != b.args ||
        a.extents != b.extents)
        return false;
    // Compare doubles by bit pattern so that NaN interns with itself and -0 stays distinct from 0.
    return std::memcmp(&a.value, &b.value, sizeof(double)) == 0;
}

struct NodePtrHash {
    size_t operator()(const Node *n) const { return n->hash; }
};
struct NodePtrEq {
    bool operator()(const Node *a, const Node *b) const { return same_node(*a, *b); }
};

Arena &default_arena() {
    static Arena arena;
    return arena;
}
thread_local Arena *tls_current = nullptr;
}  // namespace

struct Arena::Impl {
    std::deque<Node> nodes;
    std::unordered_set<const Node *, NodePtrHash, NodePtrEq> table;
    /** Per thread: (factory, memo) pairs; a handful of entries, searched linearly. */
    std::unordered_map<std::thread::id, std::vector<std::pair<ArenaMemoFactory, std::unique_ptr<ArenaMemo>>>> memos;
    std::mutex mutex;
};

Arena::Arena() : impl_(std::make_unique<Impl>()) {}
Arena::~Arena() = default;

Expr Arena::intern(Node &&n) {
    n.hash = hash_node(n);
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto it = impl_->table.find(&n);
    if (it != impl_->table.end()) return *it;
    n.id = static_cast<uint32_t>(impl_->nodes.size());
    impl_->nodes.push_back(std::move(n));
    const Node *p = &impl_->nodes.back();
    impl_->table.insert(p);
    return p;
}

size_t Arena::size() const { return impl_->nodes.size(); }

ArenaMemo &Arena::thread_memo(ArenaMemoFactory make) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    auto &mine = impl_->memos[std::this_thread::get_id()];
    for (auto &[factory, memo] : mine)
        if (factory == make) return *memo;
    mine.emplace_back(make, make());
    RF_INTERNAL_ASSERT(mine.back().second) << "an arena memo factory returned nothing";
    return *mine.back().second;
}

Arena &current_arena() { return tls_current ? *tls_current : default_arena(); }

ArenaScope::ArenaScope() : previous_(tls_current) { tls_current = &arena_; }
ArenaUse::ArenaUse(Arena &a) : previous_(tls_current) { tls_current = &a; }
ArenaUse::~ArenaUse() { tls_current = previous_; }
ArenaScope::~ArenaScope() { tls_current = previous_; }

// ---------------------------------------------------------------------------------------------
// Constructors

namespace {
Expr intern(Node n) { return current_arena().intern(std::move(n)); }

Node node(Kind k, SType t, std::vector<Expr> args) {
    Node n;
    n.kind = k;
    n.stype = t;
    for (Expr a : args) RF_INTERNAL_ASSERT(a != nullptr) << "null child";
    n.args = std::move(args);
    return n;
}

SType join_numeric(const std::vector<Expr> &args) {
    for (Expr a : args)
        if (a->stype == SType::Real) return SType::Real;
    return SType::Int;
}
}  // namespace

Expr make_const(double v, SType t) {
    Node n = node(Kind::Const, t, {});
    n.value = v;
    return intern(std::move(n));
}
Expr make_int(int64_t v) { return make_const(static_cast<double>(v), SType::Int); }
Expr make_bool(bool v) { return make_const(v ? 1.0 : 0.0, SType::Bool); }

Expr make_var(const std::string &name, VarRole role, SType t) {
    Node n = node(Kind::Var, t, {});
    n.name = name;
    n.role = role;
    return intern(std::move(n));
}
Expr make_index(const std::string &name) { return make_var(name, VarRole::Index, SType::Int); }
Expr make_size(const std::string &name) { return make_var(name, VarRole::Size, SType::Int); }
Expr make_symbol(const std::string &name) { return make_var(name, VarRole::Symbol, SType::Real); }

Expr make_load(const std::string &tensor, std::vector<Expr> indices, DType element_type, SType t) {
    Node n = node(Kind::Load, t, std::move(indices));
    n.name = tensor;
    n.dtype = element_type;
    return intern(std::move(n));
}

Expr make_add(std::vector<Expr> args) {
    RF_INTERNAL_ASSERT(!args.empty()) << "empty Add";
    if (args.size() == 1) return args[0];
    SType t = join_numeric(args);
    return intern(node(Kind::Add, t, std::move(args)));
}
Expr make_add(Expr a, Expr b) { return make_add(std::vector<Expr>{a, b}); }
Expr make_sub(Expr a, Expr b) { return intern(node(Kind::Sub, join_numeric({a, b}), {a, b})); }
Expr make_mul(std::vector<Expr> args) {
    RF_INTERNAL_ASSERT(!args.empty()) << "empty Mul";
    if (args.size() == 1) return args[0];
    SType t = join_numeric(args);
    return intern(node(Kind::Mul, t, std::move(args)));
}
Expr make_mul(Expr a, Expr b) { return make_mul(std::vector<Expr>{a, b}); }
Expr make_div(Expr a, Expr b) { return intern(node(Kind::Div, SType::Real, {a, b})); }
Expr make_neg(Expr a) { return intern(node(Kind::Neg, a->stype == SType::Int ? SType::Int : SType::Real, {a})); }
Expr make_pow(Expr a, Expr b) { return intern(node(Kind::Pow, SType::Real, {a, b})); }
Expr make_call(Func f, Expr a) {
    Node n = node(Kind::Call, SType::Real, {a});
    n.func = f;
    return intern(std::move(n));
}
Expr make_min(Expr a, Expr b) { return intern(node(Kind::Min, join_numeric({a, b}), {a, b})); }
Expr make_max(Expr a, Expr b) { return intern(node(Kind::Max, join_numeric({a, b}), {a, b})); }
Expr make_select(Expr c, Expr a, Expr b) {
    return intern(node(Kind::Select, join_numeric({a, b}), {c, a, b}));
}
Expr make_cmp(CmpOp op, Expr a, Expr b) {
    Node n = node(Kind::Cmp, SType::Bool, {a, b});
    n.cmp = op;
    return intern(std::move(n));
}
Expr make_and(Expr a, Expr b) { return intern(node(Kind::And, SType::Bool, {a, b})); }
Expr make_or(Expr a, Expr b) { return intern(node(Kind::Or, SType::Bool, {a, b})); }
Expr make_not(Expr a) { return intern(node(Kind::Not, SType::Bool, {a})); }
Expr make_cast(DType t, Expr a) {
    Node n = node(Kind::Cast, is_int(t) ? SType::Int : SType::Real, {a});
    n.dtype = t;
    return intern(std::move(n));
}
Expr make_idiv(Expr a, Expr b) { return intern(node(Kind::IDiv, SType::Int, {a, b})); }
Expr make_mod(Expr a, Expr b) { return intern(node(Kind::Mod, SType::Int, {a, b})); }

Expr make_reduce(ReduceOp op, std::vector<Expr> axes, std::vector<Expr> extents, Expr body, int64_t k) {
    RF_INTERNAL_ASSERT(!axes.empty() && axes.size() == extents.size()) << "bad reduce axes";
    std::vector<Expr> args;
    args.push_back(body);
    for (Expr a : axes) args.push_back(a);
    SType t = (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) ? SType::Int : SType::Real;
    if (op == ReduceOp::Sum || op == ReduceOp::Prod || op == ReduceOp::Max || op == ReduceOp::Min)
        t = body->stype == SType::Int ? SType::Int : SType::Real;
    Node n = node(Kind::Reduce, t, std::move(args));
    n.rop = op;
    n.k = k;
    n.extents = std::move(extents);
    return intern(std::move(n));
}

Expr with_args(Expr e, std::vector<Expr> args) {
    if (args == e->args) return e;
    Node n = *e;
    n.args = std::move(args);
    n.hash = 0;
    n.id = 0;
    if (n.kind == Kind::Add || n.kind == Kind::Mul || n.kind == Kind::Min || n.kind == Kind::Max ||
        n.kind == Kind::Sub)
        n.stype = join_numeric(n.args);
    if (n.kind == Kind::Select) n.stype = join_numeric({n.args[1], n.args[2]});
    if (n.kind == Kind::Neg) n.stype = n.args[0]->stype == SType::Int ? SType::Int : SType::Real;
    if (n.kind == Kind::Add || n.kind == Kind::Mul) {
        if (n.args.size() == 1) return n.args[0];
    }
    return intern(std::move(n));
}

// ---------------------------------------------------------------------------------------------
// Order

int compare_exprs(Expr a, Expr b) {
    if (a == b) return 0;
    auto cmp = [](auto x, auto y) { return x < y ? -1 : (y < x ? 1 : 0); };
    if (int c = cmp(static_cast<int>(a->kind), static_cast<int>(b->kind))) return c;
    if (int c = cmp(static_cast<int>(a->stype), static_cast<int>(b->stype))) return c;
    if (a->kind == Kind::Const) {
        if (int c = cmp(a->value, b->value)) return c;
        return cmp(std::signbit(a->value), std::signbit(b->value));
    }
    if (int c = a->name.compare(b->name)) return c < 0 ? -1 : 1;
    if (int c = cmp(static_cast<int>(a->func), static_cast<int>(b->func))) return c;
    if (int c = cmp(static_cast<int>(a->cmp), static_cast<int>(b->cmp))) return c;
    if (int c = cmp(static_cast<int>(a->rop), static_cast<int>(b->rop))) return c;
    if (int c = cmp(static_cast<int>(a->role), static_cast<int>(b->role))) return c;
    if (int c = cmp(static_cast<int>(a->dtype), static_cast<int>(b->dtype))) return c;
    if (int c = cmp(a->k, b->k)) return c;
    if (int c = cmp(a->args.size(), b->args.size())) return c;
    for (size_t i = 0; i < a->args.size(); i++)
        if (int c = compare_exprs(a->args[i], b->args[i])) return c;
    if (int c = cmp(a->extents.size(), b->extents.size())) return c;
    for (size_t i = 0; i < a->extents.size(); i++)
        if (int c = compare_exprs(a->extents[i], b->extents[i])) return c;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Traversal

void visit(Expr e, const std::function<void(Expr)> &f) {
    std::unordered_set<Expr> seen;
    std::vector<Expr> stack{e};
    while (!stack.empty()) {
        Expr n = stack.back();
        stack.pop_back();
        if (!seen.insert(n).second) continue;
        f(n);
        for (auto it = n->args.rbegin(); it != n->args.rend(); ++it) stack.push_back(*it);
        for (Expr x : n->extents) stack.push_back(x);
    }
}

bool any_of(Expr e, const std::function<bool(Expr)> &pred) {
    bool found = false;
    visit(e, [&](Expr n) {
        if (!found && pred(n)) found = true;
    });
    return found;
}

Expr substitute(Expr e, const std::function<Expr(Expr)> &f) {
    std::unordered_map<Expr, Expr> memo;
    std::function<Expr(Expr)> go = [&](Expr n) -> Expr {
        auto it = memo.find(n);
        if (it != memo.end()) return it->second;
        Expr r = f(n);
        if (!r) {
            std::vector<Expr> args;
            args.reserve(n->args.size());
            for (size_t i = 0; i < n->args.size(); i++) {
                // Reduction axes are binders, not uses: keep them.
                if (n->kind == Kind::Reduce && i > 0) args.push_back(n->args[i]);
                else args.push_back(go(n->args[i]));
            }
            r = with_args(n, std::move(args));
        }
        memo[n] = r;
        return r;
    };
    return go(e);
}

Expr substitute(Expr e, Expr from, Expr to) {
    return substitute(e, [&](Expr n) -> Expr { return n == from ? to : nullptr; });
}

bool mentions(Expr e, const std::string &name) {
    return any_of(e, [&](Expr n) { return (n->kind == Kind::Var || n->kind == Kind::Load) && n->name == name; });
}

}  // namespace rf
