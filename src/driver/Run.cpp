/** \file Run.cpp
 * `run`: execute a Kernel on random or loaded inputs, check the outputs against the float64
 * reference (with the magnitude reference where terms cancel), report.
 */
#include "driver/Run.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "driver/Environment.h"
#include "driver/HostTarget.h"
#include "interp/Compare.h"
#include "interp/Magnitude.h"
#include "interp/Npy.h"
#include "interp/Reference.h"
#include "runtime/CpuBackend.h"
#include "support/Error.h"

namespace rf {

namespace {

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

bool plan_is_approximate(const Plan &plan) {
    for (const ChainPlan &c : plan.chains)
        for (const PassPlan &pp : c.passes)
            for (const MemberAnalysis &m : pp.members_exec)
                if (!m.exact) return true;
    return false;
}

/** Unit roundoff of the narrowest rounding in the spec (casts to narrow types; round() counts as 0.5). */
double narrowest_rounding_epsilon(const Program &p) {
    double eps = 0;
    for (const TensorDef &d : p.defs)
        visit(d.body, [&](Expr e) {
            if (!is_rounding(e)) return;
            eps = std::max(eps, e->kind == Kind::Cast && !is_int(e->dtype) ? dtype_epsilon(e->dtype) : 0.5 / 127);
        });
    return eps;
}

/** The spec in exact arithmetic: every rounding removed. */
Program without_rounding(const Program &p) {
    Program q = p;
    for (TensorDef &d : q.defs) d.body = strip_rounding(d.body);
    return q;
}

/** The interpreters hold every tensor as doubles: refuse sizes that would not fit in memory rather
 *  than be killed by it. */
void check_interpretable(const Program &p, const SizeBinding &sizes, bool needed) {
    const double kMaxElements = double(1 << 27);
    double elements = 0;
    for (const InputDecl &in : p.inputs) {
        double n = 1;
        for (int64_t d : input_shape(in, sizes)) n *= static_cast<double>(d);
        elements += n;
    }
    for (const TensorDef &d : p.defs) {
        double n = 1;
        for (int64_t e : def_shape(d, sizes)) n *= static_cast<double>(e);
        elements += n;
    }
    if (elements > kMaxElements && needed)
        throw UserError({}, "these sizes need " + std::to_string(static_cast<long long>(elements)) +
                                " tensor elements; the interpreters are for checking at small sizes (at most " +
                                std::to_string(static_cast<long long>(kMaxElements)) + ")");
}

/** Bytes of physical memory the system says are available (MemAvailable), 0 when unknown. */
double available_memory_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    double kib = 0;
    while (f >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    return 0;
}

std::string gigabytes(double bytes) {
    std::ostringstream os;
    os.precision(3);
    os << bytes / 1e9 << " GB";
    return os.str();
}

/** `run` holds every input and output twice (as float64 values and in its storage dtype): refuse
 *  sizes whose buffers cannot fit in the available memory, before allocating anything, with the
 *  numbers (an allocation failure later would be an internal error). */
void check_memory(const Program &p, const SizeBinding &sizes) {
    double in_bytes = 0, out_bytes = 0;
    for (const InputDecl &in : p.inputs) {
        double n = 1;
        for (int64_t d : input_shape(in, sizes)) n *= static_cast<double>(d);
        in_bytes += n * (8.0 + dtype_bytes(in.dtype));
    }
    for (const OutputDecl &out : p.outputs) {
        double n = 1;
        for (int64_t e : def_shape(*p.find_def(out.name), sizes)) n *= static_cast<double>(e);
        out_bytes += n * (8.0 + dtype_bytes(out.dtype));
    }
    double have = available_memory_bytes();
    if (have > 0 && in_bytes + out_bytes > have)
        throw UserError({}, "these sizes need about " + gigabytes(in_bytes + out_bytes) + " for the run's buffers (inputs " +
                                gigabytes(in_bytes) + ", outputs " + gigabytes(out_bytes) +
                                ", each as float64 values and in its dtype; the kernel's temporaries come on top), but " +
                                gigabytes(have) + " of memory is available");
}

struct Execution {
    std::map<std::string, Tensor> outputs;
    double ms = 0;
};

/** execute: the inputs in their storage formats, the outputs poisoned, one call of the kernel. */
Execution execute(const Kernel &k, const SizeBinding &sizes, const std::map<std::string, Tensor> &inputs) {
    const Program &p = k.compilation().program;
    CpuBuffers bufs(p, sizes, inputs);
    auto [ins, outs] = buffer_views(bufs, p);
    auto t0 = std::chrono::steady_clock::now();
    k(ins, outs);
    Execution e;
    e.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    e.outputs = bufs.outputs();
    return e;
}

/** The tolerance of an output's line; when the normwise check failed and the magnitude reference
 *  was needed, how far it widened (and whether the cap stopped it). */
std::string tolerance_text(double tol, const CompareResult &r, bool widened) {
    std::ostringstream t;
    t << tol;
    if (widened) {
        std::ostringstream k;
        k.precision(2);
        k << r.cancellation;
        t << "; beyond it, widened up to " << k.str() << "x for cancellation";
        if (r.widening_capped) t << " (capped: at most " << kMaxCancellationWidening << " of max|ref| more)";
    }
    return t.str();
}

/** The literal spec's output as stored in its dtype, as every target stores its own: a value beyond
 *  the dtype's range saturates and one below it flushes (language.md §4), which the 2-ulp storage
 *  tolerance does not cover (fuzz_specs.py seed 13 #151, #276: a product of 7.8e135 stored as f32's
 *  3.4e38, one of 4e-129 as 0, were "wrong" answers of the float64 plan interpreter that were right
 *  to the last digit before the store). A float32 target holds a value beyond float32's range as inf
 *  (seed 77 #93, #170: Σ exp(x·μ) of 1e81 and 3.6e41): with `f32`, such elements of `out` are taken
 *  as they are (accept_f32_overflow), counted in `overflowed`. */
Tensor stored_reference(const Tensor &ref, const Tensor &out, DType dtype, bool f32, int64_t &overflowed) {
    Tensor r = round_output(ref, dtype);
    overflowed = f32 && is_float(dtype) ? accept_f32_overflow(out, ref, r) : 0;
    return r;
}

/** A real value declared as an integer output: both sides are rounded to integers, and a value
 *  within rounding of a .5 tie may land one unit apart. */
double integer_output_tolerance(const Tensor &ref_out) {
    double top = 1;
    for (double v : ref_out.data)
        if (std::isfinite(v)) top = std::max(top, std::fabs(v));
    return 1.0 / top;
}

/** check: every output against the reference on the same inputs. Returns whether all pass. */
bool check_outputs(const Kernel &k, const RunOptions &o, const SizeBinding &sizes, const std::map<std::string, Tensor> &inputs,
                   const std::map<std::string, Tensor> &outputs, nlohmann::json &j, std::ostringstream &text) {
    const Program &p = k.compilation().program;
    // The reference runs the program as checked, before the rewrites the plan was made from (the
    // rate split): the check then also covers them.
    const Program &checked = k.compilation().checked.outputs.empty() ? p : k.compilation().checked;
    bool f32 = k.target().kind != TargetKind::Interp;
    std::map<std::string, Tensor> ref = run_reference(checked, sizes, inputs);
    // Where the reference's terms cancel, float arithmetic is only accurate relative to Σ|terms|:
    // the magnitude reference widens the tolerance there (interp/Magnitude.h). Widening can only
    // turn a failure into a pass, so it is computed (about one more reference run) only once an
    // output fails the normwise tolerance.
    std::map<std::string, Tensor> magnitude;
    int64_t n = longest_reduction(p, sizes);
    // The approximate plan rounds each tile with a running value: it is compared with the unfused
    // quantizer at the rounding's own precision, and its distance to exact arithmetic (the spec
    // without any rounding) is reported next to the unfused quantizer's own.
    double rounding_eps = 0;
    std::map<std::string, Tensor> exact_arith;
    bool approximate = o.approx && plan_is_approximate(k.compilation().plan);
    if (approximate) {
        rounding_eps = narrowest_rounding_epsilon(p);
        exact_arith = run_reference(without_rounding(checked), sizes, inputs);
    }
    bool ok = true;
    std::vector<std::string> widened_outputs;
    for (size_t oi = 0; oi < p.outputs.size(); oi++) {
        const OutputDecl &out = p.outputs[oi];
        bool exact = k.outputs()[oi].is_index;
        double tol = tolerance(out.dtype, f32, n);
        if (approximate) tol = std::max(tol, 4 * rounding_eps);
        int64_t overflowed = 0;
        Tensor ref_out = stored_reference(ref.at(out.name), outputs.at(out.name), out.dtype, f32 && !exact, overflowed);
        if (!exact && is_int(out.dtype)) tol = std::max(tol, integer_output_tolerance(ref_out));
        CompareResult r = compare(outputs.at(out.name), ref_out, tol, exact);
        // widened: the normwise tolerance rejected the output and the magnitude reference decided.
        bool widened = false;
        if (!r.ok && !exact) {
            if (magnitude.empty()) magnitude = run_magnitude(checked, sizes, ref);
            auto mag = magnitude.find(out.name);
            if (mag != magnitude.end()) {
                r = compare(outputs.at(out.name), ref_out, tol, exact, &mag->second, compute_tolerance(f32, n),
                            f32 ? 0x1p-24 : 0x1p-53);
                widened = r.cancellation > 1 || r.widening_capped;
            }
        }
        ok = ok && r.ok;
        j["outputs"][out.name] = {{"max_abs_err", r.max_abs_err}, {"max_rel_err", r.max_rel_err},
                                  {"mismatches", r.mismatches}, {"nans", r.nans},
                                  {"numbers_for_nan", r.numbers_for_nan}, {"tolerance", tol},
                                  {"cancellation", r.cancellation}, {"widened", widened},
                                  {"widening_capped", r.widening_capped}, {"exact", exact}, {"ok", r.ok},
                                  {"beyond_f32", overflowed}};
        if (widened) widened_outputs.push_back(out.name);
        if (approximate && !exact) {
            CompareResult plan_vs_exact = compare(outputs.at(out.name), exact_arith.at(out.name), INFINITY);
            CompareResult unfused_vs_exact = compare(round_output(ref.at(out.name), out.dtype), exact_arith.at(out.name), INFINITY);
            j["outputs"][out.name]["approximate_plan"] = {
                {"rel_err_vs_unfused_quantizer", r.max_rel_err},
                {"rel_err_vs_exact_arithmetic", plan_vs_exact.max_rel_err},
                {"unfused_quantizer_rel_err_vs_exact_arithmetic", unfused_vs_exact.max_rel_err}};
            // The errors are over finite pairs: a non-finite disagreement (the running scale of the
            // approximate plan meeting an infinity) is counted, not measured.
            text << "  " << out.name << " (approximate plan): rel err " << r.max_rel_err << " vs the unfused quantizer"
                 << (r.mismatches > 0 && r.max_rel_err <= tol ? " over its finite values" : "") << ", "
                 << plan_vs_exact.max_rel_err << " vs exact arithmetic (the unfused quantizer itself: "
                 << unfused_vs_exact.max_rel_err << ")\n";
        }
        text << "  " << out.name << ": max_abs_err " << r.max_abs_err << ", max_rel_err " << r.max_rel_err
             << (exact ? " (exact)" : " (tolerance " + tolerance_text(tol, r, widened) + ")");
        if (overflowed) text << ", " << overflowed << " element(s) beyond float32's range: inf, as float32 holds them";
        // The errors above are over finite pairs only: say how many elements failed, and how many of
        // them are NaN where the reference has a number (else a NaN output reads "max_abs_err 0 ... FAILED").
        if (!r.ok) {
            std::string why;
            if (r.nans) why = std::to_string(r.nans) + " NaN where the reference has a number";
            if (r.numbers_for_nan)
                why += (why.empty() ? "" : "; ") + std::to_string(r.numbers_for_nan) + " a number or infinity where the reference is NaN";
            text << ", " << r.mismatches << " element(s) wrong" << (why.empty() ? "" : " (" + why + ")");
        }
        text << (r.ok ? "  ok" : "  FAILED") << "\n";
    }
    if (!widened_outputs.empty()) {
        std::string names;
        for (const std::string &w : widened_outputs) names += (names.empty() ? "" : ", ") + w;
        text << "  the normwise tolerance needed widening for cancellation: " << names << "\n";
    }
    j["widened"] = widened_outputs;
    return ok;
}

/** Without --check: each output's shape and range. */
void summarize_outputs(const std::map<std::string, Tensor> &outputs, nlohmann::json &j, std::ostringstream &text) {
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

std::string how_it_ran(TargetKind kind, bool unfused) {
    std::string plan = unfused ? ", unfused plan" : "";
    switch (kind) {
    case TargetKind::Cpu: return " (generated C++" + plan + ")";
    case TargetKind::Cuda: return " (generated CUDA" + plan + ")";
    case TargetKind::OpenCL: return " (generated OpenCL C" + plan + ")";
    case TargetKind::Interp: return " (float64)";
    case TargetKind::InterpF32: return " (float32)";
    }
    return "";
}

}  // namespace

std::pair<std::vector<TensorView>, std::vector<TensorView>> buffer_views(CpuBuffers &bufs, const Program &p) {
    std::vector<TensorView> ins, outs;
    for (size_t i = 0; i < bufs.count(); i++)
        (i < p.inputs.size() ? ins : outs).emplace_back(bufs.data(i), bufs.dtype_of(i), bufs.shape_of(i));
    return {ins, outs};
}

Options RunOptions::compile_options() const {
    Options co;
    co.sizes = sizes;
    co.approx = approx;
    co.unfused = unfused;
    co.tile = tile;
    co.segments = segments;
    co.row_block = row_block;
    co.threads = threads;
    co.gpu_threads = gpu_threads;
    co.fusion_level = fusion_level;
    co.tensor_cores = !no_tensor_cores;
    co.bf16_tile_products = !exact_products;
    co.half_accuracy_exp2 = !exact_products;
    co.interp_seed = seed;
    return co;
}

std::map<std::string, Tensor> run_inputs(const Program &p, const SizeBinding &sizes, const RunOptions &o) {
    return o.load_dir.empty() ? make_random_inputs(p, sizes, o.seed, o.dist, o.scale) : load_dir(o.load_dir, p, sizes);
}

RunReport run_kernel(const Kernel &k, const RunOptions &o) {
    const Program &p = k.compilation().program;
    SizeBinding sizes = bind_sizes(p, o.sizes);
    TargetKind kind = k.target().kind;
    check_interpretable(p, sizes, is_interpreter(kind) || o.check);
    check_memory(p, sizes);
    std::map<std::string, Tensor> inputs = run_inputs(p, sizes, o);
    Execution e = execute(k, sizes, inputs);                                        // execute

    nlohmann::json j;
    if (!is_interpreter(kind)) {
        j["compile_ms"] = k.compile_ms();
        j["jit_cached"] = k.from_cache();
        j[is_gpu(kind) ? "launches" : "kernels"] = k.module().kernels.size();
    }
    j["target"] = to_string(kind);
    j["time_ms"] = e.ms;
    j["sizes"] = sizes;
    j["seed"] = o.seed;
    if (!o.save_dir.empty()) {
        std::map<std::string, Tensor> to_save;
        for (const InputDecl &in : p.inputs) to_save[in.name] = round_output(inputs.at(in.name), in.dtype);
        for (auto &[n, t] : e.outputs) to_save[n] = t;
        save_dir(o.save_dir, to_save);
        j["saved"] = o.save_dir;
    }
    std::ostringstream text;
    bool ok = o.check ? check_outputs(k, o, sizes, inputs, e.outputs, j, text) : true;  // check
    if (!o.check) summarize_outputs(e.outputs, j, text);
    j["ok"] = ok;                                                                   // report
    RunReport rep;
    rep.ok = ok;
    rep.json = j;
    std::ostringstream head;
    head << k.compilation().file << ": ran on " << to_string(kind) << how_it_ran(kind, o.unfused) << " in " << e.ms << " ms\n";
    rep.text = head.str() + text.str() + (o.check ? (ok ? "check: ok\n" : "check: FAILED\n") : "");
    return rep;
}

namespace {
Target run_target(const RunOptions &o) {
    TargetKind kind = o.target == TargetKind::Interp && o.f32 ? TargetKind::InterpF32 : o.target;
    return make_target(TargetRequest{kind, o.arch, ""});
}
}  // namespace

RunReport run_spec(const std::string &spec, const RunOptions &o) {
    return run_kernel(compile(spec, run_target(o), o.compile_options()), o);
}

RunReport run_compiled(const Compilation &c, const RunOptions &o) {
    install_environment_once();
    std::unique_ptr<Compilation> compiled = analyze_source(c.source, c.file, run_target(o), o.compile_options());
    Options schedule = compiled->options;
    return run_kernel(compile_kernel(std::move(compiled), schedule), o);
}

}  // namespace rf
