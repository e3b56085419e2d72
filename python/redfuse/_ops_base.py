"""Internal support of redfuse.ops: argument validation (every bad input a TypeError /
ValueError / IndexError naming the op), the spec templates in ``redfuse/specs``, the kernel cache,
and how an op runs its kernels (directly, through its custom op, or through the Kernels' derived
backward). The ops themselves and their custom-op registrations are in ops.py."""
import contextlib
import functools
import importlib.resources
import math
import numbers
import string
import threading
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from . import Kernel, _compile_internal, _traced_or_intercepted

# The spec's names of the dtypes the ops accept. float64 is left out on purpose: the kernels'
# transcendentals are not float64-accurate (a log_softmax is off by ~1e-6), so they would not
# deliver what a float64 caller asks for.
_SPEC_DTYPE = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
_TARGETS = {"cpu": "cpu", "cuda": "cuda"}

# ---------------------------------------------------------------------------------------------
# Validation: every bad input is a TypeError / ValueError / IndexError with the op's name in it.


def _tensor(op: str, name: str, t: object, ndim: Optional[int] = None, layout: str = "") -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{op}: {name} must have {ndim} dimensions {layout}, got shape {list(t.shape)}")
    return t


def _float_tensor(op: str, name: str, t: object, ndim: Optional[int] = None, layout: str = "") -> torch.Tensor:
    t = _tensor(op, name, t, ndim, layout)
    if t.dtype not in _SPEC_DTYPE:
        raise TypeError(f"{op}: {name} has dtype {t.dtype}; expected torch.bfloat16, torch.float16 or torch.float32")
    return t


def _same_dtype(op: str, name: str, t: torch.Tensor, like: torch.Tensor, like_name: str) -> None:
    if t.dtype != like.dtype:
        raise TypeError(f"{op}: {name} has dtype {t.dtype} but {like_name} has {like.dtype}; they must match")


def _same_device(op: str, tensors: Dict[str, Optional[torch.Tensor]]) -> None:
    present = {n: t for n, t in tensors.items() if t is not None}
    devices = {t.device for t in present.values()}
    if len(devices) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in present.items())
        raise ValueError(f"{op}: the tensors are on different devices ({where}); put them on one")
    for t in present.values():
        if t.device.type not in _TARGETS:
            raise ValueError(f"{op}: tensors on {t.device} are not supported; redfuse runs on cpu and cuda tensors")


def _py_float(op: str, name: str, x: object, optional: bool = True) -> Optional[float]:
    """A Python float from a real number (not a bool, not a tensor: a tensor's value would make
    torch.compile break the graph, and the value is a compile-time constant of the kernel)."""
    if x is None and optional:
        return None
    # The plain types are tested first: torch.compile traces these isinstance calls, and the
    # abstract numbers.Real only serves values such as NumPy scalars in eager mode.
    if isinstance(x, bool) or not (isinstance(x, (int, float, torch.SymInt, torch.SymFloat))
                                   or isinstance(x, numbers.Real)):
        raise TypeError(f"{op}: {name} must be a real number{' or None' if optional else ''}, got {type(x).__name__}")
    return float(x)


def _py_int(op: str, name: str, x: object, optional: bool = True, symbolic: bool = False) -> Optional[int]:
    """A Python int from an integer; with ``symbolic`` a torch.SymInt (a traced size) is kept."""
    if x is None and optional:
        return None
    if isinstance(x, bool) or not (isinstance(x, (int, torch.SymInt)) or isinstance(x, numbers.Integral)):
        raise TypeError(f"{op}: {name} must be an integer{' or None' if optional else ''}, got {type(x).__name__}")
    return x if symbolic and isinstance(x, torch.SymInt) else int(x)


def _tensors(op: str, optional: Tuple[str, ...] = (), **named: Optional[object]) -> None:
    """Checks the tensor arguments before dispatch (the dispatcher's own message names no op);
    the ``optional`` ones may be None."""
    for name, t in named.items():
        if t is not None or name not in optional:
            _tensor(op, name, t)


def _py_bool(op: str, name: str, x: object) -> bool:
    if not isinstance(x, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {type(x).__name__}")
    return x


def _finite(op: str, name: str, x: Optional[float], positive: bool = False, nonnegative: bool = False) -> None:
    if x is None:
        return
    if not math.isfinite(x) or (positive and x <= 0) or (nonnegative and x < 0):
        want = "a positive" if positive else ("a non-negative" if nonnegative else "a")
        raise ValueError(f"{op}: {name} must be {want} finite number, got {x!r}")


def _out_dtype(op: str, dtype: Optional[torch.dtype], default: torch.dtype) -> torch.dtype:
    if dtype is None:
        return default
    if dtype not in _SPEC_DTYPE:
        raise TypeError(f"{op}: dtype {dtype} is not supported; "
                        "expected torch.bfloat16, torch.float16 or torch.float32")
    return dtype


# ---------------------------------------------------------------------------------------------
# Spec templates and the kernel cache.


@functools.lru_cache(maxsize=None)
def _template(name: str) -> string.Template:
    text = importlib.resources.files(__package__).joinpath("specs", f"{name}.rf").read_text(encoding="utf-8")
    return string.Template(text)


def _render(name: str, **values: str) -> str:
    # substitute (not safe_substitute): a placeholder left unfilled is a bug here, not a spec.
    return _template(name).substitute(values)


def _real(x: float) -> str:
    """A float as spec text: repr round-trips it exactly; only finite values reach this point."""
    x = float(x)
    assert math.isfinite(x), x
    return repr(x)


_kernels: Dict[tuple, Kernel] = {}
_kernels_lock = threading.Lock()        # guards the two dicts
_key_locks: Dict[tuple, threading.Lock] = {}


def _kernel(key: tuple, device: torch.device, make_spec: Callable[[], str]) -> Kernel:
    """The Kernel of ``key`` on this device type, compiled on first use. Each key has its own lock,
    so different kernels compile concurrently (the JIT releases the GIL) and one kernel once.
    Kernels are kept for the life of the process: there is one per distinct dtype / flag /
    constant combination, and dropping one would only mean compiling it again."""
    full = key + (device.type,)
    kern = _kernels.get(full)
    if kern is not None:
        return kern
    with _kernels_lock:
        lock = _key_locks.setdefault(full, threading.Lock())
    with lock:
        kern = _kernels.get(full)
        if kern is None:
            kern = _compile_internal(make_spec(), _TARGETS[device.type])
            with _kernels_lock:
                _kernels[full] = kern
    return kern


_mode = threading.local()  # .differentiable: the op runs outside its custom op, through Kernel calls


def _run(kern: Kernel, tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    # Dense inputs: CUDA kernels refuse strided device views, and on the CPU torch's own copy of a
    # transposed view is about twice as fast as the C++ layer's strided read (a no-op when dense).
    dense = [t.contiguous() for t in tensors]
    if getattr(_mode, "differentiable", False):
        # Through the Kernel's own call: tensors that require grad take its derived backward.
        out = kern(*dense)
        return list(out) if isinstance(out, tuple) else [out]
    if kern._torch_in is None:
        kern._torch_dtypes()  # also sets up the C++ hot path of CPU kernels
    outs = kern._fast(tuple(dense)) if kern._fast is not None else None  # None: not plain CPU tensors
    return outs if outs is not None else kern._run_torch(dense)


def _call(op: object, *args: object) -> object:
    """Runs an op: through its custom op (torch.ops.redfuse.<name>) when torch traces or a mode is
    active; otherwise its implementation directly, which skips the dispatcher's cost and, when an
    input requires grad, runs each kernel through its derived backward (docs/grad.md). Traced, the
    custom op's autograd formula (_make_backward, below) does the same on the saved inputs."""
    impl = getattr(op, "_init_fn", None)  # the decorated function (torch keeps it on the op)
    if impl is None or _traced_or_intercepted(torch):
        return op(*args)
    grad = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    if not grad:
        return impl(*args)
    with _differentiable():
        return impl(*args)


@contextlib.contextmanager
def _differentiable(replay: bool = False) -> Iterator[None]:
    """Within: ops run through their Kernels' derived backward (_run); ``replay`` marks the
    backward's second run of a forward whose data-dependent checks already passed."""
    _mode.differentiable, _mode.replay = True, replay
    try:
        yield
    finally:
        _mode.differentiable = _mode.replay = False


def _prepare_backward(make_kernel: Callable[[], Kernel], *tensors: Optional[torch.Tensor]) -> None:
    """In an op's fake implementation (torch.compile traces it before it loads a cached graph):
    when the op will be differentiated, make its Kernel and the Kernel's forward-with-residuals and
    backward custom ops now. The op's autograd formula calls those ops, so a compiled backward taken
    from a warm on-disk cache refers to them by name; made only when the formula first ran, they
    would not exist yet in a new process (AttributeError on torch.ops.redfuse). Fake propagation
    runs with grad mode off, so an input that requires grad is the sign (a no_grad inference
    compile of a model whose weights require grad makes them too: compile time only)."""
    if any(t is not None and t.requires_grad for t in tensors):
        make_kernel()._training()


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
