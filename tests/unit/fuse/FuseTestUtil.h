/** \file FuseTestUtil.h
 * Helpers shared by the fusion tests: compile a spec string, find a member's verdict, and compare the
 * plan interpreter against the reference interpreter on random inputs.
 */
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"

namespace rf::test {

inline std::unique_ptr<Compilation> compile(const std::string &src, bool approx = false) {
    Options o;
    o.approx = approx;
    return compile_source(src, "test.rf", o);
}

inline const MemberAnalysis *verdict(const Compilation &c, const std::string &name) {
    for (const ChainPlan &ch : c.plan.chains)
        for (size_t k = 0; k < ch.members.size(); k++)
            if (ch.members[k] == name) return &ch.verdicts[k];
    return nullptr;
}

inline const ChainPlan *chain_of(const Compilation &c, const std::string &name) {
    for (const ChainPlan &ch : c.plan.chains)
        if (std::find(ch.members.begin(), ch.members.end(), name) != ch.members.end()) return &ch;
    return nullptr;
}

/** Normwise relative difference max|a-b| / max|b| (NaN-aware: a NaN anywhere is +inf). */
inline double rel_diff(const Tensor &a, const Tensor &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.data.size(); i++) {
        double x = a.data[i], y = b.data[i];
        if (std::isnan(x) != std::isnan(y)) return INFINITY;
        if (std::isinf(x) || std::isinf(y)) {
            if (x != y) return INFINITY;
            continue;
        }
        num = std::max(num, std::fabs(x - y));
        den = std::max(den, std::fabs(y));
    }
    return den > 0 ? num / den : num;
}

/** Runs the plan (random tiles, segments and merge trees) and the reference on the same random inputs
 *  and returns the worst normwise relative difference over every output; index outputs must match
 *  exactly (returns inf otherwise). */
inline double plan_vs_reference(const Compilation &c, const SizeBinding &sizes, uint64_t seed, bool f32 = false,
                                InputDistribution dist = InputDistribution::Normal) {
    auto inputs = make_random_inputs(c.program, sizes, seed, dist);
    PlanOptions po;
    po.sizes = &sizes;
    Plan plan = make_plan(c.program, po);
    plan.program = &c.program;
    PlanInterpOptions pio;
    pio.seed = seed;
    pio.f32 = f32;
    auto got = run_plan(plan, sizes, inputs, pio);
    // The reference runs the program as checked (before the rate split the plan was made from).
    auto ref = run_reference(c.checked.outputs.empty() ? c.program : c.checked, sizes, inputs);
    double worst = 0;
    for (const OutputDecl &o : c.program.outputs) {
        const Tensor &g = got.at(o.name), &r = ref.at(o.name);
        EXPECT_EQ(g.shape, r.shape) << o.name;
        const TensorDef *d = c.program.find_def(o.name);
        bool index = d && ((d->is_topk() && d->index_name == o.name) || d->stype == SType::Int);
        if (index) {
            if (g.data != r.data) {
                ADD_FAILURE() << "index output " << o.name << " differs (seed " << seed << ")";
                return INFINITY;
            }
            continue;
        }
        worst = std::max(worst, rel_diff(g, r));
    }
    return worst;
}

}  // namespace rf::test
