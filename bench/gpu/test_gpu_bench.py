#!/usr/bin/env python3
"""Self-tests of the GPU harness that need no GPU:

    .venv/bin/python bench/gpu/test_gpu_bench.py

The spec parsing and size sets, the cases and the floor model, redfuse's JSON (through stand-in
executables), the table, the report and the JSON, the argument handling of gpu_bench.py and run.sh;
with torch importable also the inputs, references and error measures on the CPU.
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu_bench  # noqa: E402
import gpu_cases  # noqa: E402

REPO = gpu_cases.REPO
try:
    import torch  # noqa: F401
    import gpu_torch
    HAVE_TORCH = True
except ImportError:  # the torch tests are skipped
    HAVE_TORCH = False

FAKE_REDFUSE = r"""#!/bin/sh
# stand-in for redfuse: `bench --help`, `bench ... --json`, `run ... --check --json`
echo "$@" >> "$FAKE_LOG"
if [ "$1" = bench ] && [ "$2" = --help ]; then
  echo "Options: --target TEXT --size --json --budget FLOAT --load TEXT --no-unfused --seed"; exit 0
fi
if [ "$1" = bench ]; then
  [ -n "$FAKE_FAIL" ] && { echo "examples/x.rf: error: boom" >&2; exit 3; }
  echo "jit: compiling"
  case "$*" in
    *--no-unfused*) printf '{\n  "time_ms": 0.5,\n  "strategy": "online"\n}\n' ;;
    *) echo '{"time_ms": 1.25, "unfused": {"time_ms": 2.5}, "strategy": "multi_segment", "reps": 20}' ;;
  esac
  exit 0
fi
if [ "$1" = run ]; then
  [ -n "$FAKE_NODEV" ] && { echo "$2: error: no CUDA driver/device: libcuda.so.1 not found" >&2; exit 1; }
  case "$2" in
    *softmax.rf) printf '{\n "ok": true,\n "outputs": {"Y": {"max_rel_err": 1e-7, "tolerance": 1e-5, "ok": true}},\n "time_ms": 0.1,\n "sizes": {"R": 5, "C": 37}\n}\n'; exit 0 ;;
    *variance.rf) echo '{"ok": false, "outputs": {"mu": {"max_rel_err": 1, "tolerance": 1e-5, "ok": false}, "var": {"ok": true}}}'; exit 1 ;;
    *) echo "examples/x.rf: error: target 'cuda' is not available yet" >&2; exit 1 ;;
  esac
fi
exit 2
"""


def _read(path):
    with open(path) as f:
        return f.read()


def _quiet(fn, *a):
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        fn(*a)
    return buf.getvalue()


def _exe(d, text):
    p = os.path.join(d, "redfuse")
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, os.stat(p).st_mode | stat.S_IEXEC)
    return p


class Specs(unittest.TestCase):
    def test_parsing(self):
        t = gpu_cases.read_spec(os.path.join(REPO, "examples", "decode_gqa.rf"))
        self.assertEqual([n for n, _ in gpu_cases.spec_sizes(t)], ["B", "Hq", "Hkv", "N", "D"])
        self.assertEqual(gpu_cases.spec_ratios(t), [("Hq", "Hkv")])
        self.assertEqual(gpu_cases.spec_outputs(t), {"O": "bf16"})
        self.assertEqual(gpu_cases.spec_inputs(t), {"Q": "bf16", "K": "bf16", "V": "bf16"})
        moe = gpu_cases.read_spec(os.path.join(REPO, "examples", "moe_routing.rf"))
        self.assertEqual(gpu_cases.spec_outputs(moe), {"W": None, "I": None})
        self.assertIsInstance(gpu_cases.spec_topk(moe), int)
        self.assertIsNone(gpu_cases.spec_topk(t))

    def test_size_sets_of_every_example(self):
        for path in sorted(os.listdir(os.path.join(REPO, "examples"))):
            if not path.endswith(".rf"):
                continue
            t = gpu_cases.read_spec(os.path.join(REPO, "examples", path))
            sets = gpu_cases.example_size_sets(t, path[:-3])
            self.assertEqual([l for l, _ in sets], ["default", "2v+1", "multi-tile"], path)
            dflt = dict(gpu_cases.spec_sizes(t))
            for label, z in sets[1:]:
                self.assertEqual(set(z), set(dflt), path)
                self.assertTrue(all(v >= 1 for v in z.values()), path)
                for a, b in gpu_cases.spec_ratios(t):      # G = Hq / Hkv stays whole
                    self.assertEqual(z[a] % z[b], 0, (path, label, z))
                    self.assertEqual(z[a] // z[b], dflt[a] // dflt[b])
            odd = sets[1][1]
            if "N" in dflt and not gpu_cases.spec_ratios(t):
                self.assertEqual(odd["N"], 2 * dflt["N"] + 1)

    def test_size_arg_skips_k(self):
        self.assertEqual(gpu_cases.size_arg({"T": 5, "E": 8, "k": 2}), "T=5,E=8")

    def test_derive_spec(self):
        with tempfile.TemporaryDirectory() as d:
            p, desc = gpu_cases.derive_spec("softmax.rf", "f32", None, d)
            self.assertTrue(p.endswith("examples/softmax.rf"))
            p, desc = gpu_cases.derive_spec("softmax.rf", "bf16", None, d)
            text = _read(p)
            self.assertIn("input X[R, C] : bf16", text)
            self.assertIn("output Y : bf16", text)
            self.assertIn("f32 -> bf16", desc)
            p, desc = gpu_cases.derive_spec("moe_routing.rf", "f32", 8, d)
            self.assertIn("topk(e, 8:", _read(p))
            p, _ = gpu_cases.derive_spec("quant_gemm_fp8.rf", "bf16", None, d)
            self.assertTrue(p.endswith("examples/quant_gemm_fp8.rf"))   # sw stays f32, nothing changes
            p, _ = gpu_cases.derive_spec("layernorm.rf", "bf16", None, d)
            self.assertEqual(_read(p).count(": bf16"), 4)

    def test_compare_sizes_name_real_examples(self):
        for name, sizes in gpu_cases.COMPARE_SIZES.items():
            t = gpu_cases.read_spec(os.path.join(REPO, "examples", name + ".rf"))
            self.assertEqual(set(sizes), {n for n, _ in gpu_cases.spec_sizes(t)}, name)


class Cases(unittest.TestCase):
    def test_cases(self):
        for quick in (False, True):
            cs = gpu_cases.bench_cases(quick)
            ids = [c["id"] for c in cs]
            self.assertEqual(len(ids), len(set(ids)))
            self.assertEqual({c["workload"] for c in cs}, set(gpu_cases.WORKLOAD_ORDER))
            phase1 = [c["workload"] for c in cs if c["phase"] == 1]
            self.assertEqual(set(phase1), set(gpu_cases.WORKLOAD_ORDER))
            self.assertEqual([c["phase"] for c in cs], sorted(c["phase"] for c in cs))  # phase 1 first
            for c in cs:
                m = gpu_cases.model(c)
                self.assertGreater(m["bytes"], 0)
                self.assertGreater(m["flops"], 0)
                self.assertTrue(os.path.isfile(os.path.join(REPO, "examples", c["spec"])), c["spec"])
                for i in c["impls"]:
                    self.assertIn(i, gpu_cases.IMPL_ORDER)
                    self.assertIn(i, gpu_cases.IMPL_NOTES)
                t = gpu_cases.read_spec(os.path.join(REPO, "examples", c["spec"]))
                self.assertEqual(set(gpu_cases.size_arg(c["sizes"]).replace("=", ",").split(",")[::2]),
                                 {n for n, _ in gpu_cases.spec_sizes(t)}, c["id"])

    def test_gpu_sizes_of_workloads_md(self):
        cs = gpu_cases.bench_cases()
        att = {(c["sizes"]["B"], c["sizes"]["H"], c["sizes"]["N"], c["sizes"]["D"], c["variant"])
               for c in cs if c["workload"] == "attention"}
        for shape in [(32, 12, 512, 64), (8, 16, 2048, 128), (2, 16, 8192, 128), (1, 16, 16384, 128)]:
            for v in ("", "causal"):
                self.assertIn(shape + (v,), att)
        dec = {(c["sizes"]["B"], c["sizes"]["N"]) for c in cs if c["workload"] == "decode_gqa"}
        self.assertEqual(dec, {(1, 4096), (1, 32768), (64, 4096), (64, 32768)})

    def test_model(self):
        c = gpu_cases.make_case("attention", {"B": 1, "H": 16, "M": 16384, "N": 16384, "D": 128}, "bf16")
        m = gpu_cases.model(c)
        self.assertEqual(m["flops"], 4.0 * 16 * 16384 * 16384 * 128)         # FlashAttention's count
        self.assertEqual(m["bytes"], 4 * 16 * 16384 * 128 * 2)
        cc = gpu_cases.make_case("attention", {"B": 1, "H": 16, "N": 16384, "D": 128}, "bf16", "causal")
        self.assertEqual(gpu_cases.model(cc)["flops"], m["flops"] / 2)
        mla = gpu_cases.make_case("mla_decode", {"B": 2, "H": 128, "N": 1000, "Dk": 576, "Dv": 512}, "bf16")
        self.assertEqual(gpu_cases.model(mla)["flops"], 2.0 * 2 * 128 * 1000 * (576 + 512))
        self.assertEqual(gpu_cases.model(mla)["bytes"], (2 * 128 * 576 + 2 * 1000 * 576 + 2 * 128 * 512) * 2)
        q = gpu_cases.make_case("quant_gemm_fp8", {"M": 16, "N": 4096, "K": 4096}, "bf16")
        self.assertEqual(gpu_cases.model(q)["bytes"], 16 * 4096 * 2 + 4096 * 4096 + 4096 * 4 + 16 * 4096 * 2)
        self.assertEqual(gpu_cases.model(q)["peak"], "fp8")
        s = gpu_cases.make_case("softmax", {"R": 4, "C": 8}, "bf16")
        self.assertEqual(gpu_cases.model(s)["bytes"], 2 * 4 * 8 * 2)
        self.assertIsNone(gpu_cases.model(s)["peak"])

    def test_derived_and_floor(self):
        limits = {"copy_gbps": 4000.0, "bf16_tflops": 800.0}
        s = gpu_cases.make_case("softmax", {"R": 8192, "C": 8192}, "f32")
        fl = gpu_cases.floor_ms(s, limits)
        self.assertAlmostEqual(fl, 2 * 8192 * 8192 * 4 / 4000e9 * 1e3)
        d = gpu_cases.derived(s, 2 * fl, limits)
        self.assertEqual(d["bound"], "memory")
        self.assertAlmostEqual(d["roofline"], 0.5)
        self.assertAlmostEqual(d["frac_bw"], 0.5)
        self.assertNotIn("frac_peak", d)                 # element-wise: no compute peak
        a = gpu_cases.make_case("attention", {"B": 8, "H": 16, "M": 2048, "N": 2048, "D": 128}, "bf16")
        d = gpu_cases.derived(a, 1.0, limits)
        self.assertEqual(d["bound"], "compute")
        self.assertAlmostEqual(d["tflops"], 4.0 * 8 * 16 * 2048 * 2048 * 128 / 1e-3 / 1e12)
        self.assertAlmostEqual(d["frac_peak"], d["tflops"] / 800.0)
        self.assertEqual(gpu_cases.peak_of(limits, "fp8")[0], 1600.0)    # fallback: 2x bf16
        self.assertEqual(gpu_cases.peak_of(dict(limits, fp8_tflops=1300.0), "fp8")[0], 1300.0)
        self.assertEqual(gpu_cases.derived(s, 1.0, {})["gbps"], 2 * 8192 * 8192 * 4 / 1e-3 / 1e9)
        self.assertIsNone(gpu_cases.floor_ms(s, {}))

    def test_unfused_wanted(self):
        a = gpu_cases.make_case("attention", {"B": 1, "H": 1, "M": 2, "N": 2, "D": 2}, "bf16")
        self.assertTrue(gpu_cases.unfused_wanted(a, True))
        self.assertFalse(gpu_cases.unfused_wanted(a, False))
        s = gpu_cases.make_case("softmax", {"R": 1, "C": 2}, "f32")
        self.assertTrue(gpu_cases.unfused_wanted(s, False))


class Json(unittest.TestCase):
    def test_parse_json(self):
        self.assertEqual(gpu_bench.parse_json('{"a": 1}'), {"a": 1})
        self.assertEqual(gpu_bench.parse_json('jit\n{"a": 1}\n{"b": 2}\n'), {"b": 2})
        self.assertEqual(gpu_bench.parse_json('log line\n{\n  "a": {"x": 1},\n  "t": 2\n}\n'),
                         {"a": {"x": 1}, "t": 2})
        self.assertIsNone(gpu_bench.parse_json("no json { here"))
        self.assertIsNone(gpu_bench.parse_json(""))
        self.assertIsNone(gpu_bench.parse_json("[1, 2]"))

    def test_error_line(self):
        self.assertEqual(gpu_bench.error_line("warming\nx.rf:1:2: error: bad\n"), "x.rf:1:2: error: bad")
        self.assertEqual(gpu_bench.error_line("\n  first\nsecond"), "first")

    def test_formats(self):
        self.assertEqual(gpu_bench.fmt_num(None), "—")
        self.assertEqual(gpu_bench.fmt_num(0), "0")
        self.assertEqual(gpu_bench.fmt_num(1234.5), "1.23e+03")
        self.assertEqual(gpu_bench.fmt_num(0.0123456), "0.0123")
        self.assertEqual(gpu_bench.fmt_ratio(1.234), "1.23x")
        self.assertEqual(gpu_bench.fmt_ratio(0.001234), "0.0012x")
        self.assertEqual(gpu_bench.fmt_pct(0.456), "46%")


class Redfuse(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        self.log = os.path.join(self.d, "log")
        os.environ["FAKE_LOG"] = self.log
        os.environ.pop("FAKE_FAIL", None)
        self.exe = _exe(self.d, FAKE_REDFUSE)

    def tearDown(self):
        os.environ.pop("FAKE_FAIL", None)
        os.environ.pop("FAKE_NODEV", None)

    def test_probe_and_records(self):
        rf = gpu_bench.Redfuse(self.exe, "cuda", 0.3)
        self.assertTrue(rf.available, rf.reason)
        self.assertIn("--load", rf.flags)
        case = gpu_cases.make_case("moe_routing", {"T": 16, "E": 8, "k": 2}, "f32")
        cmd = rf.command("/x/moe.rf", case, "/tmp/npy", unfused=True)
        self.assertEqual(cmd[1:6], ["bench", "/x/moe.rf", "--target", "cuda", "--size"])
        self.assertIn("T=16,E=8", cmd)
        self.assertEqual(cmd[cmd.index("--budget") + 1], "0.3")
        self.assertEqual(cmd[cmd.index("--load") + 1], "/tmp/npy")
        self.assertNotIn("--no-unfused", cmd)
        recs = rf.records(case, cmd, "examples/moe_routing.rf", "inputs")
        self.assertEqual(recs["redfuse"]["status"], "ok")
        self.assertEqual(recs["redfuse"]["time_ms"], 1.25)
        self.assertEqual(recs["redfuse"]["rf_strategy"], "multi_segment")
        self.assertEqual(recs["redfuse-unfused"]["time_ms"], 2.5)       # the nested form
        cmd = rf.command("/x/moe.rf", case, None, unfused=False)
        self.assertIn("--no-unfused", cmd)
        self.assertNotIn("--load", cmd)
        recs = rf.records(case, cmd, "s", "n")                           # pretty-printed JSON
        self.assertEqual(recs["redfuse"]["time_ms"], 0.5)
        self.assertEqual(recs["redfuse-unfused"]["status"], "skipped")
        os.environ["FAKE_FAIL"] = "1"
        recs = rf.records(case, cmd, "s", "n")
        self.assertEqual(recs["redfuse"]["status"], "failed")
        self.assertIn("exit 3", recs["redfuse"]["reason"])
        self.assertIn("error: boom", recs["redfuse"]["reason"])

    def test_unavailable(self):
        rf = gpu_bench.Redfuse(os.path.join(self.d, "missing"), "cuda", 0.3)
        self.assertFalse(rf.available)
        self.assertIn("not built", rf.reason)
        os.environ["FAKE_FAIL"] = "1"
        rf = gpu_bench.Redfuse(self.exe, "cuda", 0.3)
        self.assertFalse(rf.available)
        self.assertIn("tiny softmax", rf.reason)

    def test_check_phase(self):
        work = os.path.join(self.d, "work")
        args = gpu_bench.parse_args(["check", "--target", "cuda", "--redfuse", self.exe, "--work", work,
                                     "--jobs", "4"])
        os.makedirs(work)
        log = _quiet(gpu_bench.phase_check, args)
        self.assertRegex(log, r"check: \d+ of \d+ ok")
        res = json.loads(_read(os.path.join(work, "check.json")))
        by = {(r["example"], r["set"]): r for r in res["runs"]}
        n_examples = len([p for p in os.listdir(os.path.join(REPO, "examples")) if p.endswith(".rf")])
        self.assertEqual(res["total"], 3 * n_examples)
        self.assertEqual(by[("softmax.rf", "default")]["status"], "ok")
        self.assertEqual(by[("softmax.rf", "default")]["sizes"], {"R": 5, "C": 37})
        self.assertEqual(by[("variance.rf", "2v+1")]["status"], "wrong")
        self.assertIn("mu", by[("variance.rf", "2v+1")]["reason"])
        err = by[("attention.rf", "multi-tile")]
        self.assertEqual(err["status"], "error")
        self.assertIn("not available yet", err["reason"])
        self.assertIn("--size", err["command"])
        md = gpu_bench.render_checks(res)
        self.assertIn("| softmax.rf | ok", md)
        self.assertIn("**wrong**", md)

    def test_target_unavailable(self):
        work = os.path.join(self.d, "work3")
        os.makedirs(work)
        args = gpu_bench.parse_args(["check", "--target", "cuda", "--redfuse", self.exe, "--work", work])
        self.assertEqual(gpu_bench.target_unavailable(args), "")
        os.environ["FAKE_NODEV"] = "1"
        self.assertIn("no CUDA driver/device", gpu_bench.target_unavailable(args))
        self.assertNotIn(REPO, gpu_bench.target_unavailable(args))          # paths made relative
        log = _quiet(gpu_bench.phase_check, args)
        self.assertIn("is unavailable", log)
        res = json.loads(_read(os.path.join(work, "check.json")))
        self.assertTrue(all(r["status"] == "unavailable" for r in res["runs"]))
        self.assertTrue(gpu_bench.render_checks(res).startswith("all %d runs" % res["total"]))

    def test_deadline_skips(self):
        work = os.path.join(self.d, "work2")
        os.makedirs(work)
        args = gpu_bench.parse_args(["check", "--target", "cpu", "--redfuse", self.exe, "--work", work,
                                     "--deadline", "1"])
        _quiet(gpu_bench.phase_check, args)
        res = json.loads(_read(os.path.join(work, "check.json")))
        self.assertTrue(all(r["status"] == "skipped" for r in res["runs"]))


def _bench_fixture():
    a = gpu_cases.make_case("attention", {"B": 8, "H": 16, "M": 2048, "N": 2048, "D": 128}, "bf16", "",
                            gpu_cases.ATT_IMPLS, 1)
    s = gpu_cases.make_case("softmax", {"R": 4, "C": 8}, "f32", phase=1)
    limits = {"copy_gbps": 4000.0, "bf16_tflops": 800.0, "name": "Fake GPU", "device": "cuda",
              "torch": "x", "sms": 132, "copy_bytes": 2 << 30, "matmul_n": 8192}
    recs = []

    def rec(case, impl, t=None, **kw):
        r = dict(kw, case=case["id"], workload=case["workload"], impl=impl)
        if t is not None:
            r.update(status="ok", time_ms=t)
            r.update(gpu_cases.derived(case, t, limits))
        recs.append(r)

    rec(a, "redfuse", 2.0)
    rec(a, "redfuse-unfused", status="skipped", reason="not timed (--no-unfused)")
    rec(a, "sdpa-flash", 1.0, check="ok 1e-3")
    rec(a, "sdpa-cudnn", status="failed", reason="RuntimeError: no | cudnn")
    rec(a, "flex", 4.0, check="(!) 5e-1")
    rec(s, "redfuse", status="unavailable", reason="no CUDA driver/device")
    rec(s, "torch-eager", 0.5, check="ok 0")
    cases = [dict(s, floor_ms=gpu_cases.floor_ms(s, limits)), dict(a, floor_ms=gpu_cases.floor_ms(a, limits))]
    return {"target": "cuda", "quick": False, "cases": cases, "records": recs, "limits": limits,
            "skipped_cases": [{"id": "x[1]", "reason": "time budget (3 s left)"}],
            "smi": {"before": {"clocks.sm": "1980", "clocks.max.sm": "1980"}, "after": {"error": "nope"}},
            "impl_notes": gpu_cases.IMPL_NOTES, "redfuse": {"available": True}}


class Table(unittest.TestCase):
    def test_rows(self):
        rows = gpu_bench.table_rows(_bench_fixture())
        self.assertEqual(rows[0]["case"], "attention[B=8,H=16,M=2048,N=2048,D=128] bf16")   # workload order
        self.assertEqual([r["impl"] for r in rows[:5]],
                         ["redfuse", "redfuse-unfused", "sdpa-flash", "sdpa-cudnn", "flex"])
        by = {r["impl"]: r for r in rows[:5]}
        self.assertEqual(by["redfuse"]["ratio"], "best peer sdpa-flash: 0.50x")
        self.assertEqual(by["flex"]["ratio"], "2.00x")
        self.assertEqual(by["sdpa-flash"]["ratio"], "0.50x")
        self.assertTrue(by["sdpa-cudnn"]["time"].startswith("failed: RuntimeError"))
        self.assertEqual(by["redfuse-unfused"]["time"], "skipped: not timed (--no-unfused)")
        self.assertTrue(by["redfuse"]["peak"].endswith("cmp"))
        self.assertEqual(rows[1]["case"], "")                                     # once per case
        sm = [r for r in rows if r["impl"] == "torch-eager"][0]
        self.assertEqual(sm["ratio"], "—")                                        # no redfuse time
        self.assertTrue(sm["peak"].endswith("mem"))
        md = gpu_bench.render_table(rows)
        lines = md.splitlines()
        self.assertEqual(len(lines), 2 + len(rows))
        self.assertTrue(all(l.count("|") == len(gpu_bench.COLUMNS) + 1 for l in lines))   # '|' escaped

    def test_report(self):
        with tempfile.TemporaryDirectory() as d:
            work, out = os.path.join(d, "w"), os.path.join(d, "o")
            os.makedirs(work)
            gpu_bench.write_json(os.path.join(work, "bench.json"), _bench_fixture())
            gpu_bench.write_json(os.path.join(work, "build.json"), {"status": "ok", "seconds": 31})
            gpu_bench.write_json(os.path.join(work, "compare.json"), {
                "ok": 1, "total": 2, "runs": [
                    {"example": "softmax.rf", "sizes": {"R": 3}, "status": "ok",
                     "outputs": [{"output": "Y", "metric": "rel L2", "error": 1e-7, "ok": True}]},
                    {"example": "attention.rf", "sizes": {}, "status": "error", "reason": "exit 1: no device"}]})
            with open(os.path.join(work, "phases.json"), "w") as f:
                f.write('{"build": 31, "bench": 200}')
            args = gpu_bench.parse_args(["report", "--work", work, "--out", out])
            self.assertIn("| case |", _quiet(gpu_bench.phase_report, args))
            self.assertEqual(sorted(os.listdir(out)), ["gpu_results.json", "table.md"])
            res = json.loads(_read(os.path.join(out, "gpu_results.json")))
            self.assertEqual(res["schema"], gpu_bench.SCHEMA)
            self.assertEqual(len(res["bench"]["records"]), 7)
            self.assertEqual(res["phases_s"], {"build": 31, "bench": 200})
            self.assertEqual(res["machine"]["limits"]["copy_gbps"], 4000.0)
            md = _read(os.path.join(out, "table.md"))
            gpu_bench.write_json(os.path.join(work, "bench.json"), {"target": "cuda", "error": "no GPU"})
            _quiet(gpu_bench.phase_report, args)
            self.assertIn("did not run: no GPU", _read(os.path.join(out, "table.md")))
            for s in ("Fake GPU", "copy 4000 GB/s", "Skipped cases: x[1] (time budget (3 s left))",
                      "| attention.rf |  | error | exit 1: no device |", "(check phase did not run)",
                      "SM 1980/1980 MHz", "nvidia-smi after: nope", "redfuse build: ok (31 s)"):
                self.assertIn(s, md)


class Args(unittest.TestCase):
    def test_defaults(self):
        a = gpu_bench.parse_args(["bench", "--work", "/tmp/x"])
        self.assertEqual((a.target, a.jobs, a.case_budget, a.impl_budget), ("cuda", 8, 45.0, 0.3))
        a = gpu_bench.parse_args(["bench", "--work", "/tmp/x", "--target", "cpu", "--quick"])
        self.assertEqual((a.impl_budget, a.rf_budget, a.case_budget), (0.05, 0.05, 150.0))
        a = gpu_bench.parse_args(["bench", "--work", "/tmp/x", "--quick", "--case-budget", "9"])
        self.assertEqual((a.case_budget, a.impl_budget), (9.0, 0.05))
        with open(os.devnull, "w") as null:
            old, sys.stderr = sys.stderr, null
            try:
                with self.assertRaises(SystemExit):
                    gpu_bench.parse_args(["report", "--work", "/tmp/x"])            # needs --out
                with self.assertRaises(SystemExit):
                    gpu_bench.parse_args(["bench", "--work", "/tmp/x", "--target", "rocm"])
            finally:
                sys.stderr = old

    def test_left(self):
        a = gpu_bench.parse_args(["check", "--work", "/tmp/x"])
        self.assertEqual(gpu_bench.left(a), float("inf"))
        a.deadline = 1.0
        self.assertLess(gpu_bench.left(a), 0)

    def test_run_sh_arguments(self):
        sh = os.path.join(HERE, "run.sh")
        p = subprocess.run(["bash", sh, "--help"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("--target cpu --quick", p.stdout)
        p = subprocess.run(["bash", sh, "--bogus"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        p = subprocess.run(["bash", sh, "--target", "rocm"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        p = subprocess.run(["bash", "-n", sh], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run(["bash", "-n", os.path.join(HERE, "prepare.sh")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)


@unittest.skipUnless(HAVE_TORCH, "torch not importable")
class TorchOnCpu(unittest.TestCase):
    dev = None

    @classmethod
    def setUpClass(cls):
        cls.dev = torch.device("cpu")

    def test_inputs_reference_and_eager_agree(self):
        for c in gpu_cases.bench_cases(quick=True):
            inp = gpu_torch.inputs(c, self.dev)
            t = gpu_cases.read_spec(os.path.join(REPO, "examples", c["spec"]))
            self.assertEqual(set(inp), set(gpu_cases.spec_inputs(t)), c["id"])
            ref = gpu_torch.reference(c, inp)
            outs = gpu_torch.eager_fn(c)(inp)
            err, detail = gpu_torch.compare_outputs(c, outs, ref)
            self.assertLessEqual(err, gpu_torch.tolerance(c), (c["id"], detail))
            again = gpu_torch.inputs(c, self.dev)                   # seeded by the case id
            for k in inp:
                self.assertTrue(torch.equal(inp[k].float(), again[k].float()))

    def test_wrong_output_is_caught(self):
        c = gpu_cases.make_case("softmax", {"R": 4, "C": 16}, "f32")
        inp = gpu_torch.inputs(c, self.dev)
        ref = gpu_torch.reference(c, inp)
        err, _ = gpu_torch.compare_outputs(c, (ref[0] * 1.01,), ref)
        self.assertGreater(err, gpu_torch.tolerance(c))
        err, _ = gpu_torch.compare_outputs(c, (ref[0] * float("nan"),), ref)
        self.assertNotEqual(err, err)                               # NaN never passes
        self.assertFalse(err <= gpu_torch.tolerance(c))

    def test_moe_ties_and_wrong_indices(self):
        c = gpu_cases.make_case("moe_routing", {"T": 2, "E": 4, "k": 2}, "f32")
        X = torch.tensor([[1.0, 3.0, 3.0, 0.0], [0.0, 1.0, 2.0, 5.0]])
        ref = gpu_torch.reference(c, {"X": X})
        W, I = ref[0], ref[1]
        swapped = I.clone()
        swapped[0] = torch.tensor([2, 1])                            # a tie in another order: fine
        self.assertEqual(gpu_torch.compare_outputs(c, (W, swapped), ref)[0], 0.0)
        bad = I.clone()
        bad[1, 0] = 0
        self.assertGreater(gpu_torch.compare_outputs(c, (W, bad), ref)[0], 1e-3)

    def test_npy_round_trip(self):
        import numpy as np
        c = gpu_cases.make_case("quant_gemm_fp8", {"M": 4, "N": 8, "K": 16}, "bf16")
        inp = gpu_torch.inputs(c, self.dev)
        with tempfile.TemporaryDirectory() as d:
            n = gpu_torch.save_npy(inp, d)
            self.assertEqual(n, gpu_torch.npy_bytes(inp))
            for k, t in inp.items():
                a = np.load(os.path.join(d, k + ".npy"))
                self.assertEqual(a.dtype, np.float32)
                self.assertTrue(torch.equal(torch.from_numpy(a), t.float()))      # exact

    def test_example_references(self):
        """The float64 references agree with the torch ops for the shared cases, and every example
        has one."""
        g = torch.Generator().manual_seed(0)
        X = torch.randn(3, 50, generator=g, dtype=torch.float64)
        r = gpu_torch.example_reference("softmax", {"X": X}, {})
        self.assertTrue(torch.allclose(r["Y"], torch.softmax(X, -1)))
        r = gpu_torch.example_reference("logsumexp", {"X": X}, {})
        self.assertTrue(torch.allclose(r["lse"], torch.logsumexp(X, -1)))
        Q, K, V = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
        import torch.nn.functional as F
        r = gpu_torch.example_reference("attention_causal", {"Q": Q, "K": K, "V": V}, {})
        self.assertTrue(torch.allclose(r["O"], F.scaled_dot_product_attention(Q, K, V, is_causal=True)))
        r = gpu_torch.example_reference("attention_sliding_window", {"Q": Q, "K": K, "V": V}, {"W": 5})
        self.assertTrue(torch.allclose(r["O"], F.scaled_dot_product_attention(Q, K, V, is_causal=True)))
        for name in gpu_cases.COMPARE_SIZES:
            self.assertIn(name + ".rf", os.listdir(os.path.join(REPO, "examples")))

    def test_compare_saved(self):
        import numpy as np
        g = torch.Generator().manual_seed(1)
        X = torch.randn(4, 30, generator=g)
        P = torch.softmax(X.double(), -1)
        W, I = torch.topk(P, 3, -1)
        saved = {"X": X.numpy(), "W": W.float().numpy(), "I": I.int().numpy()}
        rows = gpu_torch.compare_saved("moe_routing", saved, {"T": 4, "E": 30}, {"W": None, "I": None}, 3,
                                       self.dev)
        self.assertTrue(all(r["ok"] for r in rows), rows)
        saved["I"] = np.zeros_like(saved["I"])
        rows = {r["output"]: r for r in gpu_torch.compare_saved("moe_routing", saved, {}, {}, 3, self.dev)}
        self.assertFalse(rows["I"]["ok"])
        del saved["W"]
        rows = {r["output"]: r for r in gpu_torch.compare_saved("moe_routing", saved, {}, {}, 3, self.dev)}
        self.assertEqual(rows["W"]["metric"], "missing")

    def test_timer_and_limits(self):
        timer = gpu_bench.Timer(self.dev)
        x = torch.randn(64, 64)
        st = timer.time(lambda inp: (inp @ inp,), x, 0.01, min_reps=5, max_reps=7)
        self.assertTrue(5 <= st["reps"] <= 7)
        self.assertLessEqual(st["min_ms"], st["time_ms"])
        self.assertLessEqual(st["time_ms"], st["p90_ms"] + 1e-12)


if __name__ == "__main__":
    unittest.main(verbosity=1)
