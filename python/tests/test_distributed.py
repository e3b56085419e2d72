"""redfuse.distributed.run over torch.distributed with Gloo: 2 and 4 local processes on the
loopback address, each holding an uneven shard (one of length 1), for every sharding case, in both
modes; the result must equal the single-process kernel's on every rank. Bounded in time: a child
that hangs fails the test instead of hanging it."""
from __future__ import annotations

import datetime
import os
import socket
import sys
import traceback

import pytest
import torch
import torch.multiprocessing as mp

HERE = os.path.dirname(__file__)
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_group(rank: int, world: int, port: int) -> None:
    """This process as rank `rank` of a Gloo group on the loopback address, one thread."""
    sys.path.insert(0, HERE)
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch.distributed as dist  # noqa: PLC0415

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))


def worker(rank: int, world: int, port: int, names, modes, results) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    import redfuse  # noqa: PLC0415

    errors = []
    try:
        join_group(rank, world, port)
        from sharding_cases import cases, close, splits  # noqa: PLC0415
        all_cases = cases()
        for name in names:
            spec, inputs, tol = all_cases[name]
            k = redfuse.compile(spec, target="cpu", threads=1)
            want = k(*inputs)
            want = want if isinstance(want, tuple) else (want,)
            lay = k.partial(*inputs, axis_slice=(0, 1)).kernel._partials[("", 0)].layout
            dims = {t.name: lay["sharded_inputs"].get(t.name) for t in k.inputs}
            length = next(x.shape[dims[t.name]] for x, t in zip(inputs, k.inputs) if dims[t.name] is not None)
            # ranks hold the shards in reverse order: the merge follows the axis, not the rank
            lo, hi = splits(length, world)[world - 1 - rank]
            sent = {}
            for mode in modes:
                for how in ("slice", "offset"):
                    if how == "slice":
                        stats = {}
                        got = redfuse.distributed.run(k, *inputs, axis_slice=(lo, hi), mode=mode, stats=stats)
                        sent[mode] = stats["bytes_sent"]
                    else:
                        shard = [x.narrow(dims[t.name], lo, hi - lo) if dims[t.name] is not None else x
                                 for x, t in zip(inputs, k.inputs)]
                        got = redfuse.distributed.run(k, *shard, axis_offset=lo, axis_size=length, mode=mode)
                    got = got if isinstance(got, tuple) else (got,)
                    for g, w in zip(got, want):
                        msg = close(g, w, tol)
                        if msg:
                            errors.append(f"rank {rank} {name} {mode} {how}: {msg}")
            # The ring sends 2(P-1)/P of a state, the all-gather P-1 states (attention: no top-k).
            if world > 2 and name == "attention" and not sent["ring"] < sent["allgather"]:
                errors.append(f"rank {rank}: the ring sent {sent['ring']} bytes, the all-gather {sent['allgather']}")
        # A bad input on one rank raises on every rank (nobody waits forever).
        spec, inputs, _ = all_cases["variance"]
        k = redfuse.compile(spec, target="cpu", threads=1)
        bad = (0, 10**6) if rank == 0 else (0, 1)
        try:
            redfuse.distributed.run(k, *inputs, axis_slice=bad)
            errors.append(f"rank {rank}: a bad axis_slice on rank 0 did not raise")
        except (ValueError, RuntimeError) as e:
            if rank != 0 and "rank 0" not in str(e):
                errors.append(f"rank {rank}: the error does not name rank 0: {e}")
        # Shards that do not tile the axis are refused on every rank.
        try:
            redfuse.distributed.run(k, *inputs, axis_slice=(0, 5))
            errors.append(f"rank {rank}: overlapping shards did not raise")
        except ValueError as e:
            if "tile" not in str(e):
                errors.append(f"rank {rank}: unexpected error for overlapping shards: {e}")
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        errors.append(f"rank {rank}: {traceback.format_exc()}")
    results.put((rank, errors))


def reference_attention(q, k, v, w, causal: bool):
    """Single-process autograd of the same math in float64: (output, dQ, dK, dV) of sum(O * w)."""
    qr, kr, vr = [t.double().requires_grad_() for t in (q, k, v)]
    s = qr @ kr.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(s.shape[-2], n, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(s, -1) @ vr
    (o * w.double()).sum().backward()
    return o.detach(), qr.grad, kr.grad, vr.grad


def grad_worker(rank: int, world: int, port: int, names, modes, results) -> None:
    """The gradient of a sharded attention (global row statistics, dQ summed over ranks) against
    single-process autograd, with whole inputs (axis_slice) and with shards (axis_offset)."""
    import torch.distributed as dist  # noqa: PLC0415

    import redfuse  # noqa: PLC0415

    errors = []
    try:
        join_group(rank, world, port)
        from sharding_cases import close, example, splits  # noqa: PLC0415
        g = torch.Generator().manual_seed(1)
        B, H, N, D = 1, 2, 17, 8
        q, k, v = (torch.randn(B, H, N, D, generator=g).bfloat16() for _ in range(3))
        w = torch.randn(B, H, N, D, generator=g)
        for name in names:
            causal = name == "attention_causal"
            kern = redfuse.compile(example(name), target="cpu", threads=1)
            o_ref, dq_ref, dk_ref, dv_ref = reference_attention(q, k, v, w, causal)
            lo, hi = splits(N, world)[world - 1 - rank]
            for how in ("offset", "slice"):
                qg = q.clone().requires_grad_()
                if how == "offset":
                    kg, vg = (t[:, :, lo:hi].clone().requires_grad_() for t in (k, v))
                    o = redfuse.distributed.run(kern, qg, kg, vg, axis_offset=lo, mode=modes[0])
                    dk_want, dv_want = dk_ref[:, :, lo:hi], dv_ref[:, :, lo:hi]
                else:
                    kg, vg = (t.clone().requires_grad_() for t in (k, v))
                    o = redfuse.distributed.run(kern, qg, kg, vg, axis_slice=(lo, hi), mode=modes[-1])
                    dk_want, dv_want = dk_ref, dv_ref
                (o.float() * w).sum().backward()
                for what, got, want in (("O", o, o_ref), ("dQ", qg.grad, dq_ref), ("dK", kg.grad, dk_want), ("dV", vg.grad, dv_want)):
                    msg = close(got.double(), want, 3e-2)
                    if msg:
                        errors.append(f"rank {rank} {name} {how} {what}: {msg}")
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        errors.append(f"rank {rank}: {traceback.format_exc()}")
    results.put((rank, errors))


def run_world(world: int, names, modes, target=None) -> None:
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=target or worker, args=(r, world, port, names, modes, results)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S)
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert not hung, f"ranks {hung} did not finish in {TIMEOUT_S} s"
    errors = []
    seen = set()
    while not results.empty():
        rank, errs = results.get()
        seen.add(rank)
        errors.extend(errs)
    assert seen == set(range(world)), f"ranks {sorted(set(range(world)) - seen)} reported nothing (crashed)"
    assert not errors, "\n".join(errors)


ALL = ["attention", "attention_causal", "decode_gqa", "moe_routing", "variance", "linear_cross_entropy"]


def test_two_processes_both_modes():
    run_world(2, ALL, ["allgather", "ring"])


def test_four_processes_both_modes():
    run_world(4, ALL, ["allgather", "ring"])


def test_backward_of_sharded_attention_matches_single_process_autograd():
    run_world(2, ["attention_causal", "attention"], ["allgather", "ring"], target=grad_worker)


def test_backward_with_four_ranks():
    run_world(4, ["attention_causal"], ["ring", "allgather"], target=grad_worker)
