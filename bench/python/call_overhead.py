"""The cost of calling a redfuse kernel from Python, at sizes so small that the kernel itself costs
little: the time of ``k(...)`` minus the kernel's own time (the C++ Kernel call on the same buffers,
timed in C++), next to the same measure for torch.nn.functional.scaled_dot_product_attention.

    python bench/python/call_overhead.py [--out DIR] [--reps N]

Prints a table and writes DIR/call_overhead.json (default bench/results/<date>-<host>-call-overhead/).
A benchmark, not a test: nothing here asserts a time. Every time is the best of 7 rounds of N calls
(the best, not the median: what is measured is a fixed cost, and the machine's noise only adds).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List

import numpy as np
import torch
import torch.nn.functional as F

import redfuse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def best_us(f: Callable[[], object], reps: int, rounds: int = 7) -> float:
    for _ in range(min(reps, 500)):
        f()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def views(tensors: List[torch.Tensor], dtype: str) -> list:
    return [(t.data_ptr(), dtype, tuple(t.shape), t.stride(), False) for t in tensors]


def kernel_rows(name: str, k: redfuse.Kernel, inputs: List, reps: int) -> List[Dict]:
    """The call paths of one kernel: eager k(...), the custom op, torch.compile, and the C++ call."""
    outs = k(*inputs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    dtype_in = [s.dtype for s in k.inputs]
    dtype_out = [s.dtype for s in k.outputs]
    if isinstance(inputs[0], np.ndarray):
        ins_v = [redfuse._numpy_view(a, d) for a, d in zip(inputs, dtype_in)]
        outs_v = [redfuse._numpy_view(o, d) for o, d in zip(outs, dtype_out)]
    else:
        ins_v = [views([t], d)[0] for t, d in zip(inputs, dtype_in)]
        outs_v = [views([o], d)[0] for o, d in zip(outs, dtype_out)]
    cpp_us = min(k._core.time_calls(ins_v, outs_v, reps) for _ in range(7)) * 1e6
    rows = [dict(case=name, path="k(...) eager", us=best_us(lambda: k(*inputs), reps), kernel_us=cpp_us)]
    if not isinstance(inputs[0], np.ndarray):
        op = k.op
        rows.append(dict(case=name, path="k.op([...]) (custom op dispatch)", us=best_us(lambda: op(list(inputs)), reps),
                         kernel_us=cpp_us))
        compiled = torch.compile(lambda *xs: k(*xs), fullgraph=True)
        compiled(*inputs)
        rows.append(dict(case=name, path="torch.compile(fullgraph) of k(...)", us=best_us(lambda: compiled(*inputs), reps),
                         kernel_us=cpp_us))
    return rows


def sdpa_rows(q: torch.Tensor, reps: int) -> List[Dict]:
    """SDPA's call, and its CPU kernel called as the ATen op (no Python-side backend selection):
    the difference is a lower bound on SDPA's own call overhead (the op call still dispatches)."""
    aten = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    kernel_us = best_us(lambda: aten(q, q, q), reps)
    return [dict(case="attention bf16 [1,1,4,8]", path="F.scaled_dot_product_attention", kernel_us=kernel_us,
                 us=best_us(lambda: F.scaled_dot_product_attention(q, q, q), reps),
                 note="kernel_us: the ATen op aten::_scaled_dot_product_flash_attention_for_cpu called directly")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--reps", type=int, default=20000)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows: List[Dict] = []
    q = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16)
    attn = redfuse.compile(os.path.join(ROOT, "examples/attention.rf"), name="attention")
    rows += kernel_rows("attention bf16 [1,1,4,8]", attn, [q, q, q], args.reps)
    rows += sdpa_rows(q, args.reps)
    soft = redfuse.compile(os.path.join(ROOT, "examples/softmax.rf"), name="softmax")
    x = torch.randn(4, 8)
    rows += kernel_rows("softmax f32 [4,8] (torch)", soft, [x], args.reps)
    rows += kernel_rows("softmax f32 [4,8] (NumPy)", soft, [x.numpy()], args.reps)
    rows.append(dict(case="softmax f32 [4,8] (torch)", path="torch.softmax", us=best_us(lambda: torch.softmax(x, -1), args.reps),
                     kernel_us=float("nan")))
    for r in rows:
        r["overhead_us"] = r["us"] - r["kernel_us"]

    cpu = cpu_name()
    print(f"call overhead, {cpu}, {os.cpu_count()} CPUs, torch {torch.__version__}, best of 7 x {args.reps} calls")
    print(f"| case | path | call µs | kernel µs | overhead µs |\n|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['path']} | {r['us']:.2f} | {r['kernel_us']:.2f} | {r['overhead_us']:.2f} |")
    print("kernel µs: redfuse's C++ Kernel call (binding + run) on the same buffers, timed in C++; for SDPA the ATen op.")
    out = args.out or os.path.join(ROOT, "bench/results", f"{datetime.date.today()}-{socket.gethostname()}-call-overhead")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "call_overhead.json"), "w") as f:
        json.dump(dict(cpu=cpu, cpus=os.cpu_count(), torch=torch.__version__, python=sys.version.split()[0],
                       load_average=os.getloadavg()[0], reps=args.reps, rows=rows), f, indent=1)
    print(f"wrote {out}/call_overhead.json")


if __name__ == "__main__":
    main()
