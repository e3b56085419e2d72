"""The hook through which redfuse's own kernels enter the same table as the peers.

Contract (what `redfuse bench` is expected to provide; see bench/README.md):

    redfuse bench SPEC --target cpu --size N=V,... --json [--threads N] [--strategy S] [--load DIR]

prints one JSON object on stdout (other lines on stdout are ignored: the last line that parses as a
JSON object is used). Recognised fields, all optional except time_ms:
    time_ms            our fused kernel (median of its repetitions)
    unfused_time_ms    our unfused plan on the same inputs   (or "unfused": {"time_ms": ...})
    strategy           the strategy that ran (src/fuse/Plan.h names)
    peak_bytes         peak bytes allocated by the run (else the process's max RSS is recorded)
    results            [{"name": ..., "time_ms": ...}, ...] for anything else it measured
Everything it prints is kept in the record under "redfuse_json".

The hook probes `redfuse bench --help` once. While the command is missing (today it exits 2 with "this
build has no code generator yet"), every redfuse cell says "unavailable: CPU backend not built yet",
with the spec and dtype that would have been run.

Specs. The examples declare one dtype and one top-k width; the bench cases need others (attention in
f32 and bf16; MoE with k = 2, 6, 8). The hook derives a spec variant by rewriting the dtypes of the
floating-point `input`/`output` lines and the literal width of `topk(axis, K: ...)`, writes it under
<out>/specs/, and records which spec and dtype ran ("examples/attention.rf, inputs/outputs bf16 -> f32").
If `redfuse bench` gains a dtype or k override, change `spec_for` to pass it instead.

Inputs. When `redfuse bench --help` lists --load, the peers' inputs of the case are written as .npy
files (the format of `redfuse run --save`: bf16 values as f32, i8 as |i1, i32 as <i4) and passed with
--load, so redfuse runs on the same inputs as the peers.
"""
import json
import os
import re
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOAT_DTYPES = ("f32", "bf16", "f16")


def _first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            line = line.strip()
            return line[len("bench: "):] if line.startswith("bench: ") else line
    return ""


def _show(cmd):
    return " ".join(os.path.relpath(c, REPO) if c.startswith(REPO + os.sep) else c for c in cmd)


def _last_json(text):
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    try:  # a pretty-printed object
        i = text.index("{")
        return json.loads(text[i:])
    except (ValueError, AttributeError):
        return None


def _wait(p, timeout):
    """Waits for the child with os.wait4 (so its own max RSS is known); (exit code, max RSS in KiB),
    or (None, 0) after killing it at the timeout."""
    import time
    t0 = time.monotonic()
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            return os.waitstatus_to_exitcode(status), ru.ru_maxrss
        if time.monotonic() - t0 > timeout:
            p.kill()
            os.wait4(p.pid, 0)
            return None, 0
        time.sleep(0.02)


class Redfuse:
    def __init__(self, exe=None, outdir=None, timeout=300, threads=None):
        self.exe = exe or os.environ.get("REDFUSE") or os.path.join(REPO, "build", "redfuse")
        self.outdir = outdir or tempfile.mkdtemp(prefix="redfuse-bench-")
        self.timeout = timeout
        self.threads = threads
        self.available = False
        self.reason = ""
        self.flags = set()
        self._probe()

    # ------------------------------------------------------------------------------ probing
    def _probe(self):
        if not os.path.isfile(self.exe) or not os.access(self.exe, os.X_OK):
            self.reason = "redfuse not built (%s missing: run scripts/test.sh or cmake --build build)" % \
                os.path.relpath(self.exe, REPO)
            return
        try:
            p = subprocess.run([self.exe, "bench", "--help"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.reason = "redfuse bench --help failed: %s" % e
            return
        text = (p.stdout or "") + (p.stderr or "")
        if p.returncode != 0 or "no code generator" in text or "needs a code generator" in text:
            self.reason = "CPU backend not built yet (redfuse bench: %s)" % _first_line(text)
            return
        self.flags = set(re.findall(r"--[a-z][a-z0-9-]*", text))
        # The help of a stub command can exist before the command does: run the smallest case.
        tiny = [self.exe, "bench", os.path.join(REPO, "examples", "softmax.rf"), "--target", "cpu",
                "--size", "R=2,C=8", "--json"]
        try:
            p = subprocess.run(tiny, capture_output=True, text=True, timeout=self.timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.reason = "redfuse bench failed on a tiny softmax: %s" % e
            return
        text = (p.stdout or "") + (p.stderr or "")
        if p.returncode != 0:
            if "no code generator" in text or "needs a code generator" in text or p.returncode == 2:
                self.reason = "CPU backend not built yet (redfuse bench exits %d: %s)" % (p.returncode,
                                                                                          _first_line(text))
            else:
                self.reason = "redfuse bench fails on a tiny softmax (exit %d: %s)" % (p.returncode,
                                                                                      _first_line(text))
            return
        self.available = True

    def status(self):
        return {"exe": os.path.relpath(self.exe, REPO), "available": self.available, "reason": self.reason,
                "flags": sorted(self.flags)}

    # --------------------------------------------------------------------------------- specs
    def spec_for(self, case):
        """(path to run, spec description). Derives a variant when the case's dtype or k differ."""
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
        d = os.path.join(self.outdir, "specs")
        os.makedirs(d, exist_ok=True)
        tag = "%s%s" % (want, "-k%d" % k if k is not None else "")
        path = os.path.join(d, case["spec"].replace(".rf", ".%s.rf" % tag))
        with open(path, "w") as f:
            f.write("# derived by bench/redfuse_hook.py from %s: %s\n" % (rel, "; ".join(changes)))
            f.write(new)
        return path, "%s derived (%s)" % (rel, "; ".join(changes))

    def size_arg(self, case):
        return ",".join("%s=%d" % (n, v) for n, v in case["sizes"].items() if n != "k")

    # ------------------------------------------------------------------------------- running
    def command(self, case, strategy=None, load_dir=None):
        spec, _ = self.spec_for(case)
        cmd = [self.exe, "bench", spec, "--target", "cpu", "--size", self.size_arg(case), "--json"]
        if self.threads and "--threads" in self.flags:
            cmd += ["--threads", str(self.threads)]
        if strategy:
            cmd += ["--strategy", strategy]
        if load_dir and "--load" in self.flags:
            cmd += ["--load", load_dir]
        return cmd

    def wants_inputs(self):
        return self.available and "--load" in self.flags

    def run(self, case, impls, load_dir=None):
        """Returns {impl: partial record} for the redfuse impls of a case ('redfuse', 'redfuse-unfused',
        'redfuse[strategy]'). A partial record has status, reason, time_ms, spec, ..."""
        spec, desc = self.spec_for(case)
        base = {"spec": desc, "command": _show(self.command(case))}
        if not self.available:
            return {i: dict(base, status="unavailable", reason=self.reason) for i in impls}
        out = {}
        plain = [i for i in impls if not i.startswith("redfuse[")]
        if plain:
            out.update(self._run_one(case, None, load_dir, plain, base))
        for i in impls:
            if i.startswith("redfuse["):
                strat = i[len("redfuse["):-1]
                if "--strategy" not in self.flags:
                    out[i] = dict(base, status="unavailable", reason="redfuse bench has no --strategy option")
                    continue
                out.update(self._run_one(case, strat, load_dir, [i], base))
        return out

    def _run_one(self, case, strategy, load_dir, impls, base):
        cmd = self.command(case, strategy, load_dir)
        base = dict(base, command=_show(cmd))
        with tempfile.TemporaryFile(mode="w+") as err, tempfile.TemporaryFile(mode="w+") as outf:
            try:
                p = subprocess.Popen(cmd, stdout=outf, stderr=err, text=True)
            except OSError as e:
                return {i: dict(base, status="failed", reason=str(e)) for i in impls}
            rc, maxrss_kb = _wait(p, self.timeout)
            if rc is None:
                return {i: dict(base, status="timeout", reason="> %d s" % self.timeout) for i in impls}
            err.seek(0)
            errtext = err.read()
            outf.seek(0)
            stdout = outf.read()
        p.returncode = rc
        if p.returncode != 0:
            return {i: dict(base, status="failed", reason="exit %d: %s" % (p.returncode, _first_line(errtext)))
                    for i in impls}
        js = _last_json(stdout)
        if not isinstance(js, dict) or "time_ms" not in js:
            return {i: dict(base, status="failed", reason="no JSON with time_ms on stdout") for i in impls}
        out = {}
        for i in impls:
            rec = dict(base, redfuse_json=js)
            t = None
            if i == "redfuse" or i.startswith("redfuse["):
                t = js.get("time_ms")
            elif i == "redfuse-unfused":
                t = js.get("unfused_time_ms")
                if t is None and isinstance(js.get("unfused"), dict):
                    t = js["unfused"].get("time_ms")
            if t is None:
                out[i] = dict(rec, status="unavailable", reason="redfuse bench reported no time for %s" % i)
                continue
            rec.update(status="ok", time_ms=float(t), reps=js.get("reps"))
            if js.get("strategy"):
                rec["strategy"] = js["strategy"]
            if js.get("peak_bytes") is not None:
                rec["peak_bytes"] = js["peak_bytes"]
            else:
                rec["peak_rss_bytes_process"] = maxrss_kb * 1024
            out[i] = rec
        for r in js.get("results") or []:
            if isinstance(r, dict) and "name" in r and "time_ms" in r:
                out["redfuse[%s]" % r["name"]] = dict(base, status="ok", time_ms=float(r["time_ms"]))
        return out
