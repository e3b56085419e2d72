/** \file plan_interp_topk_test.cpp
 * A top-k that no chain holds — its values feed a reduction over its own k axis — runs in the plan
 * interpreter as the reference runs it (issue 15 item 5: it stopped with `internal_assert(!d.is_topk())
 * failed: top-k outside a cascade`). The router shapes users write: a softmax over the top-k logits
 * (Mixtral), weights renormalised over the chosen experts, the entropy of the chosen ones, and a
 * top-k of the top-k.
 */
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"

using namespace rf;

namespace {

/** Worst |plan - reference| over every output (indices compared exactly: any difference is inf). */
double plan_vs_reference(const std::string &src, uint64_t seed) {
    auto c = compile_source(src, "topk.rf", {});
    SizeBinding sizes = bind_sizes(c->program, {});
    auto inputs = make_random_inputs(c->program, sizes, seed);
    PlanOptions po;
    po.sizes = &sizes;
    Plan plan = make_plan(c->program, po);
    plan.program = &c->program;
    PlanInterpOptions pio;
    pio.seed = seed;
    auto got = run_plan(plan, sizes, inputs, pio);
    auto ref = run_reference(c->program, sizes, inputs);
    double worst = 0;
    for (const OutputDecl &o : c->program.outputs) {
        const Tensor &g = got.at(o.name), &r = ref.at(o.name);
        if (g.data.size() != r.data.size()) return INFINITY;
        for (size_t i = 0; i < r.data.size(); i++) {
            if (std::isnan(g.data[i]) != std::isnan(r.data[i])) return INFINITY;
            if (!std::isnan(r.data[i])) worst = std::max(worst, std::fabs(g.data[i] - r.data[i]));
        }
    }
    return worst;
}

const char *kHead = "size T = 5, E = 37\ninput X[T, E] : f32\n";

}  // namespace

TEST(PlanInterpTopK, ValuesFeedingAReductionOverTheirOwnKAxis) {
    ArenaScope arena;
    const char *bodies[] = {
        // softmax over the top-k logits
        "W[t,r], I[t,r] = topk(e, 4: X[t,e])\nmk[t] = max(r: W[t,r])\nz[t] = sum(r: exp(W[t,r] - mk[t]))\n"
        "P[t,r] = exp(W[t,r] - mk[t]) / z[t]\noutput P, I\n",
        // router weights renormalised over the chosen experts (softmax first, then top-k, then renormalise)
        "m[t] = max(e: X[t,e])\ns[t] = sum(e: exp(X[t,e] - m[t]))\nW[t,r], I[t,r] = topk(e, 3: exp(X[t,e] - m[t]) / s[t])\n"
        "z[t] = sum(r: W[t,r])\nN[t,r] = W[t,r] / z[t]\noutput N, I\n",
        // the entropy of the chosen experts' softmax
        "W[t,r], I[t,r] = topk(e, 8: X[t,e] * 2)\nmk[t] = max(r: W[t,r])\nz[t] = sum(r: exp(W[t,r] - mk[t]))\n"
        "h[t] = log(z[t]) - sum(r: (W[t,r] - mk[t]) * exp(W[t,r] - mk[t])) / z[t]\noutput h\n",
        // a top-k of the top-k, and an argmin over k
        "W[t,r], I[t,r] = topk(e, 4: -X[t,e])\nV[t,q], J[t,q] = topk(r, 2: W[t,r] * W[t,r])\na[t] = argmin(r: W[t,r])\n"
        "output V, J, a\n",
    };
    for (const char *body : bodies)
        for (uint64_t seed : {1, 2, 3}) EXPECT_LE(plan_vs_reference(std::string(kHead) + body, seed), 1e-12) << body;
}
