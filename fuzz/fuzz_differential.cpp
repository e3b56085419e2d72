/** \file fuzz_differential.cpp
 * Differential fuzzing of the algebra: for any spec that parses, at small sizes, the plan
 * interpreter (derived update / merge / epilogue with random tiles, segments and merge trees) must
 * agree with the reference interpreter (the spec run literally). A disagreement beyond rounding, a
 * NaN on one side only, an InternalError or a crash is a bug. Opposite infinities are accepted: the
 * derived plan does not keep the sign of an exact zero (0 - m simplifies to -m), so x / (0 - 0) may
 * come out as the other infinity (docs/design.md, known limits).
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "driver/Compiler.h"
#include "interp/Inputs.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 2048) return 0;
    std::string src(reinterpret_cast<const char *>(data), size);
    rf::ArenaScope scope;
    try {
        auto c = rf::compile_source(src, "fuzz.rf", {});
        std::map<std::string, int64_t> small;
        for (const rf::SizeDecl &s : c->program.sizes) small[s.name] = std::min<int64_t>(s.default_value.value_or(3), 6);
        rf::SizeBinding sizes = rf::bind_sizes(c->program, small);
        double elements = 0;
        for (const rf::TensorDef &d : c->program.defs) {
            double n = 1;
            for (int64_t e : rf::def_shape(d, sizes)) n *= static_cast<double>(e);
            elements += n;
        }
        if (elements > 4096) return 0;
        auto inputs = rf::make_random_inputs(c->program, sizes, size);
        rf::PlanOptions po;
        po.sizes = &sizes;
        rf::Plan plan = rf::make_plan(c->program, po);
        plan.program = &c->program;
        rf::PlanInterpOptions pio;
        pio.seed = size;
        auto got = rf::run_plan(plan, sizes, inputs, pio);
        auto ref = rf::run_reference(c->program, sizes, inputs);
        for (const rf::OutputDecl &o : c->program.outputs) {
            const rf::Tensor &g = got.at(o.name), &r = ref.at(o.name);
            double scale = 0;
            for (double v : r.data)
                if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
            for (size_t i = 0; i < r.data.size(); i++) {
                double a = g.data[i], b = r.data[i];
                if (std::isnan(a) && std::isnan(b)) continue;
                if (std::isinf(b) && std::isinf(a)) continue;  // a division by a signed zero: see below
                if (std::isinf(b) || std::isinf(a)) {
                    if (a != b && std::isfinite(scale) && scale < 1e300) {
                        std::fprintf(stderr, "%s[%zu]: plan %g, reference %g\n", o.name.c_str(), i, a, b);
                        std::abort();
                    }
                    continue;
                }
                if (std::isnan(a) != std::isnan(b) || std::fabs(a - b) > 1e-6 * scale + 1e-9) {
                    if (scale > 1e100) continue;  // values that large are rounding noise for any plan
                    std::fprintf(stderr, "%s[%zu]: plan %.17g, reference %.17g (scale %g)\n", o.name.c_str(), i, a, b, scale);
                    std::abort();
                }
            }
        }
    } catch (const rf::UserError &) {
    }
    return 0;
}
