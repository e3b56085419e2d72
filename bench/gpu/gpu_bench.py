#!/usr/bin/env python3
"""gpu_bench.py — the one-shot GPU validation and benchmark of redfuse (driven by bench/gpu/run.sh).

    gpu_bench.py check   --redfuse EXE --work DIR [--target cuda|cpu] [--jobs N] [--deadline EPOCH]
    gpu_bench.py compare --redfuse EXE --work DIR [--target ...]
    gpu_bench.py bench   --redfuse EXE --work DIR [--target ...] [--quick] [--only W1,W2]
                         [--case-budget S] [--impl-budget S]
    gpu_bench.py report  --work DIR --out DIR

Phases (each writes WORK/<phase>.json; `report` merges them into OUT/gpu_results.json and
OUT/table.md and prints the tables):
  check    `redfuse run SPEC --target T --check --json` for every examples/*.rf at three size sets
           (default, 2v+1, multi-tile; gpu_cases.example_size_sets), several at a time
  compare  `redfuse run SPEC --target T --check --save DIR` at realistic awkward sizes, then the same
           math in torch (float64) on the saved inputs against the saved outputs
  bench    the measured limits (device-to-device copy of 2 GiB: bytes read + written over the time;
           8192^3 bf16 torch.matmul and fp8 torch._scaled_mm), then every case of gpu_cases.bench_cases:
           redfuse through `redfuse bench ... --load DIR` (the peers' inputs as .npy), the peers in this
           process; each peer output checked against a float32 reference
  report   gpu_results.json, table.md, the tables on stdout

Timing of the peers (CUDA): the first call (compiles) and one more are warm-up; then each repetition
reads a 256 MiB buffer (evicts the 60 MB L2 without leaving dirty lines) and is timed alone between
two CUDA events; median (and min, p10, p90) of >= 5 repetitions and about --impl-budget seconds.
On the CPU target the same with time.perf_counter and no flush. Nothing here asserts a time.
Every phase stops starting new work at --deadline (epoch seconds) and records what it skipped.
"""
import argparse
import concurrent.futures as cf
import gc
import glob
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu_cases  # noqa: E402
from gpu_util import SCHEMA, T0, fmt_num, fmt_pct, fmt_ratio, log, read_json, write_json  # noqa: E402,F401
from gpu_report import COLUMNS, phase_report, render_checks, render_table, table_rows  # noqa: E402,F401

REPO = gpu_cases.REPO
LOAD_MAX_BYTES = 2 << 30       # larger inputs are not written as .npy: redfuse draws its own


# ===================================================================================== helpers


def first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def error_line(text):
    """The most telling line of a redfuse failure: the first line with 'error', else the first (the
    repository's path taken out of file names)."""
    text = (text or "").replace(REPO + os.sep, "")
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    return first_line(text)


# A failure of the tiny probe that means the target itself is missing, not a wrong kernel.
UNAVAILABLE_RE = r"no CUDA driver/device|not available|nvrtc.*(not found|missing|cannot open)"


def target_unavailable(args):
    """'' when `redfuse run examples/softmax.rf --target T` runs, else why not, when the reason is that
    the target itself is missing (no driver, no device, not built): then every run would fail alike."""
    if not args.redfuse or not os.access(args.redfuse, os.X_OK):
        return "redfuse not built (%s)" % args.redfuse
    rc, out, err, _ = run_cmd([args.redfuse, "run", os.path.join(REPO, "examples", "softmax.rf"), "--target",
                               args.target, "--json"], min(args.run_timeout, 120))
    if rc == 0:
        return ""
    import re
    why = error_line(err or out)
    return why if re.search(UNAVAILABLE_RE, why, flags=re.I) else ""


def parse_json(text):
    """The last JSON object in a command's stdout: a whole (pretty-printed) object, or the last line
    that parses. None when there is none."""
    text = text or ""
    try:
        v = json.loads(text)
        return v if isinstance(v, dict) else None
    except ValueError:
        pass
    dec = json.JSONDecoder()
    found = None
    lines = text.splitlines(keepends=True)
    offs, pos = [], 0
    for line in lines:
        if line.lstrip().startswith("{"):
            offs.append(pos + (len(line) - len(line.lstrip())))
        pos += len(line)
    for off in offs:
        try:
            v, _ = dec.raw_decode(text, off)
        except ValueError:
            continue
        if isinstance(v, dict):
            found = v
    return found


def run_cmd(cmd, timeout, env=None):
    """(rc or None on timeout, stdout, stderr, wall seconds). Kills the process group on timeout."""
    t = time.time()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
    except OSError as e:
        return -1, "", str(e), 0.0
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err, time.time() - t
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = p.communicate()
        return None, out, err, time.time() - t


def show_cmd(cmd):
    return " ".join(os.path.relpath(c, REPO) if isinstance(c, str) and c.startswith(REPO + os.sep) else str(c)
                    for c in cmd)






def left(args):
    return (args.deadline - time.time()) if args.deadline else float("inf")








def nvidia_smi():
    """The GPU's state now (clocks, power, temperature), or {'error': why}."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"error": "nvidia-smi not found"}
    q = ("name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,"
         "power.limit,temperature.gpu,utilization.gpu,memory.used,memory.total")
    rc, out, err, _ = run_cmd([exe, "--query-gpu=" + q, "--format=csv,noheader,nounits"], 30)
    if rc != 0:
        return {"error": error_line(err or out) or "exit %s" % rc}
    vals = [v.strip() for v in first_line(out).split(",")]
    return dict(zip(q.split(","), vals))


# ================================================================================ the redfuse side
class Redfuse:
    """Probes `redfuse bench --help` once (flags) and runs a tiny case on the target (available)."""

    def __init__(self, exe, target, budget, timeout=180):
        self.exe, self.target, self.budget, self.timeout = exe, target, budget, timeout
        self.flags, self.available, self.reason = set(), False, ""
        self.probe_json = None
        if not exe or not os.access(exe, os.X_OK):
            self.reason = "redfuse not built (%s)" % (exe or "no executable given")
            return
        rc, out, err, _ = run_cmd([exe, "bench", "--help"], 60)
        if rc != 0:
            self.reason = "redfuse bench --help: %s" % error_line(err or out)
            return
        import re
        self.flags = set(re.findall(r"--[a-z][a-z0-9-]*", out + err))
        cmd = [exe, "bench", os.path.join(REPO, "examples", "softmax.rf"), "--target", target,
               "--size", "R=3,C=37", "--json"] + self._budget_args(0.05)
        rc, out, err, _ = run_cmd(cmd, timeout)
        js = parse_json(out)
        if rc != 0 or not js or "time_ms" not in js:
            self.reason = "redfuse bench --target %s fails on a tiny softmax (exit %s: %s)" % (
                target, rc, error_line(err or out) or "no JSON with time_ms")
            return
        self.available, self.probe_json = True, js

    def _budget_args(self, budget):
        return ["--budget", "%g" % budget] if "--budget" in self.flags and budget else []

    def command(self, spec_path, case, load_dir, unfused):
        cmd = [self.exe, "bench", spec_path, "--target", self.target, "--size",
               gpu_cases.size_arg(case["sizes"]), "--json"] + self._budget_args(self.budget)
        if load_dir and "--load" in self.flags:
            cmd += ["--load", load_dir]
        if not unfused and "--no-unfused" in self.flags:
            cmd += ["--no-unfused"]
        return cmd

    def records(self, case, cmd, spec_desc, inputs_note):
        """{impl: record} for 'redfuse' and 'redfuse-unfused' from one `redfuse bench` call."""
        base = {"spec": spec_desc, "command": show_cmd(cmd), "inputs": inputs_note}
        rc, out, err, wall = run_cmd(cmd, self.timeout)
        base["wall_s"] = round(wall, 2)
        if rc is None:
            return {i: dict(base, status="timeout", reason="redfuse bench ran past %d s" % self.timeout)
                    for i in gpu_cases.REDFUSE_IMPLS}
        js = parse_json(out)
        if rc != 0 or not js or "time_ms" not in js:
            why = "exit %s: %s" % (rc, error_line(err or out)) if rc != 0 else "no JSON with time_ms on stdout"
            return {i: dict(base, status="failed", reason=why) for i in gpu_cases.REDFUSE_IMPLS}
        recs = {}
        for impl in gpu_cases.REDFUSE_IMPLS:
            t = js.get("time_ms") if impl == "redfuse" else js.get("unfused_time_ms")
            if t is None and impl == "redfuse-unfused" and isinstance(js.get("unfused"), dict):
                t = js["unfused"].get("time_ms")
            if t is None:
                recs[impl] = dict(base, status="skipped", reason="not timed (--no-unfused)"
                                  if "--no-unfused" in cmd else "redfuse bench reported no time")
                continue
            r = dict(base, status="ok", time_ms=float(t), redfuse_json=js)
            for key in ("strategy", "reps", "gbps", "tflops", "gflops", "kernels"):
                if key in js and impl == "redfuse":
                    r["rf_" + key] = js[key]
            recs[impl] = r
        return recs


# =========================================================================== phase: check
def phase_check(args):
    specs = sorted(glob.glob(os.path.join(REPO, "examples", "*.rf")))
    jobs = []
    for spec in specs:
        for label, sizes in gpu_cases.example_size_sets(gpu_cases.read_spec(spec), os.path.basename(spec)[:-3]):
            jobs.append((spec, label, sizes))
    log("check: %d runs (%d examples x size sets) on --target %s, %d at a time"
        % (len(jobs), len(specs), args.target, args.jobs))
    results = []
    gone = target_unavailable(args)
    if gone:
        log("check: --target %s is unavailable: %s" % (args.target, gone))

    def one(job):
        spec, label, sizes = job
        rec = {"example": os.path.basename(spec), "set": label, "sizes": dict(sizes)}
        if gone:
            return dict(rec, status="unavailable", reason=gone)
        if left(args) < 2:
            return dict(rec, status="skipped", reason="time budget")
        cmd = [args.redfuse, "run", spec, "--target", args.target, "--check", "--json"]
        if sizes:
            cmd += ["--size", gpu_cases.size_arg(sizes)]
        rec["command"] = show_cmd(cmd)
        rc, out, err, wall = run_cmd(cmd, min(args.run_timeout, max(5, left(args))))
        rec["wall_s"] = round(wall, 2)
        js = parse_json(out)
        if js:
            rec["sizes"] = js.get("sizes", rec["sizes"])
            rec["time_ms"] = js.get("time_ms")
            rec["outputs"] = {n: {k: o.get(k) for k in ("max_abs_err", "max_rel_err", "tolerance", "ok",
                                                          "nans", "mismatches")}
                              for n, o in (js.get("outputs") or {}).items()}
        if rc is None:
            return dict(rec, status="timeout", reason="> %d s" % args.run_timeout)
        if rc == 0 and js and js.get("ok", True):
            return dict(rec, status="ok")
        if rc == 1 and js and js.get("ok") is False:
            bad = [n for n, o in rec.get("outputs", {}).items() if not o.get("ok")]
            return dict(rec, status="wrong", reason="check failed: %s" % ", ".join(bad))
        return dict(rec, status="error", rc=rc, reason="exit %s: %s" % (rc, error_line(err or out)))

    with cf.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        futs = {ex.submit(one, j): j for j in jobs}
        for fut in cf.as_completed(futs):
            r = fut.result()
            results.append(r)
            if gone:
                continue
            errs = ", ".join("%s %.1e/%.1e" % (n, o.get("max_rel_err") or 0, o.get("tolerance") or 0)
                             for n, o in sorted((r.get("outputs") or {}).items()))
            log("check %-28s %-10s %-7s %s%s" % (r["example"], r["set"], r["status"],
                                                 (r.get("reason") or errs),
                                                 " (%.1fs)" % r["wall_s"] if "wall_s" in r else ""))
    order = {(os.path.basename(s), l): i for i, (s, l, _) in enumerate(jobs)}
    results.sort(key=lambda r: order[(r["example"], r["set"])])
    n_ok = sum(r["status"] == "ok" for r in results)
    log("check: %d of %d ok" % (n_ok, len(results)))
    write_json(os.path.join(args.work, "check.json"),
               {"target": args.target, "runs": results, "ok": n_ok, "total": len(results)})
    return 0


# ========================================================================= phase: compare
def torch_device(target):
    import torch
    if target == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("torch sees no CUDA device (torch %s)" % torch.__version__)
        return torch.device("cuda")
    return torch.device("cpu")


def phase_compare(args):
    import numpy as np
    import gpu_torch
    try:
        dev = torch_device(args.target)
    except SystemExit as e:
        log("compare: %s" % e)
        write_json(os.path.join(args.work, "compare.json"), {"target": args.target, "error": str(e), "runs": []})
        return 1
    gone = target_unavailable(args)
    if gone:
        log("compare: --target %s is unavailable: %s" % (args.target, gone))
        write_json(os.path.join(args.work, "compare.json"), {"target": args.target, "error": gone, "runs": []})
        return 0
    names = [os.path.basename(p)[:-3] for p in sorted(glob.glob(os.path.join(REPO, "examples", "*.rf")))]
    base = os.path.join(args.work, "saved")
    shutil.rmtree(base, ignore_errors=True)
    todo = [n for n in names if n in gpu_cases.COMPARE_SIZES]
    missing = [n for n in names if n not in gpu_cases.COMPARE_SIZES]
    log("compare: %d examples (run --save at realistic sizes, then torch float64 on %s)%s"
        % (len(todo), dev, "; no torch math for: " + ", ".join(missing) if missing else ""))

    def one(name):
        spec = os.path.join(REPO, "examples", name + ".rf")
        d = os.path.join(base, name)
        sizes = gpu_cases.COMPARE_SIZES[name]
        cmd = [args.redfuse, "run", spec, "--target", args.target, "--check", "--json", "--size",
               gpu_cases.size_arg(sizes), "--save", d] + gpu_cases.COMPARE_ARGS.get(name, [])
        rec = {"example": name + ".rf", "sizes": dict(sizes), "command": show_cmd(cmd)}
        if left(args) < 3:
            return dict(rec, status="skipped", reason="time budget")
        rc, out, err, wall = run_cmd(cmd, min(args.run_timeout, max(5, left(args))))
        js = parse_json(out) or {}
        rec.update(wall_s=round(wall, 2), rc=rc, redfuse_check_ok=js.get("ok"), time_ms=js.get("time_ms"))
        rec["sizes"] = js.get("sizes") or rec["sizes"]
        if rc is None:
            return dict(rec, status="timeout", reason="> %d s" % args.run_timeout)
        if not os.path.isdir(d) or not glob.glob(os.path.join(d, "*.npy")):
            return dict(rec, status="error", reason="exit %s: %s" % (rc, error_line(err or out) or "nothing saved"))
        return dict(rec, status="saved", dir=d)

    with cf.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        runs = list(ex.map(one, todo))
    results = []
    for rec in runs:
        name = rec["example"][:-3]
        if rec["status"] == "saved":
            text = gpu_cases.read_spec(os.path.join(REPO, "examples", rec["example"]))
            saved = {os.path.basename(p)[:-4]: np.load(p) for p in glob.glob(os.path.join(rec.pop("dir"), "*.npy"))}
            try:
                rows = gpu_torch.compare_saved(name, saved, rec["sizes"], gpu_cases.spec_outputs(text),
                                               gpu_cases.spec_topk(text), dev)
                ok = all(r["ok"] for r in rows)
                rec.update(status="ok" if ok else "wrong", outputs=rows)
                if not ok:
                    rec["reason"] = "; ".join("%s %s %.2e > %.0e" % (r["output"], r["metric"], r["error"] or -1,
                                                                      r.get("tolerance") or 0)
                                              for r in rows if not r["ok"])
                if rec.get("rc") not in (0, None) and ok:
                    rec["note"] = "redfuse --check exit %s, torch agrees" % rec["rc"]
            except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                rec.update(status="error", reason="torch reference: %s: %s" % (type(e).__name__, e))
        results.append(rec)
        outs = ", ".join("%s %.1e" % (r["output"], r["error"] if r["error"] is not None else -1)
                         for r in rec.get("outputs", []))
        log("compare %-28s %-7s %s" % (rec["example"], rec["status"], rec.get("reason") or outs))
    shutil.rmtree(base, ignore_errors=True)
    n_ok = sum(r["status"] == "ok" for r in results)
    log("compare: %d of %d agree with torch" % (n_ok, len(results)))
    write_json(os.path.join(args.work, "compare.json"),
               {"target": args.target, "device": str(dev), "runs": results, "ok": n_ok, "total": len(results)})
    return 0


# =========================================================================== phase: bench
class Timer:
    """Per-call timing: CUDA events around each call after an L2 flush (a read of 256 MiB), or
    time.perf_counter on the CPU."""

    def __init__(self, device, flush_mib=256):
        import torch
        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"
        self.flush_buf = torch.ones((flush_mib << 20) // 4, dtype=torch.float32, device=device) \
            if self.cuda and flush_mib else None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def flush(self):
        if self.flush_buf is not None:
            self.flush_buf.sum()

    def time(self, fn, inp, budget_s, min_reps=5, max_reps=100):
        """Median and spread of per-call times in ms (after two warm-up calls that the caller made)."""
        torch = self.torch
        if self.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush()
            s.record()
            fn(inp)
            e.record()
            torch.cuda.synchronize()
            est = max(s.elapsed_time(e), 1e-3)
            n = int(min(max_reps, max(min_reps, budget_s * 1e3 / (est + 0.1))))
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n)]
            for a, b in ev:
                self.flush()
                a.record()
                fn(inp)
                b.record()
            torch.cuda.synchronize()
            ts = sorted(a.elapsed_time(b) for a, b in ev)
        else:
            t = time.perf_counter()
            fn(inp)
            est = max((time.perf_counter() - t) * 1e3, 1e-3)
            n = int(min(max_reps, max(min_reps, budget_s * 1e3 / est)))
            ts = []
            for _ in range(n):
                t = time.perf_counter()
                fn(inp)
                ts.append((time.perf_counter() - t) * 1e3)
            ts.sort()
        return {"time_ms": statistics.median(ts), "min_ms": ts[0], "p10_ms": ts[len(ts) // 10],
                "p90_ms": ts[(len(ts) * 9) // 10], "reps": len(ts)}


def measure_limits(dev, quick):
    """Copy bandwidth (bytes read + written / time) and matrix rates, measured here and now."""
    import torch
    out = {"device": str(dev), "torch": torch.__version__}
    cuda = dev.type == "cuda"

    def per_call(fn, reps, warm=3):
        for _ in range(warm):
            fn()
        if cuda:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for a, b in ev:
                a.record()
                fn()
                b.record()
            torch.cuda.synchronize()
            ts = [a.elapsed_time(b) for a, b in ev]
        else:
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts), min(ts)

    if cuda:
        p = torch.cuda.get_device_properties(dev)
        out.update(name=p.name, sms=p.multi_processor_count, total_mem_gib=round(p.total_memory / 2 ** 30, 1),
                   l2_mb=round(getattr(p, "L2_cache_size", 0) / 1e6, 1), cc="%d.%d" % (p.major, p.minor),
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    else:
        out.update(name=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    nbytes = (64 << 20) if not cuda else ((256 << 20) if quick else (2 << 30))
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    med, mn = per_call(lambda: dst.copy_(src), 10 if quick else 20)
    out["copy_bytes"] = nbytes
    out["copy_gbps"] = 2 * nbytes / (med / 1e3) / 1e9
    out["copy_gbps_best"] = 2 * nbytes / (mn / 1e3) / 1e9
    del src, dst
    n = 8192 if cuda and not quick else (2048 if cuda else 512)
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    a = torch.randn(n, n, device=dev, generator=g).to(torch.bfloat16)
    b = torch.randn(n, n, device=dev, generator=g).to(torch.bfloat16)
    med, mn = per_call(lambda: torch.matmul(a, b), 20 if cuda else 3, warm=10 if cuda else 1)
    out["matmul_n"] = n
    out["bf16_tflops"] = 2.0 * n ** 3 / (med / 1e3) / 1e12
    out["bf16_tflops_best"] = 2.0 * n ** 3 / (mn / 1e3) / 1e12
    del a, b
    if cuda:
        try:
            import gpu_torch
            a8 = torch.randn(n, n, device=dev, generator=g).to(gpu_torch.FP8)
            b8 = torch.randn(n, n, device=dev, generator=g).to(gpu_torch.FP8)
            one = torch.ones((), device=dev)
            med, mn = per_call(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                        out_dtype=torch.bfloat16), 20, warm=10)
            out["fp8_tflops"] = 2.0 * n ** 3 / (med / 1e3) / 1e12
            del a8, b8
        except Exception as e:  # noqa: BLE001
            out["fp8_error"] = "%s: %s" % (type(e).__name__, first_line(str(e)))
        torch.cuda.empty_cache()
    else:
        out["fp8_error"] = "CPU target (the fp8 floor uses 2x the bf16 rate)"
        # torch's CPU bf16 matmul can be far slower than f32 here: the matrix rate is the better of both
        a = torch.randn(n, n, device=dev, generator=g)
        b = torch.randn(n, n, device=dev, generator=g)
        med, mn = per_call(lambda: torch.matmul(a, b), 3)
        out["f32_tflops"] = 2.0 * n ** 3 / (med / 1e3) / 1e12
        if out["f32_tflops"] > out["bf16_tflops"]:
            out["bf16_tflops"] = out["f32_tflops"]
            out["matrix_rate_note"] = "CPU: f32 matmul was faster than bf16; used as the matrix rate"
    return out


def phase_bench(args):
    import torch
    import gpu_torch
    try:
        dev = torch_device(args.target)
    except SystemExit as e:
        log("bench: %s" % e)
        write_json(os.path.join(args.work, "bench.json"), {"target": args.target, "error": str(e)})
        return 1
    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    res_path = os.path.join(args.work, "bench.json")
    state = {"target": args.target, "device": str(dev), "quick": args.quick, "records": [], "cases": [],
             "skipped_cases": [], "impl_notes": gpu_cases.IMPL_NOTES, "smi": {}}
    state["smi"]["before"] = nvidia_smi() if dev.type == "cuda" else {"error": "CPU target"}
    log("bench: measuring the limits (copy bandwidth, bf16/fp8 matrix rates) on %s" % dev)
    try:
        limits = measure_limits(dev, args.quick)
    except Exception as e:  # noqa: BLE001
        limits = {"error": "%s: %s" % (type(e).__name__, e)}
        traceback.print_exc()
    state["limits"] = limits
    if dev.type == "cuda":
        state["smi"]["after_limits"] = nvidia_smi()
    log("bench: copy %s GB/s, bf16 matmul %s TFLOP/s, fp8 %s" % (
        fmt_num(limits.get("copy_gbps"), 4), fmt_num(limits.get("bf16_tflops"), 4),
        "%s TFLOP/s" % fmt_num(limits["fp8_tflops"], 4) if limits.get("fp8_tflops")
        else "not measured: %s" % limits.get("fp8_error")))
    write_json(res_path, state)

    rf = Redfuse(args.redfuse, args.target, args.rf_budget, timeout=args.rf_timeout)
    state["redfuse"] = {"available": rf.available, "reason": rf.reason, "flags": sorted(rf.flags),
                        "exe": args.redfuse}
    log("bench: redfuse %s" % ("available (bench flags: %s)" % " ".join(sorted(rf.flags)) if rf.available
                               else "unavailable: " + rf.reason))
    cases = gpu_cases.bench_cases(args.quick)
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in cases if c["workload"] in want]
    timer = Timer(dev)
    seen_workloads = set()
    interrupted = [False]

    def on_term(signum, frame):
        interrupted[0] = True
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_term)
    try:
        for case in cases:
            first = case["workload"] not in seen_workloads
            seen_workloads.add(case["workload"])
            if left(args) < args.min_case_s:
                state["skipped_cases"].append({"id": case["id"], "reason": "time budget (%.0f s left)"
                                               % max(0, left(args))})
                log("bench %s: skipped (time budget)" % case["id"])
                continue
            run_case(args, case, first, dev, timer, rf, limits, state, gpu_torch)
            write_json(res_path, state)
    except KeyboardInterrupt:
        log("bench: interrupted; writing what was measured")
        state["interrupted"] = True
    if dev.type == "cuda":
        state["smi"]["after"] = nvidia_smi()
    write_json(res_path, state)
    n_ok = sum(r["status"] == "ok" for r in state["records"])
    log("bench: %d cases, %d measurements ok, %d cases skipped" % (len(state["cases"]), n_ok,
                                                                  len(state["skipped_cases"])))
    return 0


def run_case(args, case, first_of_workload, dev, timer, rf, limits, state, gpu_torch):
    import torch
    t_case = time.time()
    fl = gpu_cases.floor_ms(case, limits)
    m = gpu_cases.model(case)
    log("bench %s: floor %s ms (%s MB, %s GFLOP)" % (case["id"], fmt_num(fl), fmt_num(m["bytes"] / 1e6),
                                                    fmt_num(m["flops"] / 1e9)))
    cinfo = dict(case, floor_ms=fl, bytes=m["bytes"], flops=m["flops"], peak_kind=m["peak"])
    state["cases"].append(cinfo)
    recs = {}

    def add(impl, rec):
        rec = dict(rec, case=case["id"], workload=case["workload"], impl=impl)
        if rec.get("status") == "ok" and rec.get("time_ms"):
            rec.update(gpu_cases.derived(case, rec["time_ms"], limits))
        recs[impl] = rec
        state["records"].append(rec)
        if rec["status"] == "ok":
            log("  %-16s %9s ms  %7s TFLOP/s %7s GB/s%s%s" % (
                impl, fmt_num(rec["time_ms"]), fmt_num(rec.get("tflops")), fmt_num(rec.get("gbps")),
                "  first call %.1f s" % rec["first_call_s"] if rec.get("first_call_s") else "",
                "  check %s" % rec["check"] if rec.get("check") else ""))
        else:
            log("  %-16s %s: %s" % (impl, rec["status"], rec.get("reason")))

    try:
        inp = gpu_torch.inputs(case, dev)
    except Exception as e:  # noqa: BLE001
        for impl in case["impls"]:
            add(impl, {"status": "failed", "reason": "inputs: %s: %s" % (type(e).__name__, first_line(str(e)))})
        return
    ref, ref_err = None, None
    try:
        ref = gpu_torch.reference(case, inp)
    except Exception as e:  # noqa: BLE001
        ref_err = "%s: %s" % (type(e).__name__, first_line(str(e)))
        cinfo["reference_error"] = ref_err
    tol = gpu_torch.tolerance(case)

    # ---- redfuse (its own process; the same inputs through .npy when they are not too large)
    rf_impls = [i for i in case["impls"] if i in gpu_cases.REDFUSE_IMPLS]
    if rf_impls:
        if not rf.available:
            for impl in rf_impls:
                add(impl, {"status": "unavailable", "reason": rf.reason})
        else:
            spec_path, spec_desc = gpu_cases.derive_spec(case["spec"], case["dtype"], case["sizes"].get("k"),
                                                         os.path.join(args.work, "specs"))
            load_dir, note = None, "redfuse's own random inputs"
            nb = gpu_torch.npy_bytes(inp)
            if "--load" not in rf.flags:
                note += " (bench has no --load)"
            elif nb > LOAD_MAX_BYTES:
                note += " (.npy would be %.1f GB)" % (nb / 1e9)
            else:
                load_dir = os.path.join(args.work, "npy")
                shutil.rmtree(load_dir, ignore_errors=True)
                gpu_torch.save_npy(inp, load_dir)
                note = "the peers' inputs (.npy, %.0f MB)" % (nb / 1e6)
            if dev.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            cmd = rf.command(spec_path, case, load_dir, gpu_cases.unfused_wanted(case, first_of_workload))
            for impl, rec in rf.records(case, cmd, spec_desc, note).items():
                if impl in rf_impls:
                    add(impl, rec)
            if load_dir:
                shutil.rmtree(load_dir, ignore_errors=True)

    # ---- the peers (this process)
    for impl in case["impls"]:
        if impl in gpu_cases.REDFUSE_IMPLS:
            continue
        spent = time.time() - t_case
        if spent > args.case_budget:
            add(impl, {"status": "skipped", "reason": "case budget of %.0f s spent" % args.case_budget})
            continue
        if left(args) < 3:
            add(impl, {"status": "skipped", "reason": "time budget"})
            continue
        if impl in gpu_cases.CUDA_ONLY and dev.type != "cuda":
            add(impl, {"status": "skipped", "reason": "CUDA only: " + gpu_cases.CUDA_ONLY[impl]})
            continue
        try:
            fn = gpu_torch.prepare(case, impl, inp, dev)
            t = time.time()
            outs = fn(inp)
            timer.sync()
            first_s = time.time() - t
            rec = {"status": "ok", "first_call_s": round(first_s, 3)}
            if ref is not None:
                err, detail = gpu_torch.compare_outputs(case, outs, ref)
                rec.update(err=err, err_detail=detail, tolerance=tol,
                           check=("ok %.1e" % err) if err <= tol else "(!) %.1e" % err)
            else:
                rec["check"] = "no reference"
            del outs
            fn(inp)  # second warm-up
            timer.sync()
            rec.update(timer.time(fn, inp, args.impl_budget))
            add(impl, rec)
        except gpu_torch.NotExpressed as e:
            add(impl, {"status": "skipped", "reason": str(e)})
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - one peer failing does not stop the case
            oom = "out of memory" in str(e).lower()
            add(impl, {"status": "failed", "reason": "%s: %s" % ("OOM" if oom else type(e).__name__,
                                                                first_line(str(e)))})
            if oom and dev.type == "cuda":
                torch.cuda.empty_cache()
            if not oom:
                tb = traceback.format_exc().splitlines()
                log("    " + "\n    ".join(tb[-6:]))
        finally:
            fn = None
            if dev.type == "cuda":
                torch.cuda.synchronize()
    del inp, ref
    gc.collect()
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001
        pass
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    cinfo["wall_s"] = round(time.time() - t_case, 1)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["check", "compare", "bench", "report"])
    ap.add_argument("--target", choices=["cuda", "cpu", "opencl"], default="cuda")
    ap.add_argument("--redfuse", default=os.path.join(REPO, "build", "redfuse"))
    ap.add_argument("--work", required=True, help="scratch folder shared by the phases")
    ap.add_argument("--out", help="report: where gpu_results.json and table.md go")
    ap.add_argument("--quick", action="store_true", help="tiny bench sizes, short budgets")
    ap.add_argument("--only", help="bench: only these workloads (comma list)")
    ap.add_argument("--jobs", type=int, default=None, help="check/compare: runs at a time")
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds: start nothing after it")
    ap.add_argument("--run-timeout", type=float, default=120.0, help="one `redfuse run`, seconds")
    ap.add_argument("--case-budget", type=float, default=None, help="bench: seconds per case")
    ap.add_argument("--impl-budget", type=float, default=None, help="bench: timing seconds per impl")
    ap.add_argument("--rf-budget", type=float, default=None, help="bench: redfuse bench --budget")
    ap.add_argument("--rf-timeout", type=float, default=120.0, help="bench: one redfuse bench, seconds")
    ap.add_argument("--min-case-s", type=float, default=None, help="bench: start a case only with this left")
    a = ap.parse_args(argv)
    if a.phase == "report" and not a.out:
        ap.error("report needs --out")
    if a.phase in ("check", "compare", "bench") and a.target == "cuda" and a.jobs is None:
        a.jobs = 8
    if a.jobs is None:
        a.jobs = max(1, min(8, os.cpu_count() or 1))
    gpu = a.target == "cuda"
    if a.case_budget is None:
        a.case_budget = 150.0 if not gpu else (30.0 if a.quick else 45.0)
    if a.impl_budget is None:
        a.impl_budget = 0.05 if a.quick or not gpu else 0.3
    if a.rf_budget is None:
        a.rf_budget = 0.05 if a.quick or not gpu else 0.3
    if a.min_case_s is None:
        a.min_case_s = 8.0 if gpu else 20.0
    return a


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    if args.redfuse and not os.path.isabs(args.redfuse):
        args.redfuse = os.path.abspath(args.redfuse)
    fn = {"check": phase_check, "compare": phase_compare, "bench": phase_bench, "report": phase_report}
    return fn[args.phase](args)


if __name__ == "__main__":
    sys.exit(main())
