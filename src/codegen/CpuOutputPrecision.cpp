/** \file CpuOutputPrecision.cpp
 * Where the CPU kernels may compute with less than float32 accuracy because every output of the
 * module is stored with less: the bf16 tile products and the degree-4 row exp2 (CodeGen_CPU.h).
 */
#include <initializer_list>

#include "codegen/CodeGen_CPU.h"

namespace rf {

namespace {

using namespace tile;

/** The module has outputs, and every one of them is of a dtype in `narrow`. */
bool outputs_all_in(const Module &m, std::initializer_list<DType> narrow) {
    bool any = false;
    for (const Buffer &b : m.buffers) {
        if (b.role != Buffer::Role::Output) continue;
        bool in = false;
        for (DType d : narrow) in = in || b.dtype == d;
        if (!in) return false;
        any = true;
    }
    return any;
}

}  // namespace

bool cpu_rounds_tile_products(const Module &m, const CpuCodegenOptions &o) {
    // Every output is stored with bf16's 8 significant bits or fewer (bf16, fp8): rounding the float
    // factor of each product to bf16 (relative error <= 2^-9 per product, so <= 2^-9 of the sum of the
    // products' magnitudes) stays within the outputs' own rounding (2^-9 relative for bf16). An f32 or
    // f16 output, or an index, asks for more and keeps exact products.
    return o.bf16_tile_products && outputs_all_in(m, {DType::bf16, DType::f8e4m3, DType::f8e5m2});
}

bool cpu_half_accuracy_exp2(const Module &m, const CpuCodegenOptions &o) {
    // Every output is a float of 11 significant bits or fewer (bf16, f16, fp8): the Half polynomial's
    // relative error (2.9e-6 per exp2, redfuse_cpu_rows.h) is 170x below the coarsest of their
    // roundings (f16's 2^-11). It reaches an output through sums and products as a float32 rounding
    // of ~24 ulp would, within the float32 compute tolerance the check allows relative to the terms'
    // magnitude (interp/Compare.h). An f32 output asks for <= 1 ulp; an index output compares
    // exactly, where a near tie could flip.
    return o.half_accuracy_exp2 && outputs_all_in(m, {DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2});
}

}  // namespace rf
