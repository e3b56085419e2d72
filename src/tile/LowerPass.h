/** \file LowerPass.h
 * Internal: lowering of one chain pass (the running states, per-tile updates, merges of segment
 * states, finalization and stores) to a tile IR kernel body.
 */
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fuse/Plan.h"
#include "tile/TileIR.h"

namespace rf::tile {

/** A sum computed inside another chain's kernel, reduced over that chain's row variable rather than
 *  its axis (LowerRowReduced.cpp). Its chain sweeps the same tiles with a transposed prologue:
 *  dQ[b,h,i,d] = Σ_j K[b,h,j,d]·dS[b,h,i,j] rides along the dK/dV chain (rows b,h,j; axis i), whose
 *  tiles already hold dS, as one more tile GEMM, instead of a kernel that recomputes dS. */
struct RowReducedMember {
    const TensorDef *def = nullptr;
    /** Definition var name -> the host's loop slot (k < n_row: row var k; n_row: the axis). The
     *  member's own reduction variable sits at the host's last row slot. */
    std::map<std::string, size_t> slot_of;
    Expr extra = nullptr;       ///< the one var the host's loops do not bind (the GEMM's N; last dim)
    std::string partial;        ///< the float buffer of its partial sums
};

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
    /** Sums reduced over this chain's row variable, computed in its tiles (single segment only). */
    std::vector<RowReducedMember> row_reduced;
    /** Worker copies of the partial sums when there are fewer outer rows than this (see
     *  LowerRowReduced.cpp): the workers the kernel is built for. */
    int row_reduced_workers = 1;
    /** LowerOptions::tile_row_pad. */
    int64_t tile_row_pad = 8;
    /** LowerOptions::epilogue_row_buffer. */
    bool epilogue_row_buffer = false;
};

struct PassKernel {
    StmtP body;
    Expr scratch_elements = nullptr;  ///< elements of the scratch buffer (multi-segment), else null
};

PassKernel lower_pass(const PassContext &ctx);
/** The on-chip multi-pass kernel body: every pass of a chain on one row before the next row. */
StmtP lower_onchip_rows(const std::vector<PassContext> &passes);

/** Which chains run inside which (LowerRowReduced.cpp): the row-reduced members of each host chain
 *  (by chain index; their `partial` buffers still to be named), and the chains they replace. */
struct RowReducedChoice {
    std::map<size_t, std::vector<RowReducedMember>> by_host;
    std::set<size_t> absorbed;
};
/** prologues: per-tile prologue -> chain index -> slots (PassContext::tile_prologues). Chooses, among
 *  the pairs that qualify, those with the smallest partial sums first. */
RowReducedChoice choose_row_reduced(const std::vector<ChainPlan> &chains,
                                    const std::map<std::string, std::map<size_t, std::vector<size_t>>> &prologues,
                                    const Program &p, const struct LowerOptions &o);
/** The host's tile with row-reduced members: halved (down to 256) until each row block's tile × X
 *  block of partial sums fits L2 (twice LowerOptions::fast_memory_bytes). */
int64_t row_reduced_tile(int64_t tile, const std::vector<RowReducedMember> &members, const struct LowerOptions &o);
/** The product of extents at the bound sizes; nullopt when one of them names an unbound size. */
std::optional<int64_t> known_product(const std::vector<Expr> &extents, const SizeBinding &sizes);

/** The elements of a row-reduced member's partial-sum buffer: its own size, times the workers when
 *  the host's outer rows are fewer than the workers (each worker then sums into its own copy). */
Expr row_reduced_partial_elements(const RowReducedMember &r, const ChainPlan &host, const Program &p, int workers);

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
