"""The eager hot path on CPU tensors: redfuse._redfuse_torch (built against the installed torch) reads
and allocates tensors and checks torch's modes in C++; without it the extension reads tensors through
Python. Both give the custom op's results, refuse what they cannot run as is (modes, subclasses,
gradients, lazy negation), and leave errors to the general path's wording."""
from __future__ import annotations

import pathlib

import pytest

torch = pytest.importorskip("torch")

import redfuse  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "examples" / "softmax.rf")
ATTENTION = str(ROOT / "examples" / "attention.rf")
MOE = str(ROOT / "examples" / "moe_routing.rf")


@pytest.fixture(params=[True, False], ids=["libtorch-reads", "python-reads"])
def reads(request):
    """Runs a test with the C++ (libtorch) tensor reads in use, then with the Python reads."""
    assert redfuse._load_torch_api(torch, use=request.param) == request.param
    yield request.param
    redfuse._load_torch_api(torch)


def test_the_libtorch_module_is_built_for_this_torch():
    from redfuse import _redfuse_torch

    assert _redfuse_torch.torch_version == torch.__version__
    redfuse.compile(SOFTMAX)(torch.randn(2, 3))  # meets torch: loads the module
    assert redfuse._torch_api_in_use[0]


def test_results_match_the_op_by_position_and_by_name(reads):
    k = redfuse.compile(ATTENTION, name="attention_hot_reads")
    q, kk, v = (torch.randn(2, 3, 9, 8, dtype=torch.bfloat16) for _ in range(3))
    want = k.op([q, kk, v])[0]
    for got in (k(q, kk, v), k(Q=q, K=kk, V=v), k(V=v, K=kk, Q=q)):
        assert isinstance(got, torch.Tensor)  # one output: the tensor itself
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    strided = kk.transpose(2, 3).contiguous().transpose(2, 3)
    torch.testing.assert_close(k(q, strided, v), want, rtol=0, atol=0)
    torch.testing.assert_close(k(q[:, :, ::2], kk, v), k.op([q[:, :, ::2].contiguous(), kk, v])[0], rtol=0, atol=0)


def test_two_outputs_and_short_rows_match_torch(reads):
    # MoE routing, one token and many: the values and indices of softmax -> top-k.
    k = redfuse.compile(MOE, name="moe_hot_reads")
    for T, E in ((1, 8), (1, 64), (1, 256), (33, 64)):
        x = torch.randn(T, E)
        x[:, 3] = x[:, 5]  # a tie: the lower index first
        w, i = k(X=x)
        ref_w, ref_i = torch.sort(torch.softmax(x, dim=-1), dim=-1, descending=True, stable=True)  # ties: lower index
        torch.testing.assert_close(w, ref_w[:, :4], rtol=1e-5, atol=1e-7)
        assert torch.equal(i.long(), ref_i[:, :4])


def test_lazy_negation_is_resolved(reads):
    k = redfuse.compile(SOFTMAX, name="softmax_neg_view")
    x = torch.randn(3, 5)
    torch.testing.assert_close(k(torch._neg_view(x)), torch.softmax(-x, dim=1), rtol=1e-5, atol=1e-7)


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _FunctionRecorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_modes_see_the_call_as_the_op(reads):
    # Under a dispatch or function mode the call goes through the custom op, where the mode sees it.
    k = redfuse.compile(SOFTMAX, name="softmax_modes")
    x = torch.randn(4, 6)
    with _Recorder() as rec:
        y = k(X=x)
    assert any("softmax_modes" in op for op in rec.ops), rec.ops
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)
    with _FunctionRecorder() as fn:
        k(x)
    assert fn.calls > 0
    rec2 = _Recorder()
    with rec2:
        pass
    k(x)  # no mode any more: the hot path again, which the finished recorder does not see
    assert rec2.ops == []


def test_subclasses_and_gradients_leave_the_hot_path(reads):
    k = redfuse.compile(SOFTMAX, name="softmax_leave")
    x = torch.randn(3, 5)
    p = torch.nn.Parameter(x.clone(), requires_grad=False)  # a subclass of torch.Tensor
    torch.testing.assert_close(k(p), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-7)
    g = x.clone().requires_grad_()
    assert k(g).grad_fn is not None


def test_errors_are_worded_by_the_general_path(reads):
    k = redfuse.compile(SOFTMAX, name="softmax_errors_hot")
    with pytest.raises(TypeError, match="input 'X' has dtype torch.float64; the spec declares f32"):
        k(X=torch.randn(3, 5, dtype=torch.float64))
    with pytest.raises(TypeError, match="unknown input"):
        k(Y=torch.randn(3, 5))
    with pytest.raises(TypeError, match="either by position or by name"):
        k(torch.randn(3, 5), X=torch.randn(3, 5))


def test_parameters_under_no_grad_run_directly(reads):
    # A model's weights are torch.nn.Parameters that require grad; under no_grad (inference) the call
    # needs no graph, so it runs directly, not through the custom op's dispatch.
    k = redfuse.compile(SOFTMAX, name="softmax_params")
    w = torch.nn.Parameter(torch.randn(4, 6))
    with torch.no_grad(), torch.profiler.profile() as prof:
        y = k(X=w)
    names = [e.name for e in prof.events()]
    assert not any("redfuse::" in n for n in names), names
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, torch.softmax(w.detach(), dim=1), rtol=1e-5, atol=1e-7)
    with torch.profiler.profile() as prof:
        z = k(X=w)  # grad mode on: the training op, whose autograd formula is the derived backward
    assert z.grad_fn is not None
    assert any("redfuse::" in e.name for e in prof.events())
