"""The floor of every case (docs/design.md §8): the bytes that must move and the arithmetic that must be done.

bytes  each input read once and each output written once, in the dtypes of the spec (the floor; an
       implementation that re-reads or spills moves more, which is what the fraction shows); kept as
       read_bytes (the inputs) and write_bytes (the outputs), whose sum is bytes.
flops  the arithmetic of the math as written, counted once: a multiply-add of a contraction is 2,
       every other +, -, *, /, max, exp, log, rsqrt is 1 (so exp is counted like an add: the model is
       about the contraction-dominated workloads, where this does not matter, and the memory-bound
       ones, where the bytes decide the floor). Causal attention counts the unmasked half.
peak   which measured compute limit applies: 'fp32', 'bf16' or 'int8' — the dtype the contraction
       runs in. Elementwise/reduction-only workloads use 'fp32'. The limit of a kind is the FASTEST
       unit the machine has for it (peak_of): for bf16 the larger of the AMX tile (tdpbf16ps) and the
       AVX512_BF16 dot (vdpbf16ps) peaks, for int8 of AMX (tdpbssd) and AVX512_VNNI (vpdpbusd), never
       below the fp32 FMA peak (a bf16 GEMM can always run as f32 FMAs). A floor from a slower unit
       than the peers use is no floor: on a Xeon with AMX, PyTorch reached 897% of the dot-product one.

memory floor = max(bytes / mem_GBps, read_bytes / mem_read_GBps): mem_GBps is the most the machine moves
       reading and writing together (a copy with streamed stores, on the machines seen so far), which
       a kernel that only reads cannot reach — the cores' reads alone stop at the pure-read figure
       (AMD Zen 4 VM, 2 threads: copy_nt 64.8 GB/s of which 32.4 read, a pure read 36.1): a variance
       or a decode, which read and write nothing, would otherwise be floored 1.8x below what any
       implementation can do. Limits without mem_read_GBps (machine.json files before 2026-12-08)
       take it from their bandwidth_GBps.all_cores.read (limits_of), and none at all leaves the read
       term out.

floor_s(case, limits) = max(memory floor, flops / peak): the time no implementation can beat on this
machine; 'roofline' in the tables is floor_s / measured time, and frac_mem_bw the memory floor / time
(the fraction of the bandwidth that applies to the case's mix of reads and writes).
"""

import json

DTYPE_BYTES = {"f32": 4, "bf16": 2, "i8": 1, "i32": 4, "i64": 8}


def model(case):
    """Returns {"bytes": int, "read_bytes": int, "write_bytes": int, "flops": float,
    "peak": 'fp32'|'bf16'|'int8', "outputs": str}."""
    m = _traffic(case)
    m["bytes"] = m["read_bytes"] + m["write_bytes"]
    return m


def _traffic(case):
    """The case's reads, writes, FLOPs and peak kind (model)."""
    w = case["workload"]
    z = case["sizes"]
    e = DTYPE_BYTES[case["dtype"]]
    if w in ("softmax", "softmax_fusion_study"):
        R, C = z["R"], z["C"]
        # max, subtract, exp, add (sum), multiply by 1/s
        return dict(read_bytes=R * C * e, write_bytes=R * C * e, flops=5.0 * R * C, peak="fp32", outputs="Y")
    if w == "attention":
        B, H, D = z["B"], z["H"], z["D"]
        N = z["N"]
        M = z.get("M", N)
        pairs = B * H * M * N
        if case["variant"] == "causal":
            pairs = B * H * N * (N + 1) // 2
        # QK^T and PV: 2 * D each per (i, j); softmax: scale, max, sub, exp, sum = 5 per (i, j)
        flops = pairs * (4.0 * D + 5.0)
        return dict(read_bytes=(B * H * M * D + 2 * B * H * N * D) * e, write_bytes=B * H * M * D * e, flops=flops,
                    peak="bf16" if case["dtype"] == "bf16" else "fp32", outputs="O")
    if w == "decode_gqa":
        B, Hq, Hkv, N, D = z["B"], z["Hq"], z["Hkv"], z["N"], z["D"]
        flops = B * Hq * N * (4.0 * D + 5.0)
        return dict(read_bytes=(B * Hq * D + 2 * B * Hkv * N * D) * e, write_bytes=B * Hq * D * e, flops=flops,
                    peak="bf16" if case["dtype"] == "bf16" else "fp32", outputs="O")
    if w == "moe_routing":
        T, E, k = z["T"], z["E"], z["k"]
        # read X once; write W (f32) and I (i32) for k experts per token
        return dict(read_bytes=T * E * e, write_bytes=T * k * (4 + 4), flops=4.0 * T * E, peak="fp32",
                    outputs="W, I")
    if w == "variance":
        R, C = z["R"], z["C"]
        return dict(read_bytes=R * C * e, write_bytes=2 * R * 4, flops=4.0 * R * C, peak="fp32", outputs="mu, var")
    if w == "layernorm":
        R, C = z["R"], z["C"]
        return dict(read_bytes=R * C * e + 2 * C * e, write_bytes=R * C * e, flops=8.0 * R * C, peak="fp32",
                    outputs="Y")
    if w == "rmsnorm_gemm":
        M, N, K = z["M"], z["N"], z["K"]
        return dict(read_bytes=(M * K + K + N * K) * e, write_bytes=M * N * e, flops=2.0 * M * N * K + 3.0 * M * K,
                    peak="bf16" if e == 2 else "fp32", outputs="Y")
    if w == "quant_gemm_int8":
        M, N, K = z["M"], z["N"], z["K"]
        # A (bf16), Wq (i8), sw (f32) in; C (bf16) out
        return dict(read_bytes=M * K * e + N * K * 1 + N * 4, write_bytes=M * N * e,
                    flops=2.0 * M * N * K + 4.0 * M * K, peak="int8", outputs="C")
    if w == "linear_cross_entropy":
        T, D, V = z["T"], z["D"], z["V"]
        return dict(read_bytes=T * D * e + V * D * e + T * 4, write_bytes=T * 4, flops=2.0 * T * V * D + 5.0 * T * V,
                    peak="bf16" if e == 2 else "fp32", outputs="loss")
    if w == "moment_of_inertia":
        S, N = z["S"], z["N"]
        # W: 1, c: 3 mul + 3 add, I: 3 sub + 3 mul + 2 add + 1 mul + 1 add per point
        return dict(read_bytes=S * N * 4 * e, write_bytes=S * 4, flops=17.0 * S * N, peak="fp32", outputs="I")
    raise KeyError("no model for workload %r" % w)


def limits_of(machine):
    """The floors' limits of a machine_limits JSON: its "limits", with mem_read_GBps taken from the
    all-core pure read where an older file has no such field."""
    limits = dict((machine or {}).get("limits") or {})
    if not limits.get("mem_read_GBps"):
        read = (((machine or {}).get("bandwidth_GBps") or {}).get("all_cores") or {}).get("read")
        if read:
            limits["mem_read_GBps"] = read
    return limits


def memory_floor_s(m, limits):
    """The time the case's bytes take at the bandwidth that applies (module docstring); 0 without limits."""
    bw = limits.get("mem_GBps") or 0.0
    t = m["bytes"] / (bw * 1e9) if bw > 0 else 0.0
    read_bw = limits.get("mem_read_GBps") or 0.0
    if read_bw > 0:
        t = max(t, m["read_bytes"] / (read_bw * 1e9))
    return t


# The measured limits that can serve each peak kind: (key in machine.json "limits", unit). The first
# is the headline figure, the fastest unit machine_limits saw (its unit in "<kind>_unit"; limits
# written before the AMX probes have no unit and were the dot-product figure); the per-unit figures
# are taken too, so that limits whose headline is a slower unit still floor at the fastest.
PEAK_SOURCES = {
    "bf16": (("bf16_GFLOPs", None), ("bf16_amx_GFLOPs", "amx"), ("bf16_dot_GFLOPs", "avx512_bf16")),
    "int8": (("int8_GOPs", None), ("int8_amx_GOPs", "amx"), ("int8_dot_GOPs", "avx512_vnni"),
             ("int8_avx2_GOPs", "avx2")),
}
HEADLINE_UNIT = {"bf16": "avx512_bf16", "int8": "avx512_vnni"}


def peak_and_unit(limits, kind):
    """(GFLOP/s or GOP/s, unit) of the fastest measured unit for a peak kind: 'amx', 'avx512_bf16',
    'avx512_vnni', 'avx2' (int8 without VNNI), or 'fp32_fma' (also the fallback when the kind has no faster unit)."""
    best, unit = limits.get("fp32_GFLOPs") or 0.0, "fp32_fma"
    for key, name in PEAK_SOURCES.get(kind, ()):
        v = limits.get(key)
        if v and v > best:
            best, unit = v, name or limits.get(kind + "_unit") or HEADLINE_UNIT[kind]
    return best, unit


def peak_of(limits, kind):
    """The measured compute limit (GFLOP/s or GOP/s) for a peak kind: its fastest unit; fp32 at least."""
    return peak_and_unit(limits, kind)[0]


def derived(case, time_ms, limits):
    """GB/s, GFLOP/s, the fraction of the memory floor (frac_mem_bw) and of the peak, and the roofline
    fraction (floor / time)."""
    m = model(case)
    t = time_ms / 1e3
    gbps = m["bytes"] / t / 1e9
    gflops = m["flops"] / t / 1e9
    out = {"bytes": m["bytes"], "flops": m["flops"], "peak_kind": m["peak"],
           "GBps": round(gbps, 3), "GFLOPs": round(gflops, 3)}
    limits = limits or {}
    mem_s = memory_floor_s(m, limits)
    pk, unit = peak_and_unit(limits, m["peak"])
    if pk > 0:
        out["peak_unit"] = unit
    if mem_s > 0:
        out["frac_mem_bw"] = round(mem_s / t, 4)
    if pk > 0:
        out["frac_peak"] = round(gflops / pk, 4)
    if mem_s > 0 and pk > 0:
        compute_s = m["flops"] / (pk * 1e9)
        floor_s = max(mem_s, compute_s)
        out["floor_ms"] = round(floor_s * 1e3, 6)
        out["roofline"] = round(floor_s / t, 4)
        out["bound"] = "memory" if mem_s >= compute_s else "compute"
    return out


BANDWIDTH_KINDS = ("copy", "scale", "add", "triad", "read", "copy_nt")


def merge_bandwidth(first, second):
    """machine_limits JSON `first` with its memory bandwidths raised to the larger of the two runs'
    (bench.sh measures once before the workloads and once after): the floor is the most the machine
    was seen to move, and a host whose memory speed drifts by tens of percent from minute to minute
    (the Zen 4 VM: copy_nt 48.2 GB/s before one run, 64.8 before another) otherwise floors rows
    measured in its fast minutes against a slow minute's bandwidth (rows at 110% of "the floor").
    Keeps both runs' figures in bandwidth_GBps_runs; the compute peaks stay the first run's."""
    out = json.loads(json.dumps(first))
    a, b = first.get("bandwidth_GBps") or {}, second.get("bandwidth_GBps") or {}
    bw = out.setdefault("bandwidth_GBps", {})
    for scope in ("all_cores", "one_core"):
        x, y = a.get(scope) or {}, b.get(scope) or {}
        bw[scope] = {k: max(v for v in (x.get(k), y.get(k)) if v is not None)
                     for k in BANDWIDTH_KINDS if x.get(k) is not None or y.get(k) is not None}
    out["bandwidth_GBps_runs"] = [{s: a.get(s) for s in ("all_cores", "one_core")},
                                  {s: b.get(s) for s in ("all_cores", "one_core")}]
    lim = out.setdefault("limits", {})
    allc, one = bw.get("all_cores") or {}, bw.get("one_core") or {}
    if allc:
        lim["mem_GBps"] = max(allc.values())
        if "read" in allc:
            lim["mem_read_GBps"] = allc["read"]
    if one:
        lim["mem_GBps_one_core"] = max(one.values())
        if "read" in one:
            lim["mem_read_GBps_one_core"] = one["read"]
    return out


def rederive(results):
    """results.json's records with their floors and fractions recomputed against results["machine"]
    (after merge_bandwidth); a record without a time keeps what it has."""
    limits = limits_of(results.get("machine"))
    for rec in results.get("records", []):
        if rec.get("status") == "ok" and rec.get("time_ms") and all(k in rec for k in ("workload", "sizes", "dtype")):
            rec.update(derived(dict(rec, variant=rec.get("variant", "")), rec["time_ms"], limits))
    return results
