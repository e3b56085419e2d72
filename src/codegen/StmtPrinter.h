/** \file StmtPrinter.h
 * The statement printer the CPU backend (CpuKernelPrinter.cpp) and the GPU backend's one-thread context
 * (CodeGen_GPU.cpp) share: one dispatch over the statement kinds, the forms both print alike, and a
 * hook per kind for what differs. Internal to src/codegen.
 */
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "tile/TileIR.h"

namespace rf::codegen {

class StmtPrinter {
public:
    virtual ~StmtPrinter() = default;

protected:
    /** The stream statements go to. */
    virtual std::ostream &out() = 0;
    /** The stream at indentation ind (four spaces a level). */
    std::ostream &pad(int ind);

    /** Prints s at indentation ind: the hook of its kind. */
    void print_stmt(const tile::StmtP &s, int ind);
    /** The statements of a list in order. */
    virtual void print_list(const std::vector<tile::StmtP> &list, int ind);

    /** A branch condition as C. */
    virtual std::string condition(Expr cond) = 0;

    // ---- Printed alike by default.
    /** The children in order, no braces of their own. */
    virtual void print_block(const tile::StmtP &s, int ind) { print_list(s->body, ind); }
    /** A line comment (the text is sanitized for C). */
    virtual void print_comment(const tile::StmtP &s, int ind);
    /** if (c) { then } [else { else }] */
    virtual void print_if(const tile::StmtP &s, int ind);

    // ---- Each backend's own.
    virtual void print_for(const tile::StmtP &s, int ind) = 0;
    virtual void print_decl(const tile::StmtP &s, int ind) = 0;
    virtual void print_assign(const tile::StmtP &s, int ind) = 0;
    virtual void print_accum(const tile::StmtP &s, int ind) = 0;
    virtual void print_arg_select(const tile::StmtP &s, int ind) = 0;
    virtual void print_topk_insert(const tile::StmtP &s, int ind) = 0;
    virtual void print_poly_shift(const tile::StmtP &s, int ind) = 0;
    virtual void print_gemm(const tile::StmtP &s, int ind) = 0;
    virtual void print_store(const tile::StmtP &s, int ind) = 0;
    virtual void print_copy_row(const tile::StmtP &s, int ind) = 0;
    /** A hint, without effect on values: a printer without one prints nothing. */
    virtual void print_prefetch(const tile::StmtP &, int) {}
    /** Only the CPU lowering defers row copies (DeferRowCopies.cpp). */
    virtual void print_finish_copies(const tile::StmtP &, int);
};

}  // namespace rf::codegen
