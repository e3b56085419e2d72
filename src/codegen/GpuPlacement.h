/** \file GpuPlacement.h
 * Where each statement of a GPU launch runs (spread over the threads of its group, in step, or on
 * one thread) and where each group-level local lives (shared memory, or a copy in every thread's
 * registers): the decisions of the GPU printer, apart from its spelling.
 */
#pragma once

#include <set>
#include <string>
#include <vector>

#include "codegen/CodeGen_GPU.h"
#include "tile/TileIR.h"

namespace rf::gpu_mapping {

/** The locals and buffers a statement writes, and the names it reads (locals and buffers). */
struct Access {
    std::set<std::string> writes, reads;
    bool stores = false;  ///< writes a buffer (Store, CopyRow, a GEMM into a buffer)
    bool gemm = false;    ///< contains a Gemm
};
Access access_of(const tile::StmtP &s);

class Placement {
public:
    Placement(const tile::Kernel &k, const GpuCodegenOptions &o) : k_(k), o_(o) {}

    /** Decides which group-level locals of `body` (the body of a launch's top-level loop, run by a
     *  group of threads) are replicated: kept in registers, one identical copy per thread, updated
     *  by every thread at once, instead of a shared slot written by thread 0 behind a barrier.
     *  A local qualifies when it is a scalar or a small constant-size array, no thread writes it
     *  alone (inside a spread loop, except as the target of a tree reduction, whose combined value
     *  every thread reads), it is no GEMM operand, and every statement that writes it can itself
     *  run in every thread (writes no buffer and no shared local). Iterated to a fixed point: a
     *  local that stays shared makes the statements writing it single-thread, whose other
     *  targets then stay shared too. */
    void replicate(const std::vector<tile::StmtP> &body);
    bool replicated(const std::string &local) const { return replicated_.count(local) > 0; }
    /** How many locals are replicated (a measure of the registers the running state takes). */
    size_t replicated_count() const { return replicated_.size(); }
    /** True when every thread may run s at once with the same result in each: s writes no buffer
     *  and only replicated locals or locals it declares. */
    bool replicable(const tile::StmtP &s) const;

    /** A simd loop whose iterations can be spread over the threads: its writes are array elements,
     *  global stores, and reductions into scalars declared outside (combined by a tree). */
    bool simd_spreadable(const tile::StmtP &s) const;
    /** Independent iterations (rows of a block x free state indices) that are spread over the
     *  threads, one iteration per thread with serial (private) vector loops. */
    bool independent_spread(const tile::StmtP &s) const;
    /** The single loop that is s's whole body (comments and leading scalar declarations aside: they
     *  are evaluated per element) and whose iterations are independent too, if its bounds do not
     *  depend on s's variable (the two are spread as one flat range). */
    tile::StmtP only_child_loop(const tile::StmtP &s) const;
    /** Rows whose bodies fit a group of G threads per row (G a power of two up to 32): the body of
     *  a spread independent loop (`body`: its own, or its flattened child's) made of a prefix, one
     *  main loop and a tail. The main loop is either a row reduction (a vector loop whose only
     *  statements are reductions into scalars the prefix declares: attention's row max and row
     *  sum), spread over the group and combined within it; or independent iterations (an
     *  independent loop, or an element-wise vector loop: attention's rescale and accumulation of
     *  its D output columns) spread over the group. Prefix statements that write only scalars the
     *  prefix declares run in all G threads (each has the row's values); other prefix statements
     *  and the tail run in the group's first thread. Returns the main loop's position in `body`
     *  (`reduction` says which kind), or -1 when the body has another shape or a first-thread
     *  prefix statement writes what an all-thread statement or the main loop reads. */
    int row_group(const std::vector<tile::StmtP> &body, bool &reduction) const;
    /** True for a prefix statement of a row group that runs in every thread of the group. */
    bool group_replicable(const tile::StmtP &s, const std::set<std::string> &prefix_scalars) const;
    /** True when a row group's prefix (body[0, at)) has a statement that runs in the group's
     *  first thread alone (one group_replicable refuses). */
    bool prefix_has_first_thread_statements(const std::vector<tile::StmtP> &body, int at) const;
    /** True when s needs every thread (spread loops, tree reductions, GEMMs, shared array inits). */
    bool coop(const tile::StmtP &s) const;
    /** Rough value at the bound sizes ($nbv: the row block; unknown locals: 1). */
    double estimate(Expr e) const;

private:
    double inner_extent(const tile::StmtP &s) const;
    void drop_conflicts(const std::vector<tile::StmtP> &list);
    void drop(const std::set<std::string> &names);

    const tile::Kernel &k_;
    const GpuCodegenOptions &o_;
    std::set<std::string> replicated_;
};

}  // namespace rf::gpu_mapping
