"""examples/python/llama_block.py: the layer with redfuse.ops gives the PyTorch layer's outputs and
loss (float32 and bfloat16), also under torch.compile(fullgraph=True); correctness only, no timing."""
import importlib.util
import pathlib

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "llama_block.py"


@pytest.fixture(scope="module")
def llama():
    spec = importlib.util.spec_from_file_location("llama_block", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMALL = dict(vocab=300, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=172)


@pytest.mark.parametrize("dtype,out_tol,loss_tol", [(torch.float32, 2e-5, 2e-5), (torch.bfloat16, 6e-2, 3e-2)])
def test_redfuse_layer_matches_torch(llama, dtype, out_tol, loss_tol):
    cfg = llama.Config(**SMALL)
    tokens = llama.random_tokens(cfg, batch=2, seq=33)
    with torch.inference_mode():
        out_t, loss_t = llama.LlamaBlock(cfg, use_redfuse=False, dtype=dtype)(tokens)
        out_r, loss_r = llama.LlamaBlock(cfg, use_redfuse=True, dtype=dtype)(tokens)
    assert out_r.dtype == out_t.dtype == dtype and out_r.shape == out_t.shape == (2, 33, cfg.hidden)
    # bfloat16: the two versions round at different places (redfuse once per fused op), so they
    # differ by a few bfloat16 ulps of values of magnitude ~1-3.
    torch.testing.assert_close(out_r.float(), out_t.float(), rtol=out_tol, atol=out_tol)
    torch.testing.assert_close(loss_r.float(), loss_t.float(), rtol=loss_tol, atol=loss_tol)
    # Sanity: the loss of random weights is near log(vocab).
    assert abs(float(loss_t) - float(torch.log(torch.tensor(float(cfg.vocab))))) < 1.0


def test_redfuse_layer_under_torch_compile(llama):
    cfg = llama.Config(**SMALL)
    model = llama.LlamaBlock(cfg, use_redfuse=True)
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="eager")
    with torch.inference_mode(), torch._dynamo.config.patch(error_on_recompile=True):
        for seq in (17, 29):  # a second sequence length: no recompile
            tokens = llama.random_tokens(cfg, batch=1, seq=seq)
            out, loss = compiled(tokens)
            want_out, want_loss = model(tokens)
            torch.testing.assert_close(out, want_out)
            torch.testing.assert_close(loss, want_loss)


def test_main_runs(llama, capsys):
    llama.main(["--seq", "16", "--batch", "1", "--repeats", "1"])
    printed = capsys.readouterr().out
    assert "forward max |redfuse - torch|" in printed and printed.count(" loss ") == 2


def test_training_curves_agree(llama):
    # Forward and backward through redfuse's derived kernels (norms, causal GQA attention, linear +
    # cross-entropy) against PyTorch autograd: the same SGD steps give the same losses.
    cfg = llama.Config(**SMALL)
    tokens = llama.random_tokens(cfg, batch=2, seq=17)
    ours = llama.train(llama.LlamaBlock(cfg, use_redfuse=True), tokens, steps=4)
    theirs = llama.train(llama.LlamaBlock(cfg, use_redfuse=False), tokens, steps=4)
    assert theirs[-1] < theirs[0], "the loss should fall"
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), rtol=1e-4, atol=1e-4)
