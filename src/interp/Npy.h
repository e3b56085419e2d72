/** \file Npy.h
 * NumPy .npy files (format versions 1.0, 2.0 and 3.0, little endian, C order): how `run --save`
 * and `run --load` exchange tensors with Python.
 */
#pragma once

#include <map>
#include <string>

#include "interp/Tensor.h"
#include "ir/Program.h"

namespace rf {

/** Writes `t`: f64 as '<f8'; every narrower float (f32, f16, bf16, f8*) as '<f4', which holds their
 *  values exactly; i8/i32/i64 as '|i1'/'<i4'/'<i8' (values rounded and saturated to the width).
 *  UserError naming the file when it cannot be written. */
void save_npy(const std::string &path, const Tensor &t);

/** Reads a file written by NumPy or save_npy. Supported element types: '<f8' '<f4' '<f2' '<i8' '<i4'
 *  '|i1' (the tensor's dtype says which). Every malformed input (bad magic, bad header, Fortran
 *  order, big endian or unsupported type, absurd shape, truncated or trailing data) is a UserError
 *  naming the file, never a crash. */
Tensor load_npy(const std::string &path);

/** Parses .npy bytes already in memory; `name` is used in messages. */
Tensor parse_npy(const std::string &bytes, const std::string &name);
/** The bytes save_npy writes. */
std::string encode_npy(const Tensor &t);

/** Writes every tensor as `<dir>/<NAME>.npy`, creating dir if needed. */
void save_dir(const std::string &dir, const std::map<std::string, Tensor> &tensors);

/** Loads `<dir>/<NAME>.npy` for every input of `p`, checks its shape against the bound sizes and
 *  rounds its values to the declared dtype (what a kernel fed that dtype sees). UserError naming
 *  the file on a missing file or a wrong shape. */
std::map<std::string, Tensor> load_dir(const std::string &dir, const Program &p, const SizeBinding &sizes);

}  // namespace rf
