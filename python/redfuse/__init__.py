"""redfuse: chains of dependent reductions, proved fusible and compiled to single-pass kernels.

    import numpy as np, redfuse
    k = redfuse.compile("examples/softmax.rf")      # a path to a .rf spec, or its text
    y = k(np.random.randn(64, 1000).astype(np.float32))

A Kernel is compiled once and called at any sizes (bound from the arguments' shapes, without a
rebuild: ``redfuse.stats()["builds"]``). This layer is thin and typed over the C++ library
(docs/library.md); docs/python.md is its contract.
"""
from __future__ import annotations

import ast
import hashlib
import json
import operator
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _redfuse

__all__ = ["compile", "Kernel", "TensorSpec", "SpecError", "stats", "ops", "merge", "State", "distributed"]
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
_redfuse._set_numpy(np.ndarray, np.empty)

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
_op_names: Dict[str, int] = {}  # op base name -> how many kernels of this process have it


def _torch():
    import torch  # noqa: PLC0415 - optional dependency

    return torch


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _numpy_view(a: np.ndarray, dtype: str) -> tuple:
    """(address, dtype, shape, strides in elements, on CUDA) of an array, as the extension takes it."""
    if not a.size:
        return (0, dtype, a.shape, (), False)
    item = a.itemsize
    return (a.ctypes.data, dtype, a.shape, tuple(st // item for st in a.strides), False)


def _traced_or_intercepted(torch: Any) -> bool:
    """True when torch.compile is tracing, or a dispatch mode, a function mode or a functorch
    transform is active: then calls must go through the custom op, where torch sees them."""
    C = torch._C
    return bool(torch.compiler.is_compiling() or C._len_torch_dispatch_stack() or C._is_torch_function_mode_enabled()
                or C._functorch.peek_interpreter_stack() is not None)


def _plain_tensors(torch: Any, tensors: Sequence[Any]) -> bool:
    """True when these tensors can be run directly (outside the custom op): plain tensors or
    parameters (torch.nn.Parameter: a model's weights) that need no gradient (or grad mode is off),
    holding their values as read (a lazy negation or conjugation, e.g. torch._neg_view, is resolved by
    the op's dispatch)."""
    plain, parameter = torch.Tensor, torch.nn.Parameter
    grad = torch.is_grad_enabled()
    for t in tensors:
        if (type(t) is not plain and type(t) is not parameter) or (grad and t.requires_grad) or t.is_neg() or t.is_conj():
            return False
    return True


_torch_registered: List[bool] = []  # torch.Tensor and torch.empty given to the extension


_torch_api_in_use: List[bool] = [False]  # the hot path reads tensors and checks modes in C++
# torch.compiler.is_compiling once torch is met: under a torch.compile trace calls take the custom op
# (dynamo reads it as True and never reaches the C++ hot path, which it could not trace).
_torch_is_compiling: List[Any] = [lambda: True]


def _load_torch_api(torch: Any, use: bool = True) -> bool:
    """Lends the extension redfuse._redfuse_torch's C++ tensor reads, allocation and mode checks
    (the hot path of small calls) when that module was built against this very torch version; else
    calls read tensors through Python. ``use=False`` goes back to the Python reads (tests). True when
    the C++ reads are in use."""
    _torch_api_in_use[0] = False
    _redfuse._set_torch_api(None)
    _torch_is_compiling[0] = torch.compiler.is_compiling
    if not use:
        return False
    try:
        from . import _redfuse_torch  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError:  # not built (no torch where the wheel was built) or another torch's symbols
        return False
    if getattr(_redfuse_torch, "torch_version", None) != torch.__version__:
        return False
    _torch_api_in_use[0] = bool(_redfuse._set_torch_api(_redfuse_torch.api))
    return _torch_api_in_use[0]


_DIM_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
            ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _eval_dim(text: str, sizes: Dict[str, Any]) -> Any:
    """A dimension's text (sizes, integers, + - * / %, with / the floor division of the spec's
    dimensions) evaluated on `sizes` (ints or torch SymInts). KeyError names a size it lacks."""
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return sizes[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPS:
            return _DIM_OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"cannot evaluate the dimension '{text}' for torch.compile's fake tensors")
    return ev(ast.parse(text, mode="eval"))


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
    returns the outputs (one: an array or tensor; several: a tuple in ``output`` order).

    Sizes are bound from the inputs' shapes on every call: a new sequence length reuses the built
    kernel. ``target="auto"`` kernels run CPU inputs on the CPU kernel and compile the CUDA kernel
    on the first call with CUDA tensors."""

    def __init__(self, core: Any, spec: str, target: str, name: Optional[str] = None, custom_op: bool = True,
                 build: Optional[Dict[str, Any]] = None):
        self._spec = spec
        self._name = name
        self._op = None
        self._build = dict(build or {})
        self.target = target
        # The kernel of each device type ("cpu", "cuda"); "auto" compiles the one it lacks on first use.
        device = "cuda" if target == "cuda" else "cpu"
        self._cores: Dict[str, Any] = {device: core}
        self._core = core
        self.inputs: Tuple[TensorSpec, ...] = tuple(TensorSpec(n, d, tuple(s), i) for n, d, s, i in core.inputs())
        self.outputs: Tuple[TensorSpec, ...] = tuple(TensorSpec(n, d, tuple(s), i) for n, d, s, i in core.outputs())
        self._names = tuple(t.name for t in self.inputs)
        self._in_dtypes = tuple(t.dtype for t in self.inputs)
        self._out_dtypes = tuple(t.dtype for t in self.outputs)
        self._np_in = tuple(np.dtype(_NUMPY_OF[d]) for d in self._in_dtypes)
        self._np_out = tuple(np.dtype(_NUMPY_OF[d]) for d in self._out_dtypes)
        self._torch_in: Optional[Tuple[Any, ...]] = None   # torch dtypes, looked up on first use
        self._torch_out: Optional[Tuple[Any, ...]] = None
        self._fast: Any = None  # the C++ hot path for plain CPU tensors, once torch is met
        self._direct: Any = None  # ... taking the call's own arguments (with redfuse._redfuse_torch)
        self._np_fast: Any = None  # the C++ hot path for NumPy arrays, after the first NumPy call
        self._fixed: Optional[Dict[str, int]] = None  # sizes with a value without buffers (fake shapes)
        self._train: Any = None  # the derived backward (_autograd.Training), False when there is none
        self._no_grad_reason = ""
        # Prepared calls by (device, input shapes and strides): the hot path passes only addresses.
        self._calls: Dict[tuple, tuple] = {}
        # The custom op is registered now when torch is in use (torch.compile cannot trace its
        # registration inside a compiled function), else on the first call with tensors.
        if custom_op and "torch" in sys.modules:
            self._op = self._make_op(name)

    # ---- calling
    def _arguments(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> Sequence[Any]:
        names = self._names
        if not kwargs:
            if len(args) != len(names):
                raise TypeError(f"the kernel takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
            return args
        if args:
            raise TypeError("pass the inputs either by position or by name, not both")
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"unknown input(s) {', '.join(unknown)}; the spec's inputs are {', '.join(names)}")
        missing = [n for n in names if n not in kwargs]
        if missing:
            raise TypeError(f"missing input(s) {', '.join(missing)}")
        return [kwargs[n] for n in names]

    def _core_for(self, device_type: str) -> Any:
        core = self._cores.get(device_type)
        if core is None:
            if self.target != "auto":
                raise ValueError(f"this kernel was compiled for {self.target}; its inputs are on {device_type} "
                                 f"(compile with target=\"auto\" to follow the inputs)")
            core = _redfuse.compile(self._spec, device_type, **self._build)
            self._cores[device_type] = core
        return core

    def _prepare(self, key: tuple, device_type: str, views: List[tuple]) -> tuple:
        """(core, prepared call, output shapes) for a new key of input shapes and strides: the C++
        layer checks the inputs once here; calls with the same key then pass only addresses."""
        core = self._core_for(device_type)
        prepared = core.prepare(views, device_type == "cuda")
        entry = (core, prepared, [tuple(s) for s in prepared.output_shapes])
        if len(self._calls) >= 256:  # a model calls a kernel at few shapes; bound the memory anyway
            self._calls.clear()
        self._calls[key] = entry
        return entry

    def _run_numpy(self, values: Sequence[Any]) -> List[np.ndarray]:
        fast = self._np_fast
        if fast is not None and type(values) is tuple:
            outs = fast(values)  # the C++ hot path (numpy_call.cpp); None: anything unusual, below
            if outs is not None:
                return outs
        key: List[Any] = [False]
        for a, want, spec in zip(values, self._np_in, self.inputs):
            if type(a) is not np.ndarray:
                if _is_tensor(a):
                    raise TypeError("the inputs mix torch tensors and NumPy arrays; give all of one kind")
                if not isinstance(a, np.ndarray):
                    raise TypeError(f"input '{spec.name}' is a {type(a).__name__}; pass a NumPy array or a torch tensor")
            if a.dtype != want:
                raise TypeError(f"input '{spec.name}' has dtype {a.dtype}; the spec declares {spec.dtype} "
                                f"(a NumPy array of {want})")
            key.append(a.shape)
            key.append(a.strides)
        entry = self._calls.get(tuple(key))
        if entry is None:
            entry = self._prepare(tuple(key), "cpu", [_numpy_view(a, d) for a, d in zip(values, self._in_dtypes)])
        core, prepared, shapes = entry
        outs = [np.empty(shape, dtype=d) for shape, d in zip(shapes, self._np_out)]
        core.run_prepared(prepared, [a.ctypes.data for a in values] + [o.ctypes.data for o in outs], 0)
        if fast is None and self._cores.get("cpu") is core:  # later calls take the C++ path
            core.set_numpy_dtypes(list(self._np_in), list(self._np_out))
            self._np_fast = core.call_numpy
        return outs

    # ---- torch: each Kernel is the custom op redfuse::<name>, with a fake implementation
    def _torch_dtypes(self) -> Tuple[Tuple[Any, ...], Tuple[Any, ...]]:
        if self._torch_in is None:
            torch = _torch()
            if not _torch_registered:
                _redfuse._set_torch(torch.Tensor, torch.empty)
                _load_torch_api(torch)
                _torch_registered.append(True)
            self._torch_in = tuple(getattr(torch, _TORCH_OF_NAMES[d]) for d in self._in_dtypes)
            self._torch_out = tuple(getattr(torch, _TORCH_OF_NAMES[d]) for d in self._out_dtypes)
            cpu = self._cores.get("cpu")
            if cpu is not None:  # the C++ hot path for plain CPU tensors (torch_call.cpp)
                cpu.set_torch_dtypes(list(self._torch_in), list(self._torch_out))
                self._fast = cpu.call_torch_cpu
                self._direct = cpu.call_torch_args  # None unless the TorchApi is in use
        return self._torch_in, self._torch_out  # type: ignore[return-value]

    def _run_torch(self, tensors: Sequence[Any]) -> List[Any]:
        """Runs on torch tensors eagerly (no custom op): checks, allocates the outputs, calls."""
        torch = sys.modules["torch"]
        want_in, want_out = self._torch_dtypes()
        if not tensors:
            raise TypeError("the kernel takes no inputs; call it with NumPy arrays")
        cuda = tensors[0].is_cuda
        key: List[Any] = [cuda]
        for t, want in zip(tensors, want_in):
            if t.dtype is not want or not (t.is_cuda if cuda else t.is_cpu):
                self._refuse_tensors(tensors)
            key.append(t.shape)
            key.append(t.stride())
        if cuda:  # the device of each input: one call runs on one device
            key.extend(t.get_device() for t in tensors)
        entry = self._calls.get(tuple(key))
        if entry is None:
            if cuda and len(set(key[1 + 2 * len(tensors):])) > 1:
                self._refuse_tensors(tensors)
            views = [(t.data_ptr(), d, t.shape, t.stride(), cuda) for t, d in zip(tensors, self._in_dtypes)]
            entry = self._prepare(tuple(key), "cuda" if cuda else "cpu", views)
        core, prepared, shapes = entry
        empty = torch.empty
        if cuda:
            device = tensors[0].device
            outs = [empty(shape, dtype=d, device=device) for shape, d in zip(shapes, want_out)]
            stream = torch.cuda.current_stream(device).cuda_stream
        else:  # ints as positional sizes: torch parses them faster than a tuple
            outs = [empty(*shape, dtype=d) if shape else empty((), dtype=d) for shape, d in zip(shapes, want_out)]
            stream = 0
        core.run_prepared(prepared, [t.data_ptr() for t in tensors] + [o.data_ptr() for o in outs], stream)
        return outs

    def _refuse_tensors(self, tensors: Sequence[Any]) -> None:
        """Raises the error that explains why these tensors cannot be this kernel's inputs."""
        want_in, _ = self._torch_dtypes()
        for t, want, spec in zip(tensors, want_in, self.inputs):
            if t.dtype != want:
                raise TypeError(f"input '{spec.name}' has dtype {t.dtype}; the spec declares {spec.dtype} ({want})")
        for t, spec in zip(tensors, self.inputs):
            if t.device.type not in ("cpu", "cuda"):
                raise ValueError(f"input '{spec.name}' is on {t.device}; redfuse runs on cpu and cuda tensors")
        devices = sorted({str(t.device) for t in tensors})
        raise ValueError(f"the inputs are on different devices ({', '.join(devices)}); put them on one")

    def _fake_shapes(self, tensors: List[Any]) -> List[List[Any]]:
        """Output shapes from the inputs' (possibly symbolic) sizes: each output dimension is an
        expression of sizes (docs/language.md: + - * / % over sizes and integers), evaluated on the
        sizes the inputs' dimensions name, then on the kernel's fixed sizes."""
        if self._fixed is None:
            self._fixed = dict(self._core.fixed_sizes())
        sizes: Dict[str, Any] = dict(self._fixed)
        named: Dict[str, Any] = {}
        for t, spec in zip(tensors, self.inputs):
            for d, n in zip(t.shape, spec.shape):
                if n.isidentifier():
                    named.setdefault(n, d)
        sizes.update(named)
        shapes = []
        for spec in self.outputs:
            try:
                shapes.append([_eval_dim(n, sizes) for n in spec.shape])
            except KeyError as e:
                raise ValueError(f"output '{spec.name}' has a dimension that needs size {e.args[0]}, which no input's "
                                 f"dimension names; pass it to redfuse.compile(sizes=...)") from None
        return shapes

    def _make_op(self, name: Optional[str]) -> Any:
        torch = _torch()
        # The name comes from what the kernel computes (spec, target, build options), not from the
        # order kernels were made: torch.compile's on-disk caches keep graphs that call ops by name,
        # and a counter named different kernels alike in different processes (a cached backward
        # called redfuse::kernel_train_4, which the next process had not made: AttributeError).
        key = json.dumps([self._spec, self.target, sorted(self._build.items())], default=str)
        base = f"{name or 'kernel'}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        _op_names[base] = _op_names.get(base, 0) + 1
        op_name = f"redfuse::{base}" if _op_names[base] == 1 else f"redfuse::{base}_{_op_names[base]}"

        def run(inputs):
            return self._run_torch(list(inputs))

        # The schema is spelled out: under `from __future__ import annotations` torch (2.15) would
        # evaluate the annotation "List[torch.Tensor]" in this module's globals, where torch is not.
        op = torch.library.custom_op(op_name, run, mutates_args=(), schema="(Tensor[] inputs) -> Tensor[]")

        @op.register_fake
        def _(inputs):
            _, want_out = self._torch_dtypes()
            return [inputs[0].new_empty(shape, dtype=d) for shape, d in zip(self._fake_shapes(list(inputs)), want_out)]

        return op

    def _training(self) -> Any:
        """The derived backward's kernels (built on the first call that needs gradients, or at
        compile with grad=True), or None when the spec has no derived backward (then a backward
        through the kernel raises, naming the reason)."""
        if self._train is None:
            from ._autograd import Training  # noqa: PLC0415 - only with torch and gradients

            try:
                self._train = Training(self, Kernel)
            except SpecError as e:
                self._train = False
                self._no_grad_reason = str(e)
        return self._train or None

    @property
    def grad_notes(self) -> List[str]:
        """What the derivation of the backward decided (stabilizers, residuals), or why there is none."""
        t = self._training()
        return list(t.notes) if t is not None else [f"no derived backward: {self._no_grad_reason}"]

    @property
    def op(self) -> Any:
        """The torch.library custom op of this kernel (``torch.ops.redfuse.<name>_<hash>``, the hash of its spec, target and build options): takes and
        returns lists of tensors; traced by torch.compile through its fake implementation."""
        if self._op is None:
            self._op = self._make_op(self._name)
        return self._op

    def __call__(self, *args: Any, **kwargs: Any) -> Union[Any, Tuple[Any, ...]]:
        """Runs the kernel: inputs by position (the spec's ``input`` order) or by name; NumPy
        arrays in, NumPy arrays out; torch tensors in, torch tensors out."""
        if not _torch_is_compiling[0]():  # first: a trace must not read the C++ function below
            direct = self._direct
            if direct is not None:
                outs = direct(args, kwargs)  # plain CPU tensors, all by position or all by name, no mode
                if outs is not None:
                    return outs
        names = self._names
        if not kwargs and len(args) == len(names):
            values = args
        elif not args and len(kwargs) == len(names):
            try:  # by name: the common case, without the checks' sets
                values = tuple(map(kwargs.__getitem__, names))
            except KeyError:  # a misspelt name: _arguments words the error
                values = tuple(self._arguments(args, kwargs))
        else:
            values = tuple(self._arguments(args, kwargs))
        torch = sys.modules.get("torch")
        if torch is not None and values and isinstance(values[0], torch.Tensor):
            # Plain eager calls skip the custom op's dispatch (tens of microseconds): CPU tensors
            # through the C++ hot path (above, when redfuse._redfuse_torch is in use; else here),
            # others here; anything that traces, records or differentiates goes through the op.
            outs = None
            if not _traced_or_intercepted(torch):
                if self._torch_in is None:
                    self._torch_dtypes()
                if self._fast is not None and not _torch_api_in_use[0]:
                    outs = self._fast(values)
                if outs is None and _plain_tensors(torch, values):
                    outs = self._run_torch(values)
            if outs is None:
                if not all(isinstance(v, torch.Tensor) for v in values):
                    raise TypeError("the inputs mix torch tensors and NumPy arrays; give all of one kind")
                training = self._training() if torch.is_grad_enabled() and any(v.requires_grad for v in values) else None
                outs = training(values) if training is not None else self.op(list(values))
        else:
            outs = self._run_numpy(values)
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- partial states (docs/sharding.md)
    def partial(self, *inputs: Any, axis_slice: Optional[Tuple[int, int]] = None, axis_offset: Optional[int] = None,
                axis_size: Optional[int] = None, axis: Optional[str] = None) -> "State":
        """The chain's derived state over a part of its axis.

        ``axis_slice=(lo, hi)``: the inputs are whole; the chain's axis is restricted to [lo, hi).
        ``axis_offset=lo``: the inputs indexed by the axis are the local shard starting at lo;
        ``axis_size`` is the whole axis's length (needed when the spec uses it as a value, e.g. a
        mean's ``/ C``). Masks that use the position (causal, lengths) see the global index.
        ``axis``: the reduction axis to split (default: the program's only chain's)."""
        from . import _partial  # noqa: PLC0415

        values = self._arguments(inputs, {})
        return _partial.partial(self, values, axis_slice, axis_offset, axis_size, axis)

    def finalize(self, state: "State") -> Union[Any, Tuple[Any, ...]]:
        """The outputs, as ``k(*inputs)`` returns them, of a state that covers the whole axis."""
        from . import _partial  # noqa: PLC0415

        return _partial.finalize(self, state)

    # ---- what it is
    @property
    def analysis(self) -> Dict[str, Any]:
        """The ``redfuse analyze --json`` object of the spec (docs/cli.md)."""
        return json.loads(self._core.analysis_json())

    def explain(self) -> str:
        """The ``redfuse analyze`` text: which reductions fused, the derived update, merge and epilogue."""
        return self._core.explain()

    def source(self, target: Optional[str] = None) -> str:
        """The generated source that was built: ``target`` is the kernel's own (or None); a
        ``target="auto"`` kernel also gives "cpu" and "cuda" (compiling the CUDA kernel if needed)."""
        if target is None or target == self.target:
            return self._core.source()
        if self.target == "auto" and target in ("cpu", "cuda"):
            return self._core_for(target).source()
        raise ValueError(f"this kernel was built for {self.target}; compile for {target} to see its source")

    def __repr__(self) -> str:
        """One line: the signature, the target, and per chain the derivation (each member's
        reduction and its relation to the others) and the verdict."""
        chains = []
        for c in self.analysis.get("chains", []):
            members = ", ".join(f"{m['name']} {m['op']} {m['relation']}" for m in c.get("members_detail", []))
            verdict = f"fused {c['strategy']}" if c["fused"] else "not fused"
            chains.append(f"over {','.join(c['axes'])}: {members} -> {verdict}")
        return (f"redfuse.Kernel({', '.join(map(repr, self.inputs))} -> {', '.join(map(repr, self.outputs))}; "
                f"{self.target}; {'; '.join(chains) or 'no reduction chain'})")


_TARGETS = ("auto", "cpu", "cuda", "opencl", "interp", "interp-f32")


def compile(spec: Union[str, "os.PathLike[str]"], target: str = "auto", name: Optional[str] = None,
            sizes: Optional[Dict[str, int]] = None, *, unfused: bool = False, strategy: Optional[str] = None,
            threads: Optional[int] = None, exact_products: bool = False, grad: bool = False,
            tile: Optional[int] = None, segments: Optional[int] = None, row_block: Optional[int] = None) -> Kernel:
    """Compiles a spec (a path to a .rf file, or the spec's text) into a Kernel.

    target:   "auto" (the CPU kernel for CPU tensors and NumPy arrays; the CUDA kernel, compiled on
              first use, for CUDA tensors), "cpu", "cuda", "opencl", "interp" (the float64 plan
              interpreter: the reference) or "interp-f32".
    name:     the name of the kernel's torch.library op (torch.ops.redfuse.<name>_<hash>: stable across processes).
    sizes:    the sizes the schedule is chosen for (the kernel accepts any sizes at run time), and
              the values of sizes that no input's dimension names.
    unfused:  our unfused plan (one kernel per definition), the baseline fusion is measured against.
    strategy: force a strategy on every chain ("multi_pass", "onchip_multipass", "multi_segment", ...:
              the names of `redfuse analyze`).
    threads:  CPU worker threads (None: every usable CPU).
    exact_products: CPU: keep every tile GEMM product in float32. By default a kernel whose outputs
              are all bfloat16 (or fp8) rounds the float tile of a GEMM with a bfloat16 operand (P in
              attention's P·V, X·g in RMSNorm→GEMM) to bfloat16 for the bf16 unit, as FlashAttention
              does, and a kernel whose outputs are all bfloat16 or float16 computes its row exp2 passes
              with a degree-4 polynomial (2.9e-6 relative error); True keeps both exact to float32
              (docs/tile-ir.md, "CPU code generation").
    tile, segments, row_block: force a schedule knob on every chain, as `redfuse run --tile/--segments/
              --row-block` do (None: chosen by the planner and the tile lowering): the tile length along
              the reduction axis (1..2**20), the number of segments the axis is split into and merged
              with the derived merge (1..4096), the rows handled together, the M of the tile GEMMs (CPU,
              1..4096). Results are the same up to rounding order; speed is what changes.
    grad:     derive and build the backward now (docs/grad.md). Calls on tensors that require grad
              use it (built on the first such call otherwise); training under torch.compile needs
              it built before tracing. A spec without a derived backward raises SpecError here.

    Raises SpecError (with file, line and column) for a bad spec, an unknown strategy or target.
    """
    if name is not None and not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"name must be an identifier (it names the torch.library op), got {name!r}")
    if target not in _TARGETS:
        raise SpecError(f"unknown target {target!r}; expected one of {', '.join(_TARGETS)}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    for knob, value, most in (("tile", tile, 1 << 20), ("segments", segments, 4096), ("row_block", row_block, 4096)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most):
            raise ValueError(f"{knob} must be an int from 1 to {most} or None, got {value!r}")
    if not isinstance(spec, str):
        spec = os.fspath(spec)
    build = {"sizes": sorted((sizes or {}).items()), "unfused": bool(unfused), "strategy": strategy or "",
             "threads": threads or 0, "exact_products": bool(exact_products)}
    # Only when forced: kernels built before these knobs existed keep their op names (the build is hashed).
    build.update({k: v for k, v in (("tile", tile), ("segments", segments), ("row_block", row_block)) if v is not None})
    core = _redfuse.compile(spec, "cpu" if target == "auto" else target, **build)
    kernel = Kernel(core, spec, target, name, build=build)
    if grad:
        _torch()
        if kernel._training() is None:
            raise SpecError(f"no derived backward: {kernel._no_grad_reason}")
    return kernel


def _compile_internal(spec: str, target: str, sizes: Optional[Dict[str, int]] = None) -> Kernel:
    """A Kernel for redfuse's own ops (redfuse.ops): no torch.library op of its own (the functional
    op that calls it is the custom op); run it with ``kernel._run_torch(tensors)``."""
    build = {"sizes": sorted((sizes or {}).items()), "unfused": False, "strategy": "", "threads": 0}
    core = _redfuse.compile(spec, "cpu" if target == "auto" else target, **build)
    return Kernel(core, spec, target, None, custom_op=False, build=build)


def merge(states: Sequence["State"]) -> "State":
    """The derived merge of partial states of one kernel (docs/sharding.md), in the order given."""
    from . import _partial  # noqa: PLC0415

    return _partial.merge(states)


def __getattr__(name: str) -> Any:
    if name == "State":
        from ._partial import State  # noqa: PLC0415

        return State
    if name == "distributed":
        import importlib  # noqa: PLC0415

        return importlib.import_module(__name__ + ".distributed")
    # redfuse.ops imports torch: it is loaded on first use so that `import redfuse` stays torch-free.
    if name == "ops":
        # import_module, not `from . import ops`: the latter asks this very hook for `ops` first.
        import importlib  # noqa: PLC0415

        return importlib.import_module(__name__ + ".ops")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
