"""The benchmark cases: every workload of docs/workloads.md at its CPU bench sizes (and small sizes
for --quick), the spec in examples/ that redfuse runs for it, and the implementations measured.

A case is a plain dict (it crosses a process boundary):
  workload  name of the workload (one table per workload)
  sizes     {name: value}, named as in the spec (k of top-k included for MoE routing)
  dtype     'f32' | 'bf16' (the dtype of the floating-point inputs)
  variant   '' or 'causal'
  spec      examples/<file>.rf that redfuse benchmarks
  impls     the implementations to measure, in table order
  id        a unique, readable name
"""

# Column order of the tables. 'redfuse' is our fused kernel, 'redfuse-unfused' our unfused plan (both
# through the Python API, bench/redfuse_hook.py); the rest are peers.
IMPL_ORDER = [
    "redfuse",
    "redfuse-unfused",
    "torch-eager",
    "torch-compile",
    "torch-sdpa",
    "torch-flex",
    "torch-dynquant",
    "tvm",
]

# The fusion-level study (the paper's, on CPU): safe softmax, unfused vs each strategy of the planner
# (src/fuse/Plan.h names them). The redfuse columns are redfuse.compile(..., strategy=NAME).
STUDY_STRATEGIES = ["multi_pass", "onchip_multipass", "incremental", "multi_segment"]
STUDY_IMPLS = (["torch-softmax", "torch-3pass", "torch-3pass-compile"]
               + ["redfuse[%s]" % s for s in STUDY_STRATEGIES])

COMMON = ["redfuse", "redfuse-unfused", "torch-eager", "torch-compile", "tvm"]


def _case(workload, spec, sizes, dtype="f32", variant="", impls=None, note=""):
    sid = ",".join("%s=%d" % (k, v) for k, v in sizes.items())
    cid = "%s[%s] %s%s" % (workload, sid, dtype, " " + variant if variant else "")
    return {
        "workload": workload,
        "spec": spec,
        "sizes": dict(sizes),
        "dtype": dtype,
        "variant": variant,
        "impls": list(impls or COMMON),
        "id": cid,
        "note": note,
    }


def cases(quick=False):
    out = []
    # 1. safe softmax
    for C in ([1024, 4096] if quick else [1024, 4096, 8192]):
        for dt in ("f32", "bf16"):
            out.append(_case("softmax", "softmax.rf", {"R": 256 if quick else 4096, "C": C}, dt))
    # 2. attention prefill
    att = COMMON + ["torch-sdpa", "torch-flex"]
    for L in ([256] if quick else [512, 2048]):
        for D in ([64] if quick else [64, 128]):
            for dt in ("f32", "bf16"):
                for causal in (False, True):
                    if causal:
                        out.append(_case("attention", "attention_causal.rf",
                                         {"B": 1, "H": 8, "N": L, "D": D}, dt, "causal", att))
                    else:
                        out.append(_case("attention", "attention.rf",
                                         {"B": 1, "H": 8, "M": L, "N": L, "D": D}, dt, "", att))
    # 3. decode with GQA (split-KV)
    out.append(_case("decode_gqa", "decode_gqa.rf",
                     {"B": 1 if quick else 4, "Hq": 32, "Hkv": 8, "N": 1024 if quick else 8192, "D": 128},
                     "bf16", "", COMMON + ["torch-sdpa"]))
    if not quick:  # groups of 8 query heads per KV head (Llama-3 70B's 64 / 8)
        out.append(_case("decode_gqa", "decode_gqa.rf", {"B": 4, "Hq": 64, "Hkv": 8, "N": 8192, "D": 128},
                         "bf16", "", COMMON + ["torch-sdpa"]))
    # 5. MoE routing
    for T in ([1, 1024] if quick else [1, 16384]):
        for E in ([8, 256] if quick else [8, 64, 128, 256]):
            for k in ([2, 8] if quick else [2, 6, 8]):
                out.append(_case("moe_routing", "moe_routing.rf", {"T": T, "E": E, "k": k}))
    # 7. variance
    out.append(_case("variance", "variance.rf", {"R": 256 if quick else 4096, "C": 8192}))
    # 10. LayerNorm (docs/workloads.md gives no size of its own: the variance size)
    out.append(_case("layernorm", "layernorm.rf", {"R": 256 if quick else 4096, "C": 8192}))
    # 9. RMSNorm -> GEMM
    for M in ([16] if quick else [16, 2048]):
        NK = 1024 if quick else 4096
        out.append(_case("rmsnorm_gemm", "rmsnorm_gemm.rf", {"M": M, "N": NK, "K": NK}, "bf16"))
    # 6. int8 quantization + GEMM (the CPU twin of the fp8 workload)
    for M in ([16] if quick else [16, 4096]):
        NK = 1024 if quick else 4096
        out.append(_case("quant_gemm_int8", "quant_gemm_int8.rf", {"M": M, "N": NK, "K": NK}, "bf16", "",
                         COMMON + ["torch-dynquant"]))
    # 11. linear + cross-entropy (time and peak memory)
    out.append(_case("linear_cross_entropy", "linear_cross_entropy.rf",
                     {"T": 128, "D": 512, "V": 4000} if quick else {"T": 1024, "D": 2048, "V": 32000}, "bf16"))
    # 8. moment of inertia
    out.append(_case("moment_of_inertia", "moment_of_inertia.rf", {"S": 16 if quick else 256, "N": 65536}))
    # The fusion-level study: safe softmax, rows of 1K-8K.
    for C in ([1024, 8192] if quick else [1024, 2048, 4096, 8192]):
        out.append(_case("softmax_fusion_study", "softmax.rf", {"R": 256 if quick else 4096, "C": C}, "f32",
                         "", STUDY_IMPLS))
    return out


WORKLOAD_TITLES = {
    "softmax": "1. Safe softmax (rows)",
    "attention": "2. Attention prefill (B=1, H=8, M=N)",
    "decode_gqa": "3. Decode attention, GQA (split-KV)",
    "moe_routing": "5. MoE routing: softmax -> top-k",
    "variance": "7. Variance (mean, var of rows)",
    "layernorm": "10. LayerNorm",
    "rmsnorm_gemm": "9. RMSNorm -> GEMM",
    "quant_gemm_int8": "6. Per-token int8 quantization + GEMM",
    "linear_cross_entropy": "11. Linear + cross-entropy (time and peak memory)",
    "moment_of_inertia": "8. Moment of inertia",
    "softmax_fusion_study": "Fusion-level study: safe softmax, unfused vs each strategy",
}

# What each column is (printed under the tables).
IMPL_NOTES = {
    "redfuse": ("our fused kernel: redfuse.compile(spec, target='cpu', sizes=...) called on the peers' tensors "
                "in their process (bench/redfuse_hook.py); outputs allocated by torch on every call"),
    "redfuse-unfused": "our unfused plan, redfuse.compile(..., unfused=True), on the same inputs",
    "redfuse[S]": "redfuse.compile(..., strategy='S') (fusion-level study; S as in src/fuse/Plan.h)",
    "tvm": ("Relax graph of the unfused math compiled by tvm.compile's default llvm pipeline (cpu_generic: "
            "legalize, fuse; no schedule, no tuning: serial loops)"),
    "torch-eager": "the workload's math in PyTorch ops, as a user writes it",
    "torch-compile": "torch.compile (Inductor, dynamic=False) of the eager function; compile time excluded",
    "torch-sdpa": "torch.nn.functional.scaled_dot_product_attention (CPU flash kernel); GQA via enable_gqa",
    "torch-flex": "FlexAttention under torch.compile (causal via a block mask); compile time excluded",
    "torch-dynquant": ("torch.ao quantize_dynamic nn.Linear: int8 weights per channel (Wq*sw requantized), "
                       "activations per tensor u8 at run time, f32 in/out (A converted to f32 outside the "
                       "timing)"),
    "torch-softmax": "torch.softmax",
    "torch-3pass": "the unfused 3-pass plan in torch ops: max, sum of exp, exp/s (3 reads of X)",
    "torch-3pass-compile": "torch.compile of the 3-pass torch ops",
}
