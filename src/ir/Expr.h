/** \file Expr.h
 * The scalar expression IR: small immutable nodes, hash-consed inside an arena so that structural
 * equality is pointer equality. One node type with a kind tag (like tinygrad's UOp): the kind says
 * how to read `args` and the payload fields, documented per kind below.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/DType.h"

namespace rf {

/** What kind of scalar a node produces. Index arithmetic is Int, data is Real, conditions Bool. */
enum class SType : uint8_t { Real, Int, Bool };

/** The only macro-like list in the IR: the node kinds. */
enum class Kind : uint8_t {
    Const,   ///< number `value`; SType Real or Int (Int when the value is an integer index constant)
    Var,     ///< named scalar `name`: an index variable, a size, or an analysis symbol (see VarRole)
    Load,    ///< element of tensor `name` at `args` (one index expression per dimension)
    Add,     ///< n-ary sum of args (n >= 2)
    Sub,     ///< args[0] - args[1], as written (kept for the spec's literal semantics)
    Mul,     ///< n-ary product of args (n >= 2)
    Div,     ///< args[0] / args[1], real division (kept for the spec's literal semantics)
    Neg,     ///< -args[0]
    Pow,     ///< args[0] ^ args[1]
    Call,    ///< element-wise function `func` applied to args
    Min,     ///< min(args[0], args[1])
    Max,     ///< max(args[0], args[1])
    Select,  ///< args[1] if args[0] else args[2]
    Cmp,     ///< args[0] `cmp` args[1] (Bool)
    And,     ///< args[0] and args[1] (Bool)
    Or,      ///< args[0] or args[1] (Bool)
    Not,     ///< not args[0] (Bool)
    Cast,    ///< round args[0] to `dtype` (round-to-nearest-even, saturating)
    IDiv,    ///< floor(args[0] / args[1]) on integers (index arithmetic)
    Mod,     ///< args[0] - args[1] * floor(args[0] / args[1]) on integers (index arithmetic)
    Reduce,  ///< reduction `rop` of args[0] (the body) over the axes args[1..]: each axis is a Var
             ///< whose extent is `extents[i]`; `k` is the k of top-k. The value is the reduced value
             ///< (for argmax/argmin: the index; for top-k: see TensorDef, never nested).
};

enum class Func : uint8_t { exp, exp2, log, log2, sqrt, rsqrt, abs, tanh, sigmoid, round, floor, ceil };
enum class CmpOp : uint8_t { LT, LE, GT, GE, EQ, NE };
enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, TopK };
/** Role of a Var: an index variable of a definition or reduction, a size symbol, or a symbol
 *  introduced by the analysis (x/d atoms, state slots). */
enum class VarRole : uint8_t { Index, Size, Symbol };

const char *func_name(Func f);
const char *cmp_name(CmpOp c);
const char *reduce_name(ReduceOp r);

struct Node;
/** A handle to an interned node. Two handles are structurally equal iff the pointers are equal. */
using Expr = const Node *;

struct Node {
    Kind kind;
    SType stype;
    Func func = Func::exp;          // Call
    CmpOp cmp = CmpOp::LT;          // Cmp
    ReduceOp rop = ReduceOp::Sum;   // Reduce
    VarRole role = VarRole::Index;  // Var
    DType dtype = DType::f64;       // Cast; for Load the element type of the tensor
    int64_t k = 0;                  // Reduce TopK
    double value = 0;               // Const
    std::string name;               // Var, Load
    std::vector<Expr> args;         // children
    std::vector<Expr> extents;      // Reduce: extent of each axis (args[1 + i])
    size_t hash = 0;
    uint32_t id = 0;                // creation order inside the arena (a stable tiebreak)

    bool is(Kind k_) const { return kind == k_; }
    bool is_const() const { return kind == Kind::Const; }
    bool is_const(double v) const { return kind == Kind::Const && value == v; }
    Expr body() const { return args[0]; }                 // Reduce
    size_t num_axes() const { return args.size() - 1; }    // Reduce
    Expr axis(size_t i) const { return args[1 + i]; }      // Reduce
};

/** Results a layer above the IR memoises per arena (the symbolic engine's tables, sym/SymCache.h).
 *  They key on node addresses, so they are only meaningful for the arena that made those nodes: the
 *  arena owns them and destroys them with its nodes. */
class ArenaMemo {
public:
    virtual ~ArenaMemo() = default;
};
using ArenaMemoFactory = std::unique_ptr<ArenaMemo> (*)();

/** Owns interned nodes. Every node is created through the current arena of the calling thread;
 *  an ArenaScope makes a fresh arena current for its lifetime (one per compilation or fuzz input),
 *  otherwise a process-wide default arena is used. Nodes must not outlive their arena. */
class Arena {
public:
    Arena();
    ~Arena();
    Arena(const Arena &) = delete;
    Arena &operator=(const Arena &) = delete;
    Expr intern(Node &&n);
    size_t size() const;
    /** The calling thread's memo of kind `make` for this arena, made by `make` on first use. One per
     *  thread because the default arena is shared by every thread without an ArenaScope; the memo is
     *  then used by its thread alone, without locks. Destroyed with the arena (the default arena's
     *  memos of finished threads stay until the process ends, as its nodes do; a thread that reuses a
     *  finished thread's id takes its memo over, which is still right for this arena's nodes).
     *  `make` runs under the arena's lock, so it must not intern nodes. */
    ArenaMemo &thread_memo(ArenaMemoFactory make);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

Arena &current_arena();

/** Makes an existing arena current on this thread for its lifetime: a Kernel owns the arena its
 *  compilation was built in and uses it for each call, whatever thread calls. */
class ArenaUse {
public:
    explicit ArenaUse(Arena &a);
    ~ArenaUse();
    ArenaUse(const ArenaUse &) = delete;
    ArenaUse &operator=(const ArenaUse &) = delete;

private:
    Arena *previous_;
};

class ArenaScope {
public:
    ArenaScope();
    ~ArenaScope();
    Arena &arena() { return arena_; }

private:
    Arena arena_;
    Arena *previous_;
};

// ---- Constructors. These build nodes exactly as asked (no simplification beyond nothing):
// the simplifier lives in sym/. Argument checks that indicate compiler bugs throw InternalError.
Expr make_const(double v, SType t = SType::Real);
Expr make_int(int64_t v);
Expr make_bool(bool v);
Expr make_var(const std::string &name, VarRole role, SType t);
Expr make_index(const std::string &name);  // VarRole::Index, SType::Int
Expr make_size(const std::string &name);   // VarRole::Size, SType::Int
Expr make_symbol(const std::string &name);  // VarRole::Symbol, SType::Real
Expr make_load(const std::string &tensor, std::vector<Expr> indices, DType element_type, SType t);
Expr make_add(std::vector<Expr> args);  // n-ary; 1 arg returns it
Expr make_add(Expr a, Expr b);
Expr make_sub(Expr a, Expr b);
Expr make_mul(std::vector<Expr> args);
Expr make_mul(Expr a, Expr b);
Expr make_div(Expr a, Expr b);
Expr make_neg(Expr a);
Expr make_pow(Expr a, Expr b);
Expr make_call(Func f, Expr a);
Expr make_min(Expr a, Expr b);
Expr make_max(Expr a, Expr b);
Expr make_select(Expr c, Expr a, Expr b);
Expr make_cmp(CmpOp op, Expr a, Expr b);
Expr make_and(Expr a, Expr b);
Expr make_or(Expr a, Expr b);
Expr make_not(Expr a);
Expr make_cast(DType t, Expr a);
Expr make_idiv(Expr a, Expr b);
Expr make_mod(Expr a, Expr b);
Expr make_reduce(ReduceOp op, std::vector<Expr> axes, std::vector<Expr> extents, Expr body, int64_t k = 0);

/** Rebuilds `e` with new children (same kind and payload). Returns e when the children are the same. */
Expr with_args(Expr e, std::vector<Expr> args);

/** A total order on nodes that is stable across runs (kind, payload, then children), used to sort
 *  the operands of commutative nodes into a canonical order. */
int compare_exprs(Expr a, Expr b);
struct ExprLess {
    bool operator()(Expr a, Expr b) const { return compare_exprs(a, b) < 0; }
};

/** Stable text form, the basis of golden tests: infix with minimal parentheses. */
std::string to_string(Expr e);

// ---- Traversal helpers.
/** Calls f on every node of e (pre-order; shared subtrees visited once). */
void visit(Expr e, const std::function<void(Expr)> &f);
/** True when some node satisfies pred. */
bool any_of(Expr e, const std::function<bool(Expr)> &pred);
/** Replaces, bottom-up, every node n for which f(n) returns non-null by that result. The Reduce
 *  axes of a replaced subtree are not descended into. */
Expr substitute(Expr e, const std::function<Expr(Expr)> &f);
/** Replaces every occurrence of `from` (pointer equality) by `to`. */
Expr substitute(Expr e, Expr from, Expr to);
/** True when e contains a Var with the given name (any role) or a Load of that tensor. */
bool mentions(Expr e, const std::string &name);

}  // namespace rf
