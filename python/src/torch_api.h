/** \file torch_api.h
 * The C interface the optional extension redfuse._redfuse_torch (built against libtorch) lends the
 * main extension through a capsule: reading and making CPU tensors in C++, so that a call on small
 * tensors costs about what one ATen operator costs, not several Python attribute reads and calls.
 * The main extension itself never links libtorch: without this module it reads tensors through
 * Python (torch_call.cpp), and a NumPy-only install never needs torch.
 */
#pragma once

#include <Python.h>

#include <cstdint>

namespace rfpy {

/** Bumped whenever the struct changes: the main extension refuses a capsule of another version. */
constexpr int kTorchApiVersion = 1;

/** The name of the capsule (the module's attribute `api`). */
constexpr const char *kTorchApiCapsule = "redfuse._redfuse_torch.api";

struct TorchApi {
    int version;
    /** 1 when an eager call on plain tensors is what torch would run too: no torch-dispatch mode,
     *  no torch-function mode, no functorch transform active (the Python layer checks for a
     *  torch.compile trace itself). */
    int (*calls_are_plain)();
    /** The code of a torch.dtype (its c10::ScalarType), or -1 when `dtype` is not one. */
    int (*dtype_code)(PyObject *dtype);
    /** Reads a tensor that the fast path may run directly: exactly torch.Tensor or
     *  torch.nn.Parameter (no other subclass), on the CPU, strided, needing no gradient (or grad mode
     *  off), without a lazy negation or conjugation. Gives its dtype
     *  code, rank (<= max_rank), sizes, strides and data address and returns 1; returns 0 (no Python
     *  error set) for anything else. */
    int (*read)(PyObject *tensor, int *dtype, int *rank, int64_t *sizes, int64_t *strides, int max_rank, uintptr_t *data);
    /** A new contiguous CPU tensor of these sizes and dtype code (a new reference) with its data
     *  address; null with a Python error set when torch could not make it. */
    PyObject *(*empty)(const int64_t *sizes, int rank, int dtype, uintptr_t *data);
};

}  // namespace rfpy
