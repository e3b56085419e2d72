"""Context parallelism for any fused chain (docs/sharding.md): every rank of a torch.distributed
process group computes the partial state of its shard of the chain's axis, the states are combined
with torch.distributed collectives and the derived merge, and every rank returns the outputs.

Gloo (CPU tensors) and NCCL (CUDA tensors) go through the same code: the states travel as one flat
buffer of values and one of indices per rank. Errors are agreed on before any state is exchanged,
so a bad input on one rank raises on every rank instead of leaving the others waiting; collectives
time out after the group's timeout (``init_process_group(timeout=...)``).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _partial
from ._partial import State

__all__ = ["run", "state_bytes"]

_MODES = ("allgather", "ring")


def _dist() -> Any:
    import torch.distributed as dist  # noqa: PLC0415

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("redfuse.distributed.run needs an initialized torch.distributed process group")
    return dist


def state_bytes(state: State) -> int:
    """The bytes of a state's tensors: what one rank contributes to the exchange (the floor of
    any scheme that moves states rather than inputs)."""
    return sum(t.numel() * t.element_size() for t in state.tensors.values())


def run(kernel: Any, *inputs: Any, axis_slice: Optional[Tuple[int, int]] = None, axis_offset: Optional[int] = None,
        axis_size: Optional[int] = None, axis: Optional[str] = None, group: Any = None, mode: str = "allgather",
        stats: Optional[Dict[str, Any]] = None) -> Any:
    """The outputs of ``kernel`` on the whole axis, on every rank of ``group`` (default: the world).

    Each rank passes its inputs as for ``Kernel.partial``: whole inputs with ``axis_slice=(lo, hi)``
    or its shard with ``axis_offset=lo`` (and ``axis_size``, the whole length, where the spec uses
    it as a value). The ranks' ranges must tile the axis exactly, in any assignment to ranks.

    mode="allgather": every rank gathers every state and merges them in the order of their
    positions along the axis. mode="ring": a ring reduce-scatter of the states over the rows (each
    rank merges one block of rows, the transfer of the next block in flight meanwhile) and an
    all-gather of the merged blocks: 2(P-1)/P of a state sent per rank instead of (P-1) states.
    Both give every rank the same bits. ``stats``, if given, receives the bytes this rank sent and
    the size of its state."""
    import torch  # noqa: PLC0415

    dist = _dist()
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
        opts = {"axis_slice": axis_slice, "axis_offset": axis_offset, "axis_size": axis_size, "axis": axis,
                "group": group, "mode": mode, "stats": stats}
        return _with_grad(kernel, opts, inputs)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    state, error = None, None
    try:
        if not all(isinstance(x, torch.Tensor) for x in inputs):
            raise TypeError("redfuse.distributed.run takes torch tensors (CPU for Gloo, CUDA for NCCL)")
        state = kernel.partial(*inputs, axis_slice=axis_slice, axis_offset=axis_offset, axis_size=axis_size, axis=axis)
        lo = int(axis_slice[0]) if axis_slice is not None else int(axis_offset)
        meta = (None, lo, state.n, _shapes(state), axis_size)
    except Exception as e:  # noqa: BLE001 - every error is agreed on, then raised on every rank
        error = e
        meta = (f"{type(e).__name__}: {e}", 0, 0, {}, axis_size)
    metas: List[Any] = [None] * world
    dist.all_gather_object(metas, meta, group=group)
    failed = [(r, m[0]) for r, m in enumerate(metas) if m[0] is not None]
    if failed:
        if error is not None:
            raise error
        raise RuntimeError("redfuse.distributed.run failed on rank " + "; rank ".join(f"{r}: {msg}" for r, msg in failed))
    total = _check_tiling(metas)
    assert state is not None
    lay = _partial._partial_for(kernel, state.axis, 0).layout
    state._sizes.setdefault(lay["axis_size"], total)  # row blocks of a ring cover part of the axis
    if world == 1:
        return kernel.finalize(state)
    sent = 0
    if mode == "allgather":
        merged, sent = _allgather(kernel, state, metas, rank, group, dist)
    else:
        merged, sent = _ring(kernel, state, metas, rank, world, group, dist)
    if stats is not None:
        stats.update({"bytes_sent": sent, "state_bytes": state_bytes(state), "world": world, "mode": mode})
    return kernel.finalize(merged)


# ---- the backward: the derived backward on each rank's shard, with the global row statistics

def _with_grad(kernel: Any, opts: Dict[str, Any], inputs: Sequence[Any]) -> Any:
    import torch  # noqa: PLC0415

    train = kernel._training()
    if train is None:
        raise ValueError(f"no derived backward for this kernel: {kernel._no_grad_reason}")

    class ShardedChain(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *tensors: Any) -> Any:
            # The forward with residuals (attention's row log-sum-exp L), merged over every rank:
            # the backward reads the global statistics, as ring attention's backward does.
            outs = run(train.forward, *tensors, **opts)
            outs = outs if isinstance(outs, tuple) else (outs,)
            ctx.save_for_backward(*tensors, *outs)
            ctx.n_inputs = len(tensors)
            ctx.mark_non_differentiable(*outs[train.n_outputs:])
            return tuple(outs[:train.n_outputs]) + tuple(outs[train.n_outputs:])

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            saved = ctx.saved_tensors
            return tuple(_backward(kernel, train, opts, saved[:ctx.n_inputs], saved[ctx.n_inputs:], grads))

    outs = ShardedChain.apply(*inputs)
    outs = outs[:train.n_outputs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _shard_backward(kernel: Any, train: Any, sharded: Dict[str, int]) -> Tuple[Any, Dict[str, Any]]:
    import json  # noqa: PLC0415

    from . import Kernel, _redfuse  # noqa: PLC0415

    cached = getattr(train, "_sharded_backward", None)
    if cached is None:
        text, layout = _redfuse.shard_program(train.backward._spec, sorted(sharded.items()))
        target = "cpu" if kernel.target == "auto" else kernel.target
        core = _redfuse.compile(text, target, **kernel._build)
        cached = (Kernel(core, text, kernel.target, None, custom_op=False, build=kernel._build), json.loads(layout))
        train._sharded_backward = cached
    return cached


def _backward(kernel: Any, train: Any, opts: Dict[str, Any], ins: Sequence[Any], outs: Sequence[Any],
              grads: Sequence[Any]) -> List[Any]:
    import torch  # noqa: PLC0415

    dist = _dist()
    group = opts["group"]
    lay = _partial._partial_for(train.forward, opts["axis"], 0).layout
    sharded = dict(lay["sharded_inputs"])
    bk, blay = _shard_backward(kernel, train, sharded)
    by_name: Dict[str, Any] = {s.name: t for s, t in zip(train.inputs, ins)}
    slice_mode = opts["axis_slice"] is not None
    lo = int(opts["axis_slice"][0]) if slice_mode else int(opts["axis_offset"])
    hi = int(opts["axis_slice"][1]) if slice_mode else None
    if slice_mode:
        for name, dim in sharded.items():
            by_name[name] = by_name[name].narrow(dim, lo, hi - lo)
    by_name.update({s.name: t for s, t in zip(train.forward.outputs, outs)})
    names = [s.name for s in train.forward.outputs]
    for output, adjoint in train.adjoint_of.items():
        j = names.index(output)
        g = grads[j] if j < len(grads) else None
        by_name[adjoint] = torch.zeros_like(outs[j]) if g is None else g.contiguous()
    if blay["offset_input"]:
        by_name[blay["offset_input"]] = torch.tensor(lo, dtype=torch.int64, device=ins[0].device)
    if blay["axis_size_input"]:
        total = opts["axis_size"]
        if total is None:
            sizes = [0] * dist.get_world_size(group)
            dist.all_gather_object(sizes, int(next(by_name[n].shape[d] for n, d in sharded.items())), group=group)
            total = sum(sizes)
        by_name[blay["axis_size_input"]] = torch.tensor(int(total), dtype=torch.int64, device=ins[0].device)
    results = bk(*[by_name[s.name] for s in bk.inputs])
    results = results if isinstance(results, tuple) else (results,)
    gradient: Dict[str, Any] = {}
    for out, r in zip(blay["outputs"], results):
        if out["kind"] == "partial_sum":
            r = r.contiguous()
            dist.all_reduce(r, op=dist.ReduceOp.SUM, group=group)  # this shard's terms of the sum over the axis
        elif out["kind"] == "sharded" and slice_mode:
            whole_input = next(t for s, t in zip(train.inputs, ins) if train.gradient_of.get(s.name) == out["name"])
            full = torch.zeros(whole_input.shape, dtype=r.dtype, device=r.device)
            full.narrow(out["dim"], lo, hi - lo).copy_(r)
            dist.all_reduce(full, op=dist.ReduceOp.SUM, group=group)  # whole inputs: every rank gets the whole gradient
            r = full
        gradient[out["name"]] = r
    return [gradient[train.gradient_of[s.name]].to(t.dtype) if s.name in train.gradient_of else None
            for s, t in zip(train.inputs, ins)]


def _shapes(state: State) -> Dict[str, Tuple[int, ...]]:
    return {k: tuple(t.shape) for k, t in state.tensors.items()}


def _check_tiling(metas: Sequence[Any]) -> int:
    ranges = sorted((m[1], m[1] + m[2], r) for r, m in enumerate(metas))
    at = 0
    for lo, hi, r in ranges:
        if lo != at:
            raise ValueError(f"the ranks' shards do not tile the axis: rank {r} starts at {lo}, expected {at} "
                             f"(ranges by rank: {[(m[1], m[1] + m[2]) for m in metas]})")
        at = hi
    sizes = {m[4] for m in metas if m[4] is not None}
    if sizes and sizes != {at}:
        raise ValueError(f"the shards cover {at} positions but axis_size says {sorted(sizes)}")
    return at


def _pack(state: State, keys: Sequence[str], index: Dict[str, bool], dtype: Any, device: Any) -> Tuple[Any, Any]:
    import torch  # noqa: PLC0415

    vals = [state.tensors[k].reshape(-1).to(dtype) for k in keys if not index[k]]
    idx = [state.tensors[k].reshape(-1).to(torch.int64) for k in keys if index[k]]
    empty_v, empty_i = torch.empty(0, dtype=dtype, device=device), torch.empty(0, dtype=torch.int64, device=device)
    return (torch.cat(vals) if vals else empty_v), (torch.cat(idx) if idx else empty_i)


def _unpack(kernel: Any, flat_v: Any, flat_i: Any, keys: Sequence[str], index: Dict[str, bool],
            shapes: Dict[str, Tuple[int, ...]], n: int, like: State) -> State:
    tensors, at_v, at_i = {}, 0, 0
    for k in keys:
        size = math.prod(shapes[k])
        if index[k]:
            tensors[k] = flat_i[at_i:at_i + size].reshape(shapes[k])
            at_i += size
        else:
            tensors[k] = flat_v[at_v:at_v + size].reshape(shapes[k]).to(like.tensors[k].dtype)
            at_v += size
    return State(kernel, tensors, n, like.axis, like._sizes, like._context)


def _layout(kernel: Any, state: State) -> Tuple[List[str], Dict[str, bool], Any]:
    p = _partial._partial_for(kernel, state.axis, 0)
    keys = [f["key"] for f in p.fields]
    index = {f["key"]: f["index"] for f in p.fields}
    dtypes = {state.tensors[k].dtype for k in keys if not index[k]}
    import torch  # noqa: PLC0415

    dtype = torch.float64 if torch.float64 in dtypes else torch.float32
    return keys, index, dtype


def _padded(t: Any, size: int) -> Any:
    import torch  # noqa: PLC0415

    if t.numel() == size:
        return t.contiguous()
    return torch.cat([t, torch.zeros(size - t.numel(), dtype=t.dtype, device=t.device)])


def _allgather(kernel: Any, state: State, metas: Sequence[Any], rank: int, group: Any, dist: Any) -> Tuple[State, int]:
    keys, index, dtype = _layout(kernel, state)
    device = next(iter(state.tensors.values())).device
    flat_v, flat_i = _pack(state, keys, index, dtype, device)
    # Shapes differ between ranks only where a shard is shorter than a top-k's k: pad to the largest.
    counts = [(sum(math.prod(s) for k, s in m[3].items() if not index[k]), sum(math.prod(s) for k, s in m[3].items() if index[k]))
              for m in metas]
    nv, ni = max(c[0] for c in counts), max(c[1] for c in counts)
    import torch  # noqa: PLC0415

    gathered_v = [torch.empty(nv, dtype=dtype, device=device) for _ in metas]
    dist.all_gather(gathered_v, _padded(flat_v, nv), group=group)
    gathered_i = [torch.empty(ni, dtype=torch.int64, device=device) for _ in metas]
    if ni:
        dist.all_gather(gathered_i, _padded(flat_i, ni), group=group)
    states = [(_unpack(kernel, gathered_v[r], gathered_i[r], keys, index, m[3], m[2], state), m[1]) for r, m in enumerate(metas)]
    states.sort(key=lambda s: s[1])  # merged in the order of the axis: the same bits on every rank
    sent = (len(metas) - 1) * (nv * flat_v.element_size() + ni * 8)
    return _partial.merge([s for s, _ in states]), sent


def _row_blocks(rows: int, world: int) -> List[Tuple[int, int]]:
    return [(rows * b // world, rows * (b + 1) // world) for b in range(world)]


def _ring(kernel: Any, state: State, metas: Sequence[Any], rank: int, world: int, group: Any, dist: Any) -> Tuple[State, int]:
    """Reduce-scatter over row blocks along the ring, then an all-gather of the merged blocks."""
    import torch  # noqa: PLC0415

    keys, index, dtype = _layout(kernel, state)
    if any(index[k] and len(set(m[3][k] for m in metas)) > 1 for k in keys):
        # top-k states of different lengths do not split into equal row blocks: gather them whole
        return _allgather(kernel, state, metas, rank, group, dist)
    rows = _partial.state_rows(kernel, state)
    blocks = _row_blocks(rows, world)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    to_rank = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    sent = 0
    # Step s: send block (rank - s) (merged over s + 1 ranks so far), receive block (rank - s - 1).
    acc = _partial.row_block(kernel, state, *blocks[rank])
    n_acc = state.n
    for s in range(world - 1):
        send_b, recv_b = (rank - s) % world, (rank - s - 1) % world
        v, i = _pack(acc, keys, index, dtype, acc_device(acc))
        shapes = _shapes(_partial.row_block(kernel, state, *blocks[recv_b]))
        rv = torch.empty(sum(math.prod(sh) for k, sh in shapes.items() if not index[k]), dtype=dtype, device=v.device)
        ri = torch.empty(sum(math.prod(sh) for k, sh in shapes.items() if index[k]), dtype=torch.int64, device=v.device)
        ops = [dist.P2POp(dist.isend, v, to_rank(nxt), group), dist.P2POp(dist.irecv, rv, to_rank(prv), group)]
        if i.numel() or ri.numel():
            ops += [dist.P2POp(dist.isend, i, to_rank(nxt), group), dist.P2POp(dist.irecv, ri, to_rank(prv), group)]
        mine = _partial.row_block(kernel, state, *blocks[recv_b])  # prepared while the transfer runs
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        sent += v.numel() * v.element_size() + i.numel() * 8
        n_recv = sum(m[2] for m in _ring_sources(metas, recv_b, s + 1, world))
        got = _unpack(kernel, rv, ri, keys, index, shapes, n_recv, mine)
        acc = _partial.merge_rows(kernel, [got, mine], *blocks[recv_b])
        n_acc = acc.n
    # acc is block (rank + 1) merged over every rank: all-gather the blocks.
    own_b = (rank + 1) % world
    v, i = _pack(acc, keys, index, dtype, acc_device(acc))
    sizes_v = [sum(math.prod(sh) for k, sh in _shapes(_partial.row_block(kernel, state, *blocks[(r + 1) % world])).items()
                   if not index[k]) for r in range(world)]
    nv = max(sizes_v)
    gathered = [torch.empty(nv, dtype=dtype, device=v.device) for _ in range(world)]
    dist.all_gather(gathered, _padded(v, nv), group=group)
    sent += (world - 1) * nv * v.element_size()
    ni = max(sum(math.prod(sh) for k, sh in _shapes(_partial.row_block(kernel, state, *blocks[(r + 1) % world])).items()
                 if index[k]) for r in range(world))
    gathered_i = [torch.empty(ni, dtype=torch.int64, device=v.device) for _ in range(world)]
    if ni:
        dist.all_gather(gathered_i, _padded(i, ni), group=group)
        sent += (world - 1) * ni * 8
    parts = []
    for r in range(world):
        b = (r + 1) % world
        shapes = _shapes(_partial.row_block(kernel, state, *blocks[b]))
        parts.append((b, _unpack(kernel, gathered[r], gathered_i[r], keys, index, shapes, n_acc, state)))
    parts.sort(key=lambda p: p[0])
    return _partial.join_rows(kernel, [p for _, p in parts], n_acc, state), sent


def _ring_sources(metas: Sequence[Any], block: int, count: int, world: int) -> List[Any]:
    """The ranks whose states the block received at a step has merged: the `count` ranks before
    the receiver along the ring, ending at the block's starting rank + count - 1."""
    return [metas[(block + j) % world] for j in range(count)]


def acc_device(state: State) -> Any:
    return next(iter(state.tensors.values())).device
