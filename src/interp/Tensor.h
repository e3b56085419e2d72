/** \file Tensor.h
 * A dense row-major tensor of doubles tagged with a storage dtype: the currency of the reference
 * interpreter, random inputs, .npy files and output comparison.
 */
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "ir/DType.h"

namespace rf {

/** Row-major values held as doubles whatever the dtype: the dtype says which values are legal
 *  (the values of a bf16 tensor are bf16-representable) and how the tensor is stored on disk.
 *  A rank-0 tensor (empty shape) holds one element. */
struct Tensor {
    std::vector<int64_t> shape;
    std::vector<double> data;
    DType dtype = DType::f64;

    Tensor() = default;
    /** Filled with NaN ("poison"), so an element nobody writes fails every comparison. */
    explicit Tensor(std::vector<int64_t> shape_, DType dtype_ = DType::f64);
    static Tensor filled(std::vector<int64_t> shape_, double value, DType dtype_ = DType::f64);

    int64_t numel() const { return static_cast<int64_t>(data.size()); }
    size_t rank() const { return shape.size(); }
    /** Row-major strides in elements. */
    std::vector<int64_t> strides() const;
    /** Flat offset of a multi-index; InternalError when out of bounds or of the wrong rank. */
    int64_t offset(const int64_t *idx, size_t n) const;
    int64_t offset(std::initializer_list<int64_t> idx) const { return offset(idx.begin(), idx.size()); }
    /** The multi-index of a flat offset (inverse of offset). */
    std::vector<int64_t> unravel(int64_t flat) const;
    double &at(std::initializer_list<int64_t> idx) { return data[static_cast<size_t>(offset(idx))]; }
    double at(std::initializer_list<int64_t> idx) const { return data[static_cast<size_t>(offset(idx))]; }
};

/** Number of elements of a shape; UserError (naming `what`) when a dimension is negative or the
 *  product overflows `limit` elements, so a hostile shape cannot exhaust memory. */
int64_t checked_numel(const std::vector<int64_t> &shape, const std::string &what,
                      int64_t limit = int64_t(1) << 40);

/** `[2, 3, 4]`, for messages. */
std::string shape_to_string(const std::vector<int64_t> &shape);

/** Advances a row-major multi-index over `shape`; false after the last point. */
bool next_index(std::vector<int64_t> &idx, const std::vector<int64_t> &shape);

}  // namespace rf
