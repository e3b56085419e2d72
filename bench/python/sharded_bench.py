"""Context parallelism on one machine: a chain split over 2 processes × 1 thread with
redfuse.distributed.run (Gloo on the loopback address; modes allgather and ring) against the same
kernel in 1 process × 2 threads, on long decode (GQA, N = 65536) and long causal prefill, with the
bytes each rank sent next to the size of its state (the least any state-moving scheme sends)
and next to what moving the K/V shards instead (ring attention) would send.

    python bench/python/sharded_bench.py [--out DIR] [--quick] [--reps R]

Prints a table and writes DIR/sharded_bench.json (default bench/results/<date>-<host>-sharded/).
A benchmark, not a test. Times are medians after one warm-up call (the first builds the kernels).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import time
from typing import Any, Dict, List

import torch
import torch.multiprocessing as mp

import redfuse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return (f"{fields.get('Model name', '?').strip()} (family {fields.get('CPU family', '?').strip()} "
                f"model {fields.get('Model', '?').strip()})")
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"


def cases(quick: bool) -> List[Dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    N = 16384 if quick else 65536
    L = 1024 if quick else 4096
    return [
        {"name": f"decode GQA bf16 B=1 Hq=32 Hkv=8 N={N} D=128", "spec": "examples/decode_gqa.rf",
         "inputs": [torch.randn(1, 32, 128, generator=g).bfloat16(), torch.randn(1, 8, N, 128, generator=g).bfloat16(),
                    torch.randn(1, 8, N, 128, generator=g).bfloat16()], "kv": [1, 2]},
        {"name": f"causal prefill bf16 B=1 H=4 N={L} D=64", "spec": "examples/attention_causal.rf",
         "inputs": [torch.randn(1, 4, L, 64, generator=g).bfloat16(), torch.randn(1, 4, L, 64, generator=g).bfloat16(),
                    torch.randn(1, 4, L, 64, generator=g).bfloat16()], "kv": [1, 2]},
    ]


def median_ms(f, reps: int, barrier=None) -> float:
    f()
    times = []
    for _ in range(reps):
        if barrier:
            barrier()
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def axis_length(k: Any, inputs: List[Any]) -> int:
    lay = k.partial(*inputs, axis_slice=(0, 1)).kernel._partials[("", 0)].layout
    for x, t in zip(inputs, k.inputs):
        if t.name in lay["sharded_inputs"]:
            return int(x.shape[lay["sharded_inputs"][t.name]])
    raise ValueError("no sharded input")


def worker(rank: int, world: int, port: int, quick: bool, reps: int, queue: Any) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch.distributed as dist  # noqa: PLC0415

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    out = []
    for case in cases(quick):
        k = redfuse.compile(os.path.join(ROOT, case["spec"]), target="cpu", threads=1)
        inputs = case["inputs"]
        n = axis_length(k, inputs)
        lo, hi = n * rank // world, n * (rank + 1) // world
        # Each rank holds its shard (contiguous), as under context parallelism.
        shard = [x if i not in case["kv"] else x.narrow(2, lo, hi - lo).contiguous() for i, x in enumerate(inputs)]
        row = {"case": case["name"]}
        for mode in ("allgather", "ring"):
            stats: Dict[str, Any] = {}
            row[mode + "_ms"] = median_ms(lambda: redfuse.distributed.run(k, *shard, axis_offset=lo, axis_size=n, mode=mode,
                                                                          stats=stats), reps, dist.barrier)
            row[mode + "_bytes_sent"] = stats["bytes_sent"]
            row["state_bytes"] = stats["state_bytes"]
        row["partial_ms"] = median_ms(lambda: k.partial(*shard, axis_offset=lo, axis_size=n), reps)
        st = [k.partial(*inputs, axis_slice=(a * n // world, (a + 1) * n // world)) for a in range(world)]
        row["merge_finalize_ms"] = median_ms(lambda: k.finalize(redfuse.merge(st)), reps)
        row["kv_shard_bytes"] = sum(inputs[i].numel() * inputs[i].element_size() for i in case["kv"]) // world
        out.append(row)
    dist.destroy_process_group()
    queue.put((rank, out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(2)
    single = {}
    for case in cases(args.quick):
        k = redfuse.compile(os.path.join(ROOT, case["spec"]), target="cpu", threads=2)
        single[case["name"]] = median_ms(lambda: k(*case["inputs"]), args.reps)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=worker, args=(r, 2, port, args.quick, args.reps, queue)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(1800)
    results = dict(queue.get() for _ in procs)
    rows = []
    for r0, r1 in zip(results[0], results[1]):
        row = {"case": r0["case"], "one_process_two_threads_ms": single[r0["case"]]}
        for key in ("allgather_ms", "ring_ms", "partial_ms", "merge_finalize_ms"):
            row[key] = max(r0[key], r1[key])
        for key in ("allgather_bytes_sent", "ring_bytes_sent", "state_bytes", "kv_shard_bytes"):
            row[key] = r0[key]
        rows.append(row)
    cpu = cpu_name()
    print(f"CPU: {cpu}; 2 processes x 1 thread (Gloo, loopback) vs 1 process x 2 threads")
    head = (f"{'case':<44} {'1p x 2t ms':>10} {'allgather':>10} {'ring':>9} {'partial':>8} {'merge+fin':>9} "
            f"{'state KiB':>9} {'sent AG KiB':>11} {'sent ring KiB':>13} {'K/V shard KiB':>13}")
    print(head)
    for r in rows:
        print(f"{r['case']:<44} {r['one_process_two_threads_ms']:>10.2f} {r['allgather_ms']:>10.2f} {r['ring_ms']:>9.2f} "
              f"{r['partial_ms']:>8.2f} {r['merge_finalize_ms']:>9.2f} {r['state_bytes'] / 1024:>9.1f} "
              f"{r['allgather_bytes_sent'] / 1024:>11.1f} {r['ring_bytes_sent'] / 1024:>13.1f} {r['kv_shard_bytes'] / 1024:>13.1f}")
    out = args.out or os.path.join(ROOT, "bench", "results", f"{datetime.date.today()}-{socket.gethostname()}-sharded")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "sharded_bench.json"), "w") as f:
        json.dump({"cpu": cpu, "quick": args.quick, "reps": args.reps, "rows": rows}, f, indent=1)
    print(f"wrote {os.path.join(out, 'sharded_bench.json')}")


if __name__ == "__main__":
    main()
