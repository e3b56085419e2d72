"""The PyTorch integration: tensors in and out, each Kernel a torch.library custom op with a fake
implementation, torch.compile(fullgraph=True) without graph breaks, dynamic shapes without a
recompile or a rebuild, opcheck, and tensor errors."""
from __future__ import annotations

import pathlib

import pytest

torch = pytest.importorskip("torch")

import redfuse  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "examples" / "softmax.rf")
ATTENTION = str(ROOT / "examples" / "attention.rf")


def test_tensors_in_tensors_out():
    k = redfuse.compile(SOFTMAX, name="softmax_t")
    x = torch.randn(6, 333)
    y = k(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(k(x.t().contiguous().t()), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)


def test_bf16_attention_against_sdpa():
    k = redfuse.compile(ATTENTION)
    q, kk, v = (torch.randn(1, 2, 37, 16, dtype=torch.bfloat16) for _ in range(3))
    o = k(q, kk, v)
    assert o.dtype == torch.bfloat16
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float())
    torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)


def test_fullgraph_and_dynamic_without_recompiles_or_rebuilds():
    k = redfuse.compile(SOFTMAX, name="softmax_c")
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return gm.forward

    f = torch.compile(lambda t: k(t) * 2.0, fullgraph=True, dynamic=True, backend=backend)
    builds = redfuse.stats()["builds"]
    for rows, cols in [(4, 100), (9, 257), (3, 4097)]:
        x = torch.randn(rows, cols)
        torch.testing.assert_close(f(x), 2 * torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)
    assert len(frames) == 1, "a new size recompiled the graph"
    assert redfuse.stats()["builds"] == builds, "a new size rebuilt the kernel"
    # The default backend (Inductor) runs the op too.
    g = torch.compile(lambda t: k(t) + 1.0, fullgraph=True)
    x = torch.randn(5, 50)
    torch.testing.assert_close(g(x), torch.softmax(x, dim=1) + 1, rtol=1e-5, atol=1e-6)


def test_opcheck():
    k = redfuse.compile(SOFTMAX, name="softmax_o")
    torch.library.opcheck(k.op, ([torch.randn(3, 40)],))


def test_tensor_errors():
    k = redfuse.compile(ATTENTION)
    q = torch.zeros(1, 2, 5, 4, dtype=torch.bfloat16)
    kv = torch.zeros(1, 2, 7, 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="input 'Q' has dtype torch.float32; the spec declares bf16"):
        k(q.float(), kv, kv)
    with pytest.raises(ValueError, match=r"input 'K' dimension 3 \(size D\)"):
        k(q, torch.zeros(1, 2, 7, 5, dtype=torch.bfloat16), kv)
    with pytest.raises(TypeError, match="mix torch tensors and NumPy arrays"):
        k(q, kv, kv.float().numpy())
    with pytest.raises(ValueError, match="identifier"):
        redfuse.compile(SOFTMAX, name="not a name")
