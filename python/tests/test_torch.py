"""The PyTorch integration: tensors in and out, each Kernel a torch.library custom op with a fake
implementation, torch.compile(fullgraph=True) without graph breaks, dynamic shapes without a
recompile or a rebuild, opcheck, and tensor errors."""
from __future__ import annotations

import pathlib

import pytest

torch = pytest.importorskip("torch")

import redfuse  # noqa: E402
from helpers import in_two_threads  # noqa: E402

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


def test_bf16_attention_sees_inputs_changed_in_place_between_calls():
    # On AMX CPUs a thread keeps K's and V's packed tile panels across the row blocks of one call; the
    # next call (same tensors, new contents) must pack them again.
    k = redfuse.compile(ATTENTION, sizes=dict(B=1, H=2, M=256, N=512, D=64))
    q, kk, v = (torch.randn(1, 2, 256, 64, dtype=torch.bfloat16) for _ in range(3))
    for _ in range(2):
        o = k(q, kk, v)
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), kk.float(), v.float())
        torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)
        kk.copy_(torch.randn_like(kk))
        v.copy_(torch.randn_like(v))


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


def test_eager_hot_path_agrees_with_the_custom_op():
    # Plain CPU tensors take the C++ hot path; the op goes through torch's dispatcher: same results,
    # for contiguous and strided inputs, by position and by name.
    k = redfuse.compile(ATTENTION, name="attention_hot")
    q, kk, v = (torch.randn(2, 3, 9, 8, dtype=torch.bfloat16) for _ in range(3))
    want = k.op([q, kk, v])[0]
    torch.testing.assert_close(k(q, kk, v), want, rtol=0, atol=0)
    torch.testing.assert_close(k(Q=q, K=kk, V=v), want, rtol=0, atol=0)
    strided = kk.transpose(2, 3).contiguous().transpose(2, 3)  # same values, other strides
    torch.testing.assert_close(k(q, strided, v), want, rtol=0, atol=0)
    for m in (1, 5, 17):  # new sizes on the hot path: no rebuild
        builds = redfuse.stats()["builds"]
        qm = torch.randn(2, 3, m, 8, dtype=torch.bfloat16)
        torch.testing.assert_close(k(qm, kk, v), k.op([qm, kk, v])[0], rtol=0, atol=0)
        assert redfuse.stats()["builds"] == builds


def test_inputs_by_name_in_any_order_and_their_errors():
    # The by-name fast path takes the spec's names in any order; anything else gets the checks.
    k = redfuse.compile(ATTENTION, name="attention_names")
    q, kk, v = (torch.randn(1, 2, 5, 8, dtype=torch.bfloat16) for _ in range(3))
    want = k(q, kk, v)
    torch.testing.assert_close(k(V=v, Q=q, K=kk), want, rtol=0, atol=0)
    with pytest.raises(TypeError, match="unknown input"):
        k(Q=q, K=kk, W=v)
    with pytest.raises(TypeError, match="missing input"):
        k(Q=q, K=kk)
    with pytest.raises(TypeError, match="either by position or by name"):
        k(q, K=kk, V=v)


def test_two_threads_calling_one_kernel_on_tensors():
    k = redfuse.compile(SOFTMAX, name="softmax_threads")
    xs = [torch.randn(3 + i, 50 + 17 * i) for i in range(16)]
    alone = [k(x) for x in xs]
    together = in_two_threads(k, xs)
    for a, b in zip(alone, together):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_tensors_that_need_gradients_go_through_the_op():
    # Off the hot path: the forward with residuals, whose autograd formula is the derived backward.
    k = redfuse.compile(SOFTMAX, name="softmax_grad")
    x = torch.randn(3, 5, requires_grad=True)
    y = k(x)
    assert y.grad_fn is not None
    torch.testing.assert_close(y, torch.softmax(x.detach(), dim=1), rtol=1e-5, atol=1e-7)
    w = torch.randn(3, 5)
    (y * w).sum().backward()
    ref = x.detach().clone().requires_grad_()
    (torch.softmax(ref, dim=1) * w).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert k(x).grad_fn is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_auto_target_follows_the_device():
    k = redfuse.compile(SOFTMAX, name="softmax_auto")
    x = torch.randn(6, 333)
    y = k(x.cuda())
    assert y.is_cuda
    torch.testing.assert_close(y.cpu(), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)
    cpu_only = redfuse.compile(SOFTMAX, target="cpu")
    with pytest.raises(ValueError, match="compiled for cpu"):
        cpu_only(x.cuda())


def test_device_errors():
    k = redfuse.compile(SOFTMAX, target="cpu", name="softmax_dev")
    with pytest.raises(ValueError, match="is on meta"):
        k(torch.empty(3, 4, device="meta"))


PAIR_SUM = """size R, C
input X[R, C] : f32
Y[r, c: C / 2] = X[r, 2 * c] + X[r, 2 * c + 1]
output Y : f32
"""


def test_fake_shapes_of_output_dimensions_that_are_expressions():
    # Y's extent is C / 2 (floor): the fake implementation evaluates it on the symbolic C, so a
    # dynamic graph serves every width without a recompile.
    k = redfuse.compile(PAIR_SUM, name="pair_sum")
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return gm.forward

    f = torch.compile(lambda t: k(t), fullgraph=True, dynamic=True, backend=backend)
    for cols in (8, 10, 7):
        x = torch.randn(3, cols)
        want = x[:, 0:2 * (cols // 2):2] + x[:, 1:2 * (cols // 2):2]
        torch.testing.assert_close(f(x), want)
    assert len(frames) == 1
    torch.library.opcheck(k.op, ([torch.randn(2, 6)],))


def test_exact_products_keeps_float32_products_of_bf16_attention():
    """bf16 attention: by default P is rounded to bf16 for the P·V GEMM (where the CPU has a bf16
    unit) and its exp pass takes the degree-4 exp2; exact_products=True keeps both float32-exact.
    Both stay within bf16 accuracy of the float64 math."""
    spec = str(ROOT / "tests" / "specs" / "attention_bf16.rf")
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 40, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    ref = torch.softmax((q.double() @ k.double().transpose(-1, -2)) / 32 ** 0.5, -1) @ v.double()
    rounded = redfuse.compile(spec, target="cpu")
    exact = redfuse.compile(spec, target="cpu", exact_products=True)
    # the kernel's call, plain or _input_v (V is an input); the pasted runtime header defines both in both
    call = "rfk::gemm_nn_acc_f32_as_bf16"
    assert call in rounded.source() and call not in exact.source()
    # the exp pass: the degree-4 exp2 of half-precision outputs by default, <= 1 ulp with exact_products
    half = "<rfk::Exp2Accuracy::Half>("
    assert half in rounded.source() and half not in exact.source()
    for kern in (rounded, exact):
        out = kern(q, k, v)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
