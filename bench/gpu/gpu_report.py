"""The report of the GPU benchmark: the table rows with ratios to each peer, and table.md /
gpu_results.json written from the phases' JSON (the `report` phase of gpu_bench.py)."""
import datetime
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu_cases  # noqa: E402
from gpu_util import SCHEMA, T0, fmt_num, fmt_pct, fmt_ratio, log, read_json, write_json  # noqa: E402,F401

REPO = gpu_cases.REPO


# ======================================================================= phase: report
def table_rows(bench):
    """The bench table as rows of strings: case, impl, time, TFLOP/s, GB/s, % of peak, check, ratio."""
    by_case = {}
    for r in bench.get("records", []):
        by_case.setdefault(r["case"], {})[r["impl"]] = r
    order = {n: i for i, n in enumerate(gpu_cases.IMPL_ORDER)}
    rows = []
    worder = {w: i for i, w in enumerate(gpu_cases.WORKLOAD_ORDER)}
    cases = sorted(enumerate(bench.get("cases", [])), key=lambda ic: (worder.get(ic[1]["workload"], 99), ic[0]))
    for _, c in cases:
        recs = by_case.get(c["id"], {})
        rf = recs.get("redfuse")
        t_rf = rf["time_ms"] if rf and rf.get("status") == "ok" else None
        peers = {i: r for i, r in recs.items() if i not in gpu_cases.REDFUSE_IMPLS and r.get("status") == "ok"}
        best = min(peers.items(), key=lambda kv: kv[1]["time_ms"]) if peers else None
        first = True
        for impl in sorted(recs, key=lambda i: order.get(i, 99)):
            r = recs[impl]
            row = {"case": c["id"] if first else "", "floor": fmt_num(c.get("floor_ms")) if first else "",
                   "impl": impl}
            first = False
            if r.get("status") == "ok":
                pct = r.get("roofline")
                row.update(time=fmt_num(r["time_ms"]), tflops=fmt_num(r.get("tflops")), gbps=fmt_num(r.get("gbps")),
                           peak=("%s %s" % (fmt_pct(pct), {"memory": "mem", "compute": "cmp"}.get(r.get("bound"), "")))
                           .strip() if pct is not None else "—",
                           check=r.get("check") or ("—" if impl.startswith("redfuse") else ""))
                if impl == "redfuse":
                    row["ratio"] = ("best peer %s: %s" % (best[0], fmt_ratio(best[1]["time_ms"] / t_rf))) \
                        if best else "—"
                elif t_rf:
                    row["ratio"] = fmt_ratio(r["time_ms"] / t_rf)
                else:
                    row["ratio"] = "—"
            else:
                why = (r.get("reason") or "")
                row.update(time="%s: %s" % (r.get("status"), why[:70] + ("…" if len(why) > 70 else "")),
                           tflops="", gbps="", peak="", check="", ratio="")
            rows.append(row)
    return rows


COLUMNS = [("case", "case"), ("floor", "floor ms"), ("impl", "impl"), ("time", "time ms"),
           ("tflops", "TFLOP/s"), ("gbps", "GB/s"), ("peak", "% of peak"), ("check", "check vs f32 ref"),
           ("ratio", "this / redfuse")]


def render_table(rows):
    out = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(k, "")).replace("|", "/") for k, _ in COLUMNS) + " |")
    return "\n".join(out)


def render_machine(limits, smi, build):
    lines = []
    if limits:
        lines.append("- device: %s (%s); torch %s%s" % (
            limits.get("name", "?"), limits.get("device", "?"), limits.get("torch", "?"),
            ", CUDA %s, cuDNN %s, %s SMs, L2 %s MB, %s GiB" % (limits.get("cuda"), limits.get("cudnn"),
                                                          limits.get("sms"), limits.get("l2_mb"),
                                                          limits.get("total_mem_gib"))
            if limits.get("sms") else ""))
        lines.append("- measured: copy %s GB/s (%s MiB device-to-device, read + write, median), bf16 matmul "
                     "%s TFLOP/s (%d^3), fp8 _scaled_mm %s" % (
                         fmt_num(limits.get("copy_gbps"), 4), (limits.get("copy_bytes") or 0) >> 20,
                         fmt_num(limits.get("bf16_tflops"), 4), limits.get("matmul_n") or 0,
                         "%s TFLOP/s" % fmt_num(limits["fp8_tflops"], 4) if limits.get("fp8_tflops")
                         else "not measured: %s" % limits.get("fp8_error")))
        if limits.get("error"):
            lines.append("- limits failed: %s" % limits["error"])
    for k, v in (smi or {}).items():
        if isinstance(v, dict) and "error" not in v:
            lines.append("- nvidia-smi %s: SM %s/%s MHz, mem %s/%s MHz, %s W of %s W, %s C, %s" % (
                k, v.get("clocks.sm"), v.get("clocks.max.sm"), v.get("clocks.mem"), v.get("clocks.max.mem"),
                v.get("power.draw"), v.get("power.limit"), v.get("temperature.gpu"), v.get("pstate")))
        elif isinstance(v, dict):
            lines.append("- nvidia-smi %s: %s" % (k, v["error"]))
    if build:
        lines.append("- redfuse build: %s (%s s)%s" % (build.get("status"), build.get("seconds"),
                                                       ": " + build["reason"] if build.get("reason") else ""))
    return "\n".join(lines)


def render_checks(check):
    if not check:
        return "(check phase did not run)"
    runs = check.get("runs", [])
    whys = {(r["status"], r.get("reason")) for r in runs}
    if runs and len(whys) == 1 and runs[0]["status"] != "ok":
        return "all %d runs (`redfuse run --target %s --check`): %s: %s" % (
            len(runs), check.get("target"), runs[0]["status"], runs[0].get("reason"))
    sets = []
    for r in runs:
        if r["set"] not in sets:
            sets.append(r["set"])
    by = {}
    for r in runs:
        by.setdefault(r["example"], {})[r["set"]] = r
    out = ["%d of %d runs ok (`redfuse run --target %s --check`)" % (check.get("ok", 0), check.get("total", 0),
                                                                   check.get("target")), "",
           "| example | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for ex, d in by.items():
        cells = []
        for s in sets:
            r = d.get(s)
            if not r:
                cells.append("")
            elif r["status"] == "ok":
                worst = max(((o.get("max_rel_err") or 0) / (o.get("tolerance") or 1)
                             for o in (r.get("outputs") or {}).values()), default=0)
                cells.append("ok (%.2g of tol)" % worst)
            else:
                why = r.get("reason") or ""
                sizes = ",".join("%s=%s" % kv for kv in (r.get("sizes") or {}).items())
                cells.append("**%s** (%s): %s" % (r["status"], sizes or "defaults", why[:80]))
        out.append("| %s | %s |" % (ex, " | ".join(c.replace("|", "/") for c in cells)))
    return "\n".join(out)


def render_compare(comp):
    if not comp:
        return "(compare phase did not run)"
    if comp.get("error"):
        return "did not run: %s" % comp["error"]
    out = ["%d of %d agree with torch (float64 on redfuse's saved inputs; rel L2 <= 1e-2 for bf16 outputs, "
           "1e-4 for f32; indices by the probabilities they pick)" % (comp.get("ok", 0), comp.get("total", 0)),
           "", "| example | sizes | status | errors |", "|---|---|---|---|"]
    for r in comp.get("runs", []):
        errs = ", ".join("%s %s" % (o["output"], "%.1e" % o["error"] if o.get("error") is not None else o["metric"])
                         for o in r.get("outputs", []))
        sizes = ",".join("%s=%s" % kv for kv in (r.get("sizes") or {}).items())
        out.append("| %s | %s | %s | %s |" % (r["example"], sizes, r["status"],
                                              (r.get("reason") or errs).replace("|", "/")))
    return "\n".join(out)


def phase_report(args):
    w = args.work
    build = read_json(os.path.join(w, "build.json"), {})
    check = read_json(os.path.join(w, "check.json"))
    comp = read_json(os.path.join(w, "compare.json"))
    bench = read_json(os.path.join(w, "bench.json"), {})
    phases = read_json(os.path.join(w, "phases.json"), {})
    rows = table_rows(bench)
    skipped = bench.get("skipped_cases", [])
    notes = bench.get("impl_notes") or gpu_cases.IMPL_NOTES
    used = {r["impl"] for r in rows}
    md = ["# redfuse on the GPU: validation and benchmark (%s, target %s%s)" % (
        datetime.datetime.fromtimestamp(T0).strftime("%Y-%m-%d %H:%M"), bench.get("target") or args.target,
        ", quick" if bench.get("quick") else ""), "",
        "## Machine", render_machine(bench.get("limits"), bench.get("smi"), build), "",
        "## Correctness: every example at three size sets", render_checks(check), "",
        "## Correctness: redfuse's saved outputs against torch", render_compare(comp), "",
        "## Benchmark", "Median of per-call times (%s); " % (
            "CUDA events, L2 flushed before each call" if (bench.get("target") or args.target) == "cuda"
            else "time.perf_counter on the CPU: a check of the code paths, not a measurement") +
        "'% of peak' = floor / time, the floor being max(bytes / copy bandwidth, FLOPs / matrix rate) "
        "(mem / cmp: which term); 'this / redfuse' > 1 means redfuse is faster.", "",
        render_table(rows) if not bench.get("error") else "did not run: %s" % bench["error"], ""]
    if bench.get("redfuse") and not bench["redfuse"].get("available"):
        md.append("redfuse: unavailable: %s" % bench["redfuse"].get("reason"))
    if skipped:
        md.append("Skipped cases: " + "; ".join("%s (%s)" % (s["id"], s["reason"]) for s in skipped))
    if bench.get("interrupted"):
        md.append("The bench phase was interrupted at its time limit; later cases are missing.")
    md.append("")
    md.append("Implementations: " + "; ".join("**%s** %s" % (i, notes[i]) for i in gpu_cases.IMPL_ORDER
                                               if i in used and i in notes))
    if phases:
        md.append("")
        md.append("Phase times (s): " + ", ".join("%s %s" % kv for kv in phases.items()))
    text = "\n".join(md) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    result = {
        "schema": SCHEMA, "target": bench.get("target") or args.target, "quick": bench.get("quick"),
        "started": datetime.datetime.fromtimestamp(T0).isoformat(timespec="seconds"),
        "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": socket.gethostname(), "git": git_info(), "phases_s": phases, "build": build,
        "machine": {"limits": bench.get("limits"), "nvidia_smi": bench.get("smi")},
        "redfuse": bench.get("redfuse"), "checks": check, "compare": comp,
        "bench": {"cases": bench.get("cases", []), "records": bench.get("records", []),
                  "skipped_cases": skipped, "interrupted": bench.get("interrupted", False),
                  "impl_notes": notes},
    }
    write_json(os.path.join(args.out, "gpu_results.json"), result)
    print(text, flush=True)
    return 0


def git_info():
    try:
        c = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        s = subprocess.run(["git", "-C", REPO, "status", "--porcelain"], capture_output=True, text=True,
                           timeout=10)
        return {"commit": c.stdout.strip(), "changed_files": len(s.stdout.splitlines())}
    except (OSError, subprocess.SubprocessError):
        return {}


# ======================================================================================= main
