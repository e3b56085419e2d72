/** \file Compiler.cpp
 * The pipeline function and the `run` command: parse → check → IR → plan, then execute with the plan
 * interpreter and compare against the float64 reference.
 */
#include "driver/Compiler.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "interp/Compare.h"
#include "interp/Inputs.h"
#include "interp/Npy.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"
#include "spec/Frontend.h"

namespace rf {

namespace {
bool dump_requested(const std::string &stage) {
    const char *env = std::getenv("REDFUSE_DUMP");
    if (!env) return false;
    std::string s = std::string(",") + env + ",";
    return s.find("," + stage + ",") != std::string::npos;
}
}  // namespace

std::unique_ptr<Compilation> compile_source(const std::string &source, const std::string &file,
                                            const CompileOptions &opts) {
    auto c = std::make_unique<Compilation>();
    c->file = file;
    c->source = source;
    auto t0 = std::chrono::steady_clock::now();
    c->program = parse_program(source, file);                                      // parse + check → IR
    if (dump_requested("ir")) std::cerr << to_string(c->program);
    PlanOptions po;
    po.approx = opts.approx;
    SizeBinding sizes;
    if (!opts.sizes.empty()) sizes = bind_sizes(c->program, opts.sizes);
    else {
        for (const SizeDecl &s : c->program.sizes)
            if (s.default_value) sizes[s.name] = *s.default_value;
    }
    po.sizes = &sizes;
    c->plan = make_plan(c->program, po);                                           // analyze + plan
    c->plan.program = &c->program;
    if (dump_requested("plan")) std::cerr << plan_dump(*c);
    c->analyze_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return c;
}

std::unique_ptr<Compilation> compile_file(const std::string &path, const CompileOptions &opts) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError({}, "cannot read spec file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return compile_source(ss.str(), path, opts);
}

namespace {

InputDistribution parse_dist(const std::string &d) {
    if (d == "normal") return InputDistribution::Normal;
    if (d == "uniform") return InputDistribution::Uniform;
    if (d == "positive") return InputDistribution::Positive;
    throw UserError({}, "unknown input distribution '" + d + "' (normal, uniform, positive)");
}

int64_t longest_reduction(const Program &p, const SizeBinding &sizes) {
    int64_t n = 1;
    for (const TensorDef &d : p.defs) {
        visit(d.body, [&](Expr e) {
            if (e->kind != Kind::Reduce) return;
            int64_t len = 1;
            for (Expr x : e->extents) len *= eval_int(x, sizes);
            n = std::max(n, len);
        });
    }
    return n;
}

bool is_index_output(const Program &p, const std::string &name) {
    const TensorDef *d = p.find_def(name);
    return d && ((d->is_topk() && d->index_name == name) || d->stype == SType::Int);
}

}  // namespace

RunReport run_compiled(const Compilation &c, const RunOptions &o) {
    RunReport rep;
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.sizes);
    if (o.target != "interp" && o.target != "interp-f32")
        throw UserError({}, "target '" + o.target + "' is not available yet (this build has: interp)");
    bool f32 = o.f32 || o.target == "interp-f32";

    std::map<std::string, Tensor> inputs =
        o.load_dir.empty() ? make_random_inputs(p, sizes, o.seed, parse_dist(o.dist), o.scale) : load_dir(o.load_dir, p, sizes);

    // Re-plan at the bound sizes so the strategy matches what runs.
    PlanOptions po;
    po.sizes = &sizes;
    Plan plan = make_plan(p, po);
    plan.program = &p;

    PlanInterpOptions pio;
    pio.f32 = f32;
    pio.seed = o.seed;
    auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, Tensor> results = run_plan(plan, sizes, inputs, pio);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    std::map<std::string, Tensor> outputs;
    for (const OutputDecl &out : p.outputs) outputs[out.name] = round_output(results.at(out.name), out.dtype);

    nlohmann::json j;
    j["target"] = o.target;
    j["time_ms"] = ms;
    j["sizes"] = sizes;
    j["seed"] = o.seed;
    std::ostringstream text;
    if (!o.save_dir.empty()) {
        std::map<std::string, Tensor> to_save;
        for (const InputDecl &in : p.inputs) to_save[in.name] = results.count(in.name) ? results.at(in.name) : inputs.at(in.name);
        for (auto &[n, t] : outputs) to_save[n] = t;
        save_dir(o.save_dir, to_save);
        j["saved"] = o.save_dir;
    }
    bool ok = true;
    if (o.check) {
        std::map<std::string, Tensor> ref = run_reference(p, sizes, inputs);
        int64_t n = longest_reduction(p, sizes);
        for (const OutputDecl &out : p.outputs) {
            bool exact = is_index_output(p, out.name);
            double tol = tolerance(out.dtype, f32, n);
            Tensor ref_out = ref.at(out.name);
            if (exact) ref_out = round_output(ref_out, out.dtype);
            CompareResult r = compare(outputs.at(out.name), ref_out, tol, exact);
            ok = ok && r.ok;
            j["outputs"][out.name] = {{"max_abs_err", r.max_abs_err}, {"max_rel_err", r.max_rel_err},
                                      {"mismatches", r.mismatches}, {"nans", r.nans}, {"tolerance", tol},
                                      {"exact", exact}, {"ok", r.ok}};
            std::ostringstream tol_text;
            tol_text << tol;
            text << "  " << out.name << ": max_abs_err " << r.max_abs_err << ", max_rel_err " << r.max_rel_err
                 << (exact ? " (exact)" : " (tolerance " + tol_text.str() + ")") << (r.ok ? "  ok" : "  FAILED")
                 << "\n";
        }
    } else {
        for (auto &[n, t] : outputs) {
            double lo = INFINITY, hi = -INFINITY;
            for (double v : t.data) {
                lo = std::min(lo, v);
                hi = std::max(hi, v);
            }
            j["outputs"][n] = {{"shape", t.shape}, {"min", lo}, {"max", hi}};
            text << "  " << n << " " << shape_to_string(t.shape) << ": min " << lo << ", max " << hi << "\n";
        }
    }
    j["ok"] = ok;
    rep.ok = ok;
    rep.json = j;
    std::ostringstream head;
    head << c.file << ": ran on " << o.target << (f32 ? " (float32)" : " (float64)") << " in " << ms << " ms\n";
    rep.text = head.str() + text.str() + (o.check ? (ok ? "check: ok\n" : "check: FAILED\n") : "");
    return rep;
}

}  // namespace rf
