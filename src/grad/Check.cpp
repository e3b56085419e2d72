/** \file Check.cpp
 * Central finite differences of the forward's float64 reference against the derived backward
 * (grad/Check.h). With φ(x) = Σ_O <dO, O(x)> for random adjoints dO, ∂φ/∂x_i is exactly what the
 * backward's dX[i] computes, and (φ(x + h e_i) − φ(x − h e_i)) / 2h = ∂φ/∂x_i + O(h²).
 */
#include "grad/Check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "fuse/Member.h"
#include "interp/Inputs.h"
#include "interp/Magnitude.h"
#include "interp/Reference.h"

namespace rf {

Program widened_to_f64(Program p) {
    // A cast that was exact on the input's own dtype (f32(U) of a bf16 U) would round the widened
    // input: it goes, so the finite differences see the function the backward differentiates.
    std::map<std::string, DType> declared;
    for (const auto &in : p.inputs) declared[in.name] = in.dtype;
    for (TensorDef &d : p.defs)
        d.body = substitute(d.body, [&](Expr n) -> Expr {
            if (n->kind != Kind::Cast || n->args[0]->kind != Kind::Load || !declared.count(n->args[0]->name)) return nullptr;
            DType from = declared.at(n->args[0]->name);
            bool exact = is_float(from) && (n->dtype == from || n->dtype == DType::f64 ||
                                            (n->dtype == DType::f32 && from != DType::f64));
            return exact ? n->args[0] : nullptr;
        });
    for (auto &in : p.inputs)
        if (is_float(in.dtype)) in.dtype = DType::f64;
    for (auto &o : p.outputs)
        if (is_float(o.dtype)) o.dtype = DType::f64;
    return p;
}

Program without_rounding(Program p) {
    for (TensorDef &d : p.defs) d.body = strip_rounding(d.body);
    return p;
}

namespace {

/** The forward's outputs that have adjoints at one point, with their magnitudes (interp/Magnitude.h:
 *  M ≥ |value|, Σ|terms| where terms cancel), which bound the float64 rounding error of each value. */
struct Outputs {
    std::map<std::string, Tensor> value, magnitude;
};

Outputs outputs_at(const Program &p, const SizeBinding &s, const std::map<std::string, Tensor> &in, const GradResult &g) {
    auto res = run_reference(p, s, in);
    auto mag = run_magnitude(p, s, res);
    Outputs out;
    for (const auto &[o, d] : g.adjoints) {
        out.value[o] = res.at(o);
        out.magnitude[o] = mag.at(o);
    }
    return out;
}

/** φ(b) − φ(a) = Σ_O <dO, O_b − O_a>, differenced element by element: an output that does not move
 *  with the perturbed input contributes exactly 0 however large it is (a cubic moment of 1e4-sized
 *  values next to a softmax made the differenced sum lose every digit). `noise` gets the rounding
 *  error of the elements that do move. */
double phi_difference(const Outputs &b, const Outputs &a, const GradResult &g, const std::map<std::string, Tensor> &adj,
                      double &noise) {
    double d = 0;
    for (const auto &[o, dn] : g.adjoints) {
        const Tensor &tb = b.value.at(o), &ta = a.value.at(o), &w = adj.at(dn);
        const Tensor &mb = b.magnitude.at(o), &ma = a.magnitude.at(o);
        for (size_t i = 0; i < tb.data.size(); i++) {
            double step = tb.data[i] - ta.data[i];
            if (step == 0) continue;
            d += w.data[i] * step;
            // The rounding error of each value is about u·M, not u·|value|: a third central moment
            // of values beside a -1e4 mask sums cubes of ~1e11 that cancel to a small k3, and the
            // differences of k3 then carry ~1e-5 of noise (fuzz_specs.py seed 1251, --commands grad).
            const double mag_b = std::isfinite(mb.data[i]) ? mb.data[i] : std::fabs(tb.data[i]);
            const double mag_a = std::isfinite(ma.data[i]) ? ma.data[i] : std::fabs(ta.data[i]);
            noise += std::fabs(w.data[i]) * (mag_b + mag_a) * 4e-16;
        }
    }
    return d;
}

bool all_finite(const Outputs &outs) {
    for (const auto &[n, t] : outs.value)
        for (double v : t.data)
            if (!std::isfinite(v)) return false;
    return true;
}

}  // namespace

/** The backward's results on the inputs, the adjoints and the forward's residuals. */
std::map<std::string, Tensor> run_backward_reference(const GradResult &g, const SizeBinding &s,
                                           const std::map<std::string, Tensor> &inputs,
                                           const std::map<std::string, Tensor> &adj) {
    auto fwd = run_reference(g.forward, bind_sizes(g.forward, s), inputs);
    Program b = g.backward;
    std::map<std::string, Tensor> bin;
    for (auto &in : b.inputs) {
        in.dtype = DType::f64;  // residuals are f32 in the spec; the check is of the math
        if (inputs.count(in.name)) bin[in.name] = inputs.at(in.name);
        else if (adj.count(in.name)) bin[in.name] = adj.at(in.name);
        else bin[in.name] = fwd.at(in.name);
    }
    return run_reference(b, bind_sizes(b, s), bin);
}

GradCheckReport check_against_finite_differences(const Program &p, const GradResult &g, const SizeBinding &s,
                                                 uint64_t seed, int points) {
    auto inputs = make_random_inputs(p, s, seed);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::map<std::string, Tensor> adj;
    for (const auto &[o, d] : g.adjoints) {
        Tensor t(def_shape(*p.find_def(o), s));
        for (auto &v : t.data) v = normal(rng);
        adj[d] = t;
    }
    auto res = run_backward_reference(g, s, inputs, adj);
    GradCheckReport report;
    auto base = outputs_at(p, s, inputs, g);
    report.forward_finite = all_finite(base);
    for (const auto &[x, dx] : g.gradients) {
        GradientCheck c;
        c.input = x;
        c.gradient = dx;
        const Tensor &grad = res.at(dx);
        c.elements = static_cast<int64_t>(grad.data.size());
        for (double v : grad.data) c.scale = std::max(c.scale, std::fabs(v));
        if (grad.data.empty() || !report.forward_finite) {  // nothing to compare with
            report.gradients.push_back(c);
            continue;
        }
        std::uniform_int_distribution<size_t> pick(0, grad.data.size() - 1);
        double tolerance = GradCheckReport::kTolerance * c.scale;
        // The one-sided differences of φ at x_i ± step (their rounding noise in `noise`).
        struct Sides {
            double up = 0, down = 0, noise = 0;
            bool finite = false;
            double gap(double step) const { return std::fabs(up / step - down / step); }
        };
        auto sides = [&](size_t i, double step) {
            auto plus = inputs, minus = inputs;
            plus[x].data[i] += step;
            minus[x].data[i] -= step;
            auto op = outputs_at(p, s, plus, g), om = outputs_at(p, s, minus, g);
            Sides d;
            d.up = phi_difference(op, base, g, adj, d.noise);
            d.down = phi_difference(base, om, g, adj, d.noise);
            d.finite = all_finite(op) && all_finite(om);
            return d;
        };
        for (int k = 0; k < points; k++) {
            size_t i = pick(rng);
            const double h = 1e-5 * std::max(1.0, std::fabs(inputs.at(x).data[i]));
            const Sides d = sides(i, h);
            // Where the forward is undefined (log 0) or not differentiable (a kink of max or abs, a
            // tie that size 1 makes exact) there is no derivative to compare with. One-sided
            // differences also disagree by h·|φ''| where φ only curves strongly (rsqrt of a small sum
            // of squares: fuzz_specs.py seed 1252 skipped every point of a dW); that gap shrinks with
            // the step, a kink's does not: a 16 times smaller step tells them apart.
            // The smaller step's central difference is then the one compared (its O(step²) error 256
            // times smaller, its noise 16 times larger).
            Sides used = d;
            double step = h;
            bool kink = !d.finite || d.gap(h) > 1e-3 * c.scale + 2 * d.noise / h;
            if (kink && d.finite) {
                const Sides e = sides(i, h / 16);
                kink = !e.finite || e.gap(h / 16) > d.gap(h) / 4 + 2 * e.noise / (h / 16);
                used = e;
                step = h / 16;
            }
            if (kink) {
                c.skipped++;
                continue;
            }
            const double noise = used.noise;
            double err = std::fabs(grad.data[i] - (used.up + used.down) / (2 * step));
            if (!(err - noise / step <= c.max_abs_err)) {  // NaN counts as the worst
                c.max_abs_err = std::isnan(err) ? INFINITY : std::max(0.0, err - noise / step);
                c.worst = static_cast<int64_t>(i);
            }
            c.checked++;
        }
        c.ok = c.max_abs_err <= tolerance && (grad.data.size() <= 1 || c.checked > 0);
        report.ok = report.ok && c.ok;
        report.gradients.push_back(c);
    }
    return report;
}

}  // namespace rf
