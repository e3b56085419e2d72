/** \file CpuKernelPrinter.h
 * The CPU backend's kernel printer (CpuKernelPrinter.cpp), called by generate_cpu for each kernel.
 */
#pragma once

#include <sstream>

#include "tile/TileIR.h"

namespace rf {

/** Kernel k of module m as a static C++ function `k.name(rf_sizes, rf_bufs, rf_threads)`, appended to
 *  os. round_tile_products: cpu_rounds_tile_products; half_accuracy_exp2: cpu_half_accuracy_exp2. */
void print_cpu_kernel(const tile::Module &m, const tile::Kernel &k, std::ostringstream &os, bool round_tile_products,
                      bool half_accuracy_exp2);

}  // namespace rf
