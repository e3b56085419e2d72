/** \file torch_call.cpp
 * The hot path of a call on plain CPU torch tensors: the tensors' dtype, device, shape, strides and
 * address read through the C API, the prepared call of those shapes looked up, the outputs made by
 * torch.empty, the kernel run with the GIL released. When redfuse._redfuse_torch is loaded (its
 * TorchApi, torch_api.h), the reads, the allocation and torch's mode checks are libtorch calls in C++
 * instead. Anything unusual returns None and the Python layer takes its general path (which also
 * words every error).
 */
#include <Python.h>

#include "py_kernel.h"
#include "torch_api.h"

namespace rfpy {

namespace {

nb::handle g_tensor_type, g_empty;  // torch.Tensor and torch.empty: alive as long as torch
const TorchApi *g_api = nullptr;    // redfuse._redfuse_torch's functions (its module is never unloaded)
nb::object g_api_capsule;           // ... kept alive here anyway

/** Interned attribute names (made once, with the GIL). */
struct Names {
    PyObject *dtype = PyUnicode_InternFromString("dtype");
    PyObject *is_cpu = PyUnicode_InternFromString("is_cpu");
    PyObject *requires_grad = PyUnicode_InternFromString("requires_grad");
    PyObject *shape = PyUnicode_InternFromString("shape");
    PyObject *stride = PyUnicode_InternFromString("stride");
    PyObject *data_ptr = PyUnicode_InternFromString("data_ptr");
    PyObject *is_neg = PyUnicode_InternFromString("is_neg");
    PyObject *is_conj = PyUnicode_InternFromString("is_conj");
};
const Names &names() {
    static const Names *n = new Names();  // never freed: the interpreter owns interned strings
    return *n;
}

/** An attribute, or a null object (the error cleared) when reading it failed. */
nb::object attr(PyObject *o, PyObject *name) {
    PyObject *r = PyObject_GetAttr(o, name);
    if (!r) PyErr_Clear();
    return nb::steal(r);
}

nb::object call_method(PyObject *o, PyObject *name) {
    PyObject *r = PyObject_CallMethodNoArgs(o, name);
    if (!r) PyErr_Clear();
    return nb::steal(r);
}

/** Appends the ints of a tuple (torch.Size or a stride tuple) to `out`; false when it is not one. */
bool append_ints(PyObject *tuple, std::vector<int64_t> &out) {
    if (!tuple || !PyTuple_Check(tuple)) return false;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    out.push_back(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return false;
        }
        out.push_back(v);
    }
    return true;
}

/** One input read: false when the fast path does not apply to it. */
bool read_input(PyObject *t, nb::handle want_dtype, std::vector<int64_t> &key, uintptr_t &address) {
    const Names &n = names();
    if (Py_TYPE(t) != reinterpret_cast<PyTypeObject *>(g_tensor_type.ptr())) return false;  // subclasses: the op path
    nb::object dtype = attr(t, n.dtype), cpu = attr(t, n.is_cpu), grad = attr(t, n.requires_grad);
    if (!dtype.is_valid() || dtype.ptr() != want_dtype.ptr() || cpu.ptr() != Py_True || grad.ptr() != Py_False) return false;
    // A lazy negation or conjugation (torch._neg_view): the memory does not hold the values; the op resolves them.
    if (call_method(t, n.is_neg).ptr() != Py_False || call_method(t, n.is_conj).ptr() != Py_False) return false;
    nb::object shape = attr(t, n.shape), stride = call_method(t, n.stride), ptr = call_method(t, n.data_ptr);
    if (!append_ints(shape.ptr(), key) || !append_ints(stride.ptr(), key) || !ptr.is_valid()) return false;
    address = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(ptr.ptr()));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return true;
}

/** torch.empty(*shape, dtype=dtype): a dense CPU tensor. The keyword dictionary of each dtype is
 *  made once (the GIL is held here, and torch's dtypes live as long as torch). */
nb::object empty_tensor(const std::vector<int64_t> &shape, nb::handle dtype) {
    static std::vector<std::pair<PyObject *, nb::dict>> *keywords = new std::vector<std::pair<PyObject *, nb::dict>>();
    PyObject *kw = nullptr;
    for (const auto &[d, k] : *keywords)
        if (d == dtype.ptr()) kw = k.ptr();
    if (!kw) {
        nb::dict made;
        made["dtype"] = dtype;
        keywords->emplace_back(dtype.ptr(), made);
        kw = made.ptr();
    }
    nb::object dims = shape_tuple(shape);
    return nb::steal(PyObject_Call(g_empty.ptr(), dims.ptr(), kw));
}

/** Appends one input's part of the key (rank, sizes, rank, strides) and its address through the
 *  TorchApi: false when the fast path does not apply to it. */
bool read_input_api(PyObject *t, int want_dtype, std::vector<int64_t> &key, uintptr_t &address) {
    constexpr int kMaxRank = 32;  // deeper tensors take the general path, which words the error
    int dtype = -1, rank = 0;
    int64_t sizes[kMaxRank], strides[kMaxRank];
    if (!g_api->read(t, &dtype, &rank, sizes, strides, kMaxRank, &address) || dtype != want_dtype) return false;
    key.push_back(rank);
    key.insert(key.end(), sizes, sizes + rank);
    key.push_back(rank);
    key.insert(key.end(), strides, strides + rank);
    return true;
}

}  // namespace

std::shared_ptr<const PyCall> prepared_for(PyKernel &k, const std::vector<int64_t> &key, const std::vector<uintptr_t> &addresses) {
    {
        std::lock_guard<std::mutex> lock(*k.calls_mutex);
        for (const auto &[have, call] : *k.calls)
            if (have == key) return call;
    }
    // key: per input, its rank, its extents, its rank again and its strides.
    std::vector<rf::TensorView> ins;
    size_t at = 0;
    for (size_t i = 0; i < k.k->inputs().size(); i++) {
        auto rank = static_cast<size_t>(key[at++]);
        std::vector<int64_t> shape(key.begin() + static_cast<std::ptrdiff_t>(at), key.begin() + static_cast<std::ptrdiff_t>(at + rank));
        at += rank;
        auto srank = static_cast<size_t>(key[at++]);
        std::vector<int64_t> strides(key.begin() + static_cast<std::ptrdiff_t>(at), key.begin() + static_cast<std::ptrdiff_t>(at + srank));
        at += srank;
        ins.emplace_back(reinterpret_cast<void *>(addresses[i]), k.k->inputs()[i].dtype, shape, strides);
    }
    auto call = std::make_shared<const PyCall>(prepare_call(*k.k, std::move(ins), false));
    std::lock_guard<std::mutex> lock(*k.calls_mutex);
    constexpr size_t kMaxCalls = 64;  // a model calls a kernel at few shapes; bound the memory anyway
    if (k.calls->size() >= kMaxCalls) k.calls->clear();
    k.calls->emplace_back(key, call);
    return call;
}

nb::object shape_tuple(const std::vector<int64_t> &shape) {
    nb::object dims = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
    for (size_t i = 0; i < shape.size(); i++) PyTuple_SET_ITEM(dims.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(shape[i]));
    return dims;
}

bool set_torch_api(nb::handle capsule) {
    if (capsule.is_none()) {
        g_api = nullptr;
        return true;
    }
    auto *api = static_cast<const TorchApi *>(PyCapsule_GetPointer(capsule.ptr(), kTorchApiCapsule));
    if (!api) {
        PyErr_Clear();
        return false;
    }
    if (api->version != kTorchApiVersion) return false;
    g_api_capsule = nb::borrow(capsule);
    g_api = api;
    return true;
}

void set_torch_dtypes(PyKernel &k, const std::vector<nb::handle> &in, const std::vector<nb::handle> &out) {
    k.torch_in = in;  // torch's dtypes live as long as torch: borrowed handles
    k.torch_out = out;
    k.torch_in_codes.clear();
    k.torch_out_codes.clear();
    if (!g_api) return;
    for (nb::handle d : in) k.torch_in_codes.push_back(g_api->dtype_code(d.ptr()));
    for (nb::handle d : out) k.torch_out_codes.push_back(g_api->dtype_code(d.ptr()));
}

void set_torch(nb::handle tensor_type, nb::handle empty) {
    g_tensor_type = tensor_type.inc_ref();  // kept for the life of the process (see g_error_factory)
    g_empty = empty.inc_ref();
}

namespace {

/** True when the kernel's torch dtypes are set and its inputs are `n` tensors. */
bool fast_path_applies(const PyKernel &k, size_t n) {
    return g_tensor_type.is_valid() && k.torch_in.size() == k.k->inputs().size() && k.torch_out.size() == k.k->outputs().size() &&
           n == k.torch_in.size() && n > 0;
}

/** The TorchApi path: reads, prepared call, outputs by at::empty, run. A tuple of the outputs, or
 *  None when the path does not apply. The GIL is released only around kernels that move more than
 *  kReleaseGilBytes: for the smallest calls taking it back costs as much as the kernel. */
nb::object call_with_api(PyKernel &k, PyObject *const *inputs) {
    const size_t n_in = k.torch_in.size(), n_out = k.torch_out.size();
    if (k.torch_in_codes.size() != n_in || k.torch_out_codes.size() != n_out)
        set_torch_dtypes(k, k.torch_in, k.torch_out);  // the TorchApi came after this kernel's dtypes
    if (!g_api->calls_are_plain()) return nb::none();
    // Reused per thread (no allocation per call); the GIL may be released while `addresses` is read.
    thread_local std::vector<int64_t> key;
    thread_local std::vector<uintptr_t> addresses;
    key.clear();
    addresses.assign(n_in + n_out, 0);
    for (size_t i = 0; i < n_in; i++)
        if (!read_input_api(inputs[i], k.torch_in_codes[i], key, addresses[i])) return nb::none();
    std::shared_ptr<const PyCall> call = prepared_for(k, key, addresses);
    nb::object outs = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(n_out)));
    for (size_t j = 0; j < n_out; j++) {
        const std::vector<int64_t> &shape = call->output_shapes()[j];
        PyObject *o = g_api->empty(shape.data(), static_cast<int>(shape.size()), k.torch_out_codes[j], &addresses[n_in + j]);
        if (!o) throw nb::python_error();  // torch could not allocate: its own error
        PyTuple_SET_ITEM(outs.ptr(), static_cast<Py_ssize_t>(j), o);
    }
    constexpr size_t kReleaseGilBytes = size_t(64) << 10;
    run_prepared(k.k, *call, addresses.data(), nullptr, call->bytes > kReleaseGilBytes);
    return outs;
}

/** The Python-read path (no TorchApi): a list of the outputs, or None. */
nb::object call_with_python_reads(PyKernel &k, PyObject *const *inputs) {
    const size_t n_in = k.torch_in.size(), n_out = k.torch_out.size();
    std::vector<int64_t> key;
    key.reserve(n_in * 10);
    std::vector<uintptr_t> addresses(n_in + n_out);
    for (size_t i = 0; i < n_in; i++)
        if (!read_input(inputs[i], k.torch_in[i], key, addresses[i])) return nb::none();
    std::shared_ptr<const PyCall> call = prepared_for(k, key, addresses);
    nb::list outs;
    for (size_t j = 0; j < n_out; j++) {
        nb::object o = empty_tensor(call->output_shapes()[j], k.torch_out[j]);
        if (!o.is_valid()) throw nb::python_error();  // torch could not allocate: its own error
        nb::object ptr = call_method(o.ptr(), names().data_ptr);
        if (!ptr.is_valid()) throw std::runtime_error("torch.empty gave a tensor without data_ptr()");
        addresses[n_in + j] = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(ptr.ptr()));
        outs.append(o);
    }
    run_prepared(k.k, *call, addresses.data(), nullptr);
    return outs;
}

}  // namespace

nb::object call_torch_cpu(PyKernel &k, nb::handle args) {
    PyObject *tuple = args.ptr();
    if (!PyTuple_Check(tuple) || !fast_path_applies(k, static_cast<size_t>(PyTuple_GET_SIZE(tuple)))) return nb::none();
    return call_with_python_reads(k, &PyTuple_GET_ITEM(tuple, 0));
}

nb::object call_torch_args(PyKernel &k, nb::handle args, nb::handle kwargs) {
    if (!g_api || !PyTuple_Check(args.ptr()) || !PyDict_Check(kwargs.ptr())) return nb::none();
    const Py_ssize_t n_args = PyTuple_GET_SIZE(args.ptr()), n_kwargs = PyDict_GET_SIZE(kwargs.ptr());
    if (n_args && n_kwargs) return nb::none();  // mixed: the Python layer sorts them out (and words errors)
    if (!fast_path_applies(k, static_cast<size_t>(n_args + n_kwargs))) return nb::none();
    nb::object outs;
    if (n_args) {
        outs = call_with_api(k, &PyTuple_GET_ITEM(args.ptr(), 0));
    } else {
        if (k.torch_in_names.size() != k.torch_in.size()) {
            k.torch_in_names.clear();
            for (const rf::TensorInfo &in : k.k->inputs()) k.torch_in_names.push_back(nb::steal(PyUnicode_InternFromString(in.name.c_str())));
        }
        PyObject *inputs[64];
        if (k.torch_in.size() > 64) return nb::none();
        for (size_t i = 0; i < k.torch_in.size(); i++)
            if (!(inputs[i] = PyDict_GetItemWithError(kwargs.ptr(), k.torch_in_names[i].ptr()))) {
                PyErr_Clear();  // a name that is not an input: the Python layer words the error
                return nb::none();
            }
        outs = call_with_api(k, inputs);
    }
    if (!outs.is_valid() || outs.is_none() || PyTuple_GET_SIZE(outs.ptr()) != 1) return outs;
    return nb::borrow(PyTuple_GET_ITEM(outs.ptr(), 0));
}

}  // namespace rfpy
