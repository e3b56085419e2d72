/** \file RowKernelModule.h
 * The scaffold of the tile-pass tests: a module of one kernel, `for $r in [0, R) parallel: body`,
 * over sizes R and C and the given buffers.
 */
#pragma once

#include <utility>
#include <vector>

#include "tile/LowerPass.h"
#include "tile/TileIR.h"

namespace rf::tile {

inline Module row_kernel_module(std::vector<Buffer> buffers, std::vector<StmtP> body) {
    Module m;
    m.sizes = {"R", "C"};
    m.buffers = std::move(buffers);
    Kernel k;
    k.name = "k0";
    k.body = for_loop(make_index("$r"), int_c(0), make_size("R"), std::move(body), LoopKind::Parallel);
    m.kernels.push_back(k);
    return m;
}

}  // namespace rf::tile
