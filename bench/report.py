"""The Markdown table and the PNG chart of a results.json (bench/peers.py writes both at the end).

    $VENV/bin/python bench/report.py RESULTS_DIR      # rewrites table.md and chart.png from results.json
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model  # noqa: E402
import workloads  # noqa: E402

# A check flagged in the table when the output differs from the float32 eager math by more than this
# (relative to the largest |reference|), or when fewer top-k indices match.
TOL = {"f32": 1e-3, "bf16": 6e-2}
INDEX_MATCH_MIN = 0.99
# A cell is marked '~' (noisy) when its median exceeds this multiple of its fastest call.
NOISY = 2.0

SHORT_STATUS = {"unavailable": "n/a", "not expressed": "n/e", "failed": "fail", "timeout": "timeout",
                "skipped": "skip"}


def _impl_order(records):
    seen = []
    for r in records:
        if r["impl"] not in seen:
            seen.append(r["impl"])
    order = workloads.IMPL_ORDER + workloads.STUDY_IMPLS
    return sorted(seen, key=lambda i: (order.index(i) if i in order else len(order), i))


def _label(rec):
    s = ",".join("%s=%s" % kv for kv in rec["sizes"].items())
    return "%s %s%s" % (s, rec["dtype"], " " + rec["variant"] if rec["variant"] else "")


def _ms(t):
    if t >= 100:
        return "%.0f" % t
    if t >= 10:
        return "%.1f" % t
    if t >= 1:
        return "%.2f" % t
    return "%.3g" % t


def _mib(b):
    return "%.0f MiB" % (b / 2**20) if b >= 2**20 else "%.0f KiB" % (b / 1024)


def _check_bad(rec):
    c = rec.get("check") or {}
    if "error" in c:
        return True
    tol = TOL.get(rec["dtype"], 1e-3)
    if rec["workload"] == "quant_gemm_int8":
        tol = max(tol, 6e-2)  # bf16 output, and dynquant quantizes activations per tensor
    if c.get("max_rel_err") is not None and c["max_rel_err"] > tol:
        return True
    return c.get("index_match") is not None and c["index_match"] < INDEX_MATCH_MIN


UNIT_LABELS = {"amx": "AMX tiles", "avx512_bf16": "AVX512_BF16 dot", "avx512_vnni": "AVX512_VNNI dot",
               "fp32_fma": "FP32 FMA"}


def floor_units_line(lim):
    """Which unit's peak each peak kind of the floor uses (model.peak_and_unit: the fastest one)."""
    parts = []
    for kind, per in (("fp32", "GFLOP/s"), ("bf16", "GFLOP/s"), ("int8", "GOP/s")):
        pk, unit = model.peak_and_unit(lim, kind)
        if pk > 0:
            parts.append("%s %s %s (%s)" % (kind, pk, per, UNIT_LABELS.get(unit, unit)))
    return "- **Compute peaks the floors use** (the fastest unit for each kind): %s." % (
        "; ".join(parts) if parts else "none measured")


def machine_lines(res):
    m = res.get("machine") or {}
    env = res.get("env") or {}
    out = []
    if m:
        bw = m.get("bandwidth_GBps", {})
        lim = model.limits_of(m)
        fma = m.get("fp32_fma_GFLOPs", {})
        out.append("- Machine: %s, %s threads (%s); L3 %s." % (
            m.get("cpu"), m.get("threads"), ", ".join(k for k, v in (m.get("isa") or {}).items() if v),
            _mib(m.get("caches_bytes", {}).get("l3", 0))))
        allc = bw.get("all_cores", {})
        one = bw.get("one_core", {})
        out.append("- Memory bandwidth (STREAM-like, %s arrays, GB/s, all cores / one core): copy %s / %s, "
                   "scale %s / %s, add %s / %s, triad %s / %s, read %s / %s%s. **Limits used: %s GB/s, reads alone %s GB/s.**" % (
                       _mib(bw.get("array_bytes", 0)), allc.get("copy"), one.get("copy"), allc.get("scale"),
                       one.get("scale"), allc.get("add"), one.get("add"), allc.get("triad"), one.get("triad"),
                       allc.get("read"), one.get("read"),
                       ", copy with non-temporal stores %s / %s" % (allc["copy_nt"], one.get("copy_nt"))
                       if "copy_nt" in allc else "", lim.get("mem_GBps"), lim.get("mem_read_GBps")))
        runs = m.get("bandwidth_GBps_runs") or []
        if len(runs) == 2:
            first, second = ((r or {}).get("all_cores") or {} for r in runs)
            out[-1] += (" Each figure is the larger of two measurements, before and after the workloads "
                        "(all cores, largest figure: %s then %s GB/s)." % (max(first.values() or [None]),
                                                                         max(second.values() or [None])))
        s = "- Peak FP32 FMA (%s): %s GFLOP/s all cores, %s one core" % (fma.get("isa"), fma.get("all_cores"),
                                                                        fma.get("one_core"))
        if fma.get("avx2_all_cores") is not None:
            s += " (AVX2: %s / %s)" % (fma.get("avx2_all_cores"), fma.get("avx2_one_core"))
        if m.get("bf16_dot_GFLOPs"):
            s += "; bf16 dot (AVX512_BF16) %s / %s GFLOP/s" % (m["bf16_dot_GFLOPs"]["all_cores"],
                                                               m["bf16_dot_GFLOPs"]["one_core"])
        if m.get("int8_dot_GOPs"):
            s += "; int8 dot (AVX512_VNNI) %s / %s GOP/s" % (m["int8_dot_GOPs"]["all_cores"],
                                                             m["int8_dot_GOPs"]["one_core"])
        for key, what, per in (("int8_avx2_GOPs", "int8 without VNNI (AVX2 vpmaddubsw)", "GOP/s"),
                               ("bf16_amx_GFLOPs", "bf16 AMX tiles (tdpbf16ps)", "GFLOP/s"),
                               ("int8_amx_GOPs", "int8 AMX tiles (tdpbssd)", "GOP/s"),
                               ("fp16_fma_GFLOPs", "fp16 FMA (AVX512_FP16)", "GFLOP/s")):
            if m.get(key):
                s += "; %s %s / %s %s" % (what, m[key]["all_cores"], m[key]["one_core"], per)
        if m.get("amx_permission") not in (None, "granted", "no AMX on this CPU"):
            s += "; AMX not measured: %s" % m["amx_permission"]
        out.append(s + ".")
        out.append(floor_units_line(lim))
    else:
        out.append("- Machine limits: not measured (no --machine): fractions are omitted.")
    sw = "- Software: Python %s, torch %s, numpy %s, matplotlib %s, TVM %s." % (
        env.get("python"), env.get("torch"), env.get("numpy"), env.get("matplotlib"), env.get("tvm"))
    if env.get("tvm_llvm"):
        sw += " TVM target: %s." % env["tvm_llvm"]
    out.append(sw)
    rf = env.get("redfuse") or {}
    if not rf.get("available"):
        out.append("- redfuse: unavailable: %s." % rf.get("reason"))
    elif rf.get("exe"):  # results.json of runs through `redfuse bench` (before the Python API)
        out.append("- redfuse: `%s bench` available." % rf["exe"])
    else:
        ext = rf.get("extension") or {}
        out.append("- redfuse: %s through its Python API (`%s`%s), in the peers' process on their inputs%s." % (
            rf.get("version"), rf.get("path"), ", extension built %s, sha256 %s" % (ext.get("mtime"), ext.get("sha256"))
            if ext else "", "; compile keywords: %s" % ", ".join(rf["keywords"])
            if rf.get("keywords") else "; no unfused/strategy/threads keywords in this build"))
    la, lb = res.get("load_avg_start"), res.get("load_avg_end")
    if la:
        out.append("- Load average (1/5/15 min) at start %s, at end %s: other processes share this machine; "
                   "when the load nears the thread count, times are noisy (see load_avg_1min per record)." % (
                       "/".join(map(str, la)), "/".join(map(str, lb or []))))
    c = res.get("config") or {}
    out.append("- Timing: median of at least %s calls and %s s per measurement (first call and one warm-up "
               "excluded), %s threads; seed %s; %s." % (
                   c.get("min_reps"), c.get("budget_s"), c.get("threads"), c.get("seed"),
                   "peers' buffers recycled by malloc (MALLOC_MMAP_MAX_=0: no page faults per call)"
                   if c.get("malloc_cache") else "glibc malloc defaults (large outputs page-faulted on every call)"))
    return out


def table_md(res):
    recs = res["records"]
    cpu = (res.get("machine") or {}).get("cpu")
    lines = ["# redfuse CPU benchmarks: %s, %s%s%s" % (res.get("date", "")[:10], res.get("host", ""),
                                                        " (%s)" % cpu if cpu else "",
                                                        " (--quick: small sizes)" if res.get("quick") else ""), ""]
    lines += machine_lines(res)
    lines += ["",
              "Each cell: median time in ms, and in parentheses the fraction of the floor "
              "(floor = max(bytes / memory bandwidth, bytes read / read bandwidth, FLOP / peak), bench/model.py; "
              "100% = at the machine's "
              "measured limit; a case that fits in L3 can pass 100% after warm-up, the inputs staying cached). **Bold**: fastest measured. `n/a` unavailable, `n/e` not expressed, `skip`, "
              "`fail`, `timeout`: see the numbered notes. `(!)`: output differs from the float32 reference "
              "beyond tolerance (see results.json check).", ""]
    notes = {}        # "status: reason" -> number
    note_impls = {}   # "status: reason" -> implementations it applies to

    def note(impl, text):
        if text not in notes:
            notes[text] = len(notes) + 1
            note_impls[text] = []
        if impl not in note_impls[text]:
            note_impls[text].append(impl)
        return notes[text]

    l3 = ((res.get("machine") or {}).get("caches_bytes") or {}).get("l3", 0)
    by_w = {}
    for r in recs:
        by_w.setdefault(r["workload"], []).append(r)
    for w, rs in by_w.items():
        impls = _impl_order(rs)
        lines.append("## %s" % workloads.WORKLOAD_TITLES.get(w, w))
        lines.append("")
        head = "| case | floor |" + "".join(" %s |" % i for i in impls)
        lines.append(head)
        lines.append("|---|---|" + "---|" * len(impls))
        cases = []
        for r in rs:
            if r["case"] not in cases:
                cases.append(r["case"])
        for cid in cases:
            row = {r["impl"]: r for r in rs if r["case"] == cid}
            any_r = next(iter(row.values()))
            oks = [r for r in row.values() if r.get("status") == "ok" and r.get("time_ms")]
            best = min(oks, key=lambda r: r["time_ms"])["impl"] if oks else None
            fl = next((r for r in oks if "floor_ms" in r), None)
            floor = "%s ms (%s)" % (_ms(fl["floor_ms"]), fl.get("bound", "")) if fl else ""
            if fl and l3 and fl.get("bytes", 0) <= l3:
                floor += ", fits in L3"
            cells = []
            for i in impls:
                r = row.get(i)
                if r is None:
                    cells.append("")
                    continue
                if r.get("status") == "ok" and r.get("time_ms"):
                    c = _ms(r["time_ms"])
                    if "roofline" in r:
                        c += " (%.0f%%)" % (100 * r["roofline"])
                    if i == best:
                        c = "**%s**" % c
                    if "peak_extra_bytes" in r:
                        c += ", +%s" % _mib(r["peak_extra_bytes"])
                    elif "peak_bytes" in r:
                        c += ", %s" % _mib(r["peak_bytes"])
                    if _check_bad(r):
                        c += " (!)"
                    if r.get("reps") == 1:
                        c += " [1 run]"
                    elif r.get("min_ms") and r["time_ms"] > NOISY * r["min_ms"]:
                        c += " ~"
                    cells.append(c)
                else:
                    st = r.get("status", "?")
                    k = note(i, "%s: %s" % (st, r.get("reason", "")))
                    cells.append("%s<sup>%d</sup>" % (SHORT_STATUS.get(st, st), k))
            lines.append("| %s | %s |%s" % (_label(any_r), floor, "".join(" %s |" % c for c in cells)))
        if w == "linear_cross_entropy":
            lines.append("")
            lines.append("Peak memory: `+X MiB` is the peak RSS above the RSS before the call (inputs "
                         "excluded); the logits alone are T x V x 4 bytes.")
        lines.append("")
    if notes:
        lines.append("## Notes")
        lines.append("")
        for text, k in notes.items():
            lines.append("%d. %s — %s" % (k, ", ".join("`%s`" % i for i in note_impls[text]),
                                          text.replace("|", "\\|")))
        lines.append("")
    lines.append("## Implementations")
    lines.append("")
    present = {r["impl"] for r in recs}
    if any(i.startswith("redfuse[") for i in present):
        present.add("redfuse[S]")
    for i, t in (res.get("impl_notes") or {}).items():
        if i in present:
            lines.append("- `%s`: %s" % (i, t))
    lines.append("")
    return "\n".join(lines)


def chart(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in res["records"]]
    by_w = {}
    for r in recs:
        by_w.setdefault(r["workload"], []).append(r)
    have_floor = any("roofline" in r for r in recs)
    ws = list(by_w)
    ncol = 2
    nrow = (len(ws) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(22, 4.2 * nrow), squeeze=False)
    all_impls = _impl_order(recs)
    cmap = plt.get_cmap("tab10")
    color = {i: cmap(k % 10) for k, i in enumerate(all_impls)}
    for ax, w in zip(axes.flat, ws):
        rs = by_w[w]
        impls = _impl_order(rs)
        cases = []
        for r in rs:
            if r["case"] not in cases:
                cases.append(r["case"])
        width = min(0.8 / max(1, len(impls)), 0.12 if len(cases) == 1 else 1.0)
        for k, i in enumerate(impls):
            xs, ys = [], []
            for x, cid in enumerate(cases):
                r = next((r for r in rs if r["case"] == cid and r["impl"] == i), None)
                if not r or r.get("status") != "ok" or not r.get("time_ms"):
                    continue
                if have_floor:
                    y = r.get("roofline")
                else:
                    ref = next((q for q in rs if q["case"] == cid and q["impl"] == "torch-eager"
                                and q.get("status") == "ok"), None)
                    y = ref["time_ms"] / r["time_ms"] if ref else None
                if y is None:
                    continue
                xs.append(x - width * len(impls) / 2 + width * (k + 0.5))
                ys.append(y)
            if xs:
                ax.bar(xs, ys, width, label=i, color=color[i])
        labels = []
        for cid in cases:
            r = next(r for r in rs if r["case"] == cid)
            labels.append(_label(r).replace(",", "\n", 1) if len(cases) <= 8 else _label(r))
        ax.set_xlim(-0.6, len(cases) - 0.4)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(labels, rotation=30 if len(cases) > 8 else 0, ha="right" if len(cases) > 8 else "center",
                           fontsize=7)
        ax.set_title(workloads.WORKLOAD_TITLES.get(w, w), fontsize=10)
        ax.set_ylabel("fraction of floor (log; higher is better)" if have_floor else "speed-up vs torch-eager",
                      fontsize=8)
        ax.set_yscale("log")
        if have_floor:
            vals = [r["roofline"] for r in rs if r.get("roofline")]
            ax.set_ylim(min([1e-3] + [v / 2 for v in vals]), max([1.5] + [v * 1.5 for v in vals]))
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.legend(fontsize=7, ncol=4, loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(ws):]:
        ax.axis("off")
    m = res.get("machine") or {}
    lim = m.get("limits") or {}
    bf16, bf16_unit = model.peak_and_unit(lim, "bf16")
    title = "redfuse CPU benchmarks, %s, %s (%s, %s threads; %s GB/s, %s GFLOP/s fp32, %s GFLOP/s bf16 %s)" % (
        res.get("date", "")[:10], res.get("host", ""), m.get("cpu", "?"), m.get("threads", "?"),
        lim.get("mem_GBps", "?"), lim.get("fp32_GFLOPs", "?"), bf16, UNIT_LABELS.get(bf16_unit, bf16_unit))
    fig.suptitle(title + "%s — missing bars: see table.md" % (" — QUICK sizes" if res.get("quick") else ""),
                 fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_all(res, outdir):
    with open(os.path.join(outdir, "table.md"), "w") as f:
        f.write(table_md(res))
    try:
        chart(res, os.path.join(outdir, "chart.png"))
    except Exception as e:  # noqa: BLE001  (a missing matplotlib must not lose the table)
        print("report: no chart: %s: %s" % (type(e).__name__, e), file=sys.stderr)


if __name__ == "__main__":
    d = sys.argv[1]
    with open(os.path.join(d, "results.json")) as f:
        write_all(json.load(f), d)
    print("wrote %s/table.md and chart.png" % d)
