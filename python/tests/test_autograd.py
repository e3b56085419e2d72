"""Autograd through Kernels with the derived backward (docs/grad.md): gradcheck in float64 on every
example with a float output that the rules cover, at the spec's sizes and at primes; bf16 attention
against torch autograd of SDPA; training under torch.compile(fullgraph=True); and the refusals."""
from __future__ import annotations

import pathlib
import re

import pytest

torch = pytest.importorskip("torch")

import redfuse  # noqa: E402
from helpers import spec_sizes  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.rf"))
# Refused by the rules, with the reason the derivation gives (tests/unit/grad checks the messages).
REFUSED = {"quant_gemm_fp8": "rounding", "quant_gemm_int8": "rounding", "moment_of_inertia": "nested",
           "mla_decode": "partial"}


def float64_variant(text: str) -> str:
    """The spec with its float inputs and real outputs declared f64 (casts inside bodies untouched;
    index outputs keep their integer dtype)."""
    lines = [re.sub(r":\s*(bf16|f16|f32)\b", ": f64", l) if re.match(r"\s*input\b", l) else l
             for l in text.splitlines() if not re.match(r"\s*output\b", l)]
    probe = redfuse.compile("\n".join(lines + [l for l in text.splitlines() if re.match(r"\s*output\b", l)]) + "\n",
                            target="interp")
    lines += [f"output {o.name}" + ("" if o.is_index or o.dtype.startswith("i") else " : f64") for o in probe.outputs]
    return "\n".join(lines) + "\n"


def next_prime(v: int) -> int:
    n = max(v, 2)
    while any(n % d == 0 for d in range(2, int(n ** 0.5) + 1)):
        n += 1
    return n


def inputs_for(k: redfuse.Kernel, sizes: dict, gen: torch.Generator) -> list:
    env = {**dict(k._core.fixed_sizes()), **sizes}
    xs = []
    for spec in k.inputs:
        shape = [int(eval(d.replace("/", "//"), {}, env)) for d in spec.shape]
        if spec.dtype.startswith("i"):
            # Index inputs (labels): valid positions of the axis they index, here the last size.
            hi = max(1, min(env.values()))
            xs.append(torch.randint(0, hi, shape, generator=gen, dtype=getattr(torch, {"i32": "int32", "i64": "int64", "i8": "int8"}[spec.dtype])))
        else:
            # U[0.5, 1.5): logs, square roots and divisions stay defined in every example.
            xs.append((torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5).requires_grad_())
    return xs


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_gradcheck_float64(path):
    text = float64_variant(path.read_text())
    if path.stem in REFUSED:
        with pytest.raises(redfuse.SpecError, match="no derived backward"):
            redfuse.compile(text, target="interp", grad=True)
        return
    # The plan interpreter computes in float64 (the CPU kernels compute f64 specs partly in float32).
    k = redfuse.compile(text, target="interp", name=f"gc_{path.stem}", grad=True)
    if not any(t.dtype == "f64" for t in k.outputs):
        pytest.skip("no real output")
    defaults = spec_sizes(text)
    gen = torch.Generator().manual_seed(7)

    def f(*xs):
        out = k(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(o for o in outs if o.dtype.is_floating_point)

    # Every Jacobian entry at small sizes (capped at 3) and at ones; a random projection of it
    # (fast mode) at the spec's sizes and at primes. A variant the spec's index bounds forbid
    # (e.g. GQA's Hq / Hkv at primes) is skipped; the spec's own sizes always run.
    variants = [({n: min(v, 3) for n, v in defaults.items()}, False), ({n: 1 for n in defaults}, False),
                (defaults, True), ({n: next_prime(v) for n, v in defaults.items()}, True)]
    for sizes, fast in variants:
        xs = inputs_for(k, sizes, gen)
        try:
            f(*xs)
        except (redfuse.SpecError, ValueError) as e:
            if sizes is defaults:
                raise
            assert "can reach" in str(e) or "larger than the extent" in str(e) or "is not" in str(e), e
            continue
        assert torch.autograd.gradcheck(f, tuple(xs), eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=fast), sizes


def test_bf16_attention_gradients_against_sdpa():
    k = redfuse.compile(str(ROOT / "examples" / "attention_causal.rf"), name="attn_grad")
    gen = torch.Generator().manual_seed(3)
    q, kk, v = (torch.randn(2, 3, 37, 64, generator=gen).to(torch.bfloat16).requires_grad_() for _ in range(3))
    o = k(q, kk, v)
    g = torch.randn(o.shape, generator=gen).to(torch.bfloat16)
    o.backward(g)
    ref = [t.detach().float().requires_grad_() for t in (q, kk, v)]
    torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=True).backward(g.float())
    for t, r in zip((q, kk, v), ref):
        assert t.grad.dtype == torch.bfloat16
        torch.testing.assert_close(t.grad.float(), r.grad, rtol=3e-2, atol=3e-2)


def test_training_under_torch_compile():
    k = redfuse.compile(str(ROOT / "examples" / "log_softmax.rf"), name="lsm_train", grad=True)
    w = torch.randn(7, 33, requires_grad=True)
    target = torch.randint(0, 33, (7,))

    def loss(w):
        return -k(w * 2.0).gather(1, target[:, None]).mean()

    compiled = torch.compile(loss, fullgraph=True)
    builds = redfuse.stats()["builds"]
    compiled(w).backward()
    got = w.grad.clone()
    w.grad = None
    torch.nn.functional.cross_entropy(w * 2.0, target).backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-5, atol=1e-6)
    assert redfuse.stats()["builds"] == builds, "tracing rebuilt a kernel"


def test_forced_schedule_knobs_reach_the_backward():
    """tile/row_block given to compile also shape the derived forward-with-residuals and backward
    kernels (kernel._build), and the gradients are still right."""
    text = (ROOT / "examples" / "log_softmax.rf").read_text()
    k = redfuse.compile(text, target="cpu", name="lsm_knobs", grad=True, tile=40, row_block=3)
    plain = redfuse.compile(text, target="cpu", grad=True)
    assert k._training().backward.source() != plain._training().backward.source()
    assert "(int64_t)40" in k._training().forward.source()
    w = torch.randn(11, 300, dtype=torch.float64).float().requires_grad_()
    g = torch.randn(11, 300)
    (k(w) * g).sum().backward()
    got = w.grad.clone()
    w.grad = None
    (torch.log_softmax(w, -1) * g).sum().backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-4, atol=1e-5)


def test_a_kernel_without_a_derived_backward():
    k = redfuse.compile(str(ROOT / "examples" / "quant_gemm_int8.rf"), name="q_nograd")
    assert "no derived backward" in k.grad_notes[0], k.grad_notes
    a = torch.rand(4, 37).to(torch.bfloat16).requires_grad_()
    w = torch.randint(-5, 5, (7, 37), dtype=torch.int8)
    sw = torch.rand(7)
    out = k(a, w, sw)
    with pytest.raises(RuntimeError, match="no autograd formula"):
        out.float().sum().backward()


@pytest.mark.parametrize("Hq,Hkv,causal", [(4, 4, False), (4, 4, True), (4, 2, True)])
def test_ops_attention_gradients_mha_and_gqa(Hq, Hkv, causal):
    # Differentiated, both run the ungrouped spec, whose dK and dV sum over their own head only (GQA
    # with K and V repeated per query head, their gradients summed back by repeat_interleave);
    # inference keeps the grouped spec for GQA. Both must give SDPA's gradients.
    import redfuse.ops as rops
    before = set(rops._kernels)
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(2, Hq, 37, 16, generator=gen, requires_grad=True)
    k = torch.randn(2, Hkv, 41, 16, generator=gen, requires_grad=True)
    v = torch.randn(2, Hkv, 41, 8, generator=gen, requires_grad=True)
    g = torch.randn(2, Hq, 37, 8, generator=gen)
    rops.attention(q, k, v, causal=causal).backward(g)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=causal, enable_gqa=True).backward(g.double())
    for t, r in zip((q, k, v), ref):
        torch.testing.assert_close(t.grad.double(), r.grad, rtol=1e-4, atol=1e-5)
    made = [key for key in set(rops._kernels) - before if key[0] == "attention"]
    assert all(not key[7] for key in made), made  # no grouped kernel for the training step
    with torch.no_grad():
        out = rops.attention(q, k, v, causal=causal)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=True), rtol=1e-4, atol=1e-5)
    grouped = [key[7] for key in rops._kernels if key[0] == "attention"]
    assert (Hq != Hkv) in grouped


def _ops_cases():
    import redfuse.ops as rops
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(5)

    def rnd(*s):
        return torch.randn(*s, generator=gen)

    labels = torch.tensor([1, 5, -100, 3, 0, 6, 2])

    def moe_ref(x):
        w, i = torch.topk(torch.softmax(x, -1), 2, dim=-1)
        return w, i

    return [
        ("attention", lambda q, k, v: rops.attention(q, k, v, causal=True),
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [rnd(1, 2, 9, 8), rnd(1, 2, 11, 8), rnd(1, 2, 11, 4)]),
        ("rms_norm", lambda x, w: rops.rms_norm(x, [16], w, eps=1e-6), lambda x, w: F.rms_norm(x, [16], w, eps=1e-6), [rnd(3, 5, 16), rnd(16)]),
        ("layer_norm", lambda x, w, b: rops.layer_norm(x, [16], w, b), lambda x, w, b: F.layer_norm(x, [16], w, b), [rnd(4, 16), rnd(16), rnd(16)]),
        ("softmax", lambda x: rops.softmax(x, 0), lambda x: torch.softmax(x, 0), [rnd(13, 3)]),
        ("log_softmax", lambda x: rops.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1), [rnd(3, 13)]),
        ("moe_topk_softmax", lambda x: rops.moe_topk_softmax(x, 2)[0], lambda x: moe_ref(x)[0], [rnd(6, 8)]),
        ("linear_cross_entropy", lambda x, w: rops.linear_cross_entropy(x, w, labels),
         lambda x, w: F.cross_entropy(x @ w.T, labels), [rnd(7, 16), rnd(9, 16)]),
    ]


@pytest.mark.parametrize("case", range(7))
def test_ops_train_under_torch_compile(case):
    # The custom ops carry an autograd formula (the derived backward through the op's Kernel), so a
    # compiled training step differentiates them; the gradients are torch autograd's of the same math.
    # AOTAutograd is where the formula is needed: aot_eager checks it without inductor's (slow)
    # code generation, inductor itself runs on attention.
    name, ours, ref, xs = _ops_cases()[case]
    leaves = [x.clone().requires_grad_() for x in xs]
    backend = "inductor" if name == "attention" else "aot_eager"
    compiled = torch.compile(lambda *a: ours(*a).sum(), fullgraph=True, backend=backend)
    compiled(*leaves).backward()
    want = [x.clone().requires_grad_() for x in xs]
    ref(*want).sum().backward()
    for g, w in zip(leaves, want):
        torch.testing.assert_close(g.grad, w.grad, rtol=1e-4, atol=1e-5, msg=name)


_WARM_CACHE_STEP = """
import torch
import redfuse.ops as rops
torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 16, 8, requires_grad=True) for _ in range(3))
step = torch.compile(lambda q, k, v: rops.attention(q, k, v, causal=True).sum())
step(q, k, v).backward()
print(repr(q.grad.double().sum().item()), repr(v.grad.double().sum().item()))
"""


def test_compiled_training_step_from_a_warm_cache(tmp_path):
    # A second process loads the compiled backward from the on-disk cache: it calls the Kernel's
    # forward-with-residuals and backward custom ops by name, which the op's fake implementation
    # has made by then (ops._prepare_backward). Before, AttributeError: no 'kernel_train_<hash>'.
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               PYTHONPATH=os.pathsep.join([str(pathlib.Path(redfuse.__file__).parent.parent)]
                                          + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    runs = [subprocess.run([sys.executable, "-c", _WARM_CACHE_STEP], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    assert runs[0].stdout == runs[1].stdout
    assert any((tmp_path / "inductor").iterdir())  # the second run had a cache to read


@pytest.mark.parametrize("target", ["cpu", "interp"])
def test_fully_masked_rows_get_zero_gradients(target):
    # tests/specs/masked_attention.rf: queries 0 and 1 see no key (O = 0, lse = -inf there). Their
    # gradients are 0, not NaN, in the generated kernels as in the reference (docs/grad.md).
    k = redfuse.compile(str(ROOT / "tests" / "specs" / "masked_attention.rf"), target=target, name=f"masked_{target}")
    gen = torch.Generator().manual_seed(3)
    q, kk, v = (torch.randn(1, 2, s, 4, generator=gen).requires_grad_() for s in (6, 11, 11))
    o, lse = k(q, kk, v)
    assert torch.equal(o[:, :, :2], torch.zeros_like(o[:, :, :2]))
    (o * torch.randn(o.shape, generator=gen)).sum().backward()
    for g in (q.grad, kk.grad, v.grad):
        assert torch.isfinite(g).all()
    assert torch.equal(q.grad[:, :, :2], torch.zeros_like(q.grad[:, :, :2]))
    # The visible rows against torch autograd of the same math.
    ref = [t.detach().double().requires_grad_() for t in (q, kk, v)]
    s = ref[0] @ ref[1].transpose(-1, -2)
    i, j = torch.arange(6)[:, None], torch.arange(11)[None, :]
    s = s.masked_fill(~((i >= 2) & (j <= i + 4)), float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    gen = torch.Generator().manual_seed(3)
    [torch.randn(1, 2, n, 4, generator=gen) for n in (6, 11, 11)]
    w = torch.randn(o.shape, generator=gen).double()
    ((p @ ref[2]) * w).sum().backward()
    for got, want in zip((q.grad, kk.grad, v.grad), ref):
        torch.testing.assert_close(got.double(), want.grad, rtol=1e-4, atol=1e-5)
