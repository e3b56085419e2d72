"""Small helpers shared by the GPU benchmark's phases (gpu_bench.py) and its report (gpu_report.py):
the run clock, logging, number formats, JSON files written atomically."""
import datetime
import json
import os
import time

T0 = float(os.environ.get("GPU_BENCH_T0") or time.time())
SCHEMA = "redfuse-gpu-bench/1"


def log(msg):
    t = time.time()
    stamp = datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S")
    print("[%7.1fs %s] %s" % (t - T0, stamp, msg), flush=True)


def fmt_num(x, digits=3):
    if x is None:
        return "—"
    if x == 0:
        return "0"
    return "%.*g" % (digits, x)


def fmt_ratio(x):
    return "%.2fx" % x if 0.01 <= x < 100 else "%.2gx" % x


def fmt_pct(x):
    return "—" if x is None else "%.0f%%" % (100 * x)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default
