#!/usr/bin/env python3
"""Plants NaN, +inf and -inf into each float input of each example and runs it with --check.

For every spec of examples/ (or those whose file name contains one of the arguments), at sizes large
enough for several tiles and row blocks, random inputs are saved, then for each float input and each
of NaN, +inf, -inf a copy with that value at every (numel // 7)-th element is run on a target with
`redfuse run --check` under a timeout. One line per run: spec, input, value, wall time, the kernel's
own time, and `ok`, the check's verdict, or TIMEOUT (a hang: never acceptable). Known deviations
are listed in docs/design.md, "Known limits".

    python scripts/nonfinite_sweep.py [--target cpu] [--timeout 60] [--out DIR] [NAME | FILE.rf ...]

A FILE.rf argument (an existing path) is swept as it is, beside or instead of the examples.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Sizes by name: several tiles of the cascade axis, several row blocks, small enough for the reference.
SIZES = {"B": 1, "H": 2, "Hq": 4, "Hkv": 2, "M": 256, "N": 512, "D": 64, "Dk": 96, "Dv": 64, "W": 128,
         "R": 64, "C": 2048, "T": 64, "E": 256, "V": 2048, "K": 1024, "S": 8}


def run(cmd, timeout):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="keep the specs whose file name contains one of these")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--redfuse", default=os.path.join(REPO, "build", "redfuse"))
    ap.add_argument("--out", help="keep the inputs here (default: a temporary folder, removed)")
    a = ap.parse_args()
    files = [n for n in a.names if n.endswith(".rf") and os.path.isfile(n)]
    names = [n for n in a.names if n not in files]
    specs = sorted(os.path.join(REPO, "examples", f) for f in os.listdir(os.path.join(REPO, "examples")) if f.endswith(".rf"))
    if a.names:
        specs = [s for s in specs if any(n in os.path.basename(s) for n in names)]
    specs += [os.path.abspath(f) for f in files]
    root = a.out or tempfile.mkdtemp(prefix="nonfinite-")
    bad = 0
    try:
        for spec in specs:
            spec_name = os.path.basename(spec)
            names = [p.split("=")[0].strip() for p in re.search(r"^size (.*)$", open(spec).read(), re.M).group(1).split(",")]
            sizes = ",".join("%s=%d" % (n, SIZES.get(n, 8)) for n in names)
            base = os.path.join(root, spec_name[:-3])
            os.makedirs(base, exist_ok=True)
            r = run([a.redfuse, "run", spec, "--target", a.target, "--size", sizes, "--save", base], 300)
            if r is None or r.returncode != 0:
                print("%-28s baseline run failed" % spec_name[:-3], flush=True)
                bad += 1
                continue
            files = sorted(f for f in os.listdir(base) if f.endswith(".npy"))
            inputs = set(re.findall(r"^input\s+(\w+)", open(spec).read(), re.M))
            for f in files:
                if f[:-4] not in inputs:
                    continue
                original = np.load(os.path.join(base, f))
                if original.dtype.kind != "f":
                    continue
                for value in (np.nan, np.inf, -np.inf):
                    case = os.path.join(base, "case")
                    shutil.rmtree(case, ignore_errors=True)
                    os.makedirs(case)
                    for g in files:
                        shutil.copy(os.path.join(base, g), case)
                    x = original.copy()
                    x.reshape(-1)[:: max(1, x.size // 7)] = value
                    np.save(os.path.join(case, f), x)
                    t0 = time.time()
                    r = run([a.redfuse, "run", spec, "--target", a.target, "--size", sizes, "--load", case, "--check"], a.timeout)
                    if r is None:
                        verdict, kernel_ms = "TIMEOUT", "?"
                    else:
                        lines = (r.stdout + r.stderr).strip().splitlines()
                        verdict = "ok" if r.returncode == 0 else "rc=%d %s" % (r.returncode, lines[-1][:100] if lines else "")
                        m = re.search(r"in ([0-9.e+-]+) ms", r.stdout)
                        kernel_ms = m.group(1) if m else "?"
                    bad += verdict != "ok"
                    print("%-28s %-8s %5s %7.2f s  kernel %s ms  %s" % (spec_name[:-3], f[:-4], value, time.time() - t0, kernel_ms, verdict), flush=True)
    finally:
        if not a.out:
            shutil.rmtree(root, ignore_errors=True)
    print("%d run(s) not ok" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
