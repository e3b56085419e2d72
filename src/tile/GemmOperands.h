/** \file GemmOperands.h
 * Internal to src/tile: how a GEMM operand is read off a load over a block of rows, shared by the
 * member GEMMs of the lowering (LowerGemm.cpp) and the GEMM recognition pass (RecognizeGemms.cpp).
 */
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tile/TileIR.h"

namespace rf::tile::gemm_operands {

/** The rows of a block as the lowering writes them: row = rbase + rr for rr in [0, $nbv), nb rows
 *  at most (the schedule's row block). */
struct Rows {
    Expr rr;      ///< the row-of-block loop variable ($rr, or its renamed copy)
    Expr rbase;   ///< $rbase, the block's first row
    Expr row;     ///< rbase + rr, as the translated expressions hold it
    int64_t nb;   ///< rows per block
};

/** The dimension of `load` whose index is exactly v (v = rr also matches rbase + rr); -1 when no
 *  index mentions v, -2 when v appears in an index in another form or in two indices. */
int dim_of(Expr load, Expr v, const Rows &r);

/** When every use of the block's row in e is floor((rbase + rr) / G) — GQA: the KV head of a
 *  query head — the divisor G (then a block of rows aligned to G shares the operand); else null. */
Expr group_divisor(Expr e, const Rows &r);

/** e with floor((rbase + rr) / G) replaced by floor(rbase / G): valid when G % nb == 0. */
Expr grouped(Expr e, Expr G, const Rows &r);

/** Runs `block` when G is a multiple of the block (every row of the block shares the operand),
 *  else `rows` (one GEMV per row). */
StmtP when_grouped(Expr G, const Rows &r, StmtP block, StmtP rows);

/** The element stride of dimension d of a row-major tensor of extents dims: the later extents' product. */
Expr stride(const std::vector<Expr> &dims, int d);

/** A global f32/bf16 load, possibly widened by a cast to f32/f64 (bf16 → float is exact); else null. */
Expr operand(Expr e);

/** t = F · C where C is the one factor of the product t that reads `var`: {F, C}, F the product of
 *  the other factors; nullopt when t is not a product, no factor or two read `var`, or none does not. */
std::optional<std::pair<Expr, Expr>> split_factor(Expr t, const std::string &var);

/** load with every index that is a key of `to` replaced by its value, and rbase + rr by rbase. */
Expr at_origin(Expr load, const std::map<Expr, Expr> &to, const Rows &r);

}  // namespace rf::tile::gemm_operands
