"""redfuse's rows of the CPU benchmark, through the Python API (docs/python.md) in the worker process
of peers.py: the same inputs, the same timer and the same check as the peers.

    call, info = prepare(case, impl, inputs, outdir, threads)   # compiles the case's spec once
    outputs = call()                                            # one call of the Kernel (a tuple)

Implementations: 'redfuse' (our fused kernel: redfuse.compile(spec, target="cpu", sizes=...)),
'redfuse-unfused' (our unfused plan: unfused=True) and 'redfuse[S]' (strategy="S", the fusion-level
study; S as in src/fuse/Plan.h and the CLI's --strategy). `threads=` is passed when redfuse.compile
takes it, else the Kernel runs on the target's usable CPUs (all cores, as the peers). While
redfuse.compile lacks `unfused=` / `strategy=`, those rows are "unavailable" with the reason.

Specs. The examples declare one dtype and one top-k width; the bench cases need others (attention in
f32 and bf16; MoE with k = 2, 6, 8). spec_for derives a variant by rewriting the dtypes of the
floating-point `input`/`output` lines and the literal width of `topk(axis, K: ...)`, writes it under
<out>/specs/, and records which spec and dtype ran ("examples/attention.rf, inputs/outputs bf16 ->
f32"). The inputs are the peers' tensors, in the spec's dtypes (bf16 as torch.bfloat16), by name.

Nothing here imports torch: the test stand-ins (bench/test_bench.py) pass a fake `redfuse` module.
"""
import inspect
import os
import re
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOAT_DTYPES = ("f32", "bf16", "f16")

# What the probe compiles: a failure here (no compiler for the JIT, a broken build) is said once at
# the start instead of in every cell.
PROBE_SPEC = os.path.join(REPO, "examples", "softmax.rf")


class Unavailable(Exception):
    """This redfuse row cannot run with the installed redfuse (recorded as 'unavailable: reason')."""


def _short(e):
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    return ("%s: %s" % (type(e).__name__, lines[-1] if lines else ""))[:300]


def _module(rf=None):
    if rf is not None:
        return rf
    import redfuse  # noqa: PLC0415 - only the worker needs it (and the probe says why it is missing)
    return redfuse


def _accepts(fn, name):
    try:
        ps = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True  # no signature to read: let the call decide
    return name in ps or any(p.kind == p.VAR_KEYWORD for p in ps.values())


# ------------------------------------------------------------------------------------ probing
def _extension(where):
    """The compiled extension next to the package: its name, mtime and a hash prefix. The venv is
    shared (tests, other checkouts reinstall the wheel), and the version alone does not say which
    build a run measured."""
    import glob
    import hashlib
    for path in sorted(glob.glob(os.path.join(where, "_redfuse*.so"))):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
        mtime = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(os.path.getmtime(path)))
        return {"file": os.path.basename(path), "mtime": mtime, "sha256": digest}
    return None


def probe(rf=None):
    """What the worker's redfuse is: {available, reason, version, path, keywords}. Compiles a tiny
    spec so that a missing or broken build is one reason, not a failure in every row."""
    try:
        rf = _module(rf)
    except Exception as e:  # noqa: BLE001
        return {"available": False, "reason": "redfuse does not import (%s): scripts/bench.sh installs it "
                "with scripts/python_setup.sh, or set PYTHONPATH=python with a built extension" % _short(e)}
    where = os.path.dirname(os.path.abspath(getattr(rf, "__file__", "") or "."))
    st = {"available": False, "reason": "", "api": "python", "version": getattr(rf, "__version__", "?"),
          "path": os.path.relpath(where, REPO) if where.startswith(REPO + os.sep) else where,
          "keywords": [k for k in ("unfused", "strategy", "threads") if _accepts(rf.compile, k)],
          "extension": _extension(where)}
    try:
        rf.compile(PROBE_SPEC, target="cpu", sizes={"R": 2, "C": 8})
    except Exception as e:  # noqa: BLE001
        st["reason"] = "redfuse.compile fails on a tiny spec (%s)" % _short(e)
        return st
    st["available"] = True
    return st


# -------------------------------------------------------------------------------------- specs
def spec_for(case, outdir):
    """(path to compile, spec description). Derives a variant when the case's dtype or k differ."""
    src = os.path.join(REPO, "examples", case["spec"])
    rel = os.path.relpath(src, REPO)
    try:
        with open(src) as f:
            text = f.read()
    except OSError as e:
        return src, "%s (unreadable: %s)" % (rel, e)
    changes = []
    want = case["dtype"]
    # The spec's main float dtype is that of its first floating-point input; only declarations of
    # that dtype are retyped (so the f32 scales of quant_gemm and the f32 loss stay f32).
    decls = re.findall(r"^(?:input|output)\s+[^:\n]*:\s*(\w+)", text, flags=re.M)
    main = next((d for d in decls if d in FLOAT_DTYPES), want)

    def retype(m):
        if m.group(2) == main and main != want:
            changes.append("%s %s -> %s" % (m.group(1).split()[1].split("[")[0], m.group(2), want))
            return m.group(1) + want
        return m.group(0)

    new = re.sub(r"^((?:input|output)\s+[^:\n]*:\s*)(\w+)", retype, text, flags=re.M)
    k = case["sizes"].get("k")
    if k is not None:
        def rek(m):
            if int(m.group(2)) != k:
                changes.append("topk %s -> %d" % (m.group(2), k))
                return "%s%d%s" % (m.group(1), k, m.group(3))
            return m.group(0)
        new = re.sub(r"(topk\(\s*\w+\s*,\s*)(\d+)(\s*:)", rek, new)
    if not changes:
        return src, "%s (%s, as declared)" % (rel, want)
    d = os.path.join(outdir, "specs")
    os.makedirs(d, exist_ok=True)
    tag = "%s%s" % (want, "-k%d" % k if k is not None else "")
    path = os.path.join(d, case["spec"].replace(".rf", ".%s.rf" % tag))
    with open(path, "w") as f:
        f.write("# derived by bench/redfuse_hook.py from %s: %s\n" % (rel, "; ".join(changes)))
        f.write(new)
    return path, "%s derived (%s)" % (rel, "; ".join(changes))


def sizes_for(case):
    """The spec's sizes (k of top-k is a literal of the spec variant, not a size)."""
    return {n: v for n, v in case["sizes"].items() if n != "k"}


def plan_keywords(impl):
    """The redfuse.compile keywords that select this row's plan."""
    if impl == "redfuse":
        return {}
    if impl == "redfuse-unfused":
        return {"unfused": True}
    if impl.startswith("redfuse[") and impl.endswith("]"):
        return {"strategy": impl[len("redfuse["):-1]}
    raise KeyError(impl)


def _strategy(kernel, kw):
    if kw.get("unfused"):
        return "unfused"
    try:
        chains = kernel.analysis.get("chains", [])
    except Exception:  # noqa: BLE001 - the record only loses a label
        return None
    names = []
    for c in chains:
        s = c.get("strategy") or "?"
        if not c.get("fused"):  # e.g. exact_prepass: the plan computes a rounded result first
            s = "%s (not fused)" % s if c.get("strategy") else "not fused"
        if s not in names:
            names.append(s)
    return "+".join(names) or None


# ------------------------------------------------------------------------------------ running
def prepare(case, impl, inputs, outdir, threads=None, rf=None):
    """Compiles the case's spec for `impl` and returns (call, info): call() runs the Kernel once on
    `inputs` (the peers' tensors, by name) and returns its outputs as a tuple; info holds the fields
    of the record (spec, api_call, compile_s, strategy, threads). Raises Unavailable when the
    installed redfuse.compile has no keyword this row needs."""
    rf = _module(rf)
    path, desc = spec_for(case, outdir)
    kw = plan_keywords(impl)
    for k in kw:
        if not _accepts(rf.compile, k):
            raise Unavailable("redfuse.compile has no %s= option in this build (redfuse %s)" % (
                k, getattr(rf, "__version__", "?")))
    if threads and _accepts(rf.compile, "threads"):
        kw["threads"] = threads
    info = {"spec": desc, "threads": kw.get("threads", "default (the target's usable CPUs)"),
            "api_call": "redfuse.compile(%r, target='cpu', sizes=%r%s)" % (
                os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path, sizes_for(case),
                "".join(", %s=%r" % kv for kv in sorted(kw.items())))}
    t0 = time.perf_counter()
    try:
        kernel = rf.compile(path, target="cpu", sizes=sizes_for(case), **kw)
    except TypeError as e:  # a keyword the signature shows but the extension does not take yet
        if any(k in str(e) for k in kw):
            raise Unavailable("redfuse.compile refuses %s (%s)" % (", ".join(sorted(kw)), _short(e))) from e
        raise
    info["compile_s"] = round(time.perf_counter() - t0, 4)
    strategy = _strategy(kernel, kw)
    if strategy:
        info["strategy"] = strategy
    names = [t.name for t in kernel.inputs] if hasattr(kernel, "inputs") else list(inputs)
    args = {n: inputs[n] for n in names}

    def call():
        out = kernel(**args)
        return out if isinstance(out, tuple) else (out,)
    return call, info
