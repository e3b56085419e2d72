"""The floor of every case (docs/design.md §8): the bytes that must move and the arithmetic that must be done.

bytes  each input read once and each output written once, in the dtypes of the spec (the floor; an
       implementation that re-reads or spills moves more, which is what the fraction shows).
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

floor_s(case, limits) = max(bytes / mem_GBps, flops / peak): the time no implementation can beat on
this machine; 'roofline' in the tables is floor_s / measured time.
"""

DTYPE_BYTES = {"f32": 4, "bf16": 2, "i8": 1, "i32": 4, "i64": 8}


def model(case):
    """Returns {"bytes": int, "flops": float, "peak": 'fp32'|'bf16'|'int8', "outputs": str}."""
    w = case["workload"]
    z = case["sizes"]
    e = DTYPE_BYTES[case["dtype"]]
    if w in ("softmax", "softmax_fusion_study"):
        R, C = z["R"], z["C"]
        # max, subtract, exp, add (sum), multiply by 1/s
        return dict(bytes=2 * R * C * e, flops=5.0 * R * C, peak="fp32", outputs="Y")
    if w == "attention":
        B, H, D = z["B"], z["H"], z["D"]
        N = z["N"]
        M = z.get("M", N)
        pairs = B * H * M * N
        if case["variant"] == "causal":
            pairs = B * H * N * (N + 1) // 2
        # QK^T and PV: 2 * D each per (i, j); softmax: scale, max, sub, exp, sum = 5 per (i, j)
        flops = pairs * (4.0 * D + 5.0)
        byt = (B * H * M * D + 2 * B * H * N * D + B * H * M * D) * e
        return dict(bytes=byt, flops=flops, peak="bf16" if case["dtype"] == "bf16" else "fp32", outputs="O")
    if w == "decode_gqa":
        B, Hq, Hkv, N, D = z["B"], z["Hq"], z["Hkv"], z["N"], z["D"]
        flops = B * Hq * N * (4.0 * D + 5.0)
        byt = (B * Hq * D + 2 * B * Hkv * N * D + B * Hq * D) * e
        return dict(bytes=byt, flops=flops, peak="bf16" if case["dtype"] == "bf16" else "fp32", outputs="O")
    if w == "moe_routing":
        T, E, k = z["T"], z["E"], z["k"]
        # read X once; write W (f32) and I (i32) for k experts per token
        return dict(bytes=T * E * e + T * k * (4 + 4), flops=4.0 * T * E, peak="fp32", outputs="W, I")
    if w == "variance":
        R, C = z["R"], z["C"]
        return dict(bytes=R * C * e + 2 * R * 4, flops=4.0 * R * C, peak="fp32", outputs="mu, var")
    if w == "layernorm":
        R, C = z["R"], z["C"]
        return dict(bytes=2 * R * C * e + 2 * C * e, flops=8.0 * R * C, peak="fp32", outputs="Y")
    if w == "rmsnorm_gemm":
        M, N, K = z["M"], z["N"], z["K"]
        byt = (M * K + K + N * K + M * N) * e
        return dict(bytes=byt, flops=2.0 * M * N * K + 3.0 * M * K, peak="bf16" if e == 2 else "fp32",
                    outputs="Y")
    if w == "quant_gemm_int8":
        M, N, K = z["M"], z["N"], z["K"]
        # A (bf16), Wq (i8), sw (f32) in; C (bf16) out
        byt = M * K * e + N * K * 1 + N * 4 + M * N * e
        return dict(bytes=byt, flops=2.0 * M * N * K + 4.0 * M * K, peak="int8", outputs="C")
    if w == "linear_cross_entropy":
        T, D, V = z["T"], z["D"], z["V"]
        byt = T * D * e + V * D * e + T * 4 + T * 4
        return dict(bytes=byt, flops=2.0 * T * V * D + 5.0 * T * V, peak="bf16" if e == 2 else "fp32",
                    outputs="loss")
    if w == "moment_of_inertia":
        S, N = z["S"], z["N"]
        # W: 1, c: 3 mul + 3 add, I: 3 sub + 3 mul + 2 add + 1 mul + 1 add per point
        return dict(bytes=S * N * 4 * e + S * 4, flops=17.0 * S * N, peak="fp32", outputs="I")
    raise KeyError("no model for workload %r" % w)


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
    """GB/s, GFLOP/s, their fractions of the measured limits, and the roofline fraction."""
    m = model(case)
    t = time_ms / 1e3
    gbps = m["bytes"] / t / 1e9
    gflops = m["flops"] / t / 1e9
    out = {"bytes": m["bytes"], "flops": m["flops"], "peak_kind": m["peak"],
           "GBps": round(gbps, 3), "GFLOPs": round(gflops, 3)}
    bw = (limits or {}).get("mem_GBps") or 0.0
    pk, unit = peak_and_unit(limits or {}, m["peak"])
    if pk > 0:
        out["peak_unit"] = unit
    if bw > 0:
        out["frac_mem_bw"] = round(gbps / bw, 4)
    if pk > 0:
        out["frac_peak"] = round(gflops / pk, 4)
    if bw > 0 and pk > 0:
        floor_s = max(m["bytes"] / (bw * 1e9), m["flops"] / (pk * 1e9))
        out["floor_ms"] = round(floor_s * 1e3, 6)
        out["roofline"] = round(floor_s / t, 4)
        out["bound"] = "memory" if m["bytes"] / (bw * 1e9) >= m["flops"] / (pk * 1e9) else "compute"
    return out
