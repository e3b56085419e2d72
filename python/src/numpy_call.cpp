/** \file numpy_call.cpp
 * The hot path of a call on NumPy arrays: each array's dtype compared with the spec's, its shape,
 * strides and address read through the buffer protocol, the prepared call of those shapes looked up
 * (the cache the torch path fills too: same shapes, same strides in elements), the outputs made by
 * numpy.empty, the kernel run. Anything unusual (a subclass, another dtype object, an empty or
 * unaligned array, strides that are not whole elements) returns None and the Python layer takes its
 * general path, which also words every error. Through Python attribute reads the same call cost
 * ~6.5 us on a 256-element MoE routing row, three quarters of it in `ndarray.ctypes.data`.
 */
#include <Python.h>

#include "py_kernel.h"

namespace rfpy {

namespace {

nb::handle g_ndarray_type, g_numpy_empty;  // numpy.ndarray and numpy.empty: alive as long as NumPy

/** The Py_buffer of an array, released when this goes. */
struct Buffer {
    Py_buffer view{};
    bool held = false;
    ~Buffer() {
        if (held) PyBuffer_Release(&view);
    }
};

/** Appends one input's part of the key (rank, sizes, rank, strides in elements) and its address:
 *  false when the fast path does not apply to it. */
bool read_array(PyObject *a, nb::handle want_dtype, std::vector<int64_t> &key, uintptr_t &address) {
    static PyObject *dtype_name = PyUnicode_InternFromString("dtype");
    if (Py_TYPE(a) != reinterpret_cast<PyTypeObject *>(g_ndarray_type.ptr())) return false;
    PyObject *dtype = PyObject_GetAttr(a, dtype_name);
    if (!dtype) {
        PyErr_Clear();
        return false;
    }
    bool same = dtype == want_dtype.ptr();  // NumPy's built-in dtypes are singletons
    Py_DECREF(dtype);
    if (!same) return false;
    Buffer b;
    if (PyObject_GetBuffer(a, &b.view, PyBUF_STRIDES) != 0) {
        PyErr_Clear();
        return false;
    }
    b.held = true;
    const Py_ssize_t item = b.view.itemsize;
    if (b.view.ndim > 32 || item <= 0 || reinterpret_cast<uintptr_t>(b.view.buf) % static_cast<uintptr_t>(item) != 0) return false;
    key.push_back(b.view.ndim);
    for (int d = 0; d < b.view.ndim; d++) {
        if (b.view.shape[d] == 0) return false;  // empty: the general path (its views carry no strides)
        key.push_back(b.view.shape[d]);
    }
    key.push_back(b.view.ndim);
    for (int d = 0; d < b.view.ndim; d++) {
        if (b.view.strides[d] % item != 0) return false;
        key.push_back(b.view.strides[d] / item);
    }
    address = reinterpret_cast<uintptr_t>(b.view.buf);  // the array (the caller's argument) keeps it alive
    return true;
}

/** numpy.empty(shape, dtype) and its address; null on failure (NumPy's error is set). */
nb::object empty_array(const std::vector<int64_t> &shape, nb::handle dtype, uintptr_t &address) {
    nb::object dims = shape_tuple(shape);
    nb::object out = nb::steal(PyObject_CallFunctionObjArgs(g_numpy_empty.ptr(), dims.ptr(), dtype.ptr(), nullptr));
    if (!out.is_valid()) return out;
    Buffer b;
    if (PyObject_GetBuffer(out.ptr(), &b.view, PyBUF_STRIDES) != 0) return nb::object();
    b.held = true;
    address = reinterpret_cast<uintptr_t>(b.view.buf);
    return out;
}

}  // namespace

void set_numpy(nb::handle ndarray_type, nb::handle empty) {
    g_ndarray_type = ndarray_type.inc_ref();  // kept for the life of the process
    g_numpy_empty = empty.inc_ref();
}

void set_numpy_dtypes(PyKernel &k, const std::vector<nb::handle> &in, const std::vector<nb::handle> &out) {
    k.numpy_in.clear();
    k.numpy_out.clear();
    for (nb::handle d : in) k.numpy_in.push_back(nb::borrow(d));
    for (nb::handle d : out) k.numpy_out.push_back(nb::borrow(d));
}

nb::object call_numpy(PyKernel &k, nb::handle args) {
    PyObject *tuple = args.ptr();
    const size_t n_in = k.numpy_in.size(), n_out = k.numpy_out.size();
    if (!g_ndarray_type.is_valid() || !PyTuple_Check(tuple) || n_in != k.k->inputs().size() || n_out != k.k->outputs().size() ||
        n_in == 0 || static_cast<size_t>(PyTuple_GET_SIZE(tuple)) != n_in)
        return nb::none();
    thread_local std::vector<int64_t> key;
    thread_local std::vector<uintptr_t> addresses;
    key.clear();
    addresses.assign(n_in + n_out, 0);
    for (size_t i = 0; i < n_in; i++)
        if (!read_array(PyTuple_GET_ITEM(tuple, static_cast<Py_ssize_t>(i)), k.numpy_in[i], key, addresses[i])) return nb::none();
    std::shared_ptr<const PyCall> call = prepared_for(k, key, addresses);
    nb::list outs;
    for (size_t j = 0; j < n_out; j++) {
        nb::object o = empty_array(call->output_shapes()[j], k.numpy_out[j], addresses[n_in + j]);
        if (!o.is_valid()) throw nb::python_error();  // NumPy could not allocate: its own error
        outs.append(o);
    }
    constexpr size_t kReleaseGilBytes = size_t(64) << 10;  // as the torch path: small calls keep the GIL
    run_prepared(k.k, *call, addresses.data(), nullptr, call->bytes > kReleaseGilBytes);
    return outs;
}

}  // namespace rfpy
