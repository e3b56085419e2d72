"""Partial states as values (docs/sharding.md): a Kernel runs on a shard of its chain's axis and
returns the chain's derived state as named tensors; ``merge`` combines states with the derived
merge and ``Kernel.finalize`` turns a whole-axis state into the outputs.

The partial program is an ordinary spec derived by the C++ library (``redfuse partial``), compiled
for the kernel's target; the merge and the epilogue are the plan interpreter's derived ones, run
on the host in float64 on the same member analyses the kernels were generated from.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np


class State:
    """The partial state of a chain over ``n`` positions of its axis: ``tensors`` maps each field
    ("m.acc", "l.tag0", "O.sum.acc", "W.values", ...; docs/sharding.md) to a tensor (torch or
    NumPy, as the inputs were). Send ``state.tensors`` and ``state.n`` over any transport and
    rebuild it with ``State(kernel, tensors, n)``; ``state.sizes`` are the sizes it was computed at
    (rebuilt states take them from their fields' shapes, or from ``sizes=``)."""

    def __init__(self, kernel: Any, tensors: Dict[str, Any], n: int, axis: str = "",
                 sizes: Optional[Dict[str, int]] = None, context: Optional[Dict[str, Any]] = None):
        self.kernel = kernel
        self.tensors = dict(tensors)
        self.n = int(n)
        self.axis = axis
        self._sizes = dict(sizes or {})
        self._context = dict(context or {})

    @property
    def sizes(self) -> Dict[str, int]:
        return dict(self._sizes)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self.tensors.items())
        return f"redfuse.State(n={self.n}, axis={self.axis!r}: {fields})"


class _Partial:
    """The partial program of one kernel and axis (for one top-k cap): its layout and kernel."""

    def __init__(self, kernel: Any, axis: str, topk_limit: int):
        from . import Kernel, _redfuse  # noqa: PLC0415

        self.core = kernel._core
        self.program = self.core.partial_program(axis, topk_limit)
        self.layout = json.loads(self.program.layout)
        target = "cpu" if kernel.target == "auto" else kernel.target
        core = _redfuse.compile(self.program.spec, target, **kernel._build)
        self.kernel = Kernel(core, self.program.spec, kernel.target, None, custom_op=False, build=kernel._build)
        self.fields = self.layout["fields"]
        self.k = max([f["k"] for f in self.fields if f["role"] == "values"], default=0)


def _partial_for(kernel: Any, axis: Optional[str], n_local: int) -> _Partial:
    cache = kernel.__dict__.setdefault("_partials", {})
    key = (axis or "", 0)
    p = cache.get(key)
    if p is None:
        p = cache[key] = _Partial(kernel, axis or "", 0)
    if 0 < n_local < p.k:  # a shard shorter than a top-k's k keeps every candidate it has
        key = (axis or "", n_local)
        if key not in cache:
            cache[key] = _Partial(kernel, axis or "", n_local)
        p = cache[key]
    return p


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _narrow(x: Any, dim: int, lo: int, n: int) -> Any:
    if _is_torch(x):
        return x.narrow(dim, lo, n)
    index = [slice(None)] * np.ndim(x)
    index[dim] = slice(lo, lo + n)
    return np.ascontiguousarray(np.asarray(x)[tuple(index)])


def _scalar(like: Any, value: int) -> Any:
    if _is_torch(like):
        torch = sys.modules["torch"]
        return torch.tensor(value, dtype=torch.int64, device=like.device)
    return np.array(value, dtype=np.int64)


_HOST_DTYPES = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.int64): "i64",
                np.dtype(np.int32): "i32"}


def _host(x: Any) -> np.ndarray:
    """A dense host array of a dtype the C++ layer widens itself (f64, f32, i64, i32)."""
    if _is_torch(x):
        x = x.detach()
        if x.dtype not in (sys.modules["torch"].float32, sys.modules["torch"].float64,
                           sys.modules["torch"].int64, sys.modules["torch"].int32):
            x = x.double()
        x = x.to("cpu").contiguous().numpy()
    a = np.ascontiguousarray(x)
    return a if a.dtype in _HOST_DTYPES else a.astype(np.float64)


def _array_views(arrays: Dict[str, Any]) -> Tuple[List[tuple], List[np.ndarray]]:
    keep = [_host(v) for v in arrays.values()]
    views = [(k, a.ctypes.data, list(a.shape), _HOST_DTYPES[a.dtype]) for k, a in zip(arrays, keep)]
    return views, keep


def partial(kernel: Any, inputs: Sequence[Any], axis_slice: Optional[Tuple[int, int]], axis_offset: Optional[int],
            axis_size: Optional[int], axis: Optional[str]) -> State:
    if (axis_slice is None) == (axis_offset is None):
        raise TypeError("give exactly one of axis_slice=(lo, hi) (whole inputs) or axis_offset=lo (shards)")
    p = _partial_for(kernel, axis, 0)
    lay = p.layout
    names = [t.name for t in kernel.inputs]
    sharded = {n: d for n, d in lay["sharded_inputs"].items()}
    for name, x in zip(names, inputs):
        if name in sharded and np.ndim(x) <= sharded[name]:
            raise ValueError(f"input '{name}' has {np.ndim(x)} dimensions; the spec reads it along axis "
                             f"'{lay['axis']}' in dimension {sharded[name]}")
    lengths = {n: int(x.shape[sharded[n]]) for n, x in zip(names, inputs) if n in sharded}
    if axis_slice is not None:
        lo, hi = (int(v) for v in axis_slice)
        total = set(lengths.values())
        if len(total) > 1:
            raise ValueError(f"the inputs read along '{lay['axis']}' disagree on its length: {lengths}")
        whole = total.pop() if total else None
        if not (0 <= lo < hi <= (whole if whole is not None else hi)):
            raise ValueError(f"axis_slice=({lo}, {hi}) is not a non-empty range of [0, {whole})")
        if axis_size is not None and whole is not None and axis_size != whole:
            raise ValueError(f"axis_size={axis_size} but the inputs are {whole} long along '{lay['axis']}'")
        axis_size = whole
        n = hi - lo
        inputs = [_narrow(x, sharded[nm], lo, n) if nm in sharded else x for nm, x in zip(names, inputs)]
    else:
        lo = int(axis_offset)
        local = set(lengths.values())
        if len(local) > 1:
            raise ValueError(f"the shards read along '{lay['axis']}' disagree on their length: {lengths}")
        if not local:
            raise ValueError(f"no input is read along '{lay['axis']}'")
        n = local.pop()
        if lo < 0 or n < 1 or (axis_size is not None and lo + n > axis_size):
            raise ValueError(f"a shard of {n} positions at offset {lo} does not lie in an axis of {axis_size}")
    p = _partial_for(kernel, axis, n)
    lay = p.layout
    extra = []
    if lay["offset_input"]:
        extra.append(_scalar(inputs[0], lo))
    if lay["axis_size_input"]:
        if axis_size is None:
            raise ValueError(f"the spec uses the length of '{lay['axis']}' ({lay['axis_size']}) as a value: "
                             f"pass axis_size= (the whole axis's length) with axis_offset=")
        extra.append(_scalar(inputs[0], int(axis_size)))
    outs = p.kernel(*inputs, *extra)
    outs = outs if isinstance(outs, tuple) else (outs,)
    tensors = {}
    for f, t in zip(p.fields, outs):
        if f["index"]:
            t = (t.long() if _is_torch(t) else t.astype(np.int64)) + lo
        tensors[f["key"]] = t
    sizes = dict(p.kernel._core.sizes(_size_views(p.kernel, list(inputs) + extra), []))
    sizes.pop(lay["shard_size"], None)
    bound = any(lay["axis_size"] in t.shape for t in p.kernel.inputs if t.name not in sharded)
    if axis_size is not None:
        sizes[lay["axis_size"]] = int(axis_size)
    elif not bound:
        sizes.pop(lay["axis_size"], None)  # a default, not the axis: bound when the merged states cover it
    context = {c: x for c, x in zip(names, inputs) if c in lay["context_inputs"]}
    return State(kernel, tensors, n, lay["axis"], sizes, context)


def _size_views(kernel: Any, values: Sequence[Any]) -> List[tuple]:
    views = []
    for x, d in zip(values, kernel._in_dtypes):
        shape = list(x.shape)
        views.append((1, d, shape, [], False))  # only the shapes are read: any non-null address
    return views


def _common(states: Sequence[State]) -> Tuple[Any, _Partial]:
    if not states:
        raise ValueError("merge of no states")
    kernel = states[0].kernel
    for s in states:
        if not isinstance(s, State):
            raise TypeError(f"merge takes redfuse.State values, got {type(s).__name__}")
        if s.kernel is not kernel or s.axis != states[0].axis:
            raise ValueError("the states come from different kernels or axes")
    return kernel, _partial_for(kernel, states[0].axis, 0)


def _sizes_of(states: Sequence[State], lay: Dict[str, Any], n: int, p: Optional[_Partial] = None) -> Dict[str, int]:
    sizes: Dict[str, int] = {}
    for s in states:
        sizes.update(s._sizes)
    if p is not None:  # a State rebuilt from its tensors alone: the sizes its fields' shapes name
        for f, spec in zip(p.fields, p.kernel.outputs):
            t = states[0].tensors.get(f["key"])
            if t is None or len(spec.shape) != len(t.shape) or f["role"] in ("values", "indices"):
                continue
            for name, v in zip(spec.shape, t.shape):
                if name.isidentifier() and name != lay["shard_size"]:
                    sizes.setdefault(name, int(v))
    sizes.setdefault(lay["axis_size"], n)
    return sizes


def _like(values: np.ndarray, ref: Any, index: bool) -> Any:
    if _is_torch(ref):
        torch = sys.modules["torch"]
        t = torch.from_numpy(values)
        return t.to(device=ref.device, dtype=torch.int64 if index else ref.dtype)
    return values.astype(np.int64) if index else values.astype(ref.dtype)


def merge(states: Sequence[State]) -> State:
    """The derived merge of partial states, in the order given (any order or grouping gives the
    same result up to rounding; a fixed order gives the same bits)."""
    return merge_rows(None, states, 0, -1)


def merge_rows(_kernel: Any, states: Sequence[State], row_begin: int, row_end: int) -> State:
    """merge() of states that hold the block [row_begin, row_end) of the flattened rows (a ring
    step: fields shaped [rows of the block, ...]); row_end = -1: whole states."""
    states = list(states)
    kernel, p = _common(states)
    n = sum(s.n for s in states)
    sizes = _sizes_of(states, p.layout, n, p)
    context = {}
    for s in states:
        context.update(s._context)
    ctx_views, keep = _array_views(context)
    views = []
    for s in states:
        v, k = _array_views({f["key"]: s.tensors[f["key"]] for f in p.fields if f["key"] in s.tensors})
        views.append((s.n, v))
        keep.extend(k)
    n_out, fields = kernel._core.merge_states(p.program, sorted(sizes.items()), ctx_views, views, row_begin, row_end)
    ref = states[0].tensors
    index = {f["key"]: f["index"] for f in p.fields}
    tensors = {k: _like(np.frombuffer(b, dtype=np.float64).reshape(shape).copy(), ref[k], index[k]) for k, shape, b in fields}
    return State(kernel, tensors, n_out, states[0].axis, sizes, context)


def state_rows(kernel: Any, state: State) -> int:
    """The number of the chain's rows (the product of the fields' leading row dimensions)."""
    p = _partial_for(kernel, state.axis, 0)
    shape = state.tensors[p.fields[0]["key"]].shape
    return int(np.prod(shape[:p.layout["row_rank"]], dtype=np.int64))


def row_block(kernel: Any, state: State, r0: int, r1: int) -> State:
    """The rows [r0, r1) of a whole state, each field shaped [r1 - r0, ...the rest]."""
    rank = _partial_for(kernel, state.axis, 0).layout["row_rank"]
    tensors = {}
    for k, t in state.tensors.items():
        rest = tuple(t.shape[rank:])
        tensors[k] = t.reshape((-1,) + rest)[r0:r1]
    return State(kernel, tensors, state.n, state.axis, state._sizes, state._context)


def join_rows(kernel: Any, blocks: Sequence[State], n: int, like: State) -> State:
    """The whole state from its row blocks in row order (shaped like `like`'s fields)."""
    tensors = {}
    for k, t in like.tensors.items():
        parts = [b.tensors[k] for b in blocks]
        if _is_torch(t):
            torch = sys.modules["torch"]
            whole = torch.cat(parts)
        else:
            whole = np.concatenate(parts)
        rank = _partial_for(kernel, like.axis, 0).layout["row_rank"]
        shape = tuple(t.shape[:rank]) + tuple(parts[0].shape[1:])
        tensors[k] = whole.reshape(shape)
    return State(kernel, tensors, n, like.axis, like._sizes, like._context)


def finalize(kernel: Any, state: State) -> Any:
    if not isinstance(state, State):
        raise TypeError(f"finalize takes a redfuse.State, got {type(state).__name__}")
    if state.kernel is not kernel:
        raise ValueError("the state comes from another kernel")
    p = _partial_for(kernel, state.axis, 0)
    sizes = _sizes_of([state], p.layout, state.n, p)
    ctx_views, keep = _array_views(state._context)
    views, keep2 = _array_views({f["key"]: state.tensors[f["key"]] for f in p.fields if f["key"] in state.tensors})
    results = dict((name, (shape, b)) for name, shape, b in
                   kernel._core.finalize_states(p.program, sorted(sizes.items()), ctx_views, (state.n, views)))
    ref = next(iter(state.tensors.values()))
    outs = []
    for spec in kernel.outputs:
        shape, b = results[spec.name]
        values = np.frombuffer(b, dtype=np.float64).reshape(shape)
        outs.append(_output(values, spec, ref))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _output(values: np.ndarray, spec: Any, ref: Any) -> Any:
    from . import _NUMPY_OF, _TORCH_OF_NAMES  # noqa: PLC0415

    if _is_torch(ref):
        torch = sys.modules["torch"]
        return torch.from_numpy(values.copy()).to(device=ref.device, dtype=getattr(torch, _TORCH_OF_NAMES[spec.dtype]))
    if spec.dtype in ("bf16",) or spec.dtype.startswith("f8"):
        raise TypeError(f"output '{spec.name}' is {spec.dtype}: finalize states of torch tensors to get it")
    return values.astype(np.dtype(_NUMPY_OF[spec.dtype]))
