/** \file CpuExp2Rows.h
 * Which exp2 calls of a float vector loop the CPU printer computes a row at a time through
 * rfk::exp2_row / rfk::exp2_affine_row (redfuse_cpu_rows.h) instead of inline.
 */
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/Expr.h"
#include "tile/TileIR.h"

namespace rf::cpu_exp2 {

/** True when i = var + (terms without var), or var − (terms without var): distinct iterations of the
 *  loop over var give distinct i, consecutive iterations consecutive elements. */
bool offset_of_loop_var(Expr i, Expr var);

/** The exp2 calls of a float vector loop that can be computed ahead of its body, in a pass of their
 *  own through rfk::exp2_row (the printer's print_staged_exp2): distinct arguments (pointer equality
 *  is structural equality) that read nothing the body writes — but the element an in-place
 *  element-wise rewrite writes in the same iteration — and hold no nested reduction; up to four.
 *  None when the body holds anything but assignments and accumulations into locals. A loop storing
 *  to a global buffer keeps the inline exp2_f: f32 softmax writes its output in the exp2 loop, the
 *  first touch of those lines (read for ownership from DRAM), which the inline polynomial overlaps
 *  and a staged loop turns into a burst of stalled stores (AMD Zen 4, 1 thread, [1024, 4096], noisy
 *  runs: 2.6-3.6 ms inline, 2.7-4.3 ms staged in strips of 1024). */
std::vector<Expr> stageable_exp2_args(const tile::StmtP &loop);

/** A float vector loop whose only statement is `T[i(j)] = exp2(arg)`, T a float tile array and
 *  i(j) = j + (terms without j), with arg stageable (it reads T at most at i(j)). Its row is
 *  T[i(begin) .. i(begin) + (end − begin)), written in place:
 *  - affine: arg = X[k(j)] · a + b with X a float tile array, k(j) = j + (terms without j), and a, b
 *    (either may be absent) free of j and of T: T[i(j)] = 2^(X[k(j)] · a + b), one fused pass
 *    (rfk::exp2_affine_row; the product and the sum become one fused multiply-add, and a product of
 *    several invariant factors is formed once: each within an ulp of the inline form's rounding);
 *  - otherwise: the argument is written into T, then rfk::exp2_row(T) (no staging array, no copy). */
struct Exp2RowInPlace {
    Expr target;  ///< the Load T[i(j)]
    Expr arg;     ///< the exp2 argument
    Expr source;  ///< affine: the Load X[k(j)]; null otherwise
    Expr scale;   ///< affine: a, or null for 1
    Expr offset;  ///< affine: b, or null for 0
};
std::optional<Exp2RowInPlace> exp2_row_in_place(const tile::StmtP &loop,
                                                const std::function<bool(const std::string &)> &is_float_tile);

/** A float vector loop whose statements are at most one `t += exp2(arg)` or `t += exp2(arg) + d` (t a
 *  scalar local, d free of j) and at most one `T[i(j)] = exp2(arg)` (T a float tile array, i(j) = j +
 *  (terms without j)), one of them at least, with arg stageable and of the form (S[k(j)] + c) · a — c
 *  and a free of j, either absent, each node binary so that the order of the roundings is the one
 *  printed — where S[k(j)] is a row element (`is_row`: a float tile array, or a float or bf16 buffer)
 *  whose last index is j + (terms without j) and whose other indices are free of j. The printer calls
 *  rfk::exp2_row_sum for it: one pass instead of the staged three (softmax's exp loop: its sum and the
 *  row of terms its epilogue reads). */
struct Exp2RowSum {
    Expr source;        ///< the Load S[k(j)]
    Expr shift;         ///< c, or null for 0
    Expr scale;         ///< a, or null for 1
    Expr sum_target;    ///< t, or null
    Expr sum_offset;    ///< d, or null for 0
    Expr store_target;  ///< the Load T[i(j)], or null
};
std::optional<Exp2RowSum> exp2_row_sum(const tile::StmtP &loop, const std::function<bool(const std::string &)> &is_float_tile,
                                       const std::function<bool(const std::string &)> &is_row);

/** A float vector loop whose only statement is `t = max(t, S[k(j)] · c)` or the min (an Accum of a
 *  scalar local t; c free of j and of t, binary product, or absent), S[k(j)] a row element as for
 *  Exp2RowSum. The printer calls rfk::row_max / row_min for it: the reduction without a per-element
 *  NaN flag (softmax's max pass over a bf16 row, 32 elements per integer max; attention's over its
 *  scaled score tile; see redfuse_cpu_rows.h). Same file as the exp2 rows: the same row test. */
struct RowExtreme {
    Expr source;  ///< the Load S[k(j)]
    Expr scale;   ///< c, or null for 1
    Expr target;  ///< t
    bool max;     ///< max, else min
};
std::optional<RowExtreme> row_extreme(const tile::StmtP &loop, const std::function<bool(const std::string &)> &is_row);

/** A float vector loop whose only statement is `t += S[k(j)]` (an Accum of a scalar local t, S[k(j)] a
 *  row element as for Exp2RowSum, unscaled). The printer calls rfk::row_sum for it: the `omp simd`
 *  reduction's partial sums combine in a tree instead of GCC's 16 dependent scalar adds from the stack
 *  (attention's row sum over each exp tile: 16 of them per 256 columns of vector adds). A reduction's
 *  order is the implementation's choice either way. */
struct RowSum {
    Expr source;  ///< the Load S[k(j)]
    Expr target;  ///< t
};
std::optional<RowSum> row_sum(const tile::StmtP &loop, const std::function<bool(const std::string &)> &is_row);

/** Whether every load of the loop's statements that reads its variable j reads consecutive elements:
 *  its last index j + (terms without j), its other indices free of j (the loop's vector loads are whole
 *  vectors, no gathers). */
bool unit_stride_loads(const tile::StmtP &loop);

}  // namespace rf::cpu_exp2
