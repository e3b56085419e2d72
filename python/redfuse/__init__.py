"""redfuse: chains of dependent reductions, proved fusible and compiled to single-pass kernels.

    import numpy as np, redfuse
    k = redfuse.compile("examples/softmax.rf")      # a path to a .rf spec, or its text
    y = k(np.random.randn(64, 1000).astype(np.float32))

A Kernel is compiled once and called at any sizes (bound from the arguments' shapes, without a
rebuild: ``redfuse.stats()["builds"]``). This layer is thin and typed over the C++ library
(docs/library.md); docs/python.md is its contract.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _redfuse

__all__ = ["compile", "Kernel", "TensorSpec", "SpecError", "stats"]
__version__ = "0.1.0"


class SpecError(ValueError):
    """A bad spec (or a size out of range, an unreadable file): ``file``, ``line`` and ``column``
    locate it (0 when it has no place in the spec); ``message`` is the text without the place."""

    def __init__(self, message: str, file: str = "", line: int = 0, column: int = 0):
        where = f"{file}:{line}:{column}: " if line else (f"{file}: " if file else "")
        super().__init__(where + message)
        self.message, self.file, self.line, self.column = message, file, line, column


def _raise(kind: str, message: str, file: str, line: int, column: int) -> None:
    if kind == "spec":
        raise SpecError(message, file, line, column)
    if kind == "dtype":
        raise TypeError(message)
    if kind in ("shape", "device"):
        raise ValueError(message)
    raise RuntimeError(message)


_redfuse._set_error_factory(_raise)

# NumPy dtypes of the spec's dtypes. NumPy has no bfloat16 or fp8: those tensors are passed as their
# bits (uint16, uint8), as the spec's storage format says.
_NUMPY_OF = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16,
    "f8e4m3": np.uint8, "f8e5m2": np.uint8, "i8": np.int8, "i32": np.int32, "i64": np.int64,
}


# torch's dtypes of the spec's dtypes (looked up lazily: torch is optional for NumPy users).
_TORCH_OF_NAMES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2", "i8": "int8", "i32": "int32", "i64": "int64",
}
_op_counter = [0]


def _torch():
    import torch  # noqa: PLC0415 - optional dependency

    return torch


def _is_tensor(x: Any) -> bool:
    t = type(x)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter", "FakeTensor", "FunctionalTensor")


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of a Kernel: its name, the spec's dtype, and its shape over the sizes."""

    name: str
    dtype: str
    shape: Tuple[str, ...]
    is_index: bool = False

    def __repr__(self) -> str:
        return f"{self.name}[{', '.join(self.shape)}]: {self.dtype}"


def stats() -> Dict[str, int]:
    """Counters of this process: ``builds`` is the number of kernels built (JIT or device compiles)."""
    return {"builds": int(_redfuse.builds())}


class Kernel:
    """A compiled spec. Call it with the inputs in the spec's ``input`` order (or by name); it
    returns the outputs (one: an array; several: a tuple in ``output`` order)."""

    def __init__(self, core: Any, spec: str, target: str, name: Optional[str] = None, custom_op: bool = True):
        self._core = core
        self._spec = spec
        self._name = name
        self._op = None
        self.target = target
        self._device_type = "cuda" if target == "cuda" else "cpu"
        # The custom op is registered now when torch is in use (torch.compile cannot trace its
        # registration inside a compiled function), else on the first call with tensors.
        if custom_op and "torch" in sys.modules:
            self._op = self._make_op(name)
        self.inputs: Tuple[TensorSpec, ...] = tuple(TensorSpec(n, d, tuple(s), i) for n, d, s, i in core.inputs())
        self.outputs: Tuple[TensorSpec, ...] = tuple(TensorSpec(n, d, tuple(s), i) for n, d, s, i in core.outputs())

    # ---- calling
    def _arguments(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
        names = [t.name for t in self.inputs]
        if args and kwargs:
            raise TypeError("pass the inputs either by position or by name, not both")
        if kwargs:
            unknown = sorted(set(kwargs) - set(names))
            if unknown:
                raise TypeError(f"unknown input(s) {', '.join(unknown)}; the spec's inputs are {', '.join(names)}")
            missing = [n for n in names if n not in kwargs]
            if missing:
                raise TypeError(f"missing input(s) {', '.join(missing)}")
            return [kwargs[n] for n in names]
        if len(args) != len(names):
            raise TypeError(f"the kernel takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        return list(args)

    def _view(self, a: np.ndarray, spec: TensorSpec, what: str) -> tuple:
        want = np.dtype(_NUMPY_OF[spec.dtype])
        if a.dtype != want:
            raise TypeError(f"{what} '{spec.name}' has dtype {a.dtype}; the spec declares {spec.dtype} "
                            f"(a NumPy array of {want})")
        strides = [s // a.itemsize for s in a.strides] if a.size else []
        return (a.ctypes.data if a.size else 0, spec.dtype, list(a.shape), strides, False)

    # ---- torch: each Kernel is the custom op redfuse::<name>, with a fake implementation
    def _torch_view(self, t: Any, spec: TensorSpec, what: str) -> tuple:
        torch = _torch()
        want = getattr(torch, _TORCH_OF_NAMES[spec.dtype])
        if t.dtype != want:
            raise TypeError(f"{what} '{spec.name}' has dtype {t.dtype}; the spec declares {spec.dtype} ({want})")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{what} '{spec.name}' is on {t.device}; redfuse runs on cpu and cuda tensors")
        return (t.data_ptr(), spec.dtype, list(t.shape), list(t.stride()), t.device.type == "cuda")

    def _run_torch(self, tensors: List[Any]) -> List[Any]:
        torch = _torch()
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(f"the inputs are on different devices ({', '.join(sorted(map(str, devices)))}); put them on one")
        device = tensors[0].device if tensors else torch.device("cpu")
        if device.type != self._device_type:
            raise ValueError(f"this kernel was compiled for {self.target}; its inputs are on {device} "
                             f"(compile with target=\"auto\" to follow the inputs)")
        ins = [self._torch_view(t, s, "input") for t, s in zip(tensors, self.inputs)]
        shapes = self._core.output_shapes(ins)
        outs = [torch.empty(shape, dtype=getattr(torch, _TORCH_OF_NAMES[s.dtype]), device=device)
                for shape, s in zip(shapes, self.outputs)]
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        self._core.run(ins, [self._torch_view(o, s, "output") for o, s in zip(outs, self.outputs)], stream)
        return outs

    def _fake_shapes(self, tensors: List[Any]) -> List[List[Any]]:
        """Output shapes from the inputs' (possibly symbolic) sizes: every output dimension that is
        a size some input dimension names; others from the concrete sizes."""
        sizes: Dict[str, Any] = {}
        for t, spec in zip(tensors, self.inputs):
            for d, n in zip(t.shape, spec.shape):
                sizes.setdefault(n, d)
        shapes = []
        for spec in self.outputs:
            dims = []
            for n in spec.shape:
                if n in sizes:
                    dims.append(sizes[n])
                elif n.isdigit():
                    dims.append(int(n))
                else:
                    raise ValueError(f"output '{spec.name}' has a dimension '{n}' that is no input's size; "
                                     "torch.compile cannot trace this kernel's output shape")
            shapes.append(dims)
        return shapes

    def _make_op(self, name: Optional[str]) -> Any:
        torch = _torch()
        _op_counter[0] += 1
        op_name = f"redfuse::{name or 'kernel'}_{_op_counter[0]}"

        def run(inputs):
            return self._run_torch(list(inputs))

        # The schema is spelled out: under `from __future__ import annotations` torch (2.15) would
        # evaluate the annotation "List[torch.Tensor]" in this module's globals, where torch is not.
        op = torch.library.custom_op(op_name, run, mutates_args=(), schema="(Tensor[] inputs) -> Tensor[]")

        @op.register_fake
        def _(inputs):
            return [inputs[0].new_empty(shape, dtype=getattr(torch, _TORCH_OF_NAMES[s.dtype]))
                    for shape, s in zip(self._fake_shapes(list(inputs)), self.outputs)]

        return op

    @property
    def op(self) -> Any:
        """The torch.library custom op of this kernel (``torch.ops.redfuse.<name>_<n>``): takes and
        returns lists of tensors; traced by torch.compile through its fake implementation."""
        if self._op is None:
            self._op = self._make_op(self._name)
        return self._op

    def __call__(self, *args: Any, **kwargs: Any) -> Union[np.ndarray, Tuple[np.ndarray, ...]]:
        values = self._arguments(args, kwargs)
        if values and all(_is_tensor(v) for v in values):
            outs = self.op(list(values))
            return outs[0] if len(outs) == 1 else tuple(outs)
        arrays = []
        for a, spec in zip(values, self.inputs):
            if _is_tensor(a):
                raise TypeError("the inputs mix torch tensors and NumPy arrays; give all of one kind")
            if not isinstance(a, np.ndarray):
                raise TypeError(f"input '{spec.name}' is a {type(a).__name__}; pass a NumPy array or a torch tensor")
            arrays.append(a)
        ins = [self._view(a, s, "input") for a, s in zip(arrays, self.inputs)]
        shapes = self._core.output_shapes(ins)
        outs = [np.empty(shape, dtype=_NUMPY_OF[s.dtype]) for shape, s in zip(shapes, self.outputs)]
        self._core.run(ins, [self._view(o, s, "output") for o, s in zip(outs, self.outputs)], 0)
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- what it is
    @property
    def analysis(self) -> Dict[str, Any]:
        """The ``redfuse analyze --json`` object of the spec (docs/cli.md)."""
        return json.loads(self._core.analysis_json())

    def explain(self) -> str:
        """The ``redfuse analyze`` text: which reductions fused, the derived update, merge and epilogue."""
        return self._core.explain()

    def source(self, target: Optional[str] = None) -> str:
        """The generated source that was built (``target`` must be the kernel's own, or None)."""
        if target not in (None, self.target):
            raise ValueError(f"this kernel was built for {self.target}; compile for {target} to see its source")
        return self._core.source()

    def __repr__(self) -> str:
        chains = self.analysis.get("chains", [])
        verdicts = "; ".join(f"{'+'.join(c['members'])}: {'fused ' + c['strategy'] if c['fused'] else 'not fused'}"
                             for c in chains)
        return (f"redfuse.Kernel({', '.join(map(repr, self.inputs))} -> {', '.join(map(repr, self.outputs))}; "
                f"{self.target}; {verdicts})")


def compile(spec: str, target: str = "auto", name: Optional[str] = None,
            sizes: Optional[Dict[str, int]] = None) -> Kernel:
    """Compiles a spec (a path to a .rf file, or the spec's text) into a Kernel.

    target: "auto" (the CPU for NumPy arrays), "cpu", "opencl", "cuda", "interp" or "interp-f32".
    name:   the name of the kernel's torch.library op (torch.ops.redfuse.<name>_<n>).
    sizes:  the sizes the schedule is chosen for (the kernel accepts any sizes at run time).

    Raises SpecError (with file, line and column) for a bad spec.
    """
    if name is not None and not name.isidentifier():
        raise ValueError(f"name must be an identifier (it names the torch.library op), got {name!r}")
    if target == "auto":
        target = "cpu"
    if not isinstance(spec, str):
        spec = os.fspath(spec)
    core = _redfuse.compile(spec, target, sorted((sizes or {}).items()))
    return Kernel(core, spec, target, name)


def _compile_internal(spec: str, target: str, sizes: Optional[Dict[str, int]] = None) -> Kernel:
    """A Kernel for redfuse's own ops (redfuse.ops): no torch.library op of its own (the functional
    op that calls it is the custom op); run it with ``kernel._run_torch(tensors)``."""
    core = _redfuse.compile(spec, target, sorted((sizes or {}).items()))
    return Kernel(core, spec, target, None, custom_op=False)
