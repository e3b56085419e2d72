/** \file Graph.h
 * The dependence graph of all definitions: who reads whom, and how — at the reader's row (a value
 * constant along the reader's axis, the kind of edge cascades are made of) or along the reader's
 * reduction axis (data, e.g. QKᵀ read by the softmax over j).
 */
#pragma once

#include <string>
#include <vector>

#include "ir/Program.h"

namespace rf {

struct DepEdge {
    std::string from, to;  ///< producer (input or definition) and consumer definition
    enum class Kind { Element, AlongAxis, AtRow } kind;
};

struct DepGraph {
    std::vector<std::string> nodes;  ///< inputs, then definitions in order
    std::vector<DepEdge> edges;
};

DepGraph dependence_graph(const Program &p);
/** `--emit graph`: one line per node with its kind, then one line per edge. */
std::string to_string(const DepGraph &g, const Program &p);

}  // namespace rf
