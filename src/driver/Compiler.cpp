/** \file Compiler.cpp
 * The pipeline function and the `run` command: parse → check → IR → plan, then execute with the plan
 * interpreter and compare against the float64 reference.
 */
#include "driver/Compiler.h"

#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

#include "fuse/Graph.h"
#include "interp/Compare.h"
#include "interp/Inputs.h"
#include "interp/Magnitude.h"
#include "interp/Npy.h"
#include "interp/PlanInterp.h"
#include "interp/Reference.h"
#include "codegen/CodeGen_C.h"
#include "codegen/CodeGen_CPU.h"
#include "runtime/CpuBackend.h"
#include "runtime/GpuBackend.h"
#include "runtime/CpuFeatures.h"
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

PlanOptions plan_options_for(const std::string &target) {
    PlanOptions po;
    if (target == "cpu") {
        const CpuFeatures &cpu = host_cpu();
        po.parallel_units = static_cast<int>(std::max(1u, cpu.usable_cpus ? cpu.usable_cpus : cpu.logical_cpus));
        if (cpu.l2_bytes > 0) po.fast_memory_bytes = cpu.l2_bytes / 2;  // leave room for the other operands
    } else if (target != "gpu" && target != "cuda" && target != "opencl") {
        throw UserError({}, "unknown target '" + target + "' for the cost model (cpu, gpu, cuda, opencl)");
    }
    return po;
}

std::unique_ptr<Compilation> compile_source(const std::string &source, const std::string &file,
                                            const CompileOptions &opts) {
    auto c = std::make_unique<Compilation>();
    c->file = file;
    c->source = source;
    auto t0 = std::chrono::steady_clock::now();
    c->program = parse_program(source, file);                                      // parse + check → IR
    if (dump_requested("ir")) std::cerr << to_string(c->program);
    if (dump_requested("graph")) std::cerr << to_string(dependence_graph(c->program), c->program);
    PlanOptions po = plan_options_for(opts.target);
    po.approx = opts.approx;
    SizeBinding sizes;
    if (!opts.sizes.empty()) sizes = bind_sizes(c->program, opts.sizes);
    else {
        for (const SizeDecl &s : c->program.sizes)
            if (s.default_value) sizes[s.name] = *s.default_value;
    }
    c->sizes = sizes;
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

bool is_index_output(const Program &p, const std::string &name) {
    const TensorDef *d = p.find_def(name);
    return d && ((d->is_topk() && d->index_name == name) || d->stype == SType::Int);
}

}  // namespace

std::string backend_dump(const Compilation &c, const std::string &stage) {
    // The schedule (row block, tile, segments) is chosen for the sizes the plan was made for.
    tile::LowerOptions lo;
    lo.sizes = c.sizes;
    if (stage == "opencl" || stage == "cuda") {
        GpuOptions go;
        go.target = stage;
        return generate_gpu_module(c.plan, lo.sizes, go).source;
    }
    tile::Module m = tile::lower_plan(c.plan, lo);
    tile::verify(m);
    if (stage == "tile") return tile::to_string(m);
    return generate_cpu(m);
}

EmitDir::EmitDir(const std::string &dir) : dir_(dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw UserError({}, "cannot create directory '" + dir + "': " + ec.message());
}

void EmitDir::write(const std::string &file, const std::string &text) {
    std::string path = (std::filesystem::path(dir_) / file).string();
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw UserError({}, "cannot write '" + path + "'");
    written.push_back(path);
}

std::vector<std::string> emit_cpu(const Compilation &c, const std::string &dir, const std::string &name) {
    std::string id = c_identifier(name, "");
    if (id != name || name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
        throw UserError({}, "--name must be a C identifier (letters, digits, '_'; not starting with a digit), got '" + name + "'");
    PlanOptions po = plan_options_for("cpu");
    SizeBinding sizes = c.sizes;  // emit --size: what the schedule is chosen for
    po.sizes = &sizes;
    Plan plan = make_plan(c.program, po);
    plan.program = &c.program;
    tile::LowerOptions lo;
    lo.sizes = sizes;
    tile::Module m = tile::lower_plan(plan, lo);
    tile::verify(m);
    CpuCodegenOptions cg;
    cg.inline_headers = false;
    cg.symbol_prefix = name;
    EmitDir out(dir);
    auto write = [&](const std::string &file, const std::string &text) { out.write(file, text); };
    std::ostringstream h;
    h << "/* " << name << ".h: generated by redfuse from a spec; the C ABI of " << name << ".cpp.\n"
      << " * Build: c++ -std=c++17 -O3 -fopenmp [-march=native] -c " << name << ".cpp (needs redfuse_cpu.h next to it).\n"
      << " * Buffers: inputs then outputs in spec order, dense row-major, in their declared dtype\n"
      << " * (dtype codes: 0 f64, 1 f32, 2 f16, 3 bf16, 4 f8e4m3, 5 f8e5m2, 6 i8, 7 i32, 8 i64; 16-bit floats as\n"
      << " * uint16_t bits, fp8 as uint8_t). Sizes in spec order. threads <= 0: every CPU. Returns 0 on\n"
      << " * success, 1 when temporaries could not be allocated. */\n"
      << "#ifndef " << name << "_H\n#define " << name << "_H\n#include <stdint.h>\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
      << "int " << name << "_run(const int64_t *sizes, void *const *buffers, int threads);\n"
      << "int " << name << "_num_sizes(void);\nconst char *" << name << "_size_name(int i);\n"
      << "int " << name << "_num_buffers(void);\nconst char *" << name << "_buffer_name(int i);\n"
      << "int " << name << "_buffer_dtype(int i);\nint " << name << "_buffer_is_output(int i);\n"
      << "#ifdef __cplusplus\n}\n#endif\n#endif\n";
    write(name + ".h", h.str());
    write(name + ".cpp", "#include \"" + name + ".h\"\n" + generate_cpu(m, cg));
    write("redfuse_cpu.h", cpu_runtime_header());
    write("redfuse_simd.h", cpu_simd_header());
    return out.written;
}

RunReport run_compiled(const Compilation &c, const RunOptions &o) {
    RunReport rep;
    const Program &p = c.program;
    SizeBinding sizes = bind_sizes(p, o.sizes);
    bool cpu = o.target == "cpu", gpu = o.target == "opencl" || o.target == "cuda";
    if (o.target != "interp" && o.target != "interp-f32" && !cpu && !gpu)
        throw UserError({}, "unknown target '" + o.target + "' (cpu, cuda, opencl, interp, interp-f32)");
    bool f32 = o.f32 || o.target == "interp-f32" || cpu || gpu;
    // The interpreters hold every tensor as doubles: refuse sizes that would not fit in memory rather
    // than be killed by it.
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
    if (elements > kMaxElements && (!(cpu || gpu) || o.check))
        throw UserError({}, "these sizes need " + std::to_string(static_cast<long long>(elements)) +
                                " tensor elements; the interpreters are for checking at small sizes (at most " +
                                std::to_string(static_cast<long long>(kMaxElements)) + ")");

    std::map<std::string, Tensor> inputs =
        o.load_dir.empty() ? make_random_inputs(p, sizes, o.seed, parse_dist(o.dist), o.scale) : load_dir(o.load_dir, p, sizes);

    // Re-plan at the bound sizes so the strategy matches what runs (and the machine it runs on).
    PlanOptions po = plan_options_for(cpu ? "cpu" : "gpu");
    po.sizes = &sizes;
    po.approx = o.approx;
    Plan plan = make_plan(p, po);
    plan.program = &p;

    std::map<std::string, Tensor> results, outputs;
    double ms = 0;
    nlohmann::json j;
    if (cpu) {
        CpuOptions co;
        co.threads = o.threads;
        co.unfused = o.unfused;
        co.tile = o.tile;
        co.segments = o.segments;
        co.row_block = o.row_block;
        std::unique_ptr<CpuProgram> prog = compile_cpu(plan, sizes, co);
        CpuBuffers bufs(p, sizes, inputs);
        auto t0 = std::chrono::steady_clock::now();
        bufs.run(*prog, o.threads);
        ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        outputs = bufs.outputs();
        j["compile_ms"] = prog->compile_ms;
        j["jit_cached"] = prog->from_cache;
        j["kernels"] = prog->module.kernels.size();
        for (const InputDecl &in : p.inputs) results[in.name] = round_output(inputs.at(in.name), in.dtype);
    } else if (gpu) {
        GpuOptions go;
        go.target = o.target;
        go.threads = o.gpu_threads;
        go.fusion_level = o.fusion_level;
        go.unfused = o.unfused;
        go.tile = o.tile;
        go.segments = o.segments;
        go.row_block = o.row_block;
        go.tensor_cores = !o.no_tensor_cores;
        std::unique_ptr<GpuProgram> prog = compile_gpu(plan, sizes, go);
        GpuBuffers bufs(*prog, p, sizes, inputs);
        bufs.poison();
        auto t0 = std::chrono::steady_clock::now();
        bufs.run();
        bufs.sync();
        ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        outputs = bufs.outputs();
        j["compile_ms"] = prog->compile_ms;
        j["device"] = prog->device_name;
        j["launches"] = prog->gpu.launches.size();
        for (const InputDecl &in : p.inputs) results[in.name] = round_output(inputs.at(in.name), in.dtype);
    } else {
        PlanInterpOptions pio;
        pio.f32 = f32;
        pio.seed = o.seed;
        auto t0 = std::chrono::steady_clock::now();
        results = run_plan(plan, sizes, inputs, pio);
        ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        for (const OutputDecl &out : p.outputs) outputs[out.name] = round_output(results.at(out.name), out.dtype);
    }

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
        bool approximate = o.approx && plan_is_approximate(plan);
        if (approximate) {
            rounding_eps = narrowest_rounding_epsilon(p);
            Program stripped = without_rounding(p);
            exact_arith = run_reference(stripped, sizes, inputs);
        }
        for (const OutputDecl &out : p.outputs) {
            bool exact = is_index_output(p, out.name);
            double tol = tolerance(out.dtype, f32, n);
            if (approximate) tol = std::max(tol, 4 * rounding_eps);
            Tensor ref_out = ref.at(out.name);
            if (exact) ref_out = round_output(ref_out, out.dtype);
            if (!exact && is_int(out.dtype)) {
                // A real value declared as an integer output: both sides are rounded to integers, and a
                // value within rounding of a .5 tie may land one unit apart.
                ref_out = round_output(ref_out, out.dtype);
                double top = 1;
                for (double v : ref_out.data)
                    if (std::isfinite(v)) top = std::max(top, std::fabs(v));
                tol = std::max(tol, 1.0 / top);
            }
            CompareResult r = compare(outputs.at(out.name), ref_out, tol, exact);
            if (!r.ok && !exact) {
                if (magnitude.empty()) magnitude = run_magnitude(p, sizes, ref);
                auto mag = magnitude.find(out.name);
                if (mag != magnitude.end())
                    r = compare(outputs.at(out.name), ref_out, tol, exact, &mag->second, compute_tolerance(f32, n));
            }
            ok = ok && r.ok;
            j["outputs"][out.name] = {{"max_abs_err", r.max_abs_err}, {"max_rel_err", r.max_rel_err},
                                      {"mismatches", r.mismatches}, {"nans", r.nans}, {"tolerance", tol},
                                      {"cancellation", r.cancellation}, {"exact", exact}, {"ok", r.ok}};
            if (approximate && !exact) {
                CompareResult plan_vs_exact = compare(outputs.at(out.name), exact_arith.at(out.name), INFINITY);
                CompareResult unfused_vs_exact = compare(round_output(ref.at(out.name), out.dtype), exact_arith.at(out.name), INFINITY);
                j["outputs"][out.name]["approximate_plan"] = {
                    {"rel_err_vs_unfused_quantizer", r.max_rel_err},
                    {"rel_err_vs_exact_arithmetic", plan_vs_exact.max_rel_err},
                    {"unfused_quantizer_rel_err_vs_exact_arithmetic", unfused_vs_exact.max_rel_err}};
                text << "  " << out.name << " (approximate plan): rel err " << r.max_rel_err
                     << " vs the unfused quantizer, " << plan_vs_exact.max_rel_err
                     << " vs exact arithmetic (the unfused quantizer itself: " << unfused_vs_exact.max_rel_err << ")\n";
            }
            std::ostringstream tol_text;
            tol_text << tol;
            if (r.cancellation >= 1.05) {  // shown once it reads as more than "1x" at two digits
                std::ostringstream k;
                k.precision(2);
                k << r.cancellation;
                tol_text << ", up to " << k.str() << "x for cancellation";
            }
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
    std::string how = cpu ? (o.unfused ? " (generated C++, unfused plan)" : " (generated C++)")
                      : gpu ? std::string(o.target == "cuda" ? " (generated CUDA" : " (generated OpenCL C") + (o.unfused ? ", unfused plan)" : ")")
                            : (f32 ? " (float32)" : " (float64)");
    head << c.file << ": ran on " << o.target << how
         << " in " << ms << " ms\n";
    rep.text = head.str() + text.str() + (o.check ? (ok ? "check: ok\n" : "check: FAILED\n") : "");
    return rep;
}

}  // namespace rf
