#!/usr/bin/env python3
"""peers.py — measures every workload of docs/workloads.md against its peers, in one run.

    $VENV/bin/python bench/peers.py --out DIR [--machine machine.json] [--quick] [--only W1,W2]
                                    [--impls I1,I2] [--skip SUBSTR] [--budget S] [--threads N]

Implementations (columns): redfuse and redfuse-unfused (the Python API in the worker, redfuse_hook.py),
torch-eager, torch-compile (Inductor), torch-sdpa and torch-flex (attention), torch-dynquant (int8
quant + GEMM), tvm (Relax, default llvm pipeline); the fusion-level study adds torch-softmax,
torch-3pass(-compile) and redfuse[<strategy>].

How it measures
- All implementations of a case, redfuse's included, run in ONE worker process on the SAME input
  tensors (generated from a seed derived from the case id, so a restarted worker regenerates
  identical data). The worker is a spawned process that imports torch (TVM, redfuse) once; the
  parent enforces a wall-clock limit per measurement and restarts the worker when one hangs or dies,
  so one bad peer cannot stop the run. redfuse compiles the case's spec once per row (its time to
  first result, compile + first call, is first_call_s as torch.compile's) and is timed like a peer.
- threads = all cores (torch.set_num_threads, TVM_NUM_THREADS).
- Timing: the first call (which includes compilation for torch.compile/FlexAttention, recorded as
  first_call_s), one more warm-up call and further calls for 20 ms are outside the timing; then calls
  are repeated until at least --min-reps and the --budget seconds are spent (at most --max-reps, unless
  those take under 50 ms: microsecond calls are timed for 50 ms); the median is reported
  (min and max kept). When one warm call already takes longer than the budget, that call is the only
  sample (reps = 1).
- Allocation: the peers allocate their outputs and temporaries on every call. With glibc's defaults a
  buffer over 32 MiB is mmapped and unmapped each time, and on this VM (4 KiB pages; transparent huge
  pages only on madvise) page-faulting a fresh 64 MB output costs ~18 ms, more than the softmax
  itself. The worker therefore runs with MALLOC_MMAP_MAX_=0 and a huge MALLOC_TRIM_THRESHOLD_: freed
  memory stays in the heap and is reused, as a caching allocator would (--no-malloc-cache: defaults).
- Check: every output is compared with the eager math run on float32 copies of the inputs
  (max |out - ref| / max |ref|; top-k indices as the fraction that match).
- Peak memory (linear + cross-entropy, where it is the point): each implementation runs in a fresh
  worker; it resets its RSS high-water mark (/proc/self/clear_refs, "5") just before the first call
  (the second for compiled peers, whose first call compiles) and reads VmHWM after it:
  peak_extra_bytes is the peak RSS above the RSS before that call (inputs excluded; memory a pool
  allocates in the call and keeps, as TVM's does, included).
- Rounds: the whole list is measured --rounds times (2 in a full run); each case keeps the round with
  the fastest median (all medians in round_ms). Single calls longer than the budget are not repeated.
- The 1-minute load average is recorded with every result: the machine is shared, and other busy
  processes stall the OpenMP barriers of a 2-thread run (times then jump by multiples of ~4 ms).
- GB/s, GFLOP/s and the fractions of the machine's measured limits come from bench/model.py.

Outputs in --out: results.json (one record per case x implementation), table.md, chart.png.
"""
import argparse
import datetime
import gc
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model  # noqa: E402
import redfuse_hook  # noqa: E402
import workloads  # noqa: E402

COMPILED = ("torch-compile", "torch-3pass-compile", "torch-flex")
MALLOC_CACHE_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


# =========================================================================================== worker
def _proc_status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _malloc_trim():
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _short(e):
    msg = str(e).strip().splitlines()
    tail = [m for m in msg if m.strip()]
    text = tail[-1] if tail else ""
    for m in tail:  # prefer the line that says what went wrong
        if "Error" in m or "error" in m:
            text = m
            break
    return ("%s: %s" % (type(e).__name__, text.strip()))[:400]


def _env_info(torch, tvm_log):
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads()}
    try:
        info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001
        pass
    try:
        info["torch_parallel"] = [l.strip() for l in torch.__config__.parallel_info().splitlines()[:8]]
    except Exception:  # noqa: BLE001
        pass
    import numpy
    info["numpy"] = numpy.__version__
    try:
        import matplotlib
        info["matplotlib"] = matplotlib.__version__
    except ImportError as e:
        info["matplotlib"] = "unavailable: %s" % e
    try:
        import tvm
        info["tvm"] = tvm.__version__
        from tvm.target import codegen
        info["tvm_llvm"] = "LLVM %s, cpu %s" % (codegen.llvm_version_major(), codegen.llvm_get_system_cpu())
    except Exception as e:  # noqa: BLE001
        reason = _short(e)
        if tvm_log and os.path.exists(tvm_log):
            lines = [l.strip() for l in open(tvm_log, errors="replace") if l.strip()]
            errs = [l for l in lines if "ERROR" in l or "error" in l.lower()]
            reason = "apache-tvm not installed: %s" % ((errs or lines or ["pip failed"])[-1][:300])
        info["tvm"] = "unavailable: %s" % reason
    info["redfuse"] = redfuse_hook.probe()
    return info


def _compare(outs, refs):
    import torch
    check = {}
    rel = 0.0
    match = None
    for o, r in zip(outs, refs):
        o = torch.as_tensor(o)
        if o.numel() != r.numel():
            return {"error": "shape %s vs reference %s" % (tuple(o.shape), tuple(r.shape))}
        o = o.reshape(r.shape)
        if r.is_floating_point():
            d = (o.double() - r.double()).abs()
            scale = max(r.double().abs().max().item(), 1e-30)
            v = d.max().item() / scale if d.numel() else 0.0
            if v != v:  # NaN
                v = float("inf")
            rel = max(rel, v)
        else:
            m = (o.long() == r.long()).double().mean().item() if r.numel() else 1.0
            match = m if match is None else min(match, m)
    check["max_rel_err"] = float("%.3g" % rel)
    if match is not None:
        check["index_match"] = round(match, 6)
    return check


WARMUP_S = 0.02
# Calls so short that --max-reps of them take less than this are timed for this long instead: the
# machine's own interruptions (timer ticks, the hypervisor) last ~0.1 ms, as long as 50 calls of a
# few microseconds, and moved whole medians by 1.5 us (T = 1 MoE rows 2.5 or 4.2 us, run to run).
MIN_TIMED_S = 0.05


def _measure(call, budget, min_reps, max_reps, compiled):
    t0 = time.perf_counter()
    out = call()
    first = time.perf_counter() - t0
    last = first
    if compiled or first <= budget:
        t0 = time.perf_counter()
        out = call()
        last = time.perf_counter() - t0
    if last > budget:
        return [last], first, out
    # Warm-up by time, not by count: a few microsecond calls do not reach the steady state that
    # the previous measurement in this worker (another library, other buffers) left behind.
    warm_end = time.perf_counter() + min(WARMUP_S, budget)
    while time.perf_counter() < warm_end:
        out = call()
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if len(times) >= min_reps and spent >= budget:
            break
        if len(times) >= max_reps and spent >= min(MIN_TIMED_S, budget):
            break
        if spent >= 4 * budget:
            break
    return times, first, out


class _State:
    case_id = None
    inp = None
    ref = None


def _case_inputs(st, case, seed):
    import torch
    import impl_torch
    if st.case_id != case["id"]:
        st.inp = st.ref = None
        # Each case compiles afresh: the eager functions are shared code objects (closures), and
        # Dynamo's per-code-object recompile limit would otherwise send later shapes to eager.
        torch._dynamo.reset()
        gc.collect()
        _malloc_trim()  # the heap keeps freed memory (MALLOC_TRIM_THRESHOLD_): hand it back between cases
        gen = torch.Generator().manual_seed(seed + zlib.crc32(case["id"].encode()))
        st.inp = impl_torch.inputs(case, gen)
        st.case_id = case["id"]
    return st.inp


def _reference(st, case):
    import torch
    import impl_torch
    if st.ref is None:
        inp32 = {k: (v.float() if v.is_floating_point() else v) for k, v in st.inp.items()}
        with torch.no_grad():
            st.ref = [o.detach() for o in impl_torch.eager_fn(case)(inp32)]
    return st.ref


def _prepare(case, impl, inp, opt):
    """(call, conv, fields): one call of `impl` on the case's inputs, the conversion of its outputs
    to tensors (TVM's), and fields for the record (redfuse: its spec, compile time, strategy)."""
    import impl_torch
    if impl == "tvm":
        try:
            import impl_tvm
        except Exception as e:  # noqa: BLE001
            raise redfuse_hook.Unavailable(opt.get("tvm_reason") or _short(e)) from e
        run, conv = impl_tvm.prepare(case, inp, opt["threads"])
        return run, conv, {}
    if impl.startswith("redfuse"):
        call, fields = redfuse_hook.prepare(case, impl, inp, opt["outdir"], opt["threads"])
        return call, None, fields
    fn = impl_torch.prepare(case, impl, inp)
    return (lambda: fn(inp)), None, {}


def _peak_extra(call, impl, inp):
    """In a fresh worker: the peak RSS of the first call above the RSS just before it (after a
    compiling first call for torch.compile), so pools that keep their memory across calls (TVM's
    allocator) are counted too."""
    if impl in COMPILED:
        call()
    gc.collect()
    _malloc_trim()  # free heap pages go back to the OS, so the call's own pages are counted
    rss0 = _proc_status_kb("VmRSS")
    if not _reset_hwm():
        return {"peak_extra_bytes_note": "/proc/self/clear_refs not writable"}
    r = call()
    hwm = _proc_status_kb("VmHWM")
    del r
    return {"peak_extra_bytes": max(0, hwm - rss0) * 1024,
            "inputs_bytes": sum(v.numel() * v.element_size() for v in inp.values())}


def _run(st, case, impl, opt):
    import torch
    import impl_torch
    rec = {}
    inp = _case_inputs(st, case, opt["seed"])
    try:
        t0 = time.perf_counter()
        call, conv, fields = _prepare(case, impl, inp, opt)
        rec["build_s"] = round(time.perf_counter() - t0, 3)
        rec.update(fields)
        with torch.no_grad():
            if opt.get("memory"):
                rec.update(_peak_extra(call, impl, inp))
            times, first, out = _measure(call, opt["budget"], opt["min_reps"], opt["max_reps"],
                                         impl in COMPILED)
            outs = conv(out) if conv else out
            rec["check"] = _compare(outs, _reference(st, case))
            del out, outs
        ms = [t * 1e3 for t in times]
        # redfuse compiles in redfuse.compile, the peers in their first call: its first_call_s adds
        # the compile, so that both are the time to the first result.
        first += fields.get("compile_s", 0.0)
        rec.update(status="ok", time_ms=statistics.median(ms), min_ms=min(ms), max_ms=max(ms), reps=len(ms),
                   first_call_s=round(first, 3))
    except impl_torch.NotExpressed as e:
        rec = {"status": "not expressed", "reason": str(e)}
    except redfuse_hook.Unavailable as e:
        rec = dict(rec, status="unavailable", reason=str(e))
    except Exception as e:  # noqa: BLE001
        rec = dict(rec, status="failed", reason=_short(e), traceback=traceback.format_exc()[-2000:])
    return rec


def worker_main(conn, threads, seed, tvm_log):
    import torch
    torch.set_num_threads(threads)
    import torch._dynamo
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    st = _State()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        kind = msg[0]
        if kind == "quit":
            return
        try:
            if kind == "env":
                conn.send(_env_info(torch, tvm_log))
            elif kind == "run":
                conn.send(_run(st, msg[1], msg[2], msg[3]))
            else:
                conn.send({"status": "failed", "reason": "unknown message %r" % kind})
        except Exception as e:  # noqa: BLE001
            conn.send({"status": "failed", "reason": _short(e)})


class Worker:
    """A spawned worker process with a wall-clock limit per request; restarted when it hangs or dies."""

    def __init__(self, threads, seed, tvm_log):
        self.args = (threads, seed, tvm_log)
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self.conn = None

    def _start(self):
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=worker_main, args=(child,) + self.args, daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    def _stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def call(self, msg, timeout):
        if self.proc is None or not self.proc.is_alive():
            self._start()
        try:
            self.conn.send(msg)
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self.proc.exitcode if self.proc else None
            self._stop()
            return {"status": "failed", "reason": "worker process died (exit code %s%s)" % (
                code, ", killed: out of memory?" if code in (-9, 137) else "")}
        self._stop()
        return {"status": "timeout", "reason": "> %d s (measurement abandoned)" % timeout}

    def restart(self):
        self.close()

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(("quit",))
                self.proc.join(10)
            except OSError:
                pass
        self._stop()


# =========================================================================================== driver
def _fmt_ms(t):
    return "%.4g ms" % t


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--machine", help="machine_limits JSON (bench/machine); fractions are omitted without")
    ap.add_argument("--quick", action="store_true", help="small sizes, short budgets")
    ap.add_argument("--only", default="", help="comma-separated workloads to run")
    ap.add_argument("--impls", default="", help="comma-separated implementations to run (others omitted)")
    ap.add_argument("--skip", action="append", default=[],
                    help="skip 'impl@case-id' containing this substring (recorded as skipped)")
    ap.add_argument("--budget", type=float, help="seconds of timed calls per measurement")
    ap.add_argument("--rounds", type=int,
                    help="measure everything this many times, keep each case's fastest median (default 2; "
                         "1 with --quick): other processes only ever slow a measurement down")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--timeout", type=int, help="wall-clock limit of one measurement (s)")
    ap.add_argument("--tvm-max-gflop", type=float,
                    help="skip TVM where the model's GFLOP exceed this (its untuned default pipeline runs "
                         "GEMMs at 0.4-2 GFLOP/s here); 0 = no limit")
    ap.add_argument("--tvm-install-log", default="", help="pip log of the apache-tvm install, for the reason")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-malloc-cache", action="store_true",
                    help="run the peers with glibc's default malloc (large buffers mmapped and unmapped on "
                         "every call: the peers then pay page faults for each output, ~18 ms per 64 MB here)")
    args = ap.parse_args(argv)
    args.budget = args.budget if args.budget is not None else (0.3 if args.quick else 1.0)
    args.timeout = args.timeout or (180 if args.quick else 400)
    args.rounds = max(1, args.rounds if args.rounds is not None else (1 if args.quick else 2))
    args.tvm_max_gflop = args.tvm_max_gflop if args.tvm_max_gflop is not None else (0 if args.quick else 10.0)
    cases = workloads.cases(quick=args.quick)
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {c["workload"] for c in cases}
        if unknown:
            ap.error("unknown workload(s): %s" % ", ".join(sorted(unknown)))
        cases = [c for c in cases if c["workload"] in want]
    args.cases = cases
    args.impl_filter = set(args.impls.split(",")) if args.impls else None
    return args


def _without_worker(case, impl, args, env):
    """The record of a measurement decided before the worker runs it (skipped, unavailable), or None."""
    if any(s in "%s@%s" % (impl, case["id"]) for s in args.skip):
        return {"status": "skipped", "reason": "--skip on the command line"}
    rf = env.get("redfuse") or {}
    if impl.startswith("redfuse") and not rf.get("available"):
        return {"status": "unavailable",
                "reason": rf.get("reason") or "the worker did not answer (%s)" % env.get("reason"),
                "spec": redfuse_hook.spec_for(case, args.out)[1]}
    tvm = str(env.get("tvm", ""))
    if impl == "tvm" and tvm.startswith("unavailable"):
        return {"status": "unavailable", "reason": tvm[len("unavailable: "):]}
    g = model.model(case)["flops"] / 1e9
    if impl == "tvm" and args.tvm_max_gflop and g > args.tvm_max_gflop:
        return {"status": "skipped",
                "reason": "%.0f GFLOP: TVM's untuned default pipeline runs at 0.4-2 GFLOP/s here, "
                          "~%.0f-%.0f s per call (limit --tvm-max-gflop %g)" % (g, g / 2, g / 0.4, args.tvm_max_gflop)}
    return None


def _measure_one(worker, case, impl, args, env):
    rec = _without_worker(case, impl, args, env)
    if rec is not None:
        return rec
    mem = case["workload"] == "linear_cross_entropy"
    if mem:
        worker.restart()  # a fresh process: nothing freed earlier is reused by this impl
    tvm = str(env.get("tvm", ""))
    opt = {"budget": args.budget, "min_reps": args.min_reps, "max_reps": args.max_reps, "threads": args.threads,
           "seed": args.seed, "memory": mem, "outdir": args.out,
           "tvm_reason": tvm if tvm.startswith("unavailable") else ""}
    return worker.call(("run", case, impl, opt), args.timeout)


def _keep(final, order, rec):
    """Keeps each (case, impl)'s fastest round; round_ms lists every round's median."""
    kk = (rec["case"], rec["impl"])
    old = final.get(kk)
    if old is None:
        order.append(kk)
        rec["round_ms"] = [rec.get("time_ms")]
        final[kk] = rec
        return
    rec["round_ms"] = old["round_ms"] + [rec.get("time_ms")]
    if rec.get("status") == "ok" and rec["time_ms"] < old["time_ms"]:
        final[kk] = rec
    else:
        old["round_ms"] = rec["round_ms"]


def _progress(rec):
    if rec["status"] != "ok":
        return "%s: %s" % (rec["status"], (rec.get("reason") or "")[:90])
    line = "%12s" % _fmt_ms(rec["time_ms"])
    if "roofline" in rec:
        line += "  %5.1f%% of floor" % (100 * rec["roofline"])
    chk = rec.get("check", {})
    if chk.get("max_rel_err") is not None:
        line += "  err %.1e" % chk["max_rel_err"]
    if "peak_extra_bytes" in rec:
        line += "  peak +%.0f MiB" % (rec["peak_extra_bytes"] / 2**20)
    return line


def _start(args):
    """Starts the worker; (worker, env, results skeleton)."""
    os.makedirs(args.out, exist_ok=True)
    machine = {}
    if args.machine:
        with open(args.machine) as f:
            machine = json.load(f)
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    if not args.no_malloc_cache:
        # Inherited by the spawned worker (glibc reads these at start-up): every buffer comes from the
        # heap and freed memory stays there, so a peer's per-call outputs are recycled as by a caching
        # allocator instead of being mmapped, page-faulted and unmapped on every call.
        os.environ.update(MALLOC_CACHE_ENV)
    worker = Worker(args.threads, args.seed, args.tvm_install_log)
    print("peers: starting the worker (imports torch, TVM and redfuse)...", flush=True)
    env = worker.call(("env",), 600)
    rf = env.get("redfuse") or {}
    print("peers: python %s, torch %s, tvm %s; redfuse: %s" % (
        env.get("python"), env.get("torch"), env.get("tvm"),
        "%s (Python API, %s)" % (rf.get("version"), rf.get("path")) if rf.get("available") else
        "unavailable: %s" % rf.get("reason")), flush=True)
    la = os.getloadavg()[0]
    if la > 0.5 * args.threads:
        print("peers: warning: load average %.2f on %d cores: other processes are running, times will be "
              "noisy (each case keeps its fastest round; see load_avg_1min in results.json)" % (la, args.threads),
              flush=True)
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "host": socket.gethostname(),
        "quick": args.quick,
        "machine": machine,
        "env": env,
        "config": {"rounds": args.rounds, "malloc_cache": None if args.no_malloc_cache else MALLOC_CACHE_ENV,
                   "budget_s": args.budget, "min_reps": args.min_reps, "max_reps": args.max_reps,
                   "threads": args.threads, "timeout_s": args.timeout, "tvm_max_gflop": args.tvm_max_gflop,
                   "seed": args.seed},
        "records": [],
        "impl_notes": dict(workloads.IMPL_NOTES),
    }
    return worker, env, results


def _write(results, out):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


def main(argv=None):
    args = _parse_args(argv)
    started = time.time()
    worker, env, results = _start(args)
    limits = model.limits_of(results["machine"])
    per_round = sum(len([i for i in c["impls"] if args.impl_filter is None or i in args.impl_filter])
                    for c in args.cases)
    final = {}        # (case id, impl) -> record; later rounds replace it when they measure faster
    order = []
    for rnd in range(1, args.rounds + 1):
        n = 0
        if args.rounds > 1:
            print("peers: round %d of %d" % (rnd, args.rounds), flush=True)
        for case in args.cases:
            impls = [i for i in case["impls"] if args.impl_filter is None or i in args.impl_filter]
            if rnd > 1:  # only what ran and is worth repeating (not single long calls, not statuses)
                impls = [i for i in impls if final.get((case["id"], i), {}).get("status") == "ok"
                         and (final[(case["id"], i)].get("reps") or 2) > 1]
            base = {"workload": case["workload"], "case": case["id"], "sizes": case["sizes"],
                    "dtype": case["dtype"], "variant": case["variant"]}
            for impl in impls:
                n += 1
                rec = dict(base, impl=impl, **_measure_one(worker, case, impl, args, env))
                rec["load_avg_1min"] = round(os.getloadavg()[0], 2)
                if rec.get("status") == "ok" and rec.get("time_ms"):
                    rec.update(model.derived(case, rec["time_ms"], limits))
                _keep(final, order, rec)
                if (rec["status"] == "unavailable" and impl.startswith("redfuse")
                        and rec.get("reason") == (env.get("redfuse") or {}).get("reason")):
                    continue  # said once at the start
                print("[%s%d/%d] %-52s %-20s %s" % ("%d:" % rnd if args.rounds > 1 else "", n, per_round,
                                                    case["id"], impl, _progress(rec)), flush=True)
            results["records"] = [final[k] for k in order]
            _write(results, args.out)
    worker.close()
    results["elapsed_s"] = round(time.time() - started, 1)
    results["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    _write(results, args.out)

    import report
    report.write_all(results, args.out)
    print("peers: wrote %s/{results.json,table.md,chart.png} in %.0f s" % (args.out, results["elapsed_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
