/** \file Graph.cpp
 * Builds and prints the dependence graph of a program's definitions.
 */
#include "fuse/Graph.h"

#include <set>
#include <sstream>

namespace rf {

DepGraph dependence_graph(const Program &p) {
    DepGraph g;
    for (const InputDecl &in : p.inputs) g.nodes.push_back(in.name);
    for (const TensorDef &d : p.defs) {
        g.nodes.push_back(d.name);
        std::set<Expr> axes;
        if (d.is_reduction())
            for (size_t i = 0; i < d.body->num_axes(); i++) axes.insert(d.body->axis(i));
        std::set<std::pair<std::string, int>> seen;
        visit(d.body, [&](Expr e) {
            if (e->kind != Kind::Load) return;
            std::string from = e->name;
            if (const TensorDef *src = p.find_def(from)) from = src->name;  // top-k indices belong to their def
            bool along = false;
            for (Expr a : axes) along |= mentions(e, a->name);
            DepEdge::Kind k = !d.is_reduction() ? DepEdge::Kind::Element
                                                : (along ? DepEdge::Kind::AlongAxis : DepEdge::Kind::AtRow);
            if (seen.insert({from, static_cast<int>(k)}).second) g.edges.push_back({from, d.name, k});
        });
    }
    return g;
}

std::string to_string(const DepGraph &g, const Program &p) {
    std::ostringstream os;
    for (const std::string &n : g.nodes) {
        const TensorDef *d = p.find_def(n);
        os << "node " << n << ": "
           << (!d ? "input" : d->is_topk() ? "top-k" : d->is_reduction() ? std::string(reduce_name(d->body->rop)) : "element-wise")
           << "\n";
    }
    for (const DepEdge &e : g.edges) {
        const char *k = e.kind == DepEdge::Kind::Element ? "element" : e.kind == DepEdge::Kind::AlongAxis ? "along the axis" : "at the row";
        os << "edge " << e.from << " -> " << e.to << " (" << k << ")\n";
    }
    return os.str();
}

}  // namespace rf
