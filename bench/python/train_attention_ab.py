"""Interleaved A/B of attention forward + backward at [1, 8, 1024, 64] without a mask: redfuse.ops,
SDPA and the compiled math, five rounds of five steps each, in turn (one process, so slow drifts of
a shared machine hit all three alike). Prints the medians of each round; writes nothing.

    OMP_NUM_THREADS=2 python bench/python/train_attention_ab.py
"""
import statistics
import time

import torch
import torch.nn.functional as F

import redfuse.ops as R


def main() -> None:
    L = 1024
    for dtype in (torch.bfloat16, torch.float32):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 8, L, 64, generator=g).to(dtype).requires_grad_() for _ in range(3))
        do = torch.randn(1, 8, L, 64, generator=g).to(dtype)

        def math(q, k, v):
            s = (q @ k.transpose(-1, -2)) / 8.0
            return torch.softmax(s.float(), -1).to(q.dtype) @ v

        impls = {"redfuse.ops": lambda q, k, v: R.attention(q, k, v),
                 "SDPA": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                 "torch.compile math": torch.compile(math)}
        rounds = {n: [] for n in impls}
        for f in impls.values():
            for _ in range(2):
                f(q, k, v).backward(do)
        for _ in range(5):
            for name, f in impls.items():
                times = []
                for _ in range(5):
                    for t in (q, k, v):
                        t.grad = None
                    t0 = time.perf_counter()
                    f(q, k, v).backward(do)
                    times.append(time.perf_counter() - t0)
                rounds[name].append(round(1e3 * statistics.median(times), 1))
        print(str(dtype)[6:], rounds)


if __name__ == "__main__":
    main()
