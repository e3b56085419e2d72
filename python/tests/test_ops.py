"""redfuse.ops against PyTorch: every op and attention flag on random inputs in several dtypes and
awkward shapes, torch.compile (fullgraph, dynamic: no recompile, no rebuild), opcheck, and errors."""
import importlib
import importlib.resources
import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import redfuse  # noqa: E402
import redfuse.ops as rops  # noqa: E402

# (rtol, atol) against a float64 reference: one rounding of the output plus the inputs' rounding
# carried through the op.
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def close(got, want, dtype):
    rtol, atol = TOL[dtype]
    assert got.dtype == dtype, (got.dtype, dtype)
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


# ------------------------------------------------------------------------------------ attention


def attention_reference(q, k, v, causal=False, scale=None, softcap=None, window=None, alibi=None):
    """The documented semantics, in float64 from the (rounded) inputs."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(q.shape[2])[:, None]
    j = torch.arange(k.shape[2])[None, :]
    if alibi is not None:
        s = s - alibi.double()[:, None, None] * (i - j).abs()
    visible = torch.ones(s.shape[-2:], dtype=torch.bool)
    if causal:
        visible &= j <= i
    if window is not None:
        visible &= (i - j < window) & (causal | (j - i < window))
    p = torch.softmax(s.masked_fill(~visible, -math.inf), -1).nan_to_num(0.0)  # no visible key: 0
    return p @ v


ATTN_SHAPES = [  # B, Hq, Hkv, M, N, D, Dv
    (1, 1, 1, 1, 1, 1, 1),
    (2, 4, 2, 7, 65, 16, 16),
    (1, 6, 3, 65, 7, 8, 5),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", ATTN_SHAPES)
def test_attention_against_sdpa(dtype, shape):
    B, Hq, Hkv, M, N, D, Dv = shape
    q = randn(B, Hq, M, D, dtype=dtype)
    k, v = randn(B, Hkv, N, D, dtype=dtype, seed=1), randn(B, Hkv, N, Dv, dtype=dtype, seed=2)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
    close(rops.attention(q, k, v), want, dtype)


def test_attention_causal_against_sdpa():
    q, k, v = randn(2, 4, 33, 16), randn(2, 2, 40, 16, seed=1), randn(2, 2, 40, 16, seed=2)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True)
    close(rops.attention(q, k, v, causal=True), want, torch.float32)
    # M > N: top-left alignment (query i sees keys j <= i), as SDPA's is_causal.
    q2 = randn(1, 2, 9, 16, seed=3)
    want = F.scaled_dot_product_attention(q2.double(), k[:1].double()[:, :, :5], v[:1].double()[:, :, :5],
                                          is_causal=True, enable_gqa=True)
    close(rops.attention(q2, k[:1, :, :5], v[:1, :, :5], causal=True), want, torch.float32)


FLAG_CASES = [
    dict(scale=0.3),
    dict(softcap=2.5),
    dict(causal=True, window=4),
    dict(window=3),
    dict(causal=True, alibi=True),
    dict(alibi=True),
    dict(causal=True, scale=0.2, softcap=3.0, window=5, alibi=True),
]


@pytest.mark.parametrize("flags", FLAG_CASES, ids=lambda f: "-".join(sorted(f)))
def test_attention_flags(flags):
    flags = dict(flags)
    q, k, v = randn(2, 4, 21, 8), randn(2, 2, 21, 8, seed=1), randn(2, 2, 21, 8, seed=2)
    alibi = torch.rand(4, generator=torch.Generator().manual_seed(5)) if flags.pop("alibi", False) else None
    got = rops.attention(q, k, v, alibi_slopes=alibi, **flags)
    close(got, attention_reference(q, k, v, alibi=alibi, **flags), torch.float32)


def test_attention_all_flags_bf16_and_strided():
    # bf16 with every flag, and q/k/v as the transposed views a model makes ([B, L, H, D] -> [B, H, L, D]).
    q = randn(1, 13, 4, 16, dtype=torch.bfloat16).transpose(1, 2)
    k = randn(1, 13, 2, 16, dtype=torch.bfloat16, seed=1).transpose(1, 2)
    v = randn(1, 13, 2, 16, dtype=torch.bfloat16, seed=2).transpose(1, 2)
    alibi = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    flags = dict(causal=True, scale=0.2, softcap=3.0, window=5)
    got = rops.attention(q, k, v, alibi_slopes=alibi, **flags)
    close(got, attention_reference(q, k, v, alibi=alibi, **flags), torch.bfloat16)


def test_attention_row_without_visible_keys_is_zero():
    # Causal window 2 over 3 keys: queries 4.. see no key (SDPA would give NaN).
    q, k, v = randn(1, 4, 9, 8), randn(1, 2, 3, 8, seed=1), randn(1, 2, 3, 8, seed=2)
    got = rops.attention(q, k, v, causal=True, window=4)
    want = attention_reference(q, k, v, causal=True, window=4)
    close(got, want, torch.float32)
    assert torch.all(got[:, :, 6:] == 0)


def test_attention_empty_queries():
    q, k = torch.zeros(1, 2, 0, 8), torch.zeros(1, 2, 5, 8)
    assert rops.attention(q, k, k).shape == (1, 2, 0, 8)


# ------------------------------------------------------------------------------------ norms


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,normalized", [((1, 1), (1,)), ((7, 65), (65,)), ((2, 3, 65), (3, 65))])
def test_rms_norm(dtype, shape, normalized):
    x, w = randn(*shape, dtype=dtype), randn(*normalized, dtype=dtype, seed=1)
    want = F.rms_norm(x.double(), normalized, w.double(), eps=torch.finfo(dtype).eps)
    if dtype == torch.float32:
        close(rops.rms_norm(x, normalized, w), want, dtype)
        close(rops.rms_norm(x, normalized), F.rms_norm(x.double(), normalized, eps=torch.finfo(dtype).eps), dtype)
    else:  # eps=None in 16 bits: whatever the installed F.rms_norm does (it changed across versions)
        close(rops.rms_norm(x, normalized, w), F.rms_norm(x, normalized, w).double(), dtype)
        close(rops.rms_norm(x, normalized, w), want, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_default_eps_follows_torch(dtype):
    # Small inputs, where finfo(dtype).eps and finfo(float32).eps give very different results.
    x, w = (randn(5, 64) * 1e-3).to(dtype), torch.ones(64, dtype=dtype)
    close(rops.rms_norm(x, 64, w), F.rms_norm(x, (64,), w), dtype)


def test_rms_norm_explicit_eps():
    x, w = randn(4, 33) * 1e-2, randn(33, seed=1)
    close(rops.rms_norm(x, [33], w, eps=1e-3), F.rms_norm(x.double(), [33], w.double(), eps=1e-3), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm(dtype):
    x, w, b = randn(3, 7, 65, dtype=dtype) * 3 + 1, randn(65, dtype=dtype, seed=1), randn(65, dtype=dtype, seed=2)
    want = F.layer_norm(x.double(), (65,), w.double(), b.double())
    close(rops.layer_norm(x, (65,), w, b), want, dtype)
    if dtype == torch.float32:
        close(rops.layer_norm(x, (7, 65), eps=1e-3), F.layer_norm(x.double(), (7, 65), eps=1e-3), dtype)
        close(rops.layer_norm(x[:1, :1], 65, w), F.layer_norm(x[:1, :1].double(), (65,), w.double()), dtype)


# ------------------------------------------------------------------------------------ softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((7, 65), -1), ((1, 1), 0), ((3, 65, 7), 1), ((65, 3, 1), 0), ((5,), 0)])
def test_softmax(dtype, shape, dim):
    x = randn(*shape, dtype=dtype) * 4
    close(rops.softmax(x, dim), F.softmax(x.double(), dim), dtype)
    if dtype != torch.float16:
        close(rops.log_softmax(x, dim), F.log_softmax(x.double(), dim), dtype)


def test_softmax_dtype_and_strided_input():
    x = randn(65, 9, dtype=torch.bfloat16)
    close(rops.softmax(x, 0, dtype=torch.float32), F.softmax(x.double(), 0), torch.float32)
    xt = randn(9, 65).t()  # non-contiguous
    close(rops.log_softmax(xt, -1), F.log_softmax(xt.double(), -1), torch.float32)
    assert rops.softmax(torch.zeros(0, 4), -1).shape == (0, 4)


# ------------------------------------------------------------------------------------ MoE routing


@pytest.mark.parametrize("dtype,k", [(torch.float32, 2), (torch.float32, 7), (torch.bfloat16, 2)])
def test_moe_topk_softmax(dtype, k):
    logits = randn(2, 33, 7, dtype=dtype)
    w, idx = rops.moe_topk_softmax(logits, k)
    ref = torch.topk(F.softmax(logits.double(), -1), k)
    assert idx.dtype == torch.int64 and idx.shape == (2, 33, k)
    assert torch.equal(idx, ref.indices)
    close(w, ref.values, dtype)


def test_moe_topk_softmax_renormalize_and_ties():
    logits = randn(65, 7)
    w, idx = rops.moe_topk_softmax(logits, 2, renormalize=True)
    ref = torch.topk(F.softmax(logits.double(), -1), 2)
    assert torch.equal(idx, ref.indices)
    close(w, ref.values / ref.values.sum(-1, keepdim=True), torch.float32)
    # Ties go to the lower expert index.
    _, idx = rops.moe_topk_softmax(torch.zeros(3, 7), 2)
    assert idx.tolist() == [[0, 1]] * 3


# ------------------------------------------------------------------------------------ linear cross-entropy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_linear_cross_entropy(dtype, reduction):
    x, w = randn(3, 7, 16, dtype=dtype), randn(65, 16, dtype=dtype, seed=1)
    y = torch.randint(0, 65, (3, 7), generator=torch.Generator().manual_seed(2))
    y[0, 1] = y[2, 6] = -100
    logits = (x.double() @ w.double().T).reshape(-1, 65)
    want = F.cross_entropy(logits, y.reshape(-1), reduction=reduction)
    got = rops.linear_cross_entropy(x, w, y, reduction=reduction)
    assert got.shape == (want.reshape(3, 7) if reduction == "none" else want).shape
    close(got, want.reshape(got.shape), dtype)


def test_linear_cross_entropy_ignore_index_and_empty():
    x, w = randn(5, 8), randn(11, 8, seed=1)
    y = torch.tensor([3, 0, 3, 10, 3])
    want = F.cross_entropy(x.double() @ w.double().T, y, ignore_index=3)
    close(rops.linear_cross_entropy(x, w, y, ignore_index=3), want, torch.float32)
    assert torch.isnan(rops.linear_cross_entropy(x, w, torch.full((5,), -100)))  # every label ignored
    assert rops.linear_cross_entropy(x[:0], w, y[:0], reduction="sum") == 0


# ------------------------------------------------------------------------------------ torch.compile


def small_model(x, w, q, k, v, W, y, logits):
    h = rops.rms_norm(x, (x.shape[-1],), w)
    o = rops.attention(q, k, v, causal=True)
    p = rops.softmax(h, -1)
    loss = rops.linear_cross_entropy(h, W, y)
    weights, idx = rops.moe_topk_softmax(logits, 2)
    return h, o, p, loss, weights, idx


def small_model_inputs(seq):
    return (randn(seq, 32), randn(32, seed=1), randn(1, 4, seq, 16, seed=2), randn(1, 2, seq, 16, seed=3),
            randn(1, 2, seq, 16, seed=4), randn(65, 32, seed=5),
            torch.randint(0, 65, (seq,), generator=torch.Generator().manual_seed(6)), randn(seq, 8, seed=7))


def test_compile_fullgraph_dynamic_without_recompiles_or_rebuilds():
    eager = [small_model(*small_model_inputs(seq)) for seq in (9, 13)]  # builds the kernels
    builds = redfuse.stats()["builds"]
    compiled = torch.compile(small_model, fullgraph=True, dynamic=True, backend="eager")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seq, want in zip((9, 13), eager):
            for got, ref in zip(compiled(*small_model_inputs(seq)), want):
                torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert redfuse.stats()["builds"] == builds, "a new sequence length rebuilt a kernel"


def test_compile_with_inductor():
    def f(x, q, k, v):
        return rops.rms_norm(x, 32).sum(-1) * 2, rops.attention(q, k, v, causal=True) + 1

    args = small_model_inputs(11)
    x, q, k, v = args[0], args[2], args[3], args[4]
    want = f(x, q, k, v)
    for got, ref in zip(torch.compile(f, fullgraph=True)(x, q, k, v), want):
        torch.testing.assert_close(got, ref)


OPCHECK_CASES = {
    "attention": lambda: (randn(1, 4, 5, 8), randn(1, 2, 6, 8), randn(1, 2, 6, 8), True, None, None, None, None),
    "rms_norm": lambda: (randn(3, 5, 7), [7], randn(7), None),
    "layer_norm": lambda: (randn(3, 65), [65], randn(65), randn(65), 1e-5),
    "softmax": lambda: (randn(3, 8, 2), 1, None),
    "log_softmax": lambda: (randn(3, 8), -1, None),
    "moe_topk_softmax": lambda: (randn(3, 7), 2, True, None),
    "linear_cross_entropy": lambda: (randn(3, 16), randn(65, 16), torch.tensor([1, -100, 64]), -100, "mean"),
}


@pytest.mark.parametrize("name", sorted(OPCHECK_CASES))
def test_opcheck(name):
    torch.library.opcheck(getattr(torch.ops.redfuse, name).default, OPCHECK_CASES[name]())


# ------------------------------------------------------------------------------------ errors

Q, KV = torch.zeros(1, 4, 5, 8), torch.zeros(1, 2, 6, 8)
X, W5 = torch.zeros(3, 8), torch.zeros(5, 8)
LABELS = torch.zeros(3, dtype=torch.long)
LCE = rops.linear_cross_entropy
ERRORS = [
    (lambda: rops.attention(Q.double(), KV.double(), KV.double()), TypeError, "q has dtype torch.float64"),
    (lambda: rops.attention(Q, KV.half(), KV), TypeError, "k has dtype torch.float16 but q has torch.float32"),
    (lambda: rops.attention(Q[0], KV, KV), ValueError, "q must have 4 dimensions"),
    (lambda: rops.attention(Q, torch.zeros(1, 3, 6, 8), torch.zeros(1, 3, 6, 8)), ValueError, "not a multiple"),
    (lambda: rops.attention(Q, KV, torch.zeros(1, 2, 7, 8)), ValueError, "6 keys but v has 7"),
    (lambda: rops.attention(Q, torch.zeros(1, 2, 6, 4), KV), ValueError, "head dimension is 8 but k's is 4"),
    (lambda: rops.attention(Q, KV, KV, window=0), ValueError, "window must be at least 1"),
    (lambda: rops.attention(Q, KV, KV, window=2.5), TypeError, "window must be an integer"),
    (lambda: rops.attention(Q, KV, KV, softcap=-1.0), ValueError, "softcap must be a positive finite"),
    (lambda: rops.attention(Q, KV, KV, scale=math.inf), ValueError, "scale must be a finite"),
    (lambda: rops.attention(Q, KV, KV, scale="0.5"), TypeError, "scale must be a real number"),
    (lambda: rops.attention(Q, KV, KV, causal=1), TypeError, "causal must be a bool"),
    (lambda: rops.attention(Q, KV, KV, alibi_slopes=torch.zeros(3)), ValueError, "alibi_slopes has 3 entries"),
    (lambda: rops.attention(Q, KV, KV, alibi_slopes=torch.zeros(4).half()), TypeError, "alibi_slopes has dtype"),
    (lambda: rops.attention(Q, KV, KV[..., :0]), ValueError, "needs at least one key"),
    (lambda: rops.attention(Q, KV, "kv"), TypeError, "v must be a torch.Tensor"),
    (lambda: rops.softmax([1.0, 2.0], 0), TypeError, "input must be a torch.Tensor, got list"),
    (lambda: rops.linear_cross_entropy(X, None, X), TypeError, "weight must be a torch.Tensor"),
    (lambda: rops.rms_norm(X, (4,)), ValueError, r"normalized_shape \[4\] is not the trailing shape"),
    (lambda: rops.rms_norm(X, 8, torch.zeros(8).half()), TypeError, "weight has dtype torch.float16"),
    (lambda: rops.rms_norm(X, 8, torch.zeros(4)), ValueError, r"weight has shape \[4\]"),
    (lambda: rops.rms_norm(X.long(), 8), TypeError, "input has dtype torch.int64"),
    (lambda: rops.layer_norm(X, [], None), ValueError, "at least one dimension"),
    (lambda: rops.layer_norm(X, 8, eps=-1.0), ValueError, "eps must be a non-negative"),
    (lambda: rops.softmax(X, 2), IndexError, "dim 2 is out of range"),
    (lambda: rops.log_softmax(X, -3), IndexError, "dim -3 is out of range"),
    (lambda: rops.softmax(X, -1, dtype=torch.int32), TypeError, "dtype torch.int32 is not supported"),
    (lambda: rops.moe_topk_softmax(X, 9), ValueError, "k = 9 is out of range: there are 8 experts"),
    (lambda: rops.moe_topk_softmax(X, 0), ValueError, "k = 0 is out of range"),
    (lambda: LCE(X, W5, LABELS.int()), TypeError, "labels has dtype torch.int32"),
    (lambda: LCE(X, torch.zeros(5, 7), LABELS), ValueError, "last dimension is 8"),
    (lambda: LCE(X, W5, torch.zeros(4, dtype=torch.long)), ValueError, "labels has shape"),
    (lambda: LCE(X, W5, torch.tensor([0, 5, 1])), ValueError, r"label 5 is out of range \[0, 5\)"),
    (lambda: LCE(X, W5, LABELS, reduction="avg"), ValueError, "reduction must be"),
]


@pytest.mark.parametrize("call,exc,match", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------------------------------------------ packaging


def test_lazy_attribute_and_shipped_specs():
    assert redfuse.ops is importlib.import_module("redfuse.ops")
    assert "ops" in redfuse.__all__
    specs = importlib.resources.files("redfuse").joinpath("specs")
    names = {p.name for p in specs.iterdir()}
    assert {"attention.rf", "rms_norm.rf", "layer_norm.rf", "softmax_rows.rf",
            "moe_topk_softmax.rf", "linear_cross_entropy.rf"} <= names
