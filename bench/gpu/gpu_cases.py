"""The cases of the GPU run and their floor (standard library only; gpu_bench.py and the self-tests
import it without torch).

  * example size sets    every examples/*.rf at its default sizes, at 2v+1, and at a multi-tile set
                         (the phase `check`)
  * compare sizes        realistic but awkward sizes for `run --save` + torch math (phase `compare`)
  * bench cases          the GPU sizes of docs/workloads.md #1-#7 and #10 (phase `bench`), in the
                         order they run: phase 1 is one case per workload, phase 2 the rest, so that
                         when the clock runs out every workload has been measured once
  * the floor model      bytes that must move (each input read once, each output written once, in the
                         dtypes of the spec) over the measured copy bandwidth, and FLOPs over the
                         measured matrix rate; the concept of bench/model.py, with the FLOP counts of
                         the GPU anchors (FlashAttention's 4·B·H·M·N·D, halved for causal;
                         FlashMLA's 2·B·H·N·(Dk+Dv); docs/workloads.md #2 and #4)

A case is a plain dict: workload, spec (examples/<file>), sizes ({name: value}; MoE's k included),
dtype ('f32' | 'bf16'), variant ('' | 'causal'), impls (table order), phase (1 | 2), id.
"""
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")

DTYPE_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "f8e4m3": 1, "f8e5m2": 1, "i8": 1, "i32": 4,
               "i64": 8}
FLOAT_DTYPES = ("f32", "bf16", "f16")

# Column order of the table. 'redfuse' is our fused kernel, 'redfuse-unfused' our unfused plan (both
# from `redfuse bench`); the rest are peers.
IMPL_ORDER = [
    "redfuse", "redfuse-unfused",
    "sdpa-flash", "sdpa-cudnn", "flex", "torch-sdpa",
    "torch-eager", "torch-compile", "torch-scaled-mm",
]
REDFUSE_IMPLS = ("redfuse", "redfuse-unfused")
CUDA_ONLY = {"sdpa-cudnn": "cuDNN attention is a CUDA backend"}

IMPL_NOTES = {
    "redfuse": "redfuse bench --target T: our fused kernel (its own timing: median of CUDA events)",
    "redfuse-unfused": "redfuse bench: our unfused plan (one kernel per definition), same inputs",
    "sdpa-flash": "F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.FLASH_ATTENTION)",
    "sdpa-cudnn": "F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION)",
    "flex": "flex_attention under torch.compile (causal: a block mask from create_block_mask)",
    "torch-sdpa": "F.scaled_dot_product_attention(enable_gqa=True), backend chosen by torch",
    "torch-eager": "the workload's math in torch ops, as a user writes it",
    "torch-compile": "torch.compile(dynamic=False) of the eager math (Inductor); compile time excluded",
    "torch-scaled-mm": "torch._scaled_mm on pre-quantized e4m3 A (row scales) and Wq (column scales): "
                       "the GEMM alone, a lower bound for quantize + GEMM",
}

WORKLOAD_ORDER = ["attention", "decode_gqa", "mla_decode", "moe_routing", "quant_gemm_fp8", "softmax",
                  "variance", "layernorm"]


# ============================================================================== spec parsing
def read_spec(path):
    with open(path) as f:
        return f.read()


def spec_sizes(text):
    """The `size` declarations in order: [(name, default or None)]."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line.startswith("size "):
            continue
        for part in line[len("size "):].split(","):
            part = part.strip()
            if not part:
                continue
            if "=" in part:
                n, v = part.split("=", 1)
                out.append((n.strip(), int(v.strip())))
            else:
                out.append((part, None))
    return out


def spec_ratios(text):
    """Scalar definitions `G = A / B` between two sizes: [(A, B)] (GQA's Hq / Hkv must stay whole)."""
    sizes = {n for n, _ in spec_sizes(text)}
    out = []
    for m in re.finditer(r"^\s*\w+\s*=\s*(\w+)\s*/\s*(\w+)\s*(?:#.*)?$", text, flags=re.M):
        if m.group(1) in sizes and m.group(2) in sizes:
            out.append((m.group(1), m.group(2)))
    return out


def spec_outputs(text):
    """{output name: declared dtype or None}."""
    out = {}
    for m in re.finditer(r"^\s*output\s+([^:#\n]+?)\s*(?::\s*(\w+))?\s*(?:#.*)?$", text, flags=re.M):
        for n in m.group(1).split(","):
            out[n.strip()] = m.group(2)
    return out


def spec_inputs(text):
    """{input name: dtype}."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^\s*input\s+(\w+)\s*\[[^\]]*\]\s*:\s*(\w+)", text, flags=re.M)}


def spec_topk(text):
    m = re.search(r"topk\(\s*\w+\s*,\s*(\d+)\s*:", text)
    return int(m.group(1)) if m else None


def example_size_sets(text, name=""):
    """The size sets of the correctness sweep: [(label, {name: value})]; {} means the defaults.
      default     the spec's own sizes (tiny: every tile is a tail)
      2v+1        every size v -> 2v + 1 (odd, prime-ish, still one tile)
      multi-tile  sizes >= 4 -> 12v + 1 (61, 85, 133, 445, ...: several GPU tiles plus a tail, and
                  head dims like 61 that are no multiple of 8; batch-like sizes 1-3 stay)
    Ratios G = A / B keep their default quotient (A is set to G * B)."""
    decl = spec_sizes(text)
    if any(v is None for _, v in decl):
        return [("default", {})]
    dflt = dict(decl)
    ratios = spec_ratios(text)

    def fix(z):
        for a, b in ratios:
            if dflt[b] and dflt[a] % dflt[b] == 0:
                z[a] = dflt[a] // dflt[b] * z[b]
        return z

    odd = fix({n: 2 * v + 1 for n, v in dflt.items()})
    tiles = fix({n: (12 * v + 1 if v >= 4 else v) for n, v in dflt.items()})
    tiles.update(MULTI_TILE_OVERRIDES.get(name, {}))
    return [("default", {}), ("2v+1", odd), ("multi-tile", tiles)]


# prod_normalized: a product of more than ~80 factors |x|/max|x| underflows f32 (to 0 or denormals)
# while redfuse's float64 reference does not, so `--check` fails for any backend, the plan interpreter
# included (seen: R=49, C=157: q 9.7e-94 vs 0). Keep C where the product stays a normal f32.
MULTI_TILE_OVERRIDES = {"prod_normalized": {"C": 45}}


def size_arg(sizes):
    return ",".join("%s=%d" % (n, v) for n, v in sizes.items() if n != "k")


# Realistic but awkward sizes for `redfuse run --save` followed by the torch math (phase `compare`).
COMPARE_SIZES = {
    "attention": {"B": 1, "H": 3, "M": 129, "N": 257, "D": 64},
    "attention_causal": {"B": 1, "H": 2, "N": 257, "D": 128},
    "attention_gqa": {"B": 1, "Hq": 8, "Hkv": 2, "M": 65, "N": 300, "D": 64},
    "attention_alibi": {"B": 1, "H": 4, "N": 200, "D": 64},
    "attention_sliding_window": {"B": 1, "H": 2, "N": 300, "D": 64, "W": 100},
    "attention_softcap": {"B": 1, "H": 2, "M": 100, "N": 257, "D": 128},
    "attention_sinks": {"B": 1, "H": 2, "M": 100, "N": 257, "D": 64},
    "decode_gqa": {"B": 2, "Hq": 32, "Hkv": 8, "N": 1031, "D": 128},
    "mla_decode": {"B": 2, "H": 16, "N": 257, "Dk": 576, "Dv": 512},
    "moe_routing": {"T": 1000, "E": 64},
    "quant_gemm_fp8": {"M": 17, "N": 256, "K": 1031},
    "quant_gemm_int8": {"M": 17, "N": 129, "K": 1031},
    "rmsnorm_gemm": {"M": 17, "N": 129, "K": 1031},
    "linear_cross_entropy": {"T": 33, "D": 257, "V": 5003},
    "softmax": {"R": 33, "C": 5000},
    "log_softmax": {"R": 33, "C": 5000},
    "logsumexp": {"R": 33, "C": 5000},
    "argmax_softmax": {"T": 33, "V": 5000},
    "variance": {"R": 33, "C": 5001},
    "layernorm": {"R": 17, "C": 3001},
    "moment_of_inertia": {"S": 5, "N": 4001},
    "prod_normalized": {"R": 9, "C": 27},
    "nofuse_exp_product": {"R": 9, "C": 75},
    "nofuse_log_shift": {"R": 9, "C": 75},
    "nofuse_max_after_mean": {"R": 9, "C": 75},
}


# Extra `redfuse run` arguments of the compare phase. moment_of_inertia: positive weights (masses);
# with normal weights W = sum(w) can come near 0 and the f32 result is ill-conditioned (seen on the
# CPU backend at S=5, N=4001: rel err 3.4e-2 against the float64 reference).
COMPARE_ARGS = {"moment_of_inertia": ["--dist", "positive"]}


def derive_spec(spec, dtype, k, outdir):
    """(path, description): examples/<spec> as declared, or a variant with the main float dtype of the
    `input`/`output` declarations changed to `dtype` and the literal top-k width set to k (the rule of
    bench/redfuse_hook.py: only declarations of the first floating-point input's dtype are retyped)."""
    src = os.path.join(EXAMPLES, spec)
    text = read_spec(src)
    changes = []
    decls = re.findall(r"^(?:input|output)\s+[^:\n]*:\s*(\w+)", text, flags=re.M)
    main = next((d for d in decls if d in FLOAT_DTYPES), dtype)

    def retype(m):
        if m.group(2) == main and main != dtype:
            changes.append("%s %s -> %s" % (m.group(1).split()[1].split("[")[0], main, dtype))
            return m.group(1) + dtype
        return m.group(0)

    new = re.sub(r"^((?:input|output)\s+[^:\n]*:\s*)(\w+)", retype, text, flags=re.M)
    if k is not None:
        def rek(m):
            if int(m.group(2)) != k:
                changes.append("topk %s -> %d" % (m.group(2), k))
                return "%s%d%s" % (m.group(1), k, m.group(3))
            return m.group(0)
        new = re.sub(r"(topk\(\s*\w+\s*,\s*)(\d+)(\s*:)", rek, new)
    rel = "examples/" + spec
    if not changes:
        return src, rel
    os.makedirs(outdir, exist_ok=True)
    tag = dtype + ("-k%d" % k if k is not None else "")
    path = os.path.join(outdir, spec.replace(".rf", ".%s.rf" % tag))
    with open(path, "w") as f:
        f.write("# derived by bench/gpu/gpu_cases.py from %s: %s\n" % (rel, "; ".join(changes)))
        f.write(new)
    return path, "%s (%s)" % (rel, "; ".join(changes))


# ================================================================================ bench cases
ATT_IMPLS = ["redfuse", "redfuse-unfused", "sdpa-flash", "sdpa-cudnn", "flex", "torch-compile"]
DEC_IMPLS = ["redfuse", "redfuse-unfused", "torch-sdpa", "torch-eager", "torch-compile"]
MATH_IMPLS = ["redfuse", "redfuse-unfused", "torch-eager", "torch-compile"]
QUANT_IMPLS = MATH_IMPLS + ["torch-scaled-mm"]

SPEC_OF = {"attention": "attention.rf", "decode_gqa": "decode_gqa.rf", "mla_decode": "mla_decode.rf",
           "moe_routing": "moe_routing.rf", "quant_gemm_fp8": "quant_gemm_fp8.rf",
           "softmax": "softmax.rf", "variance": "variance.rf", "layernorm": "layernorm.rf"}


def case_id(workload, sizes, dtype, variant=""):
    sid = ",".join("%s=%d" % (k, v) for k, v in sizes.items())
    return "%s[%s] %s%s" % (workload, sid, dtype, " " + variant if variant else "")


def make_case(workload, sizes, dtype, variant="", impls=None, phase=2):
    spec = SPEC_OF[workload]
    if workload == "attention" and variant == "causal":
        spec = "attention_causal.rf"
    return {"workload": workload, "spec": spec, "sizes": dict(sizes), "dtype": dtype, "variant": variant,
            "impls": list(impls or MATH_IMPLS), "phase": phase, "id": case_id(workload, sizes, dtype, variant)}


def _att(B, H, L, D, causal, phase):
    if causal:
        return make_case("attention", {"B": B, "H": H, "N": L, "D": D}, "bf16", "causal", ATT_IMPLS, phase)
    return make_case("attention", {"B": B, "H": H, "M": L, "N": L, "D": D}, "bf16", "", ATT_IMPLS, phase)


def bench_cases(quick=False):
    """The cases in the order they run (phase 1 first)."""
    if quick:   # tiny sizes: every code path, in seconds per case (also the CPU self-check)
        out = [
            _att(1, 2, 128, 64, False, 1), _att(1, 2, 128, 64, True, 1),
            make_case("decode_gqa", {"B": 1, "Hq": 8, "Hkv": 2, "N": 512, "D": 64}, "bf16", "", DEC_IMPLS, 1),
            make_case("mla_decode", {"B": 1, "H": 8, "N": 256, "Dk": 576, "Dv": 512}, "bf16", phase=1),
            make_case("moe_routing", {"T": 256, "E": 64, "k": 2}, "f32", phase=1),
            make_case("quant_gemm_fp8", {"M": 16, "N": 256, "K": 512}, "bf16", "", QUANT_IMPLS, 1),
            make_case("softmax", {"R": 64, "C": 1024}, "f32", phase=1),
            make_case("variance", {"R": 64, "C": 2048}, "f32", phase=1),
            make_case("layernorm", {"R": 64, "C": 1024}, "f32", phase=1),
            make_case("moe_routing", {"T": 1, "E": 64, "k": 8}, "f32", phase=2),
            make_case("softmax", {"R": 64, "C": 1024}, "bf16", phase=2),
        ]
        return out
    p1 = [
        _att(32, 12, 512, 64, False, 1),
        _att(8, 16, 2048, 128, True, 1),
        make_case("decode_gqa", {"B": 64, "Hq": 32, "Hkv": 8, "N": 4096, "D": 128}, "bf16", "", DEC_IMPLS, 1),
        make_case("mla_decode", {"B": 64, "H": 128, "N": 4096, "Dk": 576, "Dv": 512}, "bf16", phase=1),
        make_case("moe_routing", {"T": 16384, "E": 256, "k": 8}, "f32", phase=1),
        make_case("quant_gemm_fp8", {"M": 4096, "N": 4096, "K": 4096}, "bf16", "", QUANT_IMPLS, 1),
        make_case("softmax", {"R": 8192, "C": 8192}, "f32", phase=1),
        make_case("variance", {"R": 16384, "C": 8192}, "f32", phase=1),
        make_case("layernorm", {"R": 16384, "C": 8192}, "f32", phase=1),
    ]
    p2 = [
        _att(8, 16, 2048, 128, False, 2),
        _att(32, 12, 512, 64, True, 2),
        make_case("decode_gqa", {"B": 1, "Hq": 32, "Hkv": 8, "N": 32768, "D": 128}, "bf16", "", DEC_IMPLS),
        make_case("mla_decode", {"B": 132, "H": 128, "N": 4096, "Dk": 576, "Dv": 512}, "bf16"),
        make_case("moe_routing", {"T": 1, "E": 256, "k": 8}, "f32"),
        make_case("quant_gemm_fp8", {"M": 16, "N": 4096, "K": 4096}, "bf16", "", QUANT_IMPLS),
        make_case("softmax", {"R": 8192, "C": 8192}, "bf16"),
        make_case("decode_gqa", {"B": 1, "Hq": 32, "Hkv": 8, "N": 4096, "D": 128}, "bf16", "", DEC_IMPLS),
        make_case("mla_decode", {"B": 64, "H": 128, "N": 1024, "Dk": 576, "Dv": 512}, "bf16"),
        make_case("moe_routing", {"T": 16384, "E": 64, "k": 8}, "f32"),
        make_case("moe_routing", {"T": 16384, "E": 128, "k": 6}, "f32"),
        make_case("moe_routing", {"T": 16384, "E": 8, "k": 2}, "f32"),
        make_case("softmax", {"R": 65536, "C": 1024}, "f32"),
        make_case("layernorm", {"R": 16384, "C": 8192}, "bf16"),
        # the largest last: skipped first when the clock runs out
        _att(2, 16, 8192, 128, False, 2),
        _att(2, 16, 8192, 128, True, 2),
        make_case("decode_gqa", {"B": 64, "Hq": 32, "Hkv": 8, "N": 32768, "D": 128}, "bf16", "", DEC_IMPLS),
        make_case("mla_decode", {"B": 1, "H": 128, "N": 16384, "Dk": 576, "Dv": 512}, "bf16"),
        make_case("mla_decode", {"B": 132, "H": 128, "N": 16384, "Dk": 576, "Dv": 512}, "bf16"),
        _att(1, 16, 16384, 128, False, 2),
        _att(1, 16, 16384, 128, True, 2),
    ]
    return p1 + p2


def unfused_wanted(case, first_of_workload):
    """Our unfused plan materializes S (B·H·M·N) for attention and MLA: time it only at the first size
    of those workloads (a minute of naive kernels at 16k would eat the budget); everywhere else."""
    if case["workload"] in ("attention", "mla_decode"):
        return first_of_workload
    return True


# ============================================================================ the floor model
def model(case):
    """{"bytes", "flops", "peak": 'bf16' | 'fp8' | None, "outputs"}; peak None: memory-bound by nature
    (its arithmetic is element-wise; the floor is bytes over bandwidth and the FLOPs are informative)."""
    w, z = case["workload"], case["sizes"]
    e = DTYPE_BYTES[case["dtype"]]
    if w == "attention":
        B, H, N, D = z["B"], z["H"], z["N"], z["D"]
        M = z.get("M", N)
        flops = 4.0 * B * H * M * N * D
        if case["variant"] == "causal":
            flops /= 2
        return dict(bytes=(2 * B * H * M * D + 2 * B * H * N * D) * e, flops=flops, peak="bf16", outputs="O")
    if w == "decode_gqa":
        B, Hq, Hkv, N, D = z["B"], z["Hq"], z["Hkv"], z["N"], z["D"]
        return dict(bytes=(2 * B * Hq * D + 2 * B * Hkv * N * D) * e, flops=4.0 * B * Hq * N * D,
                    peak="bf16", outputs="O")
    if w == "mla_decode":
        B, H, N, Dk, Dv = z["B"], z["H"], z["N"], z["Dk"], z["Dv"]
        return dict(bytes=(B * H * Dk + B * N * Dk + B * H * Dv) * e, flops=2.0 * B * H * N * (Dk + Dv),
                    peak="bf16", outputs="O")
    if w == "moe_routing":
        T, E, k = z["T"], z["E"], z["k"]
        return dict(bytes=T * E * e + T * k * (4 + 4), flops=4.0 * T * E, peak=None, outputs="W, I")
    if w == "quant_gemm_fp8":
        M, N, K = z["M"], z["N"], z["K"]
        return dict(bytes=M * K * 2 + N * K * 1 + N * 4 + M * N * 2, flops=2.0 * M * N * K, peak="fp8",
                    outputs="C")
    if w == "softmax":
        R, C = z["R"], z["C"]
        return dict(bytes=2 * R * C * e, flops=5.0 * R * C, peak=None, outputs="Y")
    if w == "variance":
        R, C = z["R"], z["C"]
        return dict(bytes=R * C * e + 2 * R * e, flops=4.0 * R * C, peak=None, outputs="mu, var")
    if w == "layernorm":
        R, C = z["R"], z["C"]
        return dict(bytes=2 * R * C * e + 2 * C * e, flops=8.0 * R * C, peak=None, outputs="Y")
    raise KeyError("no model for workload %r" % w)


def peak_of(limits, kind):
    """The measured rate (TFLOP/s) for a peak kind, and its name; fp8 falls back to 2x bf16."""
    limits = limits or {}
    if kind == "bf16" and limits.get("bf16_tflops"):
        return limits["bf16_tflops"], "bf16 matmul"
    if kind == "fp8":
        if limits.get("fp8_tflops"):
            return limits["fp8_tflops"], "fp8 _scaled_mm"
        if limits.get("bf16_tflops"):
            return 2 * limits["bf16_tflops"], "2x bf16 matmul (fp8 not measured)"
    return 0.0, None


def derived(case, time_ms, limits):
    """GB/s, TFLOP/s, fractions of the measured limits, the floor and the roofline fraction."""
    m = model(case)
    t = time_ms / 1e3
    out = {"bytes": m["bytes"], "flops": m["flops"], "peak_kind": m["peak"],
           "gbps": m["bytes"] / t / 1e9, "tflops": m["flops"] / t / 1e12}
    bw = (limits or {}).get("copy_gbps") or 0.0
    pk, _ = peak_of(limits, m["peak"])
    terms = {}
    if bw > 0:
        out["frac_bw"] = out["gbps"] / bw
        terms["memory"] = m["bytes"] / (bw * 1e9)
    if pk > 0:
        out["frac_peak"] = out["tflops"] / pk
        terms["compute"] = m["flops"] / (pk * 1e12)
    if terms:
        bound = max(terms, key=terms.get)
        out["floor_ms"] = terms[bound] * 1e3
        out["roofline"] = terms[bound] / t
        out["bound"] = bound
    return out


def floor_ms(case, limits):
    d = derived(case, 1.0, limits)
    return d.get("floor_ms")
