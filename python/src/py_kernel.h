/** \file py_kernel.h
 * What the extension's files share: the Python layer's buffer views, a compiled kernel as Python holds
 * it, its prepared calls, and the translation of redfuse's exceptions into the Python layer's.
 */
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "driver/Kernel.h"
#include "support/Error.h"

namespace rfpy {

namespace nb = nanobind;

/** (address, dtype, shape, strides, on the CUDA device) as the Python layer passes it. */
using PyView = std::tuple<uintptr_t, std::string, std::vector<int64_t>, std::vector<int64_t>, bool>;

/** Raises the Python layer's exception of `kind` ("spec", "dtype", "shape", "device", "internal"). */
[[noreturn]] void raise(const char *kind, const std::string &message, const std::string &file = "", int line = 0, int col = 0);

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

std::vector<rf::TensorView> views(const std::vector<PyView> &in);

/** The buffers of a call without their addresses: what is kept per distinct input shapes and
 *  strides, so a call passes only addresses (the hot path of a model's forward). */
struct PyCall {
    rf::Kernel::Prepared prepared;
    size_t n_buffers = 0;  ///< inputs + outputs: the addresses a run takes
    size_t bytes = 0;      ///< what the inputs and outputs hold
    const std::vector<std::vector<int64_t>> &output_shapes() const { return prepared.output_shapes(); }
};

/** Prepares a call on `ins` (checked as a call checks them), with dense outputs of the bound shapes. */
PyCall prepare_call(const rf::Kernel &k, std::vector<rf::TensorView> ins, bool cuda);

/** Runs a prepared call at these addresses (inputs then outputs), the GIL released unless told not to. */
void run_prepared(const std::shared_ptr<rf::Kernel> &k, const PyCall &call, const uintptr_t *addresses, void *stream,
                  bool release_gil = true);

/** A compiled kernel as Python holds it (shared: calls may outlive a reassignment in Python). */
struct PyKernel {
    std::shared_ptr<rf::Kernel> k;
    std::string file;
    // The torch fast path (torch_call.cpp): the torch dtypes of the inputs and outputs, and the
    // prepared calls of recent input shapes and strides.
    std::vector<nb::handle> torch_in, torch_out;
    std::vector<int> torch_in_codes, torch_out_codes;  ///< the same dtypes as codes, when a TorchApi is set
    std::vector<nb::object> torch_in_names;            ///< the inputs' names, interned (inputs by name)
    std::vector<nb::object> numpy_in, numpy_out;       ///< the NumPy path's dtypes (numpy_call.cpp)
    std::shared_ptr<std::mutex> calls_mutex = std::make_shared<std::mutex>();
    std::shared_ptr<std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const PyCall>>>> calls =
        std::make_shared<std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const PyCall>>>>();
};

/** The prepared call of `key` (per input: rank, sizes, rank, strides in elements) at these input
 *  addresses, preparing (and checking) it on a miss; shared by the torch and NumPy paths. */
std::shared_ptr<const PyCall> prepared_for(PyKernel &k, const std::vector<int64_t> &key, const std::vector<uintptr_t> &addresses);

/** A Python tuple of the extents (the shape argument of torch.empty and numpy.empty). */
nb::object shape_tuple(const std::vector<int64_t> &shape);

/** Registers torch.Tensor and torch.empty (once, when the Python layer first meets torch). */
void set_torch(nb::handle tensor_type, nb::handle empty);

/** Takes (or, given None, drops) the capsule of redfuse._redfuse_torch (torch_api.h); false when it
 *  is not a capsule of this version. */
bool set_torch_api(nb::handle capsule);

/** Sets the torch dtypes of a kernel's inputs and outputs (and their codes, when a TorchApi is set). */
void set_torch_dtypes(PyKernel &k, const std::vector<nb::handle> &in, const std::vector<nb::handle> &out);

/** The whole call `k(*args, **kwargs)` on plain CPU tensors when a TorchApi is set: inputs all by
 *  position or all by name; the output itself when there is one, else the tuple; None (no TorchApi,
 *  anything unusual, a mode active) for the Python layer's general path. */
nb::object call_torch_args(PyKernel &k, nb::handle args, nb::handle kwargs);

/** Runs `args` (a tuple of torch tensors) through the kernel when all are plain CPU tensors of the
 *  spec's dtypes that need no gradient: returns the list of outputs, or None to let the Python
 *  layer take the general path (which also explains any error). Tensors are read through Python's
 *  C API: the path without a TorchApi (with one, the Python layer calls call_torch_args instead),
 *  after the Python layer has ruled out modes and transforms. */
nb::object call_torch_cpu(PyKernel &k, nb::handle args);

/** Registers numpy.ndarray and numpy.empty (once, when the package is imported). */
void set_numpy(nb::handle ndarray_type, nb::handle empty);

/** Sets the NumPy dtypes of a kernel's inputs and outputs (the objects the spec's dtypes map to). */
void set_numpy_dtypes(PyKernel &k, const std::vector<nb::handle> &in, const std::vector<nb::handle> &out);

/** Runs `args` (a tuple of NumPy arrays, the inputs by position) through the kernel's CPU build when
 *  every array is a plain ndarray of the spec's dtype, non-empty, with whole-element strides: the
 *  list of outputs (new arrays), or None for the Python layer's general path (which words errors). */
nb::object call_numpy(PyKernel &k, nb::handle args);

}  // namespace rfpy
