/** \file redfuse_ext.cpp
 * The Python extension `redfuse._redfuse`: rf::compile and rf::Kernel over plain buffer views
 * (address, dtype name, shape, strides in elements). The typed layer, array conversion and
 * exceptions' Python types are redfuse/__init__.py; errors cross as (kind, message, file, line,
 * column) so that layer raises SpecError, TypeError or ValueError.
 */
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <fstream>
#include <sstream>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/HostTarget.h"
#include "driver/Kernel.h"
#include "grad/Grad.h"
#include "shard/ShardProgram.h"
#include "spec/Frontend.h"
#include "py_kernel.h"
#include "fuse/Strategy.h"
#include "ir/DType.h"
#include "support/Error.h"

namespace nb = nanobind;
using namespace rfpy;

namespace {

// redfuse._raise(kind, message, file, line, col): raises the Python exception. A handle that keeps
// its reference for the life of the process: an nb::object here would be released by the static
// destructors, after the interpreter has finalized (a fatal error at exit).
nb::handle g_error_factory;

rf::DType parse_dtype(const std::string &name) {
    if (std::optional<rf::DType> t = rf::dtype_from_name(name)) return *t;
    throw rf::ArgumentError(rf::ArgumentError::Kind::Dtype, "unknown dtype '" + name + "'");
}

using Info = std::tuple<std::string, std::string, std::vector<std::string>, bool>;

std::vector<Info> infos(const std::vector<rf::TensorInfo> &ts) {
    std::vector<Info> out;
    for (const rf::TensorInfo &t : ts) out.emplace_back(t.name, rf::dtype_name(t.dtype), t.shape, t.is_index);
    return out;
}

/** The schedule choices Python may make (docs/python.md: redfuse.compile's keywords). */
struct PyOptions {
    bool unfused = false;
    std::string strategy;  // "" : the planner's choice
    int threads = 0;       // 0 : the target's usable CPUs
    bool exact_products = false;  // CPU: no bf16 rounding of float tiles in tile GEMMs
    int64_t tile = 0, segments = 0, row_block = 0;  // schedule knobs forced on every chain (0: chosen)
};

PyKernel compile_spec(const std::string &spec, const std::string &target, const std::vector<std::pair<std::string, int64_t>> &sizes,
                      const PyOptions &options) {
    std::string file = spec.find('\n') == std::string::npos ? spec : "<spec>";
    return translated(file, [&] {
        rf::Options o;
        for (const auto &[n, v] : sizes) o.sizes[n] = v;
        o.unfused = options.unfused;
        if (!options.strategy.empty()) o.strategy = rf::parse_strategy(options.strategy);
        if (options.threads < 0) throw rf::UserError({}, "threads must be at least 0 (0: every usable CPU), got " + std::to_string(options.threads));
        o.threads = options.threads;
        o.bf16_tile_products = !options.exact_products;
        o.half_accuracy_exp2 = !options.exact_products;
        // The ranges of the command line's --tile, --segments and --row-block (docs/cli.md).
        auto knob = [](const char *name, int64_t v, int64_t most) {
            if (v < 0 || v > most)
                throw rf::UserError({}, std::string(name) + " must be from 1 to " + std::to_string(most) + " (or None: chosen), got " + std::to_string(v));
            return v;
        };
        o.tile = knob("tile", options.tile, int64_t(1) << 20);
        o.segments = knob("segments", options.segments, 4096);
        o.row_block = knob("row_block", options.row_block, 4096);
        rf::Target t = rf::make_target(rf::parse_target_kind(target));
        nb::gil_scoped_release release;  // the JIT may take seconds
        PyKernel k;
        k.k = std::make_shared<rf::Kernel>(rf::compile(spec, t, o));
        k.file = file;
        return k;
    });
}

// ---- Partial states (docs/sharding.md): float64 host arrays cross as (address, shape) and come back
// as (shape, bytes); the Python layer converts them to and from torch/NumPy.
using PyArray = std::tuple<std::string, uintptr_t, std::vector<int64_t>, std::string>;  // name, address, shape, dtype
using PyState = std::pair<int64_t, std::vector<PyArray>>;                            // n, fields
using PyResult = std::vector<std::tuple<std::string, std::vector<int64_t>, nb::bytes>>;  // name, shape, data

struct PyPartial {
    std::shared_ptr<rf::PartialProgram> p;
};

std::map<std::string, rf::Tensor> tensors_of(const std::vector<PyArray> &arrays) {
    std::map<std::string, rf::Tensor> out;
    for (const auto &[name, addr, shape, dtype] : arrays) {
        rf::Tensor t = rf::Tensor::filled(shape, 0.0);
        const void *p = reinterpret_cast<const void *>(addr);
        size_t n = t.data.size();
        // Dense host arrays of the dtypes states are made of, widened to float64 here (no copy in Python).
        if (dtype == "f64") std::memcpy(t.data.data(), p, sizeof(double) * n);
        else if (dtype == "f32") std::copy_n(static_cast<const float *>(p), n, t.data.begin());
        else if (dtype == "i64") std::copy_n(static_cast<const int64_t *>(p), n, t.data.begin());
        else if (dtype == "i32") std::copy_n(static_cast<const int32_t *>(p), n, t.data.begin());
        else throw rf::ArgumentError(rf::ArgumentError::Kind::Dtype, "state field '" + name + "' has dtype " + dtype +
                                                                      "; states hold f64, f32, i64 or i32");
        out[name] = std::move(t);
    }
    return out;
}

PyResult result_of(const std::map<std::string, rf::Tensor> &ts) {
    PyResult out;
    for (const auto &[name, t] : ts)
        out.emplace_back(name, t.shape, nb::bytes(reinterpret_cast<const char *>(t.data.data()), sizeof(double) * t.data.size()));
    return out;
}

rf::SizeBinding binding_of(const std::vector<std::pair<std::string, int64_t>> &sizes) {
    rf::SizeBinding b;
    for (const auto &[n, v] : sizes) b[n] = v;
    return b;
}

}  // namespace

namespace rfpy {

[[noreturn]] void raise(const char *kind, const std::string &message, const std::string &file, int line, int col) {
    if (!g_error_factory.is_valid()) throw std::runtime_error(message);
    g_error_factory(kind, message, file, line, col);  // raises; returns only if it did not
    throw std::runtime_error(message);
}

std::vector<rf::TensorView> views(const std::vector<PyView> &in) {
    std::vector<rf::TensorView> out;
    for (const auto &[addr, dtype, shape, strides, cuda] : in)
        out.emplace_back(reinterpret_cast<void *>(addr), parse_dtype(dtype), shape, strides,
                         cuda ? rf::MemorySpace::Cuda : rf::MemorySpace::Host);
    return out;
}

PyCall prepare_call(const rf::Kernel &k, std::vector<rf::TensorView> ins, bool cuda) {
    PyCall c;
    c.n_buffers = ins.size() + k.outputs().size();
    for (const rf::TensorView &v : ins) c.bytes += static_cast<size_t>(v.numel()) * static_cast<size_t>(rf::dtype_bytes(v.dtype));
    c.prepared = k.prepare(std::move(ins), cuda ? rf::MemorySpace::Cuda : rf::MemorySpace::Host);
    for (size_t j = 0; j < k.outputs().size(); j++) {
        size_t n = 1;
        for (int64_t e : c.prepared.output_shapes()[j]) n *= static_cast<size_t>(e);
        c.bytes += n * static_cast<size_t>(rf::dtype_bytes(k.outputs()[j].dtype));
    }
    return c;
}

void run_prepared(const std::shared_ptr<rf::Kernel> &k, const PyCall &call, const uintptr_t *addresses, void *stream,
                  bool release_gil) {
    static_assert(sizeof(uintptr_t) == sizeof(void *), "addresses are pointers");
    const auto *pointers = reinterpret_cast<const void *const *>(addresses);
    if (!release_gil) return k->run(call.prepared, pointers, stream);  // k outlives the call: the GIL is held
    std::shared_ptr<rf::Kernel> keep = k;
    nb::gil_scoped_release release;  // other Python threads run while the kernel does
    keep->run(call.prepared, pointers, stream);
}

}  // namespace rfpy

NB_MODULE(_redfuse, m) {
    m.doc() = "redfuse's compiled core (use the `redfuse` package)";
    // Kernels registered as torch.library ops live until the interpreter exits (torch keeps every
    // op): not leaks, so no report at exit.
    nb::set_leak_warnings(false);
    m.def("_set_error_factory", [](nb::object f) { g_error_factory = f.release(); });
    m.def("compile",
          [](const std::string &spec, const std::string &target, const std::vector<std::pair<std::string, int64_t>> &sizes,
             bool unfused, const std::string &strategy, int threads, bool exact_products, int64_t tile, int64_t segments,
             int64_t row_block) {
              return compile_spec(spec, target, sizes, PyOptions{unfused, strategy, threads, exact_products, tile, segments, row_block});
          },
          nb::arg("spec"), nb::arg("target"), nb::arg("sizes"), nb::arg("unfused") = false, nb::arg("strategy") = "",
          nb::arg("threads") = 0, nb::arg("exact_products") = false, nb::arg("tile") = 0, nb::arg("segments") = 0,
          nb::arg("row_block") = 0);
    m.def("grad",
          [](const std::string &spec, const std::vector<std::string> &wrt, bool straight_through) {
              // The derived backward (docs/grad.md) of a spec's text or file: (forward-with-residuals
              // spec, backward spec, [(output, adjoint input)], [(input, gradient output)], notes).
              std::string file = spec.find('\n') == std::string::npos ? spec : "<spec>";
              return translated(file, [&] {
                  std::string text = spec;
                  if (file != "<spec>") {
                      std::ifstream in(spec, std::ios::binary);
                      if (!in) throw rf::UserError({}, "cannot read spec file '" + spec + "'");
                      std::ostringstream ss;
                      ss << in.rdbuf();
                      text = ss.str();
                  }
                  rf::ArenaScope arena;
                  rf::GradOptions o;
                  o.wrt = wrt;
                  o.straight_through = straight_through;
                  rf::GradResult g = rf::derive_backward(rf::parse_program(text, file), o);
                  return std::make_tuple(g.forward_spec, g.backward_spec, g.adjoints, g.gradients, g.notes);
              });
          },
          nb::arg("spec"), nb::arg("wrt"), nb::arg("straight_through"));
    m.def("shard_program",
          [](const std::string &spec, const std::vector<std::pair<std::string, size_t>> &sharded) {
              // A program on one shard of an axis (docs/sharding.md, "Backward"): (spec text, layout JSON).
              return translated("<spec>", [&] {
                  rf::ArenaScope arena;
                  rf::ShardedProgram sp = rf::shard_program(rf::parse_program(spec, "<spec>"), sharded);
                  return std::make_pair(sp.spec, sp.layout().dump());
              });
          });
    m.def("builds", [] { return rf::kernel_builds(); });
    m.def("_set_torch", &set_torch);
    m.def("_set_numpy", &set_numpy);
    m.def("_set_torch_api", &set_torch_api, nb::arg("capsule").none());
    nb::class_<PyCall>(m, "Call").def_prop_ro("output_shapes", [](const PyCall &c) { return c.output_shapes(); });
    nb::class_<PyKernel>(m, "Kernel")
        .def("inputs", [](const PyKernel &k) { return infos(k.k->inputs()); })
        .def("outputs", [](const PyKernel &k) { return infos(k.k->outputs()); })
        .def("size_names", [](const PyKernel &k) { return k.k->size_names(); })
        .def("fixed_sizes",
             [](const PyKernel &k) {
                 // The sizes that have a value without any buffer: the compile options', else the spec's default.
                 std::vector<std::pair<std::string, int64_t>> out;
                 const rf::Compilation &c = k.k->compilation();
                 for (const rf::SizeDecl &s : c.program.sizes) {
                     auto it = c.options.sizes.find(s.name);
                     if (it != c.options.sizes.end()) out.emplace_back(s.name, it->second);
                     else if (s.default_value) out.emplace_back(s.name, *s.default_value);
                 }
                 return out;
             })
        .def("target", [](const PyKernel &k) { return std::string(rf::to_string(k.k->target().kind)); })
        .def("output_shapes",
             [](const PyKernel &k, const std::vector<PyView> &ins) {
                 return translated(k.file, [&] { return k.k->output_shapes(views(ins)); });
             })
        .def("sizes",
             [](const PyKernel &k, const std::vector<PyView> &ins, const std::vector<PyView> &outs) {
                 return translated(k.file, [&] {
                     std::vector<std::pair<std::string, int64_t>> out;
                     for (const auto &[n, v] : k.k->bind_sizes(views(ins), views(outs))) out.emplace_back(n, v);
                     return out;
                 });
             })
        .def("run",
             [](const PyKernel &k, const std::vector<PyView> &ins, const std::vector<PyView> &outs, uintptr_t stream) {
                 translated(k.file, [&] {
                     std::vector<rf::TensorView> i = views(ins), o = views(outs);
                     std::shared_ptr<rf::Kernel> keep = k.k;
                     nb::gil_scoped_release release;  // other Python threads run while the kernel does
                     (*keep)(i, o, reinterpret_cast<void *>(stream));
                     return 0;
                 });
             })
        .def("prepare",
             [](const PyKernel &k, const std::vector<PyView> &ins, bool cuda) {
                 return translated(k.file, [&] { return prepare_call(*k.k, views(ins), cuda); });
             })
        .def("run_prepared",
             [](const PyKernel &k, const PyCall &prepared, const std::vector<uintptr_t> &addresses, uintptr_t stream) {
                 if (addresses.size() != prepared.n_buffers)
                     throw std::runtime_error("run_prepared: wrong number of addresses");
                 translated(k.file, [&] {
                     run_prepared(k.k, prepared, addresses.data(), reinterpret_cast<void *>(stream));
                     return 0;
                 });
             })
        .def("set_torch_dtypes",
             [](PyKernel &k, const std::vector<nb::handle> &in, const std::vector<nb::handle> &out) { set_torch_dtypes(k, in, out); })
        .def("call_torch_args",
             [](PyKernel &k, nb::handle args, nb::handle kwargs) { return translated(k.file, [&] { return call_torch_args(k, args, kwargs); }); })
        .def("call_torch_cpu", [](PyKernel &k, nb::handle args) { return translated(k.file, [&] { return call_torch_cpu(k, args); }); })
        .def("set_numpy_dtypes",
             [](PyKernel &k, const std::vector<nb::handle> &in, const std::vector<nb::handle> &out) { set_numpy_dtypes(k, in, out); })
        .def("call_numpy", [](PyKernel &k, nb::handle args) { return translated(k.file, [&] { return call_numpy(k, args); }); })
        .def("time_calls",
             [](const PyKernel &k, const std::vector<PyView> &ins, const std::vector<PyView> &outs, int reps) {
                 // Seconds per call of the C++ Kernel (binding + run) on these buffers, timed in C++:
                 // the call-overhead benchmark subtracts it from the time of a call from Python.
                 return translated(k.file, [&] {
                     std::vector<rf::TensorView> i = views(ins), o = views(outs);
                     std::shared_ptr<rf::Kernel> keep = k.k;
                     nb::gil_scoped_release release;
                     auto t0 = std::chrono::steady_clock::now();
                     for (int r = 0; r < reps; r++) (*keep)(i, o, nullptr);
                     return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / std::max(reps, 1);
                 });
             })
        .def("analysis_json", [](const PyKernel &k) { return k.k->analysis().dump(); })
        .def("explain", [](const PyKernel &k) { return k.k->explain(); })
        .def("source", [](const PyKernel &k) { return k.k->source(); })
        .def("compile_ms", [](const PyKernel &k) { return k.k->compile_ms(); })
        .def("partial_program",
             [](const PyKernel &k, const std::string &axis, int64_t topk_limit) {
                 return translated(k.file, [&] {
                     return PyPartial{std::make_shared<rf::PartialProgram>(k.k->partial_program(axis, topk_limit))};
                 });
             })
        .def("merge_states",
             [](const PyKernel &k, const PyPartial &pp, const std::vector<std::pair<std::string, int64_t>> &sizes,
                const std::vector<PyArray> &context, const std::vector<PyState> &states, int64_t row_begin, int64_t row_end) {
                 return translated(k.file, [&] {
                     std::vector<rf::ChainState> in;
                     for (const auto &[n, fields] : states) in.push_back({n, tensors_of(fields)});
                     std::vector<const rf::ChainState *> ptrs;
                     for (const rf::ChainState &s : in) ptrs.push_back(&s);
                     std::map<std::string, rf::Tensor> ctx = tensors_of(context);
                     rf::ChainState out;
                     {
                         nb::gil_scoped_release release;
                         out = k.k->merge_states(*pp.p, binding_of(sizes), ctx, ptrs, row_begin, row_end);
                     }
                     return std::make_pair(out.n, result_of(out.fields));
                 });
             })
        .def("finalize_states",
             [](const PyKernel &k, const PyPartial &pp, const std::vector<std::pair<std::string, int64_t>> &sizes,
                const std::vector<PyArray> &context, const PyState &state) {
                 return translated(k.file, [&] {
                     rf::ChainState st{state.first, tensors_of(state.second)};
                     std::map<std::string, rf::Tensor> ctx = tensors_of(context), out;
                     {
                         nb::gil_scoped_release release;
                         out = k.k->finalize_states(*pp.p, binding_of(sizes), ctx, st);
                     }
                     return result_of(out);
                 });
             });
    nb::class_<PyPartial>(m, "Partial")
        .def_prop_ro("spec", [](const PyPartial &p) { return p.p->spec; })
        .def_prop_ro("layout", [](const PyPartial &p) { return p.p->layout().dump(); });
}
