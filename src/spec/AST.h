/** \file AST.h
 * The syntax tree of a spec exactly as written (before name resolution and typing), with the
 * location of every node so that the checker can point at the offending token.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/DType.h"
#include "spec/Lexer.h"

namespace rf::spec {

enum class AstKind {
    Int,     ///< integer literal `ival`
    Real,    ///< real literal `rval` (also `inf`)
    Name,    ///< a bare identifier `name`
    Load,    ///< `name[args...]`
    Call,    ///< `name(args...)` or, with has_colon, `name(args...: body)` (reductions, top-k)
    Neg,     ///< `-args[0]`
    Not,     ///< `not args[0]`
    Binary,  ///< `args[0] op args[1]` (arithmetic, comparison, and/or)
};

struct AstNode;
using AstPtr = std::unique_ptr<AstNode>;

struct AstNode {
    AstKind kind;
    SourceLoc loc;  ///< the name, literal or operator token
    std::string name;
    int64_t ival = 0;
    double rval = 0;
    Tok op = Tok::Plus;  ///< Binary
    std::vector<AstPtr> args;
    bool has_colon = false;
    AstPtr body;    ///< Call with has_colon: the expression after ':'
    int depth = 1;  ///< height of this subtree (bounded by kMaxNesting)
};

struct SizeItem {
    std::string name;
    SourceLoc loc;
    std::optional<int64_t> value;
};

/** One index variable on a left-hand side: `e` or `e:EXTENT`. */
struct LhsVar {
    std::string name;
    SourceLoc loc;
    AstPtr extent;  // null when inferred
};

/** `NAME` (scalar) or `NAME[vars]`. */
struct Lhs {
    std::string name;
    SourceLoc loc;
    bool has_brackets = false;
    std::vector<LhsVar> vars;
};

struct NameRef {
    std::string name;
    SourceLoc loc;
};

struct Stmt {
    enum Kind { Size, Input, Output, Def } kind;
    SourceLoc loc;                // first token
    std::vector<SizeItem> sizes;  // Size
    NameRef input;                // Input
    bool has_dims = false;        // Input: written with [...]
    std::vector<AstPtr> dims;     // Input
    std::optional<DType> dtype;   // Input, Output
    std::vector<NameRef> names;   // Output
    std::vector<Lhs> lhs;         // Def: one name, or two for top-k
    AstPtr rhs;                   // Def
};

}  // namespace rf::spec
