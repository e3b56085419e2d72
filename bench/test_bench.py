#!/usr/bin/env python3
"""Self-tests of the benchmark harness that need neither torch, TVM nor a built redfuse (plain
python3): the case list, the floor model, the redfuse hook (spec variants, the compile keywords of
each row, the probe; through a stand-in `redfuse` module), the driver (through a stand-in worker),
and the table rendering.

    python3 bench/test_bench.py
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model  # noqa: E402
import peers  # noqa: E402
import ratios  # noqa: E402
import redfuse_hook  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402


class FakeKernel:
    """Stand-in for redfuse.Kernel: inputs by name, an analysis, outputs from the inputs."""

    def __init__(self, spec, kw):
        self.spec, self.kw = spec, kw
        self.inputs = [types.SimpleNamespace(name="X")]
        self.analysis = {"chains": [{"fused": True, "strategy": kw.get("strategy", "incremental")},
                                    {"fused": False}, {"fused": False, "strategy": "exact_prepass"}]}
        self.calls = []

    def __call__(self, **args):
        self.calls.append(args)
        return args["X"] * 2


def fake_redfuse(keywords=True, fail=None):
    """A stand-in `redfuse` module; keywords=False: redfuse.compile as before unfused/strategy/threads."""
    mod = types.SimpleNamespace(__version__="9.9", __file__=os.path.join(HERE, "..", "python", "redfuse",
                                                                           "__init__.py"), compiled=[])
    if keywords:
        def compile(spec, target="auto", name=None, sizes=None, *, unfused=False, strategy=None, threads=None):
            if fail:
                raise fail
            kw = {k: v for k, v in (("unfused", unfused), ("strategy", strategy), ("threads", threads)) if v}
            mod.compiled.append((spec, target, sizes, kw))
            return FakeKernel(spec, kw)
    else:
        def compile(spec, target="auto", name=None, sizes=None):
            if fail:
                raise fail
            mod.compiled.append((spec, target, sizes, {}))
            return FakeKernel(spec, {})
    mod.compile = compile
    return mod


class Cases(unittest.TestCase):
    def test_ids_unique_and_models_exist(self):
        for quick in (False, True):
            cs = workloads.cases(quick)
            ids = [c["id"] for c in cs]
            self.assertEqual(len(ids), len(set(ids)))
            for c in cs:
                m = model.model(c)
                self.assertGreater(m["bytes"], 0)
                self.assertGreater(m["flops"], 0)
                self.assertTrue(os.path.exists(os.path.join(HERE, "..", "examples", c["spec"])), c["spec"])

    def test_full_sizes_match_workloads_md(self):
        cs = workloads.cases(False)
        att = [c for c in cs if c["workload"] == "attention"]
        self.assertEqual(len(att), 16)  # L x D x dtype x causal
        moe = [c for c in cs if c["workload"] == "moe_routing"]
        self.assertEqual(len(moe), 2 * 4 * 3)
        dec = [c["sizes"] for c in cs if c["workload"] == "decode_gqa"]
        self.assertEqual(dec, [{"B": 4, "Hq": 32, "Hkv": 8, "N": 8192, "D": 128},
                               {"B": 4, "Hq": 64, "Hkv": 8, "N": 8192, "D": 128}])

    def test_floor(self):
        c = workloads._case("softmax", "softmax.rf", {"R": 4096, "C": 1024})
        lim = {"mem_GBps": 40.0, "fp32_GFLOPs": 500.0}
        d = model.derived(c, 1.0, lim)
        self.assertEqual(d["bytes"], 2 * 4096 * 1024 * 4)
        self.assertEqual(d["bound"], "memory")
        self.assertAlmostEqual(d["floor_ms"], d["bytes"] / 40e9 * 1e3, places=6)
        self.assertAlmostEqual(d["roofline"], d["floor_ms"] / 1.0, places=3)
        causal = workloads._case("attention", "a", {"B": 1, "H": 8, "N": 2048, "D": 128}, "bf16", "causal")
        full = workloads._case("attention", "a", {"B": 1, "H": 8, "M": 2048, "N": 2048, "D": 128}, "bf16")
        self.assertAlmostEqual(model.model(causal)["flops"] / model.model(full)["flops"], 0.5, places=3)
        self.assertEqual(model.model(full)["peak"], "bf16")


    def test_a_kernel_that_only_reads_floors_at_the_read_bandwidth(self):
        # The Zen 4 VM's figures: a copy with streamed stores moves 64.8 GB/s, half of it reads; a pure
        # read 36.1. A variance reads its rows and writes two numbers a row: its floor is the read's.
        lim = {"mem_GBps": 64.8, "mem_read_GBps": 36.1, "fp32_GFLOPs": 230.0}
        var = workloads._case("variance", "variance.rf", {"R": 4096, "C": 8192})
        m = model.model(var)
        self.assertEqual(m["read_bytes"], 4096 * 8192 * 4)
        self.assertEqual(m["bytes"], m["read_bytes"] + m["write_bytes"])
        d = model.derived(var, 5.0, lim)
        self.assertAlmostEqual(d["floor_ms"], m["read_bytes"] / 36.1e9 * 1e3, places=6)
        self.assertAlmostEqual(d["frac_mem_bw"], d["floor_ms"] / 5.0, places=3)
        # A softmax reads as much as it writes: the copy's total decides (64.8 / 2 < 36.1), as before.
        sm = workloads._case("softmax", "softmax.rf", {"R": 4096, "C": 8192})
        d = model.derived(sm, 5.0, lim)
        self.assertAlmostEqual(d["floor_ms"], 2 * 4096 * 8192 * 4 / 64.8e9 * 1e3, places=6)
        self.assertAlmostEqual(d["frac_mem_bw"], d["GBps"] / 64.8, places=3)
        # Limits written before mem_read_GBps: limits_of takes the all-core read of the same file.
        old = {"limits": {"mem_GBps": 64.8, "fp32_GFLOPs": 230.0},
               "bandwidth_GBps": {"all_cores": {"read": 36.1, "copy_nt": 64.8}}}
        self.assertEqual(model.limits_of(old)["mem_read_GBps"], 36.1)
        self.assertEqual(model.derived(var, 5.0, model.limits_of(old))["floor_ms"], model.derived(var, 5.0, lim)["floor_ms"])
        # No read figure at all: the total alone, as before.
        self.assertAlmostEqual(model.derived(var, 5.0, {"mem_GBps": 64.8, "fp32_GFLOPs": 230.0})["floor_ms"],
                               m["bytes"] / 64.8e9 * 1e3, places=6)
        for c in workloads.cases(False):
            m = model.model(c)
            self.assertGreater(m["read_bytes"], 0, c["id"])
            self.assertGreater(m["write_bytes"], 0, c["id"])

    def test_the_bandwidth_is_the_larger_of_two_measurements(self):
        # Before the workloads the host moved 48.2 GB/s, after them 64.8: the floors use 64.8, and the
        # records measured in between are rederived against it.
        def machine(copy_nt, read, one):
            return {"bandwidth_GBps": {"all_cores": {"copy": 33.0, "read": read, "copy_nt": copy_nt},
                                       "one_core": {"copy": 20.0, "read": one, "copy_nt": 30.0}},
                    "limits": {"mem_GBps": copy_nt, "fp32_GFLOPs": 230.0, "mem_read_GBps": read}}
        before, after = machine(48.2, 30.0, 20.6), machine(64.8, 29.0, 17.7)
        m = model.merge_bandwidth(before, after)
        self.assertEqual(m["limits"]["mem_GBps"], 64.8)
        self.assertEqual(m["limits"]["mem_read_GBps"], 30.0)   # each kind its own larger figure
        self.assertEqual(m["limits"]["mem_read_GBps_one_core"], 20.6)
        self.assertEqual(m["limits"]["fp32_GFLOPs"], 230.0)
        self.assertEqual(m["bandwidth_GBps_runs"][1]["all_cores"]["copy_nt"], 64.8)
        self.assertEqual(before["limits"]["mem_GBps"], 48.2)   # the inputs are not changed
        sm = workloads._case("softmax", "softmax.rf", {"R": 4096, "C": 8192})
        rec = dict(workload="softmax", case=sm["id"], sizes=sm["sizes"], dtype="f32", variant="", impl="redfuse",
                   status="ok", time_ms=5.0, **model.derived(sm, 5.0, before["limits"]))
        self.assertGreater(rec["roofline"], 1.0)               # 268 MB in 5 ms against 48.2 GB/s
        res = model.rederive({"records": [rec, dict(impl="x", status="failed")], "machine": m})
        b = 4096 * 8192 * 4   # read once, written once: the copy at 64.8 or the reads alone at 30.0
        self.assertAlmostEqual(res["records"][0]["roofline"], max(2 * b / 64.8e9, b / 30.0e9) / 5e-3, places=3)
        self.assertEqual(res["records"][1], dict(impl="x", status="failed"))
        lines = report.machine_lines({"machine": dict(m, cpu="c", threads=2)})
        self.assertIn("larger of two measurements, before and after the workloads (all cores, largest figure: "
                      "48.2 then 64.8 GB/s)", "\n".join(lines))
    def test_floor_uses_the_fastest_unit(self):
        # A Xeon with AMX (synthetic figures): the tiles are 10x the dot products. A floor at the dot
        # peak is what let PyTorch show 897% of "peak" (issue 13).
        att = workloads._case("attention", "a", {"B": 1, "H": 8, "M": 4096, "N": 4096, "D": 128}, "bf16")
        q8 = workloads._case("quant_gemm_int8", "q", {"M": 4096, "N": 4096, "K": 4096}, "bf16")
        amx = {"mem_GBps": 200.0, "fp32_GFLOPs": 3000.0,
               "bf16_GFLOPs": 60000.0, "bf16_unit": "amx", "bf16_dot_GFLOPs": 6000.0, "bf16_amx_GFLOPs": 60000.0,
               "int8_GOPs": 120000.0, "int8_unit": "amx", "int8_dot_GOPs": 12000.0, "int8_amx_GOPs": 120000.0}
        for case, peak in ((att, 60000.0), (q8, 120000.0)):
            m = model.model(case)
            d = model.derived(case, 100.0, amx)
            self.assertEqual((d["bound"], d["peak_unit"]), ("compute", "amx"), case["id"])
            self.assertAlmostEqual(d["floor_ms"], m["flops"] / (peak * 1e9) * 1e3, places=5)
            self.assertAlmostEqual(d["frac_peak"], round(m["flops"] / 0.1 / 1e9 / peak, 4))
        # A headline figure from the slower unit (hand-written limits): the per-unit AMX figure still wins.
        dot_headline = dict(amx, bf16_GFLOPs=6000.0, bf16_unit="avx512_bf16")
        self.assertEqual(model.peak_and_unit(dot_headline, "bf16"), (60000.0, "amx"))
        # machine.json before the AMX probes: the headline was the dot product, and it is still used.
        old = {"mem_GBps": 40.0, "fp32_GFLOPs": 110.0, "bf16_GFLOPs": 230.0, "int8_GOPs": 450.0}
        self.assertEqual(model.peak_and_unit(old, "bf16"), (230.0, "avx512_bf16"))
        self.assertEqual(model.peak_and_unit(old, "int8"), (450.0, "avx512_vnni"))
        self.assertEqual(model.peak_and_unit(old, "fp32"), (110.0, "fp32_fma"))
        # No bf16 unit, or one slower than the FMAs: the floor is at the FP32 peak (never below it).
        self.assertEqual(model.peak_and_unit(dict(old, bf16_GFLOPs=None), "bf16"), (110.0, "fp32_fma"))
        self.assertEqual(model.peak_and_unit(dict(old, bf16_GFLOPs=50.0), "bf16"), (110.0, "fp32_fma"))
        # AVX2 without VNNI (AMD Zen 3): int8 floors at the vpmaddubsw figure, faster than the FMAs.
        avx2 = {"mem_GBps": 35.0, "fp32_GFLOPs": 200.0, "bf16_GFLOPs": None, "int8_GOPs": 390.0,
                "int8_unit": "avx2", "int8_dot_GOPs": None, "int8_avx2_GOPs": 390.0}
        self.assertEqual(model.peak_and_unit(avx2, "int8"), (390.0, "avx2"))
        self.assertEqual(model.peak_and_unit(avx2, "bf16"), (200.0, "fp32_fma"))


class Hook(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.study = [c for c in workloads.cases(True) if c["workload"] == "softmax_fusion_study"][0]

    def test_probe(self):
        st = redfuse_hook.probe(fake_redfuse())
        self.assertTrue(st["available"], st)
        self.assertEqual(st["keywords"], ["unfused", "strategy", "threads"])
        self.assertEqual(st["path"], os.path.join("python", "redfuse"))
        self.assertEqual(redfuse_hook.probe(fake_redfuse(False))["keywords"], [])
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "_redfuse.cpython-311-x86_64-linux-gnu.so"), "wb") as f:
            f.write(b"build")
        rf = fake_redfuse()
        rf.__file__ = os.path.join(d, "__init__.py")
        ext = redfuse_hook.probe(rf)["extension"]
        self.assertEqual((ext["file"], len(ext["sha256"])), ("_redfuse.cpython-311-x86_64-linux-gnu.so", 12))
        self.assertEqual(redfuse_hook.probe(rf)["path"], d)  # outside the repository: absolute
        st = redfuse_hook.probe(fake_redfuse(fail=RuntimeError("no compiler\ncc: not found")))
        self.assertFalse(st["available"])
        self.assertIn("tiny spec (RuntimeError: cc: not found)", st["reason"])
        saved = sys.modules.get("redfuse")
        sys.modules["redfuse"] = None  # import redfuse raises ImportError
        try:
            st = redfuse_hook.probe()
        finally:
            if saved is None:
                del sys.modules["redfuse"]
            else:
                sys.modules["redfuse"] = saved
        self.assertFalse(st["available"])
        self.assertIn("redfuse does not import", st["reason"])

    def test_rows_compile_once_and_call_on_the_inputs(self):
        rf = fake_redfuse()
        c = [c for c in workloads.cases(True) if c["workload"] == "attention" and c["dtype"] == "f32"][0]
        x = 21
        call, info = redfuse_hook.prepare(c, "redfuse", {"X": x, "unused": 0}, self.tmp, 2, rf=rf)
        self.assertEqual(call(), (42,))
        self.assertEqual(call(), (42,))
        self.assertEqual(len(rf.compiled), 1)
        spec, target, sizes, kw = rf.compiled[0]
        self.assertTrue(spec.startswith(os.path.join(self.tmp, "specs")), spec)  # the f32 variant
        self.assertEqual((target, sizes, kw), ("cpu", {"B": 1, "H": 8, "M": 256, "N": 256, "D": 64}, {"threads": 2}))
        self.assertIn("bf16 -> f32", info["spec"])
        self.assertEqual(info["strategy"], "incremental+not fused+exact_prepass (not fused)")
        self.assertEqual(info["threads"], 2)
        self.assertIn("compile_s", info)
        self.assertIn("threads=2", info["api_call"])
        _, info = redfuse_hook.prepare(c, "redfuse-unfused", {"X": x}, self.tmp, 2, rf=rf)
        self.assertEqual(rf.compiled[-1][3], {"unfused": True, "threads": 2})
        self.assertEqual(info["strategy"], "unfused")
        _, info = redfuse_hook.prepare(self.study, "redfuse[multi_pass]", {"X": x}, self.tmp, None, rf=rf)
        self.assertEqual(rf.compiled[-1][3], {"strategy": "multi_pass"})
        self.assertEqual(info["strategy"], "multi_pass+not fused+exact_prepass (not fused)")

    def test_rows_unavailable_before_the_keywords(self):
        rf = fake_redfuse(False)
        c = workloads.cases(True)[0]
        call, info = redfuse_hook.prepare(c, "redfuse", {"X": 1}, self.tmp, 2, rf=rf)
        self.assertEqual(rf.compiled[-1][3], {})  # no threads= to pass: the target's usable CPUs
        self.assertIn("default", info["threads"])
        for impl, kw in (("redfuse-unfused", "unfused="), ("redfuse[incremental]", "strategy=")):
            with self.assertRaises(redfuse_hook.Unavailable) as e:
                redfuse_hook.prepare(c, impl, {"X": 1}, self.tmp, 2, rf=rf)
            self.assertIn("no %s option" % kw, str(e.exception))
        # A keyword in the signature that the extension still refuses:
        rf = fake_redfuse(fail=TypeError("compile(): incompatible keyword 'unfused'"))
        with self.assertRaises(redfuse_hook.Unavailable):
            redfuse_hook.prepare(c, "redfuse-unfused", {"X": 1}, self.tmp, 2, rf=rf)

    def test_spec_variants_parse(self):
        seen = {}
        for c in workloads.cases(False):
            path, desc = redfuse_hook.spec_for(c, self.tmp)
            seen[path] = (c, desc)
        att32 = [d for p, (c, d) in seen.items() if c["workload"] == "attention" and c["dtype"] == "f32"]
        self.assertTrue(all("bf16 -> f32" in d for d in att32))
        q = [d for p, (c, d) in seen.items() if c["workload"] == "quant_gemm_int8"]
        self.assertTrue(all("as declared" in d for d in q), q)  # the f32 scales are not retyped
        k6 = [p for p, (c, d) in seen.items() if c["sizes"].get("k") == 6][0]
        with open(k6) as f:
            self.assertIn("topk(e, 6:", f.read())
        redfuse = os.path.join(HERE, "..", "build", "redfuse")
        if os.access(redfuse, os.X_OK):  # every variant is a valid spec
            for p, (c, d) in seen.items():
                size = ",".join("%s=%d" % kv for kv in redfuse_hook.sizes_for(c).items())
                r = subprocess.run([redfuse, "analyze", p, "--size", size], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, "%s: %s" % (p, r.stderr))


class FakeWorker:
    """Stand-in for peers.Worker: answers 'env' and 'run' without a process, torch or redfuse."""
    runs = []

    def __init__(self, threads, seed, tvm_log):
        pass

    def call(self, msg, timeout):
        if msg[0] == "env":
            return {"python": "3", "torch": "t", "tvm": "unavailable: no tvm",
                    "redfuse": {"available": False, "reason": "redfuse does not import (x)"}}
        FakeWorker.runs.append(msg[2])
        return {"status": "ok", "time_ms": 1.0, "min_ms": 1.0, "reps": 3, "check": {"max_rel_err": 0.0}}

    def restart(self):
        pass

    def close(self):
        pass


class Driver(unittest.TestCase):
    def test_run_with_stand_ins(self):
        out = tempfile.mkdtemp()
        saved, peers.Worker = peers.Worker, FakeWorker
        FakeWorker.runs = []
        try:
            with contextlib.redirect_stdout(io.StringIO()) as log, contextlib.redirect_stderr(io.StringIO()):
                peers.main(["--out", out, "--quick", "--only", "moe_routing"])
        finally:
            peers.Worker = saved
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        rf = [r for r in res["records"] if r["impl"] == "redfuse"]
        self.assertTrue(rf and all(r["status"] == "unavailable" for r in rf))
        self.assertIn("derived (topk 4 -> 2)", rf[0]["spec"])
        self.assertTrue(os.path.exists(os.path.join(out, "specs", "moe_routing.f32-k2.rf")))
        self.assertEqual(set(FakeWorker.runs), {"torch-eager", "torch-compile"})  # tvm: unavailable
        self.assertIn("redfuse: unavailable: redfuse does not import (x)", log.getvalue())
        with open(os.path.join(out, "table.md")) as f:
            self.assertIn("`redfuse`, `redfuse-unfused` — unavailable: redfuse does not import (x)", f.read())


class Report(unittest.TestCase):
    def test_table(self):
        c = workloads.cases(True)[0]
        lim = {"mem_GBps": 40.0, "fp32_GFLOPs": 500.0}
        base = {"workload": c["workload"], "case": c["id"], "sizes": c["sizes"], "dtype": "f32", "variant": ""}
        recs = [dict(base, impl="torch-eager", status="ok", time_ms=2.0, min_ms=0.5, reps=5,
                     check={"max_rel_err": 0.0}, **model.derived(c, 2.0, lim)),
                dict(base, impl="tvm", status="ok", time_ms=1.0, min_ms=1.0, reps=5,
                     check={"max_rel_err": 0.5}, **model.derived(c, 1.0, lim)),
                dict(base, impl="redfuse", status="unavailable", reason="CPU backend not built yet"),
                dict(base, impl="redfuse-unfused", status="unavailable", reason="CPU backend not built yet")]
        res = {"date": "2026-01-01T00:00:00", "host": "h", "records": recs, "machine": {"limits": lim},
               "impl_notes": workloads.IMPL_NOTES, "env": {}, "config": {}}
        t = report.table_md(res)
        self.assertIn("| redfuse | redfuse-unfused | torch-eager | tvm |", t)
        self.assertIn("**1.00", t)                 # fastest in bold
        self.assertIn("(!)", t)                    # tvm's check is flagged
        self.assertIn(" ~", t)                     # eager is noisy (median 4x its min)
        self.assertIn("1. `redfuse`, `redfuse-unfused` — unavailable: CPU backend not built yet", t)

    def test_machine_header_names_cpu_isa_and_units(self):
        c = workloads.cases(True)[0]
        lim = {"mem_GBps": 200.0, "fp32_GFLOPs": 3000.0, "bf16_GFLOPs": 60000.0, "bf16_unit": "amx",
               "int8_GOPs": 12000.0, "int8_unit": "avx512_vnni"}
        machine = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "threads": 112, "limits": lim,
                   "isa": {"avx512f": True, "avx512_bf16": True, "amx_bf16": True, "avx512_fp16": False},
                   "fp32_fma_GFLOPs": {"isa": "avx512", "all_cores": 3000.0, "one_core": 60.0},
                   "bf16_dot_GFLOPs": {"all_cores": 6000.0, "one_core": 110.0},
                   "bf16_amx_GFLOPs": {"all_cores": 60000.0, "one_core": 1100.0}, "amx_permission": "granted"}
        rec = dict(workload=c["workload"], case=c["id"], sizes=c["sizes"], dtype="f32", variant="",
                   impl="torch-eager", status="ok", time_ms=2.0, min_ms=2.0, reps=5, check={"max_rel_err": 0.0},
                   **model.derived(c, 2.0, lim))
        t = report.table_md({"date": "2026-01-01T00:00:00", "host": "h", "records": [rec], "machine": machine,
                             "impl_notes": {}, "env": {}, "config": {}})
        self.assertIn("# redfuse CPU benchmarks: 2026-01-01, h (Intel(R) Xeon(R) Platinum 8480+)", t)
        self.assertIn("avx512f, avx512_bf16, amx_bf16", t)   # the ISA features present
        self.assertIn("bf16 AMX tiles (tdpbf16ps) 60000.0 / 1100.0 GFLOP/s", t)
        self.assertIn("fp32 3000.0 GFLOP/s (FP32 FMA); bf16 60000.0 GFLOP/s (AMX tiles); "
                      "int8 12000.0 GOP/s (AVX512_VNNI dot)", t)
        machine["amx_permission"] = "denied: Operation not permitted"
        t = report.table_md({"date": "", "host": "h", "records": [rec], "machine": machine, "env": {}, "config": {}})
        self.assertIn("AMX not measured: denied: Operation not permitted", t)
        self.assertNotIn("non-temporal", t)  # machine.json from before copy_nt was measured
        machine["bandwidth_GBps"] = {"array_bytes": 1 << 28,
                                     "all_cores": {"copy": 30.0, "add": 32.0, "read": 31.0, "copy_nt": 58.0},
                                     "one_core": {"copy": 19.0, "add": 21.0, "read": 19.0, "copy_nt": 31.0}}
        t = report.table_md({"date": "", "host": "h", "records": [rec], "machine": machine, "env": {}, "config": {}})
        self.assertIn("read 31.0 / 19.0, copy with non-temporal stores 58.0 / 31.0. **Limits used: 200.0 GB/s, "
                      "reads alone 31.0 GB/s.**", t)


class Ratios(unittest.TestCase):
    def test_best_peer_over_redfuse(self):
        rec = lambda case, impl, ms, status="ok": {"workload": "w", "case": case, "impl": impl, "time_ms": ms, "status": status}
        res = {"records": [rec("a", "redfuse", 2.0), rec("a", "torch-eager", 3.0), rec("a", "torch-sdpa", 1.0),
                           rec("a", "tvm", 0.1), rec("b", "redfuse", 1.0), rec("b", "torch-compile", 4.0, "failed"),
                           rec("c", "torch-eager", 1.0)]}
        rows = ratios.ratios(res)
        self.assertEqual(len(rows), 1)  # b: no peer ran; c: no redfuse
        self.assertEqual(rows[0][3], "torch-sdpa")  # TVM is not a peer
        self.assertAlmostEqual(rows[0][5], 0.5)

    def test_fraction_of_bandwidth_follows_todays_model(self):
        # A run recorded under the copy-only floor (frac_mem_bw 0.38) reads, with its machine's limits,
        # as the fraction of the read floor that applies to a variance.
        var = workloads._case("variance", "variance.rf", {"R": 4096, "C": 8192})
        rf = dict(workload="variance", case=var["id"], sizes=var["sizes"], dtype="f32", variant="", impl="redfuse",
                  status="ok", time_ms=5.5, frac_mem_bw=0.38)
        peer = dict(rf, impl="torch-compile", time_ms=8.0)
        machine = {"limits": {"mem_GBps": 64.8, "fp32_GFLOPs": 230.0},
                   "bandwidth_GBps": {"all_cores": {"read": 36.1}}}
        (row,) = ratios.ratios({"records": [rf, peer], "machine": machine})
        self.assertAlmostEqual(row[6], 4096 * 8192 * 4 / 36.1e9 / 5.5e-3, places=3)
        (row,) = ratios.ratios({"records": [rf, peer]})  # no limits in the file: the record's own
        self.assertEqual(row[6], 0.38)


if __name__ == "__main__":
    unittest.main()
