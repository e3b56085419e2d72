"""Forward + backward on the CPU: redfuse.ops (each kernel through its derived backward) against
PyTorch eager autograd, torch.compile and SDPA's backward, on attention, RMSNorm and linear +
cross-entropy; the extra peak memory of one training step of the loss, each implementation in a
fresh process.

    python bench/python/train_bench.py [--out DIR] [--quick]

Prints a table and writes DIR/train_bench.json (default bench/results/<date>-<host>-train/). A
benchmark, not a test: nothing asserts a time. Times are medians after two warm-up steps (the first
builds the kernels, or compiles).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

import redfuse
import redfuse.ops as R

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_ms(step: Callable[[], None], reps: int) -> float:
    step()
    step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def attention_cases(quick: bool) -> List[Dict]:
    L = 256 if quick else 1024
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for causal in (False, True):
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(1, 8, L, 64, generator=g).to(dtype).requires_grad_() for _ in range(3))
            do = torch.randn(1, 8, L, 64, generator=g).to(dtype)

            def step(fn):
                def run():
                    for t in (q, k, v):
                        t.grad = None
                    fn(q, k, v).backward(do)
                return run

            def math(q, k, v):
                s = (q @ k.transpose(-1, -2)) / 8.0
                if causal:
                    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
                return torch.softmax(s.float(), -1).to(q.dtype) @ v

            impls = {"redfuse.ops": lambda q, k, v: R.attention(q, k, v, causal=causal),
                     "SDPA": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                     "eager math": math, "torch.compile math": torch.compile(math)}
            case = f"attention {str(dtype)[6:]} [1,8,{L},64]{' causal' if causal else ''}"
            for name, fn in impls.items():
                rows.append(dict(case=case, impl=name, ms=median_ms(step(fn), 3 if quick else 5)))
    return rows


def rms_norm_cases(quick: bool) -> List[Dict]:
    n = 1024 if quick else 4096
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(n, 4096, generator=g).to(dtype).requires_grad_()
        w = (1 + 0.1 * torch.randn(4096, generator=g)).to(dtype).requires_grad_()
        dy = torch.randn(n, 4096, generator=g).to(dtype)

        def step(fn):
            def run():
                x.grad = w.grad = None
                fn(x, w).backward(dy)
            return run

        impls = {"redfuse.ops": lambda x, w: R.rms_norm(x, [4096], w, eps=1e-6),
                 "eager F.rms_norm": lambda x, w: F.rms_norm(x, [4096], w, eps=1e-6),
                 "torch.compile F.rms_norm": torch.compile(lambda x, w: F.rms_norm(x, [4096], w, eps=1e-6))}
        for name, fn in impls.items():
            rows.append(dict(case=f"rms_norm {str(dtype)[6:]} [{n},4096]", impl=name, ms=median_ms(step(fn), 5)))
    return rows


LCE_IMPLS = ("redfuse.ops", "eager", "torch.compile")


def lce_step(impl: str, T: int, D: int, V: int, dtype: torch.dtype) -> Callable[[], None]:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(T, D, generator=g).to(dtype).requires_grad_()
    w = (0.02 * torch.randn(V, D, generator=g)).to(dtype).requires_grad_()
    labels = torch.randint(0, V, (T,), generator=g)
    eager = lambda x, w: F.cross_entropy((x @ w.T).float(), labels)  # noqa: E731
    fn = {"redfuse.ops": lambda x, w: R.linear_cross_entropy(x, w, labels), "eager": eager,
          "torch.compile": torch.compile(eager)}[impl]

    def run():
        x.grad = w.grad = None
        fn(x, w).backward()
    run.grads = lambda: sum(t.grad.numel() * t.grad.element_size() for t in (x, w))  # type: ignore[attr-defined]
    return run


def lce_sizes(quick: bool) -> tuple:
    return (256, 512, 8192) if quick else (1024, 1024, 32000)


def lce_memories(quick: bool) -> Dict[str, Dict]:
    """Peak memory of one step in a fresh process each: the RSS peak above the RSS before it. glibc
    serves every allocation of 64 KiB or more by mmap and returns it when freed, so the RSS follows
    the live memory (else the second step reuses the first one's freed pages and shows nothing).
    Measured before anything else runs: after torch.compile had run in this process, the children
    measured ~330 MiB for every implementation (not understood; a fresh parent gives 1.7 MiB for
    redfuse.ops and 310 for eager, run after run)."""
    T, D, V = lce_sizes(quick)
    mems = {}
    for impl in LCE_IMPLS:
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--lce-memory", impl, str(T), str(D), str(V)],
                             capture_output=True, text=True, timeout=900, env=env)
        mems[impl] = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-500:]}
    return mems


def lce_cases(quick: bool, mems: Dict[str, Dict]) -> List[Dict]:
    T, D, V = lce_sizes(quick)
    rows = []
    for impl in LCE_IMPLS:
        mem = mems[impl]
        ms = median_ms(lce_step(impl, T, D, V, torch.bfloat16), 3 if quick else 5)
        rows.append(dict(case=f"linear+cross-entropy bf16 T={T} D={D} V={V}", impl=impl, ms=ms,
                         extra_peak_MiB=mem.get("extra_peak_MiB"), grads_MiB=mem.get("grads_MiB"),
                         note=mem.get("error", "")))
    return rows


def lce_memory(impl: str, T: int, D: int, V: int) -> None:
    step = lce_step(impl, T, D, V, torch.bfloat16)
    step()  # builds or compiles: its transient memory is not the step's
    # The peak RSS (ru_maxrss, KiB) over the lifetime would include the import's and the build's:
    # reset it (Linux: writing 5 to clear_refs resets the peak) and compare with the RSS now.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    with open("/proc/self/statm") as f:
        base_kib = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # The previous step's gradients are alive at the base and freed as the step makes new ones, so
    # the extra peak is the memory beyond the inputs and the gradients (grads_MiB: their size).
    print(json.dumps({"extra_peak_MiB": round((peak - base_kib) / 1024, 1),
                      "grads_MiB": round(step.grads() / 2 ** 20, 1)}))


def cpu_name() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--lce-memory":
        return lce_memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    mems = lce_memories(args.quick)
    rows = attention_cases(args.quick) + rms_norm_cases(args.quick) + lce_cases(args.quick, mems)
    best_peer = {}
    for r in rows:
        if r["impl"] != "redfuse.ops":
            best_peer[r["case"]] = min(best_peer.get(r["case"], float("inf")), r["ms"])
    ours = {r["case"]: r["ms"] for r in rows if r["impl"] == "redfuse.ops"}
    cpu = cpu_name()
    print(f"forward + backward, {cpu}, {os.cpu_count()} CPUs, torch {torch.__version__}, redfuse {redfuse.__version__}")
    print("| case | impl | fwd+bwd ms | best peer / this | extra peak MiB beyond inputs and gradients |\n|---|---|---:|---:|---:|")
    for r in rows:
        ratio = best_peer[r["case"]] / r["ms"]
        mem = "" if r.get("extra_peak_MiB") is None else f"{r['extra_peak_MiB']}"
        print(f"| {r['case']} | {r['impl']} | {r['ms']:.2f} | {ratio:.2f} | {mem} |")
    print("best peer / this > 1: faster than every PyTorch peer of the case; the redfuse row's ratio is"
          " its speed against the best peer.")
    out = args.out or os.path.join(ROOT, "bench/results", f"{datetime.date.today()}-{socket.gethostname()}-train")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "train_bench.json"), "w") as f:
        json.dump(dict(cpu=cpu, cpus=os.cpu_count(), torch=torch.__version__, quick=args.quick,
                       load_average=os.getloadavg()[0], rows=rows, redfuse_vs_best_peer={
                           c: best_peer[c] / ours[c] for c in ours}), f, indent=1)
    print(f"wrote {out}/train_bench.json")


if __name__ == "__main__":
    main()
