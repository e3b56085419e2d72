"""redfuse.ops: functional ops in the style of torch.nn.functional (attention, norms, softmax, MoE
routing, linear cross-entropy), each one torch.library custom op backed by fused redfuse kernels.

    import torch, redfuse.ops as rops
    o = rops.attention(q, k, v, causal=True)          # q [B, Hq, M, D], k/v [B, Hkv, N, D]

Each op is registered as ``torch.ops.redfuse.<name>`` when this module is imported, with a fake
implementation that gives the output shapes, so torch.compile(fullgraph=True, dynamic=True) traces
models that call them. The kernels are compiled from the templates in ``redfuse/specs`` on first use
and cached by (op, dtypes, flags, constants, device type): a new sequence length reuses them. The
templates' placeholders are filled only with validated values (dtype names from a fixed table,
floats as ``repr(float(x))``, ints as ``int(x)``, fragments written in this file), never user text.
docs/python.md (section redfuse.ops) is the contract.
"""
import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from . import Kernel
from ._ops_base import (  # noqa: F401 - _kernels: the kernel cache, read by the tests
    _SPEC_DTYPE, _call, _differentiable, _finite, _float_tensor, _kernel, _kernels, _mode, _numel,
    _out_dtype, _prepare_backward, _py_bool, _py_float, _py_int, _real, _render, _run, _same_device,
    _same_dtype, _tensor, _tensors)

__all__ = ["attention", "rms_norm", "layer_norm", "softmax", "log_softmax", "moe_topk_softmax",
           "linear_cross_entropy"]

# ---------------------------------------------------------------------------------------------
# attention

_ATTN = "attention"


def _check_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: Optional[float],
                     softcap: Optional[float], window: Optional[int],
                     alibi_slopes: Optional[torch.Tensor]) -> Tuple[int, int, int, int]:
    """Checks the arguments; returns the output shape [B, Hq, M, Dv]."""
    layout = "[B, H, L, D] (scaled_dot_product_attention's layout)"
    _float_tensor(_ATTN, "q", q, 4, layout)
    _tensor(_ATTN, "k", k, 4, layout)
    _tensor(_ATTN, "v", v, 4, layout)
    _same_dtype(_ATTN, "k", k, q, "q")
    _same_dtype(_ATTN, "v", v, q, "q")
    B, Hq, M, D = q.shape
    Bk, Hkv, N, Dk = k.shape
    Bv, Hv, Nv, Dv = v.shape
    if Bk != B or Bv != B:
        raise ValueError(f"{_ATTN}: batch sizes differ: q {B}, k {Bk}, v {Bv}")
    if Hv != Hkv:
        raise ValueError(f"{_ATTN}: k has {Hkv} heads but v has {Hv}")
    if Nv != N:
        raise ValueError(f"{_ATTN}: k has {N} keys but v has {Nv} values")
    if Dk != D:
        raise ValueError(f"{_ATTN}: q's head dimension is {D} but k's is {Dk}")
    if Hkv < 1 or Hq % Hkv != 0:
        raise ValueError(f"{_ATTN}: q has {Hq} heads, which is not a multiple of k/v's {Hkv} heads "
                         "(GQA needs Hq % Hkv == 0)")
    if N < 1 or D < 1 or Dv < 1:
        raise ValueError(f"{_ATTN}: needs at least one key and a non-empty head dimension "
                         f"(N = {N}, D = {D}, Dv = {Dv})")
    _finite(_ATTN, "scale", scale)
    _finite(_ATTN, "softcap", softcap, positive=True)
    if window is not None and not 1 <= window < 2 ** 31:
        raise ValueError(f"{_ATTN}: window must be at least 1 (and below 2^31), got {window}")
    if alibi_slopes is not None:
        _tensor(_ATTN, "alibi_slopes", alibi_slopes, 1, f"[Hq] = [{Hq}]")
        if alibi_slopes.dtype != torch.float32:
            raise TypeError(f"{_ATTN}: alibi_slopes has dtype {alibi_slopes.dtype}; expected torch.float32")
        if alibi_slopes.shape[0] != Hq:
            raise ValueError(f"{_ATTN}: alibi_slopes has {alibi_slopes.shape[0]} entries; q has {Hq} heads")
    _same_device(_ATTN, {"q": q, "k": k, "v": v, "alibi_slopes": alibi_slopes})
    return (B, Hq, M, Dv)


def _attention_mask(causal: bool, window: Optional[int]) -> Optional[str]:
    if window is None:
        return "j <= i" if causal else None
    w = str(int(window))
    # Causal: the w most recent keys, i - w < j <= i. Without causal: the keys within distance w on
    # either side, |i - j| < w.
    return f"j <= i and i - j < {w}" if causal else f"i - j < {w} and j - i < {w}"


def _attention_spec(dtype: torch.dtype, causal: bool, scale: Optional[float], softcap: Optional[float],
                    window: Optional[int], alibi: bool, grouped: bool = True) -> str:
    kv_head = "h / G" if grouped else "h"
    score = f"sum(d: Q[b,h,i,d] * K[b,{kv_head},j,d]) * scale"
    if softcap is not None:
        c = _real(softcap)
        score = f"{c} * tanh({score} / {c})"
    if alibi:
        # Under the causal mask j <= i, so slope * (j - i) is -slope * |i - j| without the abs.
        score += " + slope[h] * (j - i)" if causal else " - slope[h] * abs(j - i)"
    mask = _attention_mask(causal, window)
    if mask is not None:
        score = f"select({mask}, {score}, -inf)"
    return _render("attention", dtype=_SPEC_DTYPE[dtype], score=score, kv_head=kv_head,
                   kv_heads="Hkv" if grouped else "Hq",
                   slope_input="input slope[Hq] : f32" if alibi else "",
                   scale="1 / sqrt(D)" if scale is None else _real(scale))


@torch.library.custom_op("redfuse::attention", mutates_args=(),
                         schema="(Tensor q, Tensor k, Tensor v, bool causal, float? scale, float? softcap, "
                                "int? window, Tensor? alibi_slopes) -> Tensor")
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: Optional[float],
                  softcap: Optional[float], window: Optional[int],
                  alibi_slopes: Optional[torch.Tensor]) -> torch.Tensor:
    shape = _check_attention(q, k, v, causal, scale, softcap, window, alibi_slopes)
    if _numel(shape) == 0:
        return q.new_empty(shape)
    kern = _attention_kernel(q, k, causal, scale, softcap, window, alibi_slopes)
    return _run(kern, [q, k, v] + ([alibi_slopes] if alibi_slopes is not None else []))[0]


def _attention_kernel(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: Optional[float], softcap: Optional[float],
                      window: Optional[int], alibi_slopes: Optional[torch.Tensor]) -> Kernel:
    alibi = alibi_slopes is not None
    grouped = k.shape[1] != q.shape[1]  # MHA gets the ungrouped spec (its backward is Hq times cheaper)
    key = ("attention", q.dtype, causal, scale, softcap, window, alibi, grouped)
    return _kernel(key, q.device, lambda: _attention_spec(q.dtype, causal, scale, softcap, window, alibi, grouped))


@_attention_op.register_fake
def _(q, k, v, causal, scale, softcap, window, alibi_slopes):
    shape = _check_attention(q, k, v, causal, scale, softcap, window, alibi_slopes)
    _prepare_backward(lambda: _attention_kernel(q, k, causal, scale, softcap, window, alibi_slopes), q, k, v, alibi_slopes)
    return q.new_empty(shape)


def _heads_for_training(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """K and V with one head per query head when GQA attention is differentiated. The grouped spec's
    derived backward sums dK and dV over every query head under a mask (Hq/Hkv times the work, and
    its tiles are no GEMMs: 418 ms against 5.9 ms at [1,8,256,64] with 2 K/V heads, AMD EPYC, 2
    threads); the ungrouped one runs the FlashAttention-2 form, and repeat_interleave's own backward
    sums each group's gradients. Inference keeps the grouped spec (no copies). Shapes that the op
    will refuse are passed through unchanged for its error."""
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if not grad or q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape[1] < 1:
        return k, v
    hq, hkv = q.shape[1], k.shape[1]
    if hq == hkv or hq % hkv != 0 or v.shape[1] != hkv:
        return k, v
    g = hq // hkv
    return k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: Optional[float] = None,
              softcap: Optional[float] = None, window: Optional[int] = None,
              alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Scaled dot-product attention in one fused pass (FlashAttention-style online softmax).

    q: [B, Hq, M, D]; k: [B, Hkv, N, D]; v: [B, Hkv, N, Dv] (F.scaled_dot_product_attention's
    layout), one dtype: bfloat16, float16 or float32; the output [B, Hq, M, Dv] has q's dtype.
    Query head h reads K/V head h // (Hq // Hkv) (GQA, as SDPA's enable_gqa); Hq % Hkv must be 0.
    For query i and key j the logit is s = scale * q_i . k_j (scale defaults to 1 / sqrt(D)), then
    - softcap c > 0: s = c * tanh(s / c) (Gemma 2);
    - alibi_slopes [Hq] float32: s += -slope[h] * |i - j| (= slope[h] * (j - i) under causal);
    - causal: key j is visible iff j <= i (top-left aligned, SDPA's is_causal);
    - window w >= 1: with causal, the w most recent keys (i - w < j <= i); without causal, the keys
      within distance w on either side (|i - j| < w).
    A row with no visible key gives 0 (SDPA gives NaN). Differentiable (derived backward), also under
    torch.compile; differentiated GQA attention repeats K and V per query head first (their
    gradients are summed back over each group), as the grouped backward is far slower.
    """
    op = _ATTN
    _tensors(op, ("alibi_slopes",), q=q, k=k, v=v, alibi_slopes=alibi_slopes)
    k, v = _heads_for_training(q, k, v)
    return _call(_attention_op, q, k, v, _py_bool(op, "causal", causal), _py_float(op, "scale", scale),
                                       _py_float(op, "softcap", softcap), _py_int(op, "window", window),
                                       alibi_slopes)


# ---------------------------------------------------------------------------------------------
# rms_norm and layer_norm: the normalized dimensions are flattened into C, the others into R.


def _check_norm(op: str, input: torch.Tensor, normalized_shape: Sequence[int],
                params: Dict[str, Optional[torch.Tensor]], eps: Optional[float]) -> None:
    _float_tensor(op, "input", input)
    shape = tuple(normalized_shape)
    if len(shape) == 0:
        raise ValueError(f"{op}: normalized_shape must name at least one dimension")
    if input.dim() < len(shape) or tuple(input.shape[input.dim() - len(shape):]) != shape:
        raise ValueError(f"{op}: normalized_shape {list(shape)} is not the trailing shape of input {list(input.shape)}")
    for name, p in params.items():
        if p is None:
            continue
        _tensor(op, name, p)
        _same_dtype(op, name, p, input, "input")
        if tuple(p.shape) != shape:
            raise ValueError(f"{op}: {name} has shape {list(p.shape)}; expected normalized_shape {list(shape)}")
    _finite(op, "eps", eps, nonnegative=True)
    _same_device(op, dict(input=input, **params))


def _normalized_shape(op: str, normalized_shape: Union[int, Sequence[int]]) -> List[int]:
    if isinstance(normalized_shape, (list, tuple, torch.Size)):
        return [_py_int(op, "normalized_shape", s, optional=False, symbolic=True) for s in normalized_shape]
    return [_py_int(op, "normalized_shape", normalized_shape, optional=False, symbolic=True)]


def _rows(input: torch.Tensor, n: int) -> torch.Tensor:
    """input as [R, C], C the product of the last n dimensions (a view when it is contiguous)."""
    return input.reshape(_numel(input.shape[:input.dim() - n]), _numel(input.shape[input.dim() - n:]))


@functools.lru_cache(maxsize=None)
def _rms_norm_default_eps(dtype: torch.dtype) -> float:
    """F.rms_norm's eps=None: finfo(input dtype).eps in PyTorch 2.5, finfo(float32).eps for 16-bit
    inputs in later versions (2.15 does). One tiny call tells which rule this PyTorch follows: for
    x = 2^-10, y = x / sqrt(x^2 + eps) is ~0.01 with a 16-bit eps and ~0.94 with float32's."""
    own, f32 = torch.finfo(dtype).eps, torch.finfo(torch.float32).eps
    if own == f32:
        return own
    with torch.no_grad():
        y = float(F.rms_norm(torch.full((1, 1), 2.0 ** -10, dtype=dtype), (1,)))
    return own if y < 0.5 else f32


_RMS = "rms_norm"


@torch.library.custom_op("redfuse::rms_norm", mutates_args=(),
                         schema="(Tensor input, SymInt[] normalized_shape, Tensor? weight, float? eps) -> Tensor")
def _rms_norm_op(input: torch.Tensor, normalized_shape: List[int], weight: Optional[torch.Tensor],
                 eps: Optional[float]) -> torch.Tensor:
    _check_norm(_RMS, input, normalized_shape, {"weight": weight}, eps)
    if input.numel() == 0:
        return torch.empty(input.shape, dtype=input.dtype, device=input.device)
    kern = _rms_norm_kernel(input, weight, eps)
    n = len(normalized_shape)
    ins = [_rows(input, n)] + ([weight.reshape(-1)] if weight is not None else [])
    return _run(kern, ins)[0].reshape(input.shape)


def _rms_norm_kernel(input: torch.Tensor, weight: Optional[torch.Tensor], eps: Optional[float]) -> Kernel:
    eps = _rms_norm_default_eps(input.dtype) if eps is None else eps
    has_w = weight is not None

    def spec() -> str:
        return _render("rms_norm", dtype=_SPEC_DTYPE[input.dtype], eps=_real(eps),
                       weight_input=f"input g[C] : {_SPEC_DTYPE[input.dtype]}" if has_w else "",
                       weight_term=" * g[c]" if has_w else "")

    return _kernel(("rms_norm", input.dtype, has_w, eps), input.device, spec)


@_rms_norm_op.register_fake
def _(input, normalized_shape, weight, eps):
    _check_norm(_RMS, input, normalized_shape, {"weight": weight}, eps)
    _prepare_backward(lambda: _rms_norm_kernel(input, weight, eps), input, weight)
    return input.new_empty(input.shape)


def rms_norm(input: torch.Tensor, normalized_shape: Union[int, Sequence[int]], weight: Optional[torch.Tensor] = None,
             eps: Optional[float] = None) -> torch.Tensor:
    """Root-mean-square normalization over the last len(normalized_shape) dimensions, as
    F.rms_norm: y = x / sqrt(mean(x^2) + eps) * weight.

    input: bfloat16, float16 or float32, any leading dimensions; weight (optional): the
    normalized shape, input's dtype. eps=None follows the installed PyTorch's F.rms_norm
    (finfo(input.dtype).eps in 2.5, finfo(float32).eps for 16-bit inputs in later versions). The
    result has input's dtype; the sum of squares and the scaling are computed in float32 or wider
    and rounded once. Differentiable (derived backward), also under torch.compile.
    """
    _tensors(_RMS, ("weight",), input=input, weight=weight)
    return _call(_rms_norm_op, input, _normalized_shape(_RMS, normalized_shape), weight,
                                      _py_float(_RMS, "eps", eps))


_LN = "layer_norm"


@torch.library.custom_op("redfuse::layer_norm", mutates_args=(),
                         schema="(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, "
                                "float eps) -> Tensor")
def _layer_norm_op(input: torch.Tensor, normalized_shape: List[int], weight: Optional[torch.Tensor],
                   bias: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    _check_norm(_LN, input, normalized_shape, {"weight": weight, "bias": bias}, eps)
    if input.numel() == 0:
        return torch.empty(input.shape, dtype=input.dtype, device=input.device)
    kern = _layer_norm_kernel(input, weight, bias, eps)
    ins = [_rows(input, len(normalized_shape))] + [p.reshape(-1) for p in (weight, bias) if p is not None]
    return _run(kern, ins)[0].reshape(input.shape)


def _layer_norm_kernel(input: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                       eps: float) -> Kernel:
    has_w, has_b = weight is not None, bias is not None
    dt = _SPEC_DTYPE[input.dtype]

    def spec() -> str:
        return _render("layer_norm", dtype=dt, eps=_real(eps),
                       weight_input=f"input gamma[C] : {dt}" if has_w else "",
                       bias_input=f"input beta[C] : {dt}" if has_b else "",
                       weight_term=" * gamma[c]" if has_w else "", bias_term=" + beta[c]" if has_b else "")

    return _kernel(("layer_norm", input.dtype, has_w, has_b, eps), input.device, spec)


@_layer_norm_op.register_fake
def _(input, normalized_shape, weight, bias, eps):
    _check_norm(_LN, input, normalized_shape, {"weight": weight, "bias": bias}, eps)
    _prepare_backward(lambda: _layer_norm_kernel(input, weight, bias, eps), input, weight, bias)
    return input.new_empty(input.shape)


def layer_norm(input: torch.Tensor, normalized_shape: Union[int, Sequence[int]], weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalization over the last len(normalized_shape) dimensions, as F.layer_norm:
    y = (x - mean) / sqrt(var + eps) * weight + bias (biased variance).

    input: bfloat16, float16 or float32; weight and bias (optional): the normalized shape, input's
    dtype. The mean and variance fuse into one pass (Welford); the result has input's dtype.
    Differentiable (derived backward), also under torch.compile.
    """
    _tensors(_LN, ("weight", "bias"), input=input, weight=weight, bias=bias)
    return _call(_layer_norm_op, input, _normalized_shape(_LN, normalized_shape), weight, bias,
                                        _py_float(_LN, "eps", eps, optional=False))


# ---------------------------------------------------------------------------------------------
# softmax and log_softmax over any dimension

_SOFTMAX_VALUES = {"softmax": "exp(X[r,c] - m[r]) / s[r]", "log_softmax": "X[r,c] - m[r] - log(s[r])"}


def _check_softmax(op: str, input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> torch.dtype:
    _float_tensor(op, "input", input)
    ndim = max(input.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor of {input.dim()} dimension(s)")
    _same_device(op, {"input": input})
    return _out_dtype(op, dtype, input.dtype)


def _softmax_impl(op: str, input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> torch.Tensor:
    out_dtype = _check_softmax(op, input, dim, dtype)
    if input.numel() == 0:
        return torch.empty(input.shape, dtype=out_dtype, device=input.device)
    shape = list(input.shape) or [1]
    d = dim % len(shape)
    kern = _softmax_kernel(op, input, out_dtype)
    if _numel(shape[d + 1:]) == 1:  # the last dimension (or one followed only by 1s): rows in place
        return _run(kern, [input.reshape(-1, shape[d])])[0].reshape(input.shape)
    # Another dimension is moved last and back: a strided reduction in the kernel (the input read
    # in place as [A, C, B]) measured 1-3.5x slower than these two copies around the row kernel.
    x = input.reshape(shape).movedim(d, -1)
    y = _run(kern, [x.reshape(-1, shape[d])])[0].reshape(x.shape)
    return y.movedim(-1, d).contiguous().reshape(input.shape)


def _softmax_kernel(op: str, input: torch.Tensor, out_dtype: torch.dtype) -> Kernel:
    return _kernel((op, input.dtype, out_dtype), input.device,
                   lambda: _render("softmax_rows", in_dtype=_SPEC_DTYPE[input.dtype],
                                   out_dtype=_SPEC_DTYPE[out_dtype], value=_SOFTMAX_VALUES[op]))


def _softmax_fake(op: str, input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> torch.Tensor:
    out_dtype = _check_softmax(op, input, dim, dtype)
    _prepare_backward(lambda: _softmax_kernel(op, input, out_dtype), input)
    return input.new_empty(input.shape, dtype=out_dtype)


@torch.library.custom_op("redfuse::softmax", mutates_args=(),
                         schema="(Tensor input, int dim, ScalarType? dtype) -> Tensor")
def _softmax_op(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> torch.Tensor:
    return _softmax_impl("softmax", input, dim, dtype)


@_softmax_op.register_fake
def _(input, dim, dtype):
    return _softmax_fake("softmax", input, dim, dtype)


@torch.library.custom_op("redfuse::log_softmax", mutates_args=(),
                         schema="(Tensor input, int dim, ScalarType? dtype) -> Tensor")
def _log_softmax_op(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype]) -> torch.Tensor:
    return _softmax_impl("log_softmax", input, dim, dtype)


@_log_softmax_op.register_fake
def _(input, dim, dtype):
    return _softmax_fake("log_softmax", input, dim, dtype)


def softmax(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Softmax over ``dim`` (negative allowed), as F.softmax, in one fused pass per row.

    input: bfloat16, float16 or float32; the result has ``dtype`` (default: input's). Unlike
    F.softmax, which casts the input to ``dtype`` first, the input is read in its own dtype and the
    result rounded once to ``dtype``. A row of all -inf gives 0 (F.softmax gives NaN). Differentiable, also under torch.compile.
    """
    _tensors("softmax", input=input)
    return _call(_softmax_op, input, _py_int("softmax", "dim", dim, optional=False), dtype)


def log_softmax(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Log-softmax over ``dim`` (negative allowed), as F.log_softmax: x - max - log(sum(exp(x - max))).

    Dtypes as :func:`softmax`. Differentiable, also under torch.compile.
    """
    _tensors("log_softmax", input=input)
    return _call(_log_softmax_op, input, _py_int("log_softmax", "dim", dim, optional=False), dtype)


# ---------------------------------------------------------------------------------------------
# moe_topk_softmax

_MOE = "moe_topk_softmax"


def _check_moe(logits: torch.Tensor, k: int, dtype: Optional[torch.dtype]) -> Tuple[List[int], torch.dtype]:
    _float_tensor(_MOE, "logits", logits)
    if logits.dim() < 1:
        raise ValueError(f"{_MOE}: logits must have at least one dimension (the experts), got a 0-d tensor")
    experts = logits.shape[-1]
    if not 1 <= k <= experts:
        raise ValueError(f"{_MOE}: k = {k} is out of range: there are {experts} experts (need 1 <= k <= {experts})")
    _same_device(_MOE, {"logits": logits})
    return list(logits.shape[:-1]) + [k], _out_dtype(_MOE, dtype, logits.dtype)


@torch.library.custom_op("redfuse::moe_topk_softmax", mutates_args=(),
                         schema="(Tensor logits, int k, bool renormalize, ScalarType? dtype) -> (Tensor, Tensor)")
def _moe_op(logits: torch.Tensor, k: int, renormalize: bool,
            dtype: Optional[torch.dtype]) -> Tuple[torch.Tensor, torch.Tensor]:
    shape, out_dtype = _check_moe(logits, k, dtype)
    if _numel(shape) == 0:
        return (torch.empty(shape, dtype=out_dtype, device=logits.device),
                torch.empty(shape, dtype=torch.int64, device=logits.device))
    kern = _moe_kernel(logits, k, renormalize, out_dtype)
    w, idx = _run(kern, [logits.reshape(-1, logits.shape[-1])])
    return w.reshape(shape), idx.reshape(shape)


def _moe_kernel(logits: torch.Tensor, k: int, renormalize: bool, out_dtype: torch.dtype) -> Kernel:
    def spec() -> str:
        return _render("moe_topk_softmax", in_dtype=_SPEC_DTYPE[logits.dtype], out_dtype=_SPEC_DTYPE[out_dtype],
                       k=str(int(k)), weights="Wn" if renormalize else "W",
                       renormalized="Wn[t,r] = W[t,r] / sum(q: W[t,q])" if renormalize else "")

    return _kernel(("moe_topk_softmax", logits.dtype, out_dtype, int(k), renormalize), logits.device, spec)


@_moe_op.register_fake
def _(logits, k, renormalize, dtype):
    shape, out_dtype = _check_moe(logits, k, dtype)
    _prepare_backward(lambda: _moe_kernel(logits, k, renormalize, out_dtype), logits)
    return logits.new_empty(shape, dtype=out_dtype), logits.new_empty(shape, dtype=torch.int64)


def moe_topk_softmax(logits: torch.Tensor, k: int, renormalize: bool = False,
                     dtype: Optional[torch.dtype] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """MoE routing: the softmax of ``logits`` over the experts (the last dimension), then its top k.

    Returns (weights, indices) of shape [..., k], like torch.topk(torch.softmax(logits, -1), k):
    in decreasing order, ties to the lower expert index, indices int64. renormalize=True divides
    the k weights by their sum (computed in the kernel). weights has ``dtype`` (default: logits').
    logits: bfloat16, float16 or float32; 1 <= k <= number of experts. Differentiable (weights; indices are not), also under torch.compile.
    """
    op = _MOE
    _tensors(op, logits=logits)
    return _call(_moe_op, logits, _py_int(op, "k", k, optional=False),
                                              _py_bool(op, "renormalize", renormalize), dtype)


# ---------------------------------------------------------------------------------------------
# linear_cross_entropy

_LCE = "linear_cross_entropy"
_REDUCTIONS = ("mean", "sum", "none")


def _check_lce(x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, ignore_index: int,
               reduction: str) -> List[int]:
    _float_tensor(_LCE, "x", x)
    if x.dim() < 1:
        raise ValueError(f"{_LCE}: x must be [..., D], got a 0-d tensor")
    _tensor(_LCE, "weight", weight, 2, "[V, D]")
    _same_dtype(_LCE, "weight", weight, x, "x")
    _tensor(_LCE, "labels", labels)
    if labels.dtype != torch.int64:
        raise TypeError(f"{_LCE}: labels has dtype {labels.dtype}; expected torch.int64 (as F.cross_entropy)")
    if weight.shape[1] != x.shape[-1]:
        raise ValueError(f"{_LCE}: x's last dimension is {x.shape[-1]} but weight is {list(weight.shape)} ([V, D])")
    if weight.shape[0] < 1 or weight.shape[1] < 1:
        raise ValueError(f"{_LCE}: weight {list(weight.shape)} must have at least one class and D >= 1")
    if tuple(labels.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"{_LCE}: labels has shape {list(labels.shape)}; "
                         f"expected x's leading shape {list(x.shape[:-1])}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{_LCE}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    _same_device(_LCE, {"x": x, "weight": weight, "labels": labels})
    return list(labels.shape) if reduction == "none" else []


def _check_labels(labels: torch.Tensor, valid: torch.Tensor, classes: int, ignore_index: int) -> None:
    # A label outside [0, V) would silently match no logit in the kernel; F.cross_entropy refuses it.
    if getattr(_mode, "replay", False):
        return  # the backward's replay of a forward that passed this check (data-dependent: not traced)
    bad = valid & ((labels < 0) | (labels >= classes))
    if bool(bad.any()):
        raise ValueError(f"{_LCE}: label {int(labels[bad][0])} is out of range [0, {classes}) "
                         f"and is not ignore_index ({ignore_index})")


@torch.library.custom_op("redfuse::linear_cross_entropy", mutates_args=(),
                         schema="(Tensor x, Tensor weight, Tensor labels, int ignore_index, str reduction) -> Tensor")
def _lce_op(x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, ignore_index: int,
            reduction: str) -> torch.Tensor:
    _check_lce(x, weight, labels, ignore_index, reduction)
    y = labels.reshape(-1)
    valid = y != ignore_index
    _check_labels(y, valid, weight.shape[0], ignore_index)
    if y.numel() == 0:
        loss = torch.zeros(0, dtype=torch.float32, device=x.device)
    else:
        kern = _lce_kernel(x)
        loss = _run(kern, [x.reshape(-1, x.shape[-1]), weight, y])[0]
    # The per-token loss (float32) comes from the kernel; ignore_index and the reduction are here.
    loss = torch.where(valid, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    if reduction == "none":
        return loss.reshape(labels.shape).to(x.dtype)
    total = loss.sum()
    if reduction == "mean":
        total = total / valid.sum()  # 0 / 0 = NaN when every label is ignored, as F.cross_entropy
    return total.to(x.dtype)


def _lce_kernel(x: torch.Tensor) -> Kernel:
    # One kernel per hidden size: the backward's tile is chosen for it (its partial sums of the input
    # gradient take a tile x D block, docs/tile-ir.md "Row-reduced members").
    # Traced with dynamic shapes, the size is symbolic: the template's default then, no guard on it.
    hidden = x.shape[-1] if isinstance(x.shape[-1], int) else 2048
    return _kernel(("linear_cross_entropy", x.dtype, hidden), x.device,
                   lambda: _render("linear_cross_entropy", dtype=_SPEC_DTYPE[x.dtype], hidden=str(max(1, hidden))))


@_lce_op.register_fake
def _(x, weight, labels, ignore_index, reduction):
    shape = _check_lce(x, weight, labels, ignore_index, reduction)
    _prepare_backward(lambda: _lce_kernel(x), x, weight)
    return x.new_empty(shape)


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
                         reduction: str = "mean") -> torch.Tensor:
    """F.cross_entropy(x @ weight.T, labels, ignore_index=..., reduction=...) without
    materializing the logits: the [tokens, V] logits are produced tile by tile inside one fused
    kernel that gives each token's loss log(sum(exp(logits))) - logits[label].

    x: [..., D] bfloat16, float16 or float32; weight: [V, D], x's dtype; labels: x's leading shape,
    int64, in [0, V) or equal to ignore_index (else ValueError). The per-token loss is float32; the
    masking of ignored tokens and the reduction ('mean' over the tokens not ignored, 'sum', 'none')
    run in torch, and the result has x's dtype (as F.cross_entropy of x's-dtype logits). No
    label_smoothing or class weights. Differentiable (x and weight), also under torch.compile.
    """
    op = _LCE
    _tensors(op, x=x, weight=weight, labels=labels)
    if not isinstance(reduction, str):
        raise TypeError(f"{op}: reduction must be a str, got {type(reduction).__name__}")
    return _call(_lce_op, x, weight, labels, _py_int(op, "ignore_index", ignore_index,
                                                                                 optional=False), reduction)


# ---------------------------------------------------------------------------------------------
# autograd of the custom ops (torch.compile): the derived backward, through the op's own Kernel


def _autograd_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.args = inputs
    ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)])


def _make_backward(op: Any) -> Callable[..., tuple]:
    impl = op._init_fn

    def backward(ctx: Any, *grads: Any) -> tuple:
        # The op again, eagerly differentiable: each Kernel runs its forward with residuals and its
        # derived backward (docs/grad.md); one more forward than a saved-residual formula would need.
        saved = iter(ctx.saved_tensors)
        args, leaves = [], []
        for a in ctx.args:
            if isinstance(a, torch.Tensor):
                t = next(saved).detach()
                if t.is_floating_point():
                    t.requires_grad_()
                    leaves.append(t)
                args.append(t)
            else:
                args.append(a)
        with torch.enable_grad():
            with _differentiable(replay=True):
                out = impl(*args)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
            got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True) \
                if pairs else [None] * len(leaves)
        it = iter(got)
        return tuple(next(it) if isinstance(a, torch.Tensor) and a.is_floating_point() else None for a in args)

    return backward


for _op in (_attention_op, _rms_norm_op, _layer_norm_op, _softmax_op, _log_softmax_op, _moe_op, _lce_op):
    _op.register_autograd(_make_backward(_op), setup_context=_autograd_setup)
