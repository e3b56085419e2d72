"""The chains the sharding tests split (single process and torch.distributed with Gloo): each case
is a spec, its inputs (the same on every rank: seeded) and the dtype tolerance of its outputs."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

import torch

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
SPECS = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "specs")


def example(name: str) -> str:
    return os.path.join(EXAMPLES, name + ".rf")


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def cases() -> Dict[str, Tuple[str, List[Any], float]]:
    """name -> (spec path, inputs, tolerance relative to the output's scale)."""
    g = _g(0)
    B, H, N, D = 1, 2, 23, 8
    q = torch.randn(B, H, 9, D, generator=g).bfloat16()
    k = torch.randn(B, H, N, D, generator=g).bfloat16()
    v = torch.randn(B, H, N, D, generator=g).bfloat16()
    qc = torch.randn(B, H, N, D, generator=g).bfloat16()
    qd = torch.randn(2, 6, D, generator=g).bfloat16()
    kd = torch.randn(2, 2, N, D, generator=g).bfloat16()
    vd = torch.randn(2, 2, N, D, generator=g).bfloat16()
    x_moe = torch.randint(-3, 4, (7, N), generator=g).float()  # many ties: first-index semantics
    x_var = torch.randn(5, N, generator=g) * 2 + 1e3             # a large mean: the shift form's reference
    hd = torch.randn(6, 16, generator=g).bfloat16()
    wv = torch.randn(N, 16, generator=g).bfloat16()
    y = torch.randint(0, N, (6,), generator=g, dtype=torch.int32)
    # A running mean far above the final one (design.md §3, deferred exponent terms): a first third
    # of 60, then -30, so a shard's exp(X - m + mu_shard) would reach e^60 where the spec's is <= 1.
    x_mean = torch.randn(4, N, generator=g) + torch.where(torch.arange(N) < N // 3, 60.0, -30.0)
    return {
        "attention": (example("attention"), [q, k, v], 2e-2),
        "attention_causal": (example("attention_causal"), [qc, k, v], 2e-2),
        "decode_gqa": (example("decode_gqa"), [qd, kd, vd], 2e-2),
        "moe_routing": (example("moe_routing"), [x_moe], 1e-5),
        "variance": (example("variance"), [x_var], 1e-4),
        "linear_cross_entropy": (example("linear_cross_entropy"), [hd, wv, y], 1e-4),
        "exp_deferred_mean": (os.path.join(SPECS, "exp_deferred_mean.rf"), [x_mean], 1e-4),
    }


def splits(n: int, parts: int) -> List[Tuple[int, int]]:
    """Uneven shards of [0, n): the first has length 1, the rest share what is left unevenly."""
    cuts = [0, 1]
    rest = n - 1
    for p in range(1, parts):
        cuts.append(1 + rest * (p * p) // ((parts - 1) * (parts - 1)) if parts > 1 else n)
    cuts[-1] = n
    return list(zip(cuts[:-1], cuts[1:]))


def close(got: Any, want: Any, tol: float) -> str:
    """"" when got matches want (same dtype and shape, no NaN, within tol of the output's scale)."""
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return f"got {got.dtype}{tuple(got.shape)}, want {want.dtype}{tuple(want.shape)}"
    if not want.dtype.is_floating_point:
        return "" if torch.equal(got, want) else f"indices differ: {got.tolist()} vs {want.tolist()}"
    g, w = got.double(), want.double()
    if torch.isnan(g).any():
        return "NaN in the sharded result"
    scale = max(1.0, float(w.abs().max()))
    err = float((g - w).abs().max())
    return "" if err <= tol * scale else f"max error {err:.3g} > {tol * scale:.3g}"
