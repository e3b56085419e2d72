"""The Python API on CUDA tensors (bench/gpu/run.sh, phase f): correctness of target="auto" and
target="cuda" kernels on torch CUDA tensors (torch's current stream, a side stream, torch.compile
fullgraph, a new sequence length without a rebuild, errors for a device mix), then the call overhead
of k(...) next to SDPA at tiny sizes. Writes OUT/python_cuda.json; prints one line per check.

    PYTHONPATH=python python bench/gpu/python_cuda.py --out DIR [--device cuda|cpu]

`--device cpu` runs the same checks on CPU tensors (to try the script on a machine without a GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

import redfuse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples/softmax.rf")
ATTENTION = os.path.join(ROOT, "examples/attention.rf")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def call_us(f: Callable[[], object], device: str, reps: int = 2000) -> float:
    for _ in range(100):
        f()
    sync(device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        sync(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def checks(device: str) -> List[Dict]:
    results: List[Dict] = []

    def check(name: str, f: Callable[[], None]) -> None:
        t0 = time.time()
        try:
            f()
            results.append(dict(name=name, ok=True, seconds=round(time.time() - t0, 2)))
        except Exception as e:  # noqa: BLE001 - each check reports its own failure
            results.append(dict(name=name, ok=False, error=f"{type(e).__name__}: {e}",
                                trace=traceback.format_exc()[-1500:]))
        r = results[-1]
        print(f"  {'ok  ' if r['ok'] else 'FAIL'} {name}" + ("" if r["ok"] else f": {r['error'][:300]}"), flush=True)

    soft = redfuse.compile(SOFTMAX, name="softmax_gpu")
    attn = redfuse.compile(ATTENTION, name="attention_gpu")

    def softmax_auto() -> None:
        x = torch.randn(37, 1001, device=device)
        torch.testing.assert_close(soft(x), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)

    def attention_auto() -> None:
        q, k, v = (torch.randn(2, 4, 129, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        torch.testing.assert_close(attn(q, k, v).float(), want, rtol=2e-2, atol=2e-2)

    def new_length_no_rebuild() -> None:
        attn(*(torch.randn(1, 2, 33, 64, device=device, dtype=torch.bfloat16) for _ in range(3)))
        builds = redfuse.stats()["builds"]
        for n in (17, 300, 1025):
            q, k, v = (torch.randn(1, 2, n, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
            want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
            torch.testing.assert_close(attn(q, k, v).float(), want, rtol=2e-2, atol=2e-2)
        assert redfuse.stats()["builds"] == builds, "a new sequence length rebuilt the kernel"

    def side_stream() -> None:
        if device != "cuda":
            return
        x = torch.randn(64, 4096, device=device)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = soft(x)
            z = y * 2  # queued after the kernel on the same stream
        torch.cuda.current_stream().wait_stream(s)
        torch.testing.assert_close(z, 2 * torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)

    def compiled_fullgraph() -> None:
        f = torch.compile(lambda t: soft(t) + 1.0, fullgraph=True, dynamic=True)
        for rows in (5, 77):
            x = torch.randn(rows, 513, device=device)
            torch.testing.assert_close(f(x), torch.softmax(x, dim=1) + 1, rtol=1e-5, atol=1e-6)

    def fixed_target_and_device_mix() -> None:
        if device != "cuda":
            return
        k = redfuse.compile(SOFTMAX, target="cuda", name="softmax_cuda_only")
        x = torch.randn(8, 100, device="cuda")
        torch.testing.assert_close(k(x), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)
        try:
            k(x.cpu())
        except ValueError:
            pass
        else:
            raise AssertionError("a CUDA kernel accepted CPU tensors")
        try:
            attn(*(t.to(d) for t, d in zip((torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16),) * 3, ("cuda", "cpu", "cuda"))))
        except ValueError:
            pass
        else:
            raise AssertionError("a device mix was accepted")

    for name, f in [("softmax f32, target auto", softmax_auto), ("attention bf16 vs SDPA", attention_auto),
                    ("new sequence lengths: no rebuild", new_length_no_rebuild), ("a side stream", side_stream),
                    ("torch.compile fullgraph dynamic", compiled_fullgraph),
                    ("target cuda; device errors", fixed_target_and_device_mix)]:
        check(name, f)
    return results


def overhead(device: str) -> List[Dict]:
    attn = redfuse.compile(ATTENTION, name="attention_overhead")
    q = torch.randn(1, 1, 4, 8, device=device, dtype=torch.bfloat16)
    rows = [dict(path="k(q, k, v) eager", us=call_us(lambda: attn(q, q, q), device)),
            dict(path="F.scaled_dot_product_attention", us=call_us(lambda: F.scaled_dot_product_attention(q, q, q), device))]
    for r in rows:
        print(f"  {r['path']}: {r['us']:.2f} µs per call (attention bf16 [1,1,4,8] on {device}, synchronized per 2000)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("python_cuda.py: torch sees no CUDA device")
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"f. the Python API on {args.device} tensors ({name}; torch {torch.__version__})", flush=True)
    record = dict(device=name, torch=torch.__version__, checks=checks(args.device), overhead=overhead(args.device))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "python_cuda.json"), "w") as f:
        json.dump(record, f, indent=1)
    failed = [c["name"] for c in record["checks"] if not c["ok"]]
    print(f"f. {len(record['checks']) - len(failed)} passed, {len(failed)} failed", flush=True)


if __name__ == "__main__":
    main()
