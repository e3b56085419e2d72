"""A small Llama-style decoder layer with a linear + cross-entropy head in PyTorch, whose norms,
attention and loss can be swapped for redfuse.ops (use_redfuse=True): forward error, losses, times.

    python examples/python/llama_block.py                 # both versions: max error, losses, times
    python examples/python/llama_block.py --torch         # only the PyTorch one (--redfuse: only redfuse)
    python examples/python/llama_block.py --dtype bfloat16 --seq 1024 --compile

The layer: RMSNorm -> Q/K/V projections -> RoPE -> causal GQA attention -> output projection +
residual -> RMSNorm -> SwiGLU MLP + residual -> RMSNorm -> LM head -> cross-entropy against the next
token. With use_redfuse the three RMSNorms, the attention and the head + loss (the logits are never
materialized) are redfuse.ops calls; the projections, RoPE and the MLP stay torch in both versions.
Weights are random (seeded); forward only (redfuse.ops has no autograd yet).
"""
import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

import redfuse.ops as rops


@dataclass(frozen=True)
class Config:
    vocab: int = 8192
    hidden: int = 512
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 1408
    eps: float = 1e-5
    rope_theta: float = 10000.0


def _weight(g: torch.Generator, *shape: int, std: float = 0.02) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=g) * std, requires_grad=False)


class LlamaBlock(nn.Module):
    """One decoder layer plus the final norm and the LM head; ``use_redfuse`` picks the kernels of
    the norms, the attention and the loss (the weights are the same either way)."""

    def __init__(self, cfg: Config = Config(), use_redfuse: bool = True, seed: int = 0,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg, self.use_redfuse = cfg, use_redfuse
        g = torch.Generator().manual_seed(seed)
        h, q_dim, kv_dim = cfg.hidden, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.embed = _weight(g, cfg.vocab, h, std=1.0)
        # Norm weights near 1 (not exactly: a weight of ones would hide a mix-up of weight and input).
        self.attn_norm, self.mlp_norm, self.final_norm = (nn.Parameter(1 + 0.1 * torch.randn(h, generator=g),
                                                                       requires_grad=False) for _ in range(3))
        self.wq, self.wk, self.wv = _weight(g, q_dim, h), _weight(g, kv_dim, h), _weight(g, kv_dim, h)
        self.wo = _weight(g, h, q_dim)
        self.w_gate, self.w_up = _weight(g, cfg.intermediate, h), _weight(g, cfg.intermediate, h)
        self.w_down = _weight(g, h, cfg.intermediate)
        self.lm_head = _weight(g, cfg.vocab, h)
        self.to(dtype)

    # ---- the swapped parts
    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.use_redfuse:
            return rops.rms_norm(x, (self.cfg.hidden,), weight, self.cfg.eps)
        return F.rms_norm(x, (self.cfg.hidden,), weight, self.cfg.eps)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.use_redfuse:
            return rops.attention(q, k, v, causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def loss(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.use_redfuse:
            return rops.linear_cross_entropy(h, self.lm_head, labels)
        logits = h @ self.lm_head.T
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab), labels.reshape(-1))

    # ---- the rest, torch in both versions
    def rope(self, seq: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        half = self.cfg.head_dim // 2
        inv_freq = self.cfg.rope_theta ** (-torch.arange(half, dtype=torch.float32, device=device) / half)
        angles = torch.arange(seq, dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos(), angles.sin()

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)

    def attention_block(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        B, S, _ = x.shape
        # [B, S, H, D] -> [B, H, S, D]: the transposed (strided) layout SDPA and redfuse take.
        q = (x @ self.wq.T).view(B, S, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = (x @ self.wk.T).view(B, S, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = (x @ self.wv.T).view(B, S, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        cos, sin = self.rope(S, x.device)
        o = self.attend(self.rotate(q, cos, sin), self.rotate(k, cos, sin), v)
        return o.transpose(1, 2).reshape(B, S, cfg.heads * cfg.head_dim) @ self.wo.T

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ self.w_gate.T) * (x @ self.w_up.T)) @ self.w_down.T

    def forward(self, tokens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, S + 1] int64: the layer reads tokens[:, :-1] and predicts tokens[:, 1:].
        Returns the final normalized hidden states [B, S, hidden] and the mean loss."""
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        x = self.embed[inputs]
        h = x + self.attention_block(self.norm(x, self.attn_norm))
        h = h + self.mlp(self.norm(h, self.mlp_norm))
        out = self.norm(h, self.final_norm)
        return out, self.loss(out, labels)


def random_tokens(cfg: Config, batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, cfg.vocab, (batch, seq + 1), generator=torch.Generator().manual_seed(seed))


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` calls, after one warm-up call (JIT builds, torch.compile)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _run(model: LlamaBlock, tokens: torch.Tensor, compile_it: bool, repeats: int):
    fwd = torch.compile(model, fullgraph=True) if compile_it else model
    with torch.inference_mode():
        out, loss = fwd(tokens)
        seconds = median_time(lambda: fwd(tokens), repeats)
    return out, loss, seconds


def train(model: LlamaBlock, tokens: torch.Tensor, steps: int, lr: float = 0.5) -> list:
    """Plain SGD on the model's trainable weights for ``steps`` steps; the loss of each step. With
    redfuse the norms, the attention and the loss run forward and backward as derived kernels."""
    params = [p.requires_grad_() for p in model.parameters()]  # built for inference: frozen
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, loss = model(tokens)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def main(argv: Optional[list] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--redfuse", dest="only", action="store_const", const="redfuse",
                       help="run only the redfuse version")
    which.add_argument("--torch", dest="only", action="store_const", const="torch",
                       help="run only the PyTorch version")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) both versions")
    p.add_argument("--train", type=int, default=0, metavar="STEPS",
                   help="also train each version STEPS steps of SGD and print both loss curves")
    args = p.parse_args(argv)
    cfg, dtype = Config(), getattr(torch, args.dtype)
    tokens = random_tokens(cfg, args.batch, args.seq)
    variants = [args.only] if args.only else ["torch", "redfuse"]
    results = {}
    for name in variants:
        model = LlamaBlock(cfg, use_redfuse=(name == "redfuse"), dtype=dtype)
        results[name] = _run(model, tokens, args.compile, args.repeats)
    mode = "torch.compile" if args.compile else "eager"
    print(f"Llama block: batch {args.batch}, seq {args.seq}, hidden {cfg.hidden}, heads {cfg.heads}/{cfg.kv_heads}, "
          f"vocab {cfg.vocab}, {args.dtype}, {mode}, {torch.get_num_threads()} threads")
    for name, (_, loss, seconds) in results.items():
        print(f"  {name:8s} loss {float(loss):.6f}   forward {seconds * 1e3:8.2f} ms (median of {args.repeats})")
    if len(results) == 2:
        err = (results["redfuse"][0].double() - results["torch"][0].double()).abs().max()
        speedup = results["torch"][2] / results["redfuse"][2]
        print(f"  forward max |redfuse - torch| = {float(err):.3g}; speed-up {speedup:.2f}x")
    for name in variants if args.train else []:
        model = LlamaBlock(cfg, use_redfuse=(name == "redfuse"), dtype=dtype)
        t = time.perf_counter()
        losses = train(model, tokens, args.train)
        print(f"  {name:8s} training losses {' '.join(f'{l:.5f}' for l in losses)}   "
              f"({(time.perf_counter() - t) / args.train * 1e3:.1f} ms per step)")


if __name__ == "__main__":
    main()
