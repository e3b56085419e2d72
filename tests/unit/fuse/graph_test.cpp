/** \file graph_test.cpp
 * The dependence graph distinguishes reads at the row (cascade edges) from reads along the axis.
 */
#include "FuseTestUtil.h"
#include "fuse/Graph.h"

using namespace rf;

TEST(Graph, AttentionEdges) {
    ArenaScope arena;
    auto c = rf::test::compile(R"(
size B = 1, H = 2, M = 5, N = 13, D = 8
input Q[B, H, M, D] : f32
input K[B, H, N, D] : f32
input V[B, H, N, D] : f32
S[b,h,i,j] = sum(d: Q[b,h,i,d] * K[b,h,j,d])
m[b,h,i]   = max(j: S[b,h,i,j])
l[b,h,i]   = sum(j: exp(S[b,h,i,j] - m[b,h,i]))
O[b,h,i,e] = sum(j: exp(S[b,h,i,j] - m[b,h,i]) * V[b,h,j,e]) / l[b,h,i]
output O
)");
    std::string g = to_string(dependence_graph(c->program), c->program);
    EXPECT_NE(g.find("edge S -> m (along the axis)"), std::string::npos) << g;
    EXPECT_NE(g.find("edge m -> l (at the row)"), std::string::npos) << g;
    EXPECT_NE(g.find("edge m -> O.sum (at the row)"), std::string::npos) << g;
    EXPECT_NE(g.find("edge l -> O (element)"), std::string::npos) << g;
    EXPECT_NE(g.find("node O: element-wise"), std::string::npos) << g;
}
