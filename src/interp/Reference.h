/** \file Reference.h
 * The float64 reference interpreter: runs a spec literally and unfused, one definition after the
 * other, with the scalar semantics of ir/Eval.h. It is the oracle every plan and backend is
 * checked against (docs/design.md §6).
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "interp/Tensor.h"
#include "ir/Eval.h"
#include "ir/Program.h"

namespace rf {

/** Value of an extent expression (over size Vars) at the given sizes. UserError when a size is
 *  unbound or an index division is by zero. Unlike eval_int it needs nothing from Program.cpp. */
int64_t eval_extent(Expr e, const SizeBinding &sizes);

/** Top-k order of (value, index) pairs: larger first, NaN above everything, ties by lower index. */
bool topk_before(const std::pair<double, int64_t> &a, const std::pair<double, int64_t> &b);

/** Ranks the body of top-k reduction `red` at every point of its reduced axes (extents `red_shape`,
 *  row-major; the flattened index is the tie order) into `cand`, its first k entries in topk_before
 *  order. `ev` binds everything the body reads but the reduced axes, which it leaves bound. */
void rank_topk_candidates(Evaluator &ev, Expr red, const std::vector<int64_t> &red_shape, int64_t k,
                          std::vector<std::pair<double, int64_t>> &cand);

/** Shape of an input, or of a definition's index space, at the given sizes (UserError when an
 *  extent is < 1 or the element count exceeds 2^40). */
std::vector<int64_t> input_shape(const InputDecl &in, const SizeBinding &sizes);
std::vector<int64_t> def_shape(const TensorDef &d, const SizeBinding &sizes);

/** Runs every definition of `p` in order and returns every tensor by name: the inputs (rounded to
 *  their declared dtypes, since a bf16 input *is* a bf16 value whatever the caller passed), every
 *  definition including lifted ones such as `O.sum`, and for top-k definitions both the values
 *  (under `name`) and the indices (under `index_name`). All results have dtype f64 and are not
 *  rounded to any output dtype (see round_output); integer-valued results (argmax, top-k indices)
 *  hold integral doubles.
 *
 *  Top-k: the k largest values of the body along the reduced axes, in descending order; equal values
 *  go lower flattened index first; NaN ranks above +inf (like torch.topk), NaNs among themselves by
 *  index. k larger than the number of reduced elements is a UserError.
 *
 *  Inputs must all be present with the bound shapes (UserError otherwise); extra entries are
 *  ignored. An index out of bounds in a load is a UserError at the definition, and so is a
 *  definition of more than 2^31 elements (the reference is for test-sized problems). */
std::map<std::string, Tensor> run_reference(const Program &p, const SizeBinding &sizes,
                                            const std::map<std::string, Tensor> &inputs);

/** Rounds every element to `d` (round_to_dtype) and tags the result with `d`. */
Tensor round_output(const Tensor &t, DType d);

/** Evaluates one top-k definition on `results` (the tensors it reads), writing its values and its
 *  indices (larger first, NaN above everything, ties to the lower index). */
void run_topk(const TensorDef &d, const SizeBinding &sizes, std::map<std::string, Tensor> &results);

/** The declared outputs of `p` taken from the results of run_reference, each rounded to its
 *  declared output dtype: what a kernel must produce. */
std::map<std::string, Tensor> reference_outputs(const Program &p, const std::map<std::string, Tensor> &results);

}  // namespace rf
