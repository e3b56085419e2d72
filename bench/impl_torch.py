"""The PyTorch peers: inputs, the eager math of every workload, torch.compile of that math, SDPA,
FlexAttention and the dynamic-quantized Linear.

Each workload has `inputs(case, gen)` (named as in the spec, in the spec's dtypes) and an eager
function `f(inp) -> tuple of outputs` written the way a PyTorch user would write it. torch.compile
(Inductor) compiles that same function.
"""
import math
import warnings

import torch
import torch.nn.functional as F

TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------------------- inputs
def inputs(case, gen):
    z, dt, w = case["sizes"], TORCH_DTYPE[case["dtype"]], case["workload"]

    def randn(*shape, dtype=dt, scale=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).to(dtype)

    if w in ("softmax", "softmax_fusion_study"):
        return {"X": randn(z["R"], z["C"], scale=3.0)}
    if w == "attention":
        B, H, D, N = z["B"], z["H"], z["D"], z["N"]
        M = z.get("M", N)
        return {"Q": randn(B, H, M, D), "K": randn(B, H, N, D), "V": randn(B, H, N, D)}
    if w == "decode_gqa":
        B, Hq, Hkv, N, D = z["B"], z["Hq"], z["Hkv"], z["N"], z["D"]
        return {"Q": randn(B, Hq, D), "K": randn(B, Hkv, N, D), "V": randn(B, Hkv, N, D)}
    if w == "moe_routing":
        return {"X": randn(z["T"], z["E"], scale=2.0)}
    if w in ("variance",):
        return {"X": randn(z["R"], z["C"]) + 3.0}
    if w == "layernorm":
        return {"X": randn(z["R"], z["C"]) + 3.0, "gamma": randn(z["C"]), "beta": randn(z["C"])}
    if w == "rmsnorm_gemm":
        M, N, K = z["M"], z["N"], z["K"]
        return {"X": randn(M, K), "g": randn(K), "Wt": randn(N, K, scale=1.0 / math.sqrt(K))}
    if w == "quant_gemm_int8":
        M, N, K = z["M"], z["N"], z["K"]
        Wq = torch.randint(-127, 128, (N, K), generator=gen, dtype=torch.int32).to(torch.int8)
        sw = (torch.rand(N, generator=gen) * 0.01 + 0.001).float()
        return {"A": randn(M, K), "Wq": Wq, "sw": sw}
    if w == "linear_cross_entropy":
        T, D, V = z["T"], z["D"], z["V"]
        y = torch.randint(0, V, (T,), generator=gen, dtype=torch.int32)
        return {"Hd": randn(T, D), "Wv": randn(V, D, scale=1.0 / math.sqrt(D)), "y": y}
    if w == "moment_of_inertia":
        S, N = z["S"], z["N"]
        return {"w": torch.rand(S, N, generator=gen), "P": randn(S, N, 3) + 5.0}
    raise KeyError(w)


# ----------------------------------------------------------------------------------- eager math
def _softmax(inp):
    return (torch.softmax(inp["X"], dim=-1),)


def _softmax_3pass(inp):
    # The unfused plan written in torch ops: pass 1 max, pass 2 sum of exp, pass 3 normalize.
    X = inp["X"]
    m = X.amax(dim=-1, keepdim=True)
    s = torch.exp(X - m).sum(dim=-1, keepdim=True)
    return (torch.exp(X - m) / s,)


def _attention(causal):
    def f(inp):
        Q, K, V = inp["Q"], inp["K"], inp["V"]
        scale = 1.0 / math.sqrt(Q.shape[-1])
        S = (Q @ K.transpose(-1, -2)) * scale
        if causal:
            n = S.shape[-1]
            mask = torch.ones(n, n, dtype=torch.bool, device=S.device).triu(1)
            S = S.masked_fill(mask, float("-inf"))
        P = torch.softmax(S, dim=-1)
        return (P @ V,)
    return f


def _attention_sdpa(causal):
    def f(inp):
        return (F.scaled_dot_product_attention(inp["Q"], inp["K"], inp["V"], is_causal=causal),)
    return f


def _decode(inp):
    Q, K, V = inp["Q"], inp["K"], inp["V"]
    B, Hq, D = Q.shape
    Hkv = K.shape[1]
    q = Q.view(B, Hkv, Hq // Hkv, D)
    S = (q @ K.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    P = torch.softmax(S, dim=-1)
    return ((P @ V).reshape(B, Hq, D),)


def _decode_sdpa(inp):
    Q, K, V = inp["Q"], inp["K"], inp["V"]
    B, Hq, D = Q.shape
    O = F.scaled_dot_product_attention(Q.view(B, Hq, 1, D), K, V, enable_gqa=True)
    return (O.view(B, Hq, D),)


def _moe(k):
    def f(inp):
        P = torch.softmax(inp["X"], dim=-1)
        W, I = torch.topk(P, k, dim=-1)
        return (W, I)
    return f


def _variance(inp):
    var, mu = torch.var_mean(inp["X"], dim=-1, unbiased=False)
    return (mu, var)


def _layernorm(inp):
    X = inp["X"]
    return (F.layer_norm(X, (X.shape[-1],), inp["gamma"], inp["beta"], eps=1e-5),)


def _rmsnorm_gemm(inp):
    X = inp["X"]
    Xn = F.rms_norm(X, (X.shape[-1],), inp["g"], eps=1e-6)
    return (F.linear(Xn, inp["Wt"]),)


def _quant_gemm(inp):
    A, Wq, sw = inp["A"], inp["Wq"], inp["sw"]
    Af = A.float()
    a = Af.abs().amax(dim=-1, keepdim=True)
    q = torch.round(Af * (127.0 / a)).to(torch.int8)
    C = torch._int_mm(q, Wq.t())                      # int8 x int8 -> int32
    return ((C.float() * (a / 127.0) * sw).to(A.dtype),)


def _linear_ce(inp):
    L = inp["Hd"] @ inp["Wv"].t()
    return (F.cross_entropy(L.float(), inp["y"].long(), reduction="none"),)


def _moment(inp):
    w, P = inp["w"], inp["P"]
    W = w.sum(dim=-1)
    c = (w.unsqueeze(-1) * P).sum(dim=1) / W.unsqueeze(-1)
    d = P - c.unsqueeze(1)
    return ((w * (d * d).sum(dim=-1)).sum(dim=-1),)


def eager_fn(case):
    w = case["workload"]
    if w in ("softmax", "softmax_fusion_study"):
        return _softmax
    if w == "attention":
        return _attention(case["variant"] == "causal")
    if w == "decode_gqa":
        return _decode
    if w == "moe_routing":
        return _moe(case["sizes"]["k"])
    return {"variance": _variance, "layernorm": _layernorm, "rmsnorm_gemm": _rmsnorm_gemm,
            "quant_gemm_int8": _quant_gemm, "linear_cross_entropy": _linear_ce,
            "moment_of_inertia": _moment}[w]


# ---------------------------------------------------------------------------- implementations
class NotExpressed(Exception):
    """The implementation cannot express this workload (recorded as 'not expressed: reason')."""


def _compiled(fn):
    # dynamic=False: one graph per shape, as a serving stack would have after warm-up.
    return torch.compile(fn, dynamic=False)


def _flex(causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    cache = {}

    def f(inp):
        Q, K, V = inp["Q"], inp["K"], inp["V"]
        bm = None
        if causal:
            key = (Q.shape[-2], K.shape[-2])
            if key not in cache:
                cache[key] = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, key[0], key[1],
                                               device="cpu")
            bm = cache[key]
        return (flex(Q, K, V, block_mask=bm),)
    return f


def _dynquant(inp):
    """torch.ao dynamic-quantized Linear: weights int8 per output channel (from Wq * sw), activations
    quantized per tensor (uint8, asymmetric) at run time, fbgemm/onednn int8 GEMM, f32 output."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    Wq, sw = inp["Wq"], inp["sw"]
    N, K = Wq.shape
    lin = torch.nn.Linear(K, N, bias=False)
    with torch.no_grad():
        lin.weight.copy_(Wq.float() * sw.unsqueeze(-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qlin = quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear: per_channel_dynamic_qconfig},
                                dtype=torch.qint8)
    A32 = inp["A"].float()      # the module takes f32 activations: converted once, outside the timing

    def f(_inp):
        return (qlin(A32),)
    return f


def prepare(case, impl, inp):
    """Returns a function of the inputs (tuple of outputs) for `impl`, or raises NotExpressed."""
    w, causal = case["workload"], case["variant"] == "causal"
    if impl == "torch-eager":
        return eager_fn(case)
    if impl == "torch-compile":
        return _compiled(eager_fn(case))
    if impl == "torch-softmax":
        return _softmax
    if impl == "torch-3pass":
        return _softmax_3pass
    if impl == "torch-3pass-compile":
        return _compiled(_softmax_3pass)
    if impl == "torch-sdpa":
        if w == "attention":
            return _attention_sdpa(causal)
        if w == "decode_gqa":
            return _decode_sdpa
        raise NotExpressed("SDPA is attention only")
    if impl == "torch-flex":
        if w != "attention":
            raise NotExpressed("FlexAttention is attention only")
        return _flex(causal)
    if impl == "torch-dynquant":
        if w != "quant_gemm_int8":
            raise NotExpressed("dynamic-quantized Linear is a GEMM")
        return _dynquant(inp)
    raise KeyError(impl)
