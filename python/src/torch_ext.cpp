/** \file torch_ext.cpp
 * The optional extension redfuse._redfuse_torch: tensor reads, allocation and torch's mode checks in
 * C++ (libtorch), lent to the main extension as the capsule of torch_api.h. Built only when torch
 * is installed where the wheel is built, and usable only with that torch version (the Python layer
 * compares `torch_version` with torch.__version__ before it takes the capsule).
 */
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <exception>

#include "torch_api.h"

#ifndef REDFUSE_TORCH_VERSION
#error "REDFUSE_TORCH_VERSION (torch.__version__ at build time) must be defined"
#endif

namespace {

int calls_are_plain() {
    return c10::impl::TorchDispatchModeTLS::stack_len() == 0 && !at::impl::torch_function_mode_enabled() &&
           !at::functorch::maybeCurrentDynamicLayer().has_value();
}

int dtype_code(PyObject *dtype) {
    if (!THPDtype_Check(dtype)) return -1;
    return static_cast<int>(reinterpret_cast<THPDtype *>(dtype)->scalar_type);
}

int read(PyObject *object, int *dtype, int *rank, int64_t *sizes, int64_t *strides, int max_rank, uintptr_t *data) {
    // torch.Tensor or torch.nn.Parameter (a model's weights); other subclasses (FakeTensor, DTensor, ...)
    // take the op path. A tensor that requires grad runs here only under no_grad / inference_mode.
    if (!THPVariable_CheckExact(object)) return 0;
    const at::Tensor &t = THPVariable_Unpack(object);
    if (!t.defined() || t.layout() != c10::kStrided || !t.device().is_cpu() || (t.requires_grad() && c10::GradMode::is_enabled()) ||
        t.is_neg() || t.is_conj() || !t.has_storage() || t.dim() > max_rank)
        return 0;
    *dtype = static_cast<int>(t.scalar_type());
    *rank = static_cast<int>(t.dim());
    for (int64_t i = 0; i < t.dim(); i++) {
        sizes[i] = t.sizes()[i];
        strides[i] = t.strides()[i];
    }
    *data = reinterpret_cast<uintptr_t>(t.data_ptr());
    return 1;
}

PyObject *empty(const int64_t *sizes, int rank, int dtype, uintptr_t *data) {
    try {
        at::Tensor t = at::empty(c10::IntArrayRef(sizes, static_cast<size_t>(rank)),
                                 at::TensorOptions().dtype(static_cast<c10::ScalarType>(dtype)));
        *data = reinterpret_cast<uintptr_t>(t.data_ptr());
        return THPVariable_Wrap(std::move(t));
    } catch (const std::exception &e) {  // an allocation torch refused (c10::Error is one)
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }
}

const rfpy::TorchApi kApi = {rfpy::kTorchApiVersion, &calls_are_plain, &dtype_code, &read, &empty};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_redfuse_torch",
                       "redfuse's tensor reads and allocation in C++ (libtorch), lent to redfuse._redfuse", -1,
                       nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__redfuse_torch() {
    PyObject *m = PyModule_Create(&kModule);
    if (!m) return nullptr;
    PyObject *capsule = PyCapsule_New(const_cast<rfpy::TorchApi *>(&kApi), rfpy::kTorchApiCapsule, nullptr);
    if (!capsule || PyModule_AddObject(m, "api", capsule) < 0) {  // AddObject steals only on success
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return nullptr;
    }
    if (PyModule_AddStringConstant(m, "torch_version", REDFUSE_TORCH_VERSION) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
