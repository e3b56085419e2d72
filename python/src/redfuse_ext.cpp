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

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/HostTarget.h"
#include "driver/Kernel.h"
#include "ir/DType.h"
#include "support/Error.h"

namespace nb = nanobind;

namespace {

/** (address, dtype, shape, strides, on the CUDA device) as the Python layer passes it. */
using PyView = std::tuple<uintptr_t, std::string, std::vector<int64_t>, std::vector<int64_t>, bool>;

nb::object g_error_factory;  // redfuse._raise(kind, message, file, line, col): raises the Python exception

[[noreturn]] void raise(const char *kind, const std::string &message, const std::string &file = "", int line = 0, int col = 0) {
    if (!g_error_factory.is_valid()) throw std::runtime_error(message);
    g_error_factory(kind, message, file, line, col);  // raises; returns only if it did not
    throw std::runtime_error(message);
}

/** Runs f, turning redfuse's exceptions into the Python layer's. */
template <typename F>
auto translated(const std::string &file, F &&f) -> decltype(f()) {
    try {
        return f();
    } catch (const rf::ArgumentError &e) {
        raise(e.kind() == rf::ArgumentError::Kind::Dtype ? "dtype" : e.kind() == rf::ArgumentError::Kind::Device ? "device" : "shape",
              e.what());
    } catch (const rf::UserError &e) {
        raise("spec", e.what(), file, e.loc().line, e.loc().col);
    } catch (const rf::InternalError &e) {
        raise("internal", std::string("internal error (a bug in redfuse, not in your spec): ") + e.what());
    }
}

rf::DType parse_dtype(const std::string &name) {
    if (std::optional<rf::DType> t = rf::dtype_from_name(name)) return *t;
    throw rf::ArgumentError(rf::ArgumentError::Kind::Dtype, "unknown dtype '" + name + "'");
}

std::vector<rf::TensorView> views(const std::vector<PyView> &in) {
    std::vector<rf::TensorView> out;
    for (const auto &[addr, dtype, shape, strides, cuda] : in)
        out.emplace_back(reinterpret_cast<void *>(addr), parse_dtype(dtype), shape, strides,
                         cuda ? rf::MemorySpace::Cuda : rf::MemorySpace::Host);
    return out;
}

using Info = std::tuple<std::string, std::string, std::vector<std::string>, bool>;

std::vector<Info> infos(const std::vector<rf::TensorInfo> &ts) {
    std::vector<Info> out;
    for (const rf::TensorInfo &t : ts) out.emplace_back(t.name, rf::dtype_name(t.dtype), t.shape, t.is_index);
    return out;
}

/** A compiled kernel as Python holds it (shared: calls may outlive a reassignment in Python). */
struct PyKernel {
    std::shared_ptr<rf::Kernel> k;
    std::string file;
};

PyKernel compile_spec(const std::string &spec, const std::string &target, const std::vector<std::pair<std::string, int64_t>> &sizes) {
    std::string file = spec.find('\n') == std::string::npos ? spec : "<spec>";
    return translated(file, [&] {
        rf::Options o;
        for (const auto &[n, v] : sizes) o.sizes[n] = v;
        rf::Target t = rf::make_target(rf::parse_target_kind(target));
        nb::gil_scoped_release release;  // the JIT may take seconds
        return PyKernel{std::make_shared<rf::Kernel>(rf::compile(spec, t, o)), file};
    });
}

}  // namespace

NB_MODULE(_redfuse, m) {
    m.doc() = "redfuse's compiled core (use the `redfuse` package)";
    // Kernels registered as torch.library ops live until the interpreter exits (torch keeps every
    // op): not leaks, so no report at exit.
    nb::set_leak_warnings(false);
    m.def("_set_error_factory", [](nb::object f) { g_error_factory = f; });
    m.def("compile", &compile_spec, nb::arg("spec"), nb::arg("target"), nb::arg("sizes"));
    m.def("builds", [] { return rf::kernel_builds(); });
    nb::class_<PyKernel>(m, "Kernel")
        .def("inputs", [](const PyKernel &k) { return infos(k.k->inputs()); })
        .def("outputs", [](const PyKernel &k) { return infos(k.k->outputs()); })
        .def("size_names", [](const PyKernel &k) { return k.k->size_names(); })
        .def("target", [](const PyKernel &k) { return std::string(rf::to_string(k.k->target().kind)); })
        .def("output_shapes",
             [](const PyKernel &k, const std::vector<PyView> &ins) {
                 return translated(k.file, [&] { return k.k->output_shapes(k.k->bind_sizes(views(ins))); });
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
        .def("analysis_json", [](const PyKernel &k) { return k.k->analysis().dump(); })
        .def("explain", [](const PyKernel &k) { return k.k->explain(); })
        .def("source", [](const PyKernel &k) { return k.k->source(); })
        .def("compile_ms", [](const PyKernel &k) { return k.k->compile_ms(); });
}
