"""The torch side of the GPU run: inputs of the bench cases, the peers, float32 references of the bench
cases, float64 references of every example (for `redfuse run --save`), and the error measures.

Needs torch (and numpy for .npy files); works on 'cuda' and on 'cpu' (the CPU self-check of the
harness). The peers are written the way a PyTorch user writes them.
"""
import math
import zlib

import numpy as np
import torch
import torch.nn.functional as F

TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f64": torch.float64}
FP8 = getattr(torch, "float8_e4m3fn", None)


class NotExpressed(Exception):
    """The implementation cannot run this case here (recorded as 'skipped: reason')."""


def seed_of(text):
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


# ============================================================================ bench inputs
def inputs(case, device):
    """The inputs of a bench case, named as in the spec, in the spec's dtypes, on `device`."""
    z, w = case["sizes"], case["workload"]
    dt = TORCH_DTYPE[case["dtype"]]
    gen = torch.Generator(device=device)
    gen.manual_seed(seed_of(case["id"]))

    def randn(*shape, dtype=dt, scale=1.0, shift=0.0):
        x = torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)
        if scale != 1.0:
            x.mul_(scale)
        if shift:
            x.add_(shift)
        return x.to(dtype)

    if w == "attention":
        B, H, N, D = z["B"], z["H"], z["N"], z["D"]
        M = z.get("M", N)
        return {"Q": randn(B, H, M, D), "K": randn(B, H, N, D), "V": randn(B, H, N, D)}
    if w == "decode_gqa":
        B, Hq, Hkv, N, D = z["B"], z["Hq"], z["Hkv"], z["N"], z["D"]
        return {"Q": randn(B, Hq, D), "K": randn(B, Hkv, N, D), "V": randn(B, Hkv, N, D)}
    if w == "mla_decode":
        B, H, N, Dk = z["B"], z["H"], z["N"], z["Dk"]
        return {"Q": randn(B, H, Dk), "KV": randn(B, N, Dk)}
    if w == "moe_routing":
        return {"X": randn(z["T"], z["E"], scale=2.0)}
    if w == "quant_gemm_fp8":
        M, N, K = z["M"], z["N"], z["K"]
        Wq = randn(N, K, dtype=torch.float32, scale=2.0).to(FP8)
        sw = (torch.rand(N, generator=gen, device=device) * 0.01 + 0.001).float()
        return {"A": randn(M, K), "Wq": Wq, "sw": sw}
    if w == "softmax":
        return {"X": randn(z["R"], z["C"], scale=3.0)}
    if w == "variance":
        return {"X": randn(z["R"], z["C"], shift=3.0)}
    if w == "layernorm":
        return {"X": randn(z["R"], z["C"], shift=3.0), "gamma": randn(z["C"]), "beta": randn(z["C"])}
    raise KeyError(w)


def save_npy(inp, d):
    """Writes the inputs in the format of `redfuse run --save`: bf16 and fp8 values as f32 arrays
    (exact), integers as themselves. Returns the bytes written."""
    import os
    os.makedirs(d, exist_ok=True)
    total = 0
    for name, t in inp.items():
        if t.dtype in (torch.bfloat16, torch.float16) or t.dtype == FP8:
            t = t.float()
        a = t.detach().cpu().numpy()
        np.save(os.path.join(d, name + ".npy"), a)
        total += a.nbytes
    return total


def npy_bytes(inp):
    """What save_npy would write (bf16/fp8 stored as 4 bytes)."""
    n = 0
    for t in inp.values():
        es = 4 if (t.dtype in (torch.bfloat16, torch.float16) or t.dtype == FP8) else t.element_size()
        n += t.numel() * es
    return n


# ============================================================================ the eager math
def _attention_math(causal):
    def f(inp):
        Q, K, V = inp["Q"], inp["K"], inp["V"]
        S = (Q @ K.transpose(-1, -2)) * (1.0 / math.sqrt(Q.shape[-1]))
        if causal:
            n = S.shape[-1]
            mask = torch.ones(n, n, dtype=torch.bool, device=S.device).triu(1)
            S = S.masked_fill(mask, float("-inf"))
        return (torch.softmax(S, dim=-1) @ V,)
    return f


def _decode(inp):
    Q, K, V = inp["Q"], inp["K"], inp["V"]
    B, Hq, D = Q.shape
    Hkv = K.shape[1]
    q = Q.view(B, Hkv, Hq // Hkv, D)
    S = (q @ K.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    return ((torch.softmax(S, dim=-1) @ V).reshape(B, Hq, D),)


def _decode_sdpa(inp):
    Q, K, V = inp["Q"], inp["K"], inp["V"]
    B, Hq, D = Q.shape
    return (F.scaled_dot_product_attention(Q.view(B, Hq, 1, D), K, V, enable_gqa=True).view(B, Hq, D),)


def _mla(Dv):
    def f(inp):
        Q, KV = inp["Q"], inp["KV"]
        S = (Q @ KV.transpose(-1, -2)) * (1.0 / math.sqrt(Q.shape[-1]))     # [B, H, N]
        return (torch.softmax(S, dim=-1) @ KV[..., :Dv],)
    return f


def _moe(k):
    def f(inp):
        return tuple(torch.topk(torch.softmax(inp["X"], dim=-1), k, dim=-1))
    return f


def _quantize(A):
    a = A.float().abs().amax(dim=-1, keepdim=True)
    return (A.float() * (448.0 / a)).to(FP8), a


def _scaled_mm(q, Wq, scale_a, sw, out_dtype):
    """C = (q·scale_a) @ (Wq·sw)ᵀ with fp8 operands (cuBLASLt on CUDA); row/column-wise scales."""
    return torch._scaled_mm(q, Wq.t(), scale_a=scale_a, scale_b=sw.view(1, -1), out_dtype=out_dtype)


def _quant_gemm(inp):
    A, Wq, sw = inp["A"], inp["Wq"], inp["sw"]
    q, a = _quantize(A)
    return (_scaled_mm(q, Wq, a / 448.0, sw, A.dtype),)


def _softmax(inp):
    return (torch.softmax(inp["X"], dim=-1),)


def _variance(inp):
    var, mu = torch.var_mean(inp["X"], dim=-1, unbiased=False)
    return (mu, var)


def _layernorm(inp):
    X = inp["X"]
    return (F.layer_norm(X, (X.shape[-1],), inp["gamma"], inp["beta"], eps=1e-5),)


def eager_fn(case):
    w, z = case["workload"], case["sizes"]
    if w == "attention":
        return _attention_math(case["variant"] == "causal")
    if w == "decode_gqa":
        return _decode
    if w == "mla_decode":
        return _mla(z["Dv"])
    if w == "moe_routing":
        return _moe(z["k"])
    return {"quant_gemm_fp8": _quant_gemm, "softmax": _softmax, "variance": _variance,
            "layernorm": _layernorm}[w]


# ================================================================================= the peers
def _sdpa_backend(backend_name, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)

    def f(inp):
        with sdpa_kernel(backend):
            return (F.scaled_dot_product_attention(inp["Q"], inp["K"], inp["V"], is_causal=causal),)
    return f


def _flex(causal, device):
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
                                               device=str(device))
            bm = cache[key]
        return (flex(Q, K, V, block_mask=bm),)
    return f


def _scaled_mm_only(inp):
    """The GEMM of quant_gemm_fp8 on inputs quantized once, outside the timing."""
    A, Wq, sw = inp["A"], inp["Wq"], inp["sw"]
    q, a = _quantize(A)
    sa = (a / 448.0).contiguous()

    def f(_inp):
        return (_scaled_mm(q, Wq, sa, sw, A.dtype),)
    return f


def prepare(case, impl, inp, device):
    """A function of the inputs returning a tuple of outputs, or raises NotExpressed."""
    w, causal = case["workload"], case["variant"] == "causal"
    cuda = device.type == "cuda"
    if impl == "torch-eager":
        return eager_fn(case)
    if impl == "torch-compile":
        return torch.compile(eager_fn(case), dynamic=False)
    if impl in ("sdpa-flash", "sdpa-cudnn"):
        if w != "attention":
            raise NotExpressed("SDPA is attention only")
        if impl == "sdpa-cudnn" and not cuda:
            raise NotExpressed("CUDA only: cuDNN attention")
        return _sdpa_backend("FLASH_ATTENTION" if impl == "sdpa-flash" else "CUDNN_ATTENTION", causal)
    if impl == "flex":
        if w != "attention":
            raise NotExpressed("FlexAttention is attention only")
        return _flex(causal, device)
    if impl == "torch-sdpa":
        if w != "decode_gqa":
            raise NotExpressed("decode only")
        return _decode_sdpa
    if impl == "torch-scaled-mm":
        if w != "quant_gemm_fp8":
            raise NotExpressed("the fp8 GEMM of quant_gemm_fp8")
        return _scaled_mm_only(inp)
    raise KeyError(impl)


# ====================================================== float32 references of the bench cases
def _chunks(n, per):
    per = max(1, per)
    return [(i, min(n, i + per)) for i in range(0, n, per)]


def reference(case, inp):
    """The case's math in float32 (no TF32) on upcast inputs, in slices so that the float32 scores of
    the largest cases stay within ~2 GB. Returns a tuple like the peers'."""
    w, z = case["workload"], case["sizes"]
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            if w == "attention":
                Q, K, V = inp["Q"], inp["K"], inp["V"]
                B, H, M, D = Q.shape
                N = K.shape[2]
                f = _attention_math(case["variant"] == "causal")
                O = torch.empty(B, H, M, D, dtype=torch.float32, device=Q.device)
                Qf, Kf, Vf = (t.reshape(B * H, -1, D) for t in (Q, K, V))
                Of = O.view(B * H, M, D)
                for a, b in _chunks(B * H, (2 << 30) // (M * N * 4 * 3)):
                    Of[a:b] = f({"Q": Qf[a:b].float(), "K": Kf[a:b].float(), "V": Vf[a:b].float()})[0]
                return (O,)
            if w == "decode_gqa":
                B = inp["Q"].shape[0]
                outs = [_decode({k: v[b:b + 1].float() for k, v in inp.items()})[0] for b in range(B)]
                return (torch.cat(outs),)
            if w == "mla_decode":
                B = inp["Q"].shape[0]
                f = _mla(z["Dv"])
                return (torch.cat([f({k: v[b:b + 1].float() for k, v in inp.items()})[0] for b in range(B)]),)
            if w == "moe_routing":
                P = torch.softmax(inp["X"].float(), dim=-1)
                W, I = torch.topk(P, z["k"], dim=-1)
                return (W, I, P)
            if w == "quant_gemm_fp8":
                A, Wq, sw = inp["A"], inp["Wq"], inp["sw"]
                q, a = _quantize(A)
                C = (q.float() @ Wq.float().t()) * (a / 448.0) * sw
                return (C,)
            f = eager_fn(case)
            return f({k: (v.float() if v.is_floating_point() else v) for k, v in inp.items()})
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def rel_l2(out, ref):
    o = out.detach().double()
    r = ref.detach().double()
    if o.shape != r.shape:
        return float("inf")
    if not torch.isfinite(o).all():
        return float("nan")
    den = torch.linalg.vector_norm(r).item()
    num = torch.linalg.vector_norm(o - r).item()
    return num / den if den > 0 else num


def compare_outputs(case, outs, ref):
    """(worst error, detail text). MoE: W by relative L2; I by the reference probabilities it picks
    (ties allowed): equal to the reference top-k values within 1e-5 relative."""
    if case["workload"] == "moe_routing":      # ref = (W, I, P): P the reference probabilities
        W, I = outs
        Wr, _, P = ref
        ew = rel_l2(W.float(), Wr)
        ei = rel_l2(P.gather(-1, I.long()), Wr)
        ei = 0.0 if ei <= 1e-5 else ei
        return max(ew, ei), "W %.2e, I %s" % (ew, "ok" if ei == 0 else "differs (%.2e)" % ei)
    if len(outs) != len(ref):
        return float("inf"), "%d outputs, expected %d" % (len(outs), len(ref))
    errs = [rel_l2(o.float(), r) for o, r in zip(outs, ref)]
    return max(errs), " ".join("%.2e" % e for e in errs)


def tolerance(case):
    """Relative L2 tolerance of an implementation's output against the float32 reference."""
    if case["workload"] == "moe_routing":
        return 1e-4
    return 2e-2 if case["dtype"] == "bf16" or case["workload"] == "quant_gemm_fp8" else 1e-3


# ============================================== float64 references of the examples (compare)
def _att64(Q, K, V, causal=False, window=None, slope=None, softcap=None, sink=None):
    """Attention in float64; Q [B, Hq, M, D], K/V [B, Hkv, N, D] (GQA by repeat)."""
    B, Hq, M, D = Q.shape
    Hkv, N = K.shape[1], K.shape[2]
    if Hkv != Hq:
        K = K.repeat_interleave(Hq // Hkv, dim=1)
        V = V.repeat_interleave(Hq // Hkv, dim=1)
    S = (Q @ K.transpose(-1, -2)) / math.sqrt(D)
    i = torch.arange(M, device=Q.device).view(M, 1)
    j = torch.arange(N, device=Q.device).view(1, N)
    if softcap is not None:
        S = softcap * torch.tanh(S / softcap)
    if slope is not None:
        S = S + slope.view(1, Hq, 1, 1) * (j - i).to(S.dtype)
    keep = torch.ones(M, N, dtype=torch.bool, device=Q.device)
    if causal:
        keep = keep & (j <= i)
    if window is not None:
        keep = keep & (i - j < window)
    S = S.masked_fill(~keep, float("-inf"))
    m = S.amax(dim=-1, keepdim=True)
    P = torch.exp(S - m)
    l = P.sum(dim=-1, keepdim=True)
    if sink is not None:
        l = l + torch.exp(sink.view(1, Hq, 1, 1) - m)
    return (P @ V) / l


def example_reference(name, x, sizes, k=None):
    """{output: float64 tensor} for examples/<name>.rf on inputs x ({name: float64 or int tensor})."""
    z = sizes
    if name in ("attention", "attention_causal", "attention_gqa", "attention_alibi", "attention_softcap",
                "attention_sinks", "attention_sliding_window"):
        kw = {}
        if name in ("attention_causal", "attention_alibi", "attention_sliding_window"):
            kw["causal"] = True
        if name == "attention_sliding_window":
            kw["window"] = z["W"]
        if name == "attention_alibi":
            kw["slope"] = x["slope"]
        if name == "attention_softcap":
            kw["softcap"] = 30.0
        if name == "attention_sinks":
            kw["sink"] = x["sink"]
        return {"O": _att64(x["Q"], x["K"], x["V"], **kw)}
    if name == "decode_gqa":
        O = _att64(x["Q"].unsqueeze(2), x["K"], x["V"])
        return {"O": O.squeeze(2)}
    if name == "mla_decode":
        Dv = z["Dv"]
        KV = x["KV"].unsqueeze(1)
        O = _att64(x["Q"].unsqueeze(2), KV, KV[..., :Dv])
        return {"O": O.squeeze(2)}
    if name in ("softmax", "log_softmax", "logsumexp", "argmax_softmax", "moe_routing"):
        X = x["X"]
        m = X.amax(dim=-1, keepdim=True)
        s = torch.exp(X - m).sum(dim=-1, keepdim=True)
        P = torch.exp(X - m) / s
        if name == "softmax":
            return {"Y": P}
        if name == "log_softmax":
            return {"Y": X - m - torch.log(s)}
        if name == "logsumexp":
            return {"lse": (m + torch.log(s)).squeeze(-1)}
        if name == "argmax_softmax":
            p, tok = P.max(dim=-1)
            return {"tok": tok, "p": p, "_P": P}
        W, I = torch.topk(P, k, dim=-1)
        return {"W": W, "I": I, "_P": P}
    if name in ("quant_gemm_fp8", "quant_gemm_int8"):
        A, Wq, sw = x["A"], x["Wq"].double(), x["sw"]
        a = A.abs().amax(dim=-1, keepdim=True)
        if name == "quant_gemm_fp8":
            q = (A * 448.0 / a).float().to(FP8).double()
            C = (q @ Wq.t()) * a / 448.0 * sw
        else:
            q = torch.round(A * 127.0 / a).clamp(-128, 127)
            C = (q @ Wq.t()) * a / 127.0 * sw
        return {"C": C}
    if name == "rmsnorm_gemm":
        X, g, Wt = x["X"], x["g"], x["Wt"]
        r = (X * X).sum(dim=-1, keepdim=True)
        return {"Y": ((X * g) @ Wt.t()) * torch.rsqrt(r / X.shape[-1] + 1e-6)}
    if name == "linear_cross_entropy":
        L = x["Hd"] @ x["Wv"].t()
        m = L.amax(dim=-1)
        s = torch.exp(L - m.unsqueeze(-1)).sum(dim=-1)
        zt = L.gather(-1, x["y"].long().unsqueeze(-1)).squeeze(-1)
        return {"loss": torch.log(s) + m - zt}
    if name in ("variance", "layernorm"):
        X = x["X"]
        mu = X.mean(dim=-1, keepdim=True)
        var = ((X - mu) ** 2).mean(dim=-1, keepdim=True)
        if name == "variance":
            return {"mu": mu.squeeze(-1), "var": var.squeeze(-1)}
        return {"Y": (X - mu) * torch.rsqrt(var + 1e-5) * x["gamma"] + x["beta"]}
    if name == "moment_of_inertia":
        w, P = x["w"], x["P"]
        W = w.sum(dim=-1)
        c = (w.unsqueeze(-1) * P).sum(dim=1) / W.unsqueeze(-1)
        d = P - c.unsqueeze(1)
        return {"I": (w * (d * d).sum(dim=-1)).sum(dim=-1)}
    if name == "prod_normalized":
        X = x["X"]
        a = X.abs().amax(dim=-1, keepdim=True)
        return {"q": (X.abs() / a).prod(dim=-1), "lo": (X.abs() - a).amin(dim=-1)}
    if name == "nofuse_exp_product":
        X = x["X"]
        m = X.amax(dim=-1, keepdim=True)
        return {"s": torch.exp(X * m).sum(dim=-1)}
    if name == "nofuse_log_shift":
        X = x["X"]
        s = X.abs().sum(dim=-1, keepdim=True)
        return {"t": torch.log(X + s).sum(dim=-1)}
    if name == "nofuse_max_after_mean":
        X = x["X"]
        mu = X.mean(dim=-1, keepdim=True)
        return {"t": torch.maximum(X, mu).sum(dim=-1)}
    raise NotExpressed("no torch reference for examples/%s.rf" % name)


def compare_saved(name, saved, sizes, out_dtypes, k, device):
    """Compares redfuse's saved outputs with the float64 torch math on its saved inputs.
    saved: {name: numpy array}; returns [{output, metric, error, tolerance, ok}]."""
    x = {}
    for n, a in saved.items():
        t = torch.from_numpy(np.ascontiguousarray(a)).to(device)
        x[n] = t.double() if t.is_floating_point() else t
    ref = example_reference(name, x, sizes, k)
    rows = []
    for out, r in ref.items():
        if out.startswith("_"):
            continue
        if out not in x:
            rows.append({"output": out, "metric": "missing", "error": None, "ok": False,
                         "detail": "redfuse saved no %s.npy" % out})
            continue
        o = x[out]
        if not r.is_floating_point():       # indices: check the probabilities they pick (ties allowed)
            P = ref["_P"]
            if out == "I":
                picked = P.gather(-1, o.long())
                e = rel_l2(picked, ref["W"])
            else:
                picked = P.gather(-1, o.long().unsqueeze(-1)).squeeze(-1)
                e = rel_l2(picked, ref["p"])
            diff = int((o.long() != r.long()).sum().item())
            rows.append({"output": out, "metric": "picked-prob rel L2", "error": e, "tolerance": 1e-6,
                         "ok": e <= 1e-6, "detail": "%d of %d indices differ from torch" % (diff, o.numel())})
            continue
        dt = out_dtypes.get(out) or "f32"
        tol = 1e-2 if dt in ("bf16", "f16") else 1e-4
        e = rel_l2(o, r)
        rows.append({"output": out, "metric": "rel L2", "error": e, "tolerance": tol,
                     "ok": bool(e == e and e <= tol), "detail": "max abs %.3g" % (o - r).abs().max().item()
                     if o.shape == r.shape else "shape %s vs %s" % (tuple(o.shape), tuple(r.shape))})
    return rows
