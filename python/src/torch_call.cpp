/** \file torch_call.cpp
 * The hot path of a call on plain CPU torch tensors: the tensors' dtype, device, shape, strides and
 * address read through the C API, the prepared call of those shapes looked up, the outputs made by
 * torch.empty, the kernel run with the GIL released. Anything unusual returns None and the Python
 * layer takes its general path (which also words every error).
 */
#include <Python.h>

#include "py_kernel.h"

namespace rfpy {

namespace {

nb::handle g_tensor_type, g_empty;  // torch.Tensor and torch.empty: alive as long as torch

/** Interned attribute names (made once, with the GIL). */
struct Names {
    PyObject *dtype = PyUnicode_InternFromString("dtype");
    PyObject *is_cpu = PyUnicode_InternFromString("is_cpu");
    PyObject *requires_grad = PyUnicode_InternFromString("requires_grad");
    PyObject *shape = PyUnicode_InternFromString("shape");
    PyObject *stride = PyUnicode_InternFromString("stride");
    PyObject *data_ptr = PyUnicode_InternFromString("data_ptr");
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
    nb::object shape = attr(t, n.shape), stride = call_method(t, n.stride), ptr = call_method(t, n.data_ptr);
    if (!append_ints(shape.ptr(), key) || !append_ints(stride.ptr(), key) || !ptr.is_valid()) return false;
    address = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(ptr.ptr()));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return true;
}

/** The prepared call of `key`, preparing (and checking) it on a miss. */
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
    nb::object dims = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
    for (size_t i = 0; i < shape.size(); i++) PyTuple_SET_ITEM(dims.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(shape[i]));
    return nb::steal(PyObject_Call(g_empty.ptr(), dims.ptr(), kw));
}

}  // namespace

void set_torch(nb::handle tensor_type, nb::handle empty) {
    g_tensor_type = tensor_type.inc_ref();  // kept for the life of the process (see g_error_factory)
    g_empty = empty.inc_ref();
}

nb::object call_torch_cpu(PyKernel &k, nb::handle args) {
    PyObject *tuple = args.ptr();
    if (!g_tensor_type.is_valid() || !PyTuple_Check(tuple) || k.torch_in.size() != k.k->inputs().size() ||
        k.torch_out.size() != k.k->outputs().size())
        return nb::none();
    const size_t n_in = k.torch_in.size(), n_out = k.torch_out.size();
    if (static_cast<size_t>(PyTuple_GET_SIZE(tuple)) != n_in || n_in == 0) return nb::none();
    std::vector<int64_t> key;
    key.reserve(n_in * 10);
    std::vector<uintptr_t> addresses(n_in + n_out);
    for (size_t i = 0; i < n_in; i++)
        if (!read_input(PyTuple_GET_ITEM(tuple, static_cast<Py_ssize_t>(i)), k.torch_in[i], key, addresses[i])) return nb::none();
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

}  // namespace rfpy
