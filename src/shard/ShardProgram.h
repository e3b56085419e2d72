/** \file ShardProgram.h
 * A whole program run on one shard of an axis (docs/sharding.md, "Backward"): the inputs indexed by
 * the axis arrive as the local shard, and every definition indexed by it (through the variables
 * that index those inputs) is computed for the shard's positions only. It is how a derived backward
 * runs under context parallelism: attention's dK and dV come out for the local keys, and dQ, a sum
 * over the keys, comes out as this shard's part of the sum (the caller all-reduces it).
 */
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/Program.h"

namespace rf {

/** How an output of a sharded program relates to the whole program's. */
enum class ShardedOutput : uint8_t {
    Replicated,  ///< the same on every shard (reads nothing along the axis)
    Sharded,     ///< the shard's positions of the output (dimension `dim`)
    PartialSum,  ///< a sum over the axis: this shard's terms (the sum over shards is the output)
};

struct ShardedProgram {
    std::string spec;             ///< `.rf` text of the program on one shard
    std::string axis_size;        ///< the size that is the axis's extent
    std::string shard_size;       ///< the size of the shard's extent
    std::string offset_input;     ///< 0-dim i64 input holding lo ("" when no value reads positions)
    std::string axis_size_input;  ///< 0-dim i64 input holding the whole length ("" when unused)
    struct Output {
        std::string name;
        ShardedOutput kind = ShardedOutput::Replicated;
        size_t dim = 0;  ///< Sharded: the dimension along the axis
    };
    std::vector<Output> outputs;  ///< in the program's output order
    nlohmann::json layout() const;
};

/** `p` on one shard of the axis that the given inputs' dimensions index (input name, dimension; every
 *  such dimension has the same size as extent). UserError, located, when a definition needs every
 *  shard: a reduction over the axis other than a sum, a sum over the axis that a later definition
 *  reads, a position of the axis used to index an unsharded dimension. */
ShardedProgram shard_program(const Program &p, const std::vector<std::pair<std::string, size_t>> &sharded_inputs);

}  // namespace rf
