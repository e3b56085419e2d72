#!/usr/bin/env python3
"""Random chains of dependent reductions, driven through every command and backend of redfuse.

Each spec is a random chain built from blocks that read one another: softmax (max, sum of exp),
the exponential-polynomial form (entropies, sums of (x-m)^k*exp(x-m), softmax-weighted mean and
variance), Welford-style moments, absmax quantization through int8/fp8 casts, RMSNorm and GEMMs
(a prologue QK^T, an epilogue over another axis), argmax/argmin, top-k and the reductions that read
its values over its own k axis (a softmax over the top-k logits, experts renormalised over the
chosen k, a threshold from the k-th value), reductions over several axes at once, column
reductions, scalars (0-dim inputs, pure scalar definitions, whole-tensor totals), casts (bf16, f16,
f8e4m3, f8e5m2, i8, i32) and masks written with select (including fully masked rows). The row value
itself is drawn from a family of sources (scaled, biased, per-row temperature, soft-capped, cast,
masked, a GEMM). Sizes are random (1 included), sometimes without defaults.

Every spec runs through (each family can be chosen with --commands):
  analyze  `analyze` (text, --json), `analyze --emit STAGE` for a random stage and target
  interp   `run --target interp --check` (and sometimes interp-f32, --approx, --scale)
  cpu      `run --target cpu --check`, sometimes with a forced tile/segments/row block or --unfused
  opencl   `run --target opencl --check` at a random fusion level / forced schedule (PoCL)
  emit     `emit --target cpu|opencl|cuda`, each with and without --size
  grad     `grad --check` (the derived backward against central finite differences of the float64
           reference) at the spec's sizes capped at 4, sometimes with --wrt one input or
           --straight-through (not in the default set: each check runs the reference ~20 times per
           gradient; `--commands grad` or `analyze,...,grad`)

Every command runs with REDFUSE_VERIFY=1: the tile IR is verified after the lowering and after each
pass (a pass that breaks it is caught there, even where the C++ compiler would accept the result).

An outcome is a bug when redfuse exits with 3 (internal error), dies of a signal, runs past
--timeout, or fails --check (a wrong answer); exit 1 or 2 with a message naming the problem (a
refused spec, a size without a value) is accepted. Each bug is printed with the spec and the
command, the spec is copied into the --keep directory (default: a temporary directory) and every
command's outcome goes to --log as one JSON line. A summary per command/target and per outcome is
printed at the end. The exit status is the number of specs with a bug (at most 125).

    .venv/bin/python scripts/fuzz_specs.py --count 40 --seed 1 [--redfuse build/redfuse] [--keep DIR]
    nice -n 19 python3 scripts/fuzz_specs.py --minutes 30 --seed 7 --log fuzz7.jsonl
    python3 scripts/fuzz_specs.py --legacy --count 40 --seed 1   # the earlier generator: row chains, --check only
    python3 scripts/fuzz_specs.py --print --count 3 --seed 5     # print the specs only
"""
import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

# The environment of every redfuse command: the tile IR verified after each pass.
RUN_ENV = dict(os.environ, REDFUSE_VERIFY="1")


# ---------------------------------------------------------------------------------------------
# The earlier generator (--legacy): row reductions over c reading earlier ones.

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


def make_legacy_spec(rng):
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
    return "\n".join(lines) + "\n", {}


# ---------------------------------------------------------------------------------------------
# The generator: blocks over a row value x(r, c).

class Spec:
    """A spec under construction: sizes, inputs, definitions in order, outputs."""

    def __init__(self, rng):
        self.rng = rng
        self.sizes = {}       # name -> value (all get a value for the run commands)
        self.inputs = {}      # name -> declaration text (without 'input ')
        self.lines = []       # definitions and scalars, in order
        self.outputs = []     # (name, dtype or None)
        self.defined = set()

    def size(self, name, choices):
        if name not in self.sizes:
            self.sizes[name] = self.rng.choice(choices)
        return self.sizes[name]

    def inp(self, name, decl):
        self.inputs.setdefault(name, decl)
        return name

    def define(self, name, text):
        if name in self.defined:
            return False
        self.defined.add(name)
        self.lines.append(text)
        return True

    def out(self, name, p=0.6, dtypes=(None,)):
        if name in self.defined and name not in [o[0] for o in self.outputs] and self.rng.random() < p:
            self.outputs.append((name, self.rng.choice(dtypes)))

    def text(self, symbolic):
        order = [n for n in ("R", "C", "D", "E", "K") if n in self.sizes]
        if symbolic == "all":
            head = "size " + ", ".join(order)
        elif symbolic == "some":
            head = "size " + ", ".join(n if self.rng.random() < 0.5 else f"{n} = {self.sizes[n]}" for n in order)
        else:
            head = "size " + ", ".join(f"{n} = {self.sizes[n]}" for n in order)
        lines = [head] + ["input " + d for d in self.inputs.values()] + self.lines
        by_dtype = collections.OrderedDict()
        for name, dt in self.outputs:
            by_dtype.setdefault(dt, []).append(name)
        for dt, names in by_dtype.items():
            lines.append("output " + ", ".join(names) + (f" : {dt}" if dt else ""))
        return "\n".join(lines) + "\n"


FLOAT_IN = ["f32", "f32", "f32", "bf16", "f16", "f64"]


def row_source(g):
    """The row value x(r, c) the chain reduces over c, and whether it may hold -inf (a mask)."""
    rng = g.rng
    g.inp("X", f"X[R, C] : {rng.choice(FLOAT_IN + ['f8e4m3', 'i8'])}")
    kind = rng.choice(["plain", "plain", "weighted", "scaled", "scalar_in", "temperature", "softcap", "bias", "cast",
                       "cast_int", "causal_mask", "col_mask", "fill_mask", "elementwise_def", "gemm"])
    x, masked = "X[r,c]", False
    if kind == "weighted":
        g.inp("W", "W[C] : f32")
        x = "X[r,c] * W[c]"
    elif kind == "scaled":
        g.define("tau", rng.choice(["tau = 1 / sqrt(C)", "tau = 0.5", "tau = 2.5 / C", "tau = -1.5"]))
        x = "X[r,c] * tau"
    elif kind == "scalar_in":
        g.inp("g", rng.choice(["g : f32", "g[] : f32"]))
        x = "X[r,c] * g"
    elif kind == "temperature":
        g.inp("T", "T[R] : f32")
        x = rng.choice(["X[r,c] / T[r]", "X[r,c] * abs(T[r])"])
    elif kind == "softcap":
        x = "5 * tanh(X[r,c] / 5)"
    elif kind == "bias":
        g.inp("B", "B[C] : bf16")
        x = "X[r,c] + B[c]"
    elif kind == "cast":
        x = f"{rng.choice(['bf16', 'f16', 'f8e4m3', 'f8e5m2'])}(X[r,c] * {rng.choice(['1', '3', '0.1'])})"
    elif kind == "cast_int":
        x = f"f32({rng.choice(['i8', 'i32'])}(round(X[r,c] * {rng.choice(['4', '30'])})))"
    elif kind == "causal_mask":
        x, masked = f"select(c <= r{rng.choice(['', ' + 1', ' - 1'])}, X[r,c], -inf)", True
    elif kind == "col_mask":
        g.inp("W", "W[C] : f32")
        x, masked = "select(W[c] > 0, X[r,c], -inf)", True
    elif kind == "fill_mask":
        x = f"select(X[r,c] {rng.choice(['>', '<='])} 0, X[r,c], {rng.choice(['0', '-1e4', '-30'])})"
    elif kind == "elementwise_def":
        g.inp("W", "W[C] : f32")
        g.define("Xe", f"Xe[r,c] = {rng.choice(['bf16', 'f32', 'f16'])}(X[r,c] * W[c] + 0.5)")
        x = "Xe[r,c]"
    elif kind == "gemm":
        g.size("D", [1, 2, 5, 16])
        g.inp("A", f"A[R, D] : {rng.choice(['f32', 'bf16'])}")
        g.inp("Bm", f"Bm[C, D] : {rng.choice(['f32', 'bf16'])}")
        x = "sum(h: A[r,h] * Bm[c,h])" + rng.choice(["", " * rsqrt(D)"])  # h: not d, which outputs use
    return x, masked, kind


def gen_spec(rng):
    """A random chain as spec text, and the sizes every run command binds."""
    g = Spec(rng)
    g.size("R", [1, 2, 3, 5, 8, 17, 33])
    C = g.size("C", [1, 2, 3, 7, 16, 37, 64, 130, 300, 1025])
    x, masked, kind = row_source(g)

    xs = x if re.fullmatch(r"[\w\[\],]+", x) else f"({x})"  # parenthesised: @x * @x, -@x, @x - m

    def sub(t):
        return t.replace("@x", xs)

    features = set(rng.sample(["softmax", "entropy", "moment2", "wmean", "wvar", "mean", "var", "m3", "absmax",
                               "quant", "fp8", "rms", "argmax", "argmin", "argprob", "topk", "topk_prob",
                               "attn", "prod", "min", "twoaxis", "total", "colred", "lse", "scalar_chain",
                               "expmix", "nofuse", "argsel", "crossaxis", "intmask"],
                              rng.randint(1, 5)))
    need = lambda *f: features.update(f)  # noqa: E731
    if features & {"entropy", "moment2", "wmean", "wvar", "argprob", "topk_prob", "attn", "lse", "expmix", "nofuse", "argsel"}:
        need("softmax")
    if features & {"expmix", "nofuse"}:
        need("mean")
    if "wvar" in features:
        need("wmean")
    if features & {"var", "m3"}:
        need("mean")
    if features & {"quant", "fp8"}:
        need("absmax")

    if "softmax" in features:
        g.define("m", sub("m[r] = max(c: @x)"))
        g.define("s", sub("s[r] = sum(c: exp(@x - m[r]))"))
        g.out("m", 0.3)
        g.out("s", 0.4)
        if rng.random() < 0.4:
            g.define("P", sub("P[r,c] = exp(@x - m[r]) / s[r]"))
            g.out("P", 0.9, (None, "bf16", "f16"))
    if "lse" in features:
        g.define("lse", "lse[r] = m[r] + log(s[r])")
        g.out("lse", 1.0)
    if "entropy" in features:
        # the entropy of the softmax: H = log s - t / s, t = sum (x - m) e^(x - m)
        g.define("t", sub("t[r] = sum(c: (@x - m[r]) * exp(@x - m[r]))"))
        g.define("H", "H[r] = log(s[r]) - t[r] / s[r]")
        g.out("H", 0.8)
        g.out("t", 0.5)
    if "moment2" in features:
        e = rng.choice(["(@x - m[r]) * (@x - m[r]) * exp(@x - m[r])",
                        "pow(@x - m[r], 3) * exp(@x - m[r])",
                        "exp(@x - m[r]) * (1 + (@x - m[r]) * W[c])",
                        "exp(2 * (@x - m[r])) * (@x - m[r])",
                        "exp(0.5 * (@x - m[r]))"])
        if "W[c]" in e:
            g.inp("W", "W[C] : f32")
        g.define("u2", sub(f"u2[r] = sum(c: {e})"))
        g.out("u2", 1.0)
    if "wmean" in features:
        g.inp("V", f"V[R, C] : {rng.choice(['f32', 'bf16'])}")
        g.define("mw", sub("mw[r] = sum(c: exp(@x - m[r]) * V[r,c]) / s[r]"))
        g.out("mw", 0.7)
    if "wvar" in features:
        g.define("vw", sub("vw[r] = sum(c: exp(@x - m[r]) * (V[r,c] - mw[r]) * (V[r,c] - mw[r])) / s[r]"))
        g.out("vw", 1.0)
    if "mean" in features:
        g.define("mu", sub("mu[r] = sum(c: @x) / C"))
        g.out("mu", 0.4)
    if "var" in features:
        g.define("var", sub("var[r] = sum(c: (@x - mu[r]) * (@x - mu[r])) / C"))
        g.out("var", 0.8)
        if rng.random() < 0.4:
            g.inp("W", "W[C] : f32")
            g.define("LN", sub("LN[r,c] = (@x - mu[r]) * rsqrt(var[r] + 1e-5) * W[c]"))
            g.out("LN", 1.0, (None, "bf16"))
    if "m3" in features:
        g.define("k3", sub("k3[r] = sum(c: pow(@x - mu[r], 3)) / C"))
        g.out("k3", 1.0)
    if "expmix" in features:
        # exponential-polynomial in two earlier results: e^(-m) times a polynomial in mu
        g.define("xm", sub(rng.choice(["xm[r] = sum(c: exp(@x - m[r]) * (@x - mu[r]) * (@x - mu[r]))",
                                       "xm[r] = sum(c: exp(@x - m[r]) * (@x - mu[r])) / s[r]",
                                       "xm[r] = sum(c: exp(@x - m[r] + mu[r]) * (@x - m[r]))"])))
        g.out("xm", 1.0)
    if "nofuse" in features:
        # forms no anchor derives (a second pass, with the reason): they must still run right (the
        # product's factors stay near 1: x - m + 1 cancels to ~0, ill-conditioned in any order)
        g.define("nf", sub(rng.choice(["nf[r] = sum(c: max(@x, m[r] - 1))", "nf[r] = sum(c: exp(@x * mu[r]))",
                                       "nf[r] = prod(c: 1 + 0.01 * (@x - m[r]))", "nf[r] = max(c: @x - mu[r]) + sum(c: @x)",
                                       "nf[r] = sum(c: log(1 + abs(@x - mu[r])))"])))
        g.out("nf", 1.0)
    if "argsel" in features:
        # an index found by one reduction selects elements in the next (a gather written as a mask)
        g.define("ia", sub("ia[r] = argmax(c: @x)"))
        g.define("ga", sub(rng.choice(["ga[r] = sum(c: select(c == ia[r], X[r,c], 0))",
                                       "ga[r] = max(c: select(c <= ia[r], @x, -inf))",
                                       "ga[r] = sum(c: exp(@x - m[r]) * select(c < ia[r], 1, 0))"])))
        g.out("ga", 1.0)
    if "crossaxis" in features:
        # a reduction over r (per column) read by a reduction over c (per row); the arg-selection
        # gets a tie-breaker: cmx[c] - x is exactly 0 at each column's maximum, and float32 computes
        # the two x along different paths (a GEMM, a loop), so exact ties flip by rounding
        g.define("cmx", sub("cmx[c] = max(r: @x)"))
        g.define("rx", sub(rng.choice(["rx[r] = sum(c: exp(@x - cmx[c]))", "rx[r] = max(c: @x - cmx[c])",
                                       "rx[r] = argmin(c: cmx[c] - @x + 0.01 * c)"])))
        g.out("rx", 1.0)
    if "intmask" in features:
        # per-row lengths as integer data (varlen masks; lengths <= 0 mask the whole row)
        g.inp("L", "L[R] : i32")
        g.define("lm", sub("lm[r] = max(c: select(c < L[r] * 3, @x, -inf))"))
        g.define("ls", sub("ls[r] = sum(c: select(c < L[r] * 3, exp(@x - lm[r]), 0))"))
        g.out("ls", 1.0)
        g.out("lm", 0.5)
    if "absmax" in features:
        g.define("a", sub("a[r] = max(c: abs(@x))"))
        g.out("a", 0.3)
    # (no `a[r] + 1e-6`: in float32 it is a[r], so x * 448 / (a + 1e-6) can be an exact tie of the
    # cast that float64 is just below, one unit of fp8 apart: a limit of the check, docs/design.md §5)
    if "quant" in features:
        g.inp("W", "W[C] : f32")
        g.define("q", sub("q[r] = sum(c: f32(i8(round(@x * 127 / a[r]))) * W[c]) * a[r] / 127"))
        g.out("q", 1.0, (None, "bf16"))
    if "fp8" in features:
        g.size("D", [1, 2, 5, 16])
        g.inp("U", f"U[C, D] : {rng.choice(['f32', 'f8e4m3', 'bf16'])}")
        g.define("F8", sub("F8[r,d] = sum(c: f32(f8e4m3(@x * 448 / a[r])) * f32(U[c,d])) * a[r] / 448"))
        g.out("F8", 1.0, (None, "bf16"))
    if "rms" in features:
        g.define("n", sub("n[r] = sum(c: @x * @x)"))
        if rng.random() < 0.5:
            g.size("D", [1, 2, 5, 16])
            g.inp("U", f"U[C, D] : {rng.choice(['f32', 'bf16'])}")
            g.define("RG", sub("RG[r,d] = sum(c: @x * rsqrt(n[r] / C + 1e-5) * U[c,d])"))
            g.out("RG", 1.0)
        else:
            g.inp("W", "W[C] : f32")
            g.define("RN", sub("RN[r,c] = @x * rsqrt(n[r] / C + 1e-5) * W[c]"))
            g.out("RN", 1.0, (None, "bf16", "f16"))
        g.out("n", 0.3)
    if "argmax" in features:
        g.define("ia", sub("ia[r] = argmax(c: @x)"))
        g.out("ia", 1.0, (None, "i64"))
    if "argmin" in features:
        g.define("ib", sub("ib[r] = argmin(c: @x)"))
        g.out("ib", 1.0, (None, "i64", "i32"))
    if "argprob" in features:
        g.define("ip", sub(rng.choice(["ip[r] = argmax(c: exp(@x - m[r]) / s[r])",
                                       "ip[r] = argmin(c: exp(@x - m[r]) / s[r])"])))
        g.out("ip", 1.0)
    if "min" in features:
        g.define("mn", sub("mn[r] = min(c: @x)"))
        g.out("mn", 1.0)
    if "prod" in features:
        g.define("pr", sub(rng.choice(["pr[r] = prod(c: 1 + 0.01 * @x)", "pr[r] = prod(c: exp(0.01 * @x))"])))
        g.out("pr", 1.0)
    if "attn" in features:
        g.size("D", [1, 2, 5, 16])
        g.inp("Vv", f"Vv[C, D] : {rng.choice(['f32', 'bf16'])}")
        g.define("O", sub("O[r,d] = sum(c: exp(@x - m[r]) * Vv[c,d]) / s[r]"))
        g.out("O", 1.0, (None, "bf16"))
    if features & {"topk", "topk_prob"}:
        gen_topk(g, sub, C, "topk_prob" in features and "s" in g.defined)
    if "twoaxis" in features:
        gen_twoaxis(g)
    if "total" in features:
        gen_total(g, sub)
    if "colred" in features:
        g.define("cm", sub("cm[c] = max(r: @x)"))
        g.define("cs", sub("cs[c] = sum(r: exp(@x - cm[c]))"))
        g.out("cm", 0.5)
        g.out("cs", 1.0)
    if "scalar_chain" in features:
        g.inp("W", "W[C] : f32")
        g.inp("g0", "g0 : f32")
        g.define("eps", rng.choice(["eps = 1e-5", "eps = 1 / C"]))
        g.define("tw", "tw = sum(c: W[c] * W[c])")
        g.define("sc", sub("sc[r] = sum(c: @x * W[c]) * rsqrt(tw + eps) + g0"))
        g.out("sc", 1.0)
        g.out("tw", 0.5)
    if not g.outputs:
        cands = [l.split("[")[0].split(" ")[0].split(",")[0] for l in g.lines]
        cands = [c for c in cands if c not in ("tau", "eps", "Xe")]
        if not cands:
            g.define("m0", sub("m0[r] = max(c: @x)"))
            cands = ["m0"]
        g.outputs.append((rng.choice(cands), None))
    symbolic = rng.choices(["none", "all", "some"], [0.6, 0.2, 0.2])[0]
    meta = {"sizes": dict(g.sizes), "symbolic": symbolic, "source": kind, "masked": masked,
            "features": sorted(features)}
    return g.text(symbolic), meta


def gen_topk(g, sub, C, on_prob):
    """A top-k over c and what reads it: reductions over its own k axis, a threshold, the indices."""
    rng = g.rng
    K = rng.choice([k for k in (1, 2, 3, 4, 8) if k <= C] or [1])
    if rng.random() < 0.3:
        g.size("K", [K])
        g.sizes["K"] = K
        Ktext = "K"
    else:
        Ktext = str(K)
    body = "exp(@x - m[r]) / s[r]" if on_prob else rng.choice(["@x", "-@x", "@x * 2 + 1"])
    g.define("TV", sub(f"TV[r,k], TI[r,k] = topk(c, {Ktext}: {body})"))
    g.defined.add("TI")
    g.out("TV", 0.7)
    g.out("TI", 0.7, (None, "i64"))
    follow = rng.sample(["softmax_k", "renorm_k", "entropy_k", "argmax_k", "threshold", "gate", "topk_of_topk",
                         "sum_k", "kc", "thr_mean"], rng.randint(1, 3))
    if "softmax_k" in follow or "entropy_k" in follow:
        # Mixtral: a softmax over the k chosen logits only
        g.define("mk", "mk[r] = max(k: TV[r,k])")
        g.define("zk", "zk[r] = sum(k: exp(TV[r,k] - mk[r]))")
        g.define("Pk", "Pk[r,k] = exp(TV[r,k] - mk[r]) / zk[r]")
        g.out("Pk", 1.0, (None, "bf16"))
    if "entropy_k" in follow:
        g.define("hk", "hk[r] = log(zk[r]) - sum(k: (TV[r,k] - mk[r]) * exp(TV[r,k] - mk[r])) / zk[r]")
        g.out("hk", 1.0)
    if "renorm_k" in follow:
        # router weights renormalised over the chosen experts
        g.define("zs", "zs[r] = sum(k: " + rng.choice(["TV[r,k]", "abs(TV[r,k])", "TV[r,k] * TV[r,k]"]) + ")")
        g.define("Wn", "Wn[r,k] = TV[r,k] / zs[r]")
        g.out("Wn", 1.0)
    if "argmax_k" in follow:
        g.define("ak", rng.choice(["ak[r] = argmin(k: TV[r,k])", "ak[r] = argmax(k: -TV[r,k] * (TI[r,k] + 1))"]))
        g.out("ak", 1.0)
    if "threshold" in follow:
        # the k-th value as a threshold of a later reduction over the original axis
        last = "K - 1" if Ktext == "K" else str(K - 1)
        g.define("cnt", sub(f"cnt[r] = sum(c: select(@x >= TV[r, {last}], 1, 0))"))
        g.out("cnt", 1.0)
    if "gate" in follow:
        g.define("gk", "gk[r,k] = TV[r,k] * select(TI[r,k] < 3, 1, 0)")
        g.out("gk", 1.0)
    if "topk_of_topk" in follow and K >= 2:
        g.define("V2", "V2[r,j], I2[r,j] = topk(k, 1: -TV[r,k])")
        g.defined.add("I2")
        g.out("V2", 1.0)
        g.out("I2", 0.5)
    if "kc" in follow:
        # a reduction over the k axis and the original axis at once
        g.define("kc", sub("kc[r] = sum(k, c: TV[r,k] * @x)"))
        g.out("kc", 1.0)
    if "thr_mean" in follow:
        # the mean of the chosen values as a threshold over the original axis
        g.define("tm", f"tm[r] = sum(k: TV[r,k]) / {Ktext}")
        g.define("ct", sub("ct[r] = sum(c: select(@x > tm[r], @x, 0))"))
        g.out("ct", 1.0)
    if "sum_k" in follow:
        g.define("sk", "sk[r] = sum(k: TV[r,k] * f32(bf16(TV[r,k])))")
        g.out("sk", 1.0)


def gen_twoaxis(g):
    """Reductions over two axes at once (c and e) of a 3-d input, chained."""
    rng = g.rng
    g.size("E", [1, 2, 3, 9])
    g.inp("Z", f"Z[R, C, E] : {rng.choice(FLOAT_IN)}")
    z = rng.choice(["Z[r,c,e]", "bf16(Z[r,c,e])", "select(c + e < R, Z[r,c,e], -inf)", "Z[r,c,e] * 0.5"])
    g.define("m2", f"m2[r] = max(c, e: {z})")
    kind = rng.choice(["softmax", "entropy", "mean", "argmax"])
    if kind in ("softmax", "entropy"):
        g.define("s2", f"s2[r] = sum(c, e: exp({z} - m2[r]))")
        g.out("s2", 1.0)
        if kind == "entropy":
            g.define("t2", f"t2[r] = sum(c, e: ({z} - m2[r]) * exp({z} - m2[r])) / s2[r]")
            g.out("t2", 1.0)
        if rng.random() < 0.5:
            g.define("P2", f"P2[r,c,e] = exp({z} - m2[r]) / s2[r]")
            g.out("P2", 1.0)
    elif kind == "mean":
        g.define("mu2", f"mu2[r] = sum(c, e: {z}) / (C * E)")
        g.define("v2", f"v2[r] = sum(c, e: ({z} - mu2[r]) * ({z} - mu2[r]))")
        g.out("v2", 1.0)
    else:
        g.define("cz", f"cz[r,c] = sum(e: {z})")
        g.define("iz", "iz[r] = argmax(c: cz[r,c] - m2[r])")
        g.out("iz", 1.0)
    g.out("m2", 0.5)


def gen_total(g, sub):
    """Scalars: whole-tensor reductions (0-dim definitions) and the chains that read them."""
    rng = g.rng
    kind = rng.choice(["global_softmax", "normalise", "mean_all", "scalar_input"])
    if kind == "global_softmax":
        g.define("gm", sub("gm = max(r, c: @x)"))
        g.define("gs", sub("gs = sum(r, c: exp(@x - gm))"))
        g.out("gs", 1.0)
        if rng.random() < 0.5:
            g.define("GY", sub("GY[r,c] = exp(@x - gm) / gs"))
            g.out("GY", 1.0)
    elif kind == "normalise":
        g.define("tot", sub("tot = sum(r, c: abs(@x))"))
        g.define("NY", sub("NY[r] = sum(c: @x) / (tot + 1)"))
        g.out("NY", 1.0)
        g.out("tot", 0.5)
    elif kind == "mean_all":
        g.define("ma", sub("ma = sum(r, c: @x) / (R * C)"))
        g.define("va", sub("va = sum(r, c: (@x - ma) * (@x - ma)) / (R * C)"))
        g.out("va", 1.0)
    else:
        g.inp("h0", "h0 : bf16")
        g.define("hs", sub("hs[r] = max(c: @x * h0)"))
        g.define("hz", "hz = sum(r: hs[r])")
        g.out("hz", 1.0)


# ---------------------------------------------------------------------------------------------
# Commands and outcomes.

STAGES = ["ir", "graph", "plan", "tile:lowered", "tile:after-gemm", "tile:after-exp2", "tile", "cpp", "opencl", "cuda"]


def size_arg(sizes):
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def commands(rng, path, meta, families, n, outdir):
    """(family, label, argv) for one spec."""
    sz = ["--size", size_arg(meta["sizes"])]
    need_size = meta["symbolic"] != "none"
    run_sz = sz if need_size or rng.random() < 0.3 else []
    cmds = []
    if "analyze" in families:
        cmds.append(("analyze", "analyze", ["analyze", path]))
        cmds.append(("analyze", "analyze --json", ["analyze", path, "--json", "--target", rng.choice(["gpu", "cpu"])]))
        st = rng.choice(STAGES)
        tgt = {"cpp": "cpu", "opencl": "opencl", "cuda": "cuda"}.get(st, rng.choice(["cpu", "gpu", "opencl", "cuda"]))
        cmds.append(("analyze", f"analyze --emit {st.split(':')[0]}", ["analyze", path, "--emit", st, "--target", tgt] + sz))
    seed = ["--seed", str(n)]
    if "interp" in families:
        extra = []
        if rng.random() < 0.2 and not {"prod", "nofuse"} & set(meta["features"]):
            extra += ["--scale", rng.choice(["50", "0.01", "1e4"])]
        if rng.random() < 0.2:
            extra += ["--dist", rng.choice(["uniform", "positive"])]
        cmds.append(("interp", "run interp", ["run", path, "--target", "interp", "--check"] + seed + run_sz + extra))
        if rng.random() < 0.25:
            cmds.append(("interp", "run interp-f32", ["run", path, "--target", "interp-f32", "--check"] + seed + sz))
        if rng.random() < 0.15:
            cmds.append(("interp", "run interp --approx", ["run", path, "--target", "interp", "--approx", "--check"] + seed + sz))
    if "cpu" in families:
        extra = rng.choice([[], [], ["--tile", str(rng.choice([1, 3, 8]))], ["--segments", str(rng.choice([2, 3]))],
                            ["--tile", "4", "--segments", "2", "--row-block", "3"], ["--unfused"], ["--threads", "1"]])
        if rng.random() < 0.15 and not {"prod", "nofuse"} & set(meta["features"]):
            # (a product of 1 + 0.01 x over a row of logits at scale 50 has factors that cancel to ~0
            # and underflows: ill-conditioned in float32 whatever the plan, so not a finding)
            extra += ["--scale", "50"]
        cmds.append(("cpu", "run cpu", ["run", path, "--target", "cpu", "--check"] + seed + run_sz + extra))
    if "opencl" in families:
        extra = rng.choice([[], ["--fusion-level", "block"], ["--fusion-level", "warp"],
                            ["--fusion-level", "thread", "--segments", "3"],
                            ["--tile", "3", "--segments", "2", "--row-block", "3"], ["--unfused"]])
        cmds.append(("opencl", "run opencl", ["run", path, "--target", "opencl", "--check"] + seed + run_sz + extra))
    if "grad" in families:
        small = ["--size", size_arg({k: min(v, 4) for k, v in meta["sizes"].items()})] if meta["sizes"] else []
        extra = rng.choice([[], [], ["--straight-through"]])
        cmds.append(("grad", "grad --check", ["grad", path, "--check", "--seed", str(n)] + small + extra))
    if "emit" in families:
        for tgt in ("cpu", "opencl", "cuda"):
            for with_size in (False, True):
                d = os.path.join(outdir, f"emit_{n}_{tgt}_{int(with_size)}")
                argv = ["emit", path, "--target", tgt, "-o", d, "--name", "k"] + (sz if with_size else [])
                if tgt == "cuda" and rng.random() < 0.5:
                    argv += ["--arch", rng.choice(["sm_80", "sm_90a"])]
                cmds.append(("emit", f"emit {tgt}" + (" --size" if with_size else ""), argv))
    return cmds


def classify(argv, rc, out, timed_out):
    """ok | refused (exit 1/2 with a message) | internal | crash | hang | wrong | unclear."""
    if timed_out:
        return "hang"
    if rc == 0:
        return "ok"
    if rc < 0 or rc >= 128:
        return "crash"
    if rc == 3 or "internal error" in out:
        return "internal"
    if "--check" in argv and "check: FAILED" in out:
        return "wrong"
    if rc in (1, 2) and re.search(r"error|redfuse: ", out):
        return "refused"
    return "unclear"


BUGS = {"internal", "crash", "hang", "wrong", "unclear"}


def tail(out):
    """What to show of a command's output: the lines that name a failure, and the last two."""
    lines = out.strip().splitlines()
    bad = [l for l in lines[:-2] if "FAILED" in l or "error" in l or "internal" in l]
    return bad[:6] + lines[-2:]


def signature(cls, out):
    """A short key that groups one bug's occurrences."""
    lines = [l for l in out.splitlines() if l.strip()]
    key = next((l for l in lines if "internal" in l or "error" in l or "FAILED" in l or "mismatch" in l), lines[-1] if lines else "")
    key = re.sub(r"[-+]?\d[\d.e+-]*", "N", key)
    key = re.sub(r"/\S+\.rf", "SPEC", key)
    return f"{cls}: {key[:160]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=40, help="number of specs (default 40; with --minutes: no limit unless given)")
    ap.add_argument("--minutes", type=float, default=0, help="stop starting new specs after this many minutes of wall time")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generator (spec n runs with --seed n)")
    ap.add_argument("--redfuse", default="build/redfuse", help="the binary under test (default build/redfuse)")
    ap.add_argument("--commands", default="analyze,interp,cpu,opencl,emit",
                    help="families to run, comma-separated from analyze,interp,cpu,opencl,emit (default: all)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per command before it counts as a hang (default 300)")
    ap.add_argument("--keep", help="write every spec into this directory (default: a temporary directory)")
    ap.add_argument("--log", help="append one JSON line per command (spec, argv, exit status, outcome, seconds)")
    ap.add_argument("--legacy", action="store_true", help="the earlier generator: row chains, run --check on cpu/opencl only")
    ap.add_argument("--print", action="store_true", help="print the generated specs and run nothing")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    families = set(a.commands.split(","))
    unknown = families - {"analyze", "interp", "cpu", "opencl", "emit", "grad"}
    if unknown:
        ap.error(f"unknown command families: {', '.join(sorted(unknown))}")
    count = a.count if (not a.minutes or "--count" in sys.argv) else 10 ** 9
    tmp = a.keep or tempfile.mkdtemp(prefix="redfuse-fuzz-")
    os.makedirs(tmp, exist_ok=True)
    log = open(a.log, "a") if a.log else None
    start = time.time()
    tally = collections.defaultdict(collections.Counter)  # label -> outcome -> count
    bugs = collections.OrderedDict()  # signature -> [(path, argv)]
    failing, n = 0, 0
    while n < count and not (a.minutes and time.time() - start > a.minutes * 60):
        spec, meta = make_legacy_spec(rng) if a.legacy else gen_spec(rng)
        if a.legacy:
            meta = {"features": [], "sizes": {}, "symbolic": "none"}
        path = os.path.join(tmp, f"fuzz{a.seed}_{n}.rf")
        with open(path, "w") as f:
            f.write(spec)
        if a.print:
            print(f"# {path} {json.dumps(meta)}\n{spec}")
            n += 1
            continue
        if a.legacy:
            cmds = [("legacy", " ".join(c), ["run", path, "--check", "--seed", str(n)] + c) for c in LEGACY_CONFIGS]
        else:
            cmds = commands(rng, path, meta, families, n, tmp)
        bad = []
        for fam, label, argv in cmds:
            t0 = time.time()
            try:
                r = subprocess.run([a.redfuse] + argv, capture_output=True, text=True, timeout=a.timeout,
                                   errors="replace", env=RUN_ENV)
                rc, out, timed_out = r.returncode, r.stdout + r.stderr, False
            except subprocess.TimeoutExpired as e:
                rc, timed_out = None, True
                out = ((e.stdout or b"") if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace"))
            cls = classify(argv, rc, out, timed_out)
            tally[label][cls] += 1
            if log:
                log.write(json.dumps({"seed": a.seed, "n": n, "spec": path, "label": label, "argv": argv, "rc": rc,
                                      "outcome": cls, "seconds": round(time.time() - t0, 2),
                                      "tail": tail(out) if cls != "ok" else []}) + "\n")
                log.flush()
            if cls in BUGS:
                bad.append((label, argv, cls, tail(out)))
                bugs.setdefault(signature(cls, out), []).append((path, " ".join([a.redfuse] + argv)))
        print(f"{'ok  ' if not bad else 'BUG '} {path} [{meta.get('source', 'legacy')}; {' '.join(meta.get('features', []))}]"
              f" {time.time() - start:.0f}s", flush=True)
        if bad:
            failing += 1
            print("  " + spec.replace("\n", "\n  "))
            for label, argv, cls, lines in bad:
                print(f"  [{cls}] $ {a.redfuse} {' '.join(argv)}")
                for line in lines:
                    print("    " + line)
        n += 1
    if a.print:
        return 0
    elapsed = time.time() - start
    print(f"\n== {n} specs in {elapsed / 60:.1f} min (seed {a.seed}); outcomes per command:")
    for label in sorted(tally):
        print(f"  {label:28s} " + ", ".join(f"{k} {v}" for k, v in sorted(tally[label].items())))
    if bugs:
        print(f"== {len(bugs)} distinct bug signatures:")
        for sig, where in bugs.items():
            print(f"  {sig}  ({len(where)}x; first: {where[0][1]})")
    print(f"{n - failing}/{n} specs without a bug")
    if log:
        log.close()
    return min(failing, 125)


LEGACY_CONFIGS = [
    ["--target", "cpu"],
    ["--target", "opencl"],
    ["--target", "opencl", "--fusion-level", "warp"],
    ["--target", "opencl", "--fusion-level", "thread", "--segments", "3"],
    ["--target", "opencl", "--tile", "3", "--segments", "2", "--row-block", "3"],
]

if __name__ == "__main__":
    sys.exit(main())
