"""redfuse against its best PyTorch peer, per case and per workload, from a results.json.

The ratio of a case is the best PyTorch peer's median time over redfuse's (> 1: redfuse faster),
both measured in the same run on the same inputs; TVM and redfuse's unfused plan are not peers here.

    python3 bench/ratios.py bench/results/DIR/results.json      # prints per workload, then per case
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402

PEERS = ("torch-eager", "torch-compile", "torch-sdpa", "torch-flex", "torch-dynquant")


def ratios(results):
    """[(workload, case, redfuse ms, best peer, its ms, ratio, fraction of bandwidth)] of the cases
    where redfuse and at least one peer ran. The fraction is the memory floor over redfuse's time,
    recomputed by bench/model.py from the run's machine limits where the file has them (so runs
    recorded before a model change read with today's model), else the record's own."""
    limits = model.limits_of(results.get("machine"))
    by_case = collections.OrderedDict()
    for r in results["records"]:
        if r.get("status") == "ok":
            by_case.setdefault(r["case"], {})[r["impl"]] = r
    rows = []
    for case, impls in by_case.items():
        rf = impls.get("redfuse")
        peers = {k: v["time_ms"] for k, v in impls.items() if k in PEERS}
        if rf is None or not peers:
            continue
        best = min(peers, key=peers.get)
        frac = rf.get("frac_mem_bw")
        if limits and all(k in rf for k in ("sizes", "dtype", "variant")):
            frac = model.derived(rf, rf["time_ms"], limits).get("frac_mem_bw", frac)
        rows.append((rf["workload"], case, rf["time_ms"], best, peers[best], peers[best] / rf["time_ms"], frac))
    return rows


def main(path):
    with open(path) as f:
        rows = ratios(json.load(f))
    for w in dict.fromkeys(r[0] for r in rows):
        sub = [r for r in rows if r[0] == w]
        print("== %s: %d rows, %.2f-%.2fx" % (w, len(sub), min(r[5] for r in sub), max(r[5] for r in sub)))
        for _, case, ms, best, peer_ms, ratio, bw in sub:
            frac = "" if bw is None else "  %3.0f%% of bandwidth" % (100 * bw)
            print("   %-52s redfuse %10.4f ms  %-14s %10.4f ms  %.2fx%s" % (case, ms, best, peer_ms, ratio, frac))


if __name__ == "__main__":
    main(sys.argv[1])
