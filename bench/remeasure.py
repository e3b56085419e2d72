"""Raises a run's memory bandwidth to the larger of machine_limits' two measurements (before and after
the workloads; model.merge_bandwidth says why) and recomputes every record's floor, results.json and
table.md / chart.png with it.

    python3 bench/remeasure.py OUT/machine_after.json OUT     # scripts/bench.sh runs it
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402
import report  # noqa: E402


def main(after_path, out):
    with open(os.path.join(out, "machine.json")) as f:
        before = json.load(f)
    with open(after_path) as f:
        after = json.load(f)
    merged = model.merge_bandwidth(before, after)
    with open(os.path.join(out, "machine.json"), "w") as f:
        json.dump(merged, f, indent=1)
    path = os.path.join(out, "results.json")
    with open(path) as f:
        results = json.load(f)
    results["machine"] = merged
    model.rederive(results)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    report.write_all(results, out)
    lim = merged["limits"]
    print("remeasure: memory %s GB/s (reads alone %s), the larger of %s and %s; floors recomputed in %s" % (
        lim.get("mem_GBps"), lim.get("mem_read_GBps"),
        max(((before.get("bandwidth_GBps") or {}).get("all_cores") or {}).values() or [None]),
        max(((after.get("bandwidth_GBps") or {}).get("all_cores") or {}).values() or [None]), out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: remeasure.py MACHINE_AFTER.json OUTDIR")
    sys.exit(main(sys.argv[1], sys.argv[2]))
