#!/usr/bin/env python3
"""Random chains of dependent reductions, run on every backend against the float64 reference.

Each spec combines a few row reductions (max/min/sum, arg-selections, top-k, norms, shifted and
scaled sums) that read earlier ones, an optional element-wise output, random sizes (1 included) and
dtypes. Every spec runs with `--check` on the CPU and on OpenCL (PoCL) at the block, warp and thread
fusion levels, and with a forced short tile, segments and row block. Any failure is printed with
the spec and the command; the exit status is the number of failing specs (0: all pass).

    .venv/bin/python scripts/fuzz_specs.py --count 40 --seed 1 [--redfuse build/redfuse] [--keep DIR]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

ROW_DEFS = [
    # (text, names it defines, names it needs)
    ("m[r] = max(c: X[r,c])", ["m"], []),
    ("m[r] = min(c: X[r,c] * W[c])", ["m"], []),
    ("s[r] = sum(c: exp(X[r,c] - m[r]))", ["s"], ["m"]),
    ("s[r] = sum(c: exp(m[r] - X[r,c]))", ["s"], ["m"]),
    ("mu[r] = sum(c: X[r,c]) / C", ["mu"], []),
    ("v[r] = sum(c: (X[r,c] - mu[r]) * (X[r,c] - mu[r])) / C", ["v"], ["mu"]),
    ("a[r] = max(c: abs(X[r,c]))", ["a"], []),
    ("q[r] = sum(c: X[r,c] * W[c] / (a[r] + 1))", ["q"], ["a"]),
    ("n[r] = sum(c: X[r,c] * X[r,c])", ["n"], []),
    ("y[r] = max(c: X[r,c] * rsqrt(n[r] + 1))", ["y"], ["n"]),
    ("t[r] = sum(c: tanh(X[r,c] - mu[r]) * W[c])", ["t"], ["mu"]),
    ("i[r] = argmax(c: X[r,c] * W[c])", ["i"], []),
    ("j[r] = argmin(c: exp(X[r,c] - m[r]) / s[r])", ["j"], ["m", "s"]),
    ("p[r] = max(c: exp(X[r,c] - m[r]) / s[r])", ["p"], ["m", "s"]),
    # exponential-polynomial: e^{-m} times a polynomial in m (entropy) or in (m, mu) (weighted moments)
    ("e[r] = sum(c: (X[r,c] - m[r]) * exp(X[r,c] - m[r]))", ["e"], ["m"]),
    ("w[r] = sum(c: exp(X[r,c] - m[r]) * (X[r,c] - mu[r]) * (X[r,c] - mu[r] + W[c]))", ["w"], ["m", "mu"]),
]
ELEMENTWISE = [
    ("Y[r,c] = exp(X[r,c] - m[r]) / s[r]", ["m", "s"]),
    ("Y[r,c] = (X[r,c] - mu[r]) * rsqrt(v[r] + 1e-5) * W[c]", ["mu", "v"]),
    ("Y[r,c] = X[r,c] * W[c] / (a[r] + 1)", ["a"]),
]
TOPK = ("K[r,k], I[r,k] = topk(c, 3: exp(X[r,c] - m[r]) / s[r])", ["m", "s"])


def closure(chosen):
    """The chosen definitions plus everything they need, in an order that defines before use."""
    by_name = {}
    for text, names, needs in ROW_DEFS:
        for n in names:
            by_name.setdefault(n, []).append((text, names, needs))
    out, defined = [], set()

    def add(d):
        for need in d[2]:
            if need not in defined:
                add(by_name[need][0])
        if d[1][0] not in defined:
            out.append(d)
            defined.update(d[1])

    for d in chosen:
        if d[1][0] not in defined:
            add(d)
    return out, defined


def make_spec(rng):
    chosen = rng.sample(ROW_DEFS, rng.randint(1, 4))
    defs, defined = closure(chosen)
    C = rng.choice([1, 2, 7, 37, 64, 300, 1025])
    lines = [f"size R = {rng.choice([1, 2, 3, 5, 17, 40])}, C = {C}",
             f"input X[R, C] : {rng.choice(['f32', 'f32', 'bf16'])}",
             "input W[C] : f32"]
    lines += [d[0] for d in defs]
    outputs = [d[1][0] for d in defs if d[1][0] in {c[1][0] for c in chosen}]
    extra = [e for e in ELEMENTWISE if all(n in defined for n in e[1])]
    if extra and rng.random() < 0.5:
        e = rng.choice(extra)
        lines.append(e[0])
        outputs.append("Y")
    if all(n in defined for n in TOPK[1]) and C >= 3 and rng.random() < 0.3:  # k = 3 needs 3 columns
        lines.append(TOPK[0])
        outputs += ["K", "I"]
    lines.append("output " + ", ".join(outputs))
    return "\n".join(lines) + "\n"


CONFIGS = [
    ["--target", "cpu"],
    ["--target", "opencl"],
    ["--target", "opencl", "--fusion-level", "warp"],
    ["--target", "opencl", "--fusion-level", "thread", "--segments", "3"],
    ["--target", "opencl", "--tile", "3", "--segments", "2", "--row-block", "3"],
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--redfuse", default="build/redfuse")
    ap.add_argument("--keep", help="write every spec into this directory")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    tmp = a.keep or tempfile.mkdtemp(prefix="redfuse-fuzz-")
    os.makedirs(tmp, exist_ok=True)
    failing = 0
    for n in range(a.count):
        spec = make_spec(rng)
        path = os.path.join(tmp, f"fuzz{a.seed}_{n}.rf")
        with open(path, "w") as f:
            f.write(spec)
        bad = []
        for cfg in CONFIGS:
            cmd = [a.redfuse, "run", path, "--check", "--seed", str(n)] + cfg
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                bad.append((" ".join(cmd), (r.stdout + r.stderr).strip().splitlines()[-3:]))
        print(f"{'ok  ' if not bad else 'FAIL'} {path}", flush=True)
        if bad:
            failing += 1
            print("  " + spec.replace("\n", "\n  "))
            for cmd, tail in bad:
                print("  $ " + cmd)
                for line in tail:
                    print("    " + line)
    print(f"{a.count - failing}/{a.count} specs pass on every backend and schedule")
    return min(failing, 125)


if __name__ == "__main__":
    sys.exit(main())
