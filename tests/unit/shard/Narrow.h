/** \file Narrow.h
 * What the shard tests share: the slice of a tensor along one dimension (a shard of its axis). */
#pragma once

#include "interp/Tensor.h"

namespace rf::test {

/** The slice [lo, lo + n) of t along dimension dim. */
inline Tensor narrow(const Tensor &t, size_t dim, int64_t lo, int64_t n) {
    std::vector<int64_t> shape = t.shape;
    shape[dim] = n;
    Tensor out = Tensor::filled(shape, 0.0, t.dtype);
    int64_t inner = 1, outer = 1;
    for (size_t i = dim + 1; i < t.shape.size(); i++) inner *= t.shape[i];
    for (size_t i = 0; i < dim; i++) outer *= t.shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < inner; i++)
                out.data[static_cast<size_t>((o * n + j) * inner + i)] =
                    t.data[static_cast<size_t>((o * t.shape[dim] + lo + j) * inner + i)];
    return out;
}

}  // namespace rf::test
