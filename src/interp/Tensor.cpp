/** \file Tensor.cpp
 * Shape arithmetic of the dense tensors of Tensor.h.
 */
#include "interp/Tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "support/Error.h"

namespace rf {

Tensor::Tensor(std::vector<int64_t> shape_, DType dtype_)
    : shape(std::move(shape_)),
      data(static_cast<size_t>(checked_numel(shape, "tensor")), std::numeric_limits<double>::quiet_NaN()),
      dtype(dtype_) {}

Tensor Tensor::filled(std::vector<int64_t> shape_, double value, DType dtype_) {
    Tensor t(std::move(shape_), dtype_);
    std::fill(t.data.begin(), t.data.end(), value);
    return t;
}

std::vector<int64_t> Tensor::strides() const {
    std::vector<int64_t> s(shape.size());
    int64_t acc = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        s[i] = acc;
        acc *= shape[i];
    }
    return s;
}

int64_t Tensor::offset(const int64_t *idx, size_t n) const {
    RF_INTERNAL_ASSERT(n == shape.size()) << "index of rank " << n << " into a tensor of shape "
                                          << shape_to_string(shape);
    int64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        RF_INTERNAL_ASSERT(idx[i] >= 0 && idx[i] < shape[i])
            << "index " << idx[i] << " out of bounds for dimension " << i << " of shape " << shape_to_string(shape);
        off = off * shape[i] + idx[i];
    }
    return off;
}

std::vector<int64_t> Tensor::unravel(int64_t flat) const {
    std::vector<int64_t> idx(shape.size());
    for (size_t i = shape.size(); i-- > 0;) {
        idx[i] = flat % shape[i];
        flat /= shape[i];
    }
    return idx;
}

int64_t checked_numel(const std::vector<int64_t> &shape, const std::string &what, int64_t limit) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) throw UserError({}, what + ": negative dimension in shape " + shape_to_string(shape));
        if (d != 0 && n > limit / d)
            throw UserError({}, what + ": shape " + shape_to_string(shape) + " has too many elements");
        n *= d;
    }
    return n;
}

std::string shape_to_string(const std::vector<int64_t> &shape) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < shape.size(); i++) os << (i ? ", " : "") << shape[i];
    os << "]";
    return os.str();
}

bool next_index(std::vector<int64_t> &idx, const std::vector<int64_t> &shape) {
    for (size_t i = idx.size(); i-- > 0;) {
        if (++idx[i] < shape[i]) return true;
        idx[i] = 0;
    }
    return false;
}

}  // namespace rf
