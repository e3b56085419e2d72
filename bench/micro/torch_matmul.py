"""torch.matmul in bf16 on one thread — on a CPU with AMX, PyTorch's CPU matmul runs oneDNN's GEMMs —
at the tile-GEMM shapes redfuse's kernels call (a weight GEMM, attention's Q·Kᵀ and P·V), to set
beside the same shapes in simd_bench (redfuse_simd_amx.h). A benchmark, not a test.

    python bench/micro/torch_matmul.py        # the project's venv (scripts/python_setup.sh --print-venv)
"""
import time

import torch


def rate(f, flop):
    for _ in range(3):
        f()
    best = float("inf")
    for _ in range(7):
        n, t0 = 0, time.perf_counter()
        while True:
            f()
            n += 1
            el = time.perf_counter() - t0
            if el > 0.2:
                break
        best = min(best, el / n)
    return flop / best / 1e9, best * 1e6


def main():
    torch.set_num_threads(1)
    cases = [("weight M=128 N=4096 K=4096", 128, 4096, 4096), ("QK^T M=128 N=256 K=128", 128, 256, 128),
             ("QK^T M=128 N=256 K=64", 128, 256, 64), ("PV M=128 N=128 K=256", 128, 128, 256),
             ("PV M=128 N=64 K=256", 128, 64, 256), ("M=256 N=256 K=256", 256, 256, 256)]
    print("torch %s, one thread, bf16 in and out" % torch.__version__)
    for name, M, N, K in cases:
        a, bt = torch.randn(M, K).bfloat16(), torch.randn(N, K).bfloat16().t()
        out = torch.empty(M, N, dtype=torch.bfloat16)
        g, us = rate(lambda: torch.matmul(a, bt, out=out), 2.0 * M * N * K)
        print("%-28s %7.0f GFLOP/s %9.2f us" % (name, g, us))


if __name__ == "__main__":
    main()
