#!/usr/bin/env python3
"""Self-tests of the benchmark harness that need neither torch nor TVM (plain python3):
the case list, the floor model, the redfuse hook (spec variants, the JSON contract, through a stand-in
executable), and the table rendering.

    python3 bench/test_bench.py
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

import model  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402
from redfuse_hook import Redfuse, _last_json  # noqa: E402

FAKE = r"""#!/bin/sh
# stand-in for `redfuse bench`
if [ "$1" = bench ] && [ "$2" = --help ]; then
  echo "redfuse bench SPEC --target cpu --size S --json --threads N --strategy S --load DIR"; exit 0
fi
echo "$@" >> "$FAKE_LOG"
[ -n "$FAKE_FAIL" ] && { echo "error: boom" >&2; exit 3; }
echo "jit: compiling"
case "$*" in
  *--strategy*) echo '{"time_ms": 0.5, "strategy": "s"}' ;;
  *) echo '{"time_ms": 1.25, "unfused_time_ms": 2.5, "strategy": "incremental", "reps": 20}' ;;
esac
"""

STUB = r"""#!/bin/sh
# the CPU backend is not there yet
if [ "$2" = --help ]; then echo "bench: needs a code generator (CPU backend, not in this build yet)"; exit 0; fi
echo "redfuse: this build has no code generator yet" >&2; exit 2
"""


def _last_cmd():
    with open(os.environ["FAKE_LOG"]) as f:
        return f.read().splitlines()[-1]


def _exe(d, name, text):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, os.stat(p).st_mode | stat.S_IEXEC)
    return p


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
        dec = [c for c in cs if c["workload"] == "decode_gqa"][0]
        self.assertEqual(dec["sizes"], {"B": 4, "Hq": 32, "Hkv": 8, "N": 8192, "D": 128})

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


class Hook(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        os.environ["FAKE_LOG"] = os.path.join(self.tmp, "log")
        os.environ.pop("FAKE_FAIL", None)

    def test_unavailable_until_bench_exists(self):
        h = Redfuse(exe=_exe(self.tmp, "stub", STUB), outdir=self.tmp)
        self.assertFalse(h.available)
        self.assertIn("CPU backend not built yet", h.reason)
        c = workloads.cases(True)[0]
        r = h.run(c, ["redfuse", "redfuse-unfused"])
        self.assertEqual(r["redfuse"]["status"], "unavailable")
        self.assertIn("softmax.rf", r["redfuse"]["spec"])

    def test_missing_executable(self):
        h = Redfuse(exe=os.path.join(self.tmp, "nope"), outdir=self.tmp)
        self.assertFalse(h.available)
        self.assertIn("not built", h.reason)

    def test_results_drop_into_records(self):
        h = Redfuse(exe=_exe(self.tmp, "fake", FAKE), outdir=self.tmp, threads=2)
        self.assertTrue(h.available, h.reason)
        c = [c for c in workloads.cases(True) if c["workload"] == "attention" and c["dtype"] == "f32"][0]
        r = h.run(c, ["redfuse", "redfuse-unfused"], load_dir="/data")
        self.assertEqual(r["redfuse"]["status"], "ok")
        self.assertEqual(r["redfuse"]["time_ms"], 1.25)
        self.assertEqual(r["redfuse-unfused"]["time_ms"], 2.5)
        self.assertEqual(r["redfuse"]["strategy"], "incremental")
        self.assertIn("derived", r["redfuse"]["spec"])
        cmd = _last_cmd()
        self.assertIn("--threads 2", cmd)
        self.assertIn("--load /data", cmd)
        self.assertIn("--size B=1,H=8,M=256,N=256,D=64", cmd)
        s = [c for c in workloads.cases(True) if c["workload"] == "softmax_fusion_study"][0]
        r = h.run(s, ["redfuse[incremental]"])
        self.assertEqual(r["redfuse[incremental]"]["time_ms"], 0.5)
        self.assertIn("--strategy incremental", _last_cmd())

    def test_failure_is_a_record(self):
        h = Redfuse(exe=_exe(self.tmp, "fake", FAKE), outdir=self.tmp)
        os.environ["FAKE_FAIL"] = "1"
        r = h.run(workloads.cases(True)[0], ["redfuse"])
        self.assertEqual(r["redfuse"]["status"], "failed")
        self.assertIn("exit 3: error: boom", r["redfuse"]["reason"])

    def test_spec_variants_parse(self):
        h = Redfuse(exe=os.path.join(self.tmp, "nope"), outdir=self.tmp)
        seen = {}
        for c in workloads.cases(False):
            path, desc = h.spec_for(c)
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
                r = subprocess.run([redfuse, "analyze", p, "--size", h.size_arg(c)], capture_output=True,
                                   text=True)
                self.assertEqual(r.returncode, 0, "%s: %s" % (p, r.stderr))

    def test_last_json(self):
        self.assertEqual(_last_json('x\n{"time_ms": 1}\n'), {"time_ms": 1})
        self.assertEqual(_last_json('{\n  "time_ms": 2\n}\n'), {"time_ms": 2})
        self.assertIsNone(_last_json("nothing"))


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


if __name__ == "__main__":
    unittest.main()
