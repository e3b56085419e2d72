/** \file LowerPass.h
 * Internal: lowering of one chain pass (the running states, per-tile updates, merges of segment
 * states, finalization and stores) to a tile IR kernel body.
 */
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "fuse/Plan.h"
#include "tile/TileIR.h"

namespace rf::tile {

struct PassContext {
    const Program *program = nullptr;
    const ChainPlan *chain = nullptr;
    const PassPlan *pass = nullptr;
    Schedule schedule;
    /** Prologue definitions computed per tile inside this kernel (else they are read from buffers),
     *  each with the slot of every definition var: k < n_row is row var k, n_row + a is axis a. */
    std::map<std::string, std::vector<size_t>> tile_prologues;
    /** Element-wise definitions computed per row at the end of this kernel, in order. */
    std::vector<const TensorDef *> epilogues;
    std::string scratch_buffer;  ///< for multi-segment: the buffer holding segment states
    /** Member name -> element-wise definition whose body contains the member's term: the update
     *  stores each term into that definition's buffer, and the epilogue reads it back instead of
     *  recomputing it (softmax: exp(X - m) computed once per element). */
    std::map<std::string, std::string> term_store;  ///< a '$' target is a per-row float buffer
    std::string term_reader;
    /** f32 outputs nobody reads back: the epilogue writes them a row at a time (streamed when large). */
    std::set<std::string> row_outputs;  ///< with a row buffer: the element-wise definition that reads it
};

struct PassKernel {
    StmtP body;
    Expr scratch_elements = nullptr;  ///< elements of the scratch buffer (multi-segment), else null
};

PassKernel lower_pass(const PassContext &ctx);
/** The on-chip multi-pass kernel body: every pass of a chain on one row before the next row. */
StmtP lower_onchip_rows(const std::vector<PassContext> &passes);

/** Local and loop-variable constructors shared by the lowering files. */
Expr local_var(const std::string &name, SType t = SType::Real);
Expr local_at(const std::string &name, Expr index, SType t = SType::Real);
Expr int_c(int64_t v);
Expr real_c(double v);
/** The flat index of `indices` in a row-major array of `extents`. */
Expr flatten(const std::vector<Expr> &indices, const std::vector<Expr> &extents);
/** The i-th coordinate of `flat` in a row-major array of `extents`. */
Expr unravel(Expr flat, const std::vector<Expr> &extents, size_t i);
Expr product(const std::vector<Expr> &v);
/** |v| < inf: false for infinities and NaN. */
Expr is_finite(Expr v);

}  // namespace rf::tile
