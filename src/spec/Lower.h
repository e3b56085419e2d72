/** \file Lower.h
 * From checked definitions (reductions nested anywhere, element-wise definitions referenced by
 * loads) to the Program form of ir/Program.h: outermost non-top-level reductions are lifted into
 * their own definitions and element-wise definitions are inlined into their users.
 */
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/Program.h"

namespace rf::spec {

/** Size guards for IR built from user text (see Limits.h): depth and tree size of expressions
 *  (memoized over the DAG) and the total number of nodes the spec has created. */
class IrLimits {
public:
    IrLimits();
    int depth(Expr e);
    int64_t tree_size(Expr e);
    /** UserError at loc when e is too deep or too large; `what` names it ("definition 'Y'"). */
    void check(Expr e, SourceLoc loc, const std::string &what);
    /** UserError at loc when the spec has created more than kMaxIrNodes nodes. */
    void check_budget(SourceLoc loc) const;

private:
    size_t start_;
    std::unordered_map<Expr, int> depth_;
    std::unordered_map<Expr, int64_t> size_;
};

class Lowerer {
public:
    explicit Lowerer(IrLimits &limits) : limits_(limits) {}
    /** Adds the next definition in source order. Its loads name inputs or earlier definitions. */
    void add(const TensorDef &def);
    /** The final definitions: element-wise ones survive only when they are outputs. */
    std::vector<TensorDef> finish(const std::vector<OutputDecl> &outputs) const;

private:
    Expr inline_elementwise(Expr body, const TensorDef &def);
    Expr lift(TensorDef &def, std::vector<TensorDef> &lifted);
    const std::vector<std::string> &free_vars(Expr e);

    IrLimits &limits_;
    std::vector<TensorDef> defs_;
    std::vector<bool> elementwise_;
    std::unordered_map<std::string, size_t> inline_;  // element-wise definition -> index in defs_
    std::unordered_map<Expr, std::vector<std::string>> free_;
};

}  // namespace rf::spec
