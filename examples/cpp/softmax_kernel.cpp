/** \file softmax_kernel.cpp
 * Uses the installed library as an application would: compile a spec once into a Kernel, look at
 * what it takes, call it on the program's own buffers at several sizes (no rebuild), and check the
 * results against a plain loop. Usage: softmax_kernel [SPEC] (default: the repository's
 * examples/softmax.rf, whose input X[R, C] and output Y[R, C] are f32).
 */
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "driver/HostTarget.h"
#include "driver/Kernel.h"
#include "support/Error.h"

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "examples/softmax.rf";
    try {
        rf::Kernel k = rf::compile(spec, rf::make_target(rf::TargetKind::Cpu));
        std::printf("%s: %zu input(s), %zu output(s), compiled in %.1f ms%s\n", spec, k.inputs().size(), k.outputs().size(),
                    k.compile_ms(), k.from_cache() ? " (JIT cache)" : "");
        for (const rf::TensorInfo &t : k.inputs()) {
            std::printf("  input %s : %s [", t.name.c_str(), rf::dtype_name(t.dtype));
            for (size_t d = 0; d < t.shape.size(); d++) std::printf("%s%s", d ? ", " : "", t.shape[d].c_str());
            std::printf("]\n");
        }
        std::mt19937 rng(1);
        std::normal_distribution<float> normal(0.f, 3.f);
        int64_t builds = rf::kernel_builds();
        for (auto [R, C] : {std::pair<int64_t, int64_t>{4, 100}, {33, 4097}, {1, 1}}) {
            std::vector<float> x(size_t(R * C)), y(size_t(R * C));
            for (float &v : x) v = normal(rng);
            k({{x.data(), rf::DType::f32, {R, C}}}, {{y.data(), rf::DType::f32, {R, C}}});
            double worst = 0;
            for (int64_t r = 0; r < R; r++) {
                double m = -INFINITY, s = 0;
                for (int64_t c = 0; c < C; c++) m = std::max(m, double(x[r * C + c]));
                for (int64_t c = 0; c < C; c++) s += std::exp(double(x[r * C + c]) - m);
                for (int64_t c = 0; c < C; c++)
                    worst = std::max(worst, std::fabs(y[r * C + c] - std::exp(double(x[r * C + c]) - m) / s));
            }
            std::printf("  R=%lld C=%lld: max |error| %.2e\n", (long long)R, (long long)C, worst);
            if (!(worst < 1e-5)) return 1;
        }
        if (rf::kernel_builds() != builds) {
            std::printf("a new size rebuilt the kernel\n");
            return 1;
        }
        std::printf("ok: one build served every size\n");
        return 0;
    } catch (const rf::UserError &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
