/** \file Pointwise.h
 * Element-wise definitions evaluated fast: the body compiled once into a tree of closures over
 * the tensors it loads (each at the definition's own variables or constants), with the language's
 * semantics of ir/Eval.h (the same eval_sub, eval_div, eval_func). Used where an interpreter writes
 * millions of elements of an epilogue (finalizing exported states: O = O.sum / l); bodies it does
 * not cover (gathers, reductions, index arithmetic in loads) are left to the Evaluator.
 */
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "interp/Tensor.h"
#include "ir/Program.h"

namespace rf {

/** The value of `d` at a multi-index of its variables. */
using PointwiseFn = std::function<double(const int64_t *idx)>;

/** `d`'s body as a PointwiseFn over `tensors` (float64 semantics), or nullopt when it holds a node
 *  the compiler leaves to the Evaluator. The tensors must outlive the function. */
std::optional<PointwiseFn> compile_pointwise(const TensorDef &d, const std::map<std::string, Tensor> &tensors,
                                             const SizeBinding &sizes);

}  // namespace rf
