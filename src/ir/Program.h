/** \file Program.h
 * A checked spec as IR: sizes, inputs, tensor definitions and outputs. The frontend (spec/)
 * produces it; every later stage reads it. Scalar definitions and element-wise tensor definitions
 * that are not outputs are already inlined into their users, so every non-output definition holds
 * a reduction.
 */
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/Expr.h"
#include "support/Error.h"

namespace rf {

struct SizeDecl {
    std::string name;
    std::optional<int64_t> default_value;
    SourceLoc loc;
};

struct InputDecl {
    std::string name;
    std::vector<Expr> dims;  // extents, expressions over size Vars (SType::Int)
    DType dtype = DType::f32;
    SourceLoc loc;
};

/** `name[vars...] = body`. `extents[i]` is the extent of `vars[i]` (an expression over sizes).
 *  For a top-k definition `W[t,r], I[t,r] = topk(e, 8: expr)`, `name` is the values tensor, `index_name`
 *  the indices tensor, the last var is the new k axis (extent k), and body is the TopK Reduce.
 *  Loads inside body name inputs or earlier definitions. */
struct TensorDef {
    std::string name;
    std::string index_name;  // top-k only
    std::vector<Expr> vars;
    std::vector<Expr> extents;
    Expr body = nullptr;
    SType stype = SType::Real;  // Int for argmax/argmin results
    SourceLoc loc;

    bool is_topk() const { return !index_name.empty(); }
    /** True when body is a Reduce at the top (after lifting, every non-output def is). */
    bool is_reduction() const { return body && body->kind == Kind::Reduce; }
};

struct OutputDecl {
    std::string name;
    DType dtype = DType::f32;  // declared, or f32 for reals / i32 for indices by default
    SourceLoc loc;
};

struct Program {
    std::string file;  // for messages
    std::vector<SizeDecl> sizes;
    std::vector<InputDecl> inputs;
    std::vector<TensorDef> defs;  // in dependency order
    std::vector<OutputDecl> outputs;

    const InputDecl *find_input(const std::string &n) const;
    const TensorDef *find_def(const std::string &n) const;  // by name or index_name
    const SizeDecl *find_size(const std::string &n) const;
};

/** Concrete values of the sizes. */
using SizeBinding = std::map<std::string, int64_t>;

/** Binds sizes: explicit values override defaults; a size with neither is a user error. Also checks
 *  that every extent is >= 1 and that no index can read out of bounds at these sizes (interval
 *  evaluation of every index expression), reporting the location of the offending definition. */
SizeBinding bind_sizes(const Program &p, const std::map<std::string, int64_t> &explicit_sizes);

/** Evaluates an integer expression over sizes (IDiv/Mod are floor-based). User error on division by 0. */
int64_t eval_int(Expr e, const SizeBinding &sizes);

/** The stable text dump of a whole program (`--emit ir`). */
std::string to_string(const Program &p);

}  // namespace rf
