/** \file GpuMapping.h
 * Facts the GPU printer's mapping decisions rest on: element types in GPU memory, constant array
 * sizes, and which loops can be spread over threads without a race.
 */
#pragma once

#include <set>
#include <string>

#include "tile/TileIR.h"

namespace rf::gpu_mapping {

/** Element type of a buffer in GPU memory: temporaries are float (fp32 running states, docs/design.md §4). */
const char *gpu_storage_type(const tile::Buffer &b);
/** The C type and size of a local of class c in GPU code (states and tiles are float). */
std::string class_type(tile::LocalClass c);
int64_t class_bytes(tile::LocalClass c);
/** A stored element (C text) widened to float: bf16/f16/fp8 bits decoded, others as they are. */
std::string gpu_widen(DType t, const std::string &stored);
/** The value of an integer expression of constants only (dims of private arrays), else false. */
bool const_int(Expr e, int64_t &out);
/** Locals (and loop variables) declared anywhere in s. */
void declared_in(const tile::StmtP &s, std::set<std::string> &out);
/** True when s writes a scalar local that is not in `inner` (a race if s were spread over threads). */
bool writes_outer_scalar(const tile::StmtP &s, const std::set<std::string> &inner);
/** True when every array declared in s has a constant size (private arrays need one). */
bool private_arrays_ok(const tile::StmtP &s);

}  // namespace rf::gpu_mapping
